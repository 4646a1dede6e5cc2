// The scale and shift that batch norm and group norm share (normalization.hpp).
#include "normalization.hpp"

namespace dsl::backend {

void Normalization::initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const {
    (void)index, (void)stream;
    t.set_parameters(
        s, Dims{1, s.layer->shape.dims[0], {}}, [](std::int64_t) { return 1.0f; }, [](std::int64_t) { return 0.0f; });
}

// {1, C} at its channels.
Block Normalization::weight_block(const Impl& t, const Slot& s) const {
    (void)t;
    const Dims& d = s.whole;
    return Block{{0, 1}, s.holders ? s.filters : Range{0, d.c}, d.c, 1, d.elements()};
}

std::vector<ExportedTensor> Normalization::exported(const frontend::Layer& l, const frontend::Shape& input) const {
    (void)l;
    const std::int64_t channels = input.dims.at(0);
    return {{"weight", {channels}}, {"bias", {channels}}};
}

}  // namespace dsl::backend
