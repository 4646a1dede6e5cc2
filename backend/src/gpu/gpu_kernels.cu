// The GPU kernel set: cuDNN convolutions (fc as a convolution), CUDA kernels for every other layer, device
// memory, and the choice of device. Every kernel and copy runs in order on one stream (gpu_context.hpp).
//
// Calls come from one thread at a time (the trainer's; MPI runs FUNNELED): the scratch buffers, the pinned
// staging memory and the convolutions' plans are shared by every call without locks.
#include "gpu_context.hpp"

// tensor.hpp's conversion of a view to its const view is never called on a view that is const already, and
// nvcc warns so at every instantiation of ConstView.
#pragma nv_diag_suppress 554

#include "../kernel_checks.hpp"
#include "../synthetic_formula.hpp"

#include <dsl/backend/gpu.hpp>
#include <dsl/frontend/diagnostics.hpp>

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl::backend {
namespace {

using gpu::check;

std::atomic<int> selected_device{0};
std::atomic<bool> stream_created{false};

// The CUDA runtime's current device is per host thread: any thread that reaches the GPU first makes the
// selected device its own, so work never lands on device 0 by default.
void bind_device() {
    thread_local int bound = -1;
    const int device = selected_device.load();
    if (bound == device) return;
    check(cudaSetDevice(device), "cudaSetDevice");
    bound = device;
}

}  // namespace

namespace gpu {

cudaStream_t stream() {
    bind_device();
    // Non-blocking: the legacy default stream, which libraries may use, never waits for it or makes it wait.
    static const cudaStream_t created = [] {
        cudaStream_t s = nullptr;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        stream_created = true;
        return s;
    }();
    return created;
}

}  // namespace gpu

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// cudaMalloc's out-of-memory is reported as std::bad_alloc, so that the command says "out of memory" as it
// does for host memory. The error is not sticky; clearing it keeps later checks from reporting it again.
void* device_malloc(std::size_t bytes) {
    bind_device();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        throw std::bad_alloc();
    }
    check(e, "cudaMalloc");
    return p;
}

void device_free(void* p) {
    if (!p) return;
    // Kernels already queued may still use it.
    check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize before cudaFree");
    check(cudaFree(p), "cudaFree");
}

// Device scratch that grows to the largest request and keeps it, so that steady-state calls allocate
// nothing. Its contents do not survive growth.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* get(std::size_t bytes) {
        if (bytes > size_) {
            release();
            data_ = device_malloc(bytes);
            size_ = bytes;
        }
        return data_;
    }
    template <typename T>
    T* as(std::int64_t count) {
        return static_cast<T*>(get(static_cast<std::size_t>(count) * sizeof(T)));
    }
    void release() {
        device_free(data_);
        data_ = nullptr;
        size_ = 0;
    }
    void shrink_to(std::size_t bytes) {
        if (size_ > bytes) release();
    }

private:
    void* data_ = nullptr;
    std::size_t size_ = 0;
};

// Pinned host memory through which host arrays travel to and from the device: copies from pinned memory
// are truly asynchronous, so an upload never waits for the stream. Before the host overwrites it, it waits
// for the copy that last read it (long done, in practice: kernels that upload also download a result).
class Staging {
public:
    Staging() = default;
    Staging(const Staging&) = delete;
    Staging& operator=(const Staging&) = delete;

    void* get(std::size_t bytes) {
        if (pending_) {
            check(cudaEventSynchronize(read_), "cudaEventSynchronize (staging)");
            pending_ = false;
        }
        if (bytes > size_) {
            if (data_) check(cudaFreeHost(data_), "cudaFreeHost");
            data_ = nullptr;
            size_ = 0;
            bind_device();
            check(cudaMallocHost(&data_, bytes), "cudaMallocHost");
            size_ = bytes;
        }
        return data_;
    }
    // After enqueueing a copy that reads the staging memory.
    void read_by_stream() {
        if (!read_) check(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventRecord(read_, gpu::stream()), "cudaEventRecord");
        pending_ = true;
    }

private:
    void* data_ = nullptr;
    std::size_t size_ = 0;
    cudaEvent_t read_ = nullptr;
    bool pending_ = false;
};

// A host array of per-channel values, float or double (uploaded as doubles: exact either way). Implicit, so
// that `upload` takes a braced list of either.
struct HostValues {
    HostValues(const float* p) : f(p) {}
    HostValues(const double* p) : d(p) {}
    double operator[](std::int64_t i) const { return f ? double(f[i]) : d[i]; }
    const float* f = nullptr;
    const double* d = nullptr;
};

// What every kernel shares: the options and the scratch memory.
struct Context {
    GpuOptions options;
    Staging staging;
    DeviceBuffer values;    // host arrays uploaded for the next kernel
    DeviceBuffer partials;  // reductions' per-warp or per-block sums
    DeviceBuffer totals;    // reductions' results, before they go to the host
    DeviceBuffer labels;    // the loss's labels, densely
    DeviceBuffer argmax;    // max pooling's window offsets, between the backward's two passes
    DeviceBuffer sum;       // add's running sum when it has more inputs than one kernel takes

    // Copies `arrays` of `count` values each, one after another, into device memory as doubles; array k is at
    // k * count of the result.
    const double* upload(std::int64_t count, std::initializer_list<HostValues> arrays) {
        const std::int64_t total = count * static_cast<std::int64_t>(arrays.size());
        const std::size_t bytes = static_cast<std::size_t>(total) * sizeof(double);
        auto* host = static_cast<double*>(staging.get(bytes));
        std::int64_t k = 0;
        for (const HostValues& a : arrays) {
            for (std::int64_t i = 0; i < count; ++i) host[k * count + i] = a[i];
            ++k;
        }
        double* device = values.as<double>(total);
        if (bytes) {
            check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, gpu::stream()), "upload of host values");
            staging.read_by_stream();
        }
        return device;
    }

    // The `count` doubles at `device` on the host, once the kernels that write them are done.
    const double* fetch(const double* device, std::int64_t count) {
        const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(double);
        auto* host = static_cast<double*>(staging.get(bytes));
        if (bytes)
            check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, gpu::stream()), "download of sums");
        check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize");
        return host;
    }
};

// Never destroyed: at exit the CUDA runtime may be unloaded before static destructors would free it.
Context& context() {
    static Context* ctx = new Context();
    return *ctx;
}

// ---------------------------------------------------------------------------------------------------------
// Element-wise kernels: one thread per element of a row, rows spread over blocks.

// A strided 4-D operand as the kernels see it; element (n, c, y, x) is at base[n*sn + c*sc + y*sh + x].
template <typename T>
struct Operand {
    T* base = nullptr;
    std::int64_t sn = 0, sc = 0, sh = 0;
};

template <typename T>
Operand<T> operand(const BasicView<T>& v) {
    return {v.base, v.stride_n, v.stride_c, v.stride_h};
}

Operand<const float> input(const ConstView& v) { return operand(v); }

template <typename T>
Operand<T> dense_operand(T* data, const Dims& d) {
    return {data, d.c * d.h * d.w, d.h * d.w, d.w};
}

// The inputs an element-wise kernel loads for each element (the operation reads them all before it writes,
// so the output may be one of them); `count` <= N of them are used.
template <int N>
struct Inputs {
    static constexpr int slots = N > 0 ? N : 1;
    Operand<const float> op[slots];
    int count = N;
};

template <typename... V>
Inputs<sizeof...(V)> inputs(const V&... views) {
    return Inputs<sizeof...(V)>{{input(views)...}, static_cast<int>(sizeof...(V))};
}

Inputs<0> no_inputs() { return {}; }

// Rows (n, c, y) of `w` contiguous elements.
struct Geometry {
    std::int64_t n = 0, c = 0, h = 0, w = 0;
};

// How far the rows of a kernel may be folded into longer ones: per-element kernels (`all`) need no
// coordinates, per-channel ones (`rows`) need n and c, windowed ones (`none`) every coordinate.
enum class Merge { none, rows, all };

