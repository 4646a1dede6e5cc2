// The CPU kernels other than convolution and fc: views wrapped as Halide buffers and handed to the
// pipelines of backend/halide; the loss is plain C++. The pipelines take images (x, y, c, n), which a volume
// is slice by slice (depth_slices.hpp), except pooling, which has pipelines of volumes (x, y, z, c, n).
#include "halide_kernels.hpp"
#include "../tensors/planes.hpp"
#include "blocked_kernels.hpp"
#include "depth_slices.hpp"
#include "kernel_checks.hpp"
#include "regression_formula.hpp"

#include <dsl/base/error.hpp>

#include <HalideRuntime.h>

#include <dsl_halide_add2.h>
#include <dsl_halide_add2_relu.h>
#include <dsl_halide_average_pool_backward.h>
#include <dsl_halide_average_pool_forward.h>
#include <dsl_halide_batchnorm_backward.h>
#include <dsl_halide_batchnorm_backward_statistics.h>
#include <dsl_halide_batchnorm_forward.h>
#include <dsl_halide_batchnorm_relu_forward.h>
#include <dsl_halide_broadcast.h>
#include <dsl_halide_channel_statistics.h>
#include <dsl_halide_copy.h>
#include <dsl_halide_gelu_backward.h>
#include <dsl_halide_gelu_forward.h>
#include <dsl_halide_leaky_relu_backward.h>
#include <dsl_halide_leaky_relu_forward.h>
#include <dsl_halide_max_pool_backward.h>
#include <dsl_halide_max_pool_forward.h>
#include <dsl_halide_plane_sum.h>
#include <dsl_halide_sgd.h>
#include <dsl_halide_sigmoid_backward.h>
#include <dsl_halide_sigmoid_forward.h>
#include <dsl_halide_tanh_backward.h>
#include <dsl_halide_tanh_forward.h>
#include <dsl_halide_volume_average_pool_backward.h>
#include <dsl_halide_volume_average_pool_forward.h>
#include <dsl_halide_volume_max_pool_backward.h>
#include <dsl_halide_volume_max_pool_forward.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl::backend {
namespace {

// Halide's runtime reports errors through a process-wide handler; keep the last message of this thread so
// that a failed call says why (the default handler only prints it).
thread_local std::string last_halide_error;

void keep_halide_error(void*, const char* message) { last_halide_error = message; }

// Halide's parallel loops run on OpenMP's thread team, the one oneDNN's convolutions use: with Halide's own
// pool beside it, the two teams would take turns on the same cores (OpenMP's threads also spin a while after
// each region, against Halide's workers). Each thread takes one contiguous range of tasks: handing them out
// one by one (schedule(dynamic)) made small calls several times slower, the shared counter bouncing between
// the cores; guided did as well as static.
int openmp_do_par_for(void* user_context, halide_task_t task, int min, int size, std::uint8_t* closure) {
    if (size == 1) return task(user_context, min, closure);
    int result = 0;
#pragma omp parallel for schedule(static)
    for (int i = min; i < min + size; ++i) {
        const int r = task(user_context, i, closure);
        if (r != 0) {
#pragma omp atomic write
            result = r;
        }
    }
    return result;
}

struct InstallHandlers {
    InstallHandlers() {
        halide_set_error_handler(keep_halide_error);
        halide_set_custom_do_par_for(openmp_do_par_for);
    }
} install_handlers;

void check_halide(int result, const char* pipeline) {
    DSL_INTERNAL_CHECK(result == 0, std::string("halide pipeline ") + pipeline + " failed (" + std::to_string(result) +
                                        "): " + last_halide_error);
}

std::int32_t narrow(std::int64_t v, const char* what) {
    DSL_INTERNAL_CHECK(v >= 0 && v <= std::numeric_limits<std::int32_t>::max(),
                       std::string(what) + " does not fit Halide's 32-bit extents and strides");
    return static_cast<std::int32_t>(v);
}

// A halide_buffer_t over caller memory, with dimensions innermost first. Not copyable: the buffer points at
// its own dimension array.
template <int Rank>
struct HalideBuffer {
    halide_dimension_t dim[Rank];
    halide_buffer_t buffer{};

