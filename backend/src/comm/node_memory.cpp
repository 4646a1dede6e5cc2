#include "node_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>

namespace dsl::backend {

std::unique_ptr<NodeMemory> NodeMemory::map(MPI_Comm comm, std::size_t bytes, const char* purpose) {
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const auto requested = static_cast<std::int64_t>(bytes);
    std::int64_t sizes[2] = {requested, -requested};
    MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT64_T, MPI_MAX, comm);
    MPI_Comm node;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    int ok = node_size == size && bytes > 0 && sizes[0] == -sizes[1] ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (!ok) return nullptr;

    char name[64] = {};
    if (rank == 0) {
        static std::atomic<int> made{0};
        std::snprintf(name, sizeof name, "/dsl-%s-%ld-%d", purpose, static_cast<long>(::getpid()), made++);
        const int fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
        ok = fd >= 0 && ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0;
        if (fd >= 0) ::close(fd);
        if (fd >= 0 && !ok) ::shm_unlink(name);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
    if (!ok) return nullptr;
    MPI_Bcast(name, sizeof name, MPI_CHAR, 0, comm);
    void* mapped = MAP_FAILED;
    if (const int fd = ::shm_open(name, O_RDWR, 0); fd >= 0) {
        mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        ::close(fd);
    }
    ok = mapped != MAP_FAILED ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
    if (rank == 0) ::shm_unlink(name);
    if (!ok) {
        if (mapped != MAP_FAILED) ::munmap(mapped, bytes);
        return nullptr;
    }
    return std::unique_ptr<NodeMemory>(new NodeMemory(mapped, bytes));
}

NodeMemory::~NodeMemory() { ::munmap(data_, bytes_); }

}  // namespace dsl::backend
