// The performance model: per-layer compute from measured or analytic kernel times, halo exchanges and
// shuffles (model_shuffles.cpp) from the tiles' geometry and the communication model (model_comm.cpp: messages, and
// allreduces after Thakur et al.), the backward allreduce overlap as a greedy timeline (one allreduce at a time), and
// memory per process (what tensors share over the step: model_memory.cpp).
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/recompute.hpp>

#include <dsl/base/error.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/layout_groups.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/tiles.hpp>

#include "shuffle_points.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace dsl::scheduler {

using frontend::Layer;
using frontend::OpKind;

namespace {

// A kernel key without its tensors' sizes: its name and fields, `x` and `y` reduced to their channels (the
// second dimension), `params` left out; `size` is what was left out, the elements of `y`, else of `x`, else
// the parameters (0 when the key has none of them). Times of one group differ in size only: within a group a
// kernel's FLOPs and bytes grow with it.
std::string size_group(const std::string& kernel, const std::vector<TimeField>& fields, double& size) {
    std::vector<TimeField> kept;
    double x = 0.0, y = 0.0, params = 0.0;
    for (const auto& [name, dims] : fields) {
        if (name == "params" && dims.size() == 1) {
            params = static_cast<double>(dims[0]);
            continue;
        }
        if ((name == "x" || name == "y") && dims.size() >= 2) {
            (name == "x" ? x : y) = elements(dims);
            kept.emplace_back(name, std::vector<std::int64_t>{dims[1]});
            continue;
        }
        kept.emplace_back(name, dims);
    }
    size = y > 0 ? y : x > 0 ? x : params;
    return time_key(kernel, std::move(kept));
}

}  // namespace

// What a layer's kernels see under a split: the largest output tile, what the kernels read, the halo of the
// busiest process and, for overlap, the outputs that need no halo and the strips that do.
struct Model::Geometry {
    Dims whole;                    // the output tensor
    Box out;                       // the largest output tile (the first process's)
    Sizes y;                       // its sizes [n, c, spatial...]
    Sizes x;                       // what the kernel reads of the first input: its window (windowed), else its tile
    bool halo = false;             // whether the input's margins come from neighbours
    std::vector<double> messages;  // the busiest process's halo messages, elements each
    bool between_nodes = false;    // some of them cross nodes
    Sizes inner;                   // overlap: the outputs computed before the halo arrives (empty: none)
    std::vector<Sizes> strips;     // and the output strips computed after
};

// [n, c, spatial...], a tensor without spatial dimensions given the network's with extent 1 (an image
// network's vector [N, K] is [n, k, 1, 1]), so that every tensor of a network has keys of one length.
std::vector<std::int64_t> Model::key_dims(const Dims& d) const {
    std::vector<std::int64_t> out{d.n, d.c};
    out.insert(out.end(), d.space.begin(), d.space.end());
    if (d.rank() == 0) out.resize(2 + static_cast<std::size_t>(net_.spatial_rank()), 1);
    return out;
}

