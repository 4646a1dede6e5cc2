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
           kind == Kind::wait_sum || kind == Kind::wait_allreduces || kind == Kind::wait_others ||
           kind == Kind::wait_read;
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
    impl_->optimizer.update();
    return loss;
}

double Trainer::evaluate(DataSource& data, std::int64_t first) { return impl_->forward(data, first, false); }

const std::vector<LossValue>& Trainer::last_losses() const { return impl_->losses; }

OutputTile Trainer::output_tile(int layer) {
    Impl& m = *impl_;
    DSL_INTERNAL_CHECK(layer >= 0 && static_cast<std::size_t>(layer) < m.slots.size(), "output_tile: no such layer");
    Impl::Slot& s = m.slots[static_cast<std::size_t>(layer)];
    DSL_INTERNAL_CHECK(s.layer->op != OpKind::label && !s.layer->is_loss(), "output_tile: a layer without values");
    DSL_INTERNAL_CHECK(!m.writes_relu(s, m.step_training),
                       "output_tile: a layer whose ReLU training wrote in its place");
    Impl::Tile* every_channel = &s.own();
    if (s.own().partial || s.own().box.c.size() != m.global_dims(layer).c) {
        // Split over its channels: a copy with every channel, as a loss reads it, where forward made one.
        every_channel = nullptr;
        for (Impl::Tile* c : s.tiles)
            if (!c->partial && c->box.c.size() == m.global_dims(layer).c && m.exchanges.holds(*c)) every_channel = c;
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
        const View wide = dense_view(m.tiles.scratch(out.dims.elements()), out.dims, t.y.lanes());
        m.mem.widen(t.stored_bits(), m.precision_of(layer), wide);
        m.to_host(wide, out.values);
    } else {
        m.to_host(t.y.interior(), out.values);
    }
    return out;
}

std::int64_t Trainer::updates() const { return impl_->optimizer.updates(); }

void Trainer::set_updates(std::int64_t n) { impl_->optimizer.set_updates(n); }

double Trainer::last_lr() const { return impl_->optimizer.last_lr(); }

Trainer::LossScale Trainer::loss_scale() const { return impl_->optimizer.loss_scale(); }

void Trainer::set_loss_scale(const LossScale& s) { impl_->optimizer.set_loss_scale(s); }

bool Trainer::last_step_skipped() const { return impl_->optimizer.skipped(); }

const TrainConfig& Trainer::config() const { return impl_->config; }

std::vector<StateTensor> Trainer::state() { return impl_->state(true); }

std::vector<StateTensor> Trainer::saved_state() { return impl_->state(true, true); }

std::vector<StateTensor> Trainer::writable_state() { return impl_->state(false); }

void Trainer::state_written() { impl_->state_written(); }

void Trainer::profile(bool on) { impl_->timeline.turn(on); }

const StepProfile& Trainer::last_profile() const { return impl_->timeline.profile(); }

const std::vector<scheduler::LayerPaths>& Trainer::paths() const { return impl_->paths; }

std::int64_t Trainer::halo_bytes() const { return impl_->exchanges.sent_bytes(); }

std::int64_t Trainer::memory_bytes() const {
    const Impl& m = *impl_;
    std::int64_t floats = m.tiles.floats() + m.exchanges.floats() + m.stats.floats() + m.optimizer.floats();
    for (const auto& s : m.slots)
        floats += s.w.size() + s.dw.size() + s.b.size() + s.db.size() + static_cast<std::int64_t>(s.labels.size());
    floats += m.targets.size() + static_cast<std::int64_t>(m.host_targets.size());
    return 4 * floats;
}

}  // namespace dsl::backend