    HalideBuffer(const void* host, halide_type_t type, const std::int64_t (&extents)[Rank],
                 const std::int64_t (&strides)[Rank]) {
        for (int d = 0; d < Rank; ++d)
            dim[d] = halide_dimension_t(0, narrow(extents[d], "an extent"), narrow(strides[d], "a stride"));
        // Halide takes inputs and outputs alike through non-const buffers; inputs are only read.
        buffer.host = static_cast<std::uint8_t*>(const_cast<void*>(host));
        buffer.type = type;
        buffer.dimensions = Rank;
        buffer.dim = dim;
    }
    HalideBuffer(const HalideBuffer&) = delete;
    HalideBuffer& operator=(const HalideBuffer&) = delete;

    halide_buffer_t* raw() { return &buffer; }
};

constexpr halide_type_t float32{halide_type_float, 32, 1};
constexpr halide_type_t float64{halide_type_float, 64, 1};

// Planes as the pipelines of images take them, in Halide's order (x, y, c, n); x is contiguous.
struct TileBuffer : HalideBuffer<4> {
    template <typename T>
    explicit TileBuffer(PlaneView<T> p)
        : HalideBuffer<4>(p.base, float32, {p.dims.w, p.dims.h, p.dims.c, p.dims.n},
                          {1, p.stride_h, p.stride_c, p.stride_n}) {}
};

// A volume as the pipelines of volumes take it: (x, y, z, c, n).
struct VolumeBuffer : HalideBuffer<5> {
    template <typename T>
    explicit VolumeBuffer(BasicView<T> v)
        : HalideBuffer<5>(v.base, float32, {v.dims.space[2], v.dims.space[1], v.dims.space[0], v.dims.c, v.dims.n},
                          {1, v.stride[1], v.stride[0], v.stride_c, v.stride_n}) {}
};

// A dense array of `count` elements of `type`.
struct ArrayBuffer : HalideBuffer<1> {
    ArrayBuffer(const void* data, halide_type_t type, std::int64_t count) : HalideBuffer<1>(data, type, {count}, {1}) {}
};

// A dense (c, n) array of per-plane values, as the caller's sums[n * C + c] are laid out.
struct PlaneBuffer : HalideBuffer<2> {
    PlaneBuffer(const void* data, halide_type_t type, std::int64_t c, std::int64_t n)
        : HalideBuffer<2>(data, type, {c, n}, {1, c}) {}
};

bool empty(const Dims& d) { return d.elements() == 0; }

// The slope argument of the add and batch-norm pipelines without a ReLU fused in, which do not read it.
constexpr float no_relu = 0.0f;

class HalideActivation final : public ActivationKernels {
public:
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        check_same_dims(x.dims, y.dims, "activation forward");
        if (empty(y.dims)) return;
        if (y.blocked()) return blocked::leaky_relu_forward(x, leaky_slope(f, slope), y);
        const Slicing s = slicing(true, x, y);
        for (std::int64_t k = 0; k < s.count; ++k) forward(f, slice(x, s, k), slope, slice(y, s, k));
    }

    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        check_same_dims(x.dims, dy.dims, "activation backward");
        check_same_dims(x.dims, dx.dims, "activation backward");
        if (empty(dx.dims)) return;
        if (dx.blocked()) return blocked::leaky_relu_backward(x, dy, leaky_slope(f, slope), dx);
        const Slicing s = slicing(true, x, dy, dx);
        for (std::int64_t k = 0; k < s.count; ++k) backward(f, slice(x, s, k), slice(dy, s, k), slope, slice(dx, s, k));
    }

