// The tile geometry that the plan, the trainer and the model share (scheduler/tiles.hpp), for images and
// volumes alike: block placement, process coordinates, halo pieces and overlap's inner outputs and strips.
#include "deconv_reads.hpp"

#include <dsl/scheduler/tiles.hpp>

#include <catch2/catch.hpp>

#include <random>
#include <vector>

using namespace dsl;
using namespace dsl::scheduler;

namespace {

Box box(Range n, Range c, Space<Range> space) { return Box{n, c, space}; }

frontend::Layer conv3(int rank, std::int64_t stride) {
    frontend::Layer l;
    l.op = frontend::OpKind::conv;
    l.kernel = Space<std::int64_t>::filled(rank, 3);
    l.stride = Space<std::int64_t>::filled(rank, stride);
    l.pad = Space<std::int64_t>::filled(rank, 1);
    l.dilation = Space<std::int64_t>::filled(rank, 1);
    return l;
}

}  // namespace

TEST_CASE("processes are numbered W fastest, then H, then D, then N", "[tiles]") {
    const Split s{2, 1, 1, {3, 2, 2}};
    CHECK(s.procs() == 24);
    CHECK(s.str() == "N=2 D=3 H=2 W=2");
    CHECK(Split{2, 1, 1, {1, 2, 2}}.str() == "N=2 H=2 W=2");  // an image's split names no depth
    for (std::int64_t r = 0; r < s.procs(); ++r) CHECK(rank_of(s, coords(s, r)) == r);
    const Coords c = coords(s, 13);  // 13 = ((1 * 3 + 0) * 2 + 0) * 2 + 1
    CHECK(c.n == 1);
    CHECK(c.space == std::array<std::int64_t, max_space>{0, 0, 1});
    // An image's H and W are the split's last two axes; a volume's D, H and W all three.
    CHECK(axis_of(0, 2) == 1);
    CHECK(axis_of(0, 3) == 0);
    CHECK(s.parts(1, 2) == 2);
    CHECK(s.parts(0, 3) == 3);
}

TEST_CASE("tiles are blocks of every spatial dimension, the first ones a point longer", "[tiles]") {
    const Dims volume{5, 4, {17, 15, 13}};
    const Split s{1, 1, 1, {3, 2, 2}};
    std::int64_t points = 0;
    for (std::int64_t r = 0; r < s.procs(); ++r) {
        const Box b = tile_box(volume, s, r, true);
        CHECK(b.c == Range{0, 4});
        points += b.points();
        const Coords k = coords(s, r);
        for (int d = 0; d < 3; ++d) {
            const std::int64_t parts = s.space[static_cast<std::size_t>(d)], i = k.space[static_cast<std::size_t>(d)];
            CHECK(b.space[d].lo == block_start(volume.space[d], parts, i));
            CHECK(b.space[d].size() == block_size(volume.space[d], parts, i));
        }
    }
    CHECK(points == 5 * 17 * 15 * 13);
    // Not split spatially (a vector's tile, or whole samples): every place.
    CHECK(tile_box(volume, s, 7, false).space == whole_box(volume).space);
    // 17 planes of depth over 3: 6, 6, 5.
    CHECK(tile_box(volume, s, 0, true).space[0] == Range{0, 6});
    CHECK(tile_box(volume, s, 8, true).space[0] == Range{12, 17});
}

TEST_CASE("an image's halo: the faces, then the corner, each from the process that holds it", "[tiles][halo]") {
    const Dims image{4, 3, {8, 6}};
    const Split s{1, 1, 1, {1, 2, 2}};
    const Margins one = Margins::filled(2, Reach{1, 1});
    const std::vector<Piece> p = halo_pieces(image, s, 0, one);  // the top left process: rows [0, 4), columns [0, 3)
    REQUIRE(p.size() == 3);
    CHECK(p[0].peer == 2);  // below
    CHECK(p[0].box == box({0, 4}, {0, 3}, {{4, 5}, {0, 3}}));
    CHECK(p[1].peer == 1);  // right
    CHECK(p[1].box == box({0, 4}, {0, 3}, {{0, 4}, {3, 4}}));
    CHECK(p[2].peer == 3);  // the corner
    CHECK(p[2].box == box({0, 4}, {0, 3}, {{4, 5}, {3, 4}}));
    // Margins beyond the tensor are padding, not pieces; a margin of 0 asks for nothing.
    CHECK(halo_pieces(image, s, 0, Margins::filled(2, Reach{1, 0})).empty());
}

