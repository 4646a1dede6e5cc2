// The verbs whose command lines are settled but whose work lands later: schedule, explain, compare and
// calibrate. Each checks its input files like `check` does, then says that it is not available yet.
#include "commands.hpp"
#include "report.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>
#include <vector>

namespace dsl::cli {

namespace {

struct PlannedOptions {
    std::string verb;
    std::string net;
    std::vector<std::string> scheds;
    // Options of the verbs, accepted now so that scripts written against them keep working.
    std::int64_t steps = 10, batch = 0, procs = 0;
    std::string output, platform;
    bool json = false, measure = false;
};

int run_planned(const PlannedOptions& o) {
    SourceManager sources;
    Diagnostics diags;
    bool good = true;
    if (o.scheds.empty()) {
        good = load_and_check(o.net, "", sources, diags, "").has_value();
    } else {
        for (const std::string& s : o.scheds) good = load_and_check(o.net, s, sources, diags, "").has_value() && good;
    }
    diags.render(std::cerr, stderr_color());
    if (!good) return user_error;
    std::cerr << fmt::format(
        "error: 'dsl {}' is not available in this version of dsl; the input files are valid "
        "('dsl check' reports on them)\n",
        o.verb);
    return usage;
}

CLI::App* add_verb(CLI::App& app, Action& action, const std::string& verb, const std::string& help,
                   const std::string& example, std::shared_ptr<PlannedOptions>& o) {
    o = std::make_shared<PlannedOptions>();
    o->verb = verb;
    CLI::App* sub = app.add_subcommand(verb, help);
    sub->footer("Example:\n  " + example);
    sub->callback([o, &action] { action = [o] { return run_planned(*o); }; });
    sub->add_option("NET", o->net, "The network (.net)")->required();
    return sub;
}

}  // namespace

void setup_planned(CLI::App& app, Action& action) {
    std::shared_ptr<PlannedOptions> o;

    CLI::App* schedule = add_verb(app, action, "schedule", "Write the auto-scheduler's schedule for a network",
                                  "dsl schedule stdlib/mesh1k.net --procs 64 --platform lassen -o mesh1k_64.sched", o);
    schedule->add_option("--procs", o->procs, "Processes")->required()->check(CLI::PositiveNumber);
    schedule->add_option("--platform", o->platform, "Platform name (stdlib) or file")->required();
    schedule->add_option("-o,--output", o->output, "The .sched file to write")->required();
    schedule->add_option("--batch", o->batch, "Mini-batch size N")->check(CLI::PositiveNumber);

    CLI::App* explain = add_verb(app, action, "explain", "Show the performance model's prediction for a schedule",
                                 "dsl explain stdlib/mesh1k.net my.sched --json", o);
    explain->add_option("SCHED", o->scheds, "The schedule (.sched)")->required()->expected(1);
    explain->add_flag("--json", o->json, "Print the prediction as JSON");
    explain->add_option("--batch", o->batch, "Mini-batch size N")->check(CLI::PositiveNumber);

    CLI::App* compare = add_verb(app, action, "compare", "Compare schedules side by side, predicted and measured",
                                 "dsl compare samples/mesh_tiny.net a.sched b.sched --measure", o);
    compare->add_option("SCHEDS", o->scheds, "Two or more schedules")->required()->expected(2, -1);
    compare->add_flag("--measure", o->measure, "Also run a few steps of each and show the model's error");
    compare->add_option("--steps", o->steps, "Steps to measure")->check(CLI::PositiveNumber);
    compare->add_flag("--json", o->json, "Print the comparison as JSON");

    CLI::App* calibrate =
        add_verb(app, action, "calibrate", "Measure kernel and communication times for the performance model",
                 "dsl calibrate stdlib/mesh1k.net -o stdlib/platforms/local.platform", o);
    calibrate->add_option("-o,--output", o->output, "The platform file to write")->required();
    calibrate->add_option("--procs", o->procs, "Processes to calibrate for")->check(CLI::PositiveNumber);
}

}  // namespace dsl::cli
