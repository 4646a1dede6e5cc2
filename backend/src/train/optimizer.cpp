// The weight gradients' sum over every process, started as backward makes them, and the optimizer's update
// (SGD with momentum, Adam, AdamW) once they are in (optimizer.hpp).
#include "optimizer.hpp"

#include <dsl/base/error.hpp>

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

using Kind = ProfileEvent::Kind;
using Phase = ProfileEvent::Phase;

Optimizer::Optimizer(const TrainConfig& config, Kernels kernels, Comm& world, Timeline& timeline)
    : config_(config), k_(kernels), mem_(kernels.mem()), world_(world), timeline_(timeline) {
    last_lr_ = config_.schedule.lr(config_.lr, 0);
    scaling_.scale = config_.loss_scale;
}

void Optimizer::place(std::vector<Slot>& slots, std::vector<Comm*> holder_groups,
                      std::vector<scheduler::LayerPaths>& paths) {
    slots_ = &slots;
    holder_groups_ = std::move(holder_groups);
    held_.resize(slots.size());
    const bool adam = config_.optimizer != frontend::Optimizer::sgd;
    for (const Slot& s : slots) {
        Held& h = held_[at(s.index)];
        if (s.w.size() > 0) {
            h.mw = Tensor(s.w.dims(), {}, mem_);
            if (adam) h.vw = Tensor(s.w.dims(), {}, mem_);
        }
        if (s.b.size() > 0) {
            h.mb = Tensor(s.b.dims(), {}, mem_);
            if (adam) h.vb = Tensor(s.b.dims(), {}, mem_);
        }
    }
    place_gradients(paths);
    place_parameters(paths);
}

void Optimizer::set_updates(std::int64_t n) {
    updates_ = n;
    last_lr_ = config_.schedule.lr(config_.lr, n);
}

void Optimizer::each_moment(int layer, const AddMoment& add) {
    Held& h = held_[at(layer)];
    const bool bias = h.mb.size() > 0;
    if (config_.optimizer == frontend::Optimizer::sgd) {
        add(".weight.momentum", h.mw, false);
        if (bias) add(".bias.momentum", h.mb, true);
        return;
    }
    add(".weight.exp_avg", h.mw, false);
    add(".weight.exp_avg_sq", h.vw, false);
    if (bias) {
        add(".bias.exp_avg", h.mb, true);
        add(".bias.exp_avg_sq", h.vb, true);
    }
}

std::int64_t Optimizer::floats() const {
    std::int64_t n = 0;
    for (const Held& h : held_) n += h.mw.size() + h.mb.size() + h.vw.size() + h.vb.size();
    return n;
}

// The groups that hold parameters: the world, then each group of a block's holders, in the order every process
// made them.
std::vector<Comm*> Optimizer::parameter_groups() {
    std::vector<Comm*> out{&world_};
    out.insert(out.end(), holder_groups_.begin(), holder_groups_.end());
    return out;
}

// The non-empty tensors `parameters` and `moments` of the slots whose parameters `group` holds, slot by slot.
std::vector<Tensor*> Optimizer::group_tensors(const Comm* group, std::initializer_list<Tensor Slot::*> parameters,
                                              std::initializer_list<Tensor Held::*> moments) {
    std::vector<Tensor*> out;
    for (Slot& s : *slots_) {
        if (&gradient_group(s) != group) continue;
        for (Tensor Slot::*m : parameters)
            if ((s.*m).size() > 0) out.push_back(&(s.*m));
        for (Tensor Held::*m : moments)
            if ((held_[at(s.index)].*m).size() > 0) out.push_back(&(held_[at(s.index)].*m));
    }
    return out;
}

namespace {

const char* const node_memory_missing =
    "the processes could not map a node's shared memory (they span nodes, or /dev/shm has no room)";

}  // namespace

// A path of every layer whose parameters `group` holds, off for `why`.
void Optimizer::set_group_path(std::vector<scheduler::LayerPaths>& paths, const Comm* group,
                               scheduler::PathKind kind, const char* why) {
    for (std::size_t i = 0; i < slots_->size(); ++i)
        if (&gradient_group((*slots_)[i]) == group && paths[i].find(kind)) paths[i].set(kind, false, why);
}

