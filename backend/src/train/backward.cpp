// The backward pass: every layer in reverse, each first recomputing what the plan recomputes for it, then
// collecting its gradient from its readers and writing its inputs' (and its weights', whose allreduce starts
// at once).
#include "trainer_impl.hpp"

#include <dsl/scheduler/recompute.hpp>

namespace dsl::backend {

// The compute a layer's backward begins with: its input's gradient where it has weights too (an fc
// layer's weight gradient comes first), else the whole of it.
Trainer::Impl::Kind Trainer::Impl::first_backward_part(const Slot& s) const {
    const Layer& l = *s.layer;
    if (l.op == OpKind::fc) return Kind::backward_weights;
    if (l.op == OpKind::conv || l.op == OpKind::deconv)
        return is_input(s.operands[0]) ? Kind::backward_weights : Kind::backward_data;
    return Kind::backward;
}

void Trainer::Impl::backward() {
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
// plan's order: each after those it reads), and widens the narrowed ones from their 16 bits, into the memory
// the plan gives them in backward, and fills their tiles' halos and copies as forward did. Every process
// runs the same ones in the same order, so their exchanges meet.
void Trainer::Impl::recompute_for(int index) {
    const std::vector<int>& layers = plan_of(index).recompute_before;
    if (layers.empty()) return;
    DSL_INTERNAL_CHECK(step_data, "recomputation without the step's data");
    recomputing = true;
    double unused = 0.0;
    for (int q : layers) {
        Slot& s = slots[static_cast<std::size_t>(q)];
        for (auto& t : s.tiles) bind(*t, t->backward_buffer);
        if (plan_of(q).narrowed)
            mem.widen(s.own().stored_bits(), precision_of(q), s.own().y.interior());
        else
            forward_layer(*step_data, step_first, step_training, static_cast<std::size_t>(q), unused);
    }
    recomputing = false;
    for (int q : layers)
        for (auto& t : slots[static_cast<std::size_t>(q)].tiles) gather(*t);
}

void Trainer::Impl::backward_layer(int index) {
    Slot& s = slots[static_cast<std::size_t>(index)];
    const Layer& l = *s.layer;
    clear_gradients(static_cast<int>(slots.size()) - 1 - index);
    // Every reader has written its part of this layer's gradient: gather it from the margins and copies
    // where the readers left it.
    if (!l.is_data()) {
        zero_unwritten(s.own());  // no reader wrote it; halos and copies' gradients add to it
        for (auto& t : s.tiles) scatter(*t);
    }
    comm.progress();  // the weight-gradient allreduces started so far
    for (Comm* holders : holder_groups) holders->progress();
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
            ConvKernels& conv = conv_of(index);
            Tile& in = *s.operands[0];
            const ConvInput c = conv_input(s, in, plan_of(index).read);
            const Window& w = c.window;
            if (!is_input(&in))
                input_gradient(in, c.box,
                               [&](View dx) { conv.backward_data(s.own().dy.interior(), s.w.interior(), dx, w); });
            mark(Phase::backward, Kind::backward_weights, index);
            // With overlap, when this layer is the only reader of its input, the input's gradient is
            // complete here: its halo goes back to the neighbours while the weight gradient is computed.
            const bool send_now = overlap_of(index) && !is_input(&in) && !in.copy && in.readers == 1;
            if (send_now) start_scatter(in);
            if (s.gathered) {
                filter_block_weight_gradient(s, index);  // nothing to sum
            } else {
                conv.backward_weights(windowed_input(l, index, c.box), s.own().dy.interior(), s.dw.interior(),
                                      bias_gradient_of(s), w);
                allreduce_gradients(s, speaks);
            }
            if (send_now) finish_scatter(in);
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
                input_gradient(in, read,
                               [&](View dx) { k.deconv->backward_data(s.own().dy.interior(), s.w.interior(), dx, d); });
            mark(Phase::backward, Kind::backward_weights, index);
            const bool send_now = overlap_of(index) && !is_input(&in) && !in.copy && in.readers == 1;
            if (send_now) start_scatter(in);
            k.deconv->backward_weights(view_of(in.y, in, read), s.own().dy.interior(), s.dw.interior(),
                                       bias_gradient_of(s), d);
            if (send_now) finish_scatter(in);
            allreduce_gradients(s, speaks);
            break;
        }
        case OpKind::maxpool:
        case OpKind::avgpool: {
            Tile& in = *s.operands[0];
            if (is_input(&in)) break;
            const ConstView x = windowed_input(l, index, plan_of(index).read);
            input_gradient(in, plan_of(index).read, [&](View dx) {
                k.pool->backward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, x, s.own().dy.interior(),
                                 dx, window_of(l));
            });
            break;
        }
        case OpKind::batchnorm: batchnorm_backward(s, speaks); break;
        case OpKind::groupnorm: groupnorm_backward(s, speaks); break;
        case OpKind::dropout: {
            Tile& in = *s.operands[0];
            if (is_input(&in)) break;
            if (!dropping(step_training)) {
                add_gradient(in, s.own().dy.interior());
                break;
            }
            interior_gradient(
                in, [&](View dx) { k.dropout->backward(s.own().dy.interior(), dropout_mask(s, step_first), dx); });
            break;
        }
        case OpKind::global_avgpool: {
            Tile& in = *s.operands[0];
            if (is_input(&in)) break;
            to_host(s.own().dy.interior(), scratch_values);  // {n, c, 1, 1}: values[n * C + c]
            const std::int64_t area = global_dims(l.inputs[0]).points();
            interior_gradient(
                in, [&](View dx) { k.pool->broadcast(scratch_values.data(), 1.0f / static_cast<float>(area), dx); });
            break;
        }
        case OpKind::fc: {
            Tile& in = *s.operands[0];
            k.fc->backward_weights(in.y.interior(), s.own().dy.interior(), s.dw.interior(), bias_gradient_of(s));
            allreduce_gradients(s, speaks);
            if (is_input(&in)) break;
            mark(Phase::backward, Kind::backward_data, index);
            interior_gradient(in, [&](View dx) { k.fc->backward_data(s.own().dy.interior(), s.w.interior(), dx); });
            break;
        }
        case OpKind::add:
            for (Tile* in : s.operands)
                if (!is_input(in)) add_gradient(*in, s.own().dy.interior());
            break;
        case OpKind::concat: {
            // Each input's channels that fall in this tile's; a copy's others stay zero.
            const Range own = s.own().box.c;
            std::int64_t c0 = 0;
            for (Tile* in : s.operands) {
                const std::int64_t channels = in->box.c.size();
                const std::int64_t lo = std::max(own.lo, c0), hi = std::min(own.hi, c0 + channels);
                if (!is_input(in) && lo < hi) {
                    Box part = in->box;
                    part.c = {lo - c0, hi - c0};
                    input_gradient(*in, part, [&](View dx) {
                        k.eltwise->copy(s.own().dy.interior().channels(lo - own.lo, hi - lo), dx);
                    });
                }
                c0 += channels;
            }
            break;
        }
        default: {  // an element-wise kind: its function (layer_kinds.hpp)
            Tile& in = *s.operands[0];
            if (is_input(&in)) break;
            // A relu's output is positive where its input is: it reads that, which it keeps anyway.
            const ConstView x = scheduler::backward_reads_output(l) ? s.own().y.interior() : in.y.interior();
            interior_gradient(in, [&](View dx) {
                k.activation->backward(elementwise(l), x, s.own().dy.interior(), activation_slope(l), dx);
            });
            break;
        }
    }
}

}  // namespace dsl::backend
