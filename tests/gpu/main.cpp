// The GPU tests' main: they run where this build has the GPU backend and a GPU is present. Elsewhere it
// prints why and exits with 77, which ctest reports as a skipped test (SKIP_RETURN_CODE), with the reason in
// its output: never a pass. A case that needs more than there is here (GPUs for NCCL) skips alike (skip.hpp).
#define CATCH_CONFIG_RUNNER
#include "../skip.hpp"

#include <dsl/backend/gpu.hpp>

#include <catch2/catch.hpp>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
    std::string why;
    if (dsl::backend::gpu_devices(&why) == 0) {
        std::cout << "skipped: the GPU tests need a GPU: " << why << "\n";
        return dsl::test::skipped_exit;
    }
    dsl::backend::gpu_select(0);
    std::cout << "GPU tests on " << dsl::backend::gpu_name() << "\n";
    return dsl::test::exit_status(Catch::Session().run(argc, argv));
}