Model::Model(const frontend::Network& net, const Platform& platform, std::int64_t procs, std::int64_t batch,
             const KindCostTable& kinds)
    : net_(net), platform_(platform), kinds_(kinds), procs_(procs), batch_(batch) {
    const std::int64_t ppn = std::max<std::int64_t>(1, platform_.procs_per_node);
    const std::int64_t nodes = (procs + ppn - 1) / ppn;
    if (platform_.nodes > 0 && nodes > platform_.nodes) {
        // More processes than processors: they share them, and each computes that much slower.
        share_ = static_cast<double>(procs) / static_cast<double>(ppn * platform_.nodes);
    }
    multi_node_ = nodes > 1 && (platform_.nodes == 0 || platform_.nodes > 1);
    facts_.device = platform_.device;
    facts_.blocked_kernels = platform_.device == Device::cpu && platform_.planar_why.empty();
    if (!platform_.planar_why.empty()) facts_.planar_why = platform_.planar_why;
    // 16-bit products: a GPU's, or where the platform gives their peak or calibration timed them here.
    const auto timed = [&](const char* field) {
        return std::any_of(platform_.times.begin(), platform_.times.end(), [&](const auto& t) {
            const auto k = parse_time_key(t.first);
            return k && !k->field(field).empty();
        });
    };
    facts_.bfloat16_products = platform_.device == Device::gpu || platform_.bfloat16_flops > 0.0 || timed("bf16");
    facts_.float16_products = platform_.device == Device::gpu || platform_.float16_flops > 0.0 || timed("f16");
    facts_.node_memory = !multi_node_ && platform_.device == Device::cpu;
    // On a CPU platform, a process of a run with fewer processes than a node's cores uses the spare cores as
    // threads (dsl run starts them so).
    if (platform_.device == Device::cpu && procs < ppn) threads_ = static_cast<int>(ppn / procs);
    for (const auto& [key, seconds] : platform_.times) {
        // "sendrecv bytes=N", "allreduce bytes=N procs=P": measured communication, by size.
        const auto k = parse_time_key(key);
        if (!k || (k->kernel != sendrecv_kernel && k->kernel != allreduce_kernel) || k->field("bytes").size() != 1)
            continue;
        const bool sr = k->kernel == sendrecv_kernel;
        const std::int64_t p = k->field("procs").empty() ? 0 : k->field("procs")[0];
        const std::string prefix = sr ? sendrecv_kernel : fmt::format("{} procs={}", allreduce_kernel, p);
        measured_[prefix].emplace_back(static_cast<double>(k->field("bytes")[0]), seconds);
    }
    for (auto& [prefix, points] : measured_) std::sort(points.begin(), points.end());
    for (const auto& [key, seconds] : platform_.times) {
        const auto k = parse_time_key(key);
        if (!k) continue;
        std::vector<TimeField> fields(k->fields.begin(), k->fields.end());
        double size = 0.0;
        const std::string group = size_group(k->kernel, fields, size);
        if (size > 0) kernel_sizes_[group].emplace_back(size, seconds);
    }
    for (auto& [group, points] : kernel_sizes_) std::sort(points.begin(), points.end());
    measured_sendrecv_ = measured_.count(sendrecv_kernel) > 0;
    readers_.resize(net_.layers.size());
    for (std::size_t r = 0; r < net_.layers.size(); ++r)
        for (int q : net_.layers[r].inputs) readers_[static_cast<std::size_t>(q)].push_back(static_cast<int>(r));
    if (procs_ > 1) {
        if (auto it = platform_.times.find(time_key(drift_kernel, {{"compute", {1000}}, {"procs", {procs_}}}));
            it != platform_.times.end())
            drift_ = it->second / 1e-3;
        if (auto it = platform_.times.find(time_key(shuffle_kernel, {{"procs", {procs_}}}));
            it != platform_.times.end())
            shuffle_extra_ = it->second;
    }
}

double Model::memory_limit() const { return platform_.memory * static_cast<double>(threads_) / share_; }

// The parameters of layer `l` that one process holds under `split`: F and C parts split a layer's weights in
// blocks, its filters' by its input channels' (a bias, and a normalization's scale and shift, by the blocks
// of its channels: every F part, and its C parts where they cut a normalization's channels).
namespace {
double held_params(const Layer& l, const Split& split) {
    const auto params = static_cast<double>(l.params);
    if (!splits_channels(l, split)) return params;
    const auto parts = static_cast<double>(split.c * split.f);
    if (l.op == OpKind::batchnorm || l.op == OpKind::groupnorm) return params / parts;
    const double bias = l.bias ? static_cast<double>(l.filters) : 0.0;
    return (params - bias) / parts + bias / static_cast<double>(split.f);
}
}  // namespace

// ---- Compute.

double Model::kernel(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
                     double outputs) const {
    if (const double t = measured_kernel(name, fields, flops, bytes, outputs); t > 0) return t;
    return analytic_kernel(flops, bytes, outputs) * share_;
}

double Model::measured_kernel(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
                              double outputs) const {
    fields.emplace_back("threads", std::vector<std::int64_t>{threads_});
    if (auto it = platform_.times.find(time_key(name, fields)); it != platform_.times.end()) return it->second * share_;
    if (const double t = interpolate_kernel(name, fields, flops, bytes, outputs); t > 0) return t * share_;
    return 0.0;
}

double Model::analytic_kernel(double flops, double bytes, double outputs, double peak) const {
    // On `threads` cores, each as fast as one, a little less together.
    const double cores = threads_ == 1 ? 1.0 : 0.9 * threads_;
    // A GPU convolution (cuDNN's implicit GEMM) gives each thread block a tile of outputs, and the blocks run
    // in waves of one per streaming multiprocessor: a wave that is not full takes as long as a full one. The
    // tile is 128 x 64 outputs (CUTLASS's and cuDNN's usual FP32 tile: 128 output pixels by 64 filters); it
    // is an implementation's constant, not fitted to any measurement.
    double fill = 1.0;
    if (outputs > 0 && platform_.compute_units > 0) {
        constexpr double tile = 128.0 * 64.0;
        const double blocks = std::ceil(outputs / tile), slots = static_cast<double>(platform_.compute_units);
        fill = blocks / (std::ceil(blocks / slots) * slots);
    }
    if (peak <= 0.0) peak = platform_.flops;
    const double compute = peak > 0 ? flops / (peak * platform_.efficiency * cores * fill) : 0.0;
    // The roofline: a kernel with few FLOPs per byte runs at the memory's bandwidth instead.
    const double memory = platform_.memory_bandwidth > 0 ? bytes / (platform_.memory_bandwidth * cores) : 0.0;
    return platform_.kernel_latency + std::max(compute, memory);
}