// Folds outer dimensions into the row wherever every operand lays them out without a gap (a dense tensor is
// one row; a tile without left and right margins has rows of whole planes), so that short rows do not leave
// threads idle. A folded dimension keeps size 1, so the kernels' coordinates stay valid.
template <typename Out, int N>
Geometry fold(const Dims& d, Merge merge, const Operand<Out>& out, const Inputs<N>& in) {
    std::int64_t size[3] = {d.n, d.c, d.h};
    std::int64_t w = d.w;
    if (merge == Merge::none) return {d.n, d.c, d.h, d.w};
    const auto stride = [](const auto& op, int i) { return i == 0 ? op.sn : i == 1 ? op.sc : op.sh; };
    // The innermost dimension not yet folded into the row (-1: the row itself).
    int inner = -1;
    for (int i = 2; i >= (merge == Merge::rows ? 2 : 0); --i) {
        if (size[i] == 1) continue;
        const auto folds_in = [&](const auto& op) {
            return stride(op, i) == (inner < 0 ? w : size[inner] * stride(op, inner));
        };
        bool folds = folds_in(out);
        for (int k = 0; k < in.count; ++k) folds = folds && folds_in(in.op[k]);
        if (!folds) {
            inner = i;
            continue;
        }
        if (inner < 0)
            w *= size[i];
        else
            size[inner] *= size[i];
        size[i] = 1;
    }
    return {size[0], size[1], size[2], w};
}

struct NoRow {};

template <int U, int N, typename Out, typename Op>
__global__ void __launch_bounds__(256) map_kernel(Geometry g, Operand<Out> out, Inputs<N> in, Op op) {
    constexpr int S = Inputs<N>::slots;
    const std::int64_t rows = g.n * g.c * g.h;
    const std::int64_t row_step = std::int64_t(gridDim.y) * blockDim.y;
    const std::int64_t col_step = std::int64_t(gridDim.x) * blockDim.x * U;
    for (std::int64_t r = std::int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += row_step) {
        const std::int64_t y = r % g.h, nc = r / g.h, c = nc % g.c, n = nc / g.c;
        const auto row = op.row(n, c, y);
        Out* const out_row = out.base + (n * out.sn + c * out.sc + y * out.sh);
        const float* in_row[S];
#pragma unroll
        for (int k = 0; k < S; ++k)
            in_row[k] = k < in.count ? in.op[k].base + (n * in.op[k].sn + c * in.op[k].sc + y * in.op[k].sh) : nullptr;
        for (std::int64_t x0 = std::int64_t(blockIdx.x) * blockDim.x * U + threadIdx.x; x0 < g.w; x0 += col_step) {
            // Every load of the U elements is issued before any store: more memory traffic in flight, and an
            // output that aliases an input is read before it is written.
            float v[U][S] = {};
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const std::int64_t x = x0 + std::int64_t(u) * blockDim.x;
#pragma unroll
                for (int k = 0; k < S; ++k)
                    if (x < g.w && k < in.count) v[u][k] = in_row[k][x];
            }
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const std::int64_t x = x0 + std::int64_t(u) * blockDim.x;
                if (x < g.w) out_row[x] = op(row, v[u], x);
            }
        }
    }
}

template <int U, int N, typename Out, typename Op>
void launch_map(const char* kernel, const Geometry& g, Operand<Out> out, const Inputs<N>& in, const Op& op) {
    int bx = 32;
    while (bx < 256 && std::int64_t(bx) * U < g.w) bx *= 2;
    const int by = 256 / bx;
    const auto gx = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(g.w, std::int64_t(bx) * U), 65535));
    const auto gy = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(g.n * g.c * g.h, by), 65535));
    map_kernel<U><<<dim3(gx, gy), dim3(bx, by), 0, gpu::stream()>>>(g, out, in, op);
    check_launch(kernel);
}

// out(n, c, y, x) = op(row(n, c, y), inputs at (n, c, y, x), x) over `d`.
template <int N, typename Out, typename Op>
void map(const char* kernel, const Dims& d, Merge merge, Operand<Out> out, const Inputs<N>& in, const Op& op) {
    if (d.elements() == 0) return;
    const Geometry g = fold(d, merge, out, in);
    // Four elements per thread where rows are long enough to keep the threads busy.
    if (g.w >= 4 * 32)
        launch_map<4>(kernel, g, out, in, op);
    else
        launch_map<1>(kernel, g, out, in, op);
}

// Operations on rows that need nothing per row.
struct PerElement {
    __device__ NoRow row(std::int64_t, std::int64_t, std::int64_t) const { return {}; }
};

struct Fill : PerElement {
    float value;
    template <int S>
    __device__ float operator()(NoRow, const float (&)[S], std::int64_t) const {
        return value;
    }
};

struct Copy : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0];
    }
};

// y + x in float, as `y += x` (accumulate, unpack's add).
struct Add2 : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return __fadd_rn(v[0], v[1]);
    }
};

// The sum of `count` inputs in double, rounded once, as the reference adds.
struct SumInputs : PerElement {
    int count;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < S; ++k)
            if (k < count) acc += v[k];
        return static_cast<float>(acc);
    }
};

struct LeakyForward : PerElement {
    float slope;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0] > 0.0f ? v[0] : slope * v[0];
    }
};

// Inputs x, dy.
struct LeakyBackward : PerElement {
    float slope;
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return v[0] > 0.0f ? v[1] : slope * v[1];
    }
};

// 1 / (1 + exp(-x)), in float.
__device__ inline float sigmoid_of(float x) { return 1.0f / (1.0f + expf(-x)); }

struct SigmoidForward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        return sigmoid_of(v[0]);
    }
};

// Inputs x, dy: dy * y * (1 - y), with y recomputed from x.
struct SigmoidBackward : PerElement {
    template <int S>
    __device__ float operator()(NoRow, const float (&v)[S], std::int64_t) const {
        const float y = sigmoid_of(v[0]);
        return v[1] * y * (1.0f - y);
    }
};

// y + bias[c]: the bias of a convolution or fc, after cuDNN's sum.
struct AddBias {
    const float* bias;
    __device__ float row(std::int64_t, std::int64_t c, std::int64_t) const { return bias[c]; }
    template <int S>
    __device__ float operator()(float b, const float (&v)[S], std::int64_t) const {
        return __fadd_rn(v[0], b);
    }
};

// The batch-norm formulas in double, in the reference's order of operations; the _rn intrinsics keep the
// compiler from contracting them into fused multiply-adds, which would round differently.
struct NormForward {
    const double* mean_inv_std;  // mean at [c], inv_std at [channels + c]
    std::int64_t channels;
    const float *gamma, *beta;
    struct Row {
        double gamma, mean, inv_std, beta;
    };
    __device__ Row row(std::int64_t, std::int64_t c, std::int64_t) const {
        return {gamma[c], mean_inv_std[c], mean_inv_std[channels + c], beta[c]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double scaled = __dmul_rn(__dmul_rn(r.gamma, __dsub_rn(double(v[0]), r.mean)), r.inv_std);
        return static_cast<float>(__dadd_rn(scaled, r.beta));
    }
};

// Inputs x, dy.
struct NormBackward {
    const double* values;  // mean, inv_std, sum_dy / count, sum_dy_xhat, each `channels` long
    std::int64_t channels;
    double count;
    const float* gamma;
    struct Row {
        double scale, mean, inv_std, mean_dy, sum_dy_xhat;
    };
    __device__ Row row(std::int64_t, std::int64_t c, std::int64_t) const {
        const double inv_std = values[channels + c];
        return {__dmul_rn(double(gamma[c]), inv_std), values[c], inv_std, values[2 * channels + c],
                values[3 * channels + c]};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&v)[S], std::int64_t) const {
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), r.mean), r.inv_std);
        const double term = __ddiv_rn(__dmul_rn(x_hat, r.sum_dy_xhat), count);
        return static_cast<float>(__dmul_rn(r.scale, __dsub_rn(__dsub_rn(double(v[1]), r.mean_dy), term)));
    }
};

struct Broadcast {
    const double* values;  // [n * channels + c]
    std::int64_t channels;
    float scale;
    __device__ float row(std::int64_t n, std::int64_t c, std::int64_t) const {
        return __fmul_rn(static_cast<float>(values[n * channels + c]), scale);
    }
    template <int S>
    __device__ float operator()(float value, const float (&)[S], std::int64_t) const {
        return value;
    }
};

struct PoolWindow {
    std::int64_t kh, kw, sh, sw, dh, dw;
};

PoolWindow pool_window(const Window& w) {
    return {w.kernel[0], w.kernel[1], w.stride[0], w.stride[1], w.dilation[0], w.dilation[1]};
}

