// The trainer's state (Trainer::Impl): the plan's tiles with their memory, the parameters, the buffers
// the steps share, and the profile (a part of its own, which the trainer changes only through its functions:
// timeline.hpp). Its member functions are defined by concern, a file each, as listed below; what every file
// uses (the tile views and gradient writers) is defined here.
#pragma once

#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/paths.hpp>

#include "../random/splitmix.hpp"
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
    // The message buffers of one direction of a tile's exchange, one per piece of the plan, in its order.
    struct Messages {
        std::vector<Buffer> sends, receives;
    };

    // A tile of the plan with its memory: its values and gradient (with the margins the plan gives it), what
    // its margins hold now, and its message buffers.
    struct Tile : scheduler::TilePlan {
        Tensor y, dy;
        std::int64_t lanes = 1;  // y's and dy's: planar, or blocked (layouts.cpp) and without margins
        float padding = 0.0f;    // what the margins outside the tensor hold now
        Messages forward_messages, backward_messages;
        std::int64_t gathered = -1;   // the step whose halos (or copy) it holds
        std::int64_t scattered = -1;  // the step whose gradient it has sent back
        // An accumulated gradient that no reader has written yet this step: its margins are zero, its interior
        // is not (the first reader to write all of it writes rather than adds: see `input_gradient`).
        bool unwritten = false;
        // A narrowed layer's own tile (precision=bfloat16, float16): its interior in 16 bits, from forward to
        // the backward that widens it again.
        std::optional<Buffer> stored;
        std::uint16_t* stored_bits() { return reinterpret_cast<std::uint16_t*>(stored->data()); }
    };

    struct Slot {
        const Layer* layer = nullptr;
        std::vector<std::unique_ptr<Tile>> tiles;  // the own tile first, then copies
        std::vector<Tile*> operands;               // per input: the tile this layer reads
        std::vector<std::int32_t> labels;          // a loss's labels, over its logits tile
        Comm* group = nullptr;                     // batch and group norm, global pooling: who sums statistics

        // Parameters, in the kernels' memory: weights (or batch-norm scale) and bias (or shift, {1, C, 1, 1}),
        // their gradients and momenta. A layer without a bias has empty b, db, mb.
        Tensor w, dw, mw, b, db, mb;
        // Adam's second moments (its first are mw and mb); empty under sgd.
        Tensor vw, vb;
        // Under F or C parts (a split that cuts the layer's channels) a process holds its block of the parameters
        // and of their optimizer state alone: a layer with filters its filters' block by its input channels', a
        // normalization its channels'. The processes that hold the same block (`holders`: the same F and C parts)
        // sum its gradient. Only the first of the C processes adds the bias (the others' partial sums have none),
        // and only it makes a bias gradient.
        // Its blocks (a normalization's channels are `filters`; the whole ranges where the split cuts no channels,
        // so that `filters.lo` is where its channels start in the whole statistics).
        Range filters, inputs;
        bool adds_bias = true;
        Comm* holders = nullptr;  // who sums the gradients: every process where null
        // Whether w, b and their moments lie in memory the holders share, each updating its share of them
        // (place_parameters, optimize).
        bool shares_parameters = false;
        // A convolution that computes its weight gradient by blocks of filters (filter_blocks.cpp): its input and
        // output gradient whole, in memory the processes share; null where it does not.
        struct Gathered {
            std::shared_ptr<float> memory;
            Tensor x, dy;
        };
        std::unique_ptr<Gathered> gathered;
        // Whether dw and db lie in memory where the holders sum them (place_gradients).
        bool sums_in_node = false;
        // A convolution whose kernels asked for its weights in 16 x 16 blocks (ConvKernels::blocks_weights):
        // w, dw and their moments lie so (weight_blocks.hpp), plain only at the state's edges (state.cpp).
        bool blocked_weights = false;
        Dims whole;  // the whole weights' (or scale's) dims
        // Batch norm, on the host: the step's statistics (per channel; group norm's per sample and group), and
        // batch norm's running ones (under F and C parts this process's block of them is kept up to date, and
        // state() gathers the rest).
        std::vector<float> mean, inv_std, running_mean, running_var;
        // A convolution, batch norm or add whose one reader is a ReLU (or leaky ReLU of slope 0 or more) next in
        // order, over the same box: training's forward writes the ReLU's output in the same pass rather than its
        // own, which nothing else reads (fusion.cpp). The ReLU's index; -1 where not fused.
        int fused_relu = -1;

        Tile& own() { return *tiles.front(); }
        const Tile& own() const { return *tiles.front(); }
    };

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
    std::vector<Comm*> holder_groups;  // the slots' holders, each once: update() waits for their allreduces
    // Where the weight gradients lie when a group sums them in memory of its own (place_gradients); after
    // the groups, so that they go first.
    std::vector<std::shared_ptr<float>> summing_spaces;
    // Where the weights and the optimizer's moments lie when the processes that hold them share them
    // (place_parameters): the world's, then the holder groups'; none where each process keeps its own.
    std::vector<std::shared_ptr<float>> common_parameters;
    std::vector<Slot> slots;
    std::vector<Buffer> shared_buffers;  // the memory under every tile's dy and recomputed values (Plan::buffers)
    std::vector<double> sums_a, sums_b;  // per-channel reductions
    std::vector<float> summed_chunk;     // optimize: a chunk of a gradient's sum over the processes
    std::vector<float> scratch_values;   // on the host: global pooling's values, batch-norm gradients
    Buffer scratch;  // gradients of tensors with several readers, before they are added; 16 bits nobody keeps
    Buffer staging;  // an input tile from the data source, on its way to the kernels' memory
    Buffer targets;  // a regression loss's targets, in the kernels' memory
    std::vector<float> host_targets;  // and on the host, as the data source gives them
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
    std::vector<LossValue> losses;  // the last forward's, per loss layer
    std::int64_t step_index = 0;
    std::int64_t updates = 0;  // the optimizer's steps (Adam's t before its next update)
    double last_lr = 0.0;
    Trainer::LossScale scaling;  // dynamic loss scaling's state (scale 0: none)
    bool skipped = false;        // the last update was skipped
    // What a loss's gradient is multiplied by: the loss scale, or 1.
    double gradient_scale() const { return scaling.scale > 0.0 ? scaling.scale : 1.0; }
    bool unscale_gradients();
    std::int64_t step_first = 0;      // the last forward's first sample, which backward's dropout masks draw from
    bool step_training = false;       // and whether it was a training step's
    DataSource* step_data = nullptr;  // and its data, which backward's recomputations read again
    bool recomputing = false;         // a forward run again in backward (recompute=on)
    std::int64_t sent_bytes = 0;

    // The profile, while profiling is on (timeline.hpp).
    using Kind = ProfileEvent::Kind;
    using Phase = ProfileEvent::Phase;
    Timeline timeline;

    Impl(const frontend::Network& n, Kernels kernels, TrainConfig c, scheduler::Plan p, Comm* shared);

    const Dims& global_dims(int layer) const { return plan.layers[static_cast<std::size_t>(layer)].whole; }
    const scheduler::LayerPlan& plan_of(int layer) const { return plan.layers[static_cast<std::size_t>(layer)]; }

    // Whether a windowed layer overlaps its input's halo exchange with the interior's compute, as the plan says.
    bool overlaps(int index) const { return plan_of(index).overlapped; }

    // What a convolution reads of its input tile for `read`: the box of the tile and the window. A blocked
    // tile (layouts.cpp) has margins only where halos lie: at the tensor's border the box leaves out the
    // padding, which the window says lies outside it.
    struct ConvInput {
        Box box;
        Window window;
    };
    ConvInput conv_input(const Slot& s, const Tile& in, const Box& read) const {
        ConvInput c{read, conv_window(s, in, read)};
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

    // Writes an input's gradient through `compute(target)`: straight into the tile's gradient when this layer
    // is its only reader or the first to write all of its interior, else into scratch that is then added to it.
    template <typename Compute>
    void input_gradient(Tile& in, const Box& part, Compute&& compute) {
        const View target = view_of(in.dy, in, part);
        if (writes(in, part)) {
            compute(target);
            return;
        }
        const View computed = dense_view(scratch.reserve(target.dims.elements()), target.dims, target.lanes);
        compute(computed);
        k.eltwise->accumulate(computed, target);
    }

    template <typename Compute>
    void interior_gradient(Tile& in, Compute&& compute) {
        input_gradient(in, in.box, std::forward<Compute>(compute));
    }

    // Adds `dy` into an input's interior gradient (a copy where this layer is the first or only writer).
    void add_gradient(Tile& in, ConstView dy) {
        const View target = in.dy.interior();
        if (writes(in, in.box))
            k.eltwise->copy(dy, target);
        else
            k.eltwise->accumulate(dy, target);
    }

    // Whether a reader writes `part` of an input's gradient rather than adds to it: it is the only reader,
    // or the first to write an unwritten gradient's whole interior. An unwritten gradient that a smaller part
    // goes to first is zeroed for it.
    bool writes(Tile& in, const Box& part) {
        if (in.readers == 1) return true;
        if (in.unwritten && part == in.box) {
            in.unwritten = false;
            return true;
        }
        zero_unwritten(in);
        return false;
    }
    void zero_unwritten(Tile& t) {
        if (!t.unwritten) return;
        mem.fill(t.dy.interior(), 0.0f);
        t.unwritten = false;
    }

    bool is_input(const Tile* t) const {
        return net.layers[static_cast<std::size_t>(t->spec.layer)].op == OpKind::input;
    }

    // Dropout is on in training steps unless the config turns it off (evaluation).
    bool dropping(bool training) const { return training && config.training; }

    // setup.cpp: the tiles and buffers the plan gives, the process groups, the initial parameters.
    scheduler::RunFacts facts() const;
    void allocate();
    // layouts.cpp: a blocked tile's margins.
    Margins blocked_margins(const Tile& t) const;
    void bind(Tile& t, int buffer);
    void clear_gradients(int position);
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
    std::vector<StateTensor> state(bool read);
    std::vector<float> gathered(const Block& block, const float* held, bool keeps);
    void state_written();

    // exchange.cpp: halo exchange and redistribution, padding, and the inputs that the data source makes.
    static View view_of(Tensor& tensor, const Tile& t, const Box& b);
    void start(const scheduler::Exchange& p, Messages& m, int tag, Tensor& from, const Tile& from_tile, bool at_source,
               Kind kind, int layer, std::optional<scheduler::Precision> narrow = std::nullopt);
    int reader_of(const Tile& t) const;
    void start_gather(Tile& t);
    void finish_gather(Tile& t);
    void gather(Tile& t);
    void start_scatter(Tile& t);
    void finish_scatter(Tile& t);
    void scatter(Tile& t);
    void set_padding(Tile& t, float v);
    void make_input(DataSource& data, Tile& t, std::int64_t first);
    void make_input_part(DataSource& data, Tile& t, std::int64_t first, const scheduler::Piece& part);
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

    // normalization.cpp: what batch and group norm share, their statistics' sums and their parameters'
    // gradients.
    void group_sum(Slot& s, bool speaks);
    void scale_shift_gradients(Slot& s, const std::vector<double>& d_gamma, const std::vector<double>& d_beta,
                               bool speaks);

    // backward.cpp: the backward pass, layer by layer (each by its kind's row), and the recomputation it runs
    // first.
    void backward();
    void recompute_for(int index);
    void backward_layer(int index);

    // update.cpp: the gradients' allreduce and the optimizer's update.
    Comm& gradient_group(const Slot& s) const { return s.holders ? *s.holders : comm; }
    std::vector<Comm*> parameter_groups();
    std::vector<Tensor*> group_tensors(const Comm* group, std::initializer_list<Tensor Slot::*> members);
    void place_gradients();
    void place_parameters();
    void set_group_path(const Comm* group, scheduler::PathKind kind, const char* why);
    // filter_blocks.cpp: weight gradients by blocks of filters.
    bool weight_gradient_by_filters(int index) const;
    void place_filter_blocks();
    void filter_block_weight_gradient(Slot& s, int index);
    bool sum_left_to_update(const Slot& s) const;
    void allreduce_gradients(Slot& s, bool speaks);
    void update();
    void optimize();
};

}  // namespace dsl::backend
