// Test cases that cannot run on this machine (no AVX-512 BF16, a GPU where none may be, too few GPUs, root's
// rights) say so rather than pass: Catch2 2.x has no SKIP, so a case records why and returns, and the run exits
// 77, which ctest reports as skipped (SKIP_RETURN_CODE), with a `skipped: ` line for each such case.
#pragma once

#include <string>

namespace dsl::test {

// The exit status of a run that passed but skipped a case: ctest's SKIP_RETURN_CODE.
constexpr int skipped_exit = 77;

// Why a case of a folder without write permission cannot run as root.
constexpr const char* root_writes_anywhere = "run as root, who writes anywhere: a folder's permissions stop nothing";

// Records that the running test case cannot run here, and why; the case returns at once, before any check:
//   if (!bf16) return skip("this CPU has no AVX-512 BF16 instructions");
void skip(const std::string& why);

// The exit status of a run whose Catch session returned `result`: a failure's, never 77 (77 failed checks would
// read as a skip); else, where a case skipped, 77 after a `skipped: CASE: WHY` line for each on stdout; else 0.
int exit_status(int result);

}  // namespace dsl::test
