// What batch norm and group norm share: a scale and a shift per channel (PyTorch's affine normalizations:
// scale 1, shift 0 at first), split by blocks of channels under F and C parts.
#pragma once

#include "kind.hpp"

namespace dsl::backend {

class Normalization : public KindRules {
public:
    void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const override;
    Block weight_block(const Impl& t, const Slot& s) const override;
    std::int64_t bias_extent(const Slot& s) const override { return s.whole.c; }
    std::vector<std::int64_t> weight_shape(const Dims& whole) const override { return {whole.c}; }
    // BatchNorm1d, 2d or 3d and GroupNorm: weight and bias, one of each per channel.
    std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const override;
};

}  // namespace dsl::backend
