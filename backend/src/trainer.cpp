// The interpreter, an executor of a plan (scheduler/plan.hpp): allocates each layer's tiles as the plan places
// them (with the margins its readers need), initializes the parameters from the seed, and runs forward,
// backward and SGD through the kernel interfaces, moving halos and shuffles as the plan's pieces say.
// One file on purpose: forward and backward of every kind share the tiles, the overlap of halos with
// compute and the gradients' buffers, and each case reads best beside its mirror image.
#include <dsl/backend/trainer.hpp>

#include <dsl/backend/synthetic.hpp>

#include "splitmix.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;

void DataSource::targets(const Layer& label, std::int64_t first, const Index& at, View tile) {
    (void)first, (void)at, (void)tile;
    DSL_INTERNAL_CHECK(false, "this data source has no float labels, but '" + label.name + "' is one");
}

namespace {

// Deterministic initialization: every parameter element is a pure function of (seed, layer name, index),
// so that any process can make any part of any parameter without communicating.
std::uint64_t name_hash(const std::string& s) {
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
    return h;
}

// Uniform in (0, 1).
double uniform(std::uint64_t stream, std::uint64_t i) {
    return (static_cast<double>(splitmix64(stream ^ splitmix64(i)) >> 11) + 0.5) * 0x1.0p-53;
}

double normal(std::uint64_t stream, std::uint64_t i) {
    const double u1 = uniform(stream, 2 * i), u2 = uniform(stream, 2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Window window_of(const Layer& l) {
    Window w{l.kernel, l.stride, l.kernel};
    for (int d = 0; d < l.kernel.rank(); ++d) w.dilation[d] = scheduler::window_dilation(l, d);
    return w;
}

// An element-wise layer's function; the trainer's switches give every other kind a case of its own.
frontend::Activation elementwise(const Layer& l) {
    DSL_INTERNAL_CHECK(l.kind().elementwise(),
                       std::string("the trainer has no kernels for layer kind '") + l.kind().name + "'");
    return l.kind().activation;
}

float activation_slope(const Layer& l) { return static_cast<float>(l.activation_slope()); }

using scheduler::Box;

}  // namespace

struct Trainer::Impl {
    // The message buffers of one direction of a tile's exchange, one per piece of the plan, in its order.
    struct Messages {
        std::vector<Buffer> sends, receives;
    };

    // A tile of the plan with its memory: its values and gradient (with the margins the plan gives it), what
    // its margins hold now, and its message buffers.
    struct Tile : scheduler::TilePlan {
        Tensor y, dy;
        float padding = 0.0f;  // what the margins outside the tensor hold now
        Messages forward_messages, backward_messages;
        std::int64_t gathered = -1;   // the step whose halos (or copy) it holds
        std::int64_t scattered = -1;  // the step whose gradient it has sent back
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
        // Batch norm, on the host: the step's statistics (per channel; group norm's per sample and group), and
        // batch norm's running ones.
        std::vector<float> mean, inv_std, running_mean, running_var;

        Tile& own() { return *tiles.front(); }
    };

    const frontend::Network& net;
    Kernels k;
    Memory& mem;  // the kernels' memory: every tile, parameter and message buffer
    TrainConfig config;
    const scheduler::Plan plan;
    std::unique_ptr<Comm> self;  // a run on one process
    Comm& comm;
    std::vector<std::unique_ptr<Comm>> groups;
    std::vector<Slot> slots;
    std::vector<Buffer> grad_buffers;    // the memory under every tile's dy
    std::vector<Buffer> value_buffers;   // and under recomputed layers' values (plan_recompute)
    std::vector<double> sums_a, sums_b;  // per-channel reductions
    std::vector<float> scratch_values;   // on the host: global pooling's values, batch-norm gradients
    Buffer scratch;                      // gradients of tensors with several readers, before they are added
    Buffer staging;                      // an input tile from the data source, on its way to the kernels' memory
    Buffer targets;                      // a regression loss's targets, in the kernels' memory
    std::vector<float> host_targets;     // and on the host, as the data source gives them
    std::vector<float> host_tile;
    // state()'s copies of the parameters in a GPU's memory, each with where it came from.
    struct StateCopy {
        float* kernel;
        std::vector<float> host;
    };
    std::vector<StateCopy> host_state;
    std::vector<LossValue> losses;  // the last forward's, per loss layer
    std::int64_t step_index = 0;
    std::int64_t updates = 0;  // the optimizer's steps (Adam's t before its next update)
    double last_lr = 0.0;
    std::int64_t step_first = 0;   // the last forward's first sample, which backward's dropout masks draw from
    bool step_training = false;    // and whether it was a training step's
    DataSource* step_data = nullptr;  // and its data, which backward's recomputations read again
    bool recomputing = false;         // a forward run again in backward (recompute=on)
    std::int64_t sent_bytes = 0;

    // Profiling: `waited` collects the seconds spent in communication waits since the current layer began.
    using Clock = std::chrono::steady_clock;
    bool profiling = false;
    StepProfile profile;
    double waited = 0.0;
    static double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
    // On a GPU, kernels run after their calls return: while profiling, the clock is read only once the
    // kernels started before it have ended (which serializes what would overlap).
    // While profiling, the step's timeline (StepProfile::events) is made as it runs: `segment` is the compute
    // event open now (it ends where the next begins), `posted` the halo exchange or shuffle posted and not yet
    // waited for, `open_allreduces` the weight-gradient allreduces started and not yet seen complete (each
    // with its requests among those started since the last finish).
    using Kind = ProfileEvent::Kind;
    using Phase = ProfileEvent::Phase;
    ProfileEvent segment, posted;
    bool segment_open = false, posted_open = false;
    struct OpenAllreduce {
        std::size_t event, first, count;
    };
    std::vector<OpenAllreduce> open_allreduces;
    std::size_t allreduce_requests = 0;

    double now() {
        mem.synchronize();
        return profile_clock();
    }
    void close_segment(double t) {
        if (segment_open && t > segment.start) {
            ProfileEvent e = segment;
            e.end = t;
            profile.events.push_back(e);
        }
        segment.start = t;
    }
    // From here on, the compute is `kind` of `layer` (a no-op while it already is).
    void mark(Phase phase, Kind kind, int layer) {
        if (!profiling || (segment_open && segment.phase == phase && segment.kind == kind && segment.layer == layer))
            return;
        const double t = now();
        close_segment(t);
        segment = ProfileEvent{kind, phase, layer, t, 0.0, 0};
        segment_open = true;
    }
    static bool exchange_wait(Kind k) {
        return k == Kind::wait_halo || k == Kind::wait_shuffle || k == Kind::wait_halo_back ||
               k == Kind::wait_shuffle_back;
    }

    // A wait for other processes: `waiting` says for what (a sum's `bytes` are its message's).
    template <typename Wait>
    void wait(Kind waiting, Wait&& w, std::int64_t bytes = 0) {
        if (!profiling) return w();
        const double t0 = now();
        w();
        const double t1 = now();
        waited += t1 - t0;
        if (exchange_wait(waiting) && !posted_open) return;  // nothing was sent: copies within this process
        close_segment(t0);
        // A halo or shuffle is its reader's, and so is the wait for it (a gradient's halo goes back to the
        // layer that made the tensor, while that layer's backward waits for it), as the model counts it.
        const int layer = exchange_wait(waiting) ? posted.layer : segment.layer;
        profile.events.push_back(ProfileEvent{waiting, segment.phase, layer, t0, t1, 0});
        segment.start = t1;
        if (waiting == Kind::wait_sum)
            profile.events.push_back(ProfileEvent{Kind::sum, segment.phase, segment.layer, t0, t1, bytes});
        if (exchange_wait(waiting)) {
            posted.end = t1;
            profile.events.push_back(posted);
            posted_open = false;
        }
    }

    // The allreduces seen complete now (`all`: every one, after finish_allreduces) end here.
    void observe_allreduces(bool all) {
        if (!profiling || open_allreduces.empty()) return;
        const std::vector<bool> done = all ? std::vector<bool>{} : comm.test_allreduces();
        if (!all && done.size() < allreduce_requests) return;  // a communicator that cannot tell
        const double t = now();
        std::erase_if(open_allreduces, [&](const OpenAllreduce& a) {
            const bool complete = all || std::all_of(done.begin() + static_cast<std::ptrdiff_t>(a.first),
                                                     done.begin() + static_cast<std::ptrdiff_t>(a.first + a.count),
                                                     [](bool b) { return b; });
            if (complete) profile.events[a.event].end = t;
            return complete;
        });
    }
    double layer_time(Clock::time_point t0) {
        mem.synchronize();
        return since(t0);
    }

    Impl(const frontend::Network& n, Kernels kernels, TrainConfig c, scheduler::Plan p, Comm* shared)
        : net(n),
          k(kernels),
          mem(kernels.mem()),
          config(c),
          plan(std::move(p)),
          self(shared ? nullptr : self_comm()),
          comm(shared ? *shared : *self),
          scratch(mem),
          staging(mem),
          targets(mem) {
        DSL_INTERNAL_CHECK(plan.layers.size() == net.layers.size() && plan.procs == comm.size() &&
                               plan.rank == comm.rank() && plan.batch == config.batch,
                           "a plan for another network, process or mini-batch");
        slots.resize(net.layers.size());
        for (std::size_t i = 0; i < net.layers.size(); ++i) slots[i].layer = &net.layers[i];
        allocate();
        make_groups();
        initialize();
        if (config.optimizer != frontend::Optimizer::sgd)
            for (Slot& s : slots) {
                if (s.w.size() > 0) s.vw = Tensor(s.w.dims(), {}, mem);
                if (s.b.size() > 0) s.vb = Tensor(s.b.dims(), {}, mem);
            }
        last_lr = config.schedule.lr(config.lr, 0);
    }

    const Dims& global_dims(int layer) const { return plan.layers[static_cast<std::size_t>(layer)].whole; }
    const scheduler::LayerPlan& plan_of(int layer) const { return plan.layers[static_cast<std::size_t>(layer)]; }
    bool overlap_of(int layer) const {
        return plan.layers[static_cast<std::size_t>(layer)].dist.overlap.value_or(false);
    }

    // The plan's tiles in the kernels' memory: values with their margins, gradients over the buffers the plan
    // shares among them, and a message buffer for every piece of their exchanges.
    void allocate() {
        for (std::size_t i = 0; i < slots.size(); ++i) {
            Slot& s = slots[i];
            for (const scheduler::TilePlan& tp : plan.layers[i].tiles) {
                auto t = std::make_unique<Tile>();
                static_cast<scheduler::TilePlan&>(*t) = tp;
                s.tiles.push_back(std::move(t));
            }
        }
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const Layer& l = *slots[i].layer;
            for (std::size_t j = 0; j < l.inputs.size(); ++j) {
                const int t = plan.layers[i].operands[j];
                slots[i].operands.push_back(
                    t < 0 ? nullptr
                          : slots[static_cast<std::size_t>(l.inputs[j])].tiles[static_cast<std::size_t>(t)].get());
            }
        }
        value_buffers.clear();
        value_buffers.reserve(plan.value_buffers.size());
        for (std::int64_t size : plan.value_buffers) value_buffers.emplace_back(mem).resize(size);
        for (std::size_t i = 0; i < slots.size(); ++i) {
            if (slots[i].layer->op == OpKind::label) continue;
            for (auto& t : slots[i].tiles)
                if (t->forward_buffer >= 0)
                    bind(*t, t->forward_buffer);
                else
                    t->y = Tensor(t->box.dims(), t->need, mem);
        }
        grad_buffers.clear();
        grad_buffers.reserve(plan.grad_buffers.size());
        for (std::int64_t size : plan.grad_buffers) grad_buffers.emplace_back(mem).resize(size);
        for (Slot& s : slots)
            for (auto& t : s.tiles)
                if (t->grad_buffer >= 0)
                    t->dy = Tensor::over(grad_buffers[static_cast<std::size_t>(t->grad_buffer)].data(), t->y.dims(),
                                         t->need);
        for (Slot& s : slots)
            for (auto& t : s.tiles)
                for (auto [exchange, messages] :
                     {std::pair{&t->forward, &t->forward_messages}, std::pair{&t->backward, &t->backward_messages}})
                    for (auto [pieces, buffers] : {std::pair{&exchange->sends, &messages->sends},
                                                   std::pair{&exchange->receives, &messages->receives}})
                        for (const scheduler::Piece& piece : *pieces)
                            buffers->emplace_back(mem).resize(piece.box.dims().elements());
    }

    // A recomputed layer's tile over value buffer `buffer`, whose memory others used since: its margins are
    // zeroed as a new tile's are, and it holds no halo.
    void bind(Tile& t, int buffer) {
        t.y = Tensor::over(value_buffers[static_cast<std::size_t>(buffer)].data(), t.box.dims(), t.need);
        t.y.fill_margins(0.0f, mem);
        t.padding = 0.0f;
        t.gathered = -1;
    }

    // Before the first write of a gradient: zero where it is accumulated (or partly written), and the margins
    // that go back to the neighbours.
    void clear_gradients(int position) {
        for (Slot& s : slots)
            for (auto& t : s.tiles) {
                if (t->dy.size() == 0 || t->grad_first != position) continue;
                if (t->zero_grad)
                    mem.fill(t->dy.padded(), 0.0f);
                else if (!t->backward.empty())
                    t->dy.fill_margins(0.0f, mem);
            }
    }

    // The plan's process groups: each split's sample group is made once, in the order of the layers, the same
    // on every process.
    void make_groups() {
        std::vector<std::pair<std::string, Comm*>> made;
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const scheduler::GroupPlan& g = plan.layers[i].group;
            switch (g.kind) {
                case scheduler::GroupPlan::Kind::none: slots[i].group = nullptr; break;
                case scheduler::GroupPlan::Kind::every: slots[i].group = &comm; break;
                case scheduler::GroupPlan::Kind::samples: {
                    auto it = std::find_if(made.begin(), made.end(), [&](const auto& m) { return m.first == g.key; });
                    if (it == made.end()) {
                        groups.push_back(comm.split(g.colour));
                        it = made.emplace(made.end(), g.key, groups.back().get());
                    }
                    slots[i].group = it->second;
                    break;
                }
            }
        }
    }

