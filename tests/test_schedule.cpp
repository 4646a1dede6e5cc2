// Binding schedules to networks: the precedence rule, open fields and each legality check.
#include "deconv_reads.hpp"

#include <catch2/catch.hpp>

#include <dsl/frontend/parse.hpp>
#include <dsl/frontend/passes.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <fmt/format.h>

using namespace dsl;
using namespace dsl::frontend;
using namespace dsl::scheduler;

namespace {

const char* net_text = R"(
input x [N, 3, 32, 32]
label y [N, 8, 8]
block cbr(f, s = 1) {
  conv = conv(f, kernel = 3, stride = s, pad = 1)
  bn = batchnorm
  relu = relu
}
stem = conv(8, kernel = 7, stride = 2, pad = 3)
a = cbr(8)
b = cbr(16, s = 2)
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)";

struct Fixture {
    SourceManager sources;
    Diagnostics diags;
    Network net;

    explicit Fixture(const char* text = net_text) {
        auto file = parse_net(*sources.add("t.net", text), diags);
        REQUIRE(file);
        auto n = elaborate(*file, {}, diags);
        REQUIRE(n);
        REQUIRE(infer_shapes(*n, diags));
        net = std::move(*n);
    }

    std::optional<Schedule> apply(const std::string& text) {
        auto file = parse_sched(*sources.add("t.sched", text), diags);
        REQUIRE(file);
        return apply_schedule(net, *file, diags);
    }

    const Distribution& of(const Schedule& s, const std::string& layer) {
        const int i = net.find(layer);
        REQUIRE(i >= 0);
        return s.layers[static_cast<std::size_t>(i)];
    }

    std::string errors() const { return diags.text(); }
};

}  // namespace

TEST_CASE("the most specific entry wins, field by field", "[schedule]") {
    Fixture f;
    auto s = f.apply(R"(
procs = 4
default N=4 overlap=off
block cbr H=2 W=2 bn=local
layer b.* N=2 H=2
layer b.conv H=4 overlap=on
layer *.bn N=1 H=4
)");
    INFO(f.errors());
    REQUIRE(s);
    CHECK(f.of(*s, "stem").split == Split{4, 1, 1, {1, 1, 1}});
    CHECK(f.of(*s, "a.conv").split == Split{1, 1, 1, {1, 2, 2}});  // block beats default
    CHECK(f.of(*s, "b.conv").split == Split{1, 1, 1, {1, 4, 1}});  // exact name beats pattern
    CHECK(f.of(*s, "b.relu").split == Split{2, 1, 1, {1, 2, 1}});  // pattern beats block
    CHECK(f.of(*s, "b.bn").split == Split{1, 1, 1, {1, 4, 1}});    // '*.bn' has more literal characters than 'b.*'
    CHECK(f.of(*s, "a.bn").split == Split{1, 1, 1, {1, 4, 1}});    // a pattern beats the block
    // Fields resolve on their own: b.conv's split from its exact entry, its bn mode from the block entry.
    CHECK(*f.of(*s, "b.conv").overlap);
    CHECK(!*f.of(*s, "b.relu").overlap);
    CHECK(*f.of(*s, "b.conv").bn == BatchNormStats::local);
    CHECK(*f.of(*s, "stem").bn == BatchNormStats::batch);  // unset: exact statistics
    CHECK(s->complete());
}

TEST_CASE("among entries of equal rank the later one wins", "[schedule]") {
    Fixture f;
    auto s = f.apply("procs = 2\ndefault N=2 overlap=off\nlayer stem H=2\nlayer stem W=2\n");
    REQUIRE(s);
    CHECK(f.of(*s, "stem").split == Split{1, 1, 1, {1, 1, 2}});
}

