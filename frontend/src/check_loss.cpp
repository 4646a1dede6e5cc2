// Whether a network can be trained: it needs a loss, and where it has none the message says which one fits.
#include <dsl/frontend/passes.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace dsl::frontend {

namespace {

// The loss (and label) that would train `out`, as a statement to add; empty where no loss fits its shape.
std::string suggested_loss(const Network& net, const Layer& out) {
    const auto& d = out.shape.dims;
    // Logits per sample ([N, K], or global pooling's ones), or per pixel or voxel ([N, K, spatial...]).
    const bool spatial = d.size() == 3 || d.size() == 4;
    const bool ones = spatial && std::all_of(d.begin() + 1, d.end(), [](std::int64_t v) { return v == 1; });
    const bool per_sample = d.size() == 1 || ones;
    const bool per_pixel = spatial && !per_sample;
    if (!per_sample && !per_pixel) return {};
    const char* kind = per_pixel ? "pixel_cross_entropy" : "softmax_cross_entropy";
    const std::vector<std::int64_t> label_dims =
        per_pixel ? std::vector<std::int64_t>(d.begin() + 1, d.end()) : std::vector<std::int64_t>{};
    for (const Layer& l : net.layers)
        if (l.op == OpKind::label && l.shape.dims.size() == label_dims.size())
            return fmt::format("'loss = {} from {}, {}'", kind, out.name, l.name);
    std::string label = "label y [N";
    for (std::int64_t v : label_dims) label += fmt::format(", {}", v);
    label += "]";
    return fmt::format("'loss = {} from {}, y', with '{}'", kind, out.name, label);
}

}  // namespace

bool check_loss(const LoadedNetwork& loaded, Severity severity, Diagnostics& diags) {
    const Network& net = loaded.net;
    for (const Layer& l : net.layers)
        if (l.is_loss()) return true;
    // The network's output: the last layer that nothing reads (layers are in topological order).
    std::vector<bool> read(net.layers.size(), false);
    for (const Layer& l : net.layers)
        for (int in : l.inputs)
            if (in >= 0) read[static_cast<std::size_t>(in)] = true;
    const Layer* out = nullptr;
    for (std::size_t i = net.layers.size(); i-- > 0 && !out;)
        if (!net.layers[i].is_data() && !read[i]) out = &net.layers[i];
    Location at;
    if (loaded.file.source) at = Location{loaded.file.source, 1, 1, 1};
    if (out) {
        at = out->loc;
        // A layer made inside a block is pointed at through the top-level statement that instantiated it.
        if (!out->instances.empty())
            for (const Stmt& st : loaded.file.body)
                if (!st.name.empty() && st.name == out->instances[0]) at = st.loc;
    }
    Diagnostic& d = severity == Severity::error
                        ? diags.error(at, "the network has no loss layer: there is nothing to train")
                        : diags.warning(at, "the network has no loss layer: there is nothing to train");
    if (out) {
        const std::string loss = suggested_loss(net, *out);
        Diagnostics::note(d, at,
                          loss.empty() ? fmt::format("'{}' {} is its output; a loss layer reads the logits and a label",
                                                     out->name, out->shape.str())
                                       : fmt::format("'{}' {} is its output: add a loss such as {}", out->name,
                                                     out->shape.str(), loss));
    }
    return false;
}

}  // namespace dsl::frontend
