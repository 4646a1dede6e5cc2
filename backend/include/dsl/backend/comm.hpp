// Communication between the processes of a run: the few operations the distributed trainer needs, over MPI
// (comm/comm.cpp, with comm/node_sum.cpp within a node) or, on one process, over nothing (self_comm). Every operation
// but `exchange` is collective over the communicator's processes, which must call them in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace dsl::backend {

// Part of a point-to-point exchange: `count` floats at `data`, sent to or received from rank `peer`.
struct Message {
    int peer = 0;
    float* data = nullptr;
    std::int64_t count = 0;
};

class Comm {
public:
    virtual ~Comm() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;

    // The processes with the same `color`, ranked as here (collective).
    virtual std::unique_ptr<Comm> split(int color) = 0;
    // The same, for allreduces of the kernels' buffers (the weight gradients of a block's holders): over the
    // fastest path this communicator has for them (NCCL's on GPUs), where `split` may take the host's.
    virtual std::unique_ptr<Comm> split_buffers(int color) { return split(color); }

    // Sums over every process, in place.
    virtual void allreduce(double* data, std::int64_t count) = 0;
    virtual double max(double value) = 0;
    virtual bool all(bool value) = 0;  // true where every process says true

    // Memory for buffers that `start_allreduce` will sum: `count` floats, zeroed, where this communicator
    // sums them faster than elsewhere (over MPI, where every process is on one node: memory they all map,
    // which they sum in place); null where it has none. Collective, with the same count on every process.
    // It lasts until the last copy of the pointer goes, which must be before the communicator does.
    virtual std::shared_ptr<float> summing_space(std::int64_t) { return nullptr; }
    // Memory that every process of this communicator reads and writes: `count` floats, zeroed, the same ones
    // on every process (over MPI, where every process is on one node: memory they all map); null where it has
    // none. Collective, with the same count on every process. It lasts until the last copy of the pointer
    // goes. The trainer keeps the weights and the optimizer's moments there, one copy for the node, each
    // process updating its share of them.
    virtual std::shared_ptr<float> common_space(std::int64_t) { return nullptr; }
    // Starts a sum of `data` over every process, in place; `finish_allreduces` waits for every one started.
    // The buffers must stay untouched until then.
    virtual void start_allreduce(float* data, std::int64_t count) = 0;
    // The same for a buffer in this communicator's summing space, but leaving the adding to whoever reads the
    // sum: once `finish_allreduces` has returned, `read_sum` adds the processes' buffers (start_allreduce's
    // sums, to the bit), and each process must leave its buffer untouched until the processes have met
    // (`all`) after the readers are done. Where they read a share each, nothing is written and each buffer is
    // read once. False, starting nothing, where `data` is not in a summing space.
    virtual bool start_sum_for_reader(float*, std::int64_t) { return false; }
    // The sum over the processes of `count` floats at `data` (in a summing space, left to its reader), into
    // `out`; false where `data` is not in a summing space.
    virtual bool read_sum(const float*, std::int64_t, float*) const { return false; }
    virtual void finish_allreduces() = 0;
    // Which of the allreduces started since the last `finish_allreduces` have completed (in the order they
    // were started), testing them without waiting; empty where the communicator cannot tell. Profiling asks,
    // to place each allreduce's end on the timeline.
    virtual std::vector<bool> test_allreduces() { return {}; }
    // Lets started operations advance (MPI moves non-blocking collectives and large messages on only inside
    // its calls): called between kernels, so that they run while this process computes.
    virtual void progress() = 0;

    // Posts every receive and send (`tag` tells concurrent exchanges apart); `finish_exchange` waits for them.
    virtual void start_exchange(const std::vector<Message>& sends, const std::vector<Message>& receives, int tag) = 0;
    virtual void finish_exchange() = 0;

    // Every process's `values` (each may give a different count), in rank order, on process 0; empty
    // elsewhere (collective). The traces of a run go to the process that writes them this way.
    virtual std::vector<std::vector<double>> gather(const std::vector<double>& values);
    // The same for floats, to the bit: a checkpoint's tensors split in blocks go to the process that writes
    // them this way, 4 bytes an element, to that process alone.
    virtual std::vector<std::vector<float>> gather_floats(const std::vector<float>& values);

    // The MPI communicator of these processes, for the libraries that take one (HDF5 opens a file over MPI-IO
    // with it), as its Fortran handle, which MPI_Comm_f2c turns back: this header leaves MPI's out. None where
    // the processes do not run over MPI (one process started without mpirun).
    virtual std::optional<int> mpi_handle() const { return std::nullopt; }
};

// The communicator of a run on one process: every operation is the identity.
std::unique_ptr<Comm> self_comm();

// Open MPI's, when this process was started by mpirun (or srun). `under_mpi` says so from the environment
// without initializing MPI; `mpi_world` initializes it (once) and returns MPI_COMM_WORLD's communicator.
bool under_mpi();
int launched_rank();        // this process's rank in the run, from the environment; 0 when not under MPI
int launched_size();        // the run's processes (from the environment, else from MPI); 1 when not under MPI
int launched_local_rank();  // its rank among the run's processes on this node; 0 when not under MPI
int launched_local_size();  // the run's processes on this node; 1 when not under MPI
// The threads this process's kernels run on (OpenMP's, which oneDNN and Halide use). Under a launcher that
// leaves OMP_NUM_THREADS unset, `share_node_cores` first sets them to the node's cores divided among the
// run's processes on it, and no more than the cores this process is bound to (at least 1).
int compute_threads();
void share_node_cores();
std::unique_ptr<Comm> mpi_world();
void mpi_finalize();                         // at a normal end
[[noreturn]] void mpi_abort(int exit_code);  // ends every process of the run

}  // namespace dsl::backend
