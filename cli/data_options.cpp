// --data, --inputs, --labels, --shuffle, --layout, --transform and --normalize: the command-line side of the data sources in
// backend/data.hpp.
#include "data_options.hpp"

#include <dsl/backend/data.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

namespace dsl::cli {

void add_data_options(CLI::App& cmd, DataOptions& o) {
    cmd.add_option("--data", o.data,
                   "NAME=FILE: the samples of input or label layer NAME, from a .npy file or an HDF5 data set "
                   "FILE.h5:/path (repeat for every input and label; default: synthetic data)")
        ->type_name("NAME=FILE")
        ->allow_extra_args(false);  // one file per --data: the words after it are the positional NET, SCHED
    cmd.add_option("--inputs", o.inputs,
                   "The network's one input from a .npy file [S, C, H, W] or FILE.h5:/path (--data NAME=FILE "
                   "for that input)");
    cmd.add_option("--labels", o.labels,
                   "The network's one label from a .npy file [S] or [S, H, W] or FILE.h5:/path (with --inputs)");
    cmd.add_flag("--shuffle", o.shuffle,
                 "A new order of the samples every epoch, from the seed and the epoch (the same under any "
                 "schedule)");
    cmd.add_option("--layout", o.layouts,
                   "NAME=NHWC|NDHWC: input NAME's file stores each sample channels-last (an image's [H, W, C], a "
                   "volume's [D, H, W, C]); NCHW and NCDHW, channels first, are the default")
        ->type_name("NAME=LAYOUT")
        ->allow_extra_args(false);
    cmd.add_option("--transform", o.transforms,
                   "NAME=F,...: element-wise functions of input NAME's values as they are read, in order, after "
                   "the conversion to float and before --normalize: log1p, sqrt, clip(A, B) (repeat for each input)")
        ->type_name("NAME=F,...")
        ->allow_extra_args(false);
    cmd.add_option("--normalize", o.normalize,
                   "Inputs become (x - mean) / std per channel: MEAN,STD for every channel, MEANS:STDS as comma "
                   "lists with one value per channel, or 'file' (the HDF5 data set's attributes 'mean' and 'std')")
        ->type_name("M,S|M1,..:S1,..|file");
}

namespace {

// The one layer of kind `op` that --inputs or --labels stands for, or -1 with the reason.
int only_layer(const frontend::Network& net, frontend::OpKind op, const char* flag, std::string& error) {
    int found = -1, count = 0;
    std::string names;
    for (std::size_t i = 0; i < net.layers.size(); ++i)
        if (net.layers[i].op == op) {
            found = static_cast<int>(i), ++count;
            names += (names.empty() ? "'" : ", '") + net.layers[i].name + "'";
        }
    if (count == 1) return found;
    error = fmt::format("{} stands for the network's one {}, but it has {}: give --data NAME=FILE for each", flag,
                        op == frontend::OpKind::input ? "input" : "label", count == 0 ? "none" : names);
    return -1;
}

}  // namespace

std::unique_ptr<backend::DataSource> make_data(const DataOptions& o, const frontend::Network& net, std::uint64_t seed,
                                               std::int64_t batch, std::string& error) {
    backend::DataFiles files;
    files.shuffle = o.shuffle;
    files.normalize = o.normalize;
    files.labels_optional = o.labels_optional;
    files.augment = o.augment;
    if (o.data.empty() && (!o.inputs.empty() || !o.labels.empty())) {
        if (o.inputs.empty()) {
            error = "--labels needs --inputs (the samples those labels belong to)";
            return nullptr;
        }
        if (o.labels.empty() && !o.labels_optional) {
            error = "--inputs needs --labels (the class of every sample, or of every pixel)";
            return nullptr;
        }
    }
    for (const auto& [flag, path, op] : {std::tuple{"--inputs", &o.inputs, frontend::OpKind::input},
                                         std::tuple{"--labels", &o.labels, frontend::OpKind::label}}) {
        if (path->empty()) continue;
        const int l = only_layer(net, op, flag, error);
        if (l < 0) return nullptr;
        files.files.emplace_back(net.layers[static_cast<std::size_t>(l)].name, *path);
    }
    // NAME=VALUE options, each into its list of pairs.
    const auto pairs = [&](const char* flag, const std::vector<std::string>& given, const char* form,
                           std::vector<std::pair<std::string, std::string>>& into) {
        for (const std::string& t : given) {
            const std::size_t eq = t.find('=');
            if (eq == std::string::npos || eq == 0 || eq + 1 == t.size()) {
                error = fmt::format("{} '{}': give {}", flag, t, form);
                return false;
            }
            into.emplace_back(t.substr(0, eq), t.substr(eq + 1));
        }
        return true;
    };
    if (!pairs("--layout", o.layouts, "NAME=NHWC (an input's name, then its file's layout)", files.layouts) ||
        !pairs("--transform", o.transforms,
               "NAME=F,... (an input's name, then its functions: log1p, sqrt, clip(A, B))", files.transforms) ||
        !pairs("--data", o.data, "NAME=FILE (an input or label layer's name, then its file)", files.files))
        return nullptr;
    auto source = backend::make_data_source(net, seed, files, error);
    if (!source) return nullptr;
    if (source->samples() >= 0 && source->samples() < batch) {
        error = fmt::format("the data set holds {} sample{}, fewer than one mini-batch of {}", source->samples(),
                            source->samples() == 1 ? "" : "s", batch);
        return nullptr;
    }
    return source;
}

}  // namespace dsl::cli