// Output row i of a pooling reads x's rows from i * sh.
struct PoolRow {
    Operand<const float> x;
    PoolWindow win;
    __device__ const float* row(std::int64_t n, std::int64_t c, std::int64_t i) const {
        return x.base + (n * x.sn + c * x.sc + i * win.sh * x.sh);
    }
    // Scans the window of output column j in the reference's order (a, then b) and keeps the first maximum:
    // ties, and the backward with them, go to the earliest element.
    __device__ std::int64_t first_max(const float* p, std::int64_t j, float* best_value) const {
        const float* q = p + j * win.sw;
        float best = q[0];
        std::int64_t best_offset = 0;
        for (std::int64_t a = 0; a < win.kh; ++a)
            for (std::int64_t b = 0; b < win.kw; ++b) {
                const float v = q[a * win.dh * x.sh + b * win.dw];
                if (v > best) {
                    best = v;
                    best_offset = a * win.kw + b;
                }
            }
        *best_value = best;
        return best_offset;
    }
};

struct MaxPool : PoolRow {
    template <int S>
    __device__ float operator()(const float* p, const float (&)[S], std::int64_t j) const {
        float best;
        first_max(p, j, &best);
        return best;
    }
};

// The offset a * kw + b of each window's first maximum, for the backward's gather.
struct MaxPoolArgmax : PoolRow {
    template <int S>
    __device__ std::int32_t operator()(const float* p, const float (&)[S], std::int64_t j) const {
        float best;
        return static_cast<std::int32_t>(first_max(p, j, &best));
    }
};

// The sum in double over the window divided by its area, as PyTorch's count_include_pad.
struct AveragePool : PoolRow {
    template <int S>
    __device__ float operator()(const float* p, const float (&)[S], std::int64_t j) const {
        const float* q = p + j * win.sw;
        double acc = 0.0;
        for (std::int64_t a = 0; a < win.kh; ++a)
            for (std::int64_t b = 0; b < win.kw; ++b) acc += q[a * win.dh * x.sh + b * win.dw];
        return static_cast<float>(acc / double(win.kh * win.kw));
    }
};

// dx of pooling as a gather: each element of dx sums the gradients of the windows that contain it, so dx
// is overwritten without atomics. Windows are visited in the reference's order (output row, then column),
// so the double sums round as its scatter does.
struct PoolGather {
    Operand<const float> dy;
    const std::int32_t* argmax;  // dense over dy's dims; null for average pooling
    std::int64_t channels, out_h, out_w;
    PoolWindow win;
    struct Row {
        const float* dy;
        const std::int32_t* argmax;
        std::int64_t y;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t y) const {
        return {dy.base + (n * dy.sn + c * dy.sc), argmax ? argmax + (n * channels + c) * out_h * out_w : nullptr, y};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        const double area = double(win.kh * win.kw);
        double acc = 0.0;
        // Descending window offsets give ascending output rows and columns.
        for (std::int64_t a = win.kh - 1; a >= 0; --a) {
            const std::int64_t ty = r.y - a * win.dh;
            if (ty < 0 || ty % win.sh != 0 || ty / win.sh >= out_h) continue;
            const std::int64_t i = ty / win.sh;
            for (std::int64_t b = win.kw - 1; b >= 0; --b) {
                const std::int64_t tx = x - b * win.dw;
                if (tx < 0 || tx % win.sw != 0 || tx / win.sw >= out_w) continue;
                const std::int64_t j = tx / win.sw;
                const double g = r.dy[i * dy.sh + j];
                if (!r.argmax)
                    acc += g / area;
                else if (r.argmax[i * out_w + j] == a * win.kw + b)
                    acc += g;
            }
        }
        return static_cast<float>(acc);
    }
};

// ---------------------------------------------------------------------------------------------------------
// Reductions: sums over groups of elements (a channel over n, h, w; or an (n, c) plane over h, w), in
// double. Each warp sums one chunk of one group; a second kernel adds a group's chunks in a fixed order, so
// the result does not depend on scheduling.

struct ReduceGeometry {
    std::int64_t groups_c = 1;  // group g is (g / groups_c, g % groups_c)
    std::int64_t groups = 0;
    std::int64_t rows_h = 1;    // row r of a group is (r / rows_h, r % rows_h)
    std::int64_t w = 1;         // elements per row
    std::int64_t elements = 0;  // per group
    std::int64_t chunks = 1;    // per group
};

// Strides of a group's two coordinates and of a row's two.
struct ReduceOperand {
    const float* base = nullptr;
    std::int64_t group_n = 0, group_c = 0, row_n = 0, row_h = 0;
};

template <int K>
struct ReduceInputs {
    ReduceOperand op[K];
};

__device__ double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

template <int K, typename Term>
__global__ void __launch_bounds__(256)
    reduce_kernel(ReduceGeometry g, ReduceInputs<K> in, Term term, double* partials) {
    constexpr int Q = Term::quantities;
    constexpr int U = 4;
    const int lane = threadIdx.x % 32;
    const std::int64_t warps = blockDim.x / 32;
    const std::int64_t units = g.groups * g.chunks;
    for (std::int64_t unit = std::int64_t(blockIdx.x) * warps + threadIdx.x / 32; unit < units;
         unit += std::int64_t(gridDim.x) * warps) {
        const std::int64_t group = unit / g.chunks, chunk = unit % g.chunks;
        const std::int64_t gn = group / g.groups_c, gc = group % g.groups_c;
        const auto constants = term.group(gn, gc);
        const float* base[K];
#pragma unroll
        for (int k = 0; k < K; ++k) base[k] = in.op[k].base + (gn * in.op[k].group_n + gc * in.op[k].group_c);
        const std::int64_t end = g.elements * (chunk + 1) / g.chunks;
        std::int64_t e = g.elements * chunk / g.chunks + lane;
        // The lane's element as row (rn, ry) and column x, stepped without dividing unless it changes rows.
        std::int64_t x = e % g.w, r = e / g.w, ry = r % g.rows_h, rn = r / g.rows_h;
        std::int64_t offset[K];
#pragma unroll
        for (int k = 0; k < K; ++k) offset[k] = rn * in.op[k].row_n + ry * in.op[k].row_h;
        double acc[Q] = {};
        while (e < end) {
            float v[U][K] = {};
            bool valid[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                valid[u] = e < end;
#pragma unroll
                for (int k = 0; k < K; ++k)
                    if (valid[u]) v[u][k] = base[k][offset[k] + x];
                e += 32;
                x += 32;
                if (x >= g.w) {
                    // Rows of 32 or more are crossed one at a time: divide only for shorter ones.
                    const std::int64_t q = x < 2 * g.w ? 1 : x / g.w;
                    x -= q * g.w;
                    ry += q;
                    if (ry >= g.rows_h) {
                        const std::int64_t p = ry < 2 * g.rows_h ? 1 : ry / g.rows_h;
                        rn += p;
                        ry -= p * g.rows_h;
                    }
#pragma unroll
                    for (int k = 0; k < K; ++k) offset[k] = rn * in.op[k].row_n + ry * in.op[k].row_h;
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (valid[u]) term.add(constants, v[u], acc);
        }
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            const double s = warp_sum(acc[q]);
            if (lane == 0) partials[unit * Q + q] = s;
        }
    }
}

// out[g * quantities + q] = the sum over chunks of the partials, in chunk order.
template <typename Out>
__global__ void sum_chunks_kernel(const double* partials, std::int64_t outputs, std::int64_t chunks, int quantities,
                                  Out* out) {
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        const std::int64_t group = i / quantities, q = i % quantities;
        double acc = 0.0;
        for (std::int64_t k = 0; k < chunks; ++k) acc += partials[(group * chunks + k) * quantities + q];
        out[i] = static_cast<Out>(acc);
    }
}

// Σ x
struct SumTerm {
    static constexpr int inputs = 1, quantities = 1;
    struct Group {};
    __device__ Group group(std::int64_t, std::int64_t) const { return {}; }
    __device__ void add(Group, const float (&v)[1], double (&acc)[1]) const { acc[0] += v[0]; }
};

// Σ x and Σ x²
struct MomentsTerm {
    static constexpr int inputs = 1, quantities = 2;
    struct Group {};
    __device__ Group group(std::int64_t, std::int64_t) const { return {}; }
    __device__ void add(Group, const float (&v)[1], double (&acc)[2]) const {
        const double x = v[0];
        acc[0] += x;
        acc[1] += x * x;
    }
};

// Σ dy and Σ dy * x_hat over inputs x, dy.
struct NormGradientTerm {
    static constexpr int inputs = 2, quantities = 2;
    const double* mean_inv_std;  // mean at [c], inv_std at [channels + c]
    std::int64_t channels;
    struct Group {
        double mean, inv_std;
    };
    __device__ Group group(std::int64_t, std::int64_t c) const { return {mean_inv_std[c], mean_inv_std[channels + c]}; }
    __device__ void add(const Group& grp, const float (&v)[2], double (&acc)[2]) const {
        const double g = v[1];
        const double x_hat = __dmul_rn(__dsub_rn(double(v[0]), grp.mean), grp.inv_std);
        acc[0] += g;
        acc[1] += __dmul_rn(g, x_hat);
    }
};

