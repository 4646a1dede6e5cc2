// The CPU kernels of batch norm, the (leaky) ReLU, add, copy and pooling over views whose channels lie in blocks
// (view.hpp: lanes, oneDNN's nChw16c), in which the trainer keeps the tensors between oneDNN's convolutions
// so that these need no reorder (trainer: blocked tiles). Each takes views of one layout, all blocked, and
// computes what the planar kernels (Halide's) compute, element by element in the same arithmetic: the
// statistics' sums in double in another order, the rest bit for bit. The CPU kernel set sends a blocked view
// here; nothing else takes one.
#pragma once

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/view.hpp>

#include <optional>
#include <vector>

namespace dsl::backend::blocked {

void batchnorm_statistics(ConstView x, double* sum, double* sum_sq);
// The ReLU's slope where one follows (forward_relu); none for batch norm alone.
void batchnorm_forward(ConstView x, const float* mean, const float* inv_std, const float* gamma, const float* beta,
                       std::optional<float> relu, View y);
void batchnorm_backward_statistics(ConstView x, ConstView dy, const float* mean, const float* inv_std, double* sum_dy,
                                   double* sum_dy_xhat);
void batchnorm_backward(ConstView x, ConstView dy, const float* mean, const float* inv_std, const float* gamma,
                        const double* sum_dy, const double* sum_dy_xhat, double count, View dx);

void leaky_relu_forward(ConstView x, float slope, View y);
void leaky_relu_backward(ConstView x, ConstView dy, float slope, View dx);

// Two inputs sum in double and round once (then the ReLU where one follows); more fold pairwise, as
// HalideEltwise::add.
void add(const std::vector<ConstView>& xs, std::optional<float> relu, View y);
void copy(ConstView x, View y);
void accumulate(ConstView x, View y);  // y += x

// Max and average pooling (blocked_pool.cpp), as PoolKernels' (kernels.hpp). Where the window's zeros lie
// outside x's view (Window::zeros_outside, a tile without margins at the tensor's border), they pad in their
// place with the pooling's padding; dx is x's view, and the places outside it get no gradient.
void pool_forward(PoolKind kind, ConstView x, View y, const Window& window);
void pool_backward(PoolKind kind, ConstView x, ConstView dy, View dx, const Window& window);

}  // namespace dsl::backend::blocked
