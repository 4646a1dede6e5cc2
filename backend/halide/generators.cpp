// Halide generators for the CPU kernels other than convolution and fc, compiled ahead of time (one file, so
// that Halide.h is parsed once per build).
//
// Tensors are 4-D float32 views in Halide's order (x, y, c, n), innermost first (the kernels run a volume
// through them slice by slice), but for the pooling of volumes, which is 5-D (x, y, z, c, n). Only dim 0 has
// a known stride (1): views are windows of tiles with margins, so rows, planes and samples are strided. Every
// schedule vectorizes along x with GuardWithIf (never ShiftInwards: some outputs alias their inputs, as in
// y += x, and a recomputed element would be added twice) and runs rows, channels and samples in parallel.
#include <Halide.h>

namespace {

using namespace Halide;

// Vectors along x: 8 floats (one AVX2 register; also fine on AVX-512, where rows of small tiles are short),
// else what the target offers.
int vector_width(const Target& t) { return t.has_feature(Target::AVX2) ? 8 : t.natural_vector_size<float>(); }

// Elements per parallel task: enough that a task's fixed costs (the call, the divisions that split a fused
// index, a row's tail) vanish beside its work, few enough that small tensors still spread over the cores.
constexpr int task_elements = 1 << 14;

// A 4-D pointwise output in parallel tasks of about task_elements: runs of rows of a plane when planes are
// large, runs of whole planes when they are small (a task per row or per plane would be mostly overhead on
// tensors of 8x8 planes).
void schedule_pointwise(Func f, const Var& x, const Var& y, const Var& c, const Var& n, int vec) {
    const Expr width = f.output_buffer().dim(0).extent(), height = f.output_buffer().dim(1).extent();
    Var yo("yo"), yi("yi"), ycn("ycn"), cn("cn"), cno("cno"), cni("cni");
    f.vectorize(x, vec, TailStrategy::GuardWithIf);
    f.specialize(width * height >= task_elements)
        .split(y, yo, yi, max(task_elements / width, 1), TailStrategy::GuardWithIf)
        .fuse(yo, c, ycn)
        .fuse(ycn, n, ycn)
        .parallel(ycn);
    f.fuse(c, n, cn).split(cn, cno, cni, task_elements / (width * height), TailStrategy::GuardWithIf).parallel(cno);
}

// Per-(channel, sample) sums over a plane, in double: `out` (pure, over c and n) reads `plane`, whose update
// reduces over r (r.x along a row, r.y over rows). Planes run in parallel, in tasks of about task_elements;
// within a plane, the lanes of a vector along x keep sums of their own (rfactor) that are added once at the
// end, so that the loop over a row is vectorized (a serial sum in double is bound by the latency of the add).
// The last vector of a row is predicated (masked loads), never read past the row.
void schedule_plane_sums(Func out, Func plane, const RDom& r, const Var& c, const Var& n, int lanes) {
    Var cn("cn"), cno("cno"), cni("cni"), u("u");
    RVar rxo("rxo"), rxi("rxi");
    const Expr planes_per_task = max(task_elements / (r.x.extent() * r.y.extent()), 1);
    out.fuse(c, n, cn).split(cn, cno, cni, planes_per_task, TailStrategy::GuardWithIf).parallel(cno);
    plane.compute_at(out, cni);
    Func by_lane = plane.update().split(r.x, rxo, rxi, lanes).rfactor(rxi, u);
    by_lane.compute_at(out, cni).vectorize(u);
    by_lane.update().vectorize(u);
    plane.update().atomic().vectorize(rxi);  // the lanes' sums, added as a tree of vector halves
}

// Pooling windows of the common CNNs get code of their own (constant strides make strided loads shuffles
// and divisions shifts; constant kernels unroll). Call after scheduling: a specialization copies the schedule.
template <typename Stage>
void specialize_common_windows(Stage s, const Expr& kh, const Expr& kw, const Expr& sh, const Expr& sw) {
    s.specialize(kh == 3 && kw == 3 && sh == 2 && sw == 2);
    s.specialize(kh == 2 && kw == 2 && sh == 2 && sw == 2);
    s.specialize(kh == 3 && kw == 3 && sh == 1 && sw == 1);
}

// Leaky ReLU of a float value: v > 0 ? v : slope * v (relu's slope is 0). The layers fused with the ReLU
// that reads them (batch norm, add) apply it to their rounded value, as the ReLU reads it from memory.
Expr leaky(const Expr& v, const Expr& slope) { return select(v > 0.0f, v, slope * v); }

// Leaky ReLU forward: y = x > 0 ? x : slope * x.
class LeakyReluForward : public Generator<LeakyReluForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<float> slope{"slope"};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = leaky(x(i, j, c, n), slope);
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Leaky ReLU backward: dx = x > 0 ? dy : slope * dy.
class LeakyReluBackward : public Generator<LeakyReluBackward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Input<float> slope{"slope"};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        dx(i, j, c, n) = select(x(i, j, c, n) > 0.0f, dy(i, j, c, n), slope * dy(i, j, c, n));
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Sigmoid forward: y = 1 / (1 + exp(-x)).
class SigmoidForward : public Generator<SigmoidForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = 1.0f / (1.0f + exp(-x(i, j, c, n)));
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Sigmoid backward from its input: dx = dy * y * (1 - y), with y recomputed from x as forward computes it.
class SigmoidBackward : public Generator<SigmoidBackward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        const Expr y = 1.0f / (1.0f + exp(-x(i, j, c, n)));
        dx(i, j, c, n) = dy(i, j, c, n) * y * (1.0f - y);
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Tanh forward: y = tanh(x).
class TanhForward : public Generator<TanhForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = tanh(x(i, j, c, n));
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Tanh backward from its input: dx = dy * (1 - y^2), with y recomputed from x.
class TanhBackward : public Generator<TanhBackward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        const Expr y = tanh(x(i, j, c, n));
        dx(i, j, c, n) = dy(i, j, c, n) * (1.0f - y * y);
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// GELU forward, the exact form: y = x * (1 + erf(x / sqrt 2)) / 2 (Halide's erf: a float polynomial).
class GeluForward : public Generator<GeluForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        const Expr v = x(i, j, c, n);
        y(i, j, c, n) = v * 0.5f * (1.0f + erf(v * 0.70710678118654752f));
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// GELU backward from its input: dx = dy * ((1 + erf(x / sqrt 2)) / 2 + x * exp(-x^2 / 2) / sqrt(2 pi)).
class GeluBackward : public Generator<GeluBackward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        const Expr v = x(i, j, c, n);
        const Expr cdf = 0.5f * (1.0f + erf(v * 0.70710678118654752f));
        const Expr pdf = 0.39894228040143268f * exp(-0.5f * v * v);
        dx(i, j, c, n) = dy(i, j, c, n) * (cdf + v * pdf);
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// y = a + b, summed in double and rounded once (as the reference sums any number of inputs); with `relu`, the
// leaky ReLU of `slope` of that sum (a ReLU fused into the add it reads; `slope` is read only then). Also
// y += x in place (b aliases y) and the fold of a sum of many inputs.
class Add2 : public Generator<Add2> {
public:
    GeneratorParam<bool> relu{"relu", false};
    Input<Buffer<float>> a{"a", 4};
    Input<Buffer<float>> b{"b", 4};
    Input<float> slope{"slope"};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        Expr sum = cast<float>(cast<double>(a(i, j, c, n)) + cast<double>(b(i, j, c, n)));
        y(i, j, c, n) = relu ? leaky(sum, slope) : sum;
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// y = x between strided views (concat writes channel ranges of its output).
class Copy : public Generator<Copy> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = x(i, j, c, n);
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// dx(x, y, c, n) = values(c, n) * scale: the backward of global average pooling.
class Broadcast : public Generator<Broadcast> {
public:
    Input<Buffer<float>> values{"values", 2};  // (c, n)
    Input<float> scale{"scale"};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        dx(i, j, c, n) = values(c, n) * scale;
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// SGD with momentum and weight decay over flat arrays, updated in place: both outputs are one tuple so
// that each element reads w and m before either is written.
class Sgd : public Generator<Sgd> {
public:
    Input<Buffer<float>> w{"w", 1};
    Input<Buffer<float>> m{"m", 1};
    Input<Buffer<float>> g{"g", 1};
    Input<float> lr{"lr"};
    Input<float> momentum{"momentum"};
    Input<float> decay{"decay"};
    Output<Func> updated{"updated", {Float(32), Float(32)}, 1};  // (w, m)

