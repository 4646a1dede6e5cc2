// A dense double buffer shaped like a view's dims, where the reference kernels of transposes (a convolution's
// and a pooling's backward, a transposed convolution's forward) gather sums before writing each element once.
#pragma once

#include "../tensors/planes.hpp"

#include <dsl/backend/tensor.hpp>

#include <vector>

namespace dsl::backend {

struct DoubleBuffer {
    std::vector<double> values;
    BasicView<double> view;

    explicit DoubleBuffer(const Dims& d)
        : values(static_cast<std::size_t>(d.elements()), 0.0), view(dense_view(values.data(), d)) {}
    DoubleBuffer(const DoubleBuffer&) = delete;
    DoubleBuffer& operator=(const DoubleBuffer&) = delete;

    // Into `v`, of the same dims, rounded to float.
    void store(View v) const {
        const std::int64_t width = row_length(v.dims);
        for_each_row_start(v.dims, [&](std::int64_t n, std::int64_t c, const Index& i) {
            const double* in = &view.at(n, c, i);
            float* out = &v.at(n, c, i);
            for (std::int64_t j = 0; j < width; ++j) out[j] = static_cast<float>(in[j]);
        });
    }
};

}  // namespace dsl::backend