// Between the measured sizes of the same kernel that bracket this one, log-log in size (so in FLOPs and bytes,
// which grow with it): a power law through the two. Beyond the measured sizes, the nearest scaled by the
// analytic model's ratio (latency and waves included). 0 when no size of this kernel is measured.
double Model::interpolate_kernel(const std::string& name, const std::vector<TimeField>& fields, double flops,
                                 double bytes, double outputs) const {
    if (kernel_sizes_.empty()) return 0.0;
    double size = 0.0;
    const auto it = kernel_sizes_.find(size_group(name, fields, size));
    if (it == kernel_sizes_.end() || size <= 0) return 0.0;
    const auto& points = it->second;
    const auto hi = std::lower_bound(points.begin(), points.end(), std::make_pair(size, 0.0));
    if (hi != points.end() && hi != points.begin()) {
        const auto& [x0, t0] = *std::prev(hi);
        const auto& [x1, t1] = *hi;
        if (x1 <= x0) return t1;
        const double f = std::log(size / x0) / std::log(x1 / x0);
        return std::exp(std::log(t0) + f * (std::log(t1) - std::log(t0)));
    }
    const auto& [x, t] = hi == points.end() ? points.back() : *hi;
    const double r = x / size;
    const double at = analytic_kernel(flops, bytes, outputs),
                 there = analytic_kernel(flops * r, bytes * r, outputs * r);
    return there > 0 ? t * at / there : t;
}

// ---- Geometry.

Model::Geometry Model::geometry(int index, const Split& split) const {
    const Layer& l = net_.layers[static_cast<std::size_t>(index)];
    Geometry g;
    g.whole = extent_of(l, batch_);
    g.out = tile_box(l, TileSpec{index, split, false, own_channels(l)}, batch_, 0);
    g.y = key_dims(g.out.dims());
    if (l.inputs.empty()) {
        g.x = g.y;
        return g;
    }
    const Layer& in = net_.layers[static_cast<std::size_t>(l.inputs[0])];
    const Dims in_whole = extent_of(in, batch_);
    if (!l.windowed()) {
        // The tile it reads, as the plan places it: its samples whole (fc), else its input's tile in its split
        // (global pooling sums its tile).
        g.x = key_dims(
            tile_box(in, TileSpec{l.inputs[0], split, reads_whole_samples(l), operand_channels(l)}, batch_, 0).dims());
        return g;
    }
    // The input channels it reads: all of them, or its block under F and C parts.
    const Range in_channels = channel_block(in_whole.c, split, coords(split, 0), operand_channels(l));
    g.x = key_dims(window_input(l, g.out, in_channels).dims());
    if (!split.spatial() || in.is_data()) return g;  // one tile holds what it reads; data comes with its halo

    // The halo of a process: what its window reads beyond its input tile (halo_pieces keeps it within the
    // tensor: beyond it is padding), as the trainer's tiles have it.
    const int rank = in_whole.rank();
    auto need = [&](std::int64_t q) {
        return tile_box(in_whole, split, q, true).reach(window_input(l, tile_box(g.whole, split, q, true), in_whole.c));
    };
    // Its messages: the pieces other processes send it (a periodic halo's own far side is a copy).
    auto messages_at = [&](std::int64_t q) {
        std::vector<double> m;
        for (const Piece& p : halo_pieces(in_whole, split, q, need(q), l.periodic()))
            if (p.peer != q) m.push_back(static_cast<double>(p.box.points()) * static_cast<double>(in_channels.size()));
        return m;
    };
    auto cost = [&](const std::vector<double>& m) {
        double s = 0.0;
        for (double e : m) s += sendrecv(e * word, false);
        return s;
    };
    // The busiest process of the first sample group: every one of a small group; in a large one, the busiest
    // place along each dimension taken together (the margins of a place along one dimension are the same
    // whatever its place along the others).
    if (split.spatial_procs() <= 64) {
        double worst = -1.0;
        for (std::int64_t q = 0; q < split.spatial_procs(); ++q) {
            auto m = messages_at(q);
            if (const double c = cost(m); c > worst) worst = c, g.messages = std::move(m);
        }
    } else {
        Coords busiest;
        const Box in_extent = whole_box(in_whole);
        for (int d = 0; d < rank; ++d) {
            const int axis = axis_of(d, rank);
            std::int64_t most = -1;
            for (std::int64_t i = 0; i < split.space[static_cast<std::size_t>(axis)]; ++i) {
                Coords at;
                at.space[static_cast<std::size_t>(axis)] = i;
                const std::int64_t q = rank_of(split, at);
                const Margins m =
                    tile_box(in_whole, split, q, true)
                        .reach(window_input(l, tile_box(g.whole, split, q, true), in_whole.c).meet(in_extent));
                if (m[d].before + m[d].after > most)
                    most = m[d].before + m[d].after, busiest.space[static_cast<std::size_t>(axis)] = i;
            }
        }
        g.messages = messages_at(rank_of(split, busiest));
    }
    g.halo = !g.messages.empty();
    g.between_nodes = halo_between_nodes(split);

    // Overlap, on an interior process: the outputs whose windows lie within its own input tile (and the
    // padding beyond the tensor's border), then the strips around them, as the trainer computes them.
    if (g.halo) {
        Coords middle;
        for (int a = 0; a < max_space; ++a)
            middle.space[static_cast<std::size_t>(a)] = split.space[static_cast<std::size_t>(a)] / 2;
        const std::int64_t q = rank_of(split, middle);
        const Box own = tile_box(in_whole, split, q, true);
        const OverlapParts parts = overlap_parts(l, tile_box(g.whole, split, q, true, own_channels(l)),
                                                 held_box(own, in_whole, need(q), l.periodic()));
        if (!parts.inner.empty()) {
            g.inner = key_dims(parts.inner.dims());
            for (const Box& strip : parts.strips) g.strips.push_back(key_dims(strip.dims()));
        }
    }
    return g;
}

