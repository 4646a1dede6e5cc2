// What the verbs that use the performance model share: the platform a command runs against, filling what a
// schedule leaves open, and the per-layer prediction as a table or JSON.
#pragma once

#include "report.hpp"

#include <dsl/scheduler/autoschedule.hpp>
#include <dsl/scheduler/model.hpp>
#include <dsl/scheduler/platform.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

namespace dsl::cli {

struct PlatformChoice {
    scheduler::Platform platform;
    std::string text;   // how a .sched names it: a stdlib name, or a quoted path
    std::string cache;  // `local` as this machine: the file of its measured times (it may not exist yet)
};

// The platform: `flag` (a stdlib name or a path), else the schedule's `platform`, else "local". `local` is
// the file $DSL_LOCAL_PLATFORM names, else this machine (machine_platform).
std::optional<PlatformChoice> resolve_platform(const std::string& flag, const std::optional<scheduler::Schedule>& s,
                                               SourceManager& sources, Diagnostics& diags);

// Why this machine's CPU kernels keep tiles planar, or empty where they take them in blocks of 16 channels.
std::string this_cpu_planar_why();

// This machine as `local`: what its cache file has measured, or before that (or when the file is damaged) the
// settings of stdlib/platforms/local.platform; with this machine's cores and memory either way.
std::optional<PlatformChoice> machine_platform(SourceManager& sources, Diagnostics& diags);

// For this machine's `local` (nothing for another platform): measures what the model needs for `net` (read
// from `net_path`) on each of `procs` processes with mini-batches of `batch` that the cache does not have yet:
// the kernels of every candidate schedule, the communication, training steps under every split. Progress on
// stderr; the times are added to the cache and to `p`. False with `why` when measuring failed.
// `bfloat16`: the convolutions' kernels with bfloat16 products too (multiplies_in_bfloat16).
bool measure_local(PlatformChoice& p, const std::string& net_path, const frontend::Network& net,
                   std::vector<std::int64_t> procs, std::int64_t batch, std::string& why, bool bfloat16 = false);
// Whether the schedule may have a convolution multiply in bfloat16: its precision bfloat16, or open ('?').
bool multiplies_in_bfloat16(const frontend::Network& net, const std::optional<scheduler::Schedule>& s);

// Where a platform's figures come from: "measured on this machine (...) ...", "the published figures of
// the stdlib platform ...", or "the file ...".
std::string platform_source(const PlatformChoice& p);

// A schedule for `procs` processes with every field the checked schedule leaves open (all of them without
// one) filled by the auto-scheduler under `model`, with the platform's memory per process as the limit.
// nullopt with `why` when it cannot.
std::optional<scheduler::AutoResult> fill_schedule(const frontend::Network& net,
                                                   const std::optional<scheduler::Schedule>& partial,
                                                   const scheduler::Model& model, std::int64_t procs,
                                                   std::int64_t batch, std::string& why,
                                                   scheduler::SearchMethod method = scheduler::SearchMethod::frontier);

// A schedule (its `procs` set) ready to predict on `platform`: open fields filled by the auto-scheduler
// (`filled` says so), checked against the mini-batch, and the model's prediction of its step. nullopt with
// `why` when it cannot be.
struct Planned {
    scheduler::Schedule schedule;
    scheduler::Prediction prediction;
    bool filled = false;
};
std::optional<Planned> plan(const frontend::Network& net, const scheduler::Platform& platform, scheduler::Schedule s,
                            std::int64_t batch, std::string& why);

// `plan` on this machine's `local` once what it lacks for the schedule's process count is measured
// (measure_local), or on another platform at once.
std::optional<Planned> measure_and_plan(PlatformChoice& p, const std::string& net_path, const frontend::Network& net,
                                        const scheduler::Schedule& s, std::int64_t batch, std::string& why);

// A network, its schedule (when `sched_path` is not empty) and the platform (`platform_flag`, else the
// schedule's, else "local"), checked through `pipeline`; the diagnostics rendered. nullopt when any had errors.
struct ModelInputs {
    Checked checked;
    PlatformChoice platform;
};
std::optional<ModelInputs> load_model_inputs(const scheduler::Pipeline& pipeline, const std::string& net_path,
                                             const std::string& sched_path, const std::string& platform_flag,
                                             SourceManager& sources, Diagnostics& diags, const BatchChoice& batch = {});

// The process count: --procs, else the schedule's; nullopt with `why` when the two differ, and with `why`
// empty when neither gives one.
std::optional<std::int64_t> run_procs(const std::optional<std::int64_t>& flag,
                                      const std::optional<scheduler::Schedule>& s, std::string& why);

// Why `s` cannot run a mini-batch of `batch` (a layer splits the samples more ways than there are, or the
// mini-batch overflows sizes), or empty. Schedules read from a file are checked at their lines before
// (scheduler::Pipeline::check); this is for those the auto-scheduler filled.
std::string batch_problem(const frontend::Network& net, const scheduler::Schedule& s, std::int64_t batch);

// Writes `bytes` to `path` whole or not at all (dsl::write_whole: a temporary file beside it, synced, then
// renamed over an old file when `replace`, else linked into place, which fails (`'PATH' exists`) if a file
// appeared there meanwhile); a failed write leaves the old file whole. False with `why` when it cannot.
bool write_file(const std::string& path, const std::string& bytes, bool replace, std::string& why);
// write_file, replacing what is there.
bool replace_file(const std::string& path, const std::string& text, std::string& why);

// Why replace_file could not write `path` (a folder, a folder that does not exist or that this process may not
// write in), or empty: checked before the work whose result it is to hold.
std::string unwritable(const std::string& path);

// Whether any field a run needs is open (or the schedule is absent).
bool has_open_fields(const frontend::Network& net, const std::optional<scheduler::Schedule>& s);

// `dsl explain`: a row per layer (distribution, tile, halo bytes, each predicted term, memory), then the
// totals and the predicted step.
// Empty when the prediction's memory fits what a process has, else the sentence that says it does not, by
// how much, and what would make it fit (explain's note, and why `dsl run` refuses).
std::string does_not_fit(const scheduler::Prediction& p);

std::string explain_table(const frontend::Network& net, const scheduler::Prediction& p, std::int64_t batch);
nlohmann::json explain_json(const frontend::Network& net, const scheduler::Prediction& p, std::int64_t batch);

std::string milliseconds(double seconds);  // "12.345"

}  // namespace dsl::cli