enum class Over { channels, planes };  // per channel over n, h, w; per (n, c) plane over h, w

// out[group * quantities + q] (device memory) = the group's sums. Groups are channels or (n, c) planes.
template <typename Term, typename Out>
void reduce(const char* kernel, const Dims& d, Over over, const std::array<ConstView, Term::inputs>& views,
            const Term& term, Out* out) {
    constexpr int K = Term::inputs, Q = Term::quantities;
    ReduceGeometry g;
    g.groups_c = std::max<std::int64_t>(d.c, 1);
    g.groups = over == Over::channels ? d.c : d.n * d.c;
    if (g.groups == 0) return;
    bool rows_follow = true;  // each plane is one row
    for (const ConstView& v : views) rows_follow = rows_follow && (d.h == 1 || v.stride_h == d.w);
    g.rows_h = rows_follow ? 1 : d.h;
    g.w = rows_follow ? d.h * d.w : d.w;
    g.elements = (over == Over::channels ? d.n : 1) * d.h * d.w;
    if (g.elements == 0) {
        check(cudaMemsetAsync(out, 0, static_cast<std::size_t>(g.groups * Q) * sizeof(Out), gpu::stream()),
              "cudaMemsetAsync (empty reduction)");
        return;
    }
    ReduceInputs<K> in;
    for (int k = 0; k < K; ++k) {
        const ConstView& v = views[static_cast<std::size_t>(k)];
        in.op[k] = over == Over::channels ? ReduceOperand{v.base, 0, v.stride_c, v.stride_n, v.stride_h}
                                          : ReduceOperand{v.base, v.stride_n, v.stride_c, 0, v.stride_h};
    }
    // Enough warps to fill a large GPU several times over, each with at least ~1k elements to sum.
    constexpr std::int64_t target_warps = 8192;
    g.chunks = std::max<std::int64_t>(1, std::min(ceil_div(target_warps, g.groups), ceil_div(g.elements, 1024)));
    const std::int64_t units = g.groups * g.chunks;
    Context& ctx = context();
    double* partials = ctx.partials.as<double>(units * Q);
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(units, 8), std::int64_t{1} << 20));
    reduce_kernel<K><<<blocks, 256, 0, gpu::stream()>>>(g, in, term, partials);
    check_launch(kernel);
    const std::int64_t outputs = g.groups * Q;
    const auto sum_blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(outputs, 256), 65535));
    sum_chunks_kernel<<<sum_blocks, 256, 0, gpu::stream()>>>(partials, outputs, g.chunks, Q, out);
    check_launch(kernel);
}

// ---------------------------------------------------------------------------------------------------------
// Softmax cross-entropy: G lanes per pixel (a warp when a sample is one pixel with many classes, one thread
// per pixel otherwise); each block writes its sum of losses, and the host adds the blocks' sums in order.

constexpr int loss_blocks_max = 1024;

template <int G>
__device__ double group_max(double v) {
    if constexpr (G > 1)
        for (int offset = G / 2; offset > 0; offset /= 2) {
            const double o = __shfl_xor_sync(0xffffffffu, v, offset);
            v = v < o ? o : v;
        }
    return v;
}

