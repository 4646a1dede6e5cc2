// The communicators: over MPI, and the trivial one of a single process.
#include <dsl/backend/comm.hpp>

#include "node_memory.hpp"
#include "node_sum.hpp"

#include <dsl/backend/watchdog.hpp>
#include <dsl/base/error.hpp>

#include <mpi.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace dsl::backend {

namespace {

class SelfComm final : public Comm {
public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::unique_ptr<Comm> split(int) override { return std::make_unique<SelfComm>(); }
    void allreduce(double*, std::int64_t) override {}
    double max(double value) override { return value; }
    bool all(bool value) override { return value; }
    void start_allreduce(float*, std::int64_t) override {}
    void finish_allreduces() override {}
    void progress() override {}
    void start_exchange(const std::vector<Message>& sends, const std::vector<Message>& receives, int) override {
        DSL_INTERNAL_CHECK(sends.empty() && receives.empty(), "a single process has no one to exchange with");
    }
    void finish_exchange() override {}
};

int checked_count(std::int64_t count) {
    DSL_INTERNAL_CHECK(count >= 0 && count <= std::numeric_limits<int>::max(), "MPI message too large");
    return static_cast<int>(count);
}

void check_mpi(int result, const char* what) {
    DSL_INTERNAL_CHECK(result == MPI_SUCCESS, std::string("MPI call failed: ") + what);
}

class MpiComm final : public Comm {
public:
    explicit MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~MpiComm() override {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (owned_ && !finalized) MPI_Comm_free(&comm_);
    }

    int rank() const override { return rank_; }
    int size() const override { return size_; }

    std::unique_ptr<Comm> split(int color) override {
        MPI_Comm sub;
        check_mpi(MPI_Comm_split(comm_, color, rank_, &sub), "MPI_Comm_split");
        return std::make_unique<MpiComm>(sub, true);
    }

    void allreduce(double* data, std::int64_t count) override {
        if (size_ == 1 || count == 0) return;
        check_mpi(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_DOUBLE, MPI_SUM, comm_), "MPI_Allreduce");
    }

