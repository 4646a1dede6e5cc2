// Where a calibration's measuring processes run: their kernels and communicator, on the CPU or on a GPU each,
// and this machine as the model sees it while they measure.
#include <dsl/backend/calibrate.hpp>
#include <dsl/backend/gpu.hpp>

#include <algorithm>
#include <thread>

namespace dsl::backend {

Kernels measuring_kernels(const CalibrationSettings& s) {
    if (!s.gpu) return cpu_kernels();
    gpu_select(gpu_for_local_rank(launched_local_rank(), gpu_devices()));
    GpuOptions options;
    if (s.gpu_workspace > 0) options.workspace = s.gpu_workspace;
    return gpu_kernels(options);
}

std::unique_ptr<Comm> measuring_comm(const CalibrationSettings& s) {
    auto comm = mpi_world();
    if (!s.gpu) return comm;
    return gpu_comm(std::move(comm), launched_local_size() <= gpu_devices());
}

scheduler::Platform calibrated_machine(scheduler::Platform p, bool gpu) {
    p.device = gpu ? scheduler::Device::gpu : scheduler::Device::cpu;
    p.procs_per_node = gpu ? std::max(1, gpu_devices()) : std::max(1u, std::thread::hardware_concurrency());
    // Why this CPU's kernels keep tiles planar, or empty where they take blocks of channels (or on a GPU).
    const Kernels cpu = gpu ? Kernels{} : cpu_kernels();
    p.nodes = 1, p.planar_why = gpu || cpu.blocked ? "" : cpu.planar_why;
    return p;
}

}  // namespace dsl::backend
