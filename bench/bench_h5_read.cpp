// bench_h5_read: how fast each process reads its tile of an HDF5 data set through dsl's data source, as
// training reads it (a sample at a time, the tile's rows and columns with a halo margin of 1). Run under
// mpirun with ROWS x COLS processes; prints each process's MB/s and the slowest's seconds per sample.
//   mpirun -np 4 bench_h5_read NET FILE.h5 ROWS COLS
// The network's input is read from FILE.h5:/x, its label from FILE.h5:/y.
#include "common.hpp"
#include "read_times.hpp"

#include <dsl/backend/data.hpp>
#include <dsl/backend/tensor.hpp>
#include <dsl/backend/trainer.hpp>

#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    using namespace dsl;
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5) {
        if (rank == 0) std::fprintf(stderr, "usage: bench_h5_read NET FILE.h5 ROWS COLS\n");
        MPI_Finalize();
        return 2;
    }
    const frontend::Network net = bench::load(argv[1]);
    const std::string file = argv[2];
    const int rows = std::stoi(argv[3]), cols = std::stoi(argv[4]);
    if (rows * cols != size) {
        if (rank == 0) std::fprintf(stderr, "ROWS x COLS must be the process count %d\n", size);
        MPI_Finalize();
        return 2;
    }
    const auto [input, label] = bench::first_input_and_label(net);
    const frontend::Layer& x = net.layers[static_cast<std::size_t>(input)];
    backend::DataFiles files{
        {{x.name, file + ":/x"}, {net.layers[static_cast<std::size_t>(label)].name, file + ":/y"}}, false, ""};
    std::string error;
    const auto t_open = bench::Clock::now();
    auto data = backend::make_data_source(net, 0, files, error);
    const double open_seconds = bench::seconds_since(t_open);
    if (!data) {
        if (rank == 0) std::fprintf(stderr, "error: %s\n", error.c_str());
        MPI_Finalize();
        return 1;
    }
    const std::int64_t samples = data->samples(), C = x.shape.dims[0], H = x.shape.dims[1], W = x.shape.dims[2];
    const int r = rank / cols, c = rank % cols;
    auto part = [](std::int64_t n, int parts, int p) {  // with a margin of 1 inside the image
        return std::pair{std::max<std::int64_t>(0, n * p / parts - 1),
                         std::min<std::int64_t>(n, n * (p + 1) / parts + 1)};
    };
    const auto [y0, y1] = part(H, rows, r);
    const auto [x0, x1] = part(W, cols, c);
    backend::Tensor tile(Dims{1, C, {y1 - y0, x1 - x0}});
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = bench::Clock::now();
    for (std::int64_t s = 0; s < samples; ++s) data->inputs(x, s, backend::Index{y0, x0}, tile.interior());
    const double seconds = bench::seconds_since(t0);
    const double bytes = static_cast<double>(samples * C * (y1 - y0) * (x1 - x0)) * 4.0;
    const bench::ReadTimes times = bench::gather_read_times(bytes, seconds);
    if (rank == 0) {
        std::printf(
            "dsl %dx%d: %lld samples, tile %lldx%lldx%lld float32 (%.1f MB) per process; MB/s per process: %s; "
            "%.4f s per sample (slowest); open and check %.3f s\n",
            rows, cols, static_cast<long long>(samples), static_cast<long long>(C), static_cast<long long>(y1 - y0),
            static_cast<long long>(x1 - x0), bytes / samples / 1e6, times.rates.c_str(),
            times.slowest / static_cast<double>(samples), open_seconds);
    }
    data.reset();
    MPI_Finalize();
    return 0;
}