private:
    // Of blocked views: the leaky ReLU's slope (relu's 0), the one function with blocked kernels.
    static float leaky_slope(frontend::Activation f, float slope) {
        DSL_INTERNAL_CHECK(f == frontend::Activation::relu || f == frontend::Activation::leaky_relu,
                           "an activation other than the (leaky) ReLU over blocked views");
        return slope;
    }

    static void forward(frontend::Activation f, ConstPlanes x, float slope, Planes y) {
        TileBuffer xb(x), yb(y);
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return check_halide(dsl_halide_leaky_relu_forward(xb.raw(), slope, yb.raw()), "leaky_relu_forward");
            case frontend::Activation::sigmoid:
                return check_halide(dsl_halide_sigmoid_forward(xb.raw(), yb.raw()), "sigmoid_forward");
            case frontend::Activation::tanh:
                return check_halide(dsl_halide_tanh_forward(xb.raw(), yb.raw()), "tanh_forward");
            case frontend::Activation::gelu:
                return check_halide(dsl_halide_gelu_forward(xb.raw(), yb.raw()), "gelu_forward");
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }

    static void backward(frontend::Activation f, ConstPlanes x, ConstPlanes dy, float slope, Planes dx) {
        TileBuffer xb(x), dyb(dy), dxb(dx);
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return check_halide(dsl_halide_leaky_relu_backward(xb.raw(), dyb.raw(), slope, dxb.raw()),
                                    "leaky_relu_backward");
            case frontend::Activation::sigmoid:
                return check_halide(dsl_halide_sigmoid_backward(xb.raw(), dyb.raw(), dxb.raw()), "sigmoid_backward");
            case frontend::Activation::tanh:
                return check_halide(dsl_halide_tanh_backward(xb.raw(), dyb.raw(), dxb.raw()), "tanh_backward");
            case frontend::Activation::gelu:
                return check_halide(dsl_halide_gelu_backward(xb.raw(), dyb.raw(), dxb.raw()), "gelu_backward");
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }
};

// Adds per-(c, n) partial sums into the caller's per-channel sums.
void add_over_samples(const std::vector<double>& planes, std::int64_t channels, std::int64_t samples, double* into) {
    for (std::int64_t n = 0; n < samples; ++n)
        for (std::int64_t c = 0; c < channels; ++c) into[c] += planes[static_cast<std::size_t>(n * channels + c)];
}

class HalideBatchNorm final : public BatchNormKernels {
public:
    void statistics(ConstView x, double* sum, double* sum_sq) override {
        if (empty(x.dims)) return;
        if (x.blocked()) return blocked::batchnorm_statistics(x, sum, sum_sq);
        const auto planes = static_cast<std::size_t>(x.dims.c * x.dims.n);
        std::vector<double> s(planes), s2(planes);
        const Slicing slices = slicing(true, x);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k));
            PlaneBuffer sb(s.data(), float64, x.dims.c, x.dims.n), s2b(s2.data(), float64, x.dims.c, x.dims.n);
            check_halide(dsl_halide_channel_statistics(xb.raw(), sb.raw(), s2b.raw()), "channel_statistics");
            add_over_samples(s, x.dims.c, x.dims.n, sum);
            add_over_samples(s2, x.dims.c, x.dims.n, sum_sq);
        }
    }

    void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                 View y) override {
        forward(x, mean, inv_std, gamma, beta, std::nullopt, y);
    }

    bool forward_relu(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                      float slope, View y) override {
        forward(x, mean, inv_std, gamma, beta, slope, y);
        return true;
    }

    void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                             double* sum_dy_xhat) override {
        check_same_dims(x.dims, dy.dims, "batchnorm backward_statistics");
        if (empty(x.dims)) return;
        if (x.blocked()) return blocked::batchnorm_backward_statistics(x, dy, mean, inv_std, sum_dy, sum_dy_xhat);
        const std::int64_t c = x.dims.c;
        const auto planes = static_cast<std::size_t>(c * x.dims.n);
        std::vector<double> s(planes), s2(planes);
        ArrayBuffer mb(mean, float32, c), ib(inv_std, float32, c);
        const Slicing slices = slicing(true, x, dy);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k)), dyb(slice(dy, slices, k));
            PlaneBuffer sb(s.data(), float64, c, x.dims.n), s2b(s2.data(), float64, c, x.dims.n);
            check_halide(
                dsl_halide_batchnorm_backward_statistics(xb.raw(), dyb.raw(), mb.raw(), ib.raw(), sb.raw(), s2b.raw()),
                "batchnorm_backward_statistics");
            add_over_samples(s, c, x.dims.n, sum_dy);
            add_over_samples(s2, c, x.dims.n, sum_dy_xhat);
        }
    }

    void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                  const double* sum_dy, const double* sum_dy_xhat, double count, View dx) override {
        check_same_dims(x.dims, dy.dims, "batchnorm backward");
        check_same_dims(x.dims, dx.dims, "batchnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
        if (empty(dx.dims)) return;
        if (dx.blocked())
            return blocked::batchnorm_backward(x, dy, mean, inv_std, gamma, sum_dy, sum_dy_xhat, count, dx);
        const std::int64_t c = x.dims.c;
        ArrayBuffer mb(mean, float32, c), ib(inv_std, float32, c), gb(gamma, float32, c);
        ArrayBuffer sb(sum_dy, float64, c), s2b(sum_dy_xhat, float64, c);
        const Slicing slices = slicing(true, x, dy, dx);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k)), dyb(slice(dy, slices, k)), dxb(slice(dx, slices, k));
            check_halide(dsl_halide_batchnorm_backward(xb.raw(), dyb.raw(), mb.raw(), ib.raw(), gb.raw(), sb.raw(),
                                                       s2b.raw(), count, dxb.raw()),
                         "batchnorm_backward");
        }
    }

