// What every kind's row prices with (kind_costs.hpp): sizes, a window's fields, oneDNN's layouts, and the
// terms a row leaves to the model unless it says otherwise.
#include <dsl/scheduler/kind_costs.hpp>

#include <dsl/base/error.hpp>
#include <dsl/scheduler/tiles.hpp>

#include <fmt/format.h>

namespace dsl::scheduler {

double elements(const Sizes& d) {
    double e = 1.0;
    for (std::int64_t v : d) e *= static_cast<double>(v);
    return e;
}

Dims dims_of(const Sizes& s) {
    Dims d{s[0], s[1], Space<std::int64_t>::filled(static_cast<int>(s.size()) - 2, 0)};
    for (int i = 0; i < d.rank(); ++i) d.space[i] = s[static_cast<std::size_t>(i) + 2];
    return d;
}

double blocked(Sizes d, double bytes) {
    d[1] = (d[1] + 15) / 16 * 16;
    return elements(d) * bytes;
}

Sizes spatial_field(const frontend::Spatial& p) { return Sizes(p.begin(), p.end()); }

Sizes CostTerms::window_dims(const Sizes& out) const {
    Sizes in{out[0], x[1]};
    for (std::size_t d = 2; d < out.size(); ++d) in.push_back(window_extent(layer, static_cast<int>(d - 2), out[d]));
    return in;
}

std::vector<TimeField> CostTerms::window_fields(const Sizes& out, bool dilation) const {
    std::vector<TimeField> f{
        {"x", window_dims(out)}, {"y", out}, {"k", spatial_field(layer.kernel)}, {"s", spatial_field(layer.stride)}};
    if (dilation) f.emplace_back("d", spatial_field(layer.dilation));
    return f;
}

void CostTerms::layouts(LayerCost& c, double a, double b, double out) const {
    if (device != Device::cpu) return;
    for (auto [i, v] : {std::pair{0, a}, std::pair{1, b}, std::pair{2, out}})
        c.scratch[static_cast<std::size_t>(i)] = std::max(c.scratch[static_cast<std::size_t>(i)], v);
}

double KindCosts::part_forward(const CostTerms& t, const LayerCost& whole, const Sizes& out) const {
    return whole.forward * elements(out) / t.ny;
}

double KindCosts::gradient_allreduce(const CostTerms& t) const {
    return t.allreduce(t.holders, t.held_params * word, t.holders_span);
}

}  // namespace dsl::scheduler