TEST_CASE("a volume's halo: 6 faces, 12 edges and 8 corners around an inner process", "[tiles][halo]") {
    const Dims volume{2, 3, {9, 9, 9}};
    const Split s{1, 1, 1, {3, 3, 3}};
    const std::int64_t middle = rank_of(s, Coords{0, {1, 1, 1}});
    const std::vector<Piece> p = halo_pieces(volume, s, middle, Margins::filled(3, Reach{1, 1}));
    REQUIRE(p.size() == 26);
    // Faces first (dimension by dimension, before and after), then edges, then corners.
    for (std::size_t i = 0; i < 6; ++i) CHECK(p[i].box.points() == 2 * 9);
    for (std::size_t i = 6; i < 18; ++i) CHECK(p[i].box.points() == 2 * 3);
    for (std::size_t i = 18; i < 26; ++i) CHECK(p[i].box.points() == 2);
    CHECK(coords(s, p[0].peer).space == std::array<std::int64_t, max_space>{0, 1, 1});
    CHECK(coords(s, p[1].peer).space == std::array<std::int64_t, max_space>{2, 1, 1});
    CHECK(coords(s, p[25].peer).space == std::array<std::int64_t, max_space>{2, 2, 2});
    // A corner process of a 2 x 2 x 2 split: 3 faces, 3 edges, 1 corner.
    const Split eight{1, 1, 1, {2, 2, 2}};
    const Dims cube{1, 1, {6, 6, 6}};
    const std::vector<Piece> corner = halo_pieces(cube, eight, 0, Margins::filled(3, Reach{1, 1}));
    REQUIRE(corner.size() == 7);
    std::int64_t points = 0;
    for (const Piece& q : corner) points += q.box.points();
    CHECK(points == 4 * 4 * 4 - 3 * 3 * 3);
}

TEST_CASE("halo pieces cover the grown tile within the tensor, once, from its holders", "[tiles][halo]") {
    std::mt19937 random(7);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(random);
    };
    for (int trial = 0; trial < 200; ++trial) {
        const int rank = static_cast<int>(pick(1, 3));
        Dims whole{pick(1, 3), pick(1, 2), Space<std::int64_t>::filled(rank, 0)};
        Split s{pick(1, whole.n), 1, 1, {1, 1, 1}};
        Margins need = Margins::filled(rank, Reach{});
        for (int d = 0; d < rank; ++d) {
            whole.space[d] = pick(3, 11);
            s.space[static_cast<std::size_t>(axis_of(d, rank))] = pick(1, 3);
            // Uneven, and sometimes wider than a neighbour's tile.
            need[d] = {pick(0, 3), pick(0, 3)};
        }
        const std::int64_t r = pick(0, s.procs() - 1);
        CAPTURE(trial, rank, r, s.str());
        const Box own = tile_box(whole, s, r, true);
        const Box want = own.grown(need).meet(whole_box(whole));
        std::int64_t covered = 0;
        for (const Piece& p : halo_pieces(whole, s, r, need)) {
            CHECK(p.peer != r);
            CHECK(p.box.n == own.n);
            CHECK(p.box == p.box.meet(want));                              // within what is wanted
            CHECK(p.box == p.box.meet(tile_box(whole, s, p.peer, true)));  // held by its peer
            CHECK(p.box.meet(own).empty());                                // never this process's own
            covered += p.box.points();
        }
        // Disjoint pieces (each inside `want` and outside `own`) add up to exactly want less own.
        CHECK(covered == want.points() - own.points());
    }
}