private:
    // The ReLU's slope where it follows; none for batch norm alone.
    static void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                        std::optional<float> relu, View y) {
        check_same_dims(x.dims, y.dims, "batchnorm forward");
        if (empty(y.dims)) return;
        if (y.blocked()) return blocked::batchnorm_forward(x, mean, inv_std, gamma, beta, relu, y);
        const std::int64_t c = x.dims.c;
        ArrayBuffer mb(mean, float32, c), ib(inv_std, float32, c), gb(gamma, float32, c), bb(beta, float32, c);
        const Slicing slices = slicing(true, x, y);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k)), yb(slice(y, slices, k));
            const auto pipeline = relu ? dsl_halide_batchnorm_relu_forward : dsl_halide_batchnorm_forward;
            check_halide(pipeline(xb.raw(), mb.raw(), ib.raw(), gb.raw(), bb.raw(), relu.value_or(no_relu), yb.raw()),
                         "batchnorm_forward");
        }
    }
};

class HalidePool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& window) override {
        if (y.blocked()) return blocked::pool_forward(kind, x, y, window);
        check(x.dims, y.dims, window);
        if (empty(y.dims)) return;
        if (x.dims.rank() == 3) return forward_volume(kind, x, y, window);
        TileBuffer xb(planes(x)), yb(planes(y));
        const auto [kh, kw, sh, sw] = params(window);
        if (kind == PoolKind::max)
            check_halide(dsl_halide_max_pool_forward(xb.raw(), kh, kw, sh, sw, yb.raw()), "max_pool_forward");
        else
            check_halide(dsl_halide_average_pool_forward(xb.raw(), kh, kw, sh, sw, yb.raw()), "average_pool_forward");
    }

    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) override {
        if (dx.blocked()) return blocked::pool_backward(kind, x, dy, dx, window);
        check(x.dims, dy.dims, window);
        check_same_dims(x.dims, dx.dims, "pool backward");
        if (empty(dx.dims)) return;
        if (empty(dy.dims)) {  // no window reads x (the pipeline could not clamp into an empty dy): all zero
            const std::int64_t w = row_length(dx.dims);
            for_each_row(dx, [&](std::int64_t, std::int64_t, const Index&, float* row) { std::fill_n(row, w, 0.0f); });
            return;
        }
        if (x.dims.rank() == 3) return backward_volume(kind, x, dy, dx, window);
        TileBuffer xb(planes(x)), dyb(planes(dy)), dxb(planes(dx));
        const auto [kh, kw, sh, sw] = params(window);
        if (kind == PoolKind::max)
            check_halide(dsl_halide_max_pool_backward(xb.raw(), dyb.raw(), kh, kw, sh, sw, dxb.raw()),
                         "max_pool_backward");
        else
            check_halide(dsl_halide_average_pool_backward(xb.raw(), dyb.raw(), kh, kw, sh, sw, dxb.raw()),
                         "average_pool_backward");
    }

    void global_sum(ConstView x, double* sums) override {
        if (empty(x.dims)) return;
        std::vector<double> planes(static_cast<std::size_t>(x.dims.c * x.dims.n));
        const Slicing slices = slicing(true, x);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k));
            PlaneBuffer pb(planes.data(), float64, x.dims.c, x.dims.n);
            check_halide(dsl_halide_plane_sum(xb.raw(), pb.raw()), "plane_sum");
            for (std::size_t i = 0; i < planes.size(); ++i) sums[i] += planes[i];
        }
    }

    void broadcast(const float* values, float scale, View dx) override {
        if (empty(dx.dims)) return;
        PlaneBuffer vb(values, float32, dx.dims.c, dx.dims.n);
        const Slicing slices = slicing(true, dx);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer dxb(slice(dx, slices, k));
            check_halide(dsl_halide_broadcast(vb.raw(), scale, dxb.raw()), "broadcast");
        }
    }