TEST_CASE("open fields stay open and the schedule is partial", "[schedule]") {
    Fixture f;
    auto s = f.apply("default N=? H=2 overlap=?\nlayer pred N=4 overlap=off bn=?\n");
    INFO(f.errors());
    REQUIRE(s);
    CHECK(!s->procs);
    CHECK(!f.of(*s, "stem").split);
    CHECK(!f.of(*s, "stem").overlap);
    CHECK(f.of(*s, "pred").split == Split{4, 1, 1, {1, 1, 1}});
    CHECK(!f.of(*s, "pred").bn);
    CHECK(!s->complete());
}

TEST_CASE("overlap is not open where it cannot matter", "[schedule]") {
    Fixture f;
    // Sample parallelism exchanges no halo: nothing is left for the auto-scheduler.
    auto s = f.apply("procs = 2\ndefault N=2\n");
    INFO(f.errors());
    REQUIRE(s);
    CHECK(s->complete());
    CHECK(f.of(*s, "a.conv").overlap == false);
    // Under H=2 the first layer reads the input, made with its halo; a.conv exchanges one, and a.relu has none.
    s = f.apply("procs = 2\ndefault H=2\n");
    REQUIRE(s);
    CHECK(f.of(*s, "stem").overlap == false);
    CHECK(f.of(*s, "a.relu").overlap == false);
    CHECK(!f.of(*s, "a.conv").overlap);
    CHECK(!s->complete());
}

TEST_CASE("a split or process count beyond what MPI can start is an error, never a wrapped product", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("default N=4294967296 H=4294967296 W=4\n"));
    CHECK(f.errors() ==
          "t.sched:1:1: error: split N=4294967296 H=4294967296 W=4 uses more than 2147483647 processes, the most "
          "MPI can start\n"
          "default N=4294967296 H=4294967296 W=4\n"
          "^~~~~~~\n");
    Fixture g;
    CHECK(!g.apply("procs = 4294967296\n"));
    CHECK(g.errors().find("t.sched:1:9: error: 'procs' must be at most 2147483647") != std::string::npos);
    // N x C x H x W of a mini-batch: its bytes would overflow.
    Fixture h;
    CHECK(!h.apply("batch = 4611686018427387904\n"));
    CHECK(h.errors().find("t.sched:1:9: error: a mini-batch of 4611686018427387904 samples is too large") !=
          std::string::npos);
}

TEST_CASE("a split whose product is not the processor count is an error at its entry", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("procs = 4\n\ndefault N=2 H=2 W=2\n"));
    CHECK(f.errors() ==
          "t.sched:3:1: error: split N=2 H=2 W=2 uses 8 processes, but the schedule has procs = 4\n"
          "default N=2 H=2 W=2\n"
          "^~~~~~~\n"
          "t.sched:1:1: note: processor count set here\n"
          "procs = 4\n"
          "^~~~~\n");
}

TEST_CASE("with procs open, every fixed split must use the same count", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("default N=2\nlayer stem N=4\n"));
    CHECK(f.errors().find("split N=4 H=1 W=1 uses 4 processes, but another entry's split uses 2") != std::string::npos);
}

TEST_CASE("a tile smaller than the halo is an error naming the layer", "[schedule]") {
    Fixture f;
    // stem is a 7x7 convolution (halo 3) on 32 rows: 16 parts leave tiles of 2 rows.
    CHECK(!f.apply("procs = 16\ndefault N=16\nlayer stem H=16\n"));
    CHECK(f.errors().find("t.sched:3:1: error: split N=1 H=16 W=1 does not fit layer 'stem': tiles of 2 rows are "
                          "smaller than its halo of 3 rows") != std::string::npos);
    CHECK(f.errors().find("t.net:9:1: note: layer 'stem' declared here") != std::string::npos);
}

TEST_CASE("a split larger than the image, or than the mini-batch, is an error", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("procs = 16\ndefault N=16\nlayer b.* H=16\n"));
    CHECK(f.errors().find("split N=1 H=16 W=1 does not fit layer 'b.conv': its output has only 8 rows") !=
          std::string::npos);
    CHECK(f.errors().find("the same split does not fit layers 'b.bn', 'b.relu' either") != std::string::npos);

    Fixture g;
    CHECK(!g.apply("procs = 8\nbatch = 4\ndefault N=8\n"));
    CHECK(g.errors().find("split N=8 H=1 W=1 does not fit layer 'stem': the mini-batch has only 4 samples") !=
          std::string::npos);
}