// The weight gradients summed over each process group, in the memory where the group sums them fastest
// (Comm::summing_space), where it has such memory: the world's, then each group of a block's holders, in
// the order every process made them.
void Optimizer::place_gradients(std::vector<scheduler::LayerPaths>& paths) {
    if (!mem_.host()) return;
    for (Comm* group : parameter_groups()) {
        if (group->size() == 1) continue;
        const std::vector<Tensor*> gradients = group_tensors(group, {&Slot::dw, &Slot::db}, {});
        std::shared_ptr<float> held = group->summing_space(total(gradients));
        if (!held) {
            set_group_path(paths, group, scheduler::PathKind::node_sums, node_memory_missing);
            continue;
        }
        lay_out(gradients, held.get(), false);
        for (const Slot& s : *slots_)
            if (&gradient_group(s) == group) held_[at(s.index)].sums_in_node = true;
        summing_spaces_.push_back(std::move(held));
    }
}

// The weights and the optimizer's moments in memory that the processes holding them read and write
// (Comm::common_space), where they have such memory: one copy on the node rather than one per process, of
// which each process updates its share (optimize). The world's layers, then each group of a block's holders
// (the processes with the same F and C parts), in the order every process made them, as place_gradients.
// Every holder made the same weights; the first copies them in, and the others wait for it (the moments
// start at zero, as the memory does).
void Optimizer::place_parameters(std::vector<scheduler::LayerPaths>& paths) {
    if (!mem_.host()) return;
    for (Comm* group : parameter_groups()) {
        if (group->size() == 1) continue;
        const std::vector<Tensor*> weights = group_tensors(group, {&Slot::w, &Slot::b}, {}),
                                   moments = group_tensors(group, {}, {&Held::mw, &Held::vw, &Held::mb, &Held::vb});
        std::shared_ptr<float> common = group->common_space(total(weights) + total(moments));
        if (!common) {
            set_group_path(paths, group, scheduler::PathKind::shared_weights, node_memory_missing);
            continue;
        }
        lay_out(moments, lay_out(weights, common.get(), group->rank() == 0), false);
        for (const Slot& s : *slots_)
            if (&gradient_group(s) == group) held_[at(s.index)].shares = true;
        group->all(true);
        common_parameters_.push_back(std::move(common));
    }
}

// Whether the sum of a layer's weight gradients over their holders is left to the update: where the holders
// share the parameters, each updating its share, and sum in node memory, the update adds the processes'
// shares as it reads them, unless loss scaling must look at every sum first. (The pass that wrote the sums
// into every process's buffer took 3.2 ms of mesh_stack_512's 245 ms step under H=2 on two cores; adding
// them in the update made it some 2 ms longer.) A layer whose weight gradient is by filter blocks sums none.
bool Optimizer::sum_left_to_update(const Slot& s) const {
    const Held& h = held_[at(s.index)];
    return h.shares && h.sums_in_node && !s.gathered && scaling_.scale <= 0.0;
}