template <int G>
__device__ double group_sum(double v) {
    if constexpr (G > 1)
        for (int offset = G / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

template <int G>
__global__ void __launch_bounds__(256) cross_entropy_kernel(Dims d, Operand<const float> logits, Operand<float> dlogits,
                                                            const std::int32_t* labels, float scale, double* partials) {
    const int lane = threadIdx.x % G;
    const std::int64_t per_block = blockDim.x / G;
    const std::int64_t pixels = d.n * d.h * d.w;
    double total = 0.0;
    for (std::int64_t p = std::int64_t(blockIdx.x) * per_block + threadIdx.x / G; p < pixels;
         p += std::int64_t(gridDim.x) * per_block) {
        const std::int64_t j = p % d.w, t = p / d.w, i = t % d.h, n = t / d.h;
        const float* l = logits.base + (n * logits.sn + i * logits.sh + j);
        const std::int32_t label = labels[p];
        // log-sum-exp shifted by the maximum, so large logits do not overflow.
        double max_logit = -INFINITY;
        for (std::int64_t k = lane; k < d.c; k += G) {
            const double v = l[k * logits.sc];
            max_logit = max_logit < v ? v : max_logit;
        }
        max_logit = group_max<G>(max_logit);
        double sum_exp = 0.0;
        for (std::int64_t k = lane; k < d.c; k += G) sum_exp += exp(double(l[k * logits.sc]) - max_logit);
        sum_exp = group_sum<G>(sum_exp);
        const double log_sum_exp = max_logit + log(sum_exp);
        const double label_logit = l[label * logits.sc];
        if (dlogits.base) {
            // dlogits may be logits: every lane has read the label's logit before any lane writes.
            if constexpr (G > 1) __syncwarp();
            float* dl = dlogits.base + (n * dlogits.sn + i * dlogits.sh + j);
            for (std::int64_t k = lane; k < d.c; k += G) {
                const double probability = exp(double(l[k * logits.sc]) - log_sum_exp);
                dl[k * dlogits.sc] = static_cast<float>((probability - (k == label ? 1.0 : 0.0)) * scale);
            }
        }
        if (lane == 0) total += log_sum_exp - label_logit;
    }
    __shared__ double warp_totals[8];
    total = warp_sum(total);
    if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = total;
    __syncthreads();
    if (threadIdx.x == 0) {
        double block_total = 0.0;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) block_total += warp_totals[w];
        partials[blockIdx.x] = block_total;
    }
}

__global__ void sgd_kernel(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum,
                           float decay) {
    for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        // Rounded step by step as the reference (no fused multiply-adds).
        const float grad = __fadd_rn(g[i], __fmul_rn(decay, w[i]));
        const float velocity = __fadd_rn(__fmul_rn(momentum, m[i]), grad);
        m[i] = velocity;
        w[i] = __fsub_rn(w[i], __fmul_rn(lr, velocity));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Convolutions through cuDNN's legacy API.

class CudnnError : public std::runtime_error {
public:
    CudnnError(cudnnStatus_t status, const char* what)
        : std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(status)) {}
};

void check_cudnn(cudnnStatus_t status, const char* what) {
    if (status != CUDNN_STATUS_SUCCESS) throw CudnnError(status, what);
}

int to_int(std::int64_t v, const char* what) {
    if (v < 0 || v > INT_MAX)
        throw std::runtime_error(std::string("cuDNN convolution: ") + what + " " + std::to_string(v) +
                                 " does not fit cuDNN's 32-bit sizes");
    return static_cast<int>(v);
}

template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
class Descriptor {
public:
    Descriptor() { check_cudnn(Create(&d_), "cuDNN descriptor creation"); }
    ~Descriptor() { Destroy(d_); }
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    T get() const { return d_; }

private:
    T d_{};
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

enum class Pass : std::int64_t { forward, backward_data, backward_weights };

const char* pass_name(Pass p) {
    switch (p) {
        case Pass::forward: return "forward";
        case Pass::backward_data: return "backward data";
        case Pass::backward_weights: return "backward weights";
    }
    return "?";
}

// The operands of a pass named as in the forward: input x, filter w {F, C, KH, KW}, output y. The forward
// writes y, backward_data x (dx from dy), backward_weights w (dw); the others are only read.
struct ConvViews {
    View x, w, y;
};

View writable(ConstView v) { return View{const_cast<float*>(v.base), v.dims, v.stride_n, v.stride_c, v.stride_h}; }

// One way to run a pass: in the views' own strided layout, or with operands copied to and from dense
// scratch (w always is dense or copied: cuDNN's filters have no strides), and cuDNN's fastest algorithm
// for it.
struct Candidate {
    std::array<bool, 3> scratch{};  // x, w, y go through dense scratch
    TensorDescriptor x, y;
    FilterDescriptor w;
    ConvolutionDescriptor conv;
    int algo = 0;
    std::size_t workspace = 0;
    float milliseconds = 0.0f;
    cudnnMathType_t math = CUDNN_FMA_MATH;
};

class ConvEngine {
public:
    // Runs `pass`; the first time a problem is seen, it is timed in both layouts as PyTorch's benchmark mode
    // times algorithms, and the choice is kept.
    void run(Pass pass, const ConvViews& v, const Window& window) {
        bind_device();
        Key key{static_cast<std::int64_t>(pass), window.stride[0], window.stride[1], window.dilation[0],
                window.dilation[1]};
        std::size_t k = 5;
        for (const View& view : {v.x, v.w, v.y})
            for (std::int64_t value :
                 {view.dims.n, view.dims.c, view.dims.h, view.dims.w, view.stride_n, view.stride_c, view.stride_h})
                key[k++] = value;
        auto it = plans_.find(key);
        if (it == plans_.end()) {
            // A network has a few dozen problems; the cap only bounds pathological use.
            if (plans_.size() >= max_plans) plans_.clear();
            it = plans_.emplace(key, plan(pass, v, window)).first;
        }
        Candidate& c = *it->second;
        const Bound b = bind(pass, v, c);
        call(pass, c, b, c.algo, workspace_.get(c.workspace), c.workspace);
        finish(pass, v, c, b);
    }

private:
    using Key = std::array<std::int64_t, 5 + 3 * 7>;  // pass, window; each operand's dims and strides
    static constexpr std::size_t max_plans = 1024;

    struct Bound {
        float *x, *w, *y;
    };

    cudnnHandle_t handle() {
        if (!handle_) {
            bind_device();
            cudnnHandle_t h = nullptr;
            check_cudnn(cudnnCreate(&h), "cudnnCreate");
            handle_ = h;
            check_cudnn(cudnnSetStream(handle_, gpu::stream()), "cudnnSetStream");
        }
        return handle_;
    }

    static bool input_of(Pass pass, int operand) {
        return operand != (pass == Pass::forward ? 2 : pass == Pass::backward_data ? 0 : 1);
    }

    static std::array<View, 3> operands(const ConvViews& v) { return {v.x, v.w, v.y}; }

    // Pointers for a pass: the views' own memory, or scratch filled with their elements where they are read.
    Bound bind(Pass pass, const ConvViews& v, const Candidate& c) {
        const auto views = operands(v);
        std::array<float*, 3> p{};
        for (int k = 0; k < 3; ++k) {
            const View& view = views[static_cast<std::size_t>(k)];
            if (!c.scratch[static_cast<std::size_t>(k)]) {
                p[static_cast<std::size_t>(k)] = view.base;
                continue;
            }
            float* s = slots_[static_cast<std::size_t>(k)].as<float>(view.dims.elements());
            if (input_of(pass, k))
                map("conv pack", view.dims, Merge::all, dense_operand(s, view.dims), inputs(ConstView(view)), Copy{});
            p[static_cast<std::size_t>(k)] = s;
        }
        return {p[0], p[1], p[2]};
    }

    // Copies the output from scratch into its view.
    void finish(Pass pass, const ConvViews& v, const Candidate& c, const Bound& b) {
        const auto views = operands(v);
        const std::array<float*, 3> p{b.x, b.w, b.y};
        for (std::size_t k = 0; k < 3; ++k)
            if (c.scratch[k] && !input_of(pass, static_cast<int>(k))) {
                const View& view = views[k];
                map("conv unpack", view.dims, Merge::all, operand(view),
                    inputs(ConstView{p[k], view.dims, view.dims.c * view.dims.h * view.dims.w,
                                     view.dims.h * view.dims.w, view.dims.w}),
                    Copy{});
            }
    }

    void call(Pass pass, const Candidate& c, const Bound& b, int algo, void* workspace, std::size_t bytes) {
        const float one = 1.0f, zero = 0.0f;
        switch (pass) {
            case Pass::forward:
                check_cudnn(cudnnConvolutionForward(handle(), &one, c.x.get(), b.x, c.w.get(), b.w, c.conv.get(),
                                                    static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, bytes,
                                                    &zero, c.y.get(), b.y),
                            "cudnnConvolutionForward");
                break;
            case Pass::backward_data:
                check_cudnn(cudnnConvolutionBackwardData(handle(), &one, c.w.get(), b.w, c.y.get(), b.y, c.conv.get(),
                                                         static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), workspace,
                                                         bytes, &zero, c.x.get(), b.x),
                            "cudnnConvolutionBackwardData");
                break;
            case Pass::backward_weights:
                check_cudnn(cudnnConvolutionBackwardFilter(handle(), &one, c.x.get(), b.x, c.y.get(), b.y, c.conv.get(),
                                                           static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                           workspace, bytes, &zero, c.w.get(), b.w),
                            "cudnnConvolutionBackwardFilter");
                break;
        }
    }

    static void describe(const TensorDescriptor& d, const View& v, bool dense) {
        const Dims& s = v.dims;
        const std::int64_t sn = dense ? s.c * s.h * s.w : v.stride_n, sc = dense ? s.h * s.w : v.stride_c,
                           sh = dense ? s.w : v.stride_h;
        check_cudnn(cudnnSetTensor4dDescriptorEx(d.get(), CUDNN_DATA_FLOAT, to_int(s.n, "batch"),
                                                 to_int(s.c, "channels"), to_int(s.h, "height"), to_int(s.w, "width"),
                                                 to_int(sn, "stride"), to_int(sc, "stride"), to_int(sh, "stride"), 1),
                    "cudnnSetTensor4dDescriptorEx");
    }

    std::unique_ptr<Candidate> candidate(const ConvViews& v, const Window& window, bool dense) const {
        auto c = std::make_unique<Candidate>();
        c->scratch = {dense && !v.x.dense(), !v.w.dense(), dense && !v.y.dense()};
        describe(c->x, v.x, c->scratch[0]);
        describe(c->y, v.y, c->scratch[2]);
        const Dims& w = v.w.dims;
        check_cudnn(cudnnSetFilter4dDescriptor(c->w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, to_int(w.n, "filters"),
                                               to_int(w.c, "channels"), to_int(w.h, "kernel"), to_int(w.w, "kernel")),
                    "cudnnSetFilter4dDescriptor");
        // No padding: it is in the input's margins.
        check_cudnn(cudnnSetConvolution2dDescriptor(
                        c->conv.get(), 0, 0, to_int(window.stride[0], "stride"), to_int(window.stride[1], "stride"),
                        to_int(window.dilation[0], "dilation"), to_int(window.dilation[1], "dilation"),
                        CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                    "cudnnSetConvolution2dDescriptor");
        c->math = context().options.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        check_cudnn(cudnnSetConvolutionMathType(c->conv.get(), c->math), "cudnnSetConvolutionMathType");
        return c;
    }

    // The fastest successful algorithm within `capacity` bytes; without TF32, none that uses tensor cores.
    template <typename Perf>
    static bool choose(const std::vector<Perf>& perf, int returned, std::size_t capacity, Candidate& c) {
        const bool tf32 = context().options.tf32;
        bool found = false;
        for (int i = 0; i < returned; ++i) {
            const Perf& p = perf[static_cast<std::size_t>(i)];
            if (p.status != CUDNN_STATUS_SUCCESS || p.memory > capacity) continue;
            if (!tf32 && (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
                continue;
            if (found && p.time >= c.milliseconds) continue;
            c.algo = static_cast<int>(p.algo);
            c.workspace = p.memory;
            c.milliseconds = p.time;
            c.math = p.mathType;
            found = true;
        }
        return found;
    }

    // Times cuDNN's algorithms for `c` on the bound operands (writing the output, which the real call
    // overwrites); false when none runs.
    bool find(Pass pass, Candidate& c, const Bound& b) {
        const std::size_t capacity = workspace_for_find();
        void* ws = workspace_.get(capacity);
        int count = 0, returned = 0;
        bool found = false;
        switch (pass) {
            case Pass::forward: {
                check_cudnn(cudnnGetConvolutionForwardAlgorithmMaxCount(handle(), &count),
                            "cudnnGetConvolutionForwardAlgorithmMaxCount");
                std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<std::size_t>(std::max(count, 1)));
                check_cudnn(
                    cudnnFindConvolutionForwardAlgorithmEx(handle(), c.x.get(), b.x, c.w.get(), b.w, c.conv.get(),
                                                           c.y.get(), b.y, count, &returned, perf.data(), ws, capacity),
                    "cudnnFindConvolutionForwardAlgorithmEx");
                found = choose(perf, returned, capacity, c);
                break;
            }
            case Pass::backward_data: {
                check_cudnn(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle(), &count),
                            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount");
                std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<std::size_t>(std::max(count, 1)));
                check_cudnn(cudnnFindConvolutionBackwardDataAlgorithmEx(handle(), c.w.get(), b.w, c.y.get(), b.y,
                                                                        c.conv.get(), c.x.get(), b.x, count, &returned,
                                                                        perf.data(), ws, capacity),
                            "cudnnFindConvolutionBackwardDataAlgorithmEx");
                found = choose(perf, returned, capacity, c);
                break;
            }
            case Pass::backward_weights: {
                check_cudnn(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle(), &count),
                            "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount");
                std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<std::size_t>(std::max(count, 1)));
                check_cudnn(cudnnFindConvolutionBackwardFilterAlgorithmEx(handle(), c.x.get(), b.x, c.y.get(), b.y,
                                                                          c.conv.get(), c.w.get(), b.w, count,
                                                                          &returned, perf.data(), ws, capacity),
                            "cudnnFindConvolutionBackwardFilterAlgorithmEx");
                found = choose(perf, returned, capacity, c);
                break;
            }
        }
        // With TF32 allowed, an algorithm may have been timed with tensor-op math: run it with the same.
        if (found && context().options.tf32)
            check_cudnn(cudnnSetConvolutionMathType(c.conv.get(), c.math), "cudnnSetConvolutionMathType");
        return found;
    }

    // The workspace that algorithms are timed with: the limit, or as much of it as the device has free.
    std::size_t workspace_for_find() {
        std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(context().options.workspace, 0));
        while (true) {
            try {
                workspace_.get(bytes);
                return bytes;
            } catch (const std::bad_alloc&) {
                bytes = bytes < (std::size_t{1} << 20) ? 0 : bytes / 2;
            }
        }
    }

    // Chooses between the views' strided layout (when it differs from the dense one) and dense scratch, by
    // cuDNN's time plus, for scratch, the copies' time. Either may be unsupported (cuDNN has no algorithm
    // for some strided layouts; the scratch may not fit in memory), not both.
    std::unique_ptr<Candidate> plan(Pass pass, const ConvViews& v, const Window& window) {
        const std::string problem = std::string("cuDNN convolution ") + pass_name(pass) + " of x " +
                                    dims_text(v.x.dims) + ", w " + dims_text(v.w.dims) + ", y " + dims_text(v.y.dims);
        std::unique_ptr<Candidate> strided;
        if (!v.x.dense() || !v.y.dense()) {
            try {
                strided = candidate(v, window, false);
                if (!find(pass, *strided, bind(pass, v, *strided))) strided.reset();
            } catch (const CudnnError&) {
                strided.reset();
            }
        }
        std::unique_ptr<Candidate> dense;
        float copy_ms = 0.0f;
        try {
            dense = candidate(v, window, true);
            // Copied once untimed, so that neither the scratch's allocation nor the copy kernels' first
            // loading counts. The output's copy moves what is there now: the real call overwrites it.
            finish(pass, v, *dense, bind(pass, v, *dense));
            Timer copies;
            copies.start();
            const Bound b = bind(pass, v, *dense);
            finish(pass, v, *dense, b);
            copies.stop();
            copy_ms = copies.milliseconds();
            if (!find(pass, *dense, b)) dense.reset();
        } catch (const CudnnError&) {
            if (!strided) throw;
            dense.reset();
        } catch (const std::bad_alloc&) {
            if (!strided) throw;
            dense.reset();
        }
        if (!strided && !dense)
            throw std::runtime_error(problem + ": no algorithm runs within the workspace of " +
                                     std::to_string(context().options.workspace) + " bytes");
        std::unique_ptr<Candidate> chosen =
            strided && (!dense || strided->milliseconds <= dense->milliseconds + copy_ms) ? std::move(strided)
                                                                                          : std::move(dense);
        // Keep only the memory that chosen plans need: timing took the whole workspace limit and scratch
        // for every operand, which the trainer's own tensors may need.
        const auto views = operands(v);
        for (std::size_t k = 0; k < 3; ++k) {
            if (chosen->scratch[k])
                slot_needs_[k] =
                    std::max(slot_needs_[k], static_cast<std::size_t>(views[k].dims.elements()) * sizeof(float));
            slots_[k].shrink_to(slot_needs_[k]);
        }
        workspace_needs_ = std::max(workspace_needs_, chosen->workspace);
        workspace_.shrink_to(workspace_needs_);
        return chosen;
    }

    // Times work on the stream.
    class Timer {
    public:
        Timer() {
            check(cudaEventCreate(&start_), "cudaEventCreate");
            check(cudaEventCreate(&stop_), "cudaEventCreate");
        }
        ~Timer() {
            cudaEventDestroy(start_);
            cudaEventDestroy(stop_);
        }
        Timer(const Timer&) = delete;
        Timer& operator=(const Timer&) = delete;
        void start() { check(cudaEventRecord(start_, gpu::stream()), "cudaEventRecord"); }
        void stop() { check(cudaEventRecord(stop_, gpu::stream()), "cudaEventRecord"); }
        float milliseconds() {
            check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
            float ms = 0.0f;
            check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
            return ms;
        }

    private:
        cudaEvent_t start_ = nullptr, stop_ = nullptr;
    };

    cudnnHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;
    std::array<DeviceBuffer, 3> slots_;  // dense scratch for x, w, y
    std::array<std::size_t, 3> slot_needs_{};
    std::size_t workspace_needs_ = 0;
    std::map<Key, std::unique_ptr<Candidate>> plans_;
};