private:
    static void check(const Dims& x, const Dims& y, const Window& window) {
        DSL_INTERNAL_CHECK(!window.zeros_outside, "pool: planar views given a window whose padding lies outside them");
        for (int d = 0; d < window.dilation.rank(); ++d)
            DSL_INTERNAL_CHECK(window.dilation[d] == 1, "pool: dilation is not supported");
        check_pool(x, y, window);
    }

    struct Params {
        std::int32_t kh, kw, sh, sw;
    };
    static Params params(const Window& w) {
        return {narrow(w.kernel[0], "kernel"), narrow(w.kernel[1], "kernel"), narrow(w.stride[0], "stride"),
                narrow(w.stride[1], "stride")};
    }

    // The pipelines of volumes take the window depth first, as Window holds it.
    struct VolumeParams {
        std::int32_t kd, kh, kw, sd, sh, sw;
    };
    static VolumeParams volume_params(const Window& w) {
        return {narrow(w.kernel[0], "kernel"), narrow(w.kernel[1], "kernel"), narrow(w.kernel[2], "kernel"),
                narrow(w.stride[0], "stride"), narrow(w.stride[1], "stride"), narrow(w.stride[2], "stride")};
    }

    static void forward_volume(PoolKind kind, ConstView x, View y, const Window& window) {
        VolumeBuffer xb(x), yb(y);
        const auto [kd, kh, kw, sd, sh, sw] = volume_params(window);
        if (kind == PoolKind::max)
            check_halide(dsl_halide_volume_max_pool_forward(xb.raw(), kd, kh, kw, sd, sh, sw, yb.raw()),
                         "volume_max_pool_forward");
        else
            check_halide(dsl_halide_volume_average_pool_forward(xb.raw(), kd, kh, kw, sd, sh, sw, yb.raw()),
                         "volume_average_pool_forward");
    }

    static void backward_volume(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) {
        VolumeBuffer xb(x), dyb(dy), dxb(dx);
        const auto [kd, kh, kw, sd, sh, sw] = volume_params(window);
        if (kind == PoolKind::max)
            check_halide(dsl_halide_volume_max_pool_backward(xb.raw(), dyb.raw(), kd, kh, kw, sd, sh, sw, dxb.raw()),
                         "volume_max_pool_backward");
        else
            check_halide(
                dsl_halide_volume_average_pool_backward(xb.raw(), dyb.raw(), kd, kh, kw, sd, sh, sw, dxb.raw()),
                "volume_average_pool_backward");
    }
};

class HalideEltwise final : public EltwiseKernels {
public:
    // Two inputs sum in double and round once, as the reference does; more inputs fold pairwise, rounding to
    // float after each (within a few ulps of the reference). y may alias xs[0] or xs[1] but not a later input,
    // which the fold reads after y is written.
    void add(const std::vector<ConstView>& xs, View y) override { add(xs, std::nullopt, y); }

    // Two inputs only: the fold of more rounds between its sums, before the ReLU would read the last.
    bool add_relu(const std::vector<ConstView>& xs, float slope, View y) override {
        if (xs.size() != 2) return false;
        add(xs, slope, y);
        return true;
    }

