// The synthetic generator (hashes of global coordinates, documented in data.hpp) and the data sources of
// `dsl run`: synthetic, or tiles copied out of memory-mapped .npy files.
#include <dsl/backend/data.hpp>

#include "../kernels/avx512_clone.hpp"
#include "../random/splitmix.hpp"
#include "../tensors/planes.hpp"
#include "synthetic_formula.hpp"

#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;
using namespace synthetic;

namespace {

// One sample of a layer's tensor: channels and the extents of an image (H, W) or a volume (D, H, W).
struct Sample {
    std::int64_t c = 1, d = 0, h = 1, w = 1;  // d 0: not a volume
};
Sample sample_of(const Layer& l) {
    const Dims e = scheduler::extent_of(l, 1);
    if (e.rank() == 3) return Sample{e.c, e.space[0], e.space[1], e.space[2]};
    const PlaneDims p = planes(e);
    return Sample{p.c, 0, p.h, p.w};
}

SyntheticData spec_for(const frontend::Network& net, int input, int label, std::uint64_t seed) {
    SyntheticData d;
    d.seed = seed;
    if (input >= 0) {
        const Sample in = sample_of(net.layers[static_cast<std::size_t>(input)]);
        d.channels = in.c;
        d.depth = in.d;
        d.height = in.h;
        d.width = in.w;
    }
    if (label >= 0) {
        const Layer& l = net.layers[static_cast<std::size_t>(label)];
        d.classes = label_classes(net, label);
        if (!l.float_label && l.spatial()) {  // class labels per pixel or voxel
            const Sample ld = sample_of(l);
            d.label_d = ld.d;
            d.label_h = ld.h;
            d.label_w = ld.w;
            // Squares (cubes) of about 8 input pixels a side, whatever the labels' resolution.
            const std::int64_t scale = std::max<std::int64_t>(1, d.height / std::max<std::int64_t>(1, ld.h));
            d.block = std::max<std::int64_t>(1, (8 + scale - 1) / scale);
        }
    }
    return d;
}

std::vector<int> layers_of(const frontend::Network& net, OpKind op) {
    std::vector<int> out;
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (net.layers[i].op == op) out.push_back(static_cast<int>(i));
    return out;
}

class SyntheticSource : public DataSource {
public:
    SyntheticSource(const frontend::Network& net, std::uint64_t seed) {
        const auto inputs = layers_of(net, OpKind::input), labels = layers_of(net, OpKind::label);
        const int first_label = labels.empty() ? -1 : labels[0];
        // The first input carries the first label's classes; further inputs are independent streams of it.
        for (std::size_t i = 0; i < inputs.size(); ++i)
            specs_[net.layers[static_cast<std::size_t>(inputs[i])].name] =
                spec_for(net, inputs[i], first_label, seed + i * 0x632be59bd9b4e019ull);
        const int first_input = inputs.empty() ? -1 : inputs[0];
        for (int l : labels) {
            const Layer& label = net.layers[static_cast<std::size_t>(l)];
            // A float label is a function of the first input: its definition, and the label's shape.
            specs_[label.name] = spec_for(net, first_input, label.float_label ? first_label : l, seed);
            if (label.float_label) {
                const Sample t = sample_of(label);
                SyntheticData& d = specs_[label.name];
                d.target_c = t.c, d.target_d = std::max<std::int64_t>(t.d, 1), d.target_h = t.h, d.target_w = t.w;
            }
        }
    }

    void inputs(const Layer& input, std::int64_t first, const Index& at, View tile) override {
        spec(input).fill_inputs(first, 0, at, tile);
    }
    void labels(const Layer& label, std::int64_t first, const Index& at, BasicView<std::int32_t> tile) override {
        spec(label).fill_labels(first, at, tile);
    }
    void targets(const Layer& label, std::int64_t first, const Index& at, View tile) override {
        spec(label).fill_targets(first, at, tile);
    }
    const SyntheticData* synthetic(const Layer& input) const override { return &spec(input); }

private:
    const SyntheticData& spec(const Layer& l) const {
        const auto it = specs_.find(l.name);
        DSL_INTERNAL_CHECK(it != specs_.end(), "synthetic data: no layer '" + l.name + "'");
        return it->second;
    }
    std::map<std::string, SyntheticData> specs_;
};

}  // namespace