ConvEngine& conv_engine() {
    static ConvEngine* engine = new ConvEngine();  // never destroyed, as the context
    return *engine;
}

void zero(View v) { map("fill", v.dims, Merge::all, operand(v), no_inputs(), Fill{{}, 0.0f}); }

void add_bias(const float* bias, View y) {
    map("bias", y.dims, Merge::rows, operand(y), inputs(ConstView(y)), AddBias{bias});
}

// db[f] = Σ dy(n, f, i, j), into device memory.
void bias_gradient(ConstView dy, float* db) { reduce("bias gradient", dy.dims, Over::channels, {dy}, SumTerm{}, db); }

class GpuConv final : public ConvKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& window) override {
        check_shapes(x, w, y, window);
        if (y.dims.elements() == 0) return;
        if (x.dims.elements() == 0 || w.dims.elements() == 0)
            zero(y);
        else
            conv_engine().run(Pass::forward, {writable(x), writable(w), y}, window);
        if (bias) add_bias(bias, y);
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Window& window) override {
        check_shapes(dx, w, dy, window);
        if (dx.dims.elements() == 0) return;
        if (dy.dims.elements() == 0 || w.dims.elements() == 0) return zero(dx);
        conv_engine().run(Pass::backward_data, {dx, writable(w), writable(dy)}, window);
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& window) override {
        check_shapes(x, dw, dy, window);
        if (db) bias_gradient(dy, db);
        if (dw.dims.elements() == 0) return;
        if (dy.dims.elements() == 0 || x.dims.elements() == 0) return zero(dw);
        conv_engine().run(Pass::backward_weights, {writable(x), dw, writable(dy)}, window);
    }

private:
    // Templates rather than `auto` parameters: nvcc compiles this file as C++17.
    template <typename X, typename W, typename Y>
    static void check_shapes(const X& x, const W& w, const Y& y, const Window& window) {
        check_conv(x.dims, w.dims, y.dims, window);
    }
};

// fc is the convolution of x {N, C, H, W} with K filters {C, H, W} that covers x exactly (output {N, K, 1, 1}):
// feature i of x is (c, h, w) in row-major order, as filter k's elements are, so w {K, I, 1, 1} is the
// filter bank {K, C, H, W} over the same memory.
class GpuFc final : public FcKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y) override {
        check_shapes(x, w, y);
        conv().forward(x, filters(w, x.dims), bias, y, window(x.dims));
    }

    void backward_data(ConstView dy, ConstView w, View dx) override {
        check_shapes(dx, w, dy);
        conv().backward_data(dy, filters(w, dx.dims), dx, window(dx.dims));
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        check_shapes(x, dw, dy);
        conv().backward_weights(x, dy, writable(filters(dw, x.dims)), db, window(x.dims));
    }

private:
    static GpuConv& conv() {
        static GpuConv instance;
        return instance;
    }

    static Window window(const Dims& x) {
        Window w;
        w.kernel = {x.h, x.w};
        return w;
    }

    static ConstView filters(ConstView w, const Dims& x) {
        DSL_INTERNAL_CHECK(w.dims.c <= 1 || w.stride_c == 1, "fc: the weights' rows must be contiguous");
        return ConstView{w.base, {w.dims.n, x.c, x.h, x.w}, w.stride_n, x.h * x.w, x.w};
    }

    template <typename X, typename W, typename Y>
    static void check_shapes(const X& x, const W& w, const Y& y) {
        check_fc(x.dims, w.dims, y.dims);
    }
};

