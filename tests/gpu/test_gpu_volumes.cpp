// The GPU kernel set against the reference kernels on volumes (three spatial dimensions: depth, rows, columns),
// as test_gpu_kernels.cpp does on images and vectors: views of tiles with margins along every dimension in device
// memory, made on the host and copied to the device with the same padded layout, inputs' margins NaN and
// outputs' a sentinel. Device memory's halo pieces, convolutions, pooling, synthetic inputs, upsampling and
// deconvolution of volumes; the kinds whose cases mix ranks (memory, element-wise, normalisation, activations,
// global pooling, losses) have their volumes in test_gpu_kernels.cpp.
#include <dsl/backend/gpu.hpp>
#include <dsl/backend/kernels.hpp>
#include <dsl/backend/synthetic.hpp>
#include <dsl/backend/tensor.hpp>

#include "gpu_checks.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace dsl::backend;

TEST_CASE("gpu memory packs and unpacks the halo pieces of a volume", "[gpu]") {
    // A volume's halo pieces are boxes of its padded tile: faces, edges and corners, in the margins and along
    // the interior's edges, with gaps between their rows and between their planes; and whole planes, which
    // pack as one row.
    std::mt19937 rng(5);
    const Dims d{2, 3, {6, 7, 8}};
    const Margins m{{2, 1}, {1, 2}, {2, 2}};  // a padded tile of 9 x 10 x 12
    Tensor src(d, m), dst(d, m);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (Tensor* t : {&src, &dst})
        for (std::int64_t i = 0; i < t->size(); ++i) t->data()[i] = uniform(rng);
    const Tile src_dev(src), dst_dev(dst);
    struct Box {
        Index first, extent;  // in the padded tile
    };
    for (const Box& b : {Box{{0, 1, 2}, {2, 7, 8}}, Box{{2, 8, 2}, {6, 2, 8}}, Box{{2, 1, 0}, {6, 7, 2}},
                         Box{{0, 0, 0}, {2, 1, 2}}, Box{{7, 8, 10}, {1, 2, 2}}, Box{{1, 0, 0}, {8, 10, 12}}}) {
        INFO("the box of " << text(b.extent) << " from " << text(b.first));
        const Dims bd{d.n, d.c, b.extent};
        const View from = src.padded().sub(0, 0, b.first, bd), to = dst.padded().sub(0, 0, b.first, bd);
        const DeviceArray packed(bd.elements());
        device().pack(src_dev.on_device(from), packed.data());
        Tensor dense(bd);
        reference().eltwise->copy(from, dense.interior());
        CHECK(packed.download() == std::vector<float>(dense.data(), dense.data() + dense.size()));

        device().unpack(packed.data(), dst_dev.on_device(to), false);
        reference().eltwise->copy(dense.interior(), to);
        require_close(dst_dev.download(), dst, "unpack", 0.0);
        device().unpack(packed.data(), dst_dev.on_device(to), true);
        reference().eltwise->accumulate(dense.interior(), to);
        require_close(dst_dev.download(), dst, "unpack with add", 0.0);
    }
}

TEST_CASE("gpu convolutions of volumes match the reference on strided views", "[gpu]") {
    const Layout layout = GENERATE(Layout::dense, Layout::interior, Layout::padded, Layout::inside, Layout::channels);
    std::mt19937 rng(45);
    for (const VolumeConvProblem& p : volume_conv_problems()) {
        // padded and inside views need room for their margins.
        const Dims xd = volume_conv_input(p);
        const bool small = std::any_of(xd.space.begin(), xd.space.end(), [](std::int64_t e) { return e < 3; }) ||
                           std::any_of(p.out.begin(), p.out.end(), [](std::int64_t e) { return e < 3; });
        if ((layout == Layout::padded || layout == Layout::inside) && small) continue;
        check_conv(p, layout, false, rng);
    }
}

TEST_CASE("gpu pooling of volumes matches the reference, ties included", "[gpu]") {
    // The image cases' kinds of windows along three dimensions: disjoint (2x2x2 stride 2),
    // overlapping, gaps, a kernel of a different size along each dimension, a depth of one tap, dilation, a
    // single window, and long rows. Ties (levels 3) go to the first maximum in the order of the taps, the
    // columns fastest.
    const PoolCase pc = GENERATE(PoolCase{volume_window({2, 2, 2}, {2, 2, 2}), {2, 3, {2, 3, 4}}},
                                 PoolCase{volume_window({3, 3, 3}, {2, 2, 2}), {1, 2, {3, 4, 5}}},
                                 PoolCase{volume_window({3, 3, 3}, {1, 1, 1}), {1, 2, {4, 3, 5}}},
                                 PoolCase{volume_window({2, 2, 2}, {3, 3, 3}), {2, 2, {2, 3, 2}}},
                                 PoolCase{volume_window({3, 1, 2}, {2, 1, 2}), {2, 2, {3, 4, 5}}},
                                 PoolCase{volume_window({1, 3, 3}, {1, 2, 2}), {1, 3, {3, 4, 4}}},
                                 PoolCase{volume_window({3, 3, 3}, {1, 1, 1}, {2, 1, 2}), {1, 2, {3, 4, 3}}},
                                 PoolCase{volume_window({4, 4, 4}, {1, 1, 1}), {2, 1, {1, 1, 1}}},
                                 PoolCase{volume_window({2, 2, 2}, {2, 2, 2}), {1, 2, {3, 4, 150}}});
    const PoolKind kind = GENERATE(PoolKind::max, PoolKind::average);
    const int levels = GENERATE(0, 3);
    check_pool(pc, kind, levels);
}

