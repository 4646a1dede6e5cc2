// The weight gradients' sum over every process, started as backward makes them, and the optimizer's update
// (SGD with momentum, Adam, AdamW) once they are in.
#include "trainer_impl.hpp"

#include <algorithm>

namespace dsl::backend {

namespace {

std::int64_t total(const std::vector<Tensor*>& tensors) {
    std::int64_t n = 0;
    for (const Tensor* t : tensors) n += t->size();
    return n;
}

// Points each of `tensors` at its place in `space`, one after another, each keeping its dims (with `copy`, its
// values copied there first); returns where the next would go.
float* lay_out(const std::vector<Tensor*>& tensors, float* space, bool copy) {
    for (Tensor* t : tensors) {
        if (copy) std::copy_n(t->data(), t->size(), space);
        *t = Tensor::over(space, t->dims());
        space += t->size();
    }
    return space;
}

}  // namespace

// The groups that hold parameters: the world, then each group of a block's holders, in the order every process
// made them.
std::vector<Comm*> Trainer::Impl::parameter_groups() {
    std::vector<Comm*> out{&comm};
    out.insert(out.end(), holder_groups.begin(), holder_groups.end());
    return out;
}

// The non-empty tensors `members` of the slots whose parameters `group` holds, slot by slot.
std::vector<Tensor*> Trainer::Impl::group_tensors(const Comm* group, std::initializer_list<Tensor Slot::*> members) {
    std::vector<Tensor*> out;
    for (Slot& s : slots)
        if (&gradient_group(s) == group)
            for (Tensor Slot::*m : members)
                if ((s.*m).size() > 0) out.push_back(&(s.*m));
    return out;
}

namespace {

const char* const node_memory_missing =
    "the processes could not map a node's shared memory (they span nodes, or /dev/shm has no room)";

}  // namespace

// A path of every layer whose parameters `group` holds, off for `why`.
void Trainer::Impl::set_group_path(const Comm* group, scheduler::PathKind kind, const char* why) {
    for (std::size_t i = 0; i < slots.size(); ++i)
        if (&gradient_group(slots[i]) == group && paths[i].find(kind)) paths[i].set(kind, false, why);
}

// The weight gradients summed over each process group, in the memory where the group sums them fastest
// (Comm::summing_space), where it has such memory: the world's, then each group of a block's holders, in
// the order every process made them.
void Trainer::Impl::place_gradients() {
    if (!mem.host()) return;
    for (Comm* group : parameter_groups()) {
        if (group->size() == 1) continue;
        const std::vector<Tensor*> gradients = group_tensors(group, {&Slot::dw, &Slot::db});
        std::shared_ptr<float> held = group->summing_space(total(gradients));
        if (!held) {
            set_group_path(group, scheduler::PathKind::node_sums, node_memory_missing);
            continue;
        }
        lay_out(gradients, held.get(), false);
        for (Slot& s : slots)
            if (&gradient_group(s) == group) s.sums_in_node = true;
        summing_spaces.push_back(std::move(held));
    }
}

// The weights and the optimizer's moments in memory that the processes holding them read and write
// (Comm::common_space), where they have such memory: one copy on the node rather than one per process, of
// which each process updates its share (optimize). The world's layers, then each group of a block's holders
// (the processes with the same F and C parts), in the order every process made them, as place_gradients.
// Every holder made the same weights; the first copies them in, and the others wait for it (the moments
// start at zero, as the memory does).
void Trainer::Impl::place_parameters() {
    if (!mem.host()) return;
    for (Comm* group : parameter_groups()) {
        if (group->size() == 1) continue;
        const std::vector<Tensor*> weights = group_tensors(group, {&Slot::w, &Slot::b}),
                                   moments = group_tensors(group, {&Slot::mw, &Slot::vw, &Slot::mb, &Slot::vb});
        std::shared_ptr<float> common = group->common_space(total(weights) + total(moments));
        if (!common) {
            set_group_path(group, scheduler::PathKind::shared_weights, node_memory_missing);
            continue;
        }
        lay_out(moments, lay_out(weights, common.get(), group->rank() == 0), false);
        for (Slot& s : slots)
            if (&gradient_group(s) == group) s.shares_parameters = true;
        group->all(true);
        common_parameters.push_back(std::move(common));
    }
}

// Whether the sum of a layer's weight gradients over their holders is left to the update: where the holders
// share the parameters, each updating its share, and sum in node memory, the update adds the processes'
// shares as it reads them, unless loss scaling must look at every sum first. (The pass that wrote the sums
// into every process's buffer took 3.2 ms of mesh_stack_512's 245 ms step under H=2 on two cores; adding
// them in the update made it some 2 ms longer.) A layer whose weight gradient is by filter blocks sums none.
bool Trainer::Impl::sum_left_to_update(const Slot& s) const {
    return s.shares_parameters && s.sums_in_node && !s.gathered && scaling.scale <= 0.0;
}

// Starts the sum of a layer's weight gradients over the processes that hold its weights (every process,
// unless F or C parts split them in blocks); a replica that does not speak for its group adds zeros. Of the
// C processes that hold partial sums, only the first has a bias gradient, so only its holders sum one.
void Trainer::Impl::allreduce_gradients(Slot& s, bool speaks) {
    Comm& over = gradient_group(s);
    if (over.size() == 1) return;
    const bool bias = s.db.size() > 0 && s.adds_bias;
    if (!speaks) {
        mem.fill(s.dw.padded(), 0.0f);
        if (bias) mem.fill(s.db.padded(), 0.0f);
    }
    timeline.allreduce_started(over, (s.dw.size() > 0 ? 1 : 0) + (bias ? 1 : 0),
                               static_cast<std::int64_t>(sizeof(float)) * (s.dw.size() + (bias ? s.db.size() : 0)));
    const bool left = sum_left_to_update(s);
    const auto start = [&](Tensor& g) {
        if (!left) return over.start_allreduce(g.data(), g.size());
        DSL_INTERNAL_CHECK(over.start_sum_for_reader(g.data(), g.size()), "a gradient's sum left outside node memory");
    };
    start(s.dw);
    if (bias) start(s.db);
}

// Loss scaling (GradScaler's unscale_ and update): the summed weight gradients divided by the scale, which
// halves where they were not all finite (the update is skipped: false) and doubles after
// loss_scale_interval steps in a row that were not. Every process decides alike: they hold the same sums, or
// under F and C parts those of their blocks, and then ask each other.
bool Trainer::Impl::unscale_gradients() {
    if (scaling.scale <= 0.0) return true;
    std::vector<GradientArray> gradients;
    for (Slot& s : slots) {
        if (s.dw.size() > 0) gradients.push_back({s.dw.data(), s.dw.size()});
        if (s.db.size() > 0) gradients.push_back({s.db.data(), s.db.size()});
    }
    bool finite = k.eltwise->unscale(gradients, static_cast<float>(1.0 / scaling.scale));
    if (splits_weights()) finite = comm.all(finite);
    if (!finite) {
        scaling.scale *= 0.5;
        scaling.good_steps = 0;
    } else if (++scaling.good_steps >= config.loss_scale_interval) {
        scaling.scale *= 2.0;
        scaling.good_steps = 0;
    }
    return finite;
}

// The optimizer's step over every weight and bias, at last_lr and Adam's t = updates. Where the holders of a
// layer's parameters share them (place_parameters), each updates its share of each tensor, the r-th of the
// group's P equal parts (the part of its gradient it summed, where the node sums them), once every process
// is past its last read of them this step (a batch norm reads its scale after it starts its gradients' sum),
// and they wait for one another before reading them again. Each element is updated once, by the same
// arithmetic as where every process updates all of its own, so the weights are bit for bit those.
void Trainer::Impl::optimize() {
    const bool shared = !common_parameters.empty();
    if (shared) comm.all(true);
    const bool sgd = config.optimizer == frontend::Optimizer::sgd;
    const auto lr = static_cast<float>(last_lr), momentum = static_cast<float>(config.momentum),
               decay = static_cast<float>(config.weight_decay);
    const AdamStep adam = adam_step(config.optimizer == frontend::Optimizer::adamw, last_lr, config.beta1, config.beta2,
                                    config.eps, config.weight_decay, updates);
    // The update of `count` elements from `first` with gradient g.
    const auto update = [&](Tensor& w, Tensor& m, Tensor& v, const float* g, std::int64_t first, std::int64_t count) {
        if (sgd)
            k.eltwise->sgd(w.data() + first, m.data() + first, g, count, lr, momentum, decay);
        else
            k.eltwise->adam(w.data() + first, m.data() + first, v.data() + first, g, count, adam);
    };
    for (Slot& s : slots) {
        if (s.w.size() == 0) continue;
        // Weights w with moments m (and Adam's v) and gradient g: this process's share where they are shared.
        const auto step = [&](Tensor& w, Tensor& m, Tensor& v, const Tensor& g, bool left) {
            if (w.size() == 0) return;
            std::int64_t first = 0, count = w.size();
            const Comm& group = gradient_group(s);
            if (s.shares_parameters) {
                first = w.size() * group.rank() / group.size();
                count = w.size() * (group.rank() + 1) / group.size() - first;
            }
            if (!left) return update(w, m, v, g.data() + first, first, count);
            // The sum over the processes a chunk at a time, each chunk updated while it is in the cache.
            constexpr std::int64_t chunk = 16384;
            summed_chunk.resize(static_cast<std::size_t>(std::min(chunk, count)));
            for (std::int64_t at = first; at < first + count; at += chunk) {
                const std::int64_t n = std::min(chunk, first + count - at);
                DSL_INTERNAL_CHECK(group.read_sum(g.data() + at, n, summed_chunk.data()),
                                   "a gradient's sum left outside node memory");
                update(w, m, v, summed_chunk.data(), at, n);
            }
        };
        const bool left = sum_left_to_update(s);
        step(s.w, s.mw, s.vw, s.dw, left);
        step(s.b, s.mb, s.vb, s.db, left && s.adds_bias);
    }
    if (shared) comm.all(true);
}

void Trainer::Impl::update() {
    const auto began = timeline.begin_layer();
    timeline.mark(Phase::update, Kind::update, -1);
    timeline.wait(Kind::wait_allreduces, [&] {
        comm.finish_allreduces();
        for (Comm* holders : holder_groups) holders->finish_allreduces();
    });
    timeline.observe_allreduces(true);
    // The same on every process: the schedule's rate at this step, and Adam's t.
    last_lr = config.schedule.lr(config.lr, updates);
    ++updates;
    // A step whose gradients overflowed at its loss scale changes nothing.
    skipped = !unscale_gradients();
    if (!skipped) optimize();
    timeline.end_update(began);
}

}  // namespace dsl::backend