    void generate() {
        Expr g_decayed = g(i) + decay * w(i);
        Expr m_new = momentum * m(i) + g_decayed;
        updated(i) = Tuple(w(i) - lr * m_new, m_new);
        const int vec = vector_width(get_target());
        updated.vectorize(i, vec, TailStrategy::GuardWithIf).parallel(i, 16 * 1024, TailStrategy::GuardWithIf);
    }

private:
    Var i{"i"};
};

// Per-(channel, sample) sums of x and x^2 in double: the local part of batch-norm statistics.
class ChannelStatistics : public Generator<ChannelStatistics> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Func> sums{"sums", {Float(64), Float(64)}, 2};  // (c, n) -> (sum, sum of squares)

    void generate() {
        RDom r(0, x.dim(0).extent(), 0, x.dim(1).extent());
        Expr v = cast<double>(x(r.x, r.y, c, n));
        Func plane("plane");
        plane(c, n) = Tuple(cast<double>(0), cast<double>(0));
        plane(c, n) = Tuple(plane(c, n)[0] + v, plane(c, n)[1] + v * v);
        sums(c, n) = plane(c, n);
        schedule_plane_sums(sums, plane, r, c, n, 2 * vector_width(get_target()));
    }

private:
    Var c{"c"}, n{"n"};
};

// Per-(channel, sample) sums of x in double: global average pooling before the division.
class PlaneSum : public Generator<PlaneSum> {
public:
    Input<Buffer<float>> x{"x", 4};
    Output<Buffer<double>> sums{"sums", 2};  // (c, n)

