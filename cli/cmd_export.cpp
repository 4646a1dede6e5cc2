// `dsl export NET --load CK -o model.pt`: a checkpoint's weights as the state_dict of the network in PyTorch
// (torch.save's file, or .npz), for load_state_dict on the module bench/pytorch_mesh.py builds.
#include "commands.hpp"
#include "planning.hpp"
#include "report.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/backend/torch_export.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>

#include <sys/stat.h>
#include <unistd.h>

namespace dsl::cli {

namespace {

struct ExportOptions {
    std::string net, load, output, format, dump_after;
    bool force = false;
};

int run_export(const ExportOptions& o) {
    namespace fs = std::filesystem;
    const bool npz = o.format.empty() ? fs::path(o.output).extension() == ".npz" : o.format == "npz";
    // What is wrong with the output is said before anything is read.
    if (const std::string bad = unwritable(o.output); !bad.empty()) throw UserError("-o: " + bad);
    std::error_code ec;
    if (!o.force && fs::exists(fs::symlink_status(o.output, ec)))
        throw UserError(fmt::format("-o '{}' exists; it is left as it is (--force replaces it)", o.output));

    SourceManager sources;
    Diagnostics diags;
    auto checked = scheduler::Pipeline(stage_dump(o.dump_after)).check(o.net, "", sources, diags);
    diags.render(std::cerr, stderr_color());
    if (!checked) return user_error;
    const frontend::Network& net = checked->net.net;

    if (!fs::is_directory(o.load, ec))
        throw UserError(fmt::format(
            "--load '{}': {}", o.load,
            fs::exists(o.load, ec) ? "not a folder (a checkpoint is one, from dsl run --save)" : "no such checkpoint"));
    std::string error;
    std::string note;
    const auto checkpoint = backend::load_checkpoint(o.load, error, &note);
    if (!note.empty()) std::cerr << "note: " << note << "\n";
    if (!checkpoint) throw UserError(fmt::format("cannot read the checkpoint '{}': {}", o.load, error));
    const auto arrays = backend::torch_state_dict(net, *checkpoint, error);
    if (!arrays)
        throw UserError(fmt::format("the checkpoint '{}' does not fit the network '{}': {}", o.load, o.net, error));
    const auto bytes = npz ? backend::npz_bytes(*arrays, error) : backend::torch_save_bytes(*arrays, error);
    if (!bytes) throw UserError(fmt::format("cannot export to '{}': {}", o.output, error));
    if (!write_file(o.output, *bytes, o.force, error)) throw UserError(error);

    std::int64_t params = 0;
    for (const auto& l : net.layers) params += l.params;
    std::cout << fmt::format("{}: {} tensors, {} parameters of {} at step {}, as {}\n", o.output, arrays->size(),
                             params, o.net, checkpoint->meta.value("step", std::int64_t{0}),
                             npz ? "numpy.load reads them" : "a PyTorch state_dict (torch.load)");
    return ok;
}

}  // namespace

void setup_export(CLI::App& app, Action& action) {
    auto o = std::make_shared<ExportOptions>();
    CLI::App* sub = app.add_subcommand(
        "export", "Write a checkpoint's weights as a PyTorch state_dict (.pt) or a NumPy .npz for the same network");
    sub->add_option("NET", o->net, "The network (.net) the checkpoint was trained for")->required();
    sub->add_option("--load", o->load,
                    "The checkpoint: a folder that 'dsl run --save' wrote (the one its 'latest' names), or one of its "
                    "checkpoints (DIR/step-N)")
        ->required()
        ->check(folder_name());
    sub->add_option("-o,--output", o->output, "The file to write (model.pt, weights.npz)")
        ->required()
        ->check(file_name());
    sub->add_option("--format", o->format,
                    "pt (torch.save's zip) or npz (default: npz for a name ending .npz, else pt)")
        ->check(CLI::IsMember({"pt", "npz"}));
    sub->add_flag("--force", o->force, "Replace the output file if it exists");
    add_dump_after(*sub, o->dump_after, scheduler::Stage::shapes);
    sub->footer(
        "The keys are those of the module bench/pytorch_mesh.py builds for NET (mods.<layer index>.weight, ...): "
        "parameters, batch-norm running statistics and num_batches_tracked, no optimizer state.\n"
        "Example:\n  dsl export samples/mesh_tiny.net --load ck -o model.pt");
    sub->callback([o, &action] { action = [o] { return run_export(*o); }; });
}

}  // namespace dsl::cli
