// The trainer made: its parts (the tiles and buffers as the plan places and sizes them, the exchanges' message
// buffers, the optimizer's moments), its process groups, and the initial parameters, each element a pure
// function of (seed, layer name, index).
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
      timeline(mem),
      tiles(plan, k),
      exchanges(plan, k, comm, tiles, timeline),
      stats(net.layers.size(), timeline),
      optimizer(config, k, comm, timeline),
      targets(mem) {
    DSL_INTERNAL_CHECK(plan.layers.size() == net.layers.size() && plan.procs == comm.size() &&
                           plan.rank == comm.rank() && plan.batch == config.batch,
                       "a plan for another network, process or mini-batch");
    slots.resize(net.layers.size());
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        slots[i].layer = &net.layers[i];
        slots[i].index = static_cast<int>(i);
    }
    paths = scheduler::kernel_paths(net, plan, kind_costs(), facts());
    tiles.allocate(slots, paths);
    exchanges.allocate(slots);
    make_groups();
    place_blocks();
    initialize();
    optimizer.place(slots, holder_groups, paths);
    place_filter_blocks();
    fuse_relus();
}

// What the plan's paths depend on that this run has: its kernels, its memory and its options. Node memory is
// assumed where the kernels' memory is the host's; the optimizer finds out where it places them (optimizer.cpp).
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

// A layer's parameters with their gradients: its weights (or scale) of whole dims `wd`, and its bias (or
// shift) where `bias` is given (their moments: the optimizer's).
void Trainer::Impl::set_parameters(Slot& s, Dims wd, const Values& weight, const Values& bias) {
    s.whole = wd;
    s.w = parameter(weight_block(s), wd, weight);
    s.dw = Tensor(s.w.dims(), {}, mem);
    if (!bias) return;
    const Block b = bias_block(s);
    s.b = parameter(b, Dims{1, b.total, {}}, bias);
    s.db = Tensor(s.b.dims(), {}, mem);
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