TEST_CASE("channel and filter splits: every block holds a channel, and no group norm group straddles two",
          "[schedule]") {
    Fixture f;
    REQUIRE(f.apply("procs = 4\ndefault F=2 C=2\nlayer pred N=4\nlayer loss N=4\n"));
    CHECK(f.apply("procs = 2\ndefault C=2\n"));  // the stem reads 3 channels: blocks of 2 and 1

    Fixture g;
    CHECK(!g.apply("procs = 4\ndefault F=4\n"));
    CHECK(g.errors().find("t.sched:2:1: error: split N=1 F=4 H=1 W=1 does not fit layer 'pred': it has only 2 "
                          "filters") != std::string::npos);

    Fixture h;
    CHECK(!h.apply("procs = 8\ndefault C=4\nlayer b.* F=8\nlayer pred N=8\nlayer loss N=8\n"));
    CHECK(h.errors().find("split N=1 C=4 H=1 W=1 does not fit layer 'stem': its input has only 3 channels") !=
          std::string::npos);

    Fixture n(R"(
input x [N, 3, 16, 16]
label y [N, 16, 16]
c = conv(6, kernel = 3, pad = 1)
g = groupnorm(3)
pred = conv(2, kernel = 1)
loss = pixel_cross_entropy from pred, y
)");
    CHECK(n.apply("procs = 3\ndefault F=3\nlayer pred N=3\nlayer loss N=3\n"));  // a group each
    CHECK(!n.apply("procs = 4\ndefault F=4\nlayer pred N=4\nlayer loss N=4\n"));
    // Under C parts outputs stay float32 (a convolution's partial sums are not rounded before they are added).
    Fixture p;
    const auto c2 = p.apply("procs = 2\ndefault C=2 precision=bfloat16\n");
    REQUIRE(c2);
    CHECK(!p.of(*c2, "a.conv").narrowed());
    CHECK(!p.of(*c2, "a.relu").narrowed());
    const auto n2 = p.apply("procs = 2\nbatch = 2\ndefault N=2 precision=bfloat16\n");
    REQUIRE(n2);
    CHECK(p.of(*n2, "a.conv").narrowed());

    // 6 channels in 4 blocks: [0, 2), [2, 4), [4, 5), [5, 6); the third cuts the last group in two.
    CHECK(n.errors().find("does not fit layer 'g': a process's block of channels [4, 5) would straddle its groups "
                          "of 2") != std::string::npos);
}

TEST_CASE("volumes: D splits the depth, and a depth tile thinner than the halo or than one plane is an error",
          "[schedule]") {
    const char* volume = R"(
input v [N, 2, 12, 16, 16]
label y [N, 4] float
wide = conv(4, kernel = [5, 3, 3], pad = [2, 1, 1])
down = conv(8, kernel = 3, stride = 2, pad = 1)
g = global_avgpool
f = fc(4)
loss = mse from f, y
)";
    Fixture ok(volume);
    const auto s = ok.apply("procs = 8\ndefault D=2 H=2 W=2\n");
    INFO(ok.errors());
    REQUIRE(s);
    REQUIRE(ok.of(*s, "down").split);
    CHECK(ok.of(*s, "down").split->space == std::array<std::int64_t, 3>{2, 2, 2});

    // 'wide' reaches 2 planes of depth on each side: 12 planes in 8 tiles leave tiles of 1 plane.
    Fixture thin(volume);
    CHECK(!thin.apply("procs = 8\ndefault D=8\n"));
    CHECK(thin.errors().find("t.sched:2:1: error: split N=1 D=8 H=1 W=1 does not fit layer 'wide': tiles of 1 plane "
                             "of depth are smaller than its halo of 2 planes of depth") != std::string::npos);
    // 'down' has only 6 planes of depth: 8 parts leave some of it none.
    Fixture none(volume);
    CHECK(!none.apply("procs = 8\ndefault D=2 H=2 W=2\nlayer down D=8\n"));
    CHECK(none.errors().find("does not fit layer 'down': its output has only 6 planes of depth") != std::string::npos);
}