std::int32_t SyntheticData::label(std::int64_t sample) const { return sample_class(*this, sample); }

std::int32_t SyntheticData::label(std::int64_t sample, std::int64_t y, std::int64_t x) const {
    return pixel_class(*this, sample, y, x);
}

std::int32_t SyntheticData::label(std::int64_t sample, std::int64_t z, std::int64_t y, std::int64_t x) const {
    return voxel_class(*this, sample, z, y, x);
}

float SyntheticData::input(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const {
    return synthetic::input(*this, sample, c, y, x);
}

float SyntheticData::input(std::int64_t sample, std::int64_t c, std::int64_t z, std::int64_t y, std::int64_t x) const {
    return synthetic::input(*this, sample, c, z, y, x);
}

namespace {

// A view as the planes it holds: an image's (or a vector's) one, a volume's one per depth index, from its
// global depth `at[0]`; `f(z, plane, y0, x0)` for each, z empty for an image.
template <typename T, typename F>
void each_plane(const BasicView<T>& v, const Index& at, F&& f) {
    if (v.dims.rank() < 3) {
        const auto [y0, x0] = plane_place(at);
        return f(std::optional<std::int64_t>{}, planes(v), y0, x0);
    }
    const Dims slice{v.dims.n, v.dims.c, {v.dims.space[1], v.dims.space[2]}};
    for (std::int64_t k = 0; k < v.dims.space[0]; ++k)
        f(std::optional<std::int64_t>{at[0] + k},
          planes(BasicView<T>{v.base + k * v.stride[0], slice, v.stride_n, v.stride_c, {v.stride[1], v.stride[2]}}),
          at[1], at[2]);
}

// One row of inputs, input_value() of each element: out[x] = input_value(splitmix64(hy ^ (x0 + x)),
// Field::at(row, column x), marks[x]), the columns' terms as two arrays. One loop that the compiler vectorizes,
// with a clone for AVX-512 where GCC builds for x86-64 (eight 64-bit hashes at a time: the 64-bit multiplies
// that the x86-64 baseline lacks), chosen when the program loads: the same operations in the same order, and
// no multiply-adds fused (backend/CMakeLists.txt builds this file with -ffp-contract=off), so the same values
// as the scalar formula (the tests compare them). Scalar, the inputs took 1.1 ms of mesh_tiny's 5.5 ms step at
// batch 8 on two threads, and 4.3 ms of mesh_stack_512's 185; 0.43 and 1.4 with the clone (Zen 5), and
// 0.35 on mesh_tiny with each column's label column found once.
DSL_AVX512_CLONE void fill_row(std::uint64_t hy, std::int64_t x0, Field::Terms row, const double* __restrict column_sin,
                               const double* __restrict column_cos, const float* __restrict marks,
                               float* __restrict out, std::int64_t width) {
#pragma omp simd
    for (std::int64_t x = 0; x < width; ++x) {
        out[x] = input_value(splitmix64(hy ^ static_cast<std::uint64_t>(x0 + x)),
                             Field::at(row, Field::Terms{column_sin[x], column_cos[x]}), marks[x]);
    }
}

}  // namespace

// input() of every element, made faster: what does not change along a dimension is found once outside it.
// Each column's label column once; the noise hash's chain as far as each row (one splitmix64 per element); a
// row's classes once per label row; fill_row makes a row. A task fills a run of depths of one sample and
// channel (an image has one depth) and finds the columns' sines and cosines once for them all, the runs as
// long as leaves every thread tasks (a volume of one channel fills on every thread).
void SyntheticData::fill_inputs(std::int64_t sample0, std::int64_t c0, const Index& at, View view) const {
    if (view.dims.elements() == 0) return;
    struct Plane {
        std::optional<std::int64_t> z;
        PlaneView<float> tile;
    };
    std::vector<Plane> tiles;
    std::int64_t y0 = 0, x0 = 0;
    each_plane(view, at,
               [&](std::optional<std::int64_t> z, const PlaneView<float>& tile, std::int64_t y, std::int64_t x) {
                   tiles.push_back({z, tile});
                   y0 = y, x0 = x;
               });
    const PlaneDims d = tiles.front().tile.dims;
    const auto columns = static_cast<std::size_t>(d.w);
    const std::uint64_t noise = splitmix64(seed ^ splitmix64(tag_noise));
    std::vector<std::int64_t> label_columns(per_pixel() ? columns : 0);
    for (std::size_t x = 0; x < label_columns.size(); ++x)
        label_columns[x] = floor_div((x0 + static_cast<std::int64_t>(x)) * label_w, width);
    const auto depths = static_cast<std::int64_t>(tiles.size());
    const std::int64_t planes = d.n * d.c;
    const std::int64_t runs = std::min<std::int64_t>(depths, (4 * omp_get_max_threads() + planes - 1) / planes);
#pragma omp parallel for schedule(static)
    for (std::int64_t task = 0; task < planes * runs; ++task) {
        const std::int64_t n = task / runs / d.c, c = task / runs % d.c, r = task % runs;
        const std::int64_t s = sample0 + n, gc = c0 + c;
        const Field field(seed, s, gc);  // once per task, not per element
        std::vector<double> column_sin(columns), column_cos(columns);
        for (std::size_t x = 0; x < columns; ++x) {
            const Field::Terms t = Field::column(field.fx, x0 + static_cast<std::int64_t>(x));
            column_sin[x] = t.sin;
            column_cos[x] = t.cos;
        }
        auto mark_of = [&](std::int32_t k) { return mark(*this, gc, k); };
        std::vector<float> marks(columns, per_pixel() ? 0.0f : mark_of(label(s)));
        const std::uint64_t hs =
            splitmix64(splitmix64(noise ^ static_cast<std::uint64_t>(s)) ^ static_cast<std::uint64_t>(gc));
        for (std::int64_t k = r * depths / runs; k < (r + 1) * depths / runs; ++k) {
            const auto& [z, tile] = tiles[static_cast<std::size_t>(k)];
            const std::uint64_t hc = z ? splitmix64(hs ^ static_cast<std::uint64_t>(*z)) : hs;
            const std::int64_t lz = z ? floor_div(*z * label_d, depth) : 0;
            std::int64_t marks_row = -1;  // the label row `marks` holds
            for (std::int64_t y = 0; y < d.h; ++y) {
                const std::int64_t gy = y0 + y;
                if (per_pixel()) {
                    const std::int64_t ly = floor_div(gy * label_h, height);
                    if (ly != marks_row) {
                        std::int64_t last = -1;  // the label column of the mark before: runs share a label
                        float m = 0.0f;
                        for (std::size_t x = 0; x < columns; ++x) {
                            const std::int64_t lx = label_columns[x];
                            if (lx != last) m = mark_of(z ? label(s, lz, ly, lx) : label(s, ly, lx));
                            last = lx;
                            marks[x] = m;
                        }
                        marks_row = ly;
                    }
                }
                const Field::Terms row = z ? field.row(*z, gy) : field.row(gy);
                fill_row(splitmix64(hc ^ static_cast<std::uint64_t>(gy)), x0, row, column_sin.data(), column_cos.data(),
                         marks.data(), &tile.at(n, c, y, 0), d.w);
            }
        }
    }
}

float SyntheticData::target(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const {
    const std::int64_t iy = under(y, height, target_h), ix = under(x, width, target_w);
    double z = 0.0;
    for (std::int64_t i = 0; i < channels; ++i) z = add(z, mul(mix(*this, c, i), input(sample, i, iy, ix)));
    return target_value(z);
}

float SyntheticData::target(std::int64_t sample, std::int64_t c, std::int64_t z, std::int64_t y, std::int64_t x) const {
    const std::int64_t iz = under(z, depth, target_d), iy = under(y, height, target_h), ix = under(x, width, target_w);
    double sum = 0.0;
    for (std::int64_t i = 0; i < channels; ++i) sum = add(sum, mul(mix(*this, c, i), input(sample, i, iz, iy, ix)));
    return target_value(sum);
}

void SyntheticData::fill_targets(std::int64_t sample0, const Index& at, View view) const {
    if (view.dims.elements() == 0) return;
    // The same values as target(), made faster: the mixing weights once, and the input pixels under the
    // targets by fill_inputs (the same values as input()).
    std::vector<double> weights(static_cast<std::size_t>(view.dims.c * channels));
    for (std::int64_t c = 0; c < view.dims.c; ++c)
        for (std::int64_t i = 0; i < channels; ++i)
            weights[static_cast<std::size_t>(c * channels + i)] = mix(*this, c, i);
    each_plane(
        view, at, [&](std::optional<std::int64_t> tz, const PlaneView<float>& tile, std::int64_t y0, std::int64_t x0) {
            const PlaneDims d = tile.dims;
            auto column = [&](std::int64_t x) { return under(x0 + x, width, target_w); };
            const std::int64_t first = column(0), span = column(d.w - 1) - first + 1;
            const std::int64_t top = under(y0, height, target_h),
                               rows = under(y0 + d.h - 1, height, target_h) - top + 1;
            const std::optional<std::int64_t> iz =
                tz ? std::optional(under(*tz, depth, target_d)) : std::optional<std::int64_t>();
            auto place = [&](std::int64_t iy) { return iz ? Index{*iz, iy, first} : Index{iy, first}; };
            auto extents = [&](std::int64_t r) { return iz ? Index{1, r, span} : Index{r, span}; };
            std::vector<std::int64_t> columns(static_cast<std::size_t>(d.w));  // of the inputs under, from `first`
            for (std::int64_t x = 0; x < d.w; ++x) columns[static_cast<std::size_t>(x)] = column(x) - first;
            bool dense = true;  // the input under target x is the x-th: targets as fine as the inputs
            for (std::int64_t x = 0; x < d.w; ++x) dense = dense && columns[static_cast<std::size_t>(x)] == x;
            // Target row y of sample n from the inputs under it: channel i's at inputs[i * stride], by column.
            // Each target's sum runs over the channels in order, as target()'s; the loop over the row innermost,
            // where the compiler vectorizes it.
            auto mix_row = [&](const float* inputs, std::int64_t stride, std::int64_t n, std::int64_t y) {
                std::vector<double> z(static_cast<std::size_t>(d.w));
                for (std::int64_t c = 0; c < d.c; ++c) {
                    std::fill(z.begin(), z.end(), 0.0);
                    for (std::int64_t i = 0; i < channels; ++i) {
                        const double w = weights[static_cast<std::size_t>(c * channels + i)];
                        const float* in = inputs + i * stride;
                        if (dense)  // a column of inputs under each target: read as they lie
                            for (std::size_t x = 0; x < z.size(); ++x) z[x] = add(z[x], mul(w, in[x]));
                        else
                            for (std::size_t x = 0; x < z.size(); ++x) z[x] = add(z[x], mul(w, in[columns[x]]));
                    }
                    for (std::int64_t x = 0; x < d.w; ++x)
                        tile.at(n, c, y, x) = target_value(z[static_cast<std::size_t>(x)]);
                }
            };
            if (rows <= 2 * d.h) {
                // Targets as fine as the inputs, or nearly (a U-Net's): every input row under the tile's at
                // once, so that each channel's sines of its columns are taken once, not once a row.
                std::vector<float> under_rows(static_cast<std::size_t>(channels * rows * span));
                for (std::int64_t n = 0; n < d.n; ++n) {
                    fill_inputs(sample0 + n, 0, place(top),
                                dense_view(under_rows.data(), Dims{1, channels, extents(rows)}));
#pragma omp parallel for schedule(static)
                    for (std::int64_t y = 0; y < d.h; ++y)
                        mix_row(&under_rows[static_cast<std::size_t>((under(y0 + y, height, target_h) - top) * span)],
                                rows * span, n, y);
                }
                return;
            }
        // Coarser targets: the input row under each target row alone.
#pragma omp parallel for collapse(2) schedule(static)
            for (std::int64_t n = 0; n < d.n; ++n)
                for (std::int64_t y = 0; y < d.h; ++y) {
                    std::vector<float> row(static_cast<std::size_t>(channels * span));
                    fill_inputs(sample0 + n, 0, place(under(y0 + y, height, target_h)),
                                dense_view(row.data(), Dims{1, channels, extents(1)}));
                    mix_row(row.data(), span, n, y);
                }
        });
}

void SyntheticData::fill_labels(std::int64_t sample0, const Index& at, BasicView<std::int32_t> view) const {
    each_plane(
        view, at,
        [&](std::optional<std::int64_t> z, const PlaneView<std::int32_t>& tile, std::int64_t y0, std::int64_t x0) {
            const PlaneDims d = tile.dims;
            for (std::int64_t n = 0; n < d.n; ++n)
                for (std::int64_t y = 0; y < d.h; ++y)
                    for (std::int64_t x = 0; x < d.w; ++x)
                        tile.at(n, 0, y, x) = !per_pixel() ? label(sample0 + n)
                                              : z          ? label(sample0 + n, *z, y0 + y, x0 + x)
                                                           : label(sample0 + n, y0 + y, x0 + x);
        });
}

std::int64_t label_classes(const frontend::Network& net, int label) {
    for (const Layer& l : net.layers)
        if ((l.op == OpKind::softmax_cross_entropy || l.op == OpKind::pixel_cross_entropy) && l.inputs.size() >= 2 &&
            l.inputs[1] == label) {
            const auto& logits = net.layers[static_cast<std::size_t>(l.inputs[0])].shape.dims;
            if (!logits.empty() && logits[0] > 0) return logits[0];
        }
    return 2;
}

SyntheticData synthetic_for(const frontend::Network& net, std::uint64_t seed) {
    const auto inputs = layers_of(net, OpKind::input), labels = layers_of(net, OpKind::label);
    return spec_for(net, inputs.empty() ? -1 : inputs[0], labels.empty() ? -1 : labels[0], seed);
}

std::unique_ptr<DataSource> make_data_source(const frontend::Network& net, std::uint64_t seed,
                                             const std::string& inputs_path, const std::string& labels_path,
                                             std::string& error) {
    if (inputs_path.empty() && labels_path.empty()) return std::make_unique<SyntheticSource>(net, seed);
    if (inputs_path.empty()) {
        error = "--labels needs --inputs (the samples those labels belong to)";
        return nullptr;
    }
    if (labels_path.empty()) {
        error = "--inputs needs --labels (the class of every sample, or of every pixel)";
        return nullptr;
    }
    const auto inputs = layers_of(net, OpKind::input), labels = layers_of(net, OpKind::label);
    if (inputs.size() != 1 || labels.size() != 1) {
        error = fmt::format(
            "--inputs and --labels feed a network with one input and one label; this one has {} "
            "and {}",
            inputs.size(), labels.size());
        return nullptr;
    }
    DataFiles files;
    files.files = {{net.layers[static_cast<std::size_t>(inputs[0])].name, inputs_path},
                   {net.layers[static_cast<std::size_t>(labels[0])].name, labels_path}};
    return make_data_source(net, seed, files, error);
}

}  // namespace dsl::backend