TEST_CASE("gpu synthetic inputs of a volume are the host's", "[gpu]") {
    SyntheticData data;
    data.seed = 13;
    data.channels = 2;
    data.depth = 24;
    data.height = 20;
    data.width = 28;
    data.classes = 5;
    const bool per_voxel = GENERATE(false, true);
    if (per_voxel) data.label_d = 6, data.label_h = 5, data.label_w = 7, data.block = 2;
    // A tile inside a tile with margins, away from the origin along each dimension, and a whole one.
    const std::int64_t sample0 = GENERATE(0, 7), z0 = GENERATE(0, 9), y0 = GENERATE(0, 5), x0 = GENERATE(0, 11);
    INFO((per_voxel ? "per voxel" : "per sample")
         << ", sample " << sample0 << ", place " << z0 << ", " << y0 << ", " << x0);
    std::mt19937 rng(81);
    check_synthetic(data, false, Dims{2, 2, {data.depth - z0, data.height - y0, data.width - x0}}, sample0,
                    {z0, y0, x0}, rng);
}

TEST_CASE("gpu synthetic targets of a volume are the host's", "[gpu]") {
    SyntheticData data;
    data.seed = 19;
    data.channels = 2;
    data.depth = 24;
    data.height = 20;
    data.width = 28;
    data.target_c = 2, data.target_d = 12, data.target_h = 10, data.target_w = 14;
    const std::int64_t sample0 = GENERATE(0, 7), z0 = GENERATE(0, 5), y0 = GENERATE(0, 3), x0 = GENERATE(0, 4);
    INFO("sample " << sample0 << ", place " << z0 << ", " << y0 << ", " << x0);
    std::mt19937 rng(85);
    check_synthetic(data, true, Dims{2, 2, {data.target_d - z0, data.target_h - y0, data.target_w - x0}}, sample0,
                    {z0, y0, x0}, rng);
}

TEST_CASE("gpu upsample of volumes matches the reference, on tiles anywhere in the tensor", "[gpu]") {
    struct Case {
        std::int64_t scale;
        bool linear;
        Index in, o0, o1;  // the input's extents; the output tile [o0, o1) along each dimension
    };
    std::mt19937 rng(75);
    for (const Case& c :
         {Case{2, false, {3, 4, 5}, {0, 0, 0}, {6, 8, 10}}, Case{2, true, {3, 4, 5}, {0, 0, 0}, {6, 8, 10}},
          Case{2, true, {5, 6, 4}, {3, 5, 1}, {8, 11, 7}}, Case{3, true, {4, 3, 5}, {2, 4, 1}, {10, 9, 13}},
          Case{3, false, {4, 3, 5}, {2, 4, 1}, {10, 9, 13}}, Case{2, true, {8, 16, 20}, {0, 0, 0}, {16, 32, 40}}}) {
        INFO("upsample scale " << c.scale << (c.linear ? " trilinear" : " nearest") << " of " << text(c.in)
                               << ", outputs from " << text(c.o0) << " to " << text(c.o1));
        Index first = Index::filled(3, 0), in_extent = first, out_extent = first;
        for (int k = 0; k < 3; ++k) {
            const auto r = dsl::scheduler::upsample_input(c.o0[k], c.o1[k], c.scale, c.linear, c.in[k]);
            first[k] = r.first;
            in_extent[k] = r.end - r.first;
            out_extent[k] = c.o1[k] - c.o0[k];
        }
        const Dims xd{2, 3, in_extent}, yd{2, 3, out_extent};
        const Upsample u{c.scale, c.linear, c.in, Placement{first, c.o0}};
        check_upsample(xd, yd, u, rng);
    }
}

TEST_CASE("gpu deconv of volumes (cuDNN's convolutions) matches the reference, on tiles anywhere in the tensor",
          "[gpu]") {
    struct Case {
        std::int64_t cin, cout;
        Index k, s, p, in, o0, o1;  // kernel, stride, pad, the input's extents, the output tile [o0, o1)
    };
    std::mt19937 rng(77);
    for (const Case& c : {
             Case{2, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {3, 4, 3}, {0, 0, 0}, {6, 8, 6}},
             Case{2, 3, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {3, 4, 3}, {2, 3, 1}, {5, 7, 4}},
             Case{3, 2, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {3, 2, 3}, {1, 0, 2}, {6, 4, 5}},  // a U-Net's up-convolution
             Case{2, 2, {3, 1, 3}, {1, 2, 1}, {1, 0, 1}, {4, 3, 5}, {0, 1, 0}, {4, 5, 5}},  // per dimension
             Case{1, 2, {1, 1, 1}, {3, 3, 3}, {0, 0, 0}, {2, 3, 2}, {0, 0, 0}, {6, 9, 6}},  // outputs no input reaches
             Case{8, 4, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {8, 8, 8}, {0, 0, 0}, {16, 16, 16}},
         }) {
        INFO("deconv kernel " << text(c.k) << " stride " << text(c.s) << " pad " << text(c.p) << ", outputs from "
                              << text(c.o0) << " to " << text(c.o1));
        Index first = Index::filled(3, 0), in_extent = first, out_extent = first;
        for (int k = 0; k < 3; ++k) {
            const auto r = dsl::scheduler::deconv_input(c.o0[k], c.o1[k], c.k[k], c.s[k], c.p[k], c.in[k]);
            first[k] = r.first;
            in_extent[k] = r.end - r.first;
            out_extent[k] = c.o1[k] - c.o0[k];
        }
        const Dims xd{2, c.cin, in_extent}, yd{2, c.cout, out_extent}, wd{c.cin, c.cout, c.k};
        const Deconv d{c.k, c.s, c.p, Placement{first, c.o0}};
        check_deconv(xd, wd, yd, d, rng);
    }
}
