// conv: a convolution (PyTorch's Conv2d and Conv3d), its window over the input tile with the halo its
// neighbours send; its weights {F, C, kernel} in blocks of filters and input channels under F and C parts,
// and in oneDNN's 16 x 16 blocks where its kernels ask for them.
#include "rows.hpp"

#include "../random/initial_values.hpp"
#include "../tensors/weight_blocks.hpp"

#include <dsl/scheduler/layout_groups.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <fmt/format.h>

#include <cmath>

namespace dsl::backend {

namespace {

using scheduler::elements;
using scheduler::Phase;
using scheduler::Sizes;
using scheduler::word;

class Conv final : public KindRules {
public:
    void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const override {
        (void)pass;
        t.windowed_layer(s, index);
    }

    void forward_part(Impl& t, Slot& s, const Box& out, bool again) const override {
        Impl::Tile& in = *s.operands[0];
        Impl::Tile& own = s.own();
        const Box read = scheduler::window_input(*s.layer, out, in.box.c);
        const View y = view_of(own.y, own, out);
        t.tiles.set_padding(in, 0.0f);
        const Impl::WindowRead c = t.window_read(s, in, read);
        const ConstView x = view_of(in.y, in, c.box);
        Window w = c.window;
        w.same_weights = again;
        ConvKernels& conv = t.conv_of(own.spec.layer);
        t.forward_fused(
            s, out, t.step_training,
            [&](View relu, float slope) { return conv.forward_relu(x, s.w.interior(), t.bias_of(s), slope, relu, w); },
            [&] { conv.forward(x, s.w.interior(), t.bias_of(s), y, w); });
    }

    void backward(Impl& t, Slot& s, int index, bool speaks) const override {
        ConvKernels& conv = t.conv_of(index);
        Impl::Tile& in = *s.operands[0];
        const Impl::WindowRead c = t.window_read(s, in, t.plan_of(index).read);
        const Window& w = c.window;
        if (!t.is_input(&in))
            t.tiles.input_gradient(in, c.box,
                                   [&](View dx) { conv.backward_data(s.own().dy.interior(), s.w.interior(), dx, w); });
        t.timeline.mark(Impl::Phase::backward, Kind::backward_weights, index);
        // With overlap, when this layer is the only reader of its input, the input's gradient is complete
        // here: its halo goes back to the neighbours while the weight gradient is computed.
        const bool send_now = t.plan_of(index).scatters_early;
        if (send_now) t.exchanges.start_scatter(in);
        if (s.gathered) {
            t.filter_block_weight_gradient(s, index);  // nothing to sum
        } else {
            conv.backward_weights(t.windowed_input(*s.layer, index, c.box), s.own().dy.interior(), s.dw.interior(),
                                  t.bias_gradient_of(s), w);
            t.optimizer.start_sum(s, speaks);
        }
        if (send_now) t.exchanges.finish_scatter(in);
    }

    // The input's gradient first, unless the input is data: then its weights'.
    Kind first_backward_part(const Impl& t, const Slot& s) const override {
        return t.is_input(s.operands[0]) ? Kind::backward_weights : Kind::backward_data;
    }

    bool runs_blocked() const override { return true; }

    // torchvision's ResNet: Kaiming normal, fan out; the bias PyTorch's default (uniform, +-1/sqrt(fan in)).
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override {
        const Layer& l = *s.layer;
        const Dims in = scheduler::extent_of(t.net.layers[static_cast<std::size_t>(l.inputs[0])], 1);
        const Dims wd{l.filters, in.c, l.kernel};
        const double std_out = std::sqrt(2.0 / static_cast<double>(wd.n * wd.points()));
        const double bound = 1.0 / std::sqrt(static_cast<double>(wd.c * wd.points()));
        t.set_weights(
            s, wd,
            [=](std::int64_t i) { return static_cast<float>(std_out * normal(stream, static_cast<std::uint64_t>(i))); },
            bound, stream);
        // Where the kernels keep this process's block of them in 16 x 16 blocks, so from the start (the
        // gradient and moments are zeros, the same in any layout).
        s.blocked_weights = t.mem.host() && t.conv_of(index).blocks_weights(s.w.dims());
        if (s.blocked_weights) {
            const std::vector<float> plain(s.w.data(), s.w.data() + s.w.size());
            block_weights(s.w.dims(), plain.data(), s.w.data());
        }
    }

    // {F, C, kernel} at its filters and input channels.
    Block weight_block(const Impl& t, const Slot& s) const override {
        (void)t;
        const Dims& d = s.whole;
        const bool split = s.holders != nullptr;
        const auto part = [&](const Range& r, std::int64_t whole) { return split ? r : Range{0, whole}; };
        return Block{part(s.filters, d.n), part(s.inputs, d.c), d.c, d.points(), d.elements()};
    }

    std::vector<std::int64_t> weight_shape(const Dims& whole) const override {
        return window_weight_shape(whole.n, whole.c, whole.space);
    }

