// The forward pass: every layer in the network's order, windowed layers over their input's tile (with the
// plan's overlap of the halo exchange and the interior's compute), a recomputed layer's values where the plan
// puts them, and dropout's masks.
#include "trainer_impl.hpp"

#include <dsl/backend/synthetic.hpp>
#include <limits>

namespace dsl::backend {

// `read` of a windowed layer's input tile (for its whole own tile, the plan's `read`; a convolution's of a
// blocked tile, conv_input's box), its padding set.
ConstView Trainer::Impl::windowed_input(const Layer& l, int index, const Box& read) {
    Tile& in = *slots[static_cast<std::size_t>(index)].operands[0];
    set_padding(in, l.op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
    return view_of(in.y, in, read);
}

double Trainer::Impl::forward(DataSource& data, std::int64_t first, bool training) {
    ++step_index;
    step_first = first;
    step_training = training;
    step_data = &data;
    sent_bytes = 0;
    if (profiling) {
        profile.layers.assign(slots.size(), LayerTime{});
        profile.events.clear();
        open_allreduces.clear();
        allreduce_requests.clear();
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

void Trainer::Impl::forward_layer(DataSource& data, std::int64_t first, bool training, std::size_t i, double& loss) {
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
            for (std::size_t j = 0; j < sums_a.size(); ++j) scratch_values[j] = static_cast<float>(sums_a[j] / area);
            k.pool->broadcast(scratch_values.data(), 1.0f, y);  // y is {n, c, 1, 1}
            break;
        }
        case OpKind::fc: k.fc->forward(in(), s.w.interior(), bias_of(s), y); break;
        case OpKind::add: {
            std::vector<ConstView> xs;
            for (std::size_t j = 0; j < l.inputs.size(); ++j) xs.push_back(in(j));
            forward_fused(
                s, s.own().box, training, [&](View relu, float slope) { return k.eltwise->add_relu(xs, slope, relu); },
                [&] { k.eltwise->add(xs, y); });
            break;
        }
        case OpKind::concat: {
            // Each input's channels that fall in this tile's (all of them, or a block under F and C parts).
            const Range own = s.own().box.c;
            std::int64_t c0 = 0;
            for (std::size_t j = 0; j < l.inputs.size(); ++j) {
                const ConstView x = in(j);
                const std::int64_t lo = std::max(own.lo, c0), hi = std::min(own.hi, c0 + x.dims.c);
                if (lo < hi) k.eltwise->copy(x.channels(lo - c0, hi - lo), y.channels(lo - own.lo, hi - lo));
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
            // Its input's forward wrote it already (fusion.cpp).
            if (writes_relu(slots[static_cast<std::size_t>(l.inputs[0])], training)) break;
            k.activation->forward(elementwise(l), in(), activation_slope(l), y);
            break;
    }
    // Rounded to its precision before anyone reads it, and kept so until backward widens it again (where no
    // backward reads it, the 16 bits go to scratch and only the rounding stays).
    if (plan_of(index).narrowed)
        mem.narrow(y, precision_of(index),
                   plan_of(index).stored
                       ? s.own().stored_bits()
                       : reinterpret_cast<std::uint16_t*>(scratch.reserve((y.dims.elements() + 1) / 2)));
}

// The output of a windowed layer over `out` (global coordinates within its tile), from what its window
// reads of the input tile; `again`: the layer's kernel ran last, on another part (its weights unchanged).
void Trainer::Impl::windowed_forward(Slot& s, const Box& out, bool again) {
    const Layer& l = *s.layer;
    Tile& in = *s.operands[0];
    Tile& own = s.own();
    const Box read = scheduler::window_input(l, out, in.box.c);
    const View y = view_of(own.y, own, out);
    if (l.op == OpKind::conv) {
        set_padding(in, 0.0f);
        const ConvInput c = conv_input(s, in, read);
        const ConstView x = view_of(in.y, in, c.box);
        Window w = c.window;
        w.same_weights = again;
        ConvKernels& conv = conv_of(own.spec.layer);
        return forward_fused(
            s, out, step_training,
            [&](View relu, float slope) { return conv.forward_relu(x, s.w.interior(), bias_of(s), slope, relu, w); },
            [&] { conv.forward(x, s.w.interior(), bias_of(s), y, w); });
    }
    const ConstView x = view_of(in.y, in, read);
    switch (l.op) {
        case OpKind::upsample:
            DSL_INTERNAL_CHECK(k.upsample, "the kernel set has no kernels for upsampling");
            return k.upsample->forward(upsample_of(l, read, out), x, y);
        case OpKind::deconv:
            DSL_INTERNAL_CHECK(k.deconv, "the kernel set has no kernels for transposed convolutions");
            return k.deconv->forward(x, s.w.interior(), bias_of(s), y, deconv_of(l, read, out));
        default:
            set_padding(in, l.op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
            return k.pool->forward(l.op == OpKind::maxpool ? PoolKind::max : PoolKind::average, x, y, window_of(l));
    }
}

// Upsampling and transposed convolution: what an output reads depends on its global index, so the kernels
// take the views' places; the input view is what `out` reads (tiles.hpp).
Upsample Trainer::Impl::upsample_of(const Layer& l, const Box& x, const Box& y) const {
    return Upsample{l.scale, l.linear_upsample(), global_dims(l.inputs[0]).space, Placement{x.origin(), y.origin()}};
}

Deconv Trainer::Impl::deconv_of(const Layer& l, const Box& x, const Box& y) {
    return Deconv{l.kernel, l.stride, l.pad, Placement{x.origin(), y.origin()}};
}

// Whether a convolution over a blocked tile computes its interior's outputs from a copy of the interior
// rather than over the whole tile (overlapped_forward): when the multiply-adds of computing the strips'
// outputs twice cost more than copying the interior's inputs and outputs through dense buffers. A float
// copied (read and written) costs about as many multiply-adds as the platform's analytic figures for one
// core say (stdlib/platforms/local.platform: 50 GFLOP/s, 8 GB/s: 25 multiply-adds a float). On mesh_stack_512
// under H=2, the convolutions at 1/16 and 1/32 of the image copy (the strips' multiply-adds 74 and 307 a
// float copied; their forward 0.3 and 1 ms shorter), those at 1/8 and larger do not (1 to 18).
bool Trainer::Impl::blocked_interior_copied(const Slot& s, const Tile& in, const scheduler::OverlapParts& parts) const {
    const Layer& l = *s.layer;
    if (l.op != OpKind::conv || parts.inner.empty()) return false;
    constexpr double multiply_adds_per_float = 25.0;
    const double channels_in = static_cast<double>(in.box.c.size()),
                 channels_out = static_cast<double>(s.own().box.c.size());
    double strips = 0.0;
    for (const Box& strip : parts.strips) strips += static_cast<double>(strip.points());
    const double twice = strips * channels_out * channels_in * static_cast<double>(product(l.kernel));
    const Box read = scheduler::window_input(l, parts.inner, in.box.c);
    const double copied = static_cast<double>(read.meet(in.box).points()) * channels_in +
                          static_cast<double>(parts.inner.points()) * channels_out;
    return copied * multiply_adds_per_float < twice;
}

// Posts the input's halo exchange, computes the outputs whose windows lie within what this process
// holds (its interior, and padding at the tensor's border), then, once the halo is in, the strips that read
// it (the plan's overlap).
void Trainer::Impl::overlapped_forward(Slot& s, int index) {
    const scheduler::OverlapParts& parts = plan_of(index).overlap;
    Tile& in = *s.operands[0];
    set_padding(in, s.layer->op == OpKind::maxpool ? -std::numeric_limits<float>::infinity() : 0.0f);
    start_gather(in);
    // Of a blocked tile, a part's view is not dense, and oneDNN would copy the interior in and its outputs out
    // (blocked_interior_copied). Where that costs more than computing the strips twice, the interior's outputs
    // are computed with the rest, by a window over the whole tile (the one view of it that oneDNN reads in
    // place), from the last step's halo, and the strips again once this step's is in. (Computing everything
    // once, after the halo, took 1.009 and 1.017 of one process's step on two threads on mesh_stack_512 under
    // H=2, against 1.036 and 1.047 this way, bench/scaling.sh threads: but it overlaps nothing.)
    const Box& first = in.lanes == 1 || blocked_interior_copied(s, in, parts) ? parts.inner : s.own().box;
    bool again = !first.empty();
    if (again) windowed_forward(s, first);
    finish_gather(in);
    for (const Box& strip : parts.strips) {
        windowed_forward(s, strip, again);
        again = true;
    }
}

// The mask of a dropout layer's own tile in the step whose first sample is `first`: its key is the seed's
// and the layer's, its step the mini-batch's index (first / batch, as `dsl run` numbers steps, so that a
// resumed run draws what an uninterrupted one does), its coordinates global.
DropoutMask Trainer::Impl::dropout_mask(const Slot& s, std::int64_t first) const {
    const Tile& t = *s.tiles.front();
    DropoutMask m;
    m.key = splitmix64(config.seed ^ 0x64726f706f7574ull) ^ name_hash(s.layer->name);  // "dropout"
    m.step = first / config.batch;
    m.n0 = first + t.box.n.lo;
    m.c0 = t.box.c.lo;
    m.at = t.box.origin();
    m.p = static_cast<float>(s.layer->p);
    return m;
}

}  // namespace dsl::backend