    double max(double value) override {
        double out = value;
        check_mpi(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_), "MPI_Allreduce");
        return out;
    }

    bool all(bool value) override {
        int v = value ? 1 : 0, out = 0;
        check_mpi(MPI_Allreduce(&v, &out, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
        return out == 1;
    }

    std::shared_ptr<float> summing_space(std::int64_t count) override {
        if (size_ == 1) return nullptr;
        auto sums = NodeSum::create(comm_, count);
        if (!sums) return nullptr;
        NodeSum* made = node_sums_.emplace_back(std::move(sums)).get();
        return {made->space(),
                [this, made](float*) { std::erase_if(node_sums_, [&](const auto& n) { return n.get() == made; }); }};
    }

    std::shared_ptr<float> common_space(std::int64_t count) override {
        if (size_ == 1) return nullptr;
        std::shared_ptr<NodeMemory> memory = NodeMemory::map(
            comm_, static_cast<std::size_t>(std::max<std::int64_t>(count, 0)) * sizeof(float), "common");
        if (!memory) return nullptr;
        return {static_cast<float*>(memory->data()), [memory](float*) {}};
    }

    void start_allreduce(float* data, std::int64_t count) override {
        if (size_ == 1 || count == 0) return;
        for (const auto& sums : node_sums_)
            if (sums->holds(data, count)) {
                sums->start(data, count);
                started_.push_back(sums.get());
                return;
            }
        MPI_Request r;
        check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_SUM, comm_, &r),
                  "MPI_Iallreduce");
        allreduces_.push_back(r);
        completed_.push_back(false);
        started_.push_back(nullptr);
    }

    bool start_sum_for_reader(float* data, std::int64_t count) override {
        if (size_ == 1 || count == 0) return false;
        for (const auto& sums : node_sums_)
            if (sums->holds(data, count)) {
                sums->start(data, count, true);
                started_.push_back(sums.get());
                return true;
            }
        return false;
    }

    bool read_sum(const float* data, std::int64_t count, float* out) const override {
        for (const auto& sums : node_sums_)
            if (sums->holds(data, count)) {
                sums->add(data - sums->space(), count, out);
                return true;
            }
        return false;
    }

    std::vector<bool> test_allreduces() override {
        if (!allreduces_.empty()) {
            std::vector<int> indices(allreduces_.size());
            int count = 0;
            check_mpi(MPI_Testsome(static_cast<int>(allreduces_.size()), allreduces_.data(), &count, indices.data(),
                                   MPI_STATUSES_IGNORE),
                      "MPI_Testsome");
            for (int i = 0; count != MPI_UNDEFINED && i < count; ++i)
                completed_[static_cast<std::size_t>(indices[i])] = true;
        }
        // In the order started, each path's answers taken in its own order.
        std::map<const NodeSum*, std::vector<bool>> node;
        for (const auto& sums : node_sums_) node[sums.get()] = sums->test();
        std::map<const NodeSum*, std::size_t> next;  // null: MPI's
        std::vector<bool> done;
        for (const NodeSum* by : started_) {
            const std::size_t i = next[by]++;
            done.push_back(by ? node[by][i] : completed_[i]);
        }
        return done;
    }

    void finish_allreduces() override {
        for (const auto& sums : node_sums_) sums->finish();
        started_.clear();
        if (allreduces_.empty()) return;
        check_mpi(MPI_Waitall(static_cast<int>(allreduces_.size()), allreduces_.data(), MPI_STATUSES_IGNORE),
                  "MPI_Waitall");
        allreduces_.clear();
        completed_.clear();
    }

    void progress() override {
        for (const auto& sums : node_sums_) sums->progress();
        int done = 0;
        if (!allreduces_.empty())
            MPI_Testall(static_cast<int>(allreduces_.size()), allreduces_.data(), &done, MPI_STATUSES_IGNORE);
        if (!exchanges_.empty())
            MPI_Testall(static_cast<int>(exchanges_.size()), exchanges_.data(), &done, MPI_STATUSES_IGNORE);
    }

    void start_exchange(const std::vector<Message>& sends, const std::vector<Message>& receives, int tag) override {
        for (const Message& m : receives) {
            MPI_Request r;
            check_mpi(MPI_Irecv(m.data, checked_count(m.count), MPI_FLOAT, m.peer, tag, comm_, &r), "MPI_Irecv");
            exchanges_.push_back(r);
            exchange_peers_.push_back(m.peer);
        }
        for (const Message& m : sends) {
            MPI_Request r;
            check_mpi(MPI_Isend(m.data, checked_count(m.count), MPI_FLOAT, m.peer, tag, comm_, &r), "MPI_Isend");
            exchanges_.push_back(r);
            exchange_peers_.push_back(m.peer);
        }
    }

    // Until every message has gone and come, the watchdog knows the processes of those that have not: a
    // neighbour that stopped is named by the processes waiting for it, on any node.
    void finish_exchange() override {
        // Kept between exchanges, so that a halo exchange allocates nothing once the first has run.
        std::vector<int>& missing = missing_peers_;
        std::vector<int>& done = completed_indices_;
        done.resize(exchanges_.size());
        for (;;) {
            missing.clear();
            for (std::size_t i = 0; i < exchanges_.size(); ++i)
                if (exchanges_[i] != MPI_REQUEST_NULL &&
                    std::find(missing.begin(), missing.end(), exchange_peers_[i]) == missing.end())
                    missing.push_back(exchange_peers_[i]);
            if (missing.empty()) break;
            watchdog_peers(missing);
            int count = 0;
            check_mpi(MPI_Waitsome(static_cast<int>(exchanges_.size()), exchanges_.data(), &count, done.data(),
                                   MPI_STATUSES_IGNORE),
                      "MPI_Waitsome");
            if (count == MPI_UNDEFINED) break;
        }
        if (!exchanges_.empty()) watchdog_peers({});
        exchanges_.clear();
        exchange_peers_.clear();
    }

    std::vector<std::vector<double>> gather(const std::vector<double>& values) override {
        return gathered(values, MPI_DOUBLE);
    }

    std::vector<std::vector<float>> gather_floats(const std::vector<float>& values) override {
        return gathered(values, MPI_FLOAT);
    }

    std::optional<int> mpi_handle() const override { return static_cast<int>(MPI_Comm_c2f(comm_)); }

