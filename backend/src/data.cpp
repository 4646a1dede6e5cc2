// The synthetic generator (hashes of global coordinates, documented in data.hpp) and the data sources of
// `dsl run`: synthetic, or tiles copied out of memory-mapped .npy files.
#include <dsl/backend/data.hpp>

#include "planes.hpp"
#include "splitmix.hpp"
#include "synthetic_formula.hpp"

#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;
using namespace synthetic;

namespace {

// One sample of a layer's tensor, as planes: [C] is {1, C, 1, 1}, [H, W] labels {1, 1, H, W}.
PlaneDims chw(const Layer& l) { return planes(scheduler::extent_of(l, 1)); }

SyntheticData spec_for(const frontend::Network& net, int input, int label, std::uint64_t seed) {
    SyntheticData d;
    d.seed = seed;
    if (input >= 0) {
        const PlaneDims in = chw(net.layers[static_cast<std::size_t>(input)]);
        d.channels = in.c;
        d.height = in.h;
        d.width = in.w;
    }
    if (label >= 0) {
        const auto& ld = net.layers[static_cast<std::size_t>(label)].shape.dims;
        d.classes = label_classes(net, label);
        if (ld.size() == 2) {
            d.label_h = ld[0];
            d.label_w = ld[1];
            // Squares of about 8 input pixels, whatever the labels' resolution.
            const std::int64_t scale = std::max<std::int64_t>(1, d.height / std::max<std::int64_t>(1, ld[0]));
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
                const PlaneDims t = chw(label);
                SyntheticData& d = specs_[label.name];
                d.target_c = t.c, d.target_h = t.h, d.target_w = t.w;
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

float SyntheticData::input(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const {
    return synthetic::input(*this, sample, c, y, x);
}

void SyntheticData::fill_inputs(std::int64_t sample0, std::int64_t c0, const Index& at, View view) const {
    const PlaneView<float> tile = planes(view);
    const PlaneDims d = tile.dims;
    const auto [y0, x0] = plane_place(at);
    // The same values as input(), made faster: the noise hash's chain is carried as far as each row (one
    // splitmix64 per element), and each row's classes are computed once.
    const std::uint64_t noise = splitmix64(seed ^ splitmix64(tag_noise));
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < d.n; ++n) {
        for (std::int64_t c = 0; c < d.c; ++c) {
            const std::int64_t s = sample0 + n;
            const std::int32_t sample_class = per_pixel() ? 0 : label(s);
            const std::int64_t gc = c0 + c;
            const Field field(seed, s, gc);  // once per (sample, channel), not per element
            const std::uint64_t hc =
                splitmix64(splitmix64(noise ^ static_cast<std::uint64_t>(s)) ^ static_cast<std::uint64_t>(gc));
            std::vector<Field::Terms> columns(static_cast<std::size_t>(d.w));
            std::vector<float> marks(static_cast<std::size_t>(d.w));
            for (std::int64_t x = 0; x < d.w; ++x)
                columns[static_cast<std::size_t>(x)] = Field::column(field.fx, x0 + x);
            auto mark_of = [&](std::int32_t k) { return mark(*this, gc, k); };
            std::int64_t marks_row = -1;  // the label row `marks` holds
            if (!per_pixel()) std::fill(marks.begin(), marks.end(), mark_of(sample_class));
            for (std::int64_t y = 0; y < d.h; ++y) {
                const std::int64_t gy = y0 + y;
                if (per_pixel()) {
                    const std::int64_t ly = floor_div(gy * label_h, height);
                    if (ly != marks_row) {
                        for (std::int64_t x = 0; x < d.w; ++x)
                            marks[static_cast<std::size_t>(x)] =
                                mark_of(label(s, ly, floor_div((x0 + x) * label_w, width)));
                        marks_row = ly;
                    }
                }
                const Field::Terms row = field.row(gy);
                const std::uint64_t hy = splitmix64(hc ^ static_cast<std::uint64_t>(gy));
                float* out = &tile.at(n, c, y, 0);
                for (std::int64_t x = 0; x < d.w; ++x) {
                    const auto i = static_cast<std::size_t>(x);
                    out[x] = input_value(splitmix64(hy ^ static_cast<std::uint64_t>(x0 + x)),
                                         Field::at(row, columns[i]), marks[i]);
                }
            }
        }
    }
}

float SyntheticData::target(std::int64_t sample, std::int64_t c, std::int64_t y, std::int64_t x) const {
    const std::int64_t iy = (2 * y + 1) * height / (2 * target_h), ix = (2 * x + 1) * width / (2 * target_w);
    double z = 0.0;
    for (std::int64_t i = 0; i < channels; ++i)
        z += static_cast<double>(symmetric(hash(seed, tag_target, c, i))) * input(sample, i, iy, ix);
    return static_cast<float>(1.0 / (1.0 + std::exp(-z)));
}

void SyntheticData::fill_targets(std::int64_t sample0, const Index& at, View view) const {
    const PlaneView<float> tile = planes(view);
    const PlaneDims d = tile.dims;
    const auto [y0, x0] = plane_place(at);
    if (d.elements() == 0) return;
    // The same values as target(), made faster: the mixing weights once, and the input pixels under each
    // target row at once by fill_inputs (the same values as input()).
    std::vector<double> mix(static_cast<std::size_t>(d.c * channels));
    for (std::int64_t c = 0; c < d.c; ++c)
        for (std::int64_t i = 0; i < channels; ++i)
            mix[static_cast<std::size_t>(c * channels + i)] = symmetric(hash(seed, tag_target, c, i));
    auto column = [&](std::int64_t x) { return (2 * (x0 + x) + 1) * width / (2 * target_w); };
    const std::int64_t first = column(0), span = column(d.w - 1) - first + 1;
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t y = 0; y < d.h; ++y) {
            const std::int64_t iy = (2 * (y0 + y) + 1) * height / (2 * target_h);
            std::vector<float> row(static_cast<std::size_t>(channels * span));
            fill_inputs(sample0 + n, 0, Index{iy, first}, dense_view(row.data(), Dims{1, channels, {1, span}}));
            for (std::int64_t c = 0; c < d.c; ++c)
                for (std::int64_t x = 0; x < d.w; ++x) {
                    double z = 0.0;
                    for (std::int64_t i = 0; i < channels; ++i)
                        z += mix[static_cast<std::size_t>(c * channels + i)] *
                             row[static_cast<std::size_t>(i * span + column(x) - first)];
                    tile.at(n, c, y, x) = static_cast<float>(1.0 / (1.0 + std::exp(-z)));
                }
        }
}

void SyntheticData::fill_labels(std::int64_t sample0, const Index& at, BasicView<std::int32_t> view) const {
    const PlaneView<std::int32_t> tile = planes(view);
    const PlaneDims d = tile.dims;
    const auto [y0, x0] = plane_place(at);
    for (std::int64_t n = 0; n < d.n; ++n)
        for (std::int64_t y = 0; y < d.h; ++y)
            for (std::int64_t x = 0; x < d.w; ++x)
                tile.at(n, 0, y, x) = per_pixel() ? label(sample0 + n, y0 + y, x0 + x) : label(sample0 + n);
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
