// The synthetic data set's inputs, made on the GPU.
#include "gpu_common.cuh"
#include "gpu_map.cuh"

#include "../kernel_checks.hpp"
#include "../synthetic_formula.hpp"

#include <dsl/base/error.hpp>

#include <cstdint>
#include <string>

namespace dsl::backend::gpu {

namespace {

// The synthetic data set's inputs, made on the GPU with the host's formulas (synthetic_formula.hpp). Each
// thread works out its row's field and noise hash once, then its elements.
struct SyntheticInputs {
    SyntheticData data;
    std::int64_t sample0, y0, x0;
    struct Row {
        std::int64_t sample, c, y;
        std::uint64_t noise;
        synthetic::Field::Terms field;
        double fx;
    };
    __device__ Row row(std::int64_t n, std::int64_t c, std::int64_t y) const {
        using namespace synthetic;
        const std::int64_t s = sample0 + n, gy = y0 + y;
        const Field field(data.seed, s, c);
        const std::uint64_t h = splitmix64(data.seed ^ splitmix64(tag_noise));
        const std::uint64_t noise =
            splitmix64(splitmix64(splitmix64(h ^ static_cast<std::uint64_t>(s)) ^ static_cast<std::uint64_t>(c)) ^
                       static_cast<std::uint64_t>(gy));
        return {s, c, gy, noise, field.row(gy), field.fx};
    }
    template <int S>
    __device__ float operator()(const Row& r, const float (&)[S], std::int64_t x) const {
        using namespace synthetic;
        const std::int64_t gx = x0 + x;
        const double field = Field::at(r.field, Field::column(r.fx, gx));
        return input_value(splitmix64(r.noise ^ static_cast<std::uint64_t>(gx)), field,
                           mark(data, r.c, input_class(data, r.sample, r.y, gx)));
    }
};

class GpuSynthetic final : public SyntheticKernels {
public:
    void inputs(const SyntheticData& data, std::int64_t sample0, const Index& at, View tile) override {
        const Planes p = planes(tile);
        DSL_INTERNAL_CHECK(p.dims.c == data.channels, "synthetic inputs: a tile of " + dims_text(p.dims) + " for " +
                                                          std::to_string(data.channels) + " channels");
        const PlanePlace first = plane_place(at);
        map("synthetic inputs", p.dims, Merge::none, operand(p), no_inputs(),
            SyntheticInputs{data, sample0, first.y, first.x});
    }
};

}  // namespace

SyntheticKernels* synthetic_kernels() {
    static GpuSynthetic instance;
    return &instance;
}

}  // namespace dsl::backend::gpu