    // A parameter in the kernels' memory, made from its values on the host.
    Tensor parameter(Dims d, const std::vector<float>& values) {
        Tensor t(d, {}, mem);
        mem.upload(values.data(), t.data(), t.size());
        return t;
    }

    // A layer's weights from their values, with gradient and momentum buffers, and its bias (when it has one)
    // uniform in +-bound, PyTorch's default for every bias, drawn from the complement of its weights' stream.
    void set_weights(Slot& s, Dims wd, const std::vector<float>& values, double bound, std::uint64_t stream) {
        s.w = parameter(wd, values);
        s.dw = Tensor(wd, {}, mem);
        s.mw = Tensor(wd, {}, mem);
        if (!s.layer->bias) return;
        const Dims bd{1, s.layer->filters, {}};
        std::vector<float> b(static_cast<std::size_t>(s.layer->filters));
        for (std::size_t i = 0; i < b.size(); ++i)
            b[i] = static_cast<float>(bound * (2.0 * uniform(~stream, i) - 1.0));
        s.b = parameter(bd, b);
        s.db = Tensor(bd, {}, mem);
        s.mb = Tensor(bd, {}, mem);
    }

    void initialize() {
        for (Slot& s : slots) {
            const Layer& l = *s.layer;
            const std::uint64_t stream = splitmix64(config.seed) ^ name_hash(l.name);
            if (l.op == OpKind::conv || l.op == OpKind::fc) {
                const Dims in = scheduler::extent_of(net.layers[static_cast<std::size_t>(l.inputs[0])], 1);
                // A convolution's weights {F, C, kernel}; a fully connected layer's {K, every input of a sample}.
                const Dims wd =
                    l.op == OpKind::conv ? Dims{l.filters, in.c, l.kernel} : Dims{l.filters, in.c * in.points(), {}};
                const double fan_in = static_cast<double>(wd.c * wd.points());
                // torchvision's ResNet: Kaiming normal, fan out, for convolutions; PyTorch's default
                // (uniform, +-1/sqrt(fan in)) for fully connected layers and every bias.
                const double std_out = std::sqrt(2.0 / static_cast<double>(wd.n * wd.points()));
                const double bound = 1.0 / std::sqrt(fan_in);
                std::vector<float> values(static_cast<std::size_t>(wd.elements()));
                for (std::size_t i = 0; i < values.size(); ++i)
                    values[i] = static_cast<float>(l.op == OpKind::conv ? std_out * normal(stream, i)
                                                                        : bound * (2.0 * uniform(stream, i) - 1.0));
                set_weights(s, wd, values, bound, stream);
            } else if (l.op == OpKind::deconv) {
                // PyTorch's ConvTranspose2d default: weights {C_in, C_out, kernel} and bias uniform in
                // +-1/sqrt(fan in), its fan in C_out times the kernel's taps (the weights' second dimension on).
                const Dims in = scheduler::extent_of(net.layers[static_cast<std::size_t>(l.inputs[0])], 1);
                const Dims wd{in.c, l.filters, l.kernel};
                const double bound = 1.0 / std::sqrt(static_cast<double>(wd.c * wd.points()));
                std::vector<float> values(static_cast<std::size_t>(wd.elements()));
                for (std::size_t i = 0; i < values.size(); ++i)
                    values[i] = static_cast<float>(bound * (2.0 * uniform(stream, i) - 1.0));
                set_weights(s, wd, values, bound, stream);
            } else if (l.op == OpKind::groupnorm) {
                // PyTorch's affine group norm: scale 1, shift 0; the statistics are per sample, made in forward.
                const Dims d{1, l.shape.dims[0], {}};
                s.w = parameter(d, std::vector<float>(static_cast<std::size_t>(d.c), 1.0f));
                s.dw = Tensor(d, {}, mem);
                s.mw = Tensor(d, {}, mem);
                s.b = Tensor(d, {}, mem);
                s.db = Tensor(d, {}, mem);
                s.mb = Tensor(d, {}, mem);
            } else if (l.op == OpKind::batchnorm) {
                const auto c = static_cast<std::size_t>(l.shape.dims[0]);
                const Dims d{1, l.shape.dims[0], {}};
                s.w = parameter(d, std::vector<float>(c, 1.0f));
                s.dw = Tensor(d, {}, mem);
                s.mw = Tensor(d, {}, mem);
                s.b = Tensor(d, {}, mem);
                s.db = Tensor(d, {}, mem);
                s.mb = Tensor(d, {}, mem);
                s.mean.assign(c, 0.0f);
                s.inv_std.assign(c, 1.0f);
                s.running_mean.assign(c, 0.0f);
                s.running_var.assign(c, 1.0f);
            }
        }
    }