// Ranks fill nodes in order and a sample's spatial group is h x w consecutive ranks: its halos stay within a
// node (on the node's link: NVLink, CUDA IPC) when the groups tile the nodes, else the busiest crosses.
bool Model::halo_between_nodes(const Split& split) const {
    const std::int64_t ppn = std::max<std::int64_t>(1, platform_.procs_per_node), group = split.spatial_procs();
    return multi_node_ && (group > ppn || ppn % group != 0);
}

// A shuffle moves data among the processes that hold the same samples under the coarser of the two sample
// splits: consecutive ranks, within a node when their block fits the nodes' tiling.
bool Model::shuffle_between_nodes(const Split& from, const Split& to) const {
    const std::int64_t ppn = std::max<std::int64_t>(1, platform_.procs_per_node);
    const std::int64_t block = procs_ / std::max<std::int64_t>(1, std::min(from.n, to.n));
    return multi_node_ && (block > ppn || ppn % std::max<std::int64_t>(1, block) != 0);
}

// ---- Layers.

namespace {

// The model's means of pricing, as a layer's row (kind_costs.hpp) uses them; with `keys`, the time key of every
// kernel it prices is collected there.
class ModelTerms final : public CostTerms {
public:
    ModelTerms(const Model& model, const Layer& l, const Distribution& d, const Split& s, bool multi_node,
               std::vector<std::string>* keys)
        : CostTerms(l, d, s), model_(model), multi_node_(multi_node), keys_(keys) {}

    // A convolution of precision=bfloat16 (or float16) runs the kernels with 16-bit products where there are
    // any: their time where the platform has it (calibrated: key field bf16, or f16; a CPU with AVX-512 BF16
    // or a GPU), else from the platform's peak for them (a GPU's tensor cores), else float32's.
    double run(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
               double outputs) const override {
        if (products16) {
            const char* field = *products16 == Precision::bfloat16 ? "bf16" : "f16";
            const double peak16 =
                *products16 == Precision::bfloat16 ? model_.platform().bfloat16_flops : model_.platform().float16_flops;
            auto f = fields;
            f.emplace_back(field, std::vector<std::int64_t>{1});
            ask(name, f);
            if (const double t = model_.measured_kernel(name, std::move(f), flops, bytes, outputs); t > 0) return t;
            if (peak16 > 0) {
                ask(name, fields);
                return model_.analytic_kernel(flops, bytes, outputs, peak16) * model_.sharing();
            }
        }
        ask(name, fields);
        return model_.kernel(name, std::move(fields), flops, bytes, outputs);
    }
    double allreduce(std::int64_t group, double bytes, bool between_nodes) const override {
        return model_.allreduce(group, bytes, between_nodes);
    }
    bool spans_nodes(std::int64_t group) const override {
        return multi_node_ && group > model_.platform().procs_per_node;
    }

private:
    // A kernel's key for calibration.
    void ask(const std::string& name, std::vector<TimeField> fields) const {
        if (!keys_) return;
        fields.emplace_back("threads", std::vector<std::int64_t>{model_.threads()});
        keys_->push_back(time_key(name, std::move(fields)));
    }

