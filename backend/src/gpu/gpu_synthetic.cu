// The synthetic data set's inputs and float targets, made on the GPU.
#include "gpu_common.cuh"
#include "gpu_map.cuh"

#include "../data/synthetic_formula.hpp"
#include "../kernels/kernel_checks.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <string>

namespace dsl::backend::gpu {

namespace {

// The synthetic data set's inputs, made on the GPU with the host's formulas (synthetic_formula.hpp): an
// image's input(d, s, c, y, x), a volume's input(d, s, c, z, y, x). Each thread works out its row's field and
// noise hash once (as the host's fill_inputs does, the hash carried as far as the row), then its elements.
struct SyntheticInputs {
    SyntheticData data;
    std::int64_t sample0, z0, y0, x0;
    bool volume;
    struct Row {
        std::int64_t sample, c, z, y;
        std::uint64_t noise;
        synthetic::Field::Terms field;
        double fx;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        using namespace synthetic;
        const std::int64_t s = sample0 + n, gz = z0 + z, gy = y0 + y;
        const Field field(data.seed, s, c);
        const std::uint64_t h = splitmix64(data.seed ^ splitmix64(tag_noise));
        std::uint64_t noise = splitmix64(splitmix64(h ^ static_cast<std::uint64_t>(s)) ^ static_cast<std::uint64_t>(c));
        if (volume) noise = splitmix64(noise ^ static_cast<std::uint64_t>(gz));
        noise = splitmix64(noise ^ static_cast<std::uint64_t>(gy));
        return {s, c, gz, gy, noise, volume ? field.row(gz, gy) : field.row(gy), field.fx};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        using namespace synthetic;
        const std::int64_t gx = x0 + x;
        const double field = Field::at(r.field, Field::column(r.fx, gx));
        const std::int32_t k =
            volume ? input_class(data, r.sample, r.z, r.y, gx) : input_class(data, r.sample, r.y, gx);
        return input_value(splitmix64(r.noise ^ static_cast<std::uint64_t>(gx)), field, mark(data, r.c, k));
    }
};

// Its float targets (a regression loss's): each the sigmoid of the weighted inputs under the target place's
// centre, as the host's target(d, s, c, y, x) and target(d, s, c, z, y, x).
struct SyntheticTargets {
    SyntheticData data;
    std::int64_t sample0, z0, y0, x0;
    bool volume;
    struct Row {
        std::int64_t sample, c, iz, iy;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y) const {
        using namespace synthetic;
        return {sample0 + n, c, volume ? under(z0 + z, data.depth, data.target_d) : 0,
                under(y0 + y, data.height, data.target_h)};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        using namespace synthetic;
        const std::int64_t ix = under(x0 + x, data.width, data.target_w);
        double z = 0.0;
        for (std::int64_t i = 0; i < data.channels; ++i)
            z = add(z, mul(mix(data, r.c, i), volume ? synthetic::input(data, r.sample, i, r.iz, r.iy, ix)
                                                     : synthetic::input(data, r.sample, i, r.iy, ix)));
        return target_value(z);
    }
};

class GpuSynthetic final : public SyntheticKernels {
public:
    void inputs(const SyntheticData& data, std::int64_t sample0, const Index& at, View tile) override {
        make<SyntheticInputs>("synthetic inputs", data, data.channels, sample0, at, tile);
    }
    void targets(const SyntheticData& data, std::int64_t sample0, const Index& at, View tile) override {
        make<SyntheticTargets>("synthetic targets", data, data.target_c, sample0, at, tile);
    }

private:
    // A tile of `channels` channels of the data set's values from global sample `sample0` and place `at`.
    template <typename Values>
    static void make(const char* what, const SyntheticData& data, std::int64_t channels, std::int64_t sample0,
                     const Index& at, View tile) {
        const Volumes v = volumes(tile);
        const bool volume = is_volume(tile.dims);
        DSL_INTERNAL_CHECK(v.dims.c == channels, std::string(what) + ": a tile of " + dims_text(tile.dims) + " for " +
                                                     std::to_string(channels) + " channels");
        DSL_INTERNAL_CHECK(!volume || data.volume(),
                           std::string(what) + ": a volume's tile " + dims_text(tile.dims) + " of an image's data set");
        check_place(at, tile.dims, what);
        const VolumePlace first = volume_place(at);
        map(what, v.dims, Merge::none, operand(v), no_inputs(),
            Values{data, sample0, first.z, first.y, first.x, volume});
    }
};

}  // namespace

SyntheticKernels* synthetic_kernels() {
    static GpuSynthetic instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