    void copy(ConstView x, View y) override {
        check_same_dims(x.dims, y.dims, "copy");
        if (empty(y.dims)) return;
        if (y.blocked()) return blocked::copy(x, y);
        const Slicing slices = slicing(true, x, y);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer xb(slice(x, slices, k)), yb(slice(y, slices, k));
            check_halide(dsl_halide_copy(xb.raw(), yb.raw()), "copy");
        }
    }

    // y += x in place: the pipeline reads each element of y before writing it, and never recomputes one.
    void accumulate(ConstView x, View y) override {
        check_same_dims(x.dims, y.dims, "accumulate");
        if (empty(y.dims)) return;
        if (y.blocked()) return blocked::accumulate(x, y);
        const Slicing slices = slicing(true, x, y);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer yin(slice(ConstView(y), slices, k)), xb(slice(x, slices, k)), yb(slice(y, slices, k));
            check_halide(dsl_halide_add2(yin.raw(), xb.raw(), no_relu, yb.raw()), "add2");
        }
    }

    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) override {
        if (count == 0) return;
        ArrayBuffer wb(w, float32, count), mb(m, float32, count), gb(g, float32, count);
        ArrayBuffer w_out(w, float32, count), m_out(m, float32, count);
        check_halide(dsl_halide_sgd(wb.raw(), mb.raw(), gb.raw(), lr, momentum, decay, w_out.raw(), m_out.raw()),
                     "sgd");
    }

    // Memory-bound and a small part of a step: the reference's loop, which the compiler vectorizes.
    void adam(float* w, float* m, float* v, const float* g, std::int64_t count, const AdamStep& step) override {
        adam_update(w, m, v, g, count, step);
    }

    bool unscale(const std::vector<GradientArray>& gradients, float factor) override {
        return unscale_arrays(gradients, factor);
    }

private:
    // `relu`: the slope of the ReLU that follows a sum of two inputs; none for add alone.
    void add(const std::vector<ConstView>& xs, std::optional<float> relu, View y) {
        DSL_INTERNAL_CHECK(!xs.empty(), "add: no inputs");
        DSL_INTERNAL_CHECK(!relu || xs.size() == 2, "add: a ReLU after other than two inputs");
        for (const ConstView& x : xs) check_same_dims(x.dims, y.dims, "add");
        if (empty(y.dims)) return;
        if (y.blocked()) return blocked::add(xs, relu, y);
        if (xs.size() == 1) return copy(xs[0], y);
        Slicing slices = slicing(true, y);
        for (const ConstView& x : xs)
            if (!rows_follow(x)) slices = slicing(false, y);
        for (std::int64_t k = 0; k < slices.count; ++k) {
            TileBuffer yb(slice(y, slices, k));
            {
                TileBuffer ab(slice(xs[0], slices, k)), bb(slice(xs[1], slices, k));
                const auto pipeline = relu ? dsl_halide_add2_relu : dsl_halide_add2;
                check_halide(pipeline(ab.raw(), bb.raw(), relu.value_or(no_relu), yb.raw()), "add2");
            }
            for (std::size_t i = 2; i < xs.size(); ++i) {
                TileBuffer ab(slice(y, slices, k)), bb(slice(xs[i], slices, k));
                check_halide(dsl_halide_add2(ab.raw(), bb.raw(), no_relu, yb.raw()), "add2");
            }
        }
    }
};

// Over planes (planes.hpp), a volume's slice by slice (depth_slices.hpp): a loss per sample and place, a
// vector [N, K] being one place of K channels.
class CpuLoss final : public LossKernels {
public:
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        check_labels(logits.dims, labels.dims);
        if (dlogits.base) check_same_dims(logits.dims, dlogits.dims, "cross_entropy");
        const Slicing s = slicing(false, logits);
        double total = 0.0;
        for (std::int64_t k = 0; k < s.count; ++k)
            total += cross_entropy(slice(logits, s, k), slice(labels, s, k), scale,
                                   dlogits.base ? slice(dlogits, s, k) : Planes{});
        return total;
    }
    double regression(frontend::Regression loss, ConstView prediction, ConstView target, float scale,
                      View dprediction) override {
        check_same_dims(prediction.dims, target.dims, "regression");
        if (dprediction.base) check_same_dims(prediction.dims, dprediction.dims, "regression");
        const Slicing s = slicing(false, prediction);
        std::vector<ConstPlanes> x, t;
        std::vector<Planes> dx;
        for (std::int64_t k = 0; k < s.count; ++k) {
            x.push_back(slice(prediction, s, k));
            t.push_back(slice(target, s, k));
            dx.push_back(dprediction.base ? slice(dprediction, s, k) : Planes{});
        }
        return regression(loss, x, t, scale, dx);
    }