class GpuBatchNorm final : public BatchNormKernels {
public:
    void statistics(ConstView x, double* sum, double* sum_sq) override {
        const std::int64_t c = x.dims.c;
        if (c == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(2 * c);
        reduce("batchnorm statistics", x.dims, Over::channels, {x}, MomentsTerm{}, totals);
        const double* host = ctx.fetch(totals, 2 * c);
        for (std::int64_t k = 0; k < c; ++k) {
            sum[k] += host[2 * k];
            sum_sq[k] += host[2 * k + 1];
        }
    }

    void forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                 View y) override {
        check_same_dims(x, y, "batchnorm forward");
        if (y.dims.elements() == 0) return;
        const std::int64_t c = x.dims.c;
        const double* values = context().upload(c, {mean, inv_std});
        map("batchnorm forward", y.dims, Merge::rows, operand(y), inputs(x), NormForward{values, c, gamma, beta});
    }

    void backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                             double* sum_dy_xhat) override {
        check_same_dims(x, dy, "batchnorm backward_statistics");
        const std::int64_t c = x.dims.c;
        if (c == 0) return;
        Context& ctx = context();
        const double* values = ctx.upload(c, {mean, inv_std});
        double* totals = ctx.totals.as<double>(2 * c);
        reduce("batchnorm backward statistics", x.dims, Over::channels, {x, dy}, NormGradientTerm{values, c}, totals);
        const double* host = ctx.fetch(totals, 2 * c);
        for (std::int64_t k = 0; k < c; ++k) {
            sum_dy[k] += host[2 * k];
            sum_dy_xhat[k] += host[2 * k + 1];
        }
    }

    void backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                  const double* sum_dy, const double* sum_dy_xhat, double count, View dx) override {
        check_same_dims(x, dy, "batchnorm backward");
        check_same_dims(x, dx, "batchnorm backward");
        DSL_INTERNAL_CHECK(count > 0, "batchnorm backward: empty group");
        if (dx.dims.elements() == 0) return;
        const std::int64_t c = x.dims.c;
        // sum_dy / count once per channel: the reference's per-element quotient, the same in every element.
        std::vector<double> mean_dy(static_cast<std::size_t>(c));
        for (std::int64_t k = 0; k < c; ++k) mean_dy[static_cast<std::size_t>(k)] = sum_dy[k] / count;
        const double* values = context().upload(c, {mean, inv_std, mean_dy.data(), sum_dy_xhat});
        map("batchnorm backward", dx.dims, Merge::rows, operand(dx), inputs(x, dy),
            NormBackward{values, c, count, gamma});
    }
};

class GpuActivation final : public ActivationKernels {
public:
    void forward(frontend::Activation f, ConstView x, float slope, View y) override {
        check_same_dims(x, y, "activation forward");
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation forward", y.dims, Merge::all, operand(y), inputs(x), LeakyForward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid forward", y.dims, Merge::all, operand(y), inputs(x), SigmoidForward{});
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }

    void backward(frontend::Activation f, ConstView x, ConstView dy, float slope, View dx) override {
        check_same_dims(x, dy, "activation backward");
        check_same_dims(x, dx, "activation backward");
        switch (f) {
            case frontend::Activation::relu:
            case frontend::Activation::leaky_relu:
                return map("activation backward", dx.dims, Merge::all, operand(dx), inputs(x, dy),
                           LeakyBackward{{}, slope});
            case frontend::Activation::sigmoid:
                return map("sigmoid backward", dx.dims, Merge::all, operand(dx), inputs(x, dy), SigmoidBackward{});
            case frontend::Activation::none: break;
        }
        throw dsl::InternalError("activation kernels called without a function");
    }
};

class GpuPool final : public PoolKernels {
public:
    void forward(PoolKind kind, ConstView x, View y, const Window& window) override {
        check(x, y, window);
        const PoolRow rows{input(x), pool_window(window)};
        if (kind == PoolKind::max)
            map("max pool forward", y.dims, Merge::none, operand(y), no_inputs(), MaxPool{rows});
        else
            map("average pool forward", y.dims, Merge::none, operand(y), no_inputs(), AveragePool{rows});
    }

    void backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window) override {
        check(x, dy, window);
        check_same_dims(x, dx, "pool backward");
        if (dx.dims.elements() == 0) return;
        const Dims& o = dy.dims;
        std::int32_t* argmax = nullptr;
        if (kind == PoolKind::max && o.elements() > 0) {
            DSL_INTERNAL_CHECK(window.kernel[0] * window.kernel[1] <= std::numeric_limits<std::int32_t>::max(),
                               "pool: window too large");
            argmax = context().argmax.as<std::int32_t>(o.elements());
            map("max pool argmax", o, Merge::none, dense_operand(argmax, o), no_inputs(),
                MaxPoolArgmax{{input(x), pool_window(window)}});
        }
        map("pool backward", dx.dims, Merge::none, operand(dx), no_inputs(),
            PoolGather{input(dy), argmax, o.c, o.h, o.w, pool_window(window)});
    }

    void global_sum(ConstView x, double* sums) override {
        const std::int64_t planes = x.dims.n * x.dims.c;
        if (planes == 0) return;
        Context& ctx = context();
        double* totals = ctx.totals.as<double>(planes);
        reduce("global pool sum", x.dims, Over::planes, {x}, SumTerm{}, totals);
        const double* host = ctx.fetch(totals, planes);
        for (std::int64_t i = 0; i < planes; ++i) sums[i] += host[i];
    }

    void broadcast(const float* values, float scale, View dx) override {
        if (dx.dims.elements() == 0) return;
        const double* device = context().upload(dx.dims.n * dx.dims.c, {values});
        map("broadcast", dx.dims, Merge::rows, operand(dx), no_inputs(), Broadcast{device, dx.dims.c, scale});
    }

private:
    template <typename Y>
    static void check(const ConstView& x, const Y& y, const Window& window) {
        check_pool(x.dims, y.dims, window);
    }
};

class GpuEltwise final : public EltwiseKernels {
public:
    // y may be one of xs: each element reads every input before it is written. Up to `per_kernel` inputs
    // sum in double and round once, as the reference; more go through a dense running sum, rounded per kernel.
    void add(const std::vector<ConstView>& xs, View y) override {
        for (const ConstView& x : xs) check_same_dims(x, y, "add");
        if (y.dims.elements() == 0) return;
        if (xs.empty()) return zero(y);
        // Two inputs (a residual connection) have a kernel of their own, which needs fewer registers.
        if (xs.size() <= 2) return sum<2>(xs, 0, xs.size(), operand(y), {});
        if (xs.size() <= per_kernel) return sum<per_kernel>(xs, 0, xs.size(), operand(y), {});
        float* running = context().sum.as<float>(y.dims.elements());
        const ConstView partial{running, y.dims, y.dims.c * y.dims.h * y.dims.w, y.dims.h * y.dims.w, y.dims.w};
        sum<per_kernel>(xs, 0, per_kernel, dense_operand(running, y.dims), {});
        for (std::size_t k = per_kernel; k < xs.size(); k += per_kernel - 1)
            sum<per_kernel>(xs, k, std::min(xs.size(), k + per_kernel - 1), dense_operand(running, y.dims), partial);
        copy(partial, y);
    }

    void copy(ConstView x, View y) override {
        check_same_dims(x, y, "copy");
        map("copy", y.dims, Merge::all, operand(y), inputs(x), Copy{});
    }

    void accumulate(ConstView x, View y) override {
        check_same_dims(x, y, "accumulate");
        map("accumulate", y.dims, Merge::all, operand(y), inputs(ConstView(y), x), Add2{});
    }

    void sgd(float* w, float* m, const float* g, std::int64_t count, float lr, float momentum, float decay) override {
        if (count <= 0) return;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(count, 256), 65535));
        sgd_kernel<<<blocks, 256, 0, gpu::stream()>>>(w, m, g, count, lr, momentum, decay);
        check_launch("sgd");
    }

private:
    static constexpr int per_kernel = 8;

    // out = xs[begin, end) (plus `first` when it has a base) in one kernel of up to N inputs.
    template <int N>
    static void sum(const std::vector<ConstView>& xs, std::size_t begin, std::size_t end, Operand<float> out,
                    ConstView first) {
        Inputs<N> in;
        in.count = 0;
        if (first.base) in.op[in.count++] = input(first);
        for (std::size_t k = begin; k < end; ++k) in.op[in.count++] = input(xs[k]);
        map("add", xs[0].dims, Merge::all, out, in, SumInputs{{}, in.count});
    }
};

