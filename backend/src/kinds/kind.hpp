// A layer kind's row in the backend, in the spirit of the frontend's table (layer_kinds.hpp: what a kind is):
// how it runs forward and backward, how it holds and splits its parameters, what its kernels cost (the
// performance model's terms, scheduler::KindCosts), how calibration times its kernels and how it is exported
// to PyTorch. A file per kind (or family of kinds that share their code) in this folder; everything else finds
// a kind's behaviour here by the kind (rules_of), never by a switch of its own. A new kind is a row in the
// frontend's table, a row here, its kernels and its docs.
#pragma once

#include "../calibrate/kernel_probe.hpp"
#include "../train/trainer_impl.hpp"

#include <dsl/scheduler/kind_costs.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace dsl::backend {

// What a forward pass gives a layer: the step's data and first sample, whether it trains, and the total loss
// that loss layers add their weighted loss to.
struct ForwardPass {
    DataSource& data;
    std::int64_t first;
    bool training;
    double& loss;
};

// A tensor of a layer in its PyTorch translation's state_dict: its name after the layer's ("weight") and its
// shape; `steps`: one the checkpoint does not hold, the count of steps (batch norm's num_batches_tracked).
struct ExportedTensor {
    std::string suffix;
    std::vector<std::int64_t> shape;
    bool steps = false;
};

class KindRules : public scheduler::KindCosts {
public:
    using Impl = Trainer::Impl;
    using Slot = Impl::Slot;
    using Kind = ProfileEvent::Kind;

    // ---- Training: the trainer's state and the layer's slot (trainer_impl.hpp).
    // Forward over the layer's own tile (its operands ready, unless it overlaps their halo exchange).
    virtual void forward(Impl& t, Slot& s, int index, const ForwardPass& pass) const = 0;
    // A windowed kind's output over `out` (global coordinates within its tile) from what its window reads of
    // its input tile; `again`: its kernel ran last, on another part, with the same weights.
    virtual void forward_part(Impl& t, Slot& s, const Box& out, bool again) const;
    // What a windowed kind's window reads beyond the tensor's border: zeros (max pooling: -infinity).
    virtual float padding() const { return 0.0f; }
    // Backward: the input gradients (and weight gradients, whose sum it starts); `speaks`: this process's
    // tile counts in sums over processes (a replica's does not). None for data, and for losses, which write
    // their gradient in forward.
    virtual void backward(Impl& t, Slot& s, int index, bool speaks) const;
    // The compute its backward begins with: the input's gradient, the weights', or the whole of it.
    virtual Kind first_backward_part(const Impl& t, const Slot& s) const;

    // ---- Parameters (a kind with weights).
    // Its initial parameters, each element a pure function of `stream` and its index in the whole tensor.
    virtual void initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const;
    // This process's block of its whole weights (Slot::whole), and the extent of its bias (or shift).
    virtual Block weight_block(const Impl& t, const Slot& s) const;
    virtual std::int64_t bias_extent(const Slot& s) const { return s.layer->filters; }
    // Its weights' shape in checkpoints, from their whole dims.
    virtual std::vector<std::int64_t> weight_shape(const Dims& whole) const;
    // Its tensors in the PyTorch translation's state_dict, in order; `input` is the shape of its input.
    virtual std::vector<ExportedTensor> exported(const frontend::Layer& l, const frontend::Shape& input) const;

    // ---- Calibration: sets `p.run` to one call of the kernel the key names, where the kind has it.
    virtual void probe(KernelProbe& p) const { (void)p; }
};

// The row of a kind.
const KindRules& rules_of(frontend::OpKind op);

// A window's weights as checkpoints and PyTorch hold them: two channel counts (a convolution's filters and
// inputs, a transposed convolution's the other way round), then the kernel's extent along each spatial
// dimension (kh, kw for an image's; kd, kh, kw for a volume's).
std::vector<std::int64_t> window_weight_shape(std::int64_t first, std::int64_t second, const Index& kernel);
// A window's kernel has a rank one less than its input's shape (channels, then the spatial dimensions).
void check_kernel_rank(const frontend::Layer& l, const frontend::Shape& input);

}  // namespace dsl::backend
