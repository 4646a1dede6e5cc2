// The trainer (Trainer::Impl): it runs the plan's forward, backward and update over the slots, one a layer
// (tile.hpp), through its parts, each of which owns its state and changes it only through its own functions:
// the tiles and buffers (tiles.hpp), the exchanges (exchanges.hpp), the normalization statistics
// (statistics.hpp), the update (optimizer.hpp) and the profile (timeline.hpp). What the plan decides, it reads
// from the plan. Its member functions are defined by concern, a file each, as listed below.
#pragma once

#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/paths.hpp>

#include "../random/splitmix.hpp"
#include "exchanges.hpp"
#include "optimizer.hpp"
#include "statistics.hpp"
#include "tile.hpp"
#include "tiles.hpp"
#include "timeline.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;
using scheduler::Box;

// FNV-1a of a layer's name: the part of a parameter's or a dropout mask's stream that is the layer's.
inline std::uint64_t name_hash(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

inline Window window_of(const Layer& l) {
    Window w{l.kernel, l.stride, l.kernel, {}};
    for (int d = 0; d < l.kernel.rank(); ++d) w.dilation[d] = scheduler::window_dilation(l, d);
    return w;
}

// An element-wise layer's function.
inline frontend::Activation elementwise(const Layer& l) {
    DSL_INTERNAL_CHECK(l.kind().elementwise(),
                       std::string("the trainer has no kernels for layer kind '") + l.kind().name + "'");
    return l.kind().activation;
}

inline float activation_slope(const Layer& l) { return static_cast<float>(l.activation_slope()); }

// Where a process's block of a parameter lies in the whole one. The whole one's `total` elements run as rows
// of `columns` runs of `run` elements; the block is the runs at rows `rows` and columns `cols`, densely in that
// order. A whole tensor is one row of `total` runs of one element.
struct Block {
    Range rows, cols;
    std::int64_t columns = 1, run = 1, total = 0;
    std::int64_t elements() const { return rows.size() * cols.size() * run; }
    bool is_whole() const { return elements() == total; }
    // Calls f with the index in the whole one of each of the block's elements, in the block's order.
    template <typename F>
    void each(F&& f) const {
        for (std::int64_t r = rows.lo; r < rows.hi; ++r)
            for (std::int64_t i = (r * columns + cols.lo) * run, end = i + cols.size() * run; i < end; ++i) f(i);
    }
    // Copies the block out of the whole one (`take`), or into it (`place`); the block is dense.
    template <typename From, typename To>
    void take(const From* whole, To* block) const {
        for (std::int64_t r = rows.lo; r < rows.hi; ++r)
            block = std::copy_n(whole + (r * columns + cols.lo) * run, cols.size() * run, block);
    }
    template <typename From, typename To>
    void place(const From* block, To* whole) const {
        for (std::int64_t r = rows.lo; r < rows.hi; ++r, block += cols.size() * run)
            std::copy_n(block, cols.size() * run, whole + (r * columns + cols.lo) * run);
    }
};

struct Trainer::Impl {
    using Tile = backend::Tile;
    using Slot = backend::Slot;

    const frontend::Network& net;
    Kernels k;
    Memory& mem;  // the kernels' memory: every tile, parameter and message buffer
    TrainConfig config;
    const scheduler::Plan plan;
    // The fast paths each layer takes (scheduler/src/paths.cpp), with what setup found of node memory.
    std::vector<scheduler::LayerPaths> paths;
    std::unique_ptr<Comm> self;  // a run on one process
    Comm& comm;
    std::vector<std::unique_ptr<Comm>> groups;
    std::vector<Comm*> holder_groups;  // the slots' holders, each once, in the order every process made them
    std::vector<Slot> slots;

    // The parts (declared in the order they are made: each after those it uses).
    Timeline timeline;
    Tiles tiles;
    Exchanges exchanges;
    Statistics stats;
    Optimizer optimizer;

    std::vector<float> scratch_values;  // on the host: global pooling's values, batch-norm gradients
    Buffer targets;                     // a regression loss's targets, in the kernels' memory
    std::vector<float> host_targets;    // and on the host, as the data source gives them
    std::vector<float> host_tile;
    std::vector<float> host_channels;  // every channel of an input tile of which a block is read
    // state()'s whole copies of the parameters in a GPU's memory or split in blocks, each with where it came
    // from: the kernels' memory at `kernel`, which holds the copy's `block`.
    struct StateCopy {
        float* kernel;
        Block block;
        std::vector<float> host;
        std::optional<Dims> blocked;  // the kernel memory's dims where it holds weights in blocks
    };
    std::vector<StateCopy> host_state;
    std::vector<LossValue> losses;    // the last forward's, per loss layer
    std::int64_t step_first = 0;      // the last forward's first sample, which backward's dropout masks draw from
    bool step_training = false;       // and whether it was a training step's
    DataSource* step_data = nullptr;  // and its data, which backward's recomputations read again
    bool recomputing = false;         // a forward run again in backward (recompute=on)

    using Kind = ProfileEvent::Kind;
    using Phase = ProfileEvent::Phase;

    Impl(const frontend::Network& n, Kernels kernels, TrainConfig c, scheduler::Plan p, Comm* shared);

    const Dims& global_dims(int layer) const { return plan.layers[static_cast<std::size_t>(layer)].whole; }
    const scheduler::LayerPlan& plan_of(int layer) const { return plan.layers[static_cast<std::size_t>(layer)]; }

    // Whether a windowed layer overlaps its input's halo exchange with the interior's compute, as the plan says.
    bool overlaps(int index) const { return plan_of(index).overlapped; }

    // What a convolution or a pooling reads of its input tile for `read`: the box of the tile and the window. A
    // blocked tile (layouts.cpp) has margins only where halos lie: at the tensor's border the box leaves out
    // the padding, which the window says lies outside it.
    struct WindowRead {
        Box box;
        Window window;
    };
    WindowRead window_read(const Slot& s, const Tile& in, const Box& read) const {
        WindowRead c{read, conv_window(s, in, read)};
        if (in.lanes == 1) return c;
        for (int d = 0; d < read.space.rank(); ++d) {
            Range& r = c.box.space[d];
            if (in.need[d].before == 0) r.lo = std::max(r.lo, in.box.space[d].lo);
            if (in.need[d].after == 0) r.hi = std::min(r.hi, in.box.space[d].hi);
        }
        c.window.zeros_outside = true;
        return c;
    }

    // A convolution's window over `read` of its input tile, with the places of `read` outside the tensor
    // (zero padding, unless the tile's padding is periodic) that the kernels may pad themselves.
    Window conv_window(const Slot& s, const Tile& in, const Box& read) const {
        const Layer& l = *s.layer;
        Window w = window_of(l);
        w.blocked_weights = s.blocked_weights;
        if (in.periodic) return w;
        const Dims& whole = global_dims(in.spec.layer);
        w.zeros = Margins::filled(read.space.rank(), scheduler::Reach{});
        for (int d = 0; d < read.space.rank(); ++d)
            w.zeros[d] = {std::max<std::int64_t>(0, -read.space[d].lo),
                          std::max<std::int64_t>(0, read.space[d].hi - whole.space[d])};
        return w;
    }

    bool is_input(const Tile* t) const {
        return net.layers[static_cast<std::size_t>(t->spec.layer)].op == OpKind::input;
    }

    // Dropout is on in training steps unless the config turns it off (evaluation).
    bool dropping(bool training) const { return training && config.training; }

    // setup.cpp: the parts, the process groups, the initial parameters.
    scheduler::RunFacts facts() const;
    void make_groups();
    using Values = std::function<float(std::int64_t)>;  // a parameter's element at an index of the whole one
    Tensor parameter(const Block& block, const Dims& whole, const Values& value);
    void set_parameters(Slot& s, Dims wd, const Values& weight, const Values& bias);
    void set_weights(Slot& s, Dims wd, const Values& weight, double bound, std::uint64_t stream);
    void initialize();

    // blocks.cpp: each process's block of the parameters under F and C parts, and who holds the same one;
    // where a block lies in the whole parameter, as the layer's kind lays it out.
    void place_blocks();
    Block weight_block(const Slot& s) const;
    Block bias_block(const Slot& s) const;
    bool splits_weights() const;
    // The bias a layer adds, and its gradient: none where it has none, or on the C processes after the first.
    const float* bias_of(const Slot& s) const { return s.layer->bias && s.adds_bias ? s.b.data() : nullptr; }
    float* bias_gradient_of(Slot& s) const { return s.layer->bias && s.adds_bias ? s.db.data() : nullptr; }

    // state.cpp: the parameters as whole tensors on the host, gathered from their blocks where `read`.
    // Where `to_first`, the blocks are gathered to the first process alone (a checkpoint's writer).
    std::vector<StateTensor> state(bool read, bool to_first = false);
    std::vector<float> gathered(const Block& block, const float* held, bool keeps);
    std::vector<float> gathered_to_first(const Block& block, const float* held, bool keeps);
    void state_written();

    // A recomputed layer's tile over value buffer `buffer`: it holds no halo until gathered again.
    void bind(Tile& t, int buffer) {
        tiles.bind(t, buffer);
        exchanges.forget(t);
    }

    // inputs.cpp: the inputs that the data source makes (never sent), and values read back to the host.
    void make_input(DataSource& data, Tile& t, std::int64_t first);
    void make_input_part(DataSource& data, Tile& t, std::int64_t first, const scheduler::Piece& part);
    // A source that reads ahead of the step (DataSource::ready): the wait for `layer`'s block, as its own
    // phase of the timeline, and its values (null where it was not read ahead).
    const void* await_read(DataSource& data, const Layer& layer, std::int64_t first, const Index& at,
                           const Dims& dims);
    void to_host(ConstView v, std::vector<float>& out);
    Tile& ready(DataSource* data, std::int64_t first, Tile& t);

    // forward.cpp: the forward pass, layer by layer (each by its kind's row, backend/src/kinds/), and the
    // overlap of halos with windowed layers.
    scheduler::Precision precision_of(int layer) const { return *plan_of(layer).dist.precision; }
    // A convolution's kernels: 16-bit products where its precision is bfloat16 or float16 and the kernels
    // have them.
    ConvKernels& conv_of(int layer) const {
        const auto p = plan_of(layer).dist.products16(net.layers[static_cast<std::size_t>(layer)].op);
        ConvKernels* sixteen = p ? k.conv16(*p) : nullptr;
        return sixteen ? *sixteen : *k.conv;
    }
    // A narrowed layer's precision, in which its halos and copies travel; none for the others.
    std::optional<scheduler::Precision> narrowed_of(int layer) const {
        return plan_of(layer).narrowed ? std::optional(precision_of(layer)) : std::nullopt;
    }
    ConstView windowed_input(const Layer& l, int index, const Box& read);
    double forward(DataSource& data, std::int64_t first, bool training);
    void forward_layer(DataSource& data, std::int64_t first, bool training, std::size_t i, double& loss);
    void windowed_layer(Slot& s, int index);
    void windowed_forward(Slot& s, const Box& out, bool again = false);
    void overlapped_forward(Slot& s, int index);
    bool blocked_interior_copied(const Slot& s, const Tile& in, const scheduler::OverlapParts& parts) const;

    // fusion.cpp: a ReLU written in the forward pass of the layer it reads.
    void fuse_relus();
    bool writes_relu(const Slot& s, bool training) const;
    void forward_fused(Slot& s, const Box& part, bool training, const std::function<bool(View, float)>& fused,
                       const std::function<void()>& alone);

    // normalization.cpp: what batch and group norm share: their scale's and shift's gradients.
    void scale_shift_gradients(Slot& s, const std::vector<double>& d_gamma, const std::vector<double>& d_beta,
                               bool speaks);

    // backward.cpp: the backward pass, layer by layer (each by its kind's row), and the recomputation it runs
    // first.
    void backward();
    void recompute_for(int index);
    void backward_layer(int index);

    // filter_blocks.cpp: weight gradients by blocks of filters.
    bool weight_gradient_by_filters(int index) const;
    void place_filter_blocks();
    void filter_block_weight_gradient(Slot& s, int index);
};

}  // namespace dsl::backend