TEST_CASE("a transposed convolution's split fits exactly when each tile's halo fits the tiles beside it",
          "[schedule]") {
    // Every kernel of 1 to 4, stride of 1 to 3, pad below the kernel and output_pad below the stride, on images
    // and volumes whose dimensions have 1 to 7, 2 to 8 and 3 to 9 inputs, split along each of them 2 to 10 ways:
    // accepted exactly when the input and the output have a row for each part and the inputs that each tile's
    // outputs read beyond its input tile (deconv_reads.hpp) lie within the tiles beside it.
    int accepted = 0, refused = 0;
    for (int rank : {2, 3})
        for (std::int64_t kernel = 1; kernel <= 4; ++kernel)
            for (std::int64_t stride = 1; stride <= 3; ++stride)
                for (std::int64_t pad = 0; pad < kernel; ++pad)
                    for (std::int64_t output_pad = 0; output_pad < stride; ++output_pad)
                        for (std::int64_t first = 1; first <= 7; ++first) {
                            const test::Deconv1d def{kernel, stride, pad, output_pad};
                            if (def.outputs(first) < 1) continue;  // the larger extents have outputs too
                            std::string in, out;
                            for (int d = 0; d < rank; ++d) {
                                in += ", " + std::to_string(first + d);
                                out += ", " + std::to_string(def.outputs(first + d));
                            }
                            const std::string text = fmt::format(
                                "input x [N, 1{}]\nlabel y [N, 1{}] float\nup = deconv(1, kernel = {}, stride = {}, "
                                "pad = {}, output_pad = {})\nloss = mse from up, y\n",
                                in, out, kernel, stride, pad, output_pad);
                            Fixture f(text.c_str());
                            const Layer& up = f.net.layers[static_cast<std::size_t>(f.net.find("up"))];
                            for (int d = 0; d < rank; ++d)
                                for (std::int64_t parts = 2; parts <= first + d + 3; ++parts) {
                                    const std::int64_t inputs = first + d, outputs = def.outputs(inputs);
                                    Split s{1, 1, 1, {1, 1, 1}};
                                    s.space[static_cast<std::size_t>(axis_of(d, rank))] = parts;
                                    CAPTURE(text, s.str());
                                    const bool fits = parts <= inputs && parts <= outputs &&
                                                      test::deconv_halos_fit(def, inputs, parts);
                                    CHECK(split_problem(f.net, up, s, std::nullopt).empty() == fits);
                                    ++(fits ? accepted : refused);
                                }
                        }
    CHECK(accepted > 1000);
    CHECK(refused > 1000);
}

TEST_CASE("a kernel-2 stride-2 transposed convolution takes input tiles of one plane, row or column", "[schedule]") {
    // Each output reads one input: tiles of the output twice the input's read no halo at all.
    const char* volume = R"(
input x [N, 2, 4, 6, 6]
label y [N, 2, 8, 12, 12] float
e = conv(2, kernel = 1)
up = deconv(2, kernel = 2, stride = 2)
loss = mse from up, y
)";
    for (const char* sched : {"procs = 4\ndefault D=4\n", "procs = 6\ndefault H=6\n", "procs = 6\ndefault W=6\n",
                              "procs = 8\ndefault D=2 H=2 W=2\nlayer up D=4 W=2\n"}) {
        Fixture f(volume);
        CAPTURE(sched);
        const auto s = f.apply(sched);
        INFO(f.errors());
        CHECK(s);
    }
    const char* image = R"(
