// What a layer costs, and what of that its kind decides (and which of the trainer's paths its kernels take). The model (model.hpp) prices what every kind shares
// (halos, shuffles, overlap, the weight gradients' allreduce, the output tile) and asks the row of the layer's
// kind in a kind table for the rest: its kernels' times, the sums it blocks on, its kernels' scratch. The
// backend's kind table (backend/src/kinds/) holds those rows beside each kind's forward, backward and export,
// so that a new kind is priced where it runs. A row prices through CostTerms: the layer's tiles as kernel keys
// give them, and the model's means (calibrated times, else published figures; allreduces).
#pragma once

#include <dsl/frontend/network.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/platform.hpp>
#include <dsl/scheduler/schedule.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::scheduler {

inline constexpr double word = 4.0;  // bytes per float

// Sizes as kernel keys and predictions give them: [n, c, then the spatial extents].
using Sizes = std::vector<std::int64_t>;

double elements(const Sizes& d);
Dims dims_of(const Sizes& s);
// A tensor's bytes in oneDNN's blocked layouts, its channels (the second size) in blocks of 16, at `bytes` an
// element.
double blocked(Sizes d, double bytes);
// A per-dimension parameter (a window's kernel, stride...) as a key's field.
Sizes spatial_field(const frontend::Spatial& p);

// One layer under one distribution, per step, in seconds and bytes.
struct LayerCost {
    double forward = 0.0;           // compute of the output
    double forward_halo = 0.0;      // the input's halo exchange, the part not hidden behind interior compute
    double forward_sync = 0.0;      // blocking sums over processes (batch-norm statistics, pooling, the loss),
                                    // and the waits for processes that drifted behind
    double backward_data = 0.0;     // compute of the input's gradient
    double backward_weights = 0.0;  // compute of the weight gradient
    double backward_halo = 0.0;     // the gradient's margins sent back, the part not hidden behind dL/dw
    double backward_sync = 0.0;     // blocking sums in backward (batch-norm)
    double allreduce = 0.0;         // the weight gradient's allreduce, run while backward goes on
    double recompute = 0.0;         // recompute=on: its forward again in backward (compute, halo, sums)
    std::int64_t halo_bytes = 0;    // sent by the busiest process, forward and backward
    double memory = 0.0;            // bytes: the output tile, and the margins of the input it reads
    double output = 0.0;            // bytes of the output tile (with its margins), which recomputation drops
    double buffers = 0.0;           // bytes of halo message buffers
    // Bytes of scratch buffers, each shared by every layer and as large as the largest it held: per argument
    // position of a pass (0 to 2), those a CPU's convolution and fully connected kernels reorder their
    // arguments into, in oneDNN's layouts (channels in blocks of 16; onednn_kernels.cpp's arenas), or on a
    // GPU the dense 16-bit copies of x, w and y that its 16-bit convolutions use; (3) the dense span a transposed
    // convolution spreads its input over (deconv_over_conv); and (4) the trainer's, where the gradient of an output
    // that several layers read is computed before it is added.
    std::array<double, 5> scratch{};

    double forward_time() const { return forward + forward_halo + forward_sync; }
    double backward_time() const {
        return backward_data + backward_weights + backward_halo + backward_sync + recompute;
    }
    // What a schedule changes: everything but the allreduce, whose size is the same under every schedule.
    double time() const { return forward_time() + backward_time(); }
};

// A layer as its kind's row prices it, and the model's means of pricing.
class CostTerms {
public:
    virtual ~CostTerms() = default;

    const frontend::Layer& layer;
    const Distribution& dist;
    const Split& split;
    Sizes x;                    // what its kernel reads of its first input: its window (windowed kinds), else its tile
    Sizes y;                    // its largest output tile
    double nx = 0.0, ny = 0.0;  // their elements
    bool data_in = false;       // its first input is data, whose gradient nobody computes
    std::optional<Precision> products16;  // the 16-bit products its convolutions multiply with, if any
    Device device = Device::cpu;
    // Who sums what, and whether they span nodes: every process; the processes that hold a sample (its
    // spatial group); those that hold the same block of the weights (every process, or under F and C parts
    // those of the same F and C part).
    std::int64_t procs = 1, sample_group = 1, holders = 1;
    bool procs_span = false, holders_span = false;
    double held_params = 0.0;  // the parameters this process holds (its blocks of them)

    CostTerms(const frontend::Layer& l, const Distribution& d, const Split& s) : layer(l), dist(d), split(s) {}

    // A kernel's time (measured, interpolated or analytic, with 16-bit products where the layer has them),
    // its key asked of calibration. `outputs`: the output elements a convolution's thread blocks share out.
    virtual double run(const std::string& name, std::vector<TimeField> fields, double flops, double bytes,
                       double outputs = 0.0) const = 0;
    // The allreduce of `bytes` over `group` processes; `between_nodes`: they span nodes.
    virtual double allreduce(std::int64_t group, double bytes, bool between_nodes) const = 0;
    // Whether a group of `group` consecutive processes spans nodes.
    virtual bool spans_nodes(std::int64_t group) const = 0;

    // The kernel of this layer's kind in `phase`.
    std::string kernel(Phase phase) const { return kernel_name(layer.op, phase); }
    // The input sizes a window reads for output sizes `out`.
    Sizes window_dims(const Sizes& out) const;
    // A windowed kernel's key fields over outputs `out`: its input, output, kernel and stride (and dilation).
    std::vector<TimeField> window_fields(const Sizes& out, bool dilation) const;
    // The arguments of a CPU kernel's pass in oneDNN's layouts (LayerCost::scratch), per argument position.
    void layouts(LayerCost& c, double a, double b, double out) const;
};

// A layer kind's terms of the model.
class KindCosts {
public:
    virtual ~KindCosts() = default;
    // Its kernels' times (forward, and backward where there is an input gradient or weights), the sums it
    // blocks on, its kernels' scratch, and what it holds beyond its output.
    virtual void costs(const CostTerms& t, LayerCost& c) const = 0;
    // Its forward over a part `out` of its output tile (with overlap: the interior, then the strips), where
    // `whole` is the whole tile's cost: by default the whole tile's time in proportion to the outputs (what an
    // output reads depends on its global place: upsampling, transposed convolution); a window's kinds time the
    // kernel over the part.
    virtual double part_forward(const CostTerms& t, const LayerCost& whole, const Sizes& out) const;
    // The allreduce of its weight gradients (a layer with parameters): its held parameters over their holders.
    virtual double gradient_allreduce(const CostTerms& t) const;
    // Whether, with overlap, its input gradient's halo goes back while it computes its weight gradient.
    virtual bool halo_back_behind_weights() const { return false; }
    // Whether training keeps its tile in blocks of 16 channels where its neighbours allow (paths.hpp): its
    // kernels read and write such tiles as they are.
    virtual bool runs_blocked() const { return false; }
};

// The rows the model prices layers by, one per kind (the backend's: backend::kind_costs()).
class KindCostTable {
public:
    virtual ~KindCostTable() = default;
    virtual const KindCosts& of(frontend::OpKind op) const = 0;
};

}  // namespace dsl::scheduler
