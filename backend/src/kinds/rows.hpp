// The rows of the backend's kind table (kind.hpp), a function each, defined in the kind's file; table.cpp puts
// them in the order of the frontend's kinds.
#pragma once

#include "kind.hpp"

namespace dsl::backend::rows {

const KindRules& input();  // data.cpp
const KindRules& label();
const KindRules& conv();                            // conv.cpp
const KindRules& deconv();                          // deconv.cpp
const KindRules& batchnorm();                       // batchnorm.cpp
const KindRules& groupnorm();                       // groupnorm.cpp
const KindRules& dropout();                         // dropout.cpp
const KindRules& elementwise(frontend::OpKind op);  // elementwise.cpp: relu, leaky_relu, sigmoid, tanh, gelu
const KindRules& pool(frontend::OpKind op);         // pool.cpp: maxpool, avgpool
const KindRules& global_avgpool();                  // global_avgpool.cpp
const KindRules& fc();                              // fc.cpp
const KindRules& add();                             // add.cpp
const KindRules& concat();                          // concat.cpp
const KindRules& cross_entropy();                   // losses.cpp: softmax_cross_entropy, pixel_cross_entropy
const KindRules& regression();                      // losses.cpp: mse, l1, bce_with_logits
const KindRules& upsample();                        // upsample.cpp

}  // namespace dsl::backend::rows