    void generate() {
        RDom r(0, x.dim(0).extent(), 0, x.dim(1).extent());
        Func plane("plane");
        plane(c, n) = cast<double>(0);
        plane(c, n) += cast<double>(x(r.x, r.y, c, n));
        sums(c, n) = plane(c, n);
        schedule_plane_sums(sums, plane, r, c, n, 2 * vector_width(get_target()));
    }

private:
    Var c{"c"}, n{"n"};
};

// y = gamma[c] * (x - mean[c]) * inv_std[c] + beta[c], in double and rounded once, as the reference; with
// `relu`, the leaky ReLU of `slope` of that value (a ReLU fused into the batch norm it reads; `slope` is read
// only then).
class BatchNormForward : public Generator<BatchNormForward> {
public:
    GeneratorParam<bool> relu{"relu", false};
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> mean{"mean", 1};
    Input<Buffer<float>> inv_std{"inv_std", 1};
    Input<Buffer<float>> gamma{"gamma", 1};
    Input<Buffer<float>> beta{"beta", 1};
    Input<float> slope{"slope"};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        Expr v = cast<double>(gamma(c)) * (cast<double>(x(i, j, c, n)) - mean(c)) * inv_std(c) + beta(c);
        y(i, j, c, n) = relu ? leaky(cast<float>(v), slope) : cast<float>(v);
        schedule_pointwise(y, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Per-(channel, sample) sums of dy and dy * x_hat in double: the local part of d(beta) and d(gamma).
class BatchNormBackwardStatistics : public Generator<BatchNormBackwardStatistics> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Input<Buffer<float>> mean{"mean", 1};
    Input<Buffer<float>> inv_std{"inv_std", 1};
    Output<Func> sums{"sums", {Float(64), Float(64)}, 2};  // (c, n) -> (sum dy, sum dy * x_hat)

    void generate() {
        RDom r(0, x.dim(0).extent(), 0, x.dim(1).extent());
        Expr x_hat = (cast<double>(x(r.x, r.y, c, n)) - mean(c)) * inv_std(c);
        Expr d = cast<double>(dy(r.x, r.y, c, n));
        Func plane("plane");
        plane(c, n) = Tuple(cast<double>(0), cast<double>(0));
        plane(c, n) = Tuple(plane(c, n)[0] + d, plane(c, n)[1] + d * x_hat);
        sums(c, n) = plane(c, n);
        schedule_plane_sums(sums, plane, r, c, n, 2 * vector_width(get_target()));
    }

private:
    Var c{"c"}, n{"n"};
};

// dx = gamma * inv_std * (dy - sum_dy / count - x_hat * sum_dy_xhat / count), in double and rounded once.
class BatchNormBackward : public Generator<BatchNormBackward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Input<Buffer<float>> mean{"mean", 1};
    Input<Buffer<float>> inv_std{"inv_std", 1};
    Input<Buffer<float>> gamma{"gamma", 1};
    Input<Buffer<double>> sum_dy{"sum_dy", 1};
    Input<Buffer<double>> sum_dy_xhat{"sum_dy_xhat", 1};
    Input<double> count{"count"};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        // The divisions by count are per channel (x_hat * (s / count), not (x_hat * s) / count: a vector division
        // per element would dominate); in double the two differ far below float's precision.
        Expr x_hat = (cast<double>(x(i, j, c, n)) - mean(c)) * inv_std(c);
        Expr v = cast<double>(gamma(c)) * inv_std(c) *
                 (cast<double>(dy(i, j, c, n)) - sum_dy(c) / count - x_hat * (sum_dy_xhat(c) / count));
        dx(i, j, c, n) = cast<float>(v);
        schedule_pointwise(dx, i, j, c, n, vector_width(get_target()));
    }

private:
    Var i{"i"}, j{"j"}, c{"c"}, n{"n"};
};

// Max or average pooling forward for any kernel and stride: y(j, i) reduces x(j*sw + b, i*sh + a) over
// a < kh, b < kw, scanning a then b. The average sums in double and divides once, as the reference.
class PoolForward : public Generator<PoolForward> {
public:
    GeneratorParam<bool> average{"average", false};
    Input<Buffer<float>> x{"x", 4};
    Input<int> kh{"kh"}, kw{"kw"}, sh{"sh"}, sw{"sw"};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        RDom r(0, kw, 0, kh);  // r.x is b (inner), r.y is a (outer)
        Expr v = x(j * sw + r.x, i * sh + r.y, c, n);
        // The window reduces in a Func of its own, so that its update loops over the window outside a vector
        // of outputs (an inline reduction would run per output, inside the vector).
        Func window("window");
        if (average) {
            window(j, i, c, n) = cast<double>(0);
            window(j, i, c, n) += cast<double>(v);
            y(j, i, c, n) = cast<float>(window(j, i, c, n) / cast<double>(kh * kw));
        } else {
            window(j, i, c, n) = x(j * sw, i * sh, c, n);
            window(j, i, c, n) = max(window(j, i, c, n), v);
            y(j, i, c, n) = window(j, i, c, n);
        }
        const int vec = vector_width(get_target());
        Var jo("jo"), ji("ji"), cn("cn"), icn("icn");
        y.split(j, jo, ji, vec, TailStrategy::GuardWithIf).vectorize(ji).fuse(c, n, cn).fuse(i, cn, icn);
        y.parallel(icn, 8, TailStrategy::GuardWithIf);
        window.compute_at(y, jo).vectorize(j, vec, TailStrategy::GuardWithIf);
        window.update().vectorize(j, vec, TailStrategy::GuardWithIf);
        specialize_common_windows(window.update(), kh, kw, sh, sw);
        specialize_common_windows<Func>(y, kh, kw, sh, sw);
    }

private:
    Var j{"j"}, i{"i"}, c{"c"}, n{"n"};
};

