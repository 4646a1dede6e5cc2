// The Catch2 main; it starts nothing else (no MPI, no CUDA) so that test discovery stays cheap. A case that
// cannot run here makes the run exit 77 (skip.hpp).
#define CATCH_CONFIG_RUNNER
#include "skip.hpp"

#include <catch2/catch.hpp>

int main(int argc, char** argv) { return dsl::test::exit_status(Catch::Session().run(argc, argv)); }
