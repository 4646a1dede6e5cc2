// Sums of float buffers over processes on one machine, in memory they all map: the weight gradients'
// allreduce, where every process of a communicator is on one node.
//
// Why: Open MPI's non-blocking allreduce copies a large sum through its shared-memory transport in rounds
// that move on only inside MPI calls, with a temporary of the whole buffer. On mesh_stack_512 under H=2 on 2
// one-thread processes, summing the 7.86M weight gradients took about 6% of each process's step
// (bench/README.md, 2026-11-29 (2)). Here the gradients are written where every process can read them, and
// nothing is copied: each process sums its share of every buffer (the r-th of P equal parts) over the
// processes in rank order and writes the sums into every process's buffer. Each element is summed once, by
// one process, in one order, so every process holds the same bits.
//
// How the processes know where the others are: each has two counters in the shared memory, the sums it has
// started (their buffers complete) and the sums whose share it has summed. A process sums sum k's share once
// every process has started k, and k is complete once every process has summed its share. `progress` does
// what it can and returns, so a process never waits for another that is inside an MPI call; only `finish`
// waits, and every process reaches it after every collective call before it.
#pragma once

#include "node_memory.hpp"

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace dsl::backend {

class NodeSum {
public:
    // `count` floats on each process of `comm`, zeroed (collective, with the same count on every process).
    // Null where its processes are not all on one node, or the shared memory could not be had: the caller
    // then keeps its buffers and sums them over MPI.
    static std::unique_ptr<NodeSum> create(MPI_Comm comm, std::int64_t count);
    ~NodeSum();
    NodeSum(const NodeSum&) = delete;
    NodeSum& operator=(const NodeSum&) = delete;

    float* space() const { return buffer(rank_); }  // this process's
    bool holds(const float* data, std::int64_t count) const;

    // Starts the sum of `data` (in `space`) over every process, in place; the buffer stays untouched until
    // `finish`, which waits for every sum started. With `leave_to_reader`, nothing is summed: the sum is
    // complete once every process has started it, and whoever needs it adds the processes' buffers (`add`)
    // itself, reading each once rather than this writing every one.
    void start(float* data, std::int64_t count, bool leave_to_reader = false);
    // The processes' `count` floats from `offset` in their spaces, added in rank order, into `out`: the sum's
    // arithmetic, whoever does it.
    void add(std::int64_t offset, std::int64_t count, float* out) const;
    void progress();
    std::vector<bool> test();  // which sums started since the last `finish` are complete, in their order
    void finish();

private:
    struct alignas(64) Counter {
        std::uint64_t value;
    };
    struct Counters {
        Counter started, summed;
    };

    NodeSum(int rank, int size, std::int64_t count, std::unique_ptr<NodeMemory> memory);
    Counters& counters(int process) const;
    float* buffer(int process) const;
    bool everyone(Counter Counters::*counter, std::uint64_t value) const;  // every process's counter >= value
    void sum_share(std::int64_t offset, std::int64_t count);

    int rank_, size_;
    std::int64_t count_;
    std::unique_ptr<NodeMemory> memory_;
    std::size_t segment_bytes_;
    std::uint64_t started_ = 0, summed_ = 0;                   // this process's counters, as it last wrote them
    std::uint64_t first_ = 0;                                  // the number of the first sum since the last finish
    struct Sum {
        std::int64_t offset, count;  // in the space
        bool left;                   // to the reader
    };
    std::vector<Sum> sums_;  // since then
};

}  // namespace dsl::backend
