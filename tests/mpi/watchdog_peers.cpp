// The watchdog names the process whose messages a wait misses, from the messages themselves, wherever that
// process runs: run under mpirun by ctest on 3 processes. Process 0 exchanges with 1 and 2; 1 sends and
// receives, 2 runs (its watchdog says so in the node's table) but never takes part. Process 0's watchdog, after
// its --timeout of 1 s, must say that it waited for the halo exchange of layer 'conv' with process 2 alone,
// and end it; ctest reads that from the output (a pass is that line, with process 1 not named).
#include <dsl/backend/comm.hpp>
#include <dsl/backend/watchdog.hpp>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
    auto world = dsl::backend::mpi_world();
    const int rank = world->rank();
    if (world->size() != 3) {
        if (rank == 0) std::fprintf(stderr, "watchdog_peers runs on 3 processes, not %d\n", world->size());
        return 1;
    }
    // Every process watches; only process 0's is short enough to fire.
    dsl::backend::Watchdog watchdog(*world, rank == 0 ? 1.0 : 600.0, 0.0, {"conv"}, 3);
    watchdog.step_done(0.01);  // past the first step's longer allowance
    std::vector<float> out(64, 1.0f), in1(64), in2(64);
    if (rank == 0) {
        world->start_exchange({{1, out.data(), 64}, {2, out.data(), 64}}, {{1, in1.data(), 64}, {2, in2.data(), 64}},
                              7);
        const dsl::backend::Awaiting waiting("a halo exchange", 0);
        world->finish_exchange();  // never: process 2 sends nothing
        std::fprintf(stderr, "process 0 was not stopped by its watchdog\n");
        return 1;
    }
    if (rank == 1) {
        world->start_exchange({{0, out.data(), 64}}, {{0, in1.data(), 64}}, 7);
        world->finish_exchange();
    }
    // Until mpirun ends this process, process 0 having ended.
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
}