TEST_CASE("a periodic halo comes from the far side, from this process itself where nothing else holds it",
          "[tiles][halo]") {
    const Dims image{1, 2, {4, 8}};
    const Split s{1, 1, 1, {1, 1, 2}};  // two columns of tiles; the rows whole
    const std::vector<Piece> p = halo_pieces(image, s, 0, Margins::filled(2, Reach{1, 1}), true);
    REQUIRE(p.size() == 8);
    // Above and below: this process's own last and first rows, a tensor's height away.
    CHECK(p[0].peer == 0);
    CHECK(p[0].box.space == Space<Range>{{-1, 0}, {0, 4}});
    CHECK(p[0].shift == Index{-4, 0});
    CHECK(p[0].source().space == Space<Range>{{3, 4}, {0, 4}});
    CHECK(p[1].peer == 0);
    CHECK(p[1].source().space == Space<Range>{{0, 1}, {0, 4}});
    // Left, across the border: the other tile's last column; right: its first, no shift.
    CHECK(p[2].peer == 1);
    CHECK(p[2].box.space == Space<Range>{{0, 4}, {-1, 0}});
    CHECK(p[2].source().space == Space<Range>{{0, 4}, {7, 8}});
    CHECK(p[3].peer == 1);
    CHECK(p[3].shift == Index{0, 0});
    CHECK(p[3].box.space == Space<Range>{{0, 4}, {4, 5}});
    // A corner across both borders.
    CHECK(p[4].peer == 1);
    CHECK(p[4].source().space == Space<Range>{{3, 4}, {7, 8}});
}

TEST_CASE("periodic halo pieces cover the grown tile once, from the far side beyond the border", "[tiles][halo]") {
    std::mt19937 random(11);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(random);
    };
    for (int trial = 0; trial < 200; ++trial) {
        const int rank = static_cast<int>(pick(1, 3));
        Dims whole{pick(1, 2), 1, Space<std::int64_t>::filled(rank, 0)};
        Split s{1, 1, 1, {1, 1, 1}};
        Margins need = Margins::filled(rank, Reach{});
        for (int d = 0; d < rank; ++d) {
            whole.space[d] = pick(2, 9);
            s.space[static_cast<std::size_t>(axis_of(d, rank))] = pick(1, std::min<std::int64_t>(3, whole.space[d]));
            need[d] = {pick(0, whole.space[d]), pick(0, whole.space[d])};  // at most the tensor, wrapped once
        }
        const std::int64_t r = pick(0, s.procs() - 1);
        CAPTURE(trial, rank, r, s.str());
        const Box own = tile_box(whole, s, r, true), want = own.grown(need);
        std::int64_t covered = 0;
        for (const Piece& p : halo_pieces(whole, s, r, need, true)) {
            CHECK(p.box == p.box.meet(want));
            CHECK(p.box.meet(own).empty());
            CHECK(p.source() == p.source().meet(tile_box(whole, s, p.peer, true)));
            covered += p.box.points();
        }
        CHECK(covered == want.points() - own.points());
        // The parts of `want` beyond the border, read from the tensor's far side.
        std::int64_t beyond = 0;
        for (const Piece& p : wrapped_parts(whole, want)) {
            CHECK(p.box.meet(whole_box(whole)).empty());
            CHECK(p.source() == p.source().meet(whole_box(whole)));
            beyond += p.box.points();
        }
        CHECK(beyond == want.points() - want.meet(whole_box(whole)).points());
    }
}

