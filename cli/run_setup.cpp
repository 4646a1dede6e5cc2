// What `dsl run`, `dsl eval` and `dsl predict` share (run_setup.hpp): the mini-batch and the schedule a run
// executes, where it computes (CPU or GPU, and its communicator), its trainer, and the processes it runs on.
#include "run_setup.hpp"

#include "commands.hpp"
#include "launch.hpp"
#include "planning.hpp"

#include <dsl/backend/gpu.hpp>
#include <dsl/backend/kinds.hpp>
#include <dsl/base/error.hpp>
#include <dsl/scheduler/tile_limits.hpp>

#include <fmt/format.h>

#include <iostream>
#include <memory>

namespace dsl::cli {

std::int64_t run_batch(const Checked& c, const RunOptions& o) {
    return o.batch.value_or(c.schedule && c.schedule->batch ? *c.schedule->batch : default_batch);
}

namespace {

// What the schedule leaves open that a run needs, or empty. `procs` may come from --procs.
std::string open_fields(const frontend::Network& net, const scheduler::Schedule& s) {
    if (!s.procs) return "the processor count (set 'procs' in the schedule, or --procs)";
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
        if (net.layers[i].is_data()) continue;  // their readers' splits
        const auto& d = s.layers[i];
        const char* what = !d.split ? "the split" : !d.overlap ? "overlap" : !d.bn ? "bn" : nullptr;
        if (what) return fmt::format("{} of layer '{}'", what, net.layers[i].name);
    }
    return {};
}

// Where a run computes: --device, else with --auto-schedule the device of the platform it schedules for, else
// the CPU. On a GPU, the platform's workspace (when it gives one) bounds the convolutions' scratch.
struct Placement {
    bool gpu = false;
    std::optional<std::int64_t> workspace;
};

std::optional<Placement> placement(const RunOptions& o, const Checked& c, Output& io) {
    Placement p;
    p.gpu = o.device == "gpu";
    const bool named = o.auto_schedule || (p.gpu && c.schedule && c.schedule->platform);
    if (!named) return p;
    SourceManager sources;
    Diagnostics diags;
    const auto platform = resolve_platform(o.platform, c.schedule, sources, diags);
    if (!platform) {
        diags.render(io.err(), stderr_color());
        return std::nullopt;
    }
    const bool gpu_platform = platform->platform.device == scheduler::Device::gpu;
    if (o.device.empty()) p.gpu = o.auto_schedule && gpu_platform;
    if (p.gpu && gpu_platform && platform->platform.workspace > 0)
        p.workspace = static_cast<std::int64_t>(platform->platform.workspace);
    return p;
}

// A GPU run's kernels and communicator: the GPU of this process's local rank, NCCL when each process of the
// node has a GPU of its own (unless --gpu-comm mpi), else MPI through host memory.
struct GpuRun {
    backend::Kernels kernels;
    std::unique_ptr<backend::Comm> comm;
    bool nccl = false;
};

GpuRun gpu_run(const RunOptions& o, const Placement& p, std::unique_ptr<backend::Comm> host) {
    const int devices = backend::gpu_devices();
    backend::gpu_select(backend::gpu_for_local_rank(backend::launched_local_rank(), devices));
    backend::GpuOptions options;
    if (p.workspace) options.workspace = *p.workspace;
    options.tf32 = o.tf32;
    GpuRun run;
    run.kernels = backend::gpu_kernels(options);
    const bool own_gpus = backend::launched_local_size() <= devices;
    run.nccl = host->size() > 1 && (o.gpu_comm == "nccl" || (o.gpu_comm == "auto" && own_gpus));
    run.comm = backend::gpu_comm(std::move(host), run.nccl);
    return run;
}

// --auto-schedule: what the schedule leaves open (everything, without one) filled by the auto-scheduler for
// the platform the schedule names (or --platform, or 'local'). Every process computes the same schedule.
std::optional<scheduler::Schedule> auto_schedule(const Checked& c, const RunOptions& o, std::string& why, Output& io) {
    const auto& net = c.net.net;
    const auto& s = c.schedule;
    const auto run = run_procs(o.procs, s, why);
    if (!run && !why.empty()) return std::nullopt;
    const std::int64_t procs = run.value_or(backend::launched_size());  // under a launcher: those it started
    SourceManager sources;
    Diagnostics diags;
    auto platform = resolve_platform(o.platform, s, sources, diags);
    if (!platform) {
        diags.render(io.err(), stderr_color());
        why = "no platform for the auto-scheduler";
        return std::nullopt;
    }
    const std::int64_t batch = run_batch(c, o);
    if (!measure_local(*platform, o.net, net, {procs}, batch, why, multiplies_in_bfloat16(net, s))) return std::nullopt;
    scheduler::Model model(net, platform->platform, procs, batch, backend::kind_costs());
    const auto result = fill_schedule(net, s, model, procs, batch, why);
    if (!result) return std::nullopt;
    // Said once: by the process that trains, not by the one that starts the others under mpirun.
    if (procs > 1 && !backend::under_mpi()) return result->schedule;
    const scheduler::Prediction p = model.predict(result->schedule);
    // As `dsl schedule` writes it, to be saved and reused.
    scheduler::Schedule chosen = result->schedule;
    chosen.batch = batch;
    const std::string header = fmt::format(
        "Chosen by 'dsl run --auto-schedule' for {} on {} process{} of '{}', mini-batch {}.\n"
        "Predicted: {} ms per step, {} per process (of {}).",
        o.net, procs, procs == 1 ? "" : "es", platform->text, batch, milliseconds(p.step), human_bytes(p.memory),
        human_bytes(p.memory_limit));
    (o.json ? io.err() : io.out()) << fmt::format(
        "auto-schedule for {} process{} on '{}': {} ms per step predicted, {} per process; as a "
        ".sched file:\n{}\n",
        procs, procs == 1 ? "" : "es", platform->text, milliseconds(p.step), human_bytes(p.memory),
        scheduler::schedule_text(net, chosen, header, platform->text));
    return result->schedule;
}

}  // namespace

