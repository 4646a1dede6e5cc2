// The weight gradients' sums over MPI (Comm::start_allreduce), and memory common to the processes
// (Comm::common_space), run under mpirun by ctest on 2 and 3 processes. Sums: buffers in the summing space
// (summed through the node's shared memory) and a buffer outside it (summed by MPI), started in turn, with
// progress and tests between, over three steps; then again in a second space, the first given back. Each sum
// in the space must be, bit for bit, the processes' values added in rank order (so every process holds the
// same bits); the one outside, of whole numbers, the exact sum. Every other buffer in the space is then
// left to its readers (Comm::start_sum_for_reader): it must stay as its process wrote it, and `read_sum`
// must give that sum, on every process and for any part of the buffer. Common memory: zeroed, and what one process
// writes there the others read. Exits non-zero, saying what differed, where one does not.
#include <dsl/backend/comm.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace {

using dsl::backend::Comm;

// Process p's element i of buffer b at step t: magnitudes spread over 2^-12..2^12, so that the order of the
// additions shows in the sums' last bits.
float value(int p, int b, std::int64_t i, int t) {
    const std::uint64_t h = (static_cast<std::uint64_t>(p) * 0x9E3779B97F4A7C15ull) ^
                            (static_cast<std::uint64_t>(i) * 0xBF58476D1CE4E5B9ull) ^
                            (static_cast<std::uint64_t>(b * 8 + t) * 0x94D049BB133111EBull);
    const auto m = static_cast<float>((h >> 40) % 20001) - 10000.0f;
    return std::ldexp(m, static_cast<int>((h >> 20) % 25) - 12);
}

int failures = 0;

void fail(int rank, const char* what, int b, std::int64_t i, int t) {
    if (++failures <= 5)
        std::fprintf(stderr, "process %d: %s (buffer %d, element %lld, step %d)\n", rank, what, b,
                     static_cast<long long>(i), t);
}

