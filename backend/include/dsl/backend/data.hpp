// Training data: a synthetic generator that is a pure function of (seed, sample, coordinates), so that each
// process makes just its own tile, and the trainer's DataSource over it or over .npy files.
#pragma once

#include <dsl/backend/synthetic.hpp>
#include <dsl/backend/tensor.hpp>
#include <dsl/backend/trainer.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace dsl::backend {

// The synthetic data set for a network: shapes from its input and label layers, classes from the loss that
// reads each label. Per-pixel labels get class squares of about 8 input pixels.
SyntheticData synthetic_for(const frontend::Network& net, std::uint64_t seed);

// The data `dsl run` trains on: synthetic (both paths empty), or samples from an [S, C, H, W] .npy file and
// labels from an [S] or [S, H, W] one, checked against the network's single input and label; step after
// step the sample index wraps around S. Null with the reason when the files do not fit the network.
std::unique_ptr<DataSource> make_data_source(const frontend::Network& net, std::uint64_t seed,
                                             const std::string& inputs_path, const std::string& labels_path,
                                             std::string& error);

}  // namespace dsl::backend