private:
    static double cross_entropy(ConstPlanes logits, LabelPlanes labels, float scale, Planes dlogits) {
        const PlaneDims& d = logits.dims;
        check_labels(d, labels.dims);
        if (dlogits.base) check_same_dims(logits.dims, dlogits.dims, "cross_entropy");
        double total = 0.0;
        std::vector<double> shifted(static_cast<std::size_t>(d.c));
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t i = 0; i < d.h; ++i)
                for (std::int64_t j = 0; j < d.w; ++j) {
                    const std::int32_t label = labels.at(n, 0, i, j);
                    check_label(label, d.c);
                    // Shift by the largest logit so that exp never overflows.
                    double max_logit = -std::numeric_limits<double>::infinity();
                    for (std::int64_t k = 0; k < d.c; ++k)
                        max_logit = std::max(max_logit, double(logits.at(n, k, i, j)));
                    double sum_exp = 0.0;
                    for (std::int64_t k = 0; k < d.c; ++k) {
                        shifted[k] = double(logits.at(n, k, i, j)) - max_logit;
                        sum_exp += std::exp(shifted[k]);
                    }
                    const double log_sum_exp = std::log(sum_exp);
                    total += log_sum_exp - shifted[label];
                    if (!dlogits.base) continue;
                    for (std::int64_t k = 0; k < d.c; ++k) {
                        const double p = std::exp(shifted[k] - log_sum_exp);
                        dlogits.at(n, k, i, j) = static_cast<float>((p - (k == label ? 1.0 : 0.0)) * scale);
                    }
                }
        return total;
    }

    // The slices of one volume (or an image's planes): rows in parallel, each row's sum in double; the sum
    // over rows in a fixed order, that of the elements (samples, channels, slices, rows).
    static double regression(frontend::Regression loss, const std::vector<ConstPlanes>& prediction,
                             const std::vector<ConstPlanes>& target, float scale,
                             const std::vector<Planes>& dprediction) {
        const PlaneDims& d = prediction[0].dims;
        DSL_INTERNAL_CHECK(loss != frontend::Regression::none, "regression: not a regression loss");
        double total = 0.0;
        const auto slices = static_cast<std::int64_t>(prediction.size());
        const std::int64_t rows = d.n * d.c * slices * d.h;
        std::vector<double> row_sums(static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t n = r / (d.c * slices * d.h), c = r / (slices * d.h) % d.c, i = r % d.h;
            const auto k = static_cast<std::size_t>(r / d.h % slices);
            const float* x = &prediction[k].at(n, c, i, 0);
            const float* t = &target[k].at(n, c, i, 0);
            float* dx = dprediction[k].base ? &dprediction[k].at(n, c, i, 0) : nullptr;
            double sum = 0.0;
            for (std::int64_t j = 0; j < d.w; ++j) {
                const RegressionTerm<float> term = regression_term(loss, x[j], t[j]);
                sum += term.value;
                if (dx) dx[j] = term.grad * scale;
            }
            row_sums[static_cast<std::size_t>(r)] = sum;
        }
        for (double v : row_sums) total += v;
        return total;
    }
};

}  // namespace

ActivationKernels& halide_activation() {
    static HalideActivation instance;
    return instance;
}

BatchNormKernels& halide_batchnorm() {
    static HalideBatchNorm instance;
    return instance;
}

PoolKernels& halide_pool() {
    static HalidePool instance;
    return instance;
}

EltwiseKernels& halide_eltwise() {
    static HalideEltwise instance;
    return instance;
}

LossKernels& cpu_loss() {
    static CpuLoss instance;
    return instance;
}

}  // namespace dsl::backend
