// The trainer's tiles and buffers, as the plan places and sizes them, its process groups, and the initial
// parameters, each element a pure function of (seed, layer name, index).
#include "../kinds/kind.hpp"

#include <dsl/backend/kinds.hpp>
#include "../random/initial_values.hpp"
#include "trainer_impl.hpp"

#include <algorithm>
#include <functional>

namespace dsl::backend {

Trainer::Impl::Impl(const frontend::Network& n, Kernels kernels, TrainConfig c, scheduler::Plan p, Comm* shared)
    : net(n),
      k(kernels),
      mem(kernels.mem()),
      config(c),
      plan(std::move(p)),
      self(shared ? nullptr : self_comm()),
      comm(shared ? *shared : *self),
      scratch(mem),
      staging(mem),
      targets(mem),
      timeline(mem) {
    DSL_INTERNAL_CHECK(plan.layers.size() == net.layers.size() && plan.procs == comm.size() &&
                           plan.rank == comm.rank() && plan.batch == config.batch,
                       "a plan for another network, process or mini-batch");
    slots.resize(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) slots[i].layer = &net.layers[i];
    paths = scheduler::kernel_paths(net, plan, kind_costs(), facts());
    allocate();
    make_groups();
    place_blocks();
    initialize();
    if (config.optimizer != frontend::Optimizer::sgd)
        for (Slot& s : slots) {
            if (s.w.size() > 0) s.vw = Tensor(s.w.dims(), {}, mem);
            if (s.b.size() > 0) s.vb = Tensor(s.b.dims(), {}, mem);
        }
    place_gradients();
    place_parameters();
    place_filter_blocks();
    fuse_relus();
    last_lr = config.schedule.lr(config.lr, 0);
    scaling.scale = config.loss_scale;
}

// What the plan's paths depend on that this run has: its kernels, its memory and its options. Node memory is
// assumed where the kernels' memory is the host's; place_parameters and place_gradients find out.
scheduler::RunFacts Trainer::Impl::facts() const {
    scheduler::RunFacts f;
    f.device = mem.host() ? scheduler::Device::cpu : scheduler::Device::gpu;
    f.training = config.training;
    f.blocked_kernels = k.blocked && mem.host();
    if (!k.blocked) f.planar_why = k.planar_why;
    f.bfloat16_products = k.conv16(scheduler::Precision::bfloat16) != nullptr;
    f.float16_products = k.conv16(scheduler::Precision::float16) != nullptr;
    f.node_memory = mem.host();
    f.loss_scaling = config.loss_scale > 0.0;
    f.filter_blocks = config.filter_blocks;
    return f;
}

// The plan's tiles in the kernels' memory: values with their margins, gradients over the buffers the plan
// shares among them, and a message buffer for every piece of their exchanges.
void Trainer::Impl::allocate() {
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
    shared_buffers.clear();
    shared_buffers.reserve(plan.buffers.size());
    for (std::int64_t size : plan.buffers) shared_buffers.emplace_back(mem).resize(size);
    // A blocked tile (layouts.cpp) has margins only where it is split: its readers pad it themselves elsewhere.
    for (std::size_t i = 0; i < slots.size(); ++i) {
        if (slots[i].layer->op == OpKind::label) continue;
        if (paths[i].on(scheduler::PathKind::blocked)) {
            Tile& t = slots[i].own();
            t.need = blocked_margins(t);
            t.lanes = blocked_lanes;
        }
        for (auto& t : slots[i].tiles)
            if (t->forward_buffer >= 0)
                bind(*t, t->forward_buffer);
            else
                t->y = Tensor(t->box.dims(), t->need, mem, t->lanes);
        // Two 16-bit values to a float of the buffer.
        if (plan.layers[i].stored)
            slots[i].own().stored.emplace(mem).resize((slots[i].own().box.dims().elements() + 1) / 2);
    }
    for (Slot& s : slots)
        for (auto& t : s.tiles)
            if (t->grad_buffer >= 0)
                t->dy = Tensor::over(shared_buffers[static_cast<std::size_t>(t->grad_buffer)].data(), t->y.dims(),
                                     t->need, t->lanes);
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
void Trainer::Impl::bind(Tile& t, int buffer) {
    t.y = Tensor::over(shared_buffers[static_cast<std::size_t>(buffer)].data(), t.box.dims(), t.need, t.lanes);
    t.y.fill_margins(0.0f, mem);
    t.padding = 0.0f;
    t.gathered = -1;
}

// Before the first write of a gradient: zero where it is accumulated (or partly written), and the margins
// that go back to the neighbours. A tile's gradient that several readers add up is zeroed only in its
// margins: the first reader that writes all of its interior writes it (`writes`), which saves a pass
// over it and one through scratch.
void Trainer::Impl::clear_gradients(int position) {
    for (Slot& s : slots)
        for (auto& t : s.tiles) {
            if (t->dy.size() == 0 || t->grad_first != position) continue;
            t->unwritten = t->zero_grad && !t->copy && t->readers > 1;
            if (t->unwritten || (!t->zero_grad && !t->backward.empty()))
                t->dy.fill_margins(0.0f, mem);
            else if (t->zero_grad)
                mem.fill(t->dy.padded(), 0.0f);
        }
}

// The plan's process groups: each split's sample group is made once, in the order of the layers, the same
// on every process.
void Trainer::Impl::make_groups() {
    std::vector<std::pair<std::string, Comm*>> made;
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const scheduler::GroupPlan& g = plan.layers[i].group;
        switch (g.kind) {
            case scheduler::GroupPlan::Kind::none: slots[i].group = nullptr; break;
            case scheduler::GroupPlan::Kind::every: slots[i].group = &comm; break;
            case scheduler::GroupPlan::Kind::samples:
            case scheduler::GroupPlan::Kind::channels: {
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

// A parameter in the kernels' memory: the process's block of the whole one, made on the host from `value`
// of each element's index in the whole one (so that no process makes the whole one). Its dims are the block's
// rows and columns with the whole one's kernel (`whole`'s points).
Tensor Trainer::Impl::parameter(const Block& block, const Dims& whole, const Values& value) {
    Tensor t(Dims{block.rows.size(), block.cols.size(), whole.space}, {}, mem);
    std::vector<float> held;
    held.reserve(static_cast<std::size_t>(block.elements()));
    block.each([&](std::int64_t i) { held.push_back(value(i)); });
    mem.upload(held.data(), t.data(), t.size());
    return t;
}

// A layer's parameters with their gradient and momentum buffers: its weights (or scale) of whole dims `wd`,
// and its bias (or shift) where `bias` is given.
void Trainer::Impl::set_parameters(Slot& s, Dims wd, const Values& weight, const Values& bias) {
    s.whole = wd;
    s.w = parameter(weight_block(s), wd, weight);
    s.dw = Tensor(s.w.dims(), {}, mem);
    s.mw = Tensor(s.w.dims(), {}, mem);
    if (!bias) return;
    const Block b = bias_block(s);
    s.b = parameter(b, Dims{1, b.total, {}}, bias);
    s.db = Tensor(s.b.dims(), {}, mem);
    s.mb = Tensor(s.b.dims(), {}, mem);
}

// A layer's weights, and its bias (when it has one) uniform in +-bound, PyTorch's default for every bias,
// drawn from the complement of its weights' stream.
void Trainer::Impl::set_weights(Slot& s, Dims wd, const Values& weight, double bound, std::uint64_t stream) {
    Values bias;
    if (s.layer->bias)
        bias = [=](std::int64_t i) {
            return static_cast<float>(bound * (2.0 * uniform(~stream, static_cast<std::uint64_t>(i)) - 1.0));
        };
    set_parameters(s, wd, weight, bias);
}

// Each layer's parameters as its kind initializes them, from the seed's and the layer's stream.
void Trainer::Impl::initialize() {
    for (std::size_t index = 0; index < slots.size(); ++index) {
        Slot& s = slots[index];
        const std::uint64_t stream = splitmix64(config.seed) ^ name_hash(s.layer->name);
        rules_of(s.layer->op).initialize(*this, s, static_cast<int>(index), stream);
    }
}

}  // namespace dsl::backend
