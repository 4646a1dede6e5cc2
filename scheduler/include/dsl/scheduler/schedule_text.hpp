// A schedule as `.sched` text: the one writer, for the auto-scheduler's results (`dsl schedule`, `dsl run`'s
// chosen schedule), the stages `--dump-after schedule` and `filled`, and `dsl compare`'s files.
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <string>

namespace dsl::scheduler {

// `.sched` text for `schedule`, short enough to read and edit: a `default` with each field's most common
// value, `layer PREFIX.*` entries where an instance's layers mostly agree, single layers for the rest. It
// applies back to the same distribution of every layer (checked: where the precedence rule would read the
// short form otherwise, every layer is written by name).
// - A complete schedule (Schedule::complete) is written with every field a run needs; `bn`, `recompute` and
//   `precision` only where some layer's is not `batch`, `off`, `float32`. Its process count is written, 1 where
//   it has none.
// - Of a partial one, what is open stays open: left out where nothing would set it, `?` where an enclosing
//   entry would. Its process count and mini-batch only where it sets them.
// `header` lines become comments; `platform` (a name, or a quoted path) is written as the platform setting when
// not empty.
std::string schedule_text(const frontend::Network& net, const Schedule& schedule, const std::string& header,
                          const std::string& platform = "");

}  // namespace dsl::scheduler