class GpuLoss final : public LossKernels {
public:
    double cross_entropy(ConstView logits, LabelView labels, float scale, View dlogits) override {
        const Dims& d = logits.dims;
        check_labels(d, labels.dims);
        if (dlogits.base) check_same_dims(logits, dlogits, "cross_entropy");
        const std::int64_t pixels = d.n * d.h * d.w;
        if (pixels == 0) return 0.0;
        Context& ctx = context();
        // Labels are checked here, on the host, where a bad one can be reported as the reference does.
        auto* host =
            static_cast<std::int32_t*>(ctx.staging.get(static_cast<std::size_t>(pixels) * sizeof(std::int32_t)));
        std::int64_t p = 0;
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t i = 0; i < d.h; ++i)
                for (std::int64_t j = 0; j < d.w; ++j) {
                    const std::int32_t label = labels.at(n, 0, i, j);
                    check_label(label, d.c);
                    host[p++] = label;
                }
        auto* device = ctx.labels.as<std::int32_t>(pixels);
        check(cudaMemcpyAsync(device, host, static_cast<std::size_t>(pixels) * sizeof(std::int32_t),
                              cudaMemcpyHostToDevice, gpu::stream()),
              "upload of labels");
        ctx.staging.read_by_stream();

        // A warp per pixel where a pixel is a whole sample (classification: many classes, contiguous).
        const int lanes = d.h * d.w == 1 ? 32 : 1;
        const std::int64_t per_block = 256 / lanes;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(ceil_div(pixels, per_block), loss_blocks_max));
        double* partials = ctx.partials.as<double>(blocks);
        const Operand<float> out = dlogits.base ? operand(dlogits) : Operand<float>{};
        if (lanes == 32)
            cross_entropy_kernel<32><<<blocks, 256, 0, gpu::stream()>>>(d, input(logits), out, device, scale, partials);
        else
            cross_entropy_kernel<1><<<blocks, 256, 0, gpu::stream()>>>(d, input(logits), out, device, scale, partials);
        check_launch("cross_entropy");
        const double* sums = ctx.fetch(partials, blocks);
        double total = 0.0;
        for (unsigned b = 0; b < blocks; ++b) total += sums[b];
        return total;
    }
};

// The synthetic data set's inputs, made on the GPU with the host's formulas (synthetic_formula.hpp). Each
// thread works out its row's field and noise hash once, then its elements.
struct SyntheticInputs {
    SyntheticData data;
    std::int64_t sample0, y0, x0;
    struct Row {
        std::int64_t sample, c, y;
        std::uint64_t noise;
        synthetic::Field::Terms field;
        double fx;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t y) const {
        using namespace synthetic;
        const std::int64_t s = sample0 + n, gy = y0 + y;
        const Field field(data.seed, s, c);
        const std::uint64_t h = splitmix64(data.seed ^ splitmix64(tag_noise));
        const std::uint64_t noise =
            splitmix64(splitmix64(splitmix64(h ^ static_cast<std::uint64_t>(s)) ^ static_cast<std::uint64_t>(c)) ^
                       static_cast<std::uint64_t>(gy));
        return {s, c, gy, noise, field.row(gy), field.fx};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        using namespace synthetic;
        const std::int64_t gx = x0 + x;
        const double field = Field::at(r.field, Field::column(r.fx, gx));
        return input_value(splitmix64(r.noise ^ static_cast<std::uint64_t>(gx)), field,
                           mark(data, r.c, input_class(data, r.sample, r.y, gx)));
    }
};

class GpuSynthetic final : public SyntheticKernels {
public:
    void inputs(const SyntheticData& data, std::int64_t sample0, std::int64_t y0, std::int64_t x0, View tile) override {
        DSL_INTERNAL_CHECK(tile.dims.c == data.channels, "synthetic inputs: a tile of " + dims_text(tile.dims) +
                                                             " for " + std::to_string(data.channels) + " channels");
        map("synthetic inputs", tile.dims, Merge::none, operand(tile), no_inputs(),
            SyntheticInputs{data, sample0, y0, x0});
    }
};

class GpuMemory final : public Memory {
public:
    bool host() const override { return false; }

    float* allocate(std::int64_t count) override {
        // At least one element, so that every allocation is a distinct pointer as on the host.
        const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float);
        void* p = device_malloc(bytes);
        // Zeroed before any other stream (NCCL's, the legacy default one) can see it.
        const cudaError_t set = cudaMemsetAsync(p, 0, bytes, gpu::stream());
        const cudaError_t done = set == cudaSuccess ? cudaStreamSynchronize(gpu::stream()) : set;
        if (done != cudaSuccess) {
            cudaFree(p);
            check(done, "zeroing new device memory");
        }
        return static_cast<float*>(p);
    }

    // Tensors and buffers release from destructors, where an exception would end the process. An error here
    // is the sticky one of a kernel that failed before, which the call that met it first has thrown.
    void release(float* data) override {
        try {
            device_free(data);
        } catch (const std::exception&) {
        }
    }

    void fill(View v, float value) override {
        map("fill", v.dims, Merge::all, operand(v), no_inputs(), Fill{{}, value});
    }

    void upload(const float* host, float* data, std::int64_t count) override {
        if (count <= 0) return;
        check(cudaMemcpyAsync(data, host, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyHostToDevice,
                              gpu::stream()),
              "upload (cudaMemcpyAsync)");
        // The caller may reuse `host` as soon as this returns.
        check(cudaStreamSynchronize(gpu::stream()), "upload (cudaStreamSynchronize)");
    }

    void download(const float* data, float* host, std::int64_t count) override {
        if (count <= 0) return;
        check(cudaMemcpyAsync(host, data, static_cast<std::size_t>(count) * sizeof(float), cudaMemcpyDeviceToHost,
                              gpu::stream()),
              "download (cudaMemcpyAsync)");
        check(cudaStreamSynchronize(gpu::stream()), "download (cudaStreamSynchronize)");
    }

    void pack(ConstView v, float* out) override {
        map("pack", v.dims, Merge::all, dense_operand(out, v.dims), inputs(v), Copy{});
    }

    void unpack(const float* in, View v, bool add) override {
        const ConstView from{in, v.dims, v.dims.c * v.dims.h * v.dims.w, v.dims.h * v.dims.w, v.dims.w};
        if (add)
            map("unpack", v.dims, Merge::all, operand(v), inputs(ConstView(v), from), Add2{});
        else
            map("unpack", v.dims, Merge::all, operand(v), inputs(from), Copy{});
    }

    void synchronize() override { check(cudaStreamSynchronize(gpu::stream()), "cudaStreamSynchronize"); }
};

}  // namespace

bool gpu_built() { return true; }

int gpu_devices(std::string* why) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        cudaGetLastError();
        if (why) *why = std::string("no CUDA device: ") + cudaGetErrorString(e);
        return 0;
    }
    if (count <= 0) {
        if (why) *why = "no CUDA device: the driver reports none";
        return 0;
    }
    return count;
}

void gpu_select(int device) {
    if (stream_created && device != selected_device.load())
        throw std::logic_error("gpu_select(" + std::to_string(device) + ") after device " +
                               std::to_string(selected_device.load()) + " was first used");
    check(cudaSetDevice(device), "cudaSetDevice");
    selected_device = device;
    bind_device();
}

int gpu_for_local_rank(int local_rank, int devices) {
    if (devices <= 0) throw std::invalid_argument("gpu_for_local_rank: no GPU to choose from");
    if (local_rank < 0) throw std::invalid_argument("gpu_for_local_rank: negative local rank");
    return local_rank % devices;
}

std::string gpu_name() {
    bind_device();
    cudaDeviceProp properties{};
    check(cudaGetDeviceProperties(&properties, selected_device.load()), "cudaGetDeviceProperties");
    return properties.name;
}

std::int64_t gpu_memory_in_use() {
    bind_device();
    std::size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    return static_cast<std::int64_t>(total - free);
}

Kernels gpu_kernels(const GpuOptions& options) {
    static const Kernels set = [&] {
        context().options = options;
        static GpuConv conv;
        static GpuBatchNorm batchnorm;
        static GpuActivation activation;
        static GpuPool pool;
        static GpuFc fc;
        static GpuEltwise eltwise;
        static GpuLoss loss;
        static GpuMemory memory;
        static GpuSynthetic synthetic;
        return Kernels{&conv, &batchnorm, &activation, &pool, &fc, &eltwise, &loss, &memory, &synthetic};
    }();
    return set;
}

}  // namespace dsl::backend