    // Conv2d, Conv3d: weight [out, in, kernel...], bias [out]; padding = periodic has the same weights.
    std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const override {
        check_kernel_rank(l, input);
        std::vector<ExportedTensor> out{{"weight", window_weight_shape(l.filters, input.dims.at(0), l.kernel)}};
        if (l.bias) out.push_back({"bias", {l.filters}});
        return out;
    }

    void costs(const scheduler::CostTerms& t, scheduler::LayerCost& c) const override {
        const Layer& l = t.layer;
        const std::int64_t taps = product(l.kernel);
        c.forward = window_forward(t, t.y);
        // The backward passes move and multiply as much as the forward.
        const double flops = 2.0 * t.ny * static_cast<double>(t.x[1] * taps);
        const double bytes = (elements(t.window_dims(t.y)) + t.ny) * word;
        // Backward data's tiles are of the input; backward weights' reduce over the outputs, which its
        // blocks share out as forward's do (cuDNN splits the reduction).
        if (!t.data_in)
            c.backward_data = t.run(t.kernel(Phase::backward_data), t.window_fields(t.y, true), flops, bytes, t.nx);
        c.backward_weights = t.run(t.kernel(Phase::backward_weights), t.window_fields(t.y, true), flops, bytes, t.ny);
        // Forward on images of float32 takes channels-last activations, unpadded; the rest blocked ones. A
        // call holds a group of the tile's samples (layout_groups.hpp).
        const Sizes xw = t.window_dims(t.y);
        const double weights = static_cast<double>(t.y[1] * t.x[1] * taps) * word;
        const double group =
            static_cast<double>(scheduler::layout_group(scheduler::dims_of(xw), scheduler::dims_of(t.y))) /
            static_cast<double>(t.y[0]);
        const double x_in = scheduler::blocked(xw, word) * group, y_in = scheduler::blocked(t.y, word) * group;
        if (t.y.size() == 4 && t.products16 != scheduler::Precision::bfloat16)
            t.layouts(c, elements(xw) * word * group, weights, t.ny * word * group);
        else
            t.layouts(c, x_in, weights, y_in);
        if (!t.data_in) t.layouts(c, y_in, weights, x_in);
        t.layouts(c, x_in, y_in, weights);
        // A GPU's 16-bit convolutions read and write dense 16-bit copies of x, w and y (gpu_conv.cu).
        if (t.device == scheduler::Device::gpu && t.products16)
            c.scratch = {elements(xw) * 2.0, weights / 2.0, t.ny * 2.0};
    }

    double part_forward(const scheduler::CostTerms& t, const scheduler::LayerCost& whole,
                        const Sizes& out) const override {
        (void)whole;
        return window_forward(t, out);
    }

    bool halo_back_behind_weights() const override { return true; }

    void probe(KernelProbe& p) const override {
        if (!p.x.n || !p.y.n) return;
        // A layer of precision=bfloat16 ("bf16=1") or float16 ("f16=1"): the kernels with 16-bit products,
        // where there are any.
        ConvKernels* conv = !p.field("bf16").empty()  ? p.k.conv_bfloat16
                            : !p.field("f16").empty() ? p.k.conv_float16
                                                      : p.k.conv;
        if (!conv) {
            p.why = "no convolutions with 16-bit products here (they run in float32)";
            return;
        }
        p.a = p.filled(p.x);
        p.b = p.filled(p.y);
        p.wt = p.filled(Dims{p.y.c, p.x.c, p.w.kernel});
        p.c = p.zeros(Dims{p.y.c, p.x.c, p.w.kernel});
        if (p.phase == Phase::forward)
            p.run = [&p, conv] { conv->forward(p.a.interior(), p.wt.interior(), nullptr, p.b.interior(), p.w); };
        if (p.phase == Phase::backward_data)
            p.run = [&p, conv] { conv->backward_data(p.b.interior(), p.wt.interior(), p.a.interior(), p.w); };
        if (p.phase == Phase::backward_weights)
            p.run = [&p, conv] {
                conv->backward_weights(p.a.interior(), p.b.interior(), p.c.interior(), nullptr, p.w);
            };
    }

private:
    // The forward kernel over outputs `out`: 2 FLOPs a tap of every input channel per output.
    static double window_forward(const scheduler::CostTerms& t, const Sizes& out) {
        const double in = elements(t.window_dims(out));
        const double flops = 2.0 * elements(out) * static_cast<double>(t.x[1] * product(t.layer.kernel));
        return t.run(t.kernel(Phase::forward), t.window_fields(out, true), flops, (in + elements(out)) * word,
                     elements(out));
    }
};

}  // namespace

void check_kernel_rank(const frontend::Layer& l, const frontend::Shape& input) {
    DSL_INTERNAL_CHECK(
        l.kernel.rank() + 1 == static_cast<int>(input.dims.size()),
        fmt::format("layer '{}' has a kernel of rank {} for its input {}", l.name, l.kernel.rank(), input.str()));
}

const KindRules& rows::conv() {
    static const Conv row;
    return row;
}

}  // namespace dsl::backend
