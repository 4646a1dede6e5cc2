// The communicators of a GPU run, whose buffers are device memory. Where every process has a GPU of its
// own, NCCL moves them GPU to GPU on streams of its own, ordered after the kernels that write them by
// events, so that the host never waits: allreduces run while backward goes on, halo exchanges while the
// interior is computed. Where processes share a GPU (NCCL needs one per process), they go through pinned
// host memory over MPI; the GPU still computes while the host waits for the messages.
#include <dsl/backend/gpu.hpp>

#include "gpu_context.hpp"

#include <dsl/base/diagnostics.hpp>

#include <nccl.h>

#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace dsl::backend {

namespace {

using gpu::check;

static_assert(gpu::nccl_status::unhandled_cuda_error == ncclUnhandledCudaError &&
              gpu::nccl_status::system_error == ncclSystemError &&
              gpu::nccl_status::invalid_usage == ncclInvalidUsage && gpu::nccl_status::remote_error == ncclRemoteError);

// A user error where the user can act on NCCL's failure (gpu_errors.hpp), else a bug in dsl.
void check_nccl(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) gpu::throw_failure(gpu::nccl_failure(static_cast<int>(r), what, ncclGetErrorString(r)));
}

// Page-locked host memory, grown on demand, so that copies to and from the GPU run asynchronously.
class Pinned {
public:
    Pinned() = default;
    Pinned(Pinned&& o) noexcept : data_(std::exchange(o.data_, nullptr)), capacity_(std::exchange(o.capacity_, 0)) {}
    Pinned& operator=(Pinned&&) = delete;
    Pinned(const Pinned&) = delete;
    ~Pinned() {
        if (data_) cudaFreeHost(data_);
    }
    float* reserve(std::int64_t count) {
        if (count > capacity_) {
            if (data_) check(cudaFreeHost(data_), "cudaFreeHost");
            data_ = nullptr;
            capacity_ = 0;
            check(cudaMallocHost(reinterpret_cast<void**>(&data_), static_cast<std::size_t>(count) * sizeof(float)),
                  "cudaMallocHost");
            capacity_ = count;
        }
        return data_;
    }

private:
    float* data_ = nullptr;
    std::int64_t capacity_ = 0;
};

std::size_t bytes(std::int64_t count) { return static_cast<std::size_t>(count) * sizeof(float); }

// What both communicators do alike, over the host's: host values, and groups. The trainer's groups only sum
// host values (batch-norm statistics, global pooling), so they get no NCCL communicators of their own (each
// costs buffers on the GPU and a setup of its own): device buffers, if any came, go through host memory.
class OverHost : public Comm {
public:
    explicit OverHost(std::unique_ptr<Comm> host) : host_(std::move(host)) {}

    int rank() const override { return host_->rank(); }
    int size() const override { return host_->size(); }
    std::unique_ptr<Comm> split(int color) override;
    void allreduce(double* data, std::int64_t count) override { host_->allreduce(data, count); }
    double max(double value) override { return host_->max(value); }
    bool all(bool value) override { return host_->all(value); }
    void progress() override { host_->progress(); }
    std::vector<std::vector<double>> gather(const std::vector<double>& values) override {
        return host_->gather(values);
    }
    std::vector<std::vector<float>> gather_floats(const std::vector<float>& values) override {
        return host_->gather_floats(values);
    }
    std::optional<int> mpi_handle() const override { return host_->mpi_handle(); }

protected:
    std::unique_ptr<Comm> host_;
};

// Device buffers over a host communicator: copied to pinned memory once the kernels that write them have run,
// sent over `host`, and copied back into the device before any kernel that follows the wait.
class StagedComm final : public OverHost {
public:
    explicit StagedComm(std::unique_ptr<Comm> host) : OverHost(std::move(host)) {}

    void start_allreduce(float* data, std::int64_t count) override {
        Staged& s = next(allreduces_, allreduces_used_, data, count);
        check(cudaMemcpyAsync(s.pinned.reserve(count), data, bytes(count), cudaMemcpyDeviceToHost, gpu::stream()),
              "copying a gradient to the host");
        check(cudaStreamSynchronize(gpu::stream()), "waiting for a gradient");
        host_->start_allreduce(s.pinned.reserve(count), count);
    }