    // ---- Halo exchange and redistribution.

    // The part of a tile's padded tensor (y or dy) over `b`, in global coordinates.
    static View view_of(Tensor& tensor, const Tile& t, const Box& b) {
        Index at = b.origin();
        for (int d = 0; d < at.rank(); ++d) at[d] -= t.box.space[d].lo - t.need[d].before;
        return tensor.padded().sub(b.n.lo - t.box.n.lo, b.c.lo - t.box.c.lo, at, b.dims());
    }

    // Posts an exchange, packing what it sends from `from` (of `from_tile`): a piece's source() in the layer's
    // own tile (forward: `at_source`), or its box in the tile it fills (backward). `kind` and `layer` name it on
    // a profile's timeline.
    void start(const scheduler::Exchange& p, Messages& m, int tag, Tensor& from, const Tile& from_tile, bool at_source,
               Kind kind, int layer) {
        std::vector<Message> sends, receives;
        std::int64_t bytes = 0;
        for (std::size_t i = 0; i < p.sends.size(); ++i) {
            Buffer& buffer = m.sends[i];
            mem.pack(view_of(from, from_tile, at_source ? p.sends[i].source() : p.sends[i].box), buffer.data());
            sends.push_back(Message{p.sends[i].peer, buffer.data(), buffer.size()});
            bytes += buffer.size() * static_cast<std::int64_t>(sizeof(float));
        }
        sent_bytes += bytes;
        for (std::size_t i = 0; i < p.receives.size(); ++i)
            receives.push_back(Message{p.receives[i].peer, m.receives[i].data(), m.receives[i].size()});
        if (profiling && (!sends.empty() || !receives.empty())) {
            posted = ProfileEvent{kind, segment.phase, layer, now(), 0.0, bytes};
            posted_open = true;
        }
        comm.start_exchange(sends, receives, tag);
    }

    // The layer a tile's gradient goes back for, on a profile's timeline: the reader of a copy, the first
    // windowed reader of an own tile (whose margins the halo fills).
    int reader_of(const Tile& t) const {
        const std::vector<int>& readers = t.copy ? t.reader_layers : t.windowed_readers;
        return readers.empty() ? segment.layer : readers.front();
    }

    // Fills a tile's halos (or the whole of a copy) from the processes that hold them: posts the exchange,
    // and `finish_gather` waits for it and places what came.
    void start_gather(Tile& t) {
        t.gathered = step_index;
        if (t.forward.empty()) return;
        Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
        start(t.forward, t.forward_messages, 2 * t.id, owner.y, owner, true, t.copy ? Kind::shuffle : Kind::halo,
              segment.layer);
        for (const scheduler::Piece& p : t.forward.local)
            k.eltwise->copy(view_of(owner.y, owner, p.source()), view_of(t.y, t, p.box));
    }

    void finish_gather(Tile& t) {
        if (t.forward.empty()) return;
        wait(t.copy ? Kind::wait_shuffle : Kind::wait_halo, [&] { comm.finish_exchange(); });
        for (std::size_t i = 0; i < t.forward.receives.size(); ++i)
            mem.unpack(t.forward_messages.receives[i].data(), view_of(t.y, t, t.forward.receives[i].box), false);
    }

    void gather(Tile& t) {
        if (t.gathered == step_index) return;
        start_gather(t);
        finish_gather(t);
    }

    // Adds the gradient that readers left in a tile's margins (or in a copy) into the tiles that hold those
    // elements, in two halves like the gather.
    void start_scatter(Tile& t) {
        t.scattered = step_index;
        if (t.backward.empty()) return;
        Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
        start(t.backward, t.backward_messages, 2 * t.id + 1, t.dy, t, false,
              t.copy ? Kind::shuffle_back : Kind::halo_back, reader_of(t));
        for (const scheduler::Piece& p : t.backward.local)
            k.eltwise->accumulate(view_of(t.dy, t, p.box), view_of(owner.dy, owner, p.source()));
    }

    void finish_scatter(Tile& t) {
        if (t.backward.empty()) return;
        Tile& owner = slots[static_cast<std::size_t>(t.spec.layer)].own();
        wait(t.copy ? Kind::wait_shuffle_back : Kind::wait_halo_back, [&] { comm.finish_exchange(); });
        for (std::size_t i = 0; i < t.backward.receives.size(); ++i)
            mem.unpack(t.backward_messages.receives[i].data(),
                       view_of(owner.dy, owner, t.backward.receives[i].source()), true);
    }

    void scatter(Tile& t) {
        if (t.scattered == step_index) return;
        start_scatter(t);
        finish_scatter(t);
    }

    // Padding: the margins outside the tensor hold zero for most readers, -infinity for max pooling; a periodic
    // tile's hold its far side (its halo).
    void set_padding(Tile& t, float v) {
        if (t.padding == v || t.periodic) return;
        t.padding = v;
        // The tensor's extent, in the padded buffer's coordinates.
        const Dims& d = global_dims(t.spec.layer);
        Space<Range> inside = Space<Range>::filled(d.rank(), Range{});
        for (int i = 0; i < d.rank(); ++i) {
            const std::int64_t first = t.box.space[i].lo - t.need[i].before;
            inside[i] = {-first, d.space[i] - first};
        }
        fill_outside(mem, t.y.padded(), inside, v);
    }

