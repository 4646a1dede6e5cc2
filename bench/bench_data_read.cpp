// bench_data_read: how fast each process reads its tile of a network's input through dsl's data source, as
// training reads it (a sample at a time; the tile a part of the first spatial axis, depth or rows, with a halo
// margin of 1), from any `--data` form (a file, or a collection of files: a glob, a folder, @list) with
// `--transform` and `--layout`. Run under mpirun with P processes, each reading its part of the P; prints
// each process's MB/s of stored bytes (the file's element size) and the slowest's seconds per sample.
//   mpirun -np 2 bench_data_read NET 'boxes/*.h5:/full' 'boxes/*.h5:/unitPar' [log1p] [NCDHW|NDHWC]
#include "common.hpp"
#include "read_times.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/tensor.hpp>
#include <dsl/backend/trainer.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    using namespace dsl;
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5 || argc > 7) {
        if (rank == 0)
            std::fprintf(stderr,
                         "usage: bench_data_read NET INPUTS LABELS ELEMENT_BYTES [TRANSFORM] [LAYOUT]\n"
                         "  INPUTS, LABELS: as --data takes them; ELEMENT_BYTES: of the stored inputs (2 for int16)\n");
        MPI_Finalize();
        return 2;
    }
    const frontend::Network net = bench::load(argv[1]);
    const auto [input, label] = bench::first_input_and_label(net);
    const frontend::Layer& x = net.layers[static_cast<std::size_t>(input)];
    backend::DataFiles files{
        {{x.name, argv[2]}, {net.layers[static_cast<std::size_t>(label)].name, argv[3]}}, false, ""};
    const double element_bytes = std::stod(argv[4]);
    if (argc > 5 && std::string(argv[5]) != "-") files.transforms = {{x.name, argv[5]}};
    if (argc > 6) files.layouts = {{x.name, argv[6]}};
    std::string error;
    const auto t_open = bench::Clock::now();
    auto data = backend::make_data_source(net, 0, files, error);
    const double open_seconds = bench::seconds_since(t_open);
    if (!data) {
        if (rank == 0) std::fprintf(stderr, "error: %s\n", error.c_str());
        MPI_Finalize();
        return 1;
    }
    // [C, spatial...]: this process's part of the first spatial axis, with a margin of 1 inside the sample.
    const std::vector<std::int64_t>& shape = x.shape.dims;
    const std::int64_t first = shape[1];
    const std::int64_t lo = std::max<std::int64_t>(0, first * rank / size - 1);
    const std::int64_t hi = std::min<std::int64_t>(first, first * (rank + 1) / size + 1);
    const int rank_space = static_cast<int>(shape.size()) - 1;
    Dims d{1, shape[0], Space<std::int64_t>::filled(rank_space, 0)};
    for (int a = 0; a < rank_space; ++a) d.space[a] = shape[static_cast<std::size_t>(a) + 1];
    d.space[0] = hi - lo;
    backend::Index at = backend::Index::filled(rank_space, 0);
    at[0] = lo;
    backend::Tensor tile(d);
    const std::int64_t samples = data->samples();
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = bench::Clock::now();
    for (std::int64_t s = 0; s < samples; ++s) data->inputs(x, s, at, tile.interior());
    const double seconds = bench::seconds_since(t0);
    const double bytes = static_cast<double>(samples * d.elements()) * element_bytes;
    const bench::ReadTimes times = bench::gather_read_times(bytes, seconds);
    if (rank == 0) {
        std::printf(
            "dsl, %d process%s: %lld samples, a tile of %.1f MB stored per process; MB/s per process: %s; "
            "%.4f s per sample (slowest); open and check %.3f s\n",
            size, size == 1 ? "" : "es", static_cast<long long>(samples), bytes / samples / 1e6, times.rates.c_str(),
            times.slowest / static_cast<double>(samples), open_seconds);
    }
    data.reset();
    MPI_Finalize();
    return 0;
}