    const Model& model_;
    bool multi_node_;
    std::vector<std::string>* keys_;
};

}  // namespace

LayerCost Model::layer(int index, const Distribution& d) const {
    LayerCost c = compute_layer(index, d, nullptr);
    if (!recomputable(net_.layers[static_cast<std::size_t>(index)])) return c;
    if (d.recompute.value_or(false)) {
        c.recompute = c.forward_time();
    } else if (d.narrowed()) {
        const Precision p = *d.precision;
        // Narrowed after forward (read in float32, the 16-bit copy written, the rounded values written back)
        // and widened again before backward (read in 16 bits, written in float32): passes over memory.
        const double elements = c.output / word, narrow = precision_bytes(p);
        c.forward += analytic_kernel(elements, elements * (2.0 * word + narrow), elements);
        c.recompute = analytic_kernel(elements, elements * (word + narrow), elements);
    }
    return c;
}

std::vector<std::string> Model::kernel_keys(int index, const Distribution& d) const {
    std::vector<std::string> keys;
    compute_layer(index, d, &keys);
    return keys;
}

double Model::tile_bytes(int index, const Split& split) const { return elements(geometry(index, split).y) * word; }

int Model::size_class(double bytes) {
    return std::clamp(static_cast<int>(std::floor(std::log2(std::max(1.0, bytes)))), 0, 60);
}

std::string Model::factor_key(frontend::OpKind op, bool forward, int size) const {
    return time_key(factor_name(op, forward), {{"procs", {procs_}}, {"size", {size}}, {"threads", {threads_}}});
}

double Model::factor(frontend::OpKind op, bool forward, int size) const {
    const auto [cached, added] = factors_.try_emplace({op, forward, size}, 1.0);
    if (!added) return cached->second;
    // The measured size class nearest to this one, within a factor of 8 either way.
    for (int d = 0; d <= 3; ++d)
        for (int c : {size - d, size + d}) {
            auto it = platform_.times.find(factor_key(op, forward, c));
            if (it != platform_.times.end()) return cached->second = it->second / 1e-3;
        }
    return cached->second;
}

std::string Model::update_key() const {
    // Adam's update is timed apart from SGD's (the field is absent for SGD, whose keys stay as they were).
    if (net_.train.optimizer != frontend::Optimizer::sgd)
        return time_key(
            update_kernel,
            {{"adam", {1}}, {"params", {net_.total_params()}}, {"procs", {procs_}}, {"threads", {threads_}}});
    return time_key(update_kernel, {{"params", {net_.total_params()}}, {"procs", {procs_}}, {"threads", {threads_}}});
}

