// The arguments of a layer statement, bound to the layer's attributes (an elaboration step).
#pragma once

#include "evaluate.hpp"

#include <dsl/frontend/net_ast.hpp>
#include <dsl/frontend/network.hpp>

namespace dsl::frontend {

// Sets `layer`'s attributes from the arguments of `c` (evaluated in `env`), checking their names, positions
// and types against the layer kind's parameters, and the parameters not given to the table's defaults.
// Errors go to `report` (with `scope`, the elaborator's), one per argument.
void bind_layer_args(const Call& c, Layer& layer, int scope, const Env& env, Evaluator& evaluator,
                     const Evaluator::Report& report);

}  // namespace dsl::frontend