    void finish_allreduces() override {
        host_->finish_allreduces();
        for (std::size_t i = 0; i < allreduces_used_; ++i) to_device(allreduces_[i]);
        allreduces_used_ = 0;
    }

    // The host's requests are one to one with the allreduces started here.
    std::vector<bool> test_allreduces() override { return host_->test_allreduces(); }

    void start_exchange(const std::vector<Message>& sends, const std::vector<Message>& receives, int tag) override {
        std::vector<Message> host_sends, host_receives;
        sends_used_ = receives_used_ = 0;
        for (const Message& m : sends) {
            Staged& s = next(sends_, sends_used_, m.data, m.count);
            check(cudaMemcpyAsync(s.pinned.reserve(m.count), m.data, bytes(m.count), cudaMemcpyDeviceToHost,
                                  gpu::stream()),
                  "copying a halo to the host");
            host_sends.push_back(Message{m.peer, s.pinned.reserve(m.count), m.count});
        }
        for (const Message& m : receives) {
            Staged& s = next(receives_, receives_used_, m.data, m.count);
            host_receives.push_back(Message{m.peer, s.pinned.reserve(m.count), m.count});
        }
        // The packed halos are on the host, and the copies of the last exchange's receives are done with
        // the pinned buffers that this one receives into.
        check(cudaStreamSynchronize(gpu::stream()), "waiting for the halos");
        host_->start_exchange(host_sends, host_receives, tag);
    }

    void finish_exchange() override {
        host_->finish_exchange();
        for (std::size_t i = 0; i < receives_used_; ++i) to_device(receives_[i]);
    }

private:
    struct Staged {
        float* device = nullptr;
        std::int64_t count = 0;
        Pinned pinned;
    };

    static Staged& next(std::vector<Staged>& pool, std::size_t& used, float* device, std::int64_t count) {
        if (used == pool.size()) pool.emplace_back();
        Staged& s = pool[used++];
        s.device = device;
        s.count = count;
        return s;
    }

    // Asynchronous: the pinned buffer is not touched again before the next start, which waits for the stream.
    static void to_device(Staged& s) {
        check(
            cudaMemcpyAsync(s.device, s.pinned.reserve(s.count), bytes(s.count), cudaMemcpyHostToDevice, gpu::stream()),
            "copying received data to the GPU");
    }

    std::vector<Staged> allreduces_, sends_, receives_;
    std::size_t allreduces_used_ = 0, sends_used_ = 0, receives_used_ = 0;
};

// NCCL, one communicator for the allreduces and one for the exchanges, each on a stream of its own, so
// that a halo never waits behind a gradient's allreduce. Every process issues both kinds in the same order
// (the trainer's), which NCCL needs to match them.
class NcclComm final : public OverHost {
public:
    NcclComm(std::unique_ptr<Comm> host, ncclComm_t collectives, ncclComm_t exchanges)
        : OverHost(std::move(host)), collectives_(collectives), exchanges_(exchanges) {
        for (cudaStream_t* s : {&allreduce_stream_, &exchange_stream_})
            check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
        for (cudaEvent_t* e : {&allreduce_ready_, &allreduce_done_, &exchange_ready_, &exchange_done_})
            check(cudaEventCreateWithFlags(e, cudaEventDisableTiming), "cudaEventCreate");
    }

    ~NcclComm() override {
        ncclCommDestroy(exchanges_);
        ncclCommDestroy(collectives_);
        for (cudaEvent_t e : {allreduce_ready_, allreduce_done_, exchange_ready_, exchange_done_}) cudaEventDestroy(e);
        for (cudaStream_t s : {allreduce_stream_, exchange_stream_}) cudaStreamDestroy(s);
    }