LayerCost Model::compute_layer(int index, const Distribution& dist, std::vector<std::string>* keys) const {
    const Layer& l = net_.layers[static_cast<std::size_t>(index)];
    const Split split = dist.split.value_or(Split{});
    const bool overlap = dist.overlap.value_or(false);
    LayerCost c;
    if (l.op == OpKind::label) return c;
    const Geometry g = geometry(index, split);
    ModelTerms t(*this, l, dist, split, multi_node_, keys);
    t.x = g.x;
    t.y = g.y;
    t.nx = elements(g.x);
    t.ny = elements(g.y);
    t.data_in = !l.inputs.empty() && (net_.layers[static_cast<std::size_t>(l.inputs[0])]).is_data();
    t.products16 = dist.products16(l.op);
    t.device = platform_.device;
    t.procs = procs_;
    t.sample_group = split.spatial_procs();
    t.procs_span = t.spans_nodes(procs_);
    // Who sums a weight gradient: every process, or under F and C parts those that hold the same block (the
    // same F and C part: within a sample group's ranks where N is 1).
    t.holders = splits_channels(l, split) ? procs_ / (split.c * split.f) : procs_;
    t.holders_span = t.holders == procs_ || split.n > 1 ? t.procs_span : t.spans_nodes(t.sample_group);
    t.held_params = held_params(l, split);
    const double ny = t.ny, nx = t.nx;
    const KindCosts& kind = kinds_.of(l.op);
    kind.costs(t, c);
    if (l.params > 0) c.allreduce = kind.gradient_allreduce(t);

    // Halo exchange (windowed layers whose input tile is split the same way), with or without overlap.
    double halo = 0.0, interior = c.forward;
    const bool overlapped = g.halo && overlap && !g.inner.empty();
    if (g.halo) {
        double bytes = 0.0;
        for (double e : g.messages) {
            halo += sendrecv(e * word, g.between_nodes);
            bytes += e * word;
        }
        // Packing and unpacking: a copy of every element each way.
        if (platform_.memory_bandwidth > 0) halo += 2.0 * bytes / platform_.memory_bandwidth;
        c.halo_bytes = static_cast<std::int64_t>(2.0 * bytes);
        c.buffers = 4.0 * bytes;  // send and receive buffers, forward and backward
        if (overlapped) {
            // Interior first, while the halo travels; then the strips along the edges that read it.
            const LayerCost whole = c;
            auto part = [&](const Sizes& y) { return kind.part_forward(t, whole, y); };
            interior = part(g.inner);
            double strips = 0.0;
            for (const Sizes& s : g.strips) strips += part(s);
            c.forward = interior + strips;
        }
    }
    // Kernels timed alone run faster than in training, where the other layers have flushed the caches,
    // threads wake from waits and the trainer copies tiles: calibration measures, per layer kind, how much
    // longer a layer takes in training steps than its kernels alone ("factor..."), and that scales them.
    if (!raw_) {
        const int size = size_class(ny * word);
        const double f = factor(l.op, true, size), b = factor(l.op, false, size);
        c.forward *= f;
        interior *= f;
        c.backward_data *= b;
        c.backward_weights *= b;
    }
    // The processes' drift: waits in proportion to the compute.
    c.forward_sync += drift() * c.forward;
    c.backward_sync += drift() * (c.backward_data + c.backward_weights);
    if (g.halo) {
        c.forward_halo = overlapped ? std::max(0.0, halo - interior) : halo;
        // With overlap, the gradient's margins go back while the weight gradient is computed.
        c.backward_halo =
            overlapped && kind.halo_back_behind_weights() ? std::max(0.0, halo - c.backward_weights) : halo;
    }
    // The output tile, and the margins this layer's window needs around its input's tile.
    if (!l.is_loss()) c.memory += ny * word, c.output = ny * word;
    // Several readers' gradients of it are each computed apart, then added.
    if (readers_[static_cast<std::size_t>(index)].size() > 1 && !l.is_data()) c.scratch[4] = ny * word;
    if (l.windowed()) {
        const Layer& in = net_.layers[static_cast<std::size_t>(l.inputs[0])];
        const Sizes tile =
            key_dims(tile_box(in, TileSpec{l.inputs[0], split, false, operand_channels(l)}, batch_, 0).dims());
        c.memory += std::max(0.0, nx - elements(tile)) * word;
    }
    return c;
}

// ---- The whole step.

// Whether training runs layer `index`, a ReLU, in the forward pass of the layer before it (the trainer's
// fuse_relus, backend/src/train/fusion.cpp): a convolution (oneDNN's post-op; not on GPUs), a batch norm or
// a sum of two, whose output the ReLU alone reads, under the same split, what `timeline` keeps of the two
// allowing it (relu_fuses_keeping). The ReLU's forward then costs nothing of its own.
bool Model::relu_fused(std::size_t index, const Schedule& schedule, const RecomputeTimeline& timeline) const {
    if (index == 0) return false;
    const Layer &l = net_.layers[index], &before = net_.layers[index - 1];
    if (!relu_fuses_into(before, l) || (before.op == OpKind::conv && platform_.device != Device::cpu) ||
        readers_[index - 1] != std::vector<int>{static_cast<int>(index)})
        return false;
    const Distribution &a = schedule.layers[index - 1], &b = schedule.layers[index];
    const auto keeping = [&](std::size_t i, const Distribution& d) {
        return Keeping{timeline.recomputed[i], timeline.narrowed[i], d.precision.value_or(Precision::float32)};
    };
    return a.split.value_or(Split{}) == b.split.value_or(Split{}) &&
           relu_fuses_keeping(keeping(index - 1, a), keeping(index, b), l.op == OpKind::relu);
}

bool Model::relu_fused(std::size_t index, const Schedule& schedule) const {
    std::vector<double> bytes(net_.layers.size(), 0.0);
    for (std::size_t i = 0; i < net_.layers.size(); ++i)
        if (recomputable(net_.layers[i]))
            bytes[i] = tile_bytes(static_cast<int>(i), schedule.layers[i].split.value_or(Split{}));
    return relu_fused(index, schedule, recompute_timeline_of(schedule, bytes));
}

RecomputeTimeline Model::recompute_timeline_of(const Schedule& schedule, const std::vector<double>& bytes) const {
    return timeline_of(net_, [&](std::size_t i) -> const Distribution& { return schedule.layers[i]; }, bytes);
}