TEST_CASE("overlap: the inner outputs read no halo, the strips cover the rest once", "[tiles][overlap]") {
    for (int rank : {1, 2, 3}) {
        for (std::int64_t stride : {1, 2}) {
            const frontend::Layer l = conv3(rank, stride);
            // The middle tile of a split by 3 along every dimension of a tensor of 24 (12 outputs at stride 2).
            const std::int64_t extent = 24, outputs = stride == 1 ? 24 : 12;
            Dims in{2, 4, Space<std::int64_t>::filled(rank, extent)}, out_whole = in;
            for (int d = 0; d < rank; ++d) out_whole.space[d] = outputs;
            const Split s{1, 1, 1, {rank == 3 ? 3 : 1, rank >= 2 ? 3 : 1, 3}};
            const std::int64_t middle = rank_of(s, Coords{0, {rank == 3 ? 1 : 0, rank >= 2 ? 1 : 0, 1}});
            const Box out = tile_box(out_whole, s, middle, true), tile = tile_box(in, s, middle, true);
            const Margins need = tile.reach(window_input(l, out, in.c));
            const OverlapParts parts = overlap_parts(l, out, held_box(tile, in, need));
            CAPTURE(rank, stride);
            REQUIRE_FALSE(parts.inner.empty());
            // The inner outputs' windows read within the tile alone.
            const Box read = window_input(l, parts.inner, in.c);
            CHECK(read == read.meet(tile));
            // Every strip reads some of the halo, and the strips and the inner outputs partition the tile.
            std::int64_t points = parts.inner.points();
            for (const Box& strip : parts.strips) {
                CHECK(strip.meet(parts.inner).empty());
                CHECK(window_input(l, strip, in.c).meet(tile) != window_input(l, strip, in.c));
                points += strip.points();
                for (const Box& other : parts.strips)
                    if (&other != &strip) CHECK(strip.meet(other).empty());
            }
            CHECK(points == out.points());
            // At stride 1 a strip on either side along each dimension; at stride 2 the tiles of the output
            // begin where a window reaches one input back, and end where none reaches past the tile.
            CHECK(parts.strips.size() == static_cast<std::size_t>(stride == 1 ? 2 * rank : rank));
        }
    }
}

TEST_CASE("at the tensor's border, padding is held: the outputs that read it are inner", "[tiles][overlap]") {
    const frontend::Layer l = conv3(2, 1);
    const Dims image{1, 1, {8, 8}};
    const Split s{1, 1, 1, {1, 2, 1}};  // two rows of tiles
    const Box out = tile_box(image, s, 0, true), tile = out;
    const Margins need = tile.reach(window_input(l, out, 1));
    CHECK(need == Margins{Reach{1, 1}, Reach{1, 1}});
    const Box held = held_box(tile, image, need);
    CHECK(held.space[0] == Range{-1, 4});  // padding above, the halo below is not here yet
    CHECK(held.space[1] == Range{-1, 9});  // padding either side
    const OverlapParts parts = overlap_parts(l, out, held);
    CHECK(parts.inner == box({0, 1}, {0, 1}, {{0, 3}, {0, 8}}));
    REQUIRE(parts.strips.size() == 1);
    CHECK(parts.strips[0] == box({0, 1}, {0, 1}, {{3, 4}, {0, 8}}));
    // Nothing inner (a tile of one row that reads both neighbours): the strip is the whole tile.
    const Box thin = box({0, 1}, {0, 1}, {{3, 4}, {0, 8}});
    const OverlapParts none = overlap_parts(l, thin, thin);
    CHECK(none.inner.empty());
    REQUIRE(none.strips.size() == 1);
    CHECK(none.strips[0] == thin);
}

