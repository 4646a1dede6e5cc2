// Halide generators for the CPU kernels other than convolution and fc, compiled ahead of time (one file, so
// that Halide.h is parsed once per build).
//
// Tensors are 4-D float32 views in Halide's order (x, y, c, n), innermost first. Only dim 0 has a known
// stride (1): views are windows of tiles with margins, so rows, planes and samples are strided. Every
// schedule vectorizes along x with GuardWithIf (never ShiftInwards: some outputs alias their inputs, as in
// y += x, and a recomputed element would be added twice) and runs rows, channels and samples in parallel.
#include <Halide.h>

namespace {

using namespace Halide;

// Vectors along x: 8 floats (one AVX2 register; also fine on AVX-512, where rows of small tiles are short),
// else what the target offers.
int vector_width(const Target& t) { return t.has_feature(Target::AVX2) ? 8 : t.natural_vector_size<float>(); }

// Rows of a 4-D pointwise output, in parallel tasks of a few rows across channels and samples.
void schedule_pointwise(Func f, const Var& x, const Var& y, const Var& c, const Var& n, int vec) {
    Var cn("cn"), ycn("ycn");
    f.vectorize(x, vec, TailStrategy::GuardWithIf)
        .fuse(c, n, cn)
        .fuse(y, cn, ycn)
        .parallel(ycn, 8, TailStrategy::GuardWithIf);
}

// Per-(channel, sample) reductions over a plane run in parallel over channels and samples; each plane is a
// serial sum in double (the caller adds the planes into its own sums).
void schedule_plane_sums(Func f, const Var& c, const Var& n) {
    Var cn("cn");
    f.compute_root().fuse(c, n, cn).parallel(cn);
    f.update().fuse(c, n, cn).parallel(cn);
}

// Pooling windows of the common CNNs get code of their own (constant strides make strided loads shuffles
// and divisions shifts; constant kernels unroll). Call after scheduling: a specialization copies the schedule.
template <typename Stage>
void specialize_common_windows(Stage s, const Expr& kh, const Expr& kw, const Expr& sh, const Expr& sw) {
    s.specialize(kh == 3 && kw == 3 && sh == 2 && sw == 2);
    s.specialize(kh == 2 && kw == 2 && sh == 2 && sw == 2);
    s.specialize(kh == 3 && kw == 3 && sh == 1 && sw == 1);
}

// Leaky ReLU forward: y = x > 0 ? x : slope * x.
class LeakyReluForward : public Generator<LeakyReluForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<float> slope{"slope"};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = select(x(i, j, c, n) > 0.0f, x(i, j, c, n), slope * x(i, j, c, n));
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

// y = a + b, summed in double and rounded once (as the reference sums any number of inputs). Also y += x in
// place (b aliases y) and the fold of a sum of many inputs.
class Add2 : public Generator<Add2> {
public:
    Input<Buffer<float>> a{"a", 4};
    Input<Buffer<float>> b{"b", 4};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        y(i, j, c, n) = cast<float>(cast<double>(a(i, j, c, n)) + cast<double>(b(i, j, c, n)));
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
        sums(c, n) = Tuple(cast<double>(0), cast<double>(0));
        sums(c, n) = Tuple(sums(c, n)[0] + v, sums(c, n)[1] + v * v);
        schedule_plane_sums(sums, c, n);
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
        sums(c, n) = cast<double>(0);
        sums(c, n) += cast<double>(x(r.x, r.y, c, n));
        schedule_plane_sums(sums, c, n);
    }

private:
    Var c{"c"}, n{"n"};
};

// y = gamma[c] * (x - mean[c]) * inv_std[c] + beta[c], in double and rounded once, as the reference.
class BatchNormForward : public Generator<BatchNormForward> {
public:
    Input<Buffer<float>> x{"x", 4};
    Input<Buffer<float>> mean{"mean", 1};
    Input<Buffer<float>> inv_std{"inv_std", 1};
    Input<Buffer<float>> gamma{"gamma", 1};
    Input<Buffer<float>> beta{"beta", 1};
    Output<Buffer<float>> y{"y", 4};

    void generate() {
        Expr v = cast<double>(gamma(c)) * (cast<double>(x(i, j, c, n)) - mean(c)) * inv_std(c) + beta(c);
        y(i, j, c, n) = cast<float>(v);
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
        sums(c, n) = Tuple(cast<double>(0), cast<double>(0));
        sums(c, n) = Tuple(sums(c, n)[0] + d, sums(c, n)[1] + d * x_hat);
        schedule_plane_sums(sums, c, n);
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
        Expr x_hat = (cast<double>(x(i, j, c, n)) - mean(c)) * inv_std(c);
        Expr v = cast<double>(gamma(c)) * inv_std(c) *
                 (cast<double>(dy(i, j, c, n)) - sum_dy(c) / count - x_hat * sum_dy_xhat(c) / count);
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

        // Windows (i, j) with i*sh <= yy < i*sh + kh: i runs from yy/sh - (windows_h - 1) to yy/sh.
        Expr windows_h = (kh + sh - 1) / sh, windows_w = (kw + sw - 1) / sw;
        RDom w(0, windows_w, 0, windows_h);
        Expr wi = yy / sh - (windows_h - 1) + w.y;
        Expr wj = xx / sw - (windows_w - 1) + w.x;
        Expr a = yy - wi * sh, b = xx - wj * sw;
        Expr inside = wi >= 0 && wi < out_h && wj >= 0 && wj < out_w && a < kh && b < kw;
        Expr ci = clamp(wi, 0, out_h - 1), cj = clamp(wj, 0, out_w - 1);
        Expr sent;
        if (average) {
            sent = select(inside, cast<double>(dy(cj, ci, c, n)) / cast<double>(kh * kw), Expr(0.0));
        } else {
            sent =
                select(inside && first_max(cj, ci, c, n)[0] == a * kw + b, cast<double>(dy(cj, ci, c, n)), Expr(0.0));
        }
        dx(xx, yy, c, n) = cast<float>(sum(sent));

        Var cn("cn");
        dx.vectorize(xx, vec, TailStrategy::GuardWithIf).fuse(c, n, cn).parallel(cn);
        if (!average) {
            first_max.compute_at(dx, cn).vectorize(j, vec, TailStrategy::GuardWithIf);
            first_max.update().vectorize(j, vec, TailStrategy::GuardWithIf);
            specialize_common_windows(first_max.update(), kh, kw, sh, sw);
        }
        specialize_common_windows<Func>(dx, kh, kw, sh, sw);
    }

private:
    Var j{"j"}, i{"i"}, xx{"xx"}, yy{"yy"}, c{"c"}, n{"n"};
};

}  // namespace

HALIDE_REGISTER_GENERATOR(LeakyReluForward, leaky_relu_forward)
HALIDE_REGISTER_GENERATOR(LeakyReluBackward, leaky_relu_backward)
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