    // An input tile (and its halo) is made by the data source, never sent.
    // The part within the tensor, and a periodic tile's margins beyond its border from the far side.
    void make_input(DataSource& data, Tile& t, std::int64_t first) {
        if (t.gathered == step_index) return;
        t.gathered = step_index;
        const Dims& whole = global_dims(t.spec.layer);
        const Box want = t.box.grown(t.need);
        make_input_part(data, t, first, scheduler::Piece{0, want.meet(scheduler::whole_box(whole)), {}});
        if (t.periodic)
            for (const scheduler::Piece& p : scheduler::wrapped_parts(whole, want)) make_input_part(data, t, first, p);
    }

    // The inputs of `part.source()`, into `part.box` of the tile.
    void make_input_part(DataSource& data, Tile& t, std::int64_t first, const scheduler::Piece& part) {
        const Box& b = part.box;
        const std::int64_t sample0 = first + b.n.lo;
        const Index at = part.source().origin();
        const Layer& input = net.layers[static_cast<std::size_t>(t.spec.layer)];
        if (b.empty()) return;
        if (mem.host()) return data.inputs(input, sample0, at, view_of(t.y, t, b));
        if (const SyntheticData* synthetic = data.synthetic(input); synthetic && k.synthetic)
            return k.synthetic->inputs(*synthetic, sample0, at, view_of(t.y, t, b));
        // Made on the host, densely, then sent to where the kernels read it.
        const Dims bd = b.dims();
        host_tile.resize(static_cast<std::size_t>(bd.elements()));
        data.inputs(input, sample0, at, dense_view(host_tile.data(), bd));
        mem.upload(host_tile.data(), staging.reserve(bd.elements()), bd.elements());
        mem.unpack(staging.data(), view_of(t.y, t, b), false);
    }

    // A view's elements, densely, on the host.
    void to_host(ConstView v, std::vector<float>& out) {
        out.resize(static_cast<std::size_t>(v.dims.elements()));
        if (mem.host()) return mem.pack(v, out.data());
        mem.pack(v, staging.reserve(v.dims.elements()));
        mem.download(staging.data(), out.data(), v.dims.elements());
    }

    Tile& ready(DataSource* data, std::int64_t first, Tile& t) {
        if (net.layers[static_cast<std::size_t>(t.spec.layer)].op == OpKind::input) {
            DSL_INTERNAL_CHECK(data, "forward without data");
            make_input(*data, t, first);
        } else {
            gather(t);
        }
        return t;
    }

    // ---- Forward.

