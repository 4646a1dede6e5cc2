// Reading ahead of the step (backend::read_ahead, `dsl run --prefetch`) over a source that checks how it is
// called: every block the same as a read made when asked for, one call into the source at a time (the reader
// thread's and the step's own), nothing beyond the run's last step, and a failed read thrown, with its
// message, when the step asks for that block and not before.
#include <dsl/backend/data.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/base/error.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

using namespace dsl;
using namespace dsl::backend;

namespace {

// Values that are a function of (sample, channel, place); a call that begins while another is inside, or that
// reads beyond sample `end`, is counted; sample `fails` throws.
class Watched : public DataSource {
public:
    std::atomic<int> inside{0}, overlaps{0}, calls{0}, beyond{0};
    std::int64_t fails = -1, end = 1 << 30;

    static float value(std::int64_t s, std::int64_t c, std::int64_t y, std::int64_t x) {
        return static_cast<float>(s * 1000 + c * 100 + y * 10 + x) * 0.5f;
    }
    void inputs(const frontend::Layer&, std::int64_t first, const Index& at, View tile) override {
        enter();
        for (std::int64_t n = 0; n < tile.dims.n; ++n) {
            if (first + n >= end) ++beyond;
            if (first + n == fails) {
                leave();
                throw UserError("sample " + std::to_string(fails) + " cannot be read");
            }
            for (std::int64_t c = 0; c < tile.dims.c; ++c)
                for (std::int64_t y = 0; y < tile.dims.space[0]; ++y)
                    for (std::int64_t x = 0; x < tile.dims.space[1]; ++x)
                        tile.at(n, c, Index{y, x}) = value(first + n, c, at[0] + y, at[1] + x);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // long enough for another to overlap
        leave();
    }
    void labels(const frontend::Layer&, std::int64_t first, const Index&, BasicView<std::int32_t> tile) override {
        enter();
        for (std::int64_t n = 0; n < tile.dims.n; ++n) tile.at(n, 0, Index{}) = static_cast<std::int32_t>(first + n);
        leave();
    }
    std::int64_t samples() const override { return 1000; }

private:
    void enter() {
        if (inside.fetch_add(1) != 0) ++overlaps;
        ++calls;
    }
    void leave() { --inside; }
};

frontend::Layer layer(const char* name, frontend::OpKind op) {
    frontend::Layer l;
    l.name = name;
    l.op = op;
    return l;
}

// Step k's blocks, as a trainer asks for them (ready, then the read): two row blocks of the input, the labels,
// and a block that only some steps read (outside the first step's pattern); each compared with `Watched`'s
// values.
void step(DataSource& data, std::int64_t k, std::int64_t batch, const frontend::Layer& x, const frontend::Layer& y) {
    const std::int64_t first = k * batch;
    for (const Index at : {Index{0, 0}, Index{3, 0}, Index{6, 1}}) {
        if (at[0] == 6 && k % 2 == 1) continue;  // read only on even steps: not the first's, never read ahead
        const Dims d{batch, 2, {3, 4}};
        std::vector<float> got(static_cast<std::size_t>(d.elements()), -1.0f);
        data.ready(x, first, at, d);
        data.inputs(x, first, at, dense_view(got.data(), d));
        bool same = true;
        for (std::int64_t n = 0; n < d.n; ++n)
            for (std::int64_t c = 0; c < d.c; ++c)
                for (std::int64_t r = 0; r < 3; ++r)
                    for (std::int64_t q = 0; q < 4; ++q)
                        same = same && got[static_cast<std::size_t>(((n * d.c + c) * 3 + r) * 4 + q)] ==
                                           Watched::value(first + n, c, at[0] + r, at[1] + q);
        INFO("step " << k << ", rows from " << at[0]);
        CHECK(same);
    }
    const Dims ld{batch, 1, {}};
    std::vector<std::int32_t> labels(static_cast<std::size_t>(batch), -1);
    data.ready(y, first, Index{}, ld);
    data.labels(y, first, Index{}, dense_view(labels.data(), ld));
    for (std::int64_t n = 0; n < batch; ++n) CHECK(labels[static_cast<std::size_t>(n)] == first + n);
}

}  // namespace

TEST_CASE("read ahead: the blocks of a read made when asked for, one call into the source at a time",
          "[data][prefetch]") {
    const auto x = layer("x", frontend::OpKind::input), y = layer("y", frontend::OpKind::label);
    for (const int depth : {1, 2, 5}) {
        INFO("depth " << depth);
        auto source = std::make_unique<Watched>();
        Watched& watched = *source;
        watched.end = 3 * 2 + 8 * 2;  // the run's steps 3 to 10 of 2 samples
        ReadAhead options;
        options.depth = depth;
        options.batch = 2;
        options.first_step = 3;
        options.end_step = 11;
        const auto data = read_ahead(std::move(source), options);
        CHECK(data->reads_ahead());
        CHECK(data->samples() == 1000);
        for (std::int64_t k = 3; k < 11; ++k) step(*data, k, 2, x, y);
        CHECK(watched.overlaps == 0);
        CHECK(watched.beyond == 0);
        // Every step's three blocks once, read ahead or not, and the even steps' extra block when asked for.
        CHECK(watched.calls == 8 * 3 + 4);
        // A step gone by, asked again (an evaluation of the same samples), is read when asked for.
        step(*data, 7, 2, x, y);
        CHECK(watched.calls == 8 * 3 + 4 + 3);
    }
}

TEST_CASE("read ahead: a read that fails ahead fails the step that asks for it, with its error", "[data][prefetch]") {
    const auto x = layer("x", frontend::OpKind::input), y = layer("y", frontend::OpKind::label);
    for (const int depth : {1, 3}) {
        INFO("depth " << depth);
        auto source = std::make_unique<Watched>();
        source->fails = 9;  // step 4 of 2 samples
        ReadAhead options;
        options.depth = depth;
        options.batch = 2;
        options.end_step = 10;
        const auto data = read_ahead(std::move(source), options);
        for (std::int64_t k = 0; k < 4; ++k) REQUIRE_NOTHROW(step(*data, k, 2, x, y));
        CHECK_THROWS_AS(step(*data, 4, 2, x, y), UserError);
        CHECK_THROWS_WITH(step(*data, 4, 2, x, y), "sample 9 cannot be read");
    }
}
