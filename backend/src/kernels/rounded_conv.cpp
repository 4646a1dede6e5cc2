#include "rounded_conv.hpp"

#include "../tensors/narrow.hpp"

#include <algorithm>
#include <vector>

namespace dsl::backend {
namespace {

class RoundedConv final : public ConvKernels {
public:
    RoundedConv(ConvKernels& inner, scheduler::Precision p)
        : inner_(inner), bfloat_(p == scheduler::Precision::bfloat16) {}

    void forward(ConstView x, ConstView w, const float* bias, View y, const Window& window) override {
        inner_.forward(rounded(x, a_), rounded(w, b_), bias, y, window);
    }
    void backward_data(ConstView dy, ConstView w, View dx, const Window& window) override {
        inner_.backward_data(rounded(dy, a_), rounded(w, b_), dx, window);
    }
    // The bias gradient sums the rounded dy, as oneDNN's does.
    void backward_weights(ConstView x, ConstView dy, View dw, float* db, const Window& window) override {
        inner_.backward_weights(rounded(x, a_), rounded(dy, b_), dw, db, window);
    }

private:
    // v's elements rounded, densely in `into`.
    ConstView rounded(ConstView v, std::vector<float>& into) const {
        into.resize(static_cast<std::size_t>(v.dims.elements()));
        float* out = into.data();
        const std::int64_t w = row_length(v.dims);
        for_each_row(v, [&](std::int64_t, std::int64_t, const Index&, const float* row) {
            out = std::transform(row, row + w, out, [&](float f) { return from_16(to_16(f, bfloat_), bfloat_); });
        });
        return dense_view<const float>(into.data(), v.dims);
    }

    ConvKernels& inner_;
    bool bfloat_;
    std::vector<float> a_, b_;
};

}  // namespace

std::unique_ptr<ConvKernels> rounded_to(ConvKernels& inner, scheduler::Precision p) {
    return std::make_unique<RoundedConv>(inner, p);
}

}  // namespace dsl::backend
