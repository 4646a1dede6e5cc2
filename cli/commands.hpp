// The verbs of the `dsl` command: each file adds one subcommand and the action it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace dsl::cli {

// Exit codes of every verb.
// `killed`: a process of a run on several was killed by a signal (the out-of-memory killer, a job's time limit).
// `stopped`: a run stopped early by SIGTERM or SIGUSR1 (preemption), at the end of a step, having saved a
// checkpoint of it where it had --save: a job script resumes it with --load.
enum Exit : int { ok = 0, user_error = 1, usage = 2, internal = 3, killed = 4, stopped = 5 };

// A verb's action, run after the command line parsed; returns the exit code.
using Action = std::function<int()>;

void setup_check(CLI::App& app, Action& action);
void setup_print(CLI::App& app, Action& action);
void setup_run(CLI::App& app, Action& action);
void setup_schedule(CLI::App& app, Action& action);
void setup_explain(CLI::App& app, Action& action);
void setup_compare(CLI::App& app, Action& action);
void setup_calibrate(CLI::App& app, Action& action);
void setup_eval(CLI::App& app, Action& action);
void setup_predict(CLI::App& app, Action& action);
void setup_export(CLI::App& app, Action& action);

// The command line as main received it (`dsl run` starts itself again under mpirun with it).
const std::vector<std::string>& program_arguments();

// Checks of whole-number options, whose messages say what was wrong in the user's terms (CLI11's own ranges
// print their bounds as doubles: "0.000000 to 1.79e308").
CLI::Validator positive_count(std::int64_t most = std::numeric_limits<std::int64_t>::max());     // 1 to most
CLI::Validator nonnegative_count(std::int64_t most = std::numeric_limits<std::int64_t>::max());  // 0 to most
// A folder's name (--save, --load): an empty one would silently mean none.
CLI::Validator folder_name();
// A file's name (--log, --trace, -o): the same for a file.
CLI::Validator file_name();

// Whether stderr is a terminal that takes colour and progress lines (never with NO_COLOR set).
bool stderr_color();

}  // namespace dsl::cli