// Max or average pooling backward, as a gather: each input element sums, over the windows that contain it
// (at most ceil(kh/sh) * ceil(kw/sw) of them, in increasing output order, as a scatter over outputs would
// add them), what those windows send it, summed in double. Max sends dy only to the first maximum of a
// window, found in scan order a then b; average sends dy / (kh*kw) to every element.
class PoolBackward : public Generator<PoolBackward> {
public:
    GeneratorParam<bool> average{"average", false};
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> dy{"dy", 4};
    Input<int> kh{"kh"}, kw{"kw"}, sh{"sh"}, sw{"sw"};
    Output<Buffer<float>> dx{"dx", 4};

    void generate() {
        const int vec = vector_width(get_target());
        Expr out_w = dy.dim(0).extent(), out_h = dy.dim(1).extent();
        const Region plane = {{0, out_w}, {0, out_h}};

        // The position a*kw + b of each window's first maximum.
        Func first_max("first_max");
        if (!average) {
            RDom r(0, kw, 0, kh);
            Expr v = x(j * sw + r.x, i * sh + r.y, c, n);
            first_max(j, i, c, n) = Tuple(0, x(j * sw, i * sh, c, n));
            Expr better = v > first_max(j, i, c, n)[1];
            first_max(j, i, c, n) = Tuple(select(better, r.y * kw + r.x, first_max(j, i, c, n)[0]),
                                          select(better, v, first_max(j, i, c, n)[1]));
        }

        // What each window sends, and to which position (max only): computed per plane, with a border of
        // windows outside dy that send nothing, so that the gather below reads it unclamped (dense vectors,
        // where clamped indices would be gathers).
        Func sent("sent"), target("target");
        Func dy_or_zero = BoundaryConditions::constant_exterior(dy, 0.0f, plane);
        if (average) {
            sent(j, i, c, n) = cast<double>(dy_or_zero(j, i, c, n)) / cast<double>(kh * kw);
        } else {
            Func position("position");
            position(j, i, c, n) = first_max(j, i, c, n)[0];
            Func position_or_none = BoundaryConditions::constant_exterior(position, -1, plane);
            sent(j, i, c, n) = Tuple(position_or_none(j, i, c, n), cast<double>(dy_or_zero(j, i, c, n)));
        }

        // Windows (i, j) with i*sh <= yy < i*sh + kh: i runs from yy/sh - (windows_h - 1) to yy/sh.
        Expr windows_h = (kh + sh - 1) / sh, windows_w = (kw + sw - 1) / sw;
        RDom w(0, windows_w, 0, windows_h);
        Expr wi = yy / sh - (windows_h - 1) + w.y;
        Expr wj = xx / sw - (windows_w - 1) + w.x;
        Expr a = yy - wi * sh, b = xx - wj * sw;
        Expr in_window = a < kh && b < kw;  // not in a gap between windows (stride > kernel)
        Expr received;
        if (average) {
            received = select(in_window, sent(wj, wi, c, n), Expr(0.0));
        } else {
            received = select(in_window && sent(wj, wi, c, n)[0] == a * kw + b, sent(wj, wi, c, n)[1], Expr(0.0));
        }
        dx(xx, yy, c, n) = cast<float>(sum(received));

        // Tasks of whole planes, several when planes are small; the windows are computed per plane (at cno, the
        // bounds of a plane's channel within a task's run of fused planes would be every channel).
        Var cn("cn"), cno("cno"), cni("cni");
        const Expr planes_per_task = max(task_elements / (dx.dim(0).extent() * dx.dim(1).extent()), 1);
        dx.vectorize(xx, vec, TailStrategy::GuardWithIf)
            .fuse(c, n, cn)
            .split(cn, cno, cni, planes_per_task, TailStrategy::GuardWithIf)
            .parallel(cno);
        sent.compute_at(dx, cni).vectorize(j, vec, TailStrategy::GuardWithIf);
        if (!average) {
            first_max.compute_at(dx, cni).vectorize(j, vec, TailStrategy::GuardWithIf);
            first_max.update().vectorize(j, vec, TailStrategy::GuardWithIf);
            specialize_common_windows(first_max.update(), kh, kw, sh, sw);
        }
        specialize_common_windows<Func>(dx, kh, kw, sh, sw);
    }

private:
    Var j{"j"}, i{"i"}, xx{"xx"}, yy{"yy"}, c{"c"}, n{"n"};
};

