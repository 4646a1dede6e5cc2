// What bench_h5_read and bench_data_read share: the network's first input and label layers, and each
// process's read rate gathered to the first process beside the slowest process's seconds.
#pragma once

#include <dsl/frontend/network.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace dsl::bench {

// The indices of the network's first input and first label layer (-1 where there is none).
inline std::pair<int, int> first_input_and_label(const frontend::Network& net) {
    int input = -1, label = -1;
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        if (net.layers[i].op == frontend::OpKind::input && input < 0) input = static_cast<int>(i);
        if (net.layers[i].op == frontend::OpKind::label && label < 0) label = static_cast<int>(i);
    }
    return {input, label};
}

// Every process's MB/s of `bytes` read in `seconds`, in rank order ("2285 739"), and the most seconds any
// process took: on the first process (collective over MPI_COMM_WORLD; empty and 0 elsewhere).
struct ReadTimes {
    std::string rates;
    double slowest = 0.0;
};
inline ReadTimes gather_read_times(double bytes, double seconds) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::vector<double> all(static_cast<std::size_t>(size));
    const double rate = bytes / seconds / 1e6;
    MPI_Gather(&rate, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    ReadTimes out;
    MPI_Reduce(&seconds, &out.slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (double v : all) out.rates += fmt::format("{}{:.0f}", out.rates.empty() ? "" : " ", v);
    return out;
}

}  // namespace dsl::bench