namespace {

// The schedule a run executes (run_schedule), before the stage `filled` is printed.
std::optional<scheduler::Schedule> chosen_schedule(const Checked& c, const RunOptions& o, std::string& why,
                                                   Output& io) {
    const auto& net = c.net.net;
    if (!o.platform.empty() && !o.auto_schedule) {
        why =
            "--platform is the platform --auto-schedule plans for, and has no effect without it (to run on a "
            "GPU: --device gpu)";
        return std::nullopt;
    }
    if (o.auto_schedule) return auto_schedule(c, o, why, io);
    if (!c.schedule) {
        if (o.procs && *o.procs != 1) {
            why =
                fmt::format("--procs {} needs a schedule that says how to split the network (a .sched file)", *o.procs);
            return std::nullopt;
        }
        scheduler::Schedule s;
        s.procs = 1;
        s.layers.assign(net.layers.size(), scheduler::Distribution{scheduler::Split{}, false, {}, {}});
        for (auto& d : s.layers) d.bn = scheduler::BatchNormStats::batch;
        return s;
    }
    scheduler::Schedule s = *c.schedule;
    s.procs = run_procs(o.procs, s, why);
    if (!why.empty()) return std::nullopt;
    if (!s.procs && backend::under_mpi()) s.procs = backend::launched_size();  // under a launcher: those it started
    if (std::string open = open_fields(net, s); !open.empty()) {
        why = fmt::format(
            "the schedule leaves {} open: fill it with --auto-schedule, or set it in the schedule "
            "('dsl check' shows what is open)",
            open);
        return std::nullopt;
    }
    const std::int64_t batch = run_batch(c, o);
    for (std::size_t i = 0; i < s.layers.size(); ++i) {
        const scheduler::Split& split = *s.layers[i].split;
        if (split.procs() != *s.procs) {
            why =
                fmt::format("the split {} uses {} processes, but the run has {}", split.str(), split.procs(), *s.procs);
            return std::nullopt;
        }
    }
    why = batch_problem(net, s, batch);
    if (!why.empty()) return std::nullopt;
    return s;
}

}  // namespace

MachineFit machine_fit(const Checked& c, const RunOptions& o, const scheduler::Schedule& s) {
    if (o.device == "gpu") return {};
    SourceManager sources;
    Diagnostics diags;
    const auto machine = machine_platform(sources, diags);
    if (!machine) return {};
    const scheduler::Model model(c.net.net, machine->platform, *s.procs, run_batch(c, o), backend::kind_costs());
    const scheduler::Prediction p = model.predict(s);
    return {model.memory_limit(), o.auto_schedule ? "" : does_not_fit(p), p.step};
}