input x [N, 2, 5, 3]
label y [N, 2, 10, 6] float
e = conv(2, kernel = 1)
up = deconv(2, kernel = 2, stride = 2)
loss = mse from up, y
)";
    for (const char* sched :
         {"procs = 5\ndefault H=5\n", "procs = 3\ndefault W=3\n", "procs = 15\ndefault H=5 W=3\n"}) {
        Fixture f(image);
        CAPTURE(sched);
        const auto s = f.apply(sched);
        INFO(f.errors());
        CHECK(s);
    }
    // Where the tiles are cut unevenly the outputs' tiles shift against the inputs': 12 planes in 8 tiles of 2
    // and then 1 planes, and 24 planes of output in tiles of 3, the sixth reading planes 7 and 8 for its input
    // tile [9, 10): two planes back, where the tile before holds one.
    const char* deep = R"(
input x [N, 1, 12, 2, 2]
label y [N, 1, 24, 4, 4] float
e = conv(1, kernel = 1)
up = deconv(1, kernel = 2, stride = 2)
loss = mse from up, y
)";
    Fixture f(deep);
    CHECK(!f.apply("procs = 8\ndefault D=8\n"));
    CHECK(f.errors().find("t.sched:2:1: error: split N=1 D=8 H=1 W=1 does not fit layer 'up': tiles of 1 plane of "
                          "depth are smaller than its halo of 2 planes of depth") != std::string::npos);
}

TEST_CASE("names, patterns and blocks that select nothing are errors", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("procs = 1\nlayer stme N=1\nlayer c.* N=1\nblock cbrr N=1\n"));
    const std::string e = f.errors();
    CHECK(e.find("t.sched:2:7: error: the network has no layer named 'stme'") != std::string::npos);
    CHECK(e.find("note: did you mean 'stem'?") != std::string::npos);
    CHECK(e.find("t.sched:3:7: error: no layer of the network matches 'c.*'") != std::string::npos);
    CHECK(e.find("t.sched:4:7: error: the network has no instance of a block named 'cbrr'") != std::string::npos);
    CHECK(e.find("did you mean 'cbr'?") != std::string::npos);
}

TEST_CASE("bad settings are reported, all of them", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("procs = 0\nprocz = 2\ndefault N=2 C=2 overlap=maybe bn=global H=2 H=1 stride=2\n"));
    const std::string e = f.errors();
    CHECK(e.find("'procs' must be a positive integer or '?', not '0'") != std::string::npos);
    CHECK(e.find("unknown setting 'procz'") != std::string::npos);
    CHECK(e.find("did you mean 'procs'?") != std::string::npos);
    CHECK(e.find("'overlap' must be 'on', 'off' or '?', not 'maybe'") != std::string::npos);
    CHECK(e.find("'bn' must be 'batch', 'spatial', 'local' or '?', not 'global'") != std::string::npos);
    CHECK(e.find("'H' is set twice in this entry") != std::string::npos);
    CHECK(e.find("unknown setting 'stride' in a schedule entry") != std::string::npos);
}

TEST_CASE("a top-level setting after an entry is explained", "[schedule]") {
    Fixture f;
    CHECK(!f.apply("default N=2\nprocs = 2\n"));
    CHECK(f.errors().find("'procs' is a top-level setting, but here it follows an entry") != std::string::npos);
}

TEST_CASE("tiles of uneven splits: the largest tile is reported", "[schedule]") {
    Fixture f;
    const Layer& stem = f.net.layers[static_cast<std::size_t>(f.net.find("stem"))];  // [N, 8, 16, 16]
    std::int64_t n = 0;
    const Shape tile = tile_shape(stem, Split{3, 1, 1, {1, 3, 5}}, 8, &n);
    CHECK(n == 3);
    CHECK(tile.dims == std::vector<std::int64_t>{8, 6, 4});
    CHECK(block_size(16, 3, 0) == 6);
    CHECK(block_size(16, 3, 2) == 5);
    CHECK(min_block(16, 5) == 3);
}