    // Over every process of `host`: rank 0's unique id reaches the others through `host`'s sum of doubles,
    // one byte per double (the others add zeros).
    static std::unique_ptr<Comm> make(std::unique_ptr<Comm> host) {
        ncclUniqueId id{};
        if (host->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        std::array<double, sizeof(id.internal)> bytes_of{};
        for (std::size_t i = 0; i < bytes_of.size(); ++i) bytes_of[i] = static_cast<unsigned char>(id.internal[i]);
        host->allreduce(bytes_of.data(), static_cast<std::int64_t>(bytes_of.size()));
        for (std::size_t i = 0; i < bytes_of.size(); ++i)
            id.internal[i] = static_cast<char>(static_cast<unsigned char>(bytes_of[i]));
        ncclComm_t collectives = nullptr, exchanges = nullptr;
        check_nccl(ncclCommInitRank(&collectives, host->size(), id, host->rank()), "ncclCommInitRank");
        check_nccl(ncclCommSplit(collectives, 0, host->rank(), &exchanges, nullptr), "ncclCommSplit");
        return std::make_unique<NcclComm>(std::move(host), collectives, exchanges);
    }

    // A group of its own, over NCCL: a weight gradient's holders allreduce it on the GPUs.
    std::unique_ptr<Comm> split_buffers(int color) override {
        std::unique_ptr<Comm> host = host_->split(color);
        ncclComm_t collectives = nullptr, exchanges = nullptr;
        check_nccl(ncclCommSplit(collectives_, color, host->rank(), &collectives, nullptr), "ncclCommSplit");
        check_nccl(ncclCommSplit(collectives, 0, host->rank(), &exchanges, nullptr), "ncclCommSplit");
        return std::make_unique<NcclComm>(std::move(host), collectives, exchanges);
    }

    void start_allreduce(float* data, std::int64_t count) override {
        after_compute(allreduce_ready_, allreduce_stream_);
        check_nccl(ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat, ncclSum, collectives_,
                                 allreduce_stream_),
                   "ncclAllReduce");
        allreduces_pending_ = true;
    }

    void finish_allreduces() override {
        if (!allreduces_pending_) return;
        before_compute(allreduce_done_, allreduce_stream_);
        allreduces_pending_ = false;
    }

    void start_exchange(const std::vector<Message>& sends, const std::vector<Message>& receives, int) override {
        after_compute(exchange_ready_, exchange_stream_);
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (const Message& m : sends)
            if (m.count > 0)
                check_nccl(ncclSend(m.data, static_cast<std::size_t>(m.count), ncclFloat, m.peer, exchanges_,
                                    exchange_stream_),
                           "ncclSend");
        for (const Message& m : receives)
            if (m.count > 0)
                check_nccl(ncclRecv(m.data, static_cast<std::size_t>(m.count), ncclFloat, m.peer, exchanges_,
                                    exchange_stream_),
                           "ncclRecv");
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
    }

    void finish_exchange() override { before_compute(exchange_done_, exchange_stream_); }

private:
    // `stream` starts after the kernels queued so far on the compute stream.
    static void after_compute(cudaEvent_t ready, cudaStream_t stream) {
        check(cudaEventRecord(ready, gpu::stream()), "cudaEventRecord");
        check(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent");
    }
    // The compute stream's next kernels start after what is queued on `stream`.
    static void before_compute(cudaEvent_t done, cudaStream_t stream) {
        check(cudaEventRecord(done, stream), "cudaEventRecord");
        check(cudaStreamWaitEvent(gpu::stream(), done, 0), "cudaStreamWaitEvent");
    }

    ncclComm_t collectives_, exchanges_;
    cudaStream_t allreduce_stream_ = nullptr, exchange_stream_ = nullptr;
    cudaEvent_t allreduce_ready_ = nullptr, allreduce_done_ = nullptr, exchange_ready_ = nullptr,
                exchange_done_ = nullptr;
    bool allreduces_pending_ = false;
};

std::unique_ptr<Comm> OverHost::split(int color) { return std::make_unique<StagedComm>(host_->split(color)); }

}  // namespace

std::unique_ptr<Comm> gpu_comm(std::unique_ptr<Comm> host, bool nccl) {
    if (host->size() == 1) return host;  // nothing moves: one process's communicator never reads buffers
    if (nccl) return NcclComm::make(std::move(host));
    return std::make_unique<StagedComm>(std::move(host));
}

}  // namespace dsl::backend
