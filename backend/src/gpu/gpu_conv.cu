// Convolutions through cuDNN, with the search for each problem's fastest algorithm and layout, and fc as a
// convolution: an image's (and a vector's, of 1 x 1 planes) with cuDNN's 4-D tensors, a volume's with its
// 5-D ones (NCDHW, in the views' strides). And the convolutions of layers of precision bfloat16 and
// float16 (Kernels::conv_bfloat16, conv_float16): cuDNN's 16-bit ones on tensor cores, their operands
// rounded into dense 16-bit scratch.
#include "gpu_common.cuh"
#include "gpu_map.cuh"
#include "gpu_reduce.cuh"

#include "../kernels/kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsl::backend::gpu {

namespace {

// y + bias[c]: the bias of a convolution or fc, after cuDNN's sum.
struct AddBias {
    const float* bias;
    __device__ float row(std::int64_t, std::int64_t c, std::int64_t, std::int64_t) const { return bias[c]; }
    template <int S>
    __device__ float operator()(float b, const float (&v)[S], std::int64_t) const {
        return __fadd_rn(v[0], b);
    }
};

// ---------------------------------------------------------------------------------------------------------
// Convolutions through cuDNN's legacy API.

static_assert(cudnn_status::sublibrary_version_mismatch == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH &&
              cudnn_status::sublibrary_loading_failed == CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED &&
              cudnn_status::incompatible_cuda_driver == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER &&
              cudnn_status::incompatible_cudart == CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART &&
              cudnn_status::arch_mismatch == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH &&
              cudnn_status::host_allocation_failed == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED &&
              cudnn_status::device_allocation_failed == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);

// A failed cuDNN call, thrown as gpu_errors.hpp classes it: a user error, memory that ran out, or a bug in dsl.
// Each is also a CudnnError, which the search catches to try the other layout.
struct CudnnError {};
class CudnnUserError : public UserError, public CudnnError {
public:
    using UserError::UserError;
};
class CudnnOutOfMemory : public OutOfMemory, public CudnnError {
public:
    using OutOfMemory::OutOfMemory;
};
class CudnnBug : public std::runtime_error, public CudnnError {
public:
    using std::runtime_error::runtime_error;
};

void check_cudnn(cudnnStatus_t status, const char* what) {
    if (status == CUDNN_STATUS_SUCCESS) return;
    const GpuFailure f = cudnn_failure(static_cast<int>(status), what, cudnnGetErrorString(status));
    if (f.kind == GpuFailure::out_of_memory) throw CudnnOutOfMemory(f.message);
    if (f.kind == GpuFailure::user) throw CudnnUserError(f.message);
    throw CudnnBug(f.message);
}

int to_int(std::int64_t v, const char* what) {
    if (v < 0 || v > INT_MAX)
        throw UserError(std::string("cuDNN convolution: ") + what + " " + std::to_string(v) +
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

// The operands of a pass named as in the forward: input x, filter w {F, C, kernel}, output y, of an image's
// convolution (depth 1, cuDNN's 4-D tensors and 2-D convolution) or of a volume's (5-D, 3-D). The forward
// writes y, backward_data x (dx from dy), backward_weights w (dw); the others are only read.
struct ConvViews {
    Volumes x, w, y;
    bool volume = false;
};

Volumes writable(const ConstVolumes& v) {
    return Volumes{const_cast<float*>(v.base), v.dims, v.stride_n, v.stride_c, v.stride_d, v.stride_h};
}

// One way to run a pass: in the views' own strided layout, or with operands copied to and from dense
// scratch (w always is dense or copied: cuDNN's filters have no strides), and cuDNN's fastest algorithm
// for it.
struct Candidate {
    std::array<bool, 3> scratch{};  // x, w, y go through dense scratch (all do, in 16 bits)
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
    // Of float32 operands, or of 16-bit ones (CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF: products on tensor cores,
    // summed in float32, each operand rounded on its way in and the result on its way out).
    explicit ConvEngine(cudnnDataType_t type) : type_(type) {}

    // Runs `pass`; the first time a problem is seen, it is timed in both layouts as PyTorch's benchmark mode
    // times algorithms, and the choice is kept.
    void run(Pass pass, const ConvViews& v, const Window& window) {
        bind_device();
        Key key{static_cast<std::int64_t>(pass), v.volume ? 3 : 2};
        std::size_t k = 2;
        for (int d = 0; d < 3; ++d) key[k++] = d < window.stride.rank() ? window.stride[d] : 0;
        for (int d = 0; d < 3; ++d) key[k++] = d < window.dilation.rank() ? window.dilation[d] : 0;
        for (const Volumes& view : {v.x, v.w, v.y})
            for (std::int64_t value : {view.dims.n, view.dims.c, view.dims.d, view.dims.h, view.dims.w, view.stride_n,
                                       view.stride_c, view.stride_d, view.stride_h})
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
    using Key = std::array<std::int64_t, 8 + 3 * 9>;  // pass, rank, window; each operand's dims and strides
    static constexpr std::size_t max_plans = 1024;

    struct Bound {
        void *x, *w, *y;
    };

    bool sixteen_bits() const { return type_ != CUDNN_DATA_FLOAT; }
    // Whether algorithms may use tensor cores: always in 16 bits, in float32 only with TF32 asked for.
    bool tensor_cores() const { return sixteen_bits() || context().options.tf32; }
    std::size_t element_bytes() const { return sixteen_bits() ? sizeof(std::uint16_t) : sizeof(float); }

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

    static std::array<Volumes, 3> operands(const ConvViews& v) { return {v.x, v.w, v.y}; }

    // Pointers for a pass: the views' own memory, or scratch filled with their elements (rounded, in 16
    // bits) where they are read.
    Bound bind(Pass pass, const ConvViews& v, const Candidate& c) {
        const auto views = operands(v);
        std::array<void*, 3> p{};
        for (int k = 0; k < 3; ++k) {
            const Volumes& view = views[static_cast<std::size_t>(k)];
            DeviceBuffer& slot = slots_[static_cast<std::size_t>(k)];
            if (!c.scratch[static_cast<std::size_t>(k)]) {
                p[static_cast<std::size_t>(k)] = view.base;
            } else if (sixteen_bits()) {
                std::uint16_t* s = slot.as<std::uint16_t>(view.dims.elements());
                if (input_of(pass, k))
                    map("conv pack 16", view.dims, Merge::all, dense_operand(s, view.dims), inputs(ConstVolumes(view)),
                        Narrow16{{}, type_ == CUDNN_DATA_BFLOAT16});
                p[static_cast<std::size_t>(k)] = s;
            } else {
                float* s = slot.as<float>(view.dims.elements());
                if (input_of(pass, k))
                    map("conv pack", view.dims, Merge::all, dense_operand(s, view.dims), inputs(ConstVolumes(view)),
                        Copy{});
                p[static_cast<std::size_t>(k)] = s;
            }
        }
        return {p[0], p[1], p[2]};
    }

    // Copies the output from scratch into its view (widened from 16 bits).
    void finish(Pass pass, const ConvViews& v, const Candidate& c, const Bound& b) {
        const auto views = operands(v);
        const std::array<void*, 3> p{b.x, b.w, b.y};
        for (std::size_t k = 0; k < 3; ++k)
            if (c.scratch[k] && !input_of(pass, static_cast<int>(k))) {
                const Volumes& view = views[k];
                if (sixteen_bits())
                    map("conv unpack 16", view.dims, Merge::none, operand(view), no_inputs(),
                        Widen16{{static_cast<const std::uint16_t*>(p[k]), view.dims, type_ == CUDNN_DATA_BFLOAT16}});
                else
                    map("conv unpack", view.dims, Merge::all, operand(view),
                        inputs(dense_volumes<const float>(static_cast<const float*>(p[k]), view.dims)), Copy{});
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

    // A view as cuDNN's tensor, 4-D for an image and 5-D (NCDHW) for a volume: in its own strides, or dense
    // when it goes through scratch.
    void describe(const TensorDescriptor& d, const Volumes& v, bool dense, bool volume) const {
        const VolumeDims& s = v.dims;
        const Volumes layout = dense ? dense_volumes(v.base, s) : v;
        if (!volume) {
            check_cudnn(cudnnSetTensor4dDescriptorEx(
                            d.get(), type_, to_int(s.n, "batch"), to_int(s.c, "channels"), to_int(s.h, "height"),
                            to_int(s.w, "width"), to_int(layout.stride_n, "stride"), to_int(layout.stride_c, "stride"),
                            to_int(layout.stride_h, "stride"), 1),
                        "cudnnSetTensor4dDescriptorEx");
            return;
        }
        const int dims[5] = {to_int(s.n, "batch"), to_int(s.c, "channels"), to_int(s.d, "depth"), to_int(s.h, "height"),
                             to_int(s.w, "width")};
        const int strides[5] = {to_int(layout.stride_n, "stride"), to_int(layout.stride_c, "stride"),
                                to_int(layout.stride_d, "stride"), to_int(layout.stride_h, "stride"), 1};
        check_cudnn(cudnnSetTensorNdDescriptor(d.get(), type_, 5, dims, strides), "cudnnSetTensorNdDescriptor");
    }

    // The filters {F, C, kH, kW} (or {F, C, kD, kH, kW}), dense, and the convolution without padding (it is
    // in the input's margins), summed in float32.
    void describe_convolution(Candidate& c, const VolumeDims& w, const Window& window, bool volume) const {
        if (!volume) {
            check_cudnn(
                cudnnSetFilter4dDescriptor(c.w.get(), type_, CUDNN_TENSOR_NCHW, to_int(w.n, "filters"),
                                           to_int(w.c, "channels"), to_int(w.h, "kernel"), to_int(w.w, "kernel")),
                "cudnnSetFilter4dDescriptor");
            check_cudnn(cudnnSetConvolution2dDescriptor(
                            c.conv.get(), 0, 0, to_int(window.stride[0], "stride"), to_int(window.stride[1], "stride"),
                            to_int(window.dilation[0], "dilation"), to_int(window.dilation[1], "dilation"),
                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                        "cudnnSetConvolution2dDescriptor");
            return;
        }
        const int filters[5] = {to_int(w.n, "filters"), to_int(w.c, "channels"), to_int(w.d, "kernel"),
                                to_int(w.h, "kernel"), to_int(w.w, "kernel")};
        check_cudnn(cudnnSetFilterNdDescriptor(c.w.get(), type_, CUDNN_TENSOR_NCHW, 5, filters),
                    "cudnnSetFilterNdDescriptor");
        const int pad[3] = {0, 0, 0};
        int stride[3], dilation[3];
        for (int d = 0; d < 3; ++d) {
            stride[d] = to_int(window.stride[d], "stride");
            dilation[d] = to_int(window.dilation[d], "dilation");
        }
        check_cudnn(cudnnSetConvolutionNdDescriptor(c.conv.get(), 3, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT),
                    "cudnnSetConvolutionNdDescriptor");
    }

    std::unique_ptr<Candidate> candidate(const ConvViews& v, const Window& window, bool dense) const {
        auto c = std::make_unique<Candidate>();
        if (sixteen_bits())
            c->scratch = {true, true, true};
        else
            c->scratch = {dense && !v.x.dense(), !v.w.dense(), dense && !v.y.dense()};
        describe(c->x, v.x, c->scratch[0], v.volume);
        describe(c->y, v.y, c->scratch[2], v.volume);
        describe_convolution(*c, v.w.dims, window, v.volume);
        c->math = sixteen_bits() ? CUDNN_TENSOR_OP_MATH : tensor_cores() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
        check_cudnn(cudnnSetConvolutionMathType(c->conv.get(), c->math), "cudnnSetConvolutionMathType");
        return c;
    }

    // The fastest successful algorithm within `capacity` bytes; none that uses tensor cores where they are
    // not allowed.
    template <typename Perf>
    bool choose(const std::vector<Perf>& perf, int returned, std::size_t capacity, Candidate& c) const {
        const bool tensor_ops = tensor_cores();
        bool found = false;
        for (int i = 0; i < returned; ++i) {
            const Perf& p = perf[static_cast<std::size_t>(i)];
            if (p.status != CUDNN_STATUS_SUCCESS || p.memory > capacity) continue;
            if (!tensor_ops &&
                (p.mathType == CUDNN_TENSOR_OP_MATH || p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
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
        // With tensor cores allowed, an algorithm may have been timed with another math: run it with the same.
        if (found && tensor_cores())
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
                                    volume_text(v.x.dims) + ", w " + volume_text(v.w.dims) + ", y " +
                                    volume_text(v.y.dims);
        std::unique_ptr<Candidate> strided;
        if (!sixteen_bits() && (!v.x.dense() || !v.y.dense())) {
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
            throw UserError(problem + ": no algorithm runs within the workspace of " +
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
                    std::max(slot_needs_[k], static_cast<std::size_t>(views[k].dims.elements()) * element_bytes());
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

    cudnnDataType_t type_;
    cudnnHandle_t handle_ = nullptr;
    DeviceBuffer workspace_;
    std::array<DeviceBuffer, 3> slots_;  // dense scratch for x, w, y
    std::array<std::size_t, 3> slot_needs_{};
    std::size_t workspace_needs_ = 0;
    std::map<Key, std::unique_ptr<Candidate>> plans_;
};

// The engine of float32 operands, or of 16-bit ones where `p` is bfloat16 or float16: each has its own plans
// and scratch.
ConvEngine& conv_engine(scheduler::Precision p = scheduler::Precision::float32) {
    // Never destroyed, as the context.
    static ConvEngine* engines[3] = {new ConvEngine(CUDNN_DATA_FLOAT), new ConvEngine(CUDNN_DATA_BFLOAT16),
                                     new ConvEngine(CUDNN_DATA_HALF)};
    return *engines[static_cast<int>(p)];
}

void add_bias(const float* bias, const Volumes& y) {
    map("bias", y.dims, Merge::rows, operand(y), inputs(ConstVolumes(y)), AddBias{bias});
}

// db[f] = Σ dy(n, f, o), into device memory.
void bias_gradient(const ConstVolumes& dy, float* db) {
    reduce("bias gradient", dy.dims, Over::channels, {dy}, SumTerm{}, db);
}

// The convolution's passes, which convolutions and fc (over filters that are views of its weights) run on
// views whose shapes their callers checked: of images (or vectors) or, where `volume`, of volumes; in
// float32, or in the 16 bits of precision `p`.
void conv_forward(const ConstVolumes& x, const ConstVolumes& w, const float* bias, const Volumes& y,
                  const Window& window, bool volume, scheduler::Precision p = scheduler::Precision::float32) {
    if (y.dims.elements() == 0) return;
    if (x.dims.elements() == 0 || w.dims.elements() == 0)
        zero(y);
    else
        conv_engine(p).run(Pass::forward, {writable(x), writable(w), y, volume}, window);
    if (bias) add_bias(bias, y);
}

void conv_backward_data(const ConstVolumes& dy, const ConstVolumes& w, const Volumes& dx, const Window& window,
                        bool volume, scheduler::Precision p = scheduler::Precision::float32) {
    if (dx.dims.elements() == 0) return;
    if (dy.dims.elements() == 0 || w.dims.elements() == 0) return zero(dx);
    conv_engine(p).run(Pass::backward_data, {dx, writable(w), writable(dy), volume}, window);
}

void conv_backward_weights(const ConstVolumes& x, const ConstVolumes& dy, const Volumes& dw, float* db,
                           const Window& window, bool volume, scheduler::Precision p = scheduler::Precision::float32) {
    if (db) bias_gradient(dy, db);
    if (dw.dims.elements() == 0) return;
    if (dy.dims.elements() == 0 || x.dims.elements() == 0) return zero(dw);
    conv_engine(p).run(Pass::backward_weights, {writable(x), dw, writable(dy), volume}, window);
}

// Convolutions in float32, or in 16 bits: cuDNN's bfloat16 or float16 kernels, whose inputs and result are
// each rounded to 16 bits (as under PyTorch's autocast), their products summed in float32.
class GpuConv final : public ConvKernels {
public:
    explicit GpuConv(scheduler::Precision p) : p_(p) {}

    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& window) override {
        check_conv(x.dims, w.dims, y.dims, window);
        conv_forward(volumes(x), volumes(w), bias, volumes(y), window, is_volume(x.dims), p_);
    }

    void backward_data(ConstView dy, ConstView w, View dx, const Window& window) override {
        check_conv(dx.dims, w.dims, dy.dims, window);
        conv_backward_data(volumes(dy), volumes(w), volumes(dx), window, is_volume(dx.dims), p_);
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& window) override {
        check_conv(x.dims, dw.dims, dy.dims, window);
        conv_backward_weights(volumes(x), volumes(dy), volumes(dw), db, window, is_volume(x.dims), p_);
    }

private:
    scheduler::Precision p_;
};

// fc is the convolution of x {N, C, places} with K filters {C, places} that covers x exactly (output {N, K},
// of one place, as is an x without spatial dimensions): feature i of x is (c, place) in row-major order, as
// filter k's elements are, so w {K, I} is the filter bank {K, C, places} over the same memory. An image's
// (or a vector's) is a 2-D convolution, a volume's a 3-D one.
class GpuFc final : public FcKernels {
public:
    void forward(ConstView x, ConstView w, const float* bias, View y) override {
        check_fc(x.dims, w.dims, y.dims);
        const ConstVolumes xv = volumes(x);
        conv_forward(xv, filters(volumes(w), xv.dims), bias, volumes(y), window(x.dims), is_volume(x.dims));
    }

    void backward_data(ConstView dy, ConstView w, View dx) override {
        check_fc(dx.dims, w.dims, dy.dims);
        const Volumes dxv = volumes(dx);
        conv_backward_data(volumes(dy), filters(volumes(w), dxv.dims), dxv, window(dx.dims), is_volume(dx.dims));
    }

    void backward_weights(ConstView x, ConstView dy, View dw, float* db) override {
        check_fc(x.dims, dw.dims, dy.dims);
        const ConstVolumes xv = volumes(x);
        conv_backward_weights(xv, volumes(dy), writable(filters(volumes(dw), xv.dims)), db, window(x.dims),
                              is_volume(x.dims));
    }

private:
    // The window that covers x: its extents, stride and dilation 1.
    static Window window(const Dims& x) {
        const VolumeDims v = volumes(x);
        Window w;
        if (is_volume(x)) {
            w.kernel = {v.d, v.h, v.w};
            w.stride = {1, 1, 1};
            w.dilation = {1, 1, 1};
        } else {
            w.kernel = {v.h, v.w};
        }
        return w;
    }

    static ConstVolumes filters(const ConstVolumes& w, const VolumeDims& x) {
        DSL_INTERNAL_CHECK(w.dims.c <= 1 || w.stride_c == 1, "fc: the weights' rows must be contiguous");
        return ConstVolumes{w.base, {w.dims.n, x.c, x.d, x.h, x.w}, w.stride_n, x.points(), x.h * x.w, x.w};
    }
};

}  // namespace

ConvKernels* conv_kernels(scheduler::Precision p) {
    static GpuConv instances[3] = {GpuConv(scheduler::Precision::float32), GpuConv(scheduler::Precision::bfloat16),
                                   GpuConv(scheduler::Precision::float16)};
    return &instances[static_cast<int>(p)];
}

FcKernels* fc_kernels() {
    static GpuFc instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