// Pooling windows of the common CNNs of volumes get code of their own, as specialize_common_windows does for
// images.
template <typename Stage>
void specialize_common_volume_windows(Stage s, const Expr& kd, const Expr& kh, const Expr& kw, const Expr& sd,
                                      const Expr& sh, const Expr& sw) {
    s.specialize(kd == 2 && kh == 2 && kw == 2 && sd == 2 && sh == 2 && sw == 2);
    s.specialize(kd == 3 && kh == 3 && kw == 3 && sd == 2 && sh == 2 && sw == 2);
}

// PoolForward for volumes: y(j, i, k) reduces x(j*sw + b, i*sh + a, k*sd + e) over the taps, scanning e, then
// a, then b (the last dimension fastest).
class VolumePoolForward : public Generator<VolumePoolForward> {
public:
    GeneratorParam<bool> average{"average", false};
    Input<Buffer<float>> x{"x", 5};
    Input<int> kd{"kd"}, kh{"kh"}, kw{"kw"}, sd{"sd"}, sh{"sh"}, sw{"sw"};
    Output<Buffer<float>> y{"y", 5};

    void generate() {
        RDom r(0, kw, 0, kh, 0, kd);  // r.x is b (inner), r.y is a, r.z is e (outer)
        Expr v = x(j * sw + r.x, i * sh + r.y, k * sd + r.z, c, n);
        Func window("window");
        if (average) {
            window(j, i, k, c, n) = cast<double>(0);
            window(j, i, k, c, n) += cast<double>(v);
            y(j, i, k, c, n) = cast<float>(window(j, i, k, c, n) / cast<double>(kd * kh * kw));
        } else {
            window(j, i, k, c, n) = x(j * sw, i * sh, k * sd, c, n);
            window(j, i, k, c, n) = max(window(j, i, k, c, n), v);
            y(j, i, k, c, n) = window(j, i, k, c, n);
        }
        // Tasks of whole volumes (of a channel and sample), several when they are small: with a task per
        // output slice (k fused in too), Halide would size the window's buffer by every channel (its bounds
        // through the nested fused index), and allocate it on the heap for every vector of outputs.
        const int vec = vector_width(get_target());
        Var jo("jo"), ji("ji"), cn("cn");
        const Expr volumes_per_task =
            max(task_elements / (x.dim(0).extent() * x.dim(1).extent() * x.dim(2).extent()), 1);
        y.split(j, jo, ji, vec, TailStrategy::GuardWithIf).vectorize(ji).fuse(c, n, cn);
        y.parallel(cn, volumes_per_task, TailStrategy::GuardWithIf);
        window.compute_at(y, jo).vectorize(j, vec, TailStrategy::GuardWithIf);
        window.update().vectorize(j, vec, TailStrategy::GuardWithIf);
        specialize_common_volume_windows(window.update(), kd, kh, kw, sd, sh, sw);
        specialize_common_volume_windows<Func>(y, kd, kh, kw, sd, sh, sw);
    }

private:
    Var j{"j"}, i{"i"}, k{"k"}, c{"c"}, n{"n"};
};

