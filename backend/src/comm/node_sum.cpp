#include "node_sum.hpp"

#include "../kernels/avx512_clone.hpp"

#include <dsl/base/error.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

namespace dsl::backend {

namespace {

constexpr std::size_t page = 4096;

std::size_t pages(std::size_t bytes) { return (bytes + page - 1) / page * page; }

}  // namespace

std::unique_ptr<NodeSum> NodeSum::create(MPI_Comm comm, std::int64_t count) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    // No memory for no elements; NodeMemory::map answers null on every process alike, whatever each asks.
    const std::size_t segment =
        count > 0 ? pages(sizeof(Counters)) + pages(static_cast<std::size_t>(count) * sizeof(float)) : 0;
    auto memory = NodeMemory::map(comm, segment * static_cast<std::size_t>(size), "sums");
    if (!memory) return nullptr;
    return std::unique_ptr<NodeSum>(new NodeSum(rank, size, count, std::move(memory)));
}

NodeSum::NodeSum(int rank, int size, std::int64_t count, std::unique_ptr<NodeMemory> memory)
    : rank_(rank),
      size_(size),
      count_(count),
      memory_(std::move(memory)),
      segment_bytes_(memory_->bytes() / static_cast<std::size_t>(size)) {}

NodeSum::~NodeSum() = default;

NodeSum::Counters& NodeSum::counters(int process) const {
    return *reinterpret_cast<Counters*>(static_cast<char*>(memory_->data()) +
                                        static_cast<std::size_t>(process) * segment_bytes_);
}

float* NodeSum::buffer(int process) const {
    return reinterpret_cast<float*>(reinterpret_cast<char*>(&counters(process)) + pages(sizeof(Counters)));
}

bool NodeSum::holds(const float* data, std::int64_t count) const {
    const float* own = space();
    return data >= own && count <= count_ && data - own <= count_ - count;
}

bool NodeSum::everyone(Counter Counters::*counter, std::uint64_t value) const {
    for (int p = 0; p < size_; ++p)
        if (std::atomic_ref<std::uint64_t>((counters(p).*counter).value).load(std::memory_order_acquire) < value)
            return false;
    return true;
}

void NodeSum::start(float* data, std::int64_t count, bool leave_to_reader) {
    DSL_INTERNAL_CHECK(holds(data, count), "a sum of a buffer outside the shared memory");
    sums_.push_back(Sum{data - space(), count, leave_to_reader});
    std::atomic_ref<std::uint64_t>(counters(rank_).started.value).store(++started_, std::memory_order_release);
    progress();
}

// Vectorized whatever the optimization level (omp simd), with AVX-512 where the machine has it: additions
// alone, each element's in rank order, so the same bits either way.
DSL_AVX512_CLONE void NodeSum::add(std::int64_t offset, std::int64_t count, float* __restrict out) const {
    const float* __restrict a = buffer(0) + offset;
    if (size_ == 1) {
        std::memcpy(out, a, static_cast<std::size_t>(count) * sizeof(float));
        return;
    }
    const float* __restrict b = buffer(1) + offset;
#pragma omp simd
    for (std::int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
    for (int p = 2; p < size_; ++p) {
        const float* __restrict c = buffer(p) + offset;
#pragma omp simd
        for (std::int64_t i = 0; i < count; ++i) out[i] += c[i];
    }
}

// This process's share of a sum: each element the sum of every process's, in rank order, written back into
// every process's buffer.
void NodeSum::sum_share(std::int64_t offset, std::int64_t count) {
    const std::int64_t first = offset + count * rank_ / size_, end = offset + count * (rank_ + 1) / size_;
    constexpr std::int64_t block = 1024;
    float sums[block];
    for (std::int64_t b = first; b < end; b += block) {
        const std::int64_t n = std::min(block, end - b);
        add(b, n, sums);
        for (int p = 0; p < size_; ++p) std::memcpy(buffer(p) + b, sums, static_cast<std::size_t>(n) * sizeof(float));
    }
}

void NodeSum::progress() {
    // Sums are summed in the order they were started, on every process.
    while (summed_ < started_ && everyone(&Counters::started, summed_ + 1)) {
        const Sum& sum = sums_[static_cast<std::size_t>(summed_ - first_)];
        if (!sum.left) sum_share(sum.offset, sum.count);
        std::atomic_ref<std::uint64_t>(counters(rank_).summed.value).store(++summed_, std::memory_order_release);
    }
}

std::vector<bool> NodeSum::test() {
    progress();
    std::vector<bool> done(sums_.size());
    for (std::size_t i = 0; i < done.size(); ++i) done[i] = everyone(&Counters::summed, first_ + i + 1);
    return done;
}

void NodeSum::finish() {
    progress();
    while (summed_ < started_ || !everyone(&Counters::summed, started_)) {
        std::this_thread::yield();
        progress();
    }
    first_ = started_;
    sums_.clear();
}

}  // namespace dsl::backend