// Sums of buffers of `counts` elements in a summing space, and of one buffer outside it, over three steps;
// with `left`, every odd one's left to its readers.
void check_sums(Comm& comm, const std::vector<std::int64_t>& counts, bool left) {
    const int rank = comm.rank(), size = comm.size();
    std::int64_t total = 0;
    for (auto c : counts) total += c;
    const std::shared_ptr<float> held = comm.summing_space(total);
    float* space = held.get();
    if (!space) {
        fail(rank, "no summing space on one node", -1, -1, -1);
        return;
    }
    for (std::int64_t i = 0; i < total; ++i)
        if (space[i] != 0.0f) fail(rank, "the space is not zeroed", -1, i, -1);
    std::vector<float> outside(777);
    for (int t = 0; t < 3; ++t) {
        std::vector<float*> buffers;
        float* at = space;
        for (std::size_t b = 0; b < counts.size(); ++b) {
            for (std::int64_t i = 0; i < counts[b]; ++i) at[i] = value(rank, static_cast<int>(b), i, t);
            buffers.push_back(at);
            at += counts[b];
        }
        for (std::size_t i = 0; i < outside.size(); ++i) outside[i] = static_cast<float>(rank * 1000 + i + t);
        std::vector<bool> seen;
        const auto to_reader = [&](std::size_t b) { return left && b % 2 == 1; };
        for (std::size_t b = 0; b < counts.size(); ++b) {
            if (!to_reader(b))
                comm.start_allreduce(buffers[b], counts[b]);
            else if (!comm.start_sum_for_reader(buffers[b], counts[b]))
                fail(rank, "a buffer in the space not left to its readers", static_cast<int>(b), -1, t);
            if (b == 1) comm.start_allreduce(outside.data(), static_cast<std::int64_t>(outside.size()));
            comm.progress();
            const std::vector<bool> done = comm.test_allreduces();
            if (done.size() != b + 1 + (b >= 1 ? 1 : 0))
                fail(rank, "test_allreduces: not one answer per sum started", static_cast<int>(b), -1, t);
            for (std::size_t k = 0; k < seen.size() && k < done.size(); ++k)
                if (seen[k] && !done[k]) fail(rank, "a sum complete, then not", static_cast<int>(k), -1, t);
            seen = done;
        }
        if (comm.start_sum_for_reader(outside.data(), static_cast<std::int64_t>(outside.size())))
            fail(rank, "a buffer outside the space left to its readers", -1, -1, t);
        comm.finish_allreduces();
        std::vector<float> read;
        for (std::size_t b = 0; b < counts.size(); ++b) {
            // A buffer left to its readers, read in two pieces (the second from the middle).
            if (to_reader(b)) {
                const std::int64_t half = counts[b] / 2;
                read.assign(static_cast<std::size_t>(counts[b]), 0.0f);
                if (!comm.read_sum(buffers[b], half, read.data()) ||
                    !comm.read_sum(buffers[b] + half, counts[b] - half, read.data() + half))
                    fail(rank, "read_sum refused a buffer in the space", static_cast<int>(b), -1, t);
            }
            for (std::int64_t i = 0; i < counts[b]; ++i) {
                float sum = value(0, static_cast<int>(b), i, t);
                for (int p = 1; p < size; ++p) sum += value(p, static_cast<int>(b), i, t);
                const float mine = value(rank, static_cast<int>(b), i, t);
                const float* got = to_reader(b) ? &read[static_cast<std::size_t>(i)] : &buffers[b][i];
                if (std::memcmp(&sum, got, sizeof sum) != 0)
                    fail(rank, to_reader(b) ? "read_sum: not the sum in rank order" : "not the sum in rank order",
                         static_cast<int>(b), i, t);
                if (to_reader(b) && std::memcmp(&mine, &buffers[b][i], sizeof mine) != 0)
                    fail(rank, "a buffer left to its readers is not what its process wrote", static_cast<int>(b), i, t);
            }
        }
        if (comm.read_sum(outside.data(), 1, read.data()))
            fail(rank, "read_sum of a buffer outside the space", -1, -1, t);
        comm.all(true);  // every process has read the others' parts before they are written again
        for (std::size_t i = 0; i < outside.size(); ++i) {
            double sum = 0;
            for (int p = 0; p < size; ++p) sum += p * 1000 + static_cast<double>(i) + t;
            if (outside[i] != static_cast<float>(sum))
                fail(rank, "the sum over MPI", -1, static_cast<std::int64_t>(i), t);
        }
    }
}

// Memory common to the processes (Comm::common_space): zeroed, and what each process writes there, every
// process reads, once they have all written.
void check_common(Comm& comm, std::int64_t count) {
    const int rank = comm.rank(), size = comm.size();
    const std::shared_ptr<float> held = comm.common_space(count);
    float* space = held.get();
    if (!space) return fail(rank, "no common space on one node", -1, -1, -1);
    for (std::int64_t i = 0; i < count; ++i)
        if (space[i] != 0.0f) fail(rank, "the common space is not zeroed", -1, i, -1);
    comm.all(true);
    for (std::int64_t i = rank; i < count; i += size) space[i] = value(rank, 0, i, 0);
    comm.all(true);
    for (std::int64_t i = 0; i < count; ++i) {
        const float expected = value(static_cast<int>(i % size), 0, i, 0);
        if (std::memcmp(&expected, &space[i], sizeof expected) != 0)
            fail(rank, "not what the process that wrote it wrote", -1, i, -1);
    }
    comm.all(true);
}

}  // namespace

int main() {
    auto world = dsl::backend::mpi_world();
    // Fewer elements than processes, a block's edges (1024), and large ones; then, the first space given
    // back, another.
    check_sums(*world, {1, 2, 5, 1023, 1024, 1025, 65537, 300001}, false);
    check_sums(*world, {3, 100000}, false);
    check_sums(*world, {1, 2, 5, 1023, 1024, 1025, 65537, 300001}, true);
    check_common(*world, 1);
    check_common(*world, 300001);
    const int rank = world->rank(), size = world->size();
    const bool passed = world->all(failures == 0);
    world.reset();
    dsl::backend::mpi_finalize();
    if (rank == 0 && passed)
        std::printf(
            "sums on %d processes: as added in rank order, or left to the readers; common memory: one for all\n", size);
    return passed ? 0 : 1;
}
