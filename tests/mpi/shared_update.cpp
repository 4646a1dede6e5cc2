// The optimizer's update where the processes share the parameters (Comm::common_space: one copy on the node,
// each process updating its share), run under mpirun by ctest: a network trained by the same plan twice, over
// the run's communicator and over one that offers no common space (each process keeping and updating all of
// its own), must end with the same parameters and optimizer moments, bit for bit, on every process; SGD and
// Adam. Exits non-zero, saying what differed, where they do not.
#include <dsl/backend/comm.hpp>
#include <dsl/backend/data.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/plan.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace dsl;
using backend::Comm;

// The run's communicator, but without memory common to its processes: what a run across nodes has.
class Apart final : public Comm {
public:
    explicit Apart(Comm& inner) : inner_(inner) {}
    int rank() const override { return inner_.rank(); }
    int size() const override { return inner_.size(); }
    std::unique_ptr<Comm> split(int color) override { return inner_.split(color); }
    void allreduce(double* data, std::int64_t count) override { inner_.allreduce(data, count); }
    double max(double value) override { return inner_.max(value); }
    bool all(bool value) override { return inner_.all(value); }
    std::shared_ptr<float> summing_space(std::int64_t count) override { return inner_.summing_space(count); }
    void start_allreduce(float* data, std::int64_t count) override { inner_.start_allreduce(data, count); }
    void finish_allreduces() override { inner_.finish_allreduces(); }
    std::vector<bool> test_allreduces() override { return inner_.test_allreduces(); }
    void progress() override { inner_.progress(); }
    void start_exchange(const std::vector<backend::Message>& sends, const std::vector<backend::Message>& receives,
                        int tag) override {
        inner_.start_exchange(sends, receives, tag);
    }
    void finish_exchange() override { inner_.finish_exchange(); }

private:
    Comm& inner_;
};

int failures = 0;

void fail(int rank, const std::string& what) {
    if (++failures <= 5) std::fprintf(stderr, "process %d: %s\n", rank, what.c_str());
}

// Every tensor of `trainer`'s state after `steps` steps of `net` under `plan`.
std::vector<std::vector<float>> trained(const frontend::Network& net, const scheduler::Plan& plan,
                                        const backend::TrainConfig& config, Comm& comm, int steps) {
    backend::Trainer trainer(net, backend::cpu_kernels(), config, plan, &comm);
    std::string error;
    auto data = backend::make_data_source(net, config.seed, "", "", error);
    for (int s = 0; s < steps; ++s) trainer.step(*data, s * config.batch);
    std::vector<std::vector<float>> out;
    for (const backend::StateTensor& t : trainer.state()) out.emplace_back(t.data, t.data + t.size);
    return out;
}

void check(Comm& world, const std::string& net_path, const std::string& sched_path, frontend::Optimizer optimizer) {
    SourceManager sources;
    Diagnostics diags;
    auto loaded = frontend::load_network(net_path, sources, diags);
    const SourceFile* file = sources.load(sched_path);
    std::optional<frontend::SchedFile> sched = file ? frontend::parse_sched(*file, diags) : std::nullopt;
    std::optional<scheduler::Schedule> schedule =
        loaded && sched ? scheduler::apply_schedule(loaded->net, *sched, diags) : std::nullopt;
    if (!schedule || diags.has_errors()) {
        diags.render(std::cerr, false);
        fail(world.rank(), "cannot load " + net_path + " with " + sched_path);
        return;
    }
    const frontend::Network& net = loaded->net;
    backend::TrainConfig config;
    config.batch = schedule->batch.value_or(2);
    config.optimizer = optimizer;
    config.lr = 0.01;
    config.momentum = 0.9;
    config.weight_decay = 1e-4;
    config.filter_blocks = false;  // which only shared weights allow: the same gradients on both runs
    const scheduler::Plan plan = scheduler::make_plan(net, *schedule, config.batch, world.rank(), world.size());
    Apart apart(world);
    const auto shared = trained(net, plan, config, world, 3);
    const auto own = trained(net, plan, config, apart, 3);
    if (shared.size() != own.size()) return fail(world.rank(), "not the same state tensors");
    for (std::size_t i = 0; i < shared.size(); ++i)
        if (shared[i].size() != own[i].size() ||
            std::memcmp(shared[i].data(), own[i].data(), shared[i].size() * sizeof(float)) != 0)
            fail(world.rank(), net_path + ": state tensor " + std::to_string(i) + " differs");
}

}  // namespace

int main(int argc, char** argv) {
    auto world = backend::mpi_world();
    // Pairs of a network and a schedule for the run's processes, from the command line.
    for (int i = 1; i + 1 < argc; i += 2) {
        check(*world, argv[i], argv[i + 1], frontend::Optimizer::sgd);
        check(*world, argv[i], argv[i + 1], frontend::Optimizer::adam);
    }
    const int rank = world->rank(), size = world->size();
    const bool passed = world->all(failures == 0);
    world.reset();
    backend::mpi_finalize();
    if (rank == 0 && passed) std::printf("shared update on %d processes: the same state as each process's own\n", size);
    return passed ? 0 : 1;
}