std::optional<scheduler::Schedule> run_schedule(const Checked& c, const RunOptions& o, std::string& why, Output& io) {
    auto s = chosen_schedule(c, o, why, io);
    if (s)
        run_pipeline(o, io).filled(c.net.net, *s,
                                   o.auto_schedule ? "the schedule the run trains with, filled by the auto-scheduler"
                                                   : "the schedule the run trains with");
    return s;
}

scheduler::Pipeline run_pipeline(const RunOptions& o, const Output& io) {
    return scheduler::Pipeline(io.on ? stage_dump(o.dump_after) : scheduler::StageDump{});
}

std::unique_ptr<backend::Trainer> make_trainer(const scheduler::Pipeline& pipeline, const frontend::Network& net,
                                               const scheduler::Schedule& schedule, backend::Kernels kernels,
                                               const backend::TrainConfig& config, backend::Comm& comm) {
    return std::make_unique<backend::Trainer>(
        net, kernels, config, pipeline.plan(net, schedule, config.batch, comm.rank(), comm.size()), &comm);
}

bool agree(backend::Comm& comm, bool ok, const std::string& message) {
    const double none = -static_cast<double>(comm.size());
    const double first = -comm.max(ok ? none : -static_cast<double>(comm.rank()));
    if (first == -none) return true;
    if (!ok && static_cast<int>(first) == comm.rank()) std::cerr << message;
    return false;
}

std::optional<backend::Checkpoint> load_shared(backend::Comm& comm, const std::string& dir, std::string& error) {
    std::string note, folder;
    if (comm.rank() == 0) folder = backend::checkpoint_folder(dir, error, &note).value_or("");
    // The folder's name, from the first process to the others, as a sum to which they give zeros.
    std::vector<double> chars(static_cast<std::size_t>(comm.max(static_cast<double>(folder.size()))), 0.0);
    for (std::size_t i = 0; i < folder.size(); ++i) chars[i] = static_cast<unsigned char>(folder[i]);
    comm.allreduce(chars.data(), static_cast<std::int64_t>(chars.size()));
    if (chars.empty()) {
        if (comm.rank() != 0) error = fmt::format("'{}' holds no checkpoint the first process could read", dir);
        return std::nullopt;
    }
    folder.assign(chars.size(), '\0');
    for (std::size_t i = 0; i < chars.size(); ++i) folder[i] = static_cast<char>(chars[i]);
    if (!note.empty()) std::cerr << "note: " << note << "\n";
    return backend::load_checkpoint(folder, error);
}

namespace {

// The command line of the processes a run starts under mpirun: this one's, less a `--dump-after` of a stage
// before `plan`, which this process has printed.
std::vector<std::string> launched_arguments() {
    const std::vector<std::string>& all = program_arguments();
    std::vector<std::string> args;
    for (std::size_t i = 1; i < all.size(); ++i) {
        const std::string& a = all[i];
        const bool joined = a.rfind("--dump-after=", 0) == 0;
        if (a != "--dump-after" && !joined) {
            args.push_back(a);
            continue;
        }
        const std::string stage = joined ? a.substr(a.find('=') + 1) : i + 1 < all.size() ? all[++i] : "";
        if (stage == "plan") args.push_back("--dump-after=plan");
    }
    return args;
}

}  // namespace

