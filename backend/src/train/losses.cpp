// The losses: a mean over the mini-batch, summed over the processes, whose gradient (scaled by the loss's
// weight) is written in forward.
#include "trainer_impl.hpp"

#include <cmath>
#include <limits>

namespace dsl::backend {

namespace {

// The factor a loss's gradient is multiplied by, as a float: infinite beyond float's range (a loss scale too
// large, whose step is then skipped).
float gradient_factor(double v) {
    return std::fabs(v) > std::numeric_limits<float>::max() ? std::copysign(std::numeric_limits<float>::infinity(), v)
                                                            : static_cast<float>(v);
}

}  // namespace

// A loss's mean over the mini-batch (before its weight); in training, writes its logits' gradient, scaled
// by the weight.
double Trainer::Impl::loss_layer(Slot& s, DataSource& data, std::int64_t first, bool training) {
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
        sum =
            k.loss->cross_entropy(logits.y.interior(), lv, gradient_factor(l.weight / count * gradient_scale()), grad);
    };
    if (training && !is_input(&logits))
        interior_gradient(logits, cross_entropy);
    else
        cross_entropy(View{});
    if (!logits.leader) sum = 0.0;  // its replicas' copy counts once
    wait(
        Kind::wait_sum, [&] { comm.allreduce(&sum, 1); }, sizeof(double));
    return sum / count;
}

// A regression loss: the targets of the prediction's tile (its samples, rows and columns, every channel)
// from the data source, then the kernel; the mean is over every element of the whole prediction.
double Trainer::Impl::regression_layer(Slot& s, DataSource& data, std::int64_t first, bool training) {
    const Layer& l = *s.layer;
    Tile& prediction = *s.operands[0];
    const Layer& label = net.layers[static_cast<std::size_t>(l.inputs[1])];
    const ConstView x = prediction.y.interior();
    const Dims td = x.dims;
    const std::int64_t sample0 = first + prediction.box.n.lo;
    const Index at = label.spatial() ? prediction.box.origin() : Index{};
    ConstView t;
    if (const SyntheticData* synthetic = data.synthetic(label); synthetic && !mem.host() && k.synthetic) {
        // Made where the prediction is: on the host, a U-Net's targets of 4 images of 512x512 take longer
        // than its whole step on an H100.
        k.synthetic->targets(*synthetic, sample0, at, dense_view(targets.reserve(td.elements()), td));
        t = dense_view<const float>(targets.data(), td);
    } else {
        host_targets.resize(static_cast<std::size_t>(td.elements()));
        data.targets(label, sample0, at, dense_view(host_targets.data(), td));
        t = dense_view<const float>(host_targets.data(), td);
        if (!mem.host()) {
            mem.upload(host_targets.data(), targets.reserve(td.elements()), td.elements());
            t = dense_view<const float>(targets.data(), td);
        }
    }
    const double count = static_cast<double>(global_dims(l.inputs[0]).elements());
    double sum = 0.0;
    auto compute = [&](View grad) {
        sum = k.loss->regression(l.kind().regression, x, t, gradient_factor(l.weight / count * gradient_scale()), grad);
    };
    if (training && !is_input(&prediction))
        interior_gradient(prediction, compute);
    else
        compute(View{});
    if (!prediction.leader) sum = 0.0;  // its replicas' copy counts once
    wait(
        Kind::wait_sum, [&] { comm.allreduce(&sum, 1); }, sizeof(double));
    return sum / count;
}

}  // namespace dsl::backend
