// The Catch2 main; it starts nothing else (no MPI, no CUDA) so that test discovery stays cheap.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
