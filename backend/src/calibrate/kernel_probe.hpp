// The kernel a calibration key names ("conv.forward k=3x3 s=1x1 threads=1 x=... y=..."), as the row of its
// layer kind sets it up (KindRules::probe, backend/src/kinds/): the key's sizes, window and fields, the
// kernels, and the buffers one call reads and writes, which live as long as `run`.
#pragma once

#include <dsl/backend/kernels.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/scheduler/kernel_names.hpp>
#include <dsl/scheduler/platform.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dsl::backend {

struct KernelProbe {
    KernelProbe(Kernels kernels, Memory& memory, DataSource& source, const frontend::Layer& input_layer,
                const scheduler::TimeKey& time_key, const frontend::LayerKind& layer_kind, scheduler::Phase pass)
        : k(kernels), mem(memory), data(source), input(input_layer), key(time_key), kind(layer_kind), phase(pass) {}

    Kernels k;
    Memory& mem;
    DataSource& data;  // where an input layer's tiles come from ("input.forward")
    const frontend::Layer& input;
    const scheduler::TimeKey& key;
    const frontend::LayerKind& kind;  // the first kind whose kernels the key names (relu for "activation")
    scheduler::Phase phase;
    Dims x, y;  // the key's sizes [n, c, spatial...] as dims; n 0 where it has none
    Window w;   // its window: a field the key leaves out is 1 along each of the input's dimensions

    // The key's field `name`, empty where it has none.
    const std::vector<std::int64_t>& field(const char* name) const { return key.field(name); }
    // A per-dimension field (a window's kernel, stride...), or `otherwise` where the key has none.
    Index spatial(const char* name, const Index& otherwise) const;
    // Buffers in the kernels' memory: zeros, small values (nothing overflows or denormalizes), a constant.
    Tensor zeros(Dims d) const { return Tensor(d, {}, mem); }
    Tensor filled(Dims d) const;
    Tensor constant(Dims d, float value) const;

    // What `run` reads and writes: tensors and parameters (p1, p2) in the kernels' memory; v1, v2 on the host.
    Tensor a, b, c, wt, p1, p2;
    std::vector<float> v1, v2;
    std::vector<double> s1, s2, s3, s4;
    std::vector<std::int32_t> labels;
    std::vector<Tensor> many;
    // One call of the kernel; empty where the row has none of that name and shape, with `why` where it knows
    // more.
    std::function<void()> run;
    std::string why;
};

// One dimension per parameter (or per element of a per-sample tensor): {1, n}.
inline Dims vector_of(std::int64_t n) { return Dims{1, n, {}}; }

}  // namespace dsl::backend
