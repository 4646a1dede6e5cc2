// Memory that every process of a communicator maps, where they are all on one node: a file in /dev/shm that
// process 0 makes with its whole size allocated up front (where the file system is short of space, this
// fails here rather than as a bus error at a later write), and whose name it removes once every process has
// mapped it, so that nothing is left behind even when a process is killed.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

namespace dsl::backend {

class NodeMemory {
public:
    // `bytes` (the same on every process), zeroed, mapped by every process of `comm` (collective). Null where
    // they are not all on one node, the sizes differ, or the memory could not be had.
    static std::unique_ptr<NodeMemory> map(MPI_Comm comm, std::size_t bytes, const char* purpose);
    ~NodeMemory();
    NodeMemory(const NodeMemory&) = delete;
    NodeMemory& operator=(const NodeMemory&) = delete;

    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }

private:
    NodeMemory(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    void* data_;
    std::size_t bytes_;
};

}  // namespace dsl::backend
