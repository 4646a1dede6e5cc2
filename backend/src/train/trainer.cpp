// The trainer's public face (trainer.hpp): a step is forward, backward and update; evaluation is forward
// alone; the state, outputs and measures are read from the trainer's tiles. Trainer::Impl (trainer_impl.hpp)
// executes the plan, its member functions a file per concern in this folder.
#include "trainer_impl.hpp"

#include <chrono>

namespace dsl::backend {

void DataSource::targets(const Layer& label, std::int64_t first, const Index& at, View tile) {
    (void)first, (void)at, (void)tile;
    DSL_INTERNAL_CHECK(false, "this data source has no float labels, but '" + label.name + "' is one");
}

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
    Impl::Tile* every_channel = &s.own();
    if (s.own().partial || s.own().box.c.size() != m.global_dims(layer).c) {
        // Split over its channels: a copy with every channel, as a loss reads it, where forward made one.
        every_channel = nullptr;
        for (auto& c : s.tiles)
            if (!c->partial && c->box.c.size() == m.global_dims(layer).c && c->gathered == m.step_index)
                every_channel = c.get();
        if (!every_channel)
            throw UserError("layer '" + s.layer->name +
                            "' is split over its channels under this schedule (F or C parts), and no layer reads "
                            "all of them: read it under a schedule that keeps its channels whole (F=1 C=1)");
    }
    Impl::Tile& t = *every_channel;
    if (!m.plan_of(layer).after_forward && m.plan_of(layer).narrowed)
        throw UserError("layer '" + s.layer->name +
                        "' is kept in 16 bits under this schedule and no backward reads it: its values are not kept "
                        "after forward; read it under a schedule that keeps it");
    if (!m.plan_of(layer).after_forward)
        throw UserError("layer '" + s.layer->name +
                        "' is recomputed under this schedule (recompute=on): its values are not kept after forward; "
                        "read it under a schedule that keeps it");
    OutputTile out;
    out.n0 = t.box.n.lo;
    out.at = t.box.origin();
    out.leader = t.leader;
    out.dims = t.y.dims();
    if (t.stored) {
        // Its float32 values' memory is shared: the 16-bit copy holds them.
        const View wide = dense_view(m.scratch.reserve(out.dims.elements()), out.dims);
        m.mem.widen(t.stored_bits(), m.precision_of(layer), wide);
        m.to_host(wide, out.values);
    } else {
        m.to_host(t.y.interior(), out.values);
    }
    return out;
}

std::int64_t Trainer::updates() const { return impl_->updates; }

void Trainer::set_updates(std::int64_t n) {
    impl_->updates = n;
    impl_->last_lr = impl_->config.schedule.lr(impl_->config.lr, n);
}

double Trainer::last_lr() const { return impl_->last_lr; }

Trainer::LossScale Trainer::loss_scale() const { return impl_->scaling; }

void Trainer::set_loss_scale(const LossScale& s) { impl_->scaling = s; }

bool Trainer::last_step_skipped() const { return impl_->skipped; }

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
            if (t->forward_buffer < 0) floats += t->y.size();  // recomputed values are in shared_buffers
            for (const auto* m : {&t->forward_messages, &t->backward_messages})
                for (const auto* buffers : {&m->sends, &m->receives})
                    for (const auto& buffer : *buffers) floats += buffer.size();
        }
        floats +=
            s.w.size() + s.dw.size() + s.mw.size() + s.b.size() + s.db.size() + s.mb.size() + s.vw.size() + s.vb.size();
        floats += static_cast<std::int64_t>(s.mean.size() * 4) + static_cast<std::int64_t>(s.labels.size());
    }
    floats += impl_->targets.size() + static_cast<std::int64_t>(impl_->host_targets.size());
    for (const auto& b : impl_->shared_buffers) floats += b.size();
    for (const auto& s : impl_->slots)
        if (!s.tiles.empty() && s.tiles.front()->stored) floats += s.tiles.front()->stored->size();
    return 4 * floats;
}

}  // namespace dsl::backend