// PoolBackward for volumes: each input element gathers, over the windows that contain it in increasing
// output order (depth, then row, then column), what they send it, summed in double; max sends dy to the
// first maximum of a window in VolumePoolForward's scan order.
class VolumePoolBackward : public Generator<VolumePoolBackward> {
public:
    GeneratorParam<bool> average{"average", false};
    Input<Buffer<float>> x{"x", 5};
    Input<Buffer<float>> dy{"dy", 5};
    Input<int> kd{"kd"}, kh{"kh"}, kw{"kw"}, sd{"sd"}, sh{"sh"}, sw{"sw"};
    Output<Buffer<float>> dx{"dx", 5};

    void generate() {
        const int vec = vector_width(get_target());
        const Region volume = {{0, dy.dim(0).extent()}, {0, dy.dim(1).extent()}, {0, dy.dim(2).extent()}};

        // The position (e*kh + a)*kw + b of each window's first maximum.
        Func first_max("first_max");
        if (!average) {
            RDom r(0, kw, 0, kh, 0, kd);
            Expr v = x(j * sw + r.x, i * sh + r.y, k * sd + r.z, c, n);
            first_max(j, i, k, c, n) = Tuple(0, x(j * sw, i * sh, k * sd, c, n));
            Expr better = v > first_max(j, i, k, c, n)[1];
            first_max(j, i, k, c, n) = Tuple(select(better, (r.z * kh + r.y) * kw + r.x, first_max(j, i, k, c, n)[0]),
                                             select(better, v, first_max(j, i, k, c, n)[1]));
        }

        // What each window sends (and to which position, for max), with a border of windows outside dy that
        // send nothing, so that the gather below reads it unclamped.
        Func sent("sent");
        Func dy_or_zero = BoundaryConditions::constant_exterior(dy, 0.0f, volume);
        if (average) {
            sent(j, i, k, c, n) = cast<double>(dy_or_zero(j, i, k, c, n)) / cast<double>(kd * kh * kw);
        } else {
            Func position("position");
            position(j, i, k, c, n) = first_max(j, i, k, c, n)[0];
            Func position_or_none = BoundaryConditions::constant_exterior(position, -1, volume);
            sent(j, i, k, c, n) = Tuple(position_or_none(j, i, k, c, n), cast<double>(dy_or_zero(j, i, k, c, n)));
        }

        // Windows (k, i, j) with k*sd <= zz < k*sd + kd, and so on along each dimension.
        Expr windows_d = (kd + sd - 1) / sd, windows_h = (kh + sh - 1) / sh, windows_w = (kw + sw - 1) / sw;
        RDom w(0, windows_w, 0, windows_h, 0, windows_d);
        Expr wk = zz / sd - (windows_d - 1) + w.z;
        Expr wi = yy / sh - (windows_h - 1) + w.y;
        Expr wj = xx / sw - (windows_w - 1) + w.x;
        Expr e = zz - wk * sd, a = yy - wi * sh, b = xx - wj * sw;
        Expr in_window = e < kd && a < kh && b < kw;  // not in a gap between windows (stride > kernel)
        Expr received;
        if (average) {
            received = select(in_window, sent(wj, wi, wk, c, n), Expr(0.0));
        } else {
            received = select(in_window && sent(wj, wi, wk, c, n)[0] == (e * kh + a) * kw + b,
                              sent(wj, wi, wk, c, n)[1], Expr(0.0));
        }
        // The sum over the windows, in their order for each element, for a vector of elements at once (an inline
        // sum would reduce element by element).
        Func gathered("gathered");
        gathered(xx, yy, zz, c, n) = Expr(0.0);
        gathered(xx, yy, zz, c, n) += received;
        dx(xx, yy, zz, c, n) = cast<float>(gathered(xx, yy, zz, c, n));

        // Tasks of whole volumes of dx (of a channel and sample), several when they are small, as in
        // VolumePoolForward; each slice with the windows it reads.
        Var cn("cn"), cno("cno"), cni("cni"), xo("xo"), xi("xi");
        const Expr volumes_per_task =
            max(task_elements / (dx.dim(0).extent() * dx.dim(1).extent() * dx.dim(2).extent()), 1);
        dx.split(xx, xo, xi, vec, TailStrategy::GuardWithIf).vectorize(xi).fuse(c, n, cn);
        dx.split(cn, cno, cni, volumes_per_task, TailStrategy::GuardWithIf).parallel(cno);
        gathered.compute_at(dx, xo).vectorize(xx, vec, TailStrategy::GuardWithIf);
        gathered.update()
            .split(xx, xo, xi, vec, TailStrategy::GuardWithIf)
            .vectorize(xi)
            .reorder(xi, w.x, w.y, w.z, xo);
        specialize_common_volume_windows(gathered.update(), kd, kh, kw, sd, sh, sw);
        // Stored per volume, computed slice by slice: Halide slides the windows along depth (and folds their
        // storage), computing each slice of windows once for all the slices of dx that read it.
        sent.store_at(dx, cni).compute_at(dx, zz).vectorize(j, vec, TailStrategy::GuardWithIf);
        if (!average) {
            first_max.store_at(dx, cni).compute_at(dx, zz).vectorize(j, vec, TailStrategy::GuardWithIf);
            first_max.update().vectorize(j, vec, TailStrategy::GuardWithIf);
            specialize_common_volume_windows(first_max.update(), kd, kh, kw, sd, sh, sw);
        }
        specialize_common_volume_windows<Func>(dx, kd, kh, kw, sd, sh, sw);
    }

private:
    Var j{"j"}, i{"i"}, k{"k"}, xx{"xx"}, yy{"yy"}, zz{"zz"}, c{"c"}, n{"n"};
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LeakyReluForward, leaky_relu_forward)
HALIDE_REGISTER_GENERATOR(LeakyReluBackward, leaky_relu_backward)
HALIDE_REGISTER_GENERATOR(SigmoidForward, sigmoid_forward)
HALIDE_REGISTER_GENERATOR(SigmoidBackward, sigmoid_backward)
HALIDE_REGISTER_GENERATOR(TanhForward, tanh_forward)
HALIDE_REGISTER_GENERATOR(TanhBackward, tanh_backward)
HALIDE_REGISTER_GENERATOR(GeluForward, gelu_forward)
HALIDE_REGISTER_GENERATOR(GeluBackward, gelu_backward)
HALIDE_REGISTER_GENERATOR(Add2, add2)
HALIDE_REGISTER_GENERATOR(Copy, copy)
HALIDE_REGISTER_GENERATOR(Broadcast, broadcast)
HALIDE_REGISTER_GENERATOR(Sgd, sgd)
HALIDE_REGISTER_GENERATOR(ChannelStatistics, channel_statistics)
HALIDE_REGISTER_GENERATOR(PlaneSum, plane_sum)
HALIDE_REGISTER_GENERATOR(BatchNormForward, batchnorm_forward)
HALIDE_REGISTER_GENERATOR(BatchNormBackwardStatistics, batchnorm_backward_statistics)
HALIDE_REGISTER_GENERATOR(BatchNormBackward, batchnorm_backward)
HALIDE_REGISTER_GENERATOR(PoolForward, pool_forward)
HALIDE_REGISTER_GENERATOR(PoolBackward, pool_backward)
HALIDE_REGISTER_GENERATOR(VolumePoolForward, volume_pool_forward)
HALIDE_REGISTER_GENERATOR(VolumePoolBackward, volume_pool_backward)
