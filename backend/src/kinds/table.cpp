// The backend's kind table: a row per kind of the frontend's table (layer_kinds.hpp), in its order, and what
// every row does unless it says otherwise.
#include "rows.hpp"

#include <dsl/backend/kinds.hpp>

#include <fmt/format.h>

#include <vector>

namespace dsl::backend {

namespace {

using frontend::OpKind;

std::vector<const KindRules*> make_table() {
    const std::vector<std::pair<OpKind, const KindRules*>> rows{
        {OpKind::input, &rows::input()},
        {OpKind::label, &rows::label()},
        {OpKind::conv, &rows::conv()},
        {OpKind::batchnorm, &rows::batchnorm()},
        {OpKind::groupnorm, &rows::groupnorm()},
        {OpKind::dropout, &rows::dropout()},
        {OpKind::relu, &rows::elementwise(OpKind::relu)},
        {OpKind::leaky_relu, &rows::elementwise(OpKind::leaky_relu)},
        {OpKind::sigmoid, &rows::elementwise(OpKind::sigmoid)},
        {OpKind::tanh, &rows::elementwise(OpKind::tanh)},
        {OpKind::gelu, &rows::elementwise(OpKind::gelu)},
        {OpKind::maxpool, &rows::pool(OpKind::maxpool)},
        {OpKind::avgpool, &rows::pool(OpKind::avgpool)},
        {OpKind::global_avgpool, &rows::global_avgpool()},
        {OpKind::fc, &rows::fc()},
        {OpKind::add, &rows::add()},
        {OpKind::concat, &rows::concat()},
        {OpKind::softmax_cross_entropy, &rows::cross_entropy()},
        {OpKind::pixel_cross_entropy, &rows::cross_entropy()},
        {OpKind::upsample, &rows::upsample()},
        {OpKind::deconv, &rows::deconv()},
        {OpKind::mse, &rows::regression()},
        {OpKind::l1, &rows::regression()},
        {OpKind::bce_with_logits, &rows::regression()},
    };
    const std::vector<frontend::LayerKind>& kinds = frontend::layer_kinds();
    std::vector<const KindRules*> table(kinds.size(), nullptr);
    for (const auto& [op, row] : rows) {
        const auto i = static_cast<std::size_t>(op);
        DSL_INTERNAL_CHECK(i < table.size() && !table[i],
                           fmt::format("the backend's kind table has '{}' twice", frontend::op_name(op)));
        table[i] = row;
    }
    for (const frontend::LayerKind& k : kinds)
        DSL_INTERNAL_CHECK(table[static_cast<std::size_t>(k.op)],
                           fmt::format("the backend's kind table has no row for '{}'", k.name));
    return table;
}

// The rows as the performance model reads them.
class CostTable final : public scheduler::KindCostTable {
public:
    const scheduler::KindCosts& of(OpKind op) const override { return rules_of(op); }
};

}  // namespace

const KindRules& rules_of(OpKind op) {
    static const std::vector<const KindRules*> table = make_table();
    return *table[static_cast<std::size_t>(op)];
}

const scheduler::KindCostTable& kind_costs() {
    static const CostTable table;
    return table;
}

void KindRules::forward_part(Impl& t, Slot& s, const Box& out, bool again) const {
    (void)t, (void)out, (void)again;
    DSL_INTERNAL_CHECK(false, fmt::format("layer '{}' of kind '{}' has no window to compute by parts", s.layer->name,
                                          s.layer->kind().name));
}

void KindRules::backward(Impl& t, Slot& s, int index, bool speaks) const {
    (void)t, (void)s, (void)index, (void)speaks;
}

KindRules::Kind KindRules::first_backward_part(const Impl& t, const Slot& s) const {
    (void)t, (void)s;
    return Kind::backward;
}

void KindRules::initialize(Impl& t, Slot& s, int index, std::uint64_t stream) const {
    (void)t, (void)s, (void)index, (void)stream;
}

Block KindRules::weight_block(const Impl& t, const Slot& s) const {
    (void)t;
    DSL_INTERNAL_CHECK(false, "weight blocks of layer '" + s.layer->name + "', which has no parameters");
    return {};
}

std::vector<std::int64_t> KindRules::weight_shape(const Dims& whole) const {
    (void)whole;
    DSL_INTERNAL_CHECK(false, "the weights' shape of a layer kind without parameters");
    return {};
}

std::vector<ExportedTensor> KindRules::exported(const frontend::Layer& l, const frontend::Shape& input) const {
    (void)input;
    DSL_INTERNAL_CHECK(false, fmt::format("layer '{}' has parameters the export does not know", l.name));
    return {};
}

std::vector<std::int64_t> window_weight_shape(std::int64_t first, std::int64_t second, const Index& kernel) {
    std::vector<std::int64_t> shape{first, second};
    shape.insert(shape.end(), kernel.begin(), kernel.end());
    return shape;
}

}  // namespace dsl::backend