    // What a windowed layer's window reads of its input tile for its whole own tile (the plan's `read`), its
    // padding set.
    ConstView windowed_input(const Layer& l, int index) {
        Tile& in = *slots[static_cast<std::size_t>(index)].operands[0];
        set_padding(in, l.op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
        return view_of(in.y, in, plan_of(index).read);
    }

    double forward(DataSource& data, std::int64_t first, bool training) {
        ++step_index;
        step_first = first;
        step_training = training;
        step_data = &data;
        sent_bytes = 0;
        if (profiling) {
            profile.layers.assign(slots.size(), LayerTime{});
            profile.events.clear();
            open_allreduces.clear();
            allreduce_requests = 0;
            posted_open = segment_open = false;
            mark(Phase::forward, Kind::forward, 0);
            profile.start = segment.start;
        }
        if (training) clear_gradients(-1);  // a loss writes its logits' gradient in forward
        double loss = 0.0;
        losses.clear();
        for (std::size_t i = 0; i < slots.size(); ++i) {
            const auto t0 = Clock::now();
            waited = 0.0;
            if (slots[i].layer->op != OpKind::label) mark(Phase::forward, Kind::forward, static_cast<int>(i));
            forward_layer(data, first, training, i, loss);
            if (profiling) profile.layers[i].forward = layer_time(t0), profile.layers[i].forward_wait = waited;
        }
        return loss;
    }

    void forward_layer(DataSource& data, std::int64_t first, bool training, std::size_t i, double& loss) {
        Slot& s = slots[i];
        const Layer& l = *s.layer;
        const int index = static_cast<int>(i);
        // A recomputed layer's values go where the plan puts them in forward (backward moved them).
        if (!recomputing)
            for (auto& t : s.tiles)
                if (t->forward_buffer >= 0) bind(*t, t->forward_buffer);
        const bool overlapped = overlaps(index);
        for (Tile* t : s.operands)
            if (t && !overlapped) ready(&data, first, *t);
        auto in = [&](std::size_t j = 0) { return ConstView(s.operands[j]->y.interior()); };
        const View y = l.op == OpKind::label ? View{} : s.own().y.interior();
        switch (l.op) {
            case OpKind::input: make_input(data, s.own(), first); break;
            case OpKind::label: break;  // made by the loss over its logits' tile
            case OpKind::conv:
            case OpKind::maxpool:
            case OpKind::avgpool:
            case OpKind::upsample:
            case OpKind::deconv:
                if (overlapped)
                    overlapped_forward(s, index);
                else
                    windowed_forward(s, s.own().box);
                break;
            case OpKind::batchnorm: batchnorm_forward(s, training); break;
            case OpKind::groupnorm: groupnorm_forward(s); break;
            case OpKind::dropout:
                if (dropping(training))
                    k.dropout->forward(in(), dropout_mask(s, first), y);
                else
                    k.eltwise->copy(in(), y);
                break;
            case OpKind::global_avgpool: {
                const ConstView x = in();
                sums_a.assign(static_cast<std::size_t>(x.dims.n * x.dims.c), 0.0);
                k.pool->global_sum(x, sums_a.data());
                if (s.group)
                    wait(
                        Kind::wait_sum,
                        [&] { s.group->allreduce(sums_a.data(), static_cast<std::int64_t>(sums_a.size())); },
                        static_cast<std::int64_t>(sums_a.size() * sizeof(double)));
                const double area = static_cast<double>(global_dims(l.inputs[0]).points());
                scratch_values.resize(sums_a.size());
                for (std::size_t j = 0; j < sums_a.size(); ++j)
                    scratch_values[j] = static_cast<float>(sums_a[j] / area);
                k.pool->broadcast(scratch_values.data(), 1.0f, y);  // y is {n, c, 1, 1}
                break;
            }
            case OpKind::fc: k.fc->forward(in(), s.w.interior(), l.bias ? s.b.data() : nullptr, y); break;
            case OpKind::add: {
                std::vector<ConstView> xs;
                for (std::size_t j = 0; j < l.inputs.size(); ++j) xs.push_back(in(j));
                k.eltwise->add(xs, y);
                break;
            }
            case OpKind::concat: {
                std::int64_t c0 = 0;
                for (std::size_t j = 0; j < l.inputs.size(); ++j) {
                    const ConstView x = in(j);
                    k.eltwise->copy(x, y.channels(c0, x.dims.c));
                    c0 += x.dims.c;
                }
                break;
            }
            case OpKind::softmax_cross_entropy:
            case OpKind::pixel_cross_entropy:
            case OpKind::mse:
            case OpKind::l1:
            case OpKind::bce_with_logits:
                losses.push_back(LossValue{l.name, loss_layer(s, data, first, training), l.weight});
                loss += l.weight * losses.back().value;
                break;
            default:  // an element-wise kind: its function (layer_kinds.hpp)
                k.activation->forward(elementwise(l), in(), activation_slope(l), y);
                break;
        }
    }

    // Whether a windowed layer overlaps its input's halo exchange with the interior's compute, as the plan says.
    bool overlaps(int index) const { return plan_of(index).overlapped; }

    // The output of a windowed layer over `out` (global coordinates within its tile), from what its window
    // reads of the input tile.
    void windowed_forward(Slot& s, const Box& out) {
        const Layer& l = *s.layer;
        Tile& in = *s.operands[0];
        Tile& own = s.own();
        const Box read = scheduler::window_input(l, out, in.box.c.size());
        const ConstView x = view_of(in.y, in, read);
        const View y = view_of(own.y, own, out);
        switch (l.op) {
            case OpKind::upsample:
                DSL_INTERNAL_CHECK(k.upsample, "the kernel set has no kernels for upsampling");
                return k.upsample->forward(upsample_of(l, read, out), x, y);
            case OpKind::deconv:
                DSL_INTERNAL_CHECK(k.deconv, "the kernel set has no kernels for transposed convolutions");
                return k.deconv->forward(x, s.w.interior(), l.bias ? s.b.data() : nullptr, y, deconv_of(l, read, out));
            case OpKind::conv:
                set_padding(in, 0.0f);
                return k.conv->forward(x, s.w.interior(), l.bias ? s.b.data() : nullptr, y, window_of(l));
            default:
                set_padding(in, l.op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
                return k.pool->forward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, x, y, window_of(l));
        }
    }

    // Upsampling and transposed convolution: what an output reads depends on its global index, so the kernels
    // take the views' places; the input view is what `out` reads (tiles.hpp).
    Upsample upsample_of(const Layer& l, const Box& x, const Box& y) const {
        return Upsample{l.scale, l.linear_upsample(), global_dims(l.inputs[0]).space,
                        Placement{x.origin(), y.origin()}};
    }

    static Deconv deconv_of(const Layer& l, const Box& x, const Box& y) {
        return Deconv{l.kernel, l.stride, l.pad, Placement{x.origin(), y.origin()}};
    }

    // Posts the input's halo exchange, computes the outputs whose windows lie within what this process
    // holds (its interior, and padding at the tensor's border), then, once the halo is in, the strips that read
    // it (the plan's overlap).
    void overlapped_forward(Slot& s, int index) {
        const scheduler::OverlapParts& parts = plan_of(index).overlap;
        Tile& in = *s.operands[0];
        set_padding(in, s.layer->op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
        start_gather(in);
        if (!parts.inner.empty()) windowed_forward(s, parts.inner);
        finish_gather(in);
        for (const Box& strip : parts.strips) windowed_forward(s, strip);
    }

    // A loss's mean over the mini-batch (before its weight); in training, writes its logits' gradient, scaled
    // by the weight.
    double loss_layer(Slot& s, DataSource& data, std::int64_t first, bool training) {
        if (s.layer->kind().float_labels()) return regression_layer(s, data, first, training);
        const Layer& l = *s.layer;
        Tile& logits = *s.operands[0];
        const Layer& label = net.layers[static_cast<std::size_t>(l.inputs[1])];
        // The labels of the logits' tile: {n, 1, its spatial extents}, or {n, 1} for one label per sample.
        const bool spatial = label.spatial();
        const Dims ld{logits.box.n.size(), 1, spatial ? logits.box.extents() : Index{}};
        s.labels.resize(static_cast<std::size_t>(ld.elements()));
        data.labels(label, first + logits.box.n.lo, spatial ? logits.box.origin() : Index{},
                    dense_view(s.labels.data(), ld));
        // The kernel takes them in the logits' shape: a label per sample beside global pooling's 1x1 (or 1x1x1)
        // logits has the logits' extents of one.
        const BasicView<const std::int32_t> lv =
            dense_view<const std::int32_t>(s.labels.data(), Dims{ld.n, 1, logits.box.extents()});
        const Dims& whole = global_dims(l.inputs[1]);
        const double count = static_cast<double>(whole.n * whole.points());
        // The gradient is written here, in forward: added to what the logits' other readers (other losses
        // now, other layers in backward) add when there are any.
        double sum = 0.0;
        auto cross_entropy = [&](View grad) {
            sum = k.loss->cross_entropy(logits.y.interior(), lv, static_cast<float>(l.weight / count), grad);
        };
        if (training && !is_input(&logits))
            interior_gradient(logits, cross_entropy);
        else
            cross_entropy(View{});
        if (!logits.leader) sum = 0.0;  // its replicas' copy counts once
        wait(Kind::wait_sum, [&] { comm.allreduce(&sum, 1); }, sizeof(double));
        return sum / count;
    }

    // A regression loss: the targets of the prediction's tile (its samples, rows and columns, every channel)
    // from the data source, then the kernel; the mean is over every element of the whole prediction.
    double regression_layer(Slot& s, DataSource& data, std::int64_t first, bool training) {
        const Layer& l = *s.layer;
        Tile& prediction = *s.operands[0];
        const Layer& label = net.layers[static_cast<std::size_t>(l.inputs[1])];
        const ConstView x = prediction.y.interior();
        const Dims td = x.dims;
        host_targets.resize(static_cast<std::size_t>(td.elements()));
        data.targets(label, first + prediction.box.n.lo, label.spatial() ? prediction.box.origin() : Index{},
                     dense_view(host_targets.data(), td));
        ConstView t = dense_view<const float>(host_targets.data(), td);
        if (!mem.host()) {
            mem.upload(host_targets.data(), targets.reserve(td.elements()), td.elements());
            t = dense_view<const float>(targets.data(), td);
        }
        const double count = static_cast<double>(global_dims(l.inputs[0]).elements());
        double sum = 0.0;
        auto compute = [&](View grad) {
            sum = k.loss->regression(l.kind().regression, x, t, static_cast<float>(l.weight / count), grad);
        };
        if (training && !is_input(&prediction))
            interior_gradient(prediction, compute);
        else
            compute(View{});
        if (!prediction.leader) sum = 0.0;  // its replicas' copy counts once
        wait(Kind::wait_sum, [&] { comm.allreduce(&sum, 1); }, sizeof(double));
        return sum / count;
    }

    // The number of elements per channel that a batch-norm group sums over.
    double group_count(const Slot& s) const {
        const Box& b = s.operands[0]->box;
        const Dims& whole = global_dims(s.layer->inputs[0]);
        if (!s.group) return static_cast<double>(b.points());
        if (s.group == &comm) return static_cast<double>(whole.n * whole.points());
        return static_cast<double>(b.n.size() * whole.points());  // a sample group
    }

    void batchnorm_forward(Slot& s, bool training) {
        const Layer& l = *s.layer;
        const ConstView x = s.operands[0]->y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        if (recomputing) {
            // The step's statistics, kept from its forward: the same values, and running ones not moved twice.
        } else if (training) {
            sums_a.assign(channels, 0.0);
            sums_b.assign(channels, 0.0);
            k.batchnorm->statistics(x, sums_a.data(), sums_b.data());
            group_sum(s, s.operands[0]->leader);
            const double count = group_count(s);
            for (std::size_t c = 0; c < channels; ++c) {
                const double mean = sums_a[c] / count;
                const double var = std::max(0.0, sums_b[c] / count - mean * mean);
                s.mean[c] = static_cast<float>(mean);
                s.inv_std[c] = static_cast<float>(1.0 / std::sqrt(var + l.eps));
                // PyTorch's running variance is unbiased.
                const double unbiased = count > 1 ? var * count / (count - 1) : var;
                s.running_mean[c] = static_cast<float>((1 - l.momentum) * s.running_mean[c] + l.momentum * mean);
                s.running_var[c] = static_cast<float>((1 - l.momentum) * s.running_var[c] + l.momentum * unbiased);
            }
        } else {
            for (std::size_t c = 0; c < channels; ++c) {
                s.mean[c] = s.running_mean[c];
                s.inv_std[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.running_var[c]) + l.eps));
            }
        }
        k.batchnorm->forward(x, s.mean.data(), s.inv_std.data(), s.w.data(), s.b.data(), s.own().y.interior());
    }

