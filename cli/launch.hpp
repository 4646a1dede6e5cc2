// Starting processes: this very program again under mpirun (a run on several processes), or as a child
// (a measurement in a process of its own), waiting for it and returning its exit code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dsl::cli {

// `procs` copies of this program with `args` under mpirun, one thread each where the cores allow (each
// bound to its core), more threads each when there are fewer processes than cores.
int launch_mpi(std::int64_t procs, const std::vector<std::string>& args);

// This program with `args`, with `env` added to its environment; stdout goes to `stdout_path` unless empty.
int launch_child(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                 const std::string& stdout_path = "");

// The threads each of `procs` processes gets on this machine: its cores divided among them, at least one.
int threads_per_process(std::int64_t procs);

}  // namespace dsl::cli
