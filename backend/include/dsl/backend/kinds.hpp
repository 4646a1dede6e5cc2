// The backend's kind table (backend/src/kinds/) as the performance model prices layers by it: each kind's
// kernels' times, sums and scratch, where the kind runs (scheduler::Model's `kinds`).
#pragma once

#include <dsl/scheduler/kind_costs.hpp>

namespace dsl::backend {

const scheduler::KindCostTable& kind_costs();

}  // namespace dsl::backend