    // Sums sums_a and sums_b over the slot's group; a replica that does not speak adds nothing.
    void group_sum(Slot& s, bool speaks) {
        if (!s.group) return;
        if (!speaks) std::fill(sums_a.begin(), sums_a.end(), 0.0), std::fill(sums_b.begin(), sums_b.end(), 0.0);
        std::vector<double> both(sums_a);
        both.insert(both.end(), sums_b.begin(), sums_b.end());
        wait(
            Kind::wait_sum, [&] { s.group->allreduce(both.data(), static_cast<std::int64_t>(both.size())); },
            static_cast<std::int64_t>(both.size() * sizeof(double)));
        std::copy_n(both.begin(), sums_a.size(), sums_a.begin());
        std::copy(both.begin() + static_cast<std::ptrdiff_t>(sums_a.size()), both.end(), sums_b.begin());
    }

    // ---- Backward.

    // Writes an input's gradient through `compute(target)`: straight into the tile's gradient when this layer
    // is its only reader, else into scratch that is then added to it.
    template <typename Compute>
    void input_gradient(Tile& in, const Box& part, Compute&& compute) {
        const View target = view_of(in.dy, in, part);
        if (in.readers == 1) {
            compute(target);
            return;
        }
        const View computed = dense_view(scratch.reserve(target.dims.elements()), target.dims);
        compute(computed);
        k.eltwise->accumulate(computed, target);
    }

    template <typename Compute>
    void interior_gradient(Tile& in, Compute&& compute) {
        input_gradient(in, in.box, std::forward<Compute>(compute));
    }

    bool is_input(const Tile* t) const {
        return net.layers[static_cast<std::size_t>(t->spec.layer)].op == OpKind::input;
    }

    // Starts the sum of a layer's weight gradients over every process; a replica that does not speak for
    // its group adds zeros.
    void allreduce_gradients(Slot& s, bool speaks) {
        if (comm.size() == 1) return;
        if (!speaks) {
            mem.fill(s.dw.padded(), 0.0f);
            if (s.db.size() > 0) mem.fill(s.db.padded(), 0.0f);
        }
        if (profiling) {
            const std::size_t requests = (s.dw.size() > 0 ? 1 : 0) + (s.db.size() > 0 ? 1 : 0);
            open_allreduces.push_back(OpenAllreduce{profile.events.size(), allreduce_requests, requests});
            allreduce_requests += requests;
            const auto bytes = static_cast<std::int64_t>(sizeof(float)) * (s.dw.size() + s.db.size());
            const double t = now();
            profile.events.push_back(ProfileEvent{Kind::allreduce, Phase::backward, segment.layer, t, t, bytes});
        }
        comm.start_allreduce(s.dw.data(), s.dw.size());
        if (s.db.size() > 0) comm.start_allreduce(s.db.data(), s.db.size());
    }

    // The compute a layer's backward begins with: its input's gradient where it has weights too (an fc
    // layer's weight gradient comes first), else the whole of it.
    Kind first_backward_part(const Slot& s) const {
        const Layer& l = *s.layer;
        if (l.op == OpKind::fc) return Kind::backward_weights;
        if (l.op == OpKind::conv || l.op == OpKind::deconv)
            return is_input(s.operands[0]) ? Kind::backward_weights : Kind::backward_data;
        return Kind::backward;
    }

    void backward() {
        for (int index = static_cast<int>(slots.size()) - 1; index >= 0; --index) {
            const auto t0 = Clock::now();
            waited = 0.0;
            const Slot& s = slots[static_cast<std::size_t>(index)];
            if (!s.layer->is_data()) mark(Phase::backward, first_backward_part(s), index);
            recompute_for(index);
            backward_layer(index);
            if (profiling) {
                LayerTime& t = profile.layers[static_cast<std::size_t>(index)];
                t.backward = layer_time(t0), t.backward_wait = waited;
            }
        }
    }

    // Runs again the forward of the recomputed layers whose values the backward of layer `index` reads (the
    // plan's order: each after those it reads), into the memory the plan gives them in backward, and fills
    // their tiles' halos and copies as forward did. Every process runs the same ones in the same order, so
    // their exchanges meet.
    void recompute_for(int index) {
        const std::vector<int>& layers = plan_of(index).recompute_before;
        if (layers.empty()) return;
        DSL_INTERNAL_CHECK(step_data, "recomputation without the step's data");
        recomputing = true;
        double unused = 0.0;
        for (int q : layers) {
            for (auto& t : slots[static_cast<std::size_t>(q)].tiles) bind(*t, t->backward_buffer);
            forward_layer(*step_data, step_first, step_training, static_cast<std::size_t>(q), unused);
        }
        recomputing = false;
        for (int q : layers)
            for (auto& t : slots[static_cast<std::size_t>(q)].tiles) gather(*t);
    }