TEST_CASE("a transposed convolution's tiles read exactly what their outputs read, and their halo is its reach",
          "[tiles][halo]") {
    // Every kernel of 1 to 4, stride of 1 to 3, pad up to twice the kernel and output_pad below the stride, over
    // 1 to 9 inputs split 1 to 9 ways (tiles of one row, uneven tiles): for each tile of the output, the inputs
    // that the scheduler says it reads (window_input), the margins the plan gives its input's tile (the reach of
    // that read) and deconv_halos, against the definition (deconv_reads.hpp). A tile that reads nothing (only
    // where the pad is the kernel or more) has a read of no inputs.
    int tiles = 0, with_halo = 0, reading_nothing = 0;
    for (std::int64_t kernel = 1; kernel <= 4; ++kernel)
        for (std::int64_t stride = 1; stride <= 3; ++stride)
            for (std::int64_t pad = 0; pad <= 2 * kernel; ++pad)
                for (std::int64_t output_pad = 0; output_pad < stride; ++output_pad)
                    for (std::int64_t inputs = 1; inputs <= 9; ++inputs) {
                        const test::Deconv1d def{kernel, stride, pad, output_pad};
                        const std::int64_t outputs = def.outputs(inputs);
                        if (outputs < 1) continue;
                        frontend::Layer l;
                        l.op = frontend::OpKind::deconv;
                        l.kernel = {kernel};
                        l.stride = {stride};
                        l.pad = {pad};
                        l.output_pad = {output_pad};
                        l.shape.dims = {1, outputs};
                        REQUIRE(input_extent(l, 0) == inputs);
                        for (std::int64_t parts = 1; parts <= std::min(inputs, outputs); ++parts) {
                            CAPTURE(kernel, stride, pad, output_pad, inputs, parts);
                            const Split s{1, 1, 1, {1, 1, parts}};
                            const std::vector<Reach> halos = deconv_halos(l, 0, parts);
                            const std::vector<test::Beyond> beyond = test::deconv_beyond(def, inputs, parts);
                            REQUIRE(halos.size() == static_cast<std::size_t>(parts));
                            for (std::int64_t b = 0; b < parts; ++b) {
                                CAPTURE(b);
                                const Box out = tile_box(Dims{1, 1, {outputs}}, s, b, true);
                                const Box tile = tile_box(Dims{1, 1, {inputs}}, s, b, true);
                                const Box read = window_input(l, out, 1);
                                const Reach halo = halos[static_cast<std::size_t>(b)];
                                CHECK(tile.reach(read)[0] == halo);  // the plan's margins
                                ++tiles;
                                const auto want = test::deconv_reads(def, inputs, out.space[0].lo, out.space[0].hi);
                                if (!want) {
                                    CHECK(pad >= kernel);
                                    CHECK(read.space[0].empty());
                                    ++reading_nothing;
                                    continue;
                                }
                                CHECK(read.space[0] == Range{want->first, want->end});
                                CHECK(halo == Reach{beyond[static_cast<std::size_t>(b)].before,
                                                    beyond[static_cast<std::size_t>(b)].after});
                                if (halo.before > 0 || halo.after > 0) ++with_halo;
                            }
                        }
                        // Layer::halo: where an output tile is `stride` times its input tile, [s*a, s*b) for the
                        // inputs [a, b), the farther it reaches beyond them (away from the tensor's border).
                        if (inputs == 9 && pad < kernel) {
                            const auto want = test::deconv_reads(def, inputs, 4 * stride, 6 * stride);
                            REQUIRE(want);
                            CHECK(l.halo() ==
                                  Space<std::int64_t>{std::max<std::int64_t>({0, 4 - want->first, want->end - 6})});
                        }
                    }
    CHECK(tiles > 1000);
    CHECK(with_halo > 100);
    CHECK(reading_nothing > 0);
}

TEST_CASE("a tensor's extent: channels first, except class labels', which are all spatial", "[tiles]") {
    frontend::Layer image;
    image.op = frontend::OpKind::relu;
    image.shape.dims = {16, 32, 32};
    CHECK(extent_of(image, 4) == Dims{4, 16, {32, 32}});
    frontend::Layer labels;
    labels.op = frontend::OpKind::label;
    labels.shape.dims = {32, 32};
    CHECK(extent_of(labels, 4) == Dims{4, 1, {32, 32}});
    labels.shape.dims = {};
    CHECK(extent_of(labels, 4) == Dims{4, 1, {}});
    frontend::Layer targets = labels;
    targets.float_label = true;
    targets.shape.dims = {10};
    CHECK(extent_of(targets, 4) == Dims{4, 10, {}});
    image.shape.dims = {2, 5, 6, 7};  // a volume
    CHECK(extent_of(image, 1) == Dims{1, 2, {5, 6, 7}});
}
