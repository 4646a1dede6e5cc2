// The places where a test may kill a save, so that a save killed at each of its steps in turn can be tried.
#pragma once

namespace dsl {

// Counts the calls of this process; where the environment variable DSL_TEST_KILL_AT is K, the K-th call ends
// the process with SIGKILL, as a job's time limit or a lost node ends it: nothing after it runs, no
// destructor, no flush. Each step of a save that changes a file calls it once it is done. Only tests set the
// variable; without it a call costs a comparison.
void crash_point();

}  // namespace dsl