    void backward_layer(int index) {
        Slot& s = slots[static_cast<std::size_t>(index)];
        const Layer& l = *s.layer;
        clear_gradients(static_cast<int>(slots.size()) - 1 - index);
        // Every reader has written its part of this layer's gradient: gather it from the margins and copies
        // where the readers left it.
        if (!l.is_data())
            for (auto& t : s.tiles) scatter(*t);
        comm.progress();  // the weight-gradient allreduces started so far
        observe_allreduces(false);
        const bool speaks = l.op == OpKind::label ? true : s.own().leader;
        switch (l.op) {
            case OpKind::input:
            case OpKind::label:
            case OpKind::softmax_cross_entropy:
            case OpKind::pixel_cross_entropy:
            case OpKind::mse:
            case OpKind::l1:
            case OpKind::bce_with_logits: break;  // the loss wrote its gradient in forward
            case OpKind::conv: {
                const Window w = window_of(l);
                Tile& in = *s.operands[0];
                if (!is_input(&in))
                    input_gradient(in, plan_of(index).read, [&](View dx) {
                        k.conv->backward_data(s.own().dy.interior(), s.w.interior(), dx, w);
                    });
                mark(Phase::backward, Kind::backward_weights, index);
                // With overlap, when this layer is the only reader of its input, the input's gradient is
                // complete here: its halo goes back to the neighbours while the weight gradient is computed.
                const bool send_now = overlap_of(index) && !is_input(&in) && !in.copy && in.readers == 1;
                if (send_now) start_scatter(in);
                k.conv->backward_weights(windowed_input(l, index), s.own().dy.interior(), s.dw.interior(),
                                         l.bias ? s.db.data() : nullptr, w);
                if (send_now) finish_scatter(in);
                allreduce_gradients(s, speaks);
                break;
            }
            case OpKind::upsample: {
                Tile& in = *s.operands[0];
                if (is_input(&in)) break;
                const Box& read = plan_of(index).read;
                input_gradient(in, read, [&](View dx) {
                    k.upsample->backward(upsample_of(l, read, s.own().box), s.own().dy.interior(), dx);
                });
                break;
            }
            case OpKind::deconv: {
                Tile& in = *s.operands[0];
                const Box& read = plan_of(index).read;
                const Deconv d = deconv_of(l, read, s.own().box);
                if (!is_input(&in))
                    input_gradient(in, read, [&](View dx) {
                        k.deconv->backward_data(s.own().dy.interior(), s.w.interior(), dx, d);
                    });
                mark(Phase::backward, Kind::backward_weights, index);
                const bool send_now = overlap_of(index) && !is_input(&in) && !in.copy && in.readers == 1;
                if (send_now) start_scatter(in);
                k.deconv->backward_weights(view_of(in.y, in, read), s.own().dy.interior(), s.dw.interior(),
                                           l.bias ? s.db.data() : nullptr, d);
                if (send_now) finish_scatter(in);
                allreduce_gradients(s, speaks);
                break;
            }
            case OpKind::maxpool:
            case OpKind::avgpool: {
                Tile& in = *s.operands[0];
                if (is_input(&in)) break;
                const ConstView x = windowed_input(l, index);
                input_gradient(in, plan_of(index).read, [&](View dx) {
                    k.pool->backward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, x,
                                     s.own().dy.interior(), dx, window_of(l));
                });
                break;
            }
            case OpKind::batchnorm: batchnorm_backward(s, speaks); break;
            case OpKind::groupnorm: groupnorm_backward(s, speaks); break;
            case OpKind::dropout: {
                Tile& in = *s.operands[0];
                if (is_input(&in)) break;
                interior_gradient(in, [&](View dx) {
                    if (dropping(step_training))
                        k.dropout->backward(s.own().dy.interior(), dropout_mask(s, step_first), dx);
                    else
                        k.eltwise->copy(s.own().dy.interior(), dx);
                });
                break;
            }
            case OpKind::global_avgpool: {
                Tile& in = *s.operands[0];
                if (is_input(&in)) break;
                to_host(s.own().dy.interior(), scratch_values);  // {n, c, 1, 1}: values[n * C + c]
                const std::int64_t area = global_dims(l.inputs[0]).points();
                interior_gradient(in, [&](View dx) {
                    k.pool->broadcast(scratch_values.data(), 1.0f / static_cast<float>(area), dx);
                });
                break;
            }
            case OpKind::fc: {
                Tile& in = *s.operands[0];
                k.fc->backward_weights(in.y.interior(), s.own().dy.interior(), s.dw.interior(),
                                       l.bias ? s.db.data() : nullptr);
                allreduce_gradients(s, speaks);
                if (is_input(&in)) break;
                mark(Phase::backward, Kind::backward_data, index);
                interior_gradient(in, [&](View dx) { k.fc->backward_data(s.own().dy.interior(), s.w.interior(), dx); });
                break;
            }
            case OpKind::add:
                for (Tile* in : s.operands) {
                    if (is_input(in)) continue;
                    interior_gradient(*in, [&](View dx) { k.eltwise->copy(s.own().dy.interior(), dx); });
                }
                break;
            case OpKind::concat: {
                std::int64_t c0 = 0;
                for (Tile* in : s.operands) {
                    const Dims d = in->y.dims();
                    if (!is_input(in))
                        interior_gradient(
                            *in, [&](View dx) { k.eltwise->copy(s.own().dy.interior().channels(c0, d.c), dx); });
                    c0 += d.c;
                }
                break;
            }
            default: {  // an element-wise kind: its function (layer_kinds.hpp)
                Tile& in = *s.operands[0];
                if (is_input(&in)) break;
                interior_gradient(in, [&](View dx) {
                    k.activation->backward(elementwise(l), in.y.interior(), s.own().dy.interior(), activation_slope(l),
                                           dx);
                });
                break;
            }
        }
    }

    void batchnorm_backward(Slot& s, bool speaks) {
        Tile& in = *s.operands[0];
        const ConstView x = in.y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        sums_a.assign(channels, 0.0);
        sums_b.assign(channels, 0.0);
        k.batchnorm->backward_statistics(x, s.own().dy.interior(), s.mean.data(), s.inv_std.data(), sums_a.data(),
                                         sums_b.data());
        // This tile's part of d(beta) and d(gamma); the allreduce over every process adds the rest.
        scratch_values.resize(2 * channels);
        for (std::size_t c = 0; c < channels; ++c) {
            scratch_values[c] = static_cast<float>(sums_a[c]);
            scratch_values[channels + c] = static_cast<float>(sums_b[c]);
        }
        mem.upload(scratch_values.data(), s.db.data(), s.db.size());
        mem.upload(scratch_values.data() + channels, s.dw.data(), s.dw.size());
        allreduce_gradients(s, speaks);
        if (is_input(&in)) return;
        group_sum(s, speaks);
        const double count = group_count(s);
        interior_gradient(in, [&](View dx) {
            k.batchnorm->backward(x, s.own().dy.interior(), s.mean.data(), s.inv_std.data(), s.w.data(), sums_a.data(),
                                  sums_b.data(), count, dx);
        });
    }

    // ---- Group norm: statistics per sample and group of channels, summed over the processes that hold
    // the sample's tiles (the layer's sample group: plan_groups), in double, as batch norm's are.

    // The elements of each (sample, group) over the whole tensor: C / G channels of every row and column.
    double groupnorm_count(const Slot& s) const {
        const Dims& whole = global_dims(s.layer->inputs[0]);
        return static_cast<double>(whole.c / s.layer->groups * whole.points());
    }

    void groupnorm_forward(Slot& s) {
        const Layer& l = *s.layer;
        const ConstView x = s.operands[0]->y.interior();
        const auto stats = static_cast<std::size_t>(x.dims.n * l.groups);
        sums_a.assign(stats, 0.0);
        sums_b.assign(stats, 0.0);
        k.groupnorm->statistics(x, l.groups, sums_a.data(), sums_b.data());
        group_sum(s, s.operands[0]->leader);
        const double count = groupnorm_count(s);
        s.mean.resize(stats);
        s.inv_std.resize(stats);
        for (std::size_t g = 0; g < stats; ++g) {
            const double mean = sums_a[g] / count;
            const double var = std::max(0.0, sums_b[g] / count - mean * mean);  // biased, as PyTorch's
            s.mean[g] = static_cast<float>(mean);
            s.inv_std[g] = static_cast<float>(1.0 / std::sqrt(var + l.eps));
        }
        k.groupnorm->forward(x, l.groups, s.mean.data(), s.inv_std.data(), s.w.data(), s.b.data(),
                             s.own().y.interior());
    }

    void groupnorm_backward(Slot& s, bool speaks) {
        const Layer& l = *s.layer;
        Tile& in = *s.operands[0];
        const ConstView x = in.y.interior();
        const auto channels = static_cast<std::size_t>(x.dims.c);
        const auto stats = static_cast<std::size_t>(x.dims.n * l.groups);
        std::vector<double> d_beta(channels, 0.0), d_gamma(channels, 0.0);
        sums_a.assign(stats, 0.0);
        sums_b.assign(stats, 0.0);
        k.groupnorm->backward_statistics(x, s.own().dy.interior(), l.groups, s.mean.data(), s.inv_std.data(),
                                         s.w.data(), d_beta.data(), d_gamma.data(), sums_a.data(), sums_b.data());
        // This tile's part of d(beta) and d(gamma); the allreduce over every process adds the rest.
        scratch_values.resize(2 * channels);
        for (std::size_t c = 0; c < channels; ++c) {
            scratch_values[c] = static_cast<float>(d_beta[c]);
            scratch_values[channels + c] = static_cast<float>(d_gamma[c]);
        }
        mem.upload(scratch_values.data(), s.db.data(), s.db.size());
        mem.upload(scratch_values.data() + channels, s.dw.data(), s.dw.size());
        allreduce_gradients(s, speaks);
        if (is_input(&in)) return;
        group_sum(s, speaks);
        const double count = groupnorm_count(s);
        interior_gradient(in, [&](View dx) {
            k.groupnorm->backward(x, s.own().dy.interior(), l.groups, s.mean.data(), s.inv_std.data(), s.w.data(),
                                  sums_a.data(), sums_b.data(), count, dx);
        });
    }

    // ---- Dropout: on in training steps unless the config turns it off (evaluation).
    bool dropping(bool training) const { return training && config.training; }

    // The mask of a dropout layer's own tile in the step whose first sample is `first`: its key is the seed's
    // and the layer's, its step the mini-batch's index (first / batch, as `dsl run` numbers steps, so that a
    // resumed run draws what an uninterrupted one does), its coordinates global.
    DropoutMask dropout_mask(const Slot& s, std::int64_t first) const {
        const Tile& t = *s.tiles.front();
        DropoutMask m;
        m.key = splitmix64(config.seed ^ 0x64726f706f7574ull) ^ name_hash(s.layer->name);  // "dropout"
        m.step = first / config.batch;
        m.n0 = first + t.box.n.lo;
        m.at = t.box.origin();
        m.p = static_cast<float>(s.layer->p);
        return m;
    }

    void update() {
        const auto t0 = Clock::now();
        waited = 0.0;
        mark(Phase::update, Kind::update, -1);
        wait(Kind::wait_allreduces, [&] { comm.finish_allreduces(); });
        observe_allreduces(true);
        allreduce_requests = 0;
        // The same on every process: the schedule's rate at this step, and Adam's t.
        last_lr = config.schedule.lr(config.lr, updates);
        ++updates;
        if (config.optimizer == frontend::Optimizer::sgd) {
            const auto lr = static_cast<float>(last_lr), momentum = static_cast<float>(config.momentum),
                       decay = static_cast<float>(config.weight_decay);
            for (Slot& s : slots) {
                if (s.w.size() == 0) continue;
                k.eltwise->sgd(s.w.data(), s.mw.data(), s.dw.data(), s.w.size(), lr, momentum, decay);
                if (s.b.size() > 0)
                    k.eltwise->sgd(s.b.data(), s.mb.data(), s.db.data(), s.b.size(), lr, momentum, decay);
            }
        } else {
            const AdamStep a = adam_step(config.optimizer == frontend::Optimizer::adamw, last_lr, config.beta1,
                                         config.beta2, config.eps, config.weight_decay, updates);
            for (Slot& s : slots) {
                if (s.w.size() == 0) continue;
                k.eltwise->adam(s.w.data(), s.mw.data(), s.vw.data(), s.dw.data(), s.w.size(), a);
                if (s.b.size() > 0) k.eltwise->adam(s.b.data(), s.mb.data(), s.vb.data(), s.db.data(), s.b.size(), a);
            }
        }
        if (profiling) {
            profile.update = layer_time(t0), profile.update_wait = waited;
            profile.end = now();
            close_segment(profile.end);
            segment_open = false;
        }
    }
};

