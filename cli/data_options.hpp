// The data options that every verb reading a data set shares (`run`, `eval`, `predict`): --data NAME=FILE
// for each input and label, --inputs/--labels for a network's one input and one label, --shuffle and
// --layout, --transform and --normalize; and the backend's data source made from them.
#pragma once

#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/network.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dsl::cli {

struct DataOptions {
    std::vector<std::string> data;  // NAME=FILE, FILE a .npy file or FILE.h5:/path/to/dataset
    std::string inputs, labels;     // shorthands for the network's one input and one label
    bool shuffle = false;
    std::string normalize;  // "M,S", "M1,M2,...:S1,S2,..." or "file"
    std::vector<std::string> transforms;  // NAME=F,...: an input's element-wise functions, in order
    std::vector<std::string> layouts;     // NAME=NHWC|NDHWC|NCHW|NCDHW: how an input's file lays out a sample
    std::string augment;                  // "flip", "transpose", "flip,transpose": `dsl run` alone
    bool labels_optional = false;  // `dsl predict`: labels not given read as zeros (backend::DataFiles)
};

// Adds --data, --inputs, --labels, --shuffle, --layout, --transform and --normalize to `cmd`, filling `o`.
void add_data_options(CLI::App& cmd, DataOptions& o);

// The data source for `net` from `o`: synthetic data (a function of `seed`) when no file is named, else the
// files, checked against the network, with at least `batch` samples. Null with the message to print after
// "error: " when they do not fit (every process reaches the same answer from the same files).
std::unique_ptr<backend::DataSource> make_data(const DataOptions& o, const frontend::Network& net, std::uint64_t seed,
                                               std::int64_t batch, std::string& error);

}  // namespace dsl::cli