int on_processes(const RunOptions& o, const Checked& checked, const scheduler::Schedule& schedule, Output& io,
                 const RunBody& body) {
    const bool mpi = backend::under_mpi();
    const std::int64_t procs = *schedule.procs;
    const auto where = placement(o, checked, io);
    if (!where) return user_error;
    if (where->gpu) {
        std::string none;
        if (backend::gpu_devices(&none) == 0) {
            io.err() << fmt::format("error: cannot train on a GPU ({}): {}\n",
                                    o.device.empty() ? "the platform's device" : "--device gpu", none);
            return user_error;
        }
        if (o.kernels != "cpu") {
            io.err() << "error: --kernels " << o.kernels << " runs on the CPU, not with --device gpu\n";
            return usage;
        }
        // This node's processes: those mpirun started here, or those dsl is about to start.
        const std::int64_t here = mpi ? backend::launched_local_size() : procs;
        if (o.gpu_comm == "nccl" && here > backend::gpu_devices()) {
            io.err() << fmt::format("error: --gpu-comm nccl needs a GPU per process, but {} processes share {} GPU{}\n",
                                    here, backend::gpu_devices(), backend::gpu_devices() == 1 ? "" : "s");
            return usage;
        }
    }
    if (procs > 1 && !mpi) return launch_mpi(procs, launched_arguments(), o.stops_at_step);

    std::unique_ptr<backend::Comm> comm = mpi ? backend::mpi_world() : backend::self_comm();
    const int rank = comm->rank(), size = comm->size();
    int code = ok;
    try {
        backend::Kernels kernels = o.kernels == "reference" ? backend::reference_kernels() : backend::cpu_kernels();
        if (where->gpu) {
            GpuRun run = gpu_run(o, *where, std::move(comm));
            kernels = run.kernels;
            comm = std::move(run.comm);
            const int gpus = backend::gpu_devices(), here = backend::launched_local_size();
            io.out() << fmt::format("on {} ({} GPU{} for {} process{} of this node{})\n", backend::gpu_name(), gpus,
                                    gpus == 1 ? "" : "s", here, here == 1 ? "" : "es",
                                    size == 1  ? ""
                                    : run.nccl ? "; messages over NCCL"
                                               : "; messages through host memory over MPI");
        }
        if (comm->size() != *schedule.procs) {
            io.err() << fmt::format(
                "error: the run has {} processes, but the schedule needs {}: start it with "
                "'mpirun -np {}', or as plain 'dsl {}' to let dsl start them\n",
                comm->size(), *schedule.procs, *schedule.procs, program_arguments().at(1));
            code = usage;
        } else {
            code = body(kernels, *comm);
        }
    } catch (const OutOfMemory& e) {
        if (!mpi || size == 1) throw;
        std::cerr << fmt::format("error: process {} of {}: {}\n", rank, size, e.what());
        backend::mpi_abort(user_error);
    } catch (const std::bad_alloc&) {
        if (!mpi || size == 1) throw;
        std::cerr << fmt::format(
            "error: process {} of {} ran out of memory; a schedule that splits the rows and "
            "columns more ways divides the activations further\n",
            rank, size);
        backend::mpi_abort(user_error);
    } catch (const UserError& e) {
        if (!mpi || size == 1) throw;
        // A user error that only this process met (the others may wait for it): end them all, having said it.
        std::cerr << fmt::format("error: process {} of {}: {}\n", rank, size, e.what());
        backend::mpi_abort(user_error);
    } catch (const std::exception& e) {
        if (!mpi || size == 1) throw;
        // The others wait for this process in a collective or an exchange: end them all, having said why.
        std::cerr << fmt::format(
            "dsl: internal error on process {} of {}: {}\nThis is a bug in dsl; please report "
            "it.\n",
            rank, size, e.what());
        backend::mpi_abort(internal);
    }
    comm.reset();
    if (mpi) backend::mpi_finalize();
    return code;
}

int run_trained(const RunOptions& o, const TrainedBody& body) {
    const bool mpi = backend::under_mpi();
    if (mpi) backend::share_node_cores();
    Output io;
    io.on = !mpi || backend::launched_rank() == 0;
    SourceManager sources;
    Diagnostics diags;
    auto checked = run_pipeline(o, io).check(o.net, o.sched, sources, diags, {o.batch, default_batch, o.procs}, true);
    diags.render(io.err(), stderr_color());
    if (!checked) return user_error;
    std::string why;
    const auto schedule = run_schedule(*checked, o, why, io);
    if (!schedule) {
        io.err() << "error: " << why << "\n";
        return o.auto_schedule ? user_error : usage;
    }
    // The tiles of the schedule the run executes (on one process without one, or as the auto-scheduler chose),
    // before anything is set up: one that the kernels cannot address, or that no process of this machine can
    // hold, is the network's error, at its layer; then a schedule whose layers together do not fit is refused.
    const MachineFit fit = machine_fit(*checked, o, *schedule);
    Diagnostics tiles;
    if (!scheduler::check_tile_limits(checked->net.net, *schedule, run_batch(*checked, o), tiles, fit.memory)) {
        tiles.render(io.err(), stderr_color());
        return user_error;
    }
    if (!fit.unfit.empty()) {
        io.err() << "error: " << fit.unfit << "\n";
        return usage;
    }
    return on_processes(o, *checked, *schedule, io, [&](backend::Kernels kernels, backend::Comm& comm) {
        return body(*checked, *schedule, kernels, comm, io);
    });
}

}  // namespace dsl::cli