bool is_compute(ProfileEvent::Kind kind) {
    using Kind = ProfileEvent::Kind;
    return kind == Kind::forward || kind == Kind::backward || kind == Kind::backward_data ||
           kind == Kind::backward_weights || kind == Kind::update || kind == Kind::wait_halo ||
           kind == Kind::wait_shuffle || kind == Kind::wait_halo_back || kind == Kind::wait_shuffle_back ||
           kind == Kind::wait_sum || kind == Kind::wait_allreduces || kind == Kind::wait_others;
}

double profile_clock() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Trainer::Trainer(const frontend::Network& net, Kernels kernels, TrainConfig config, const scheduler::Plan& plan,
                 Comm* comm)
    : impl_(std::make_unique<Impl>(net, kernels, config, plan, comm)) {}

Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;
Trainer::~Trainer() = default;

double Trainer::step(DataSource& data, std::int64_t first) {
    const double loss = impl_->forward(data, first, true);
    impl_->backward();
    impl_->update();
    return loss;
}

double Trainer::evaluate(DataSource& data, std::int64_t first) { return impl_->forward(data, first, false); }

const std::vector<LossValue>& Trainer::last_losses() const { return impl_->losses; }

OutputTile Trainer::output_tile(int layer) {
    Impl& m = *impl_;
    DSL_INTERNAL_CHECK(layer >= 0 && static_cast<std::size_t>(layer) < m.slots.size(), "output_tile: no such layer");
    Impl::Slot& s = m.slots[static_cast<std::size_t>(layer)];
    DSL_INTERNAL_CHECK(s.layer->op != OpKind::label && !s.layer->is_loss(), "output_tile: a layer without values");
    const Impl::Tile& t = s.own();
    if (t.forward_buffer >= 0 && t.readers > 0)
        throw UserError("layer '" + s.layer->name +
                        "' is recomputed under this schedule (recompute=on): its values are not kept after forward; "
                        "read it under a schedule that keeps it");
    OutputTile out;
    out.n0 = t.box.n.lo;
    out.at = t.box.origin();
    out.leader = t.leader;
    out.dims = t.y.dims();
    m.to_host(s.own().y.interior(), out.values);
    return out;
}

std::int64_t Trainer::updates() const { return impl_->updates; }

void Trainer::set_updates(std::int64_t n) {
    impl_->updates = n;
    impl_->last_lr = impl_->config.schedule.lr(impl_->config.lr, n);
}

double Trainer::last_lr() const { return impl_->last_lr; }

const TrainConfig& Trainer::config() const { return impl_->config; }

// The parameters and momenta of a GPU run are copied to the host (host_state) for the caller, and back by
// state_written; batch-norm running statistics are on the host already.
std::vector<StateTensor> Trainer::state() {
    std::vector<StateTensor> out;
    std::vector<bool> in_kernel_memory;
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float* data, std::int64_t size,
                   bool kernel_memory = true) {
        out.push_back(StateTensor{name, std::move(shape), data, size});
        in_kernel_memory.push_back(kernel_memory);
    };
    for (auto& s : impl_->slots) {
        const Layer& l = *s.layer;
        if (s.w.size() == 0) continue;
        const Dims d = s.w.dims();
        std::vector<std::int64_t> wshape;
        if (l.op == OpKind::conv || l.op == OpKind::deconv) {
            wshape = {d.n, d.c};
            wshape.insert(wshape.end(), d.space.begin(), d.space.end());
        }
        if (l.op == OpKind::fc) wshape = {d.n, d.c};
        if (l.op == OpKind::batchnorm || l.op == OpKind::groupnorm) wshape = {d.c};
        const std::int64_t bsize = s.b.size();
        const std::vector<std::int64_t> bshape{bsize};
        add(l.name + ".weight", wshape, s.w.data(), s.w.size());
        if (bsize > 0) add(l.name + ".bias", bshape, s.b.data(), bsize);
        if (l.op == OpKind::batchnorm) {
            add(l.name + ".running_mean", bshape, s.running_mean.data(), bsize, false);
            add(l.name + ".running_var", bshape, s.running_var.data(), bsize, false);
        }
        if (impl_->config.optimizer == frontend::Optimizer::sgd) {
            add(l.name + ".weight.momentum", wshape, s.mw.data(), s.mw.size());
            if (bsize > 0) add(l.name + ".bias.momentum", bshape, s.mb.data(), bsize);
        } else {
            add(l.name + ".weight.exp_avg", wshape, s.mw.data(), s.mw.size());
            add(l.name + ".weight.exp_avg_sq", wshape, s.vw.data(), s.vw.size());
            if (bsize > 0) {
                add(l.name + ".bias.exp_avg", bshape, s.mb.data(), bsize);
                add(l.name + ".bias.exp_avg_sq", bshape, s.vb.data(), bsize);
            }
        }
    }
    Memory& mem = impl_->mem;
    if (mem.host()) return out;
    auto& copies = impl_->host_state;
    copies.clear();
    copies.reserve(out.size());  // the host pointers handed out stay where they are
    for (std::size_t i = 0; i < out.size(); ++i) {
        if (!in_kernel_memory[i]) continue;
        auto& copy = copies.emplace_back(Impl::StateCopy{out[i].data, std::vector<float>(out[i].size)});
        mem.download(copy.kernel, copy.host.data(), out[i].size);
        out[i].data = copy.host.data();
    }
    return out;
}

void Trainer::state_written() {
    for (auto& s : impl_->host_state)
        impl_->mem.upload(s.host.data(), s.kernel, static_cast<std::int64_t>(s.host.size()));
}

void Trainer::profile(bool on) { impl_->profiling = on; }

const StepProfile& Trainer::last_profile() const { return impl_->profile; }

std::int64_t Trainer::halo_bytes() const { return impl_->sent_bytes; }

std::int64_t Trainer::memory_bytes() const {
    std::int64_t floats = 0;
    for (const auto& s : impl_->slots) {
        for (const auto& t : s.tiles) {
            if (t->forward_buffer < 0) floats += t->y.size();  // recomputed values are in value_buffers
            for (const auto* m : {&t->forward_messages, &t->backward_messages})
                for (const auto* buffers : {&m->sends, &m->receives})
                    for (const auto& buffer : *buffers) floats += buffer.size();
        }
        floats +=
            s.w.size() + s.dw.size() + s.mw.size() + s.b.size() + s.db.size() + s.mb.size() + s.vw.size() + s.vb.size();
        floats += static_cast<std::int64_t>(s.mean.size() * 4) + static_cast<std::int64_t>(s.labels.size());
    }
    floats += impl_->targets.size() + static_cast<std::int64_t>(impl_->host_targets.size());
    for (const auto& b : impl_->grad_buffers) floats += b.size();
    for (const auto& b : impl_->value_buffers) floats += b.size();
    return 4 * floats;
}

}  // namespace dsl::backend
