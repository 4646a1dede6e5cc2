// The losses: a mean over the mini-batch, summed over the processes, whose gradient (scaled by the loss's
// weight, and the loss scale) is written in forward. Cross-entropy reads class labels (softmax_cross_entropy
// a label per sample, pixel_cross_entropy per place); the regression losses (mse, l1, bce_with_logits) read
// float targets of their prediction's shape.
#include "rows.hpp"

#include <cmath>
#include <limits>

namespace dsl::backend {

namespace {

using scheduler::Phase;
using scheduler::word;

// The factor a loss's gradient is multiplied by, as a float: infinite beyond float's range (a loss scale too
// large, whose step is then skipped).
float gradient_factor(double v) {
    return std::fabs(v) > std::numeric_limits<float>::max() ? std::copysign(std::numeric_limits<float>::infinity(), v)
                                                            : static_cast<float>(v);
}

// What the losses share: the weighted total, and the mean summed over the processes.
class Loss : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)index;
        const Layer& l = *s.layer;
        t.losses.push_back(LossValue{l.name, mean(t, s, pass), l.weight});
        pass.loss += l.weight * t.losses.back().value;
    }

protected:
    // The loss's mean over the mini-batch (before its weight); in training, writes its logits' gradient,
    // scaled by the weight.
    virtual double mean(Impl& t, Slot& s, const ForwardPass& pass) const = 0;

    // This process's sum of the loss, summed over the processes (its replicas' copy counts once), over `count`.
    static double total(Impl& t, const Impl::Tile& logits, double sum, double count) {
        if (!logits.leader) sum = 0.0;
        t.timeline.wait(
            Kind::wait_sum, [&] { t.comm.allreduce(&sum, 1); }, sizeof(double));
        return sum / count;
    }
};

class CrossEntropy final : public Loss {
public:
    // A softmax per place over the classes, and its log at the label; a sum over every process.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.x}}, 10 * t.nx, 3 * t.nx * word);
        c.forward_sync = t.allreduce(t.procs, 8.0, t.procs_span);
    }

    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.c = p.zeros(p.x);
        const Dims ld{p.x.n, 1, p.x.space};
        p.labels.assign(static_cast<std::size_t>(ld.elements()), 0);
        if (p.phase == Phase::forward)
            p.run = [&p, ld] {
                const LabelView lv = dense_view<const std::int32_t>(p.labels.data(), ld);
                p.k.loss->cross_entropy(p.a.interior(), lv, 1.0f, p.c.interior());
            };
    }

private:
    double mean(Impl& t, Slot& s, const ForwardPass& pass) const override {
        const Layer& l = *s.layer;
        Impl::Tile& logits = *s.operands[0];
        const Layer& label = t.net.layers[static_cast<std::size_t>(l.inputs[1])];
        // The labels of the logits' tile: {n, 1, its spatial extents}, or {n, 1} for one label per sample.
        const bool spatial = label.spatial();
        const Dims ld{logits.box.n.size(), 1, spatial ? logits.box.extents() : Index{}};
        s.labels.resize(static_cast<std::size_t>(ld.elements()));
        const std::int64_t sample0 = pass.first + logits.box.n.lo;
        const Index at = spatial ? logits.box.origin() : Index{};
        t.await_read(pass.data, label, sample0, at, ld);
        pass.data.labels(label, sample0, at, dense_view(s.labels.data(), ld));
        // The kernel takes them in the logits' shape: a label per sample beside global pooling's 1x1 (or 1x1x1)
        // logits has the logits' extents of one.
        const BasicView<const std::int32_t> lv =
            dense_view<const std::int32_t>(s.labels.data(), Dims{ld.n, 1, logits.box.extents()});
        const Dims& whole = t.global_dims(l.inputs[1]);
        const double count = static_cast<double>(whole.n * whole.points());
        // The gradient is written here, in forward: added to what the logits' other readers (other losses
        // now, other layers in backward) add when there are any.
        double sum = 0.0;
        auto cross_entropy = [&](View grad) {
            sum = t.k.loss->cross_entropy(logits.y.interior(), lv,
                                          gradient_factor(l.weight / count * t.optimizer.gradient_scale()), grad);
        };
        if (pass.training && !t.is_input(&logits))
            t.tiles.interior_gradient(logits, cross_entropy);
        else
            cross_entropy(View{});
        return total(t, logits, sum, count);
    }
};

class Regression final : public Loss {
public:
    // Reads prediction and target, writes the gradient; holds the targets of its prediction's tile.
    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const double flops = t.layer.kind().flops;
        c.forward = t.run(t.kernel(Phase::forward), {{"x", t.x}}, flops * t.nx, 3 * t.nx * word);
        c.forward_sync = t.allreduce(t.procs, 8.0, t.procs_span);
        c.memory += t.nx * word;
    }

    // mse's kernel (the regression losses share theirs).
    void probe(KernelProbe& p) const override {
        if (!p.x.n) return;
        p.a = p.filled(p.x);
        p.b = p.filled(p.x);
        p.c = p.zeros(p.x);
        const frontend::Regression r = p.kind.regression;
        if (p.phase == Phase::forward)
            p.run = [&p, r] { p.k.loss->regression(r, p.a.interior(), p.b.interior(), 1.0f, p.c.interior()); };
    }

private:
    // The targets of the prediction's tile (its samples, rows and columns, every channel) from the data
    // source, then the kernel; the mean is over every element of the whole prediction.
    double mean(Impl& t, Slot& s, const ForwardPass& pass) const override {
        const Layer& l = *s.layer;
        Impl::Tile& prediction = *s.operands[0];
        const Layer& label = t.net.layers[static_cast<std::size_t>(l.inputs[1])];
        const ConstView x = prediction.y.interior();
        const Dims td = x.dims;
        const std::int64_t sample0 = pass.first + prediction.box.n.lo;
        const Index at = label.spatial() ? prediction.box.origin() : Index{};
        ConstView target;
        if (const SyntheticData* synthetic = pass.data.synthetic(label); synthetic && !t.mem.host() && t.k.synthetic) {
            // Made where the prediction is: on the host, a U-Net's targets of 4 images of 512x512 take longer
            // than its whole step on an H100.
            t.k.synthetic->targets(*synthetic, sample0, at, dense_view(t.targets.reserve(td.elements()), td));
            target = dense_view<const float>(t.targets.data(), td);
        } else {
            t.host_targets.resize(static_cast<std::size_t>(td.elements()));
            t.await_read(pass.data, label, sample0, at, td);
            pass.data.targets(label, sample0, at, dense_view(t.host_targets.data(), td));
            target = dense_view<const float>(t.host_targets.data(), td);
            if (!t.mem.host()) {
                t.mem.upload(t.host_targets.data(), t.targets.reserve(td.elements()), td.elements());
                target = dense_view<const float>(t.targets.data(), td);
            }
        }
        const double count = static_cast<double>(t.global_dims(l.inputs[0]).elements());
        double sum = 0.0;
        auto compute = [&](View grad) {
            sum = t.k.loss->regression(l.kind().regression, x, target,
                                       gradient_factor(l.weight / count * t.optimizer.gradient_scale()), grad);
        };
        if (pass.training && !t.is_input(&prediction))
            t.tiles.interior_gradient(prediction, compute);
        else
            compute(View{});
        return total(t, prediction, sum, count);
    }
};

}  // namespace

const KindRules& rows::cross_entropy() {
    static const CrossEntropy row;
    return row;
}

const KindRules& rows::regression() {
    static const Regression row;
    return row;
}

}  // namespace dsl::backend