Prediction Model::predict(const Schedule& schedule) const {
    Prediction out;
    out.layers.resize(net_.layers.size());
    bool halo_in = false, halo_out = false, shuffle_in = false, shuffle_out = false;
    // Each layer's costs, then (with the segments recomputation makes of them) the step's.
    std::vector<double> bytes(net_.layers.size(), 0.0);
    std::vector<std::pair<bool, bool>> halos(net_.layers.size());  // a halo, and one between nodes
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
        const Layer& l = net_.layers[i];
        LayerPrediction& lp = out.layers[i];
        lp.dist = schedule.layers[i];
        if (!lp.dist.split) lp.dist.split = Split{};
        const Geometry g = geometry(static_cast<int>(i), *lp.dist.split);
        lp.tile = l.spatial()            ? g.y
                  : l.shape.dims.empty() ? std::vector<std::int64_t>{g.y[0]}
                                         : std::vector<std::int64_t>{g.y[0], g.y[1]};
        if (l.is_data()) out.read_bytes += elements(g.y) * word;  // float inputs and targets, int32 classes
        if (l.op == OpKind::label) continue;
        lp.cost = layer(static_cast<int>(i), lp.dist);
        if (recomputable(l)) bytes[i] = lp.cost.output;
        halos[i] = {g.halo, g.between_nodes};
    }
    const RecomputeTimeline timeline = recompute_timeline_of(schedule, bytes);
    out.paths = paths_of(schedule, timeline);
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
        const Layer& l = net_.layers[i];
        LayerPrediction& lp = out.layers[i];
        if (l.op == OpKind::label) continue;
        if (relu_fused(i, schedule, timeline)) lp.cost.forward = 0.0;
        if (halos[i].first) (halos[i].second ? halo_out : halo_in) = true;
        for (std::size_t j = 0; j < l.inputs.size(); ++j) {
            const auto& from = schedule.layers[static_cast<std::size_t>(l.inputs[j])].split;
            const ShuffleCost s =
                shuffle(static_cast<int>(i), static_cast<int>(j), from.value_or(Split{}), *lp.dist.split);
            if (s.bytes > 0)
                (shuffle_between_nodes(from.value_or(Split{}), *lp.dist.split) ? shuffle_out : shuffle_in) = true;
            lp.shuffle.seconds += s.seconds;
            lp.shuffle.bytes += s.bytes;
            lp.shuffle.memory += s.memory;
        }
        out.forward += lp.cost.forward_time() + lp.shuffle.seconds / 2.0;
        out.halo_bytes += lp.cost.halo_bytes + lp.shuffle.bytes;
        out.activations += lp.cost.memory + lp.shuffle.memory;
        out.buffers += lp.cost.buffers;
    }
    shared_memory(out, timeline);
    // Backward in reverse order; each layer's allreduce starts when its backward ends and the previous
    // allreduce is done (one at a time, as the paper's model has it).
    double t = 0.0, comm = 0.0;
    for (std::size_t k = net_.layers.size(); k-- > 0;) {
        LayerPrediction& lp = out.layers[k];
        t += lp.cost.backward_time() + lp.shuffle.seconds / 2.0;
        lp.backward_end = t;
        if (lp.cost.allreduce > 0) {
            comm = std::max(comm, t) + lp.cost.allreduce;
            lp.allreduce_end = comm;
            out.allreduce += lp.cost.allreduce;
        }
    }
    out.backward = t;
    out.allreduce_exposed = std::max(0.0, comm - t);
    const auto params = static_cast<double>(net_.total_params());
    // SGD reads w, m, g and writes w, m; Adam reads w, m, v, g and writes w, m, v, with a square root and two
    // divisions per weight. Under F and C parts a process updates its blocks alone: that share of the time.
    out.update = net_.train.optimizer == frontend::Optimizer::sgd
                     ? kernel(sgd_kernel, {{"params", {net_.total_params()}}}, 4.0 * params, 16.0 * params)
                     : kernel(adam_kernel, {{"params", {net_.total_params()}}}, 14.0 * params, 28.0 * params);
    if (auto it = platform_.times.find(update_key()); it != platform_.times.end()) {
        out.update = it->second;
        out.allreduce_exposed = 0.0;  // measured with the update
    }
    // The parameters a process holds (its blocks of them), with their gradients and momenta (and Adam's second
    // moments); batch norm's statistics, whole on every process.
    double held = 0.0, statistics = 0.0;
    for (std::size_t i = 0; i < net_.layers.size(); ++i) {
        const Layer& l = net_.layers[i];
        held += held_params(l, schedule.layers[i].split.value_or(Split{}));
        if (l.op == OpKind::batchnorm) statistics += 4.0 * static_cast<double>(l.shape.dims.at(0));
    }
    if (params > 0.0) out.update *= held / params;
    const double copies = net_.train.optimizer == frontend::Optimizer::sgd ? 3.0 : 4.0;
    out.step = out.forward + out.backward + out.allreduce_exposed + out.update;
    // The data read ahead of the step (dsl run's --prefetch) while it computes: only what the read takes beyond
    // the step is added.
    out.io_bandwidth = platform_.io_bandwidth > 0 ? platform_.io_bandwidth : default_io_bandwidth;
    out.read = out.read_bytes / out.io_bandwidth;
    out.read_exposed = std::max(0.0, out.read - out.step);
    out.step += out.read_exposed;

    // What the trainer's paths hold: a convolution between blocked tiles reorders nothing into oneDNN's
    // layouts; the weights and moments that the node's processes share are counted a share per process; a
    // convolution's tiles gathered whole for its filter blocks lie in the node's memory, a share per process.
    double shared = 0.0, gathered = 0.0;
    for (std::size_t i = 0; i < out.paths.size(); ++i) {
        const Layer& l = net_.layers[i];
        const Split split = schedule.layers[i].split.value_or(Split{});
        LayerPrediction& lp = out.layers[i];
        if (l.op == OpKind::conv && out.paths[i].on(PathKind::blocked) &&
            out.paths[static_cast<std::size_t>(l.inputs[0])].on(PathKind::blocked))
            std::fill_n(lp.cost.scratch.begin(), 3, 0.0);
        if (out.paths[i].on(PathKind::shared_weights)) {
            const auto holders = static_cast<double>(splits_channels(l, split) ? procs_ / (split.c * split.f) : procs_);
            shared += (copies - 1.0) * held_params(l, split) * (1.0 - 1.0 / holders);
        }
        if (out.paths[i].on(PathKind::filter_blocks)) {
            const Dims x = extent_of(net_.layers[static_cast<std::size_t>(l.inputs[0])], batch_), y = extent_of(l, batch_);
            gathered += static_cast<double>(x.elements() + y.elements()) / static_cast<double>(procs_);
        }
    }
    out.activations += gathered * word;

    std::array<double, 5> scratch{};
    for (const LayerPrediction& lp : out.layers)
        for (std::size_t i = 0; i < scratch.size(); ++i) scratch[i] = std::max(scratch[i], lp.cost.scratch[i]);
    out.scratch = std::accumulate(scratch.begin(), scratch.end(), 0.0);
    out.workspace = platform_.workspace;
    out.parameters = (copies * held + statistics - shared) * word;
    out.memory = out.activations + out.gradients + out.parameters + out.buffers + out.scratch + out.workspace;
    out.memory_limit = memory_limit();
    // Times and sizes, from figures bounded where the platform is read: one that is negative, NaN or infinite
    // is a bug of the model, never a prediction to print.
    for (const double v :
         {out.forward, out.backward, out.allreduce, out.update, out.step, out.read, out.scratch, out.memory,
          out.memory_limit})
        DSL_INTERNAL_CHECK(std::isfinite(v) && v >= 0.0, "a predicted time or memory is a finite number, not negative");

    const std::int64_t ppn = std::max<std::int64_t>(1, platform_.procs_per_node);
    const frontend::Layer* widest = nullptr;
    for (const Layer& l : net_.layers)
        if (l.params > 0 && (!widest || l.params > widest->params)) widest = &l;
    if (widest && procs_ > 1)
        out.allreduce_algorithm = fmt::format(
            "{} (the largest gradient, layer '{}', {})",
            allreduce_algorithm(procs_, static_cast<double>(widest->params) * word, multi_node_ && procs_ > ppn),
            widest->name, fmt::format("{:.3g} MB", static_cast<double>(widest->params) * word / 1e6));
    auto links = [&](bool within, bool between) -> std::string {
        const auto text = [](const char* where, const Link& k) {
            return fmt::format("{} ({:.3g} us, {:.3g} GB/s)", where, k.latency * 1e6, k.bandwidth / 1e9);
        };
        if (within && between)
            return text("within a node", platform_.node) + " and " + text("between nodes", platform_.network);
        if (within) return text("within a node", platform_.node);
        if (between) return text("between nodes", platform_.network);
        return "-";
    };
    out.halo_link = links(halo_in, halo_out);
    out.shuffle_link = links(shuffle_in, shuffle_out);
    return out;
}

}  // namespace dsl::scheduler