private:
    // Each process's `values` (of MPI type `type`), on the first process, in rank order; none on the others.
    template <typename T>
    std::vector<std::vector<T>> gathered(const std::vector<T>& values, MPI_Datatype type) {
        const int count = checked_count(static_cast<std::int64_t>(values.size()));
        std::vector<int> counts(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
        check_mpi(MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_), "MPI_Gather");
        std::vector<int> offsets(counts.size());
        std::int64_t total = 0;
        for (std::size_t i = 0; i < counts.size(); ++i) {
            offsets[i] = checked_count(total);
            total += counts[i];
        }
        std::vector<T> all(static_cast<std::size_t>(total));
        check_mpi(MPI_Gatherv(values.data(), count, type, all.data(), counts.data(), offsets.data(), type, 0, comm_),
                  "MPI_Gatherv");
        std::vector<std::vector<T>> out;
        for (std::size_t i = 0; i < counts.size(); ++i)
            out.emplace_back(all.begin() + offsets[i], all.begin() + offsets[i] + counts[i]);
        return out;
    }

    MPI_Comm comm_;
    bool owned_;
    int rank_ = 0, size_ = 1;
    std::vector<MPI_Request> allreduces_, exchanges_;
    std::vector<int> exchange_peers_;                     // the process of each of exchanges_
    std::vector<int> missing_peers_, completed_indices_;  // finish_exchange's, kept for their room
    std::vector<bool> completed_;                         // of allreduces_, as far as test_allreduces saw
    std::vector<std::unique_ptr<NodeSum>> node_sums_;     // the summing spaces handed out
    std::vector<NodeSum*> started_;                       // by each allreduce started: null over MPI
};

}  // namespace

std::unique_ptr<Comm> self_comm() { return std::make_unique<SelfComm>(); }

// Through sums, for communicators without a gather of their own: each process's values in its place of a
// buffer of every process's, zeros elsewhere, summed.
std::vector<std::vector<double>> Comm::gather(const std::vector<double>& values) {
    std::vector<double> counts(static_cast<std::size_t>(size()), 0.0);
    counts[static_cast<std::size_t>(rank())] = static_cast<double>(values.size());
    allreduce(counts.data(), static_cast<std::int64_t>(counts.size()));
    std::vector<std::size_t> offsets(counts.size() + 1, 0);
    for (std::size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + static_cast<std::size_t>(counts[i]);
    std::vector<double> all(offsets.back(), 0.0);
    std::copy(values.begin(), values.end(),
              all.begin() + static_cast<std::ptrdiff_t>(offsets[static_cast<std::size_t>(rank())]));
    allreduce(all.data(), static_cast<std::int64_t>(all.size()));
    std::vector<std::vector<double>> out;
    if (rank() != 0) return out;
    for (std::size_t i = 0; i < counts.size(); ++i)
        out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(offsets[i]),
                         all.begin() + static_cast<std::ptrdiff_t>(offsets[i + 1]));
    return out;
}

// Through the gather of doubles, which hold every float exactly.
std::vector<std::vector<float>> Comm::gather_floats(const std::vector<float>& values) {
    std::vector<std::vector<float>> out;
    for (const std::vector<double>& v : gather(std::vector<double>(values.begin(), values.end())))
        out.emplace_back(v.begin(), v.end());
    return out;
}

bool under_mpi() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

int launched_rank() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
        if (const char* r = std::getenv(v)) return std::atoi(r);
    return 0;
}

namespace {
int env_int(std::initializer_list<const char*> names, int none) {
    for (const char* v : names)
        if (const char* r = std::getenv(v)) return std::atoi(r);
    return none;
}
}  // namespace

int launched_size() {
    if (!under_mpi()) return 1;
    const int size = env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}, 0);
    return size > 0 ? size : mpi_world()->size();
}

int launched_local_rank() { return env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, 0); }

int launched_local_size() {
    return env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"}, 1);
}

int compute_threads() { return omp_get_max_threads(); }

void share_node_cores() {
    if (std::getenv("OMP_NUM_THREADS")) return;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    int threads = std::max(1, cores / std::max(1, launched_local_size()));
    cpu_set_t bound;
    CPU_ZERO(&bound);
    if (::sched_getaffinity(0, sizeof bound, &bound) == 0) threads = std::min(threads, std::max(1, CPU_COUNT(&bound)));
    omp_set_num_threads(threads);
}

std::unique_ptr<Comm> mpi_world() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
        // Open MPI's non-blocking allreduce (libnbc), which sums the weight gradients, picks an algorithm for
        // latency by default; the ring is the one for large sums: 7.86M floats (mesh_stack_512's gradients)
        // over 2 processes on this machine took 19.8 ms by default and 8.5 by the ring, over 4 34.0 and 23.7.
        // Read from the environment when MPI starts; a user's own setting stands.
        ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    }
    return std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
}

void mpi_finalize() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (initialized && !finalized) MPI_Finalize();
}

void mpi_abort(int exit_code) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::exit(exit_code);
}

}  // namespace dsl::backend