// Starts the sum of a layer's weight gradients over the processes that hold its weights (every process,
// unless F or C parts split them in blocks); a replica that does not speak for its group adds zeros. Of the
// C processes that hold partial sums, only the first has a bias gradient, so only its holders sum one.
void Optimizer::start_sum(Slot& s, bool speaks) {
    Comm& over = gradient_group(s);
    if (over.size() == 1) return;
    const bool bias = s.db.size() > 0 && s.adds_bias;
    if (!speaks) {
        mem_.fill(s.dw.padded(), 0.0f);
        if (bias) mem_.fill(s.db.padded(), 0.0f);
    }
    timeline_.allreduce_started(over, (s.dw.size() > 0 ? 1 : 0) + (bias ? 1 : 0),
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
bool Optimizer::unscale_gradients() {
    if (scaling_.scale <= 0.0) return true;
    std::vector<GradientArray> gradients;
    for (Slot& s : *slots_) {
        if (s.dw.size() > 0) gradients.push_back({s.dw.data(), s.dw.size()});
        if (s.db.size() > 0) gradients.push_back({s.db.data(), s.db.size()});
    }
    bool finite = k_.eltwise->unscale(gradients, static_cast<float>(1.0 / scaling_.scale));
    if (!holder_groups_.empty()) finite = world_.all(finite);  // some layer's parameters are split in blocks
    if (!finite) {
        scaling_.scale *= 0.5;
        scaling_.good_steps = 0;
    } else if (++scaling_.good_steps >= config_.loss_scale_interval) {
        scaling_.scale *= 2.0;
        scaling_.good_steps = 0;
    }
    return finite;
}

// The optimizer's step over every weight and bias, at last_lr and Adam's t = updates. Where the holders of a
// layer's parameters share them (place_parameters), each updates its share of each tensor, the r-th of the
// group's P equal parts (the part of its gradient it summed, where the node sums them), once every process
// is past its last read of them this step (a batch norm reads its scale after it starts its gradients' sum),
// and they wait for one another before reading them again. Each element is updated once, by the same
// arithmetic as where every process updates all of its own, so the weights are bit for bit those.
void Optimizer::optimize() {
    const bool shared = !common_parameters_.empty();
    if (shared) world_.all(true);
    const bool sgd = config_.optimizer == frontend::Optimizer::sgd;
    const auto lr = static_cast<float>(last_lr_), momentum = static_cast<float>(config_.momentum),
               decay = static_cast<float>(config_.weight_decay);
    const AdamStep adam = adam_step(config_.optimizer == frontend::Optimizer::adamw, last_lr_, config_.beta1,
                                    config_.beta2, config_.eps, config_.weight_decay, updates_);
    // The update of `count` elements from `first` with gradient g.
    const auto update = [&](Tensor& w, Tensor& m, Tensor& v, const float* g, std::int64_t first, std::int64_t count) {
        if (sgd)
            k_.eltwise->sgd(w.data() + first, m.data() + first, g, count, lr, momentum, decay);
        else
            k_.eltwise->adam(w.data() + first, m.data() + first, v.data() + first, g, count, adam);
    };
    for (Slot& s : *slots_) {
        if (s.w.size() == 0) continue;
        Held& h = held_[at(s.index)];
        // Weights w with moments m (and Adam's v) and gradient g: this process's share where they are shared.
        const auto step = [&](Tensor& w, Tensor& m, Tensor& v, const Tensor& g, bool left) {
            if (w.size() == 0) return;
            std::int64_t first = 0, count = w.size();
            const Comm& group = gradient_group(s);
            if (h.shares) {
                first = w.size() * group.rank() / group.size();
                count = w.size() * (group.rank() + 1) / group.size() - first;
            }
            if (!left) return update(w, m, v, g.data() + first, first, count);
            // The sum over the processes a chunk at a time, each chunk updated while it is in the cache.
            constexpr std::int64_t chunk = 16384;
            summed_chunk_.resize(static_cast<std::size_t>(std::min(chunk, count)));
            for (std::int64_t at = first; at < first + count; at += chunk) {
                const std::int64_t n = std::min(chunk, first + count - at);
                DSL_INTERNAL_CHECK(group.read_sum(g.data() + at, n, summed_chunk_.data()),
                                   "a gradient's sum left outside node memory");
                update(w, m, v, summed_chunk_.data(), at, n);
            }
        };
        const bool left = sum_left_to_update(s);
        step(s.w, h.mw, h.vw, s.dw, left);
        step(s.b, h.mb, h.vb, s.db, left && s.adds_bias);
    }
    if (shared) world_.all(true);
}

void Optimizer::progress() {
    world_.progress();
    for (Comm* holders : holder_groups_) holders->progress();
}

void Optimizer::update() {
    const auto began = timeline_.begin_layer();
    timeline_.mark(Phase::update, Kind::update, -1);
    timeline_.wait(Kind::wait_allreduces, [&] {
        world_.finish_allreduces();
        for (Comm* holders : holder_groups_) holders->finish_allreduces();
    });
    timeline_.observe_allreduces(true);
    // The same on every process: the schedule's rate at this step, and Adam's t.
    last_lr_ = config_.schedule.lr(config_.lr, updates_);
    ++updates_;
    // A step whose gradients overflowed at its loss scale changes nothing.
    skipped_ = !unscale_gradients();
    if (!skipped_) optimize();
    timeline_.end_update(began);
}

}  // namespace dsl::backend
