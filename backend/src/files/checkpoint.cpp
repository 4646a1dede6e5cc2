// Checkpoint folders: written beside their destination and renamed into place (exchanged with the old one
// where the file system can), read back with every file checked against the manifest.
#include "checkpoint_folder.hpp"

#include <dsl/backend/checkpoint.hpp>

#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/base/crash_point.hpp>
#include <dsl/base/source.hpp>
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsl::backend {

namespace fs = std::filesystem;

namespace {

constexpr const char* format_name = "dsl-checkpoint";
constexpr int format_version = 1;

// A tensor's name becomes a file name in the folder, so it may not leave the folder or hide in it.
bool valid_name(const std::string& name) {
    return !name.empty() && name.size() < 240 && name[0] != '.' && name.find('/') == std::string::npos &&
           name.find('\\') == std::string::npos && name.find('\0') == std::string::npos;
}

bool valid_file(const std::string& file) {
    return valid_name(file) && file.size() > 4 && file.compare(file.size() - 4, 4, ".npy") == 0;
}

void fsync_path(const fs::path& p) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

bool write_text(const fs::path& path, const std::string& text, std::string& error) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        error = fmt::format("{}: cannot write: {}", path.string(), std::strerror(errno));
        return false;
    }
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) error = fmt::format("{}: write failed: {}", path.string(), std::strerror(errno));
    return ok;
}

std::optional<nlohmann::json> read_manifest(const fs::path& dir, std::string& error) {
    const fs::path path = dir / "manifest.json";
    std::string text, why;
    std::error_code ec;
    if (!fs::exists(path, ec)) {
        error = fmt::format("'{}' has no manifest.json: not a dsl checkpoint", dir.string());
        return std::nullopt;
    }
    if (!read_regular_file(path.string(), text, why)) {
        error = fmt::format("{}: cannot read: {}", path.string(), why);
        return std::nullopt;
    }
    auto j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
        error = fmt::format("{}: bad manifest: not a JSON object", path.string());
        return std::nullopt;
    }
    if (!j.contains("format") || j["format"] != format_name) {
        error = fmt::format("{}: bad manifest: \"format\" is not \"{}\"", path.string(), format_name);
        return std::nullopt;
    }
    if (!j.contains("version") || !j["version"].is_number_integer()) {
        error = fmt::format("{}: bad manifest: no integer \"version\"", path.string());
        return std::nullopt;
    }
    if (j["version"].get<std::int64_t>() != format_version) {
        error = fmt::format("{}: checkpoint version {} is not the version this dsl reads ({})", path.string(),
                            j["version"].get<std::int64_t>(), format_version);
        return std::nullopt;
    }
    if (!j.contains("tensors") || !j["tensors"].is_array()) {
        error = fmt::format("{}: bad manifest: no \"tensors\" array", path.string());
        return std::nullopt;
    }
    return j;
}

std::string dtype_name(NpyType t) { return t == NpyType::f4 ? "float32" : npy_descr(t); }

}  // namespace

std::optional<std::int64_t> count_of(const nlohmann::json& j) {
    if (j.is_number_unsigned()) {
        const auto v = j.get<std::uint64_t>();
        if (v <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            return static_cast<std::int64_t>(v);
    } else if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
        return j.get<std::int64_t>();
    }
    return std::nullopt;
}

std::optional<Checkpoint> read_checkpoint(const fs::path& dir, bool copy, std::set<std::string>& files,
                                          std::string& error) {
    const auto manifest = read_manifest(dir, error);
    if (!manifest) return std::nullopt;
    const std::string where = (dir / "manifest.json").string();
    Checkpoint ckpt;
    if (manifest->contains("meta") && (*manifest)["meta"].is_object()) ckpt.meta = (*manifest)["meta"];
    std::set<std::string> names;
    std::error_code ec;
    for (const auto& t : (*manifest)["tensors"]) {
        if (!t.is_object() || !t.contains("name") || !t["name"].is_string() || !t.contains("file") ||
            !t["file"].is_string() || !t.contains("shape") || !t["shape"].is_array()) {
            error = fmt::format("{}: bad manifest: a tensor needs \"name\", \"file\" and \"shape\"", where);
            return std::nullopt;
        }
        CheckpointTensor out;
        out.name = t["name"].get<std::string>();
        const std::string file = t["file"].get<std::string>();
        if (!valid_file(file)) {
            error = fmt::format("{}: bad manifest: '{}' is not a .npy file in the checkpoint's folder", where, file);
            return std::nullopt;
        }
        if (!names.insert(out.name).second || !files.insert(file).second) {
            error = fmt::format("{}: bad manifest: tensor '{}' or its file appears twice", where, out.name);
            return std::nullopt;
        }
        for (const auto& d : t["shape"]) {
            const auto size = count_of(d);
            if (!size) {
                error = fmt::format("{}: bad manifest: the shape of '{}' is not a list of sizes", where, out.name);
                return std::nullopt;
            }
            out.shape.push_back(*size);
        }
        const fs::path path = dir / file;
        const auto status = fs::status(path, ec);
        if (!fs::exists(status)) {
            error = fmt::format("{}: missing (the manifest lists it for '{}')", path.string(), out.name);
            return std::nullopt;
        }
        auto npy = NpyFile::open(path.string(), error);  // refuses a FIFO without waiting on it
        if (!npy) return std::nullopt;
        if (npy->dtype() != NpyType::f4) {
            error = fmt::format("{}: dtype '{}', expected float32", path.string(), dtype_name(npy->dtype()));
            return std::nullopt;
        }
        if (npy->shape() != out.shape) {
            error = fmt::format("{}: shape mismatch: the manifest says {}, the file holds {}", path.string(),
                                shape_str(out.shape), shape_str(npy->shape()));
            return std::nullopt;
        }
        if (copy) {
            out.data.resize(static_cast<std::size_t>(npy->elements()));
            if (!out.data.empty()) std::memcpy(out.data.data(), npy->data(), out.data.size() * sizeof(float));
        }
        ckpt.tensors.push_back(std::move(out));
    }
    return ckpt;
}

bool replaceable(const fs::path& dir, std::string& error) {
    std::error_code ec;
    if (fs::is_empty(dir, ec)) return true;
    std::string why;
    std::set<std::string> ours;
    if (!read_checkpoint(dir, false, ours, why)) {
        if (!fs::exists(dir / "manifest.json", ec))
            error = fmt::format(
                "'{}' exists, is not empty and has no manifest.json: it is not a dsl checkpoint, and it "
                "is left as it is",
                dir.string());
        else
            error = fmt::format("'{}' is not a dsl checkpoint ({}); it is left as it is", dir.string(), why);
        return false;
    }
    ours.insert("manifest.json");
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!ours.count(name) || !e.is_regular_file() || e.is_symlink()) {
            error = fmt::format(
                "'{}' is a dsl checkpoint but also holds '{}', which is not part of it; it is left "
                "as it is",
                dir.string(), name);
            return false;
        }
    }
    if (ec) {
        error = fmt::format("cannot list '{}': {}", dir.string(), ec.message());
        return false;
    }
    return true;
}

namespace {

// The file a save writes first into its temporary folder, and the stale-folder cleanup looks for: it names
// the process and its machine, so that only folders dsl made are ever removed.
constexpr const char* marker_name = ".dsl-partial";

std::string marker_text(const Writer& w) {
    return fmt::format("a dsl checkpoint being written by process {} on host '{}'\n", w.pid, w.host);
}

}  // namespace

bool mark(const fs::path& folder, const Writer& writer, std::string& error) {
    return write_text(folder / marker_name, marker_text(writer), error);
}

bool ours_to_remove(const fs::path& folder, const Writer& writer) {
    std::error_code ec;
    if (!fs::is_directory(fs::symlink_status(folder, ec))) return false;
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(folder, ec)) {
        const std::string f = e.path().filename().string();
        if (e.is_symlink() || !e.is_regular_file() || (f != marker_name && f != "manifest.json" && !valid_file(f)))
            return false;
        files.push_back(f);
    }
    if (ec) return false;
    if (files.empty()) return true;
    std::string text, why;
    const std::string whole = marker_text(writer);
    if (std::find(files.begin(), files.end(), marker_name) == files.end()) {
        // A save killed between exchanging the old checkpoint with its temporary folder and marking it: the
        // old checkpoint, whole, under the temporary name.
        std::set<std::string> listed;
        return read_checkpoint(folder, false, listed, why).has_value();
    }
    if (!read_regular_file((folder / marker_name).string(), text, why)) return false;
    // The marker's start: a save killed while it marked its folder, or the old checkpoint it was replacing.
    return whole.compare(0, text.size(), text) == 0;
}

void remove_ours(const fs::path& folder) {
    std::error_code ec;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(folder, ec))
        if (e.path().filename() != marker_name) files.push_back(e.path());
    for (const auto& f : files) {
        fs::remove(f, ec);
        if (&f == &files.front()) crash_point();  // a kill after each would try the same thing again
    }
    fs::remove(folder / marker_name, ec);
    fs::remove(folder, ec);
}

void remove_stale(const fs::path& parent, const std::function<bool(const std::string&)>& named,
                  std::vector<std::string>* removed) {
    std::error_code ec;
    std::vector<std::pair<fs::path, Writer>> stale;
    const Writer me = this_writer();
    for (const auto& e : fs::directory_iterator(parent, ec)) {
        const std::string f = e.path().filename().string();
        if (f.size() < 2 || f[0] != '.') continue;
        // ".NAME.tmp-PID-HOST": the name and the host may hold ".tmp-" too, so every place is tried.
        for (const std::string kind : {".tmp-", ".old-"})
            for (std::size_t at = f.find(kind, 2); at != std::string::npos; at = f.find(kind, at + 1)) {
                const auto writer = writer_of(std::string_view(f).substr(at + kind.size()));
                if (!writer || !named(f.substr(1, at - 1))) continue;
                const bool dead = (writer->pid == me.pid && writer->host == me.host) || writer_ended(*writer);
                if (dead && ours_to_remove(e.path(), *writer)) stale.emplace_back(e.path(), *writer);
            }
    }
    std::sort(stale.begin(), stale.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    stale.erase(
        std::unique(stale.begin(), stale.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
        stale.end());
    for (const auto& [p, writer] : stale) {
        // A whole checkpoint that a killed save had moved aside is marked before its first file goes: a kill
        // on the way then leaves a folder that is still known for debris, not a damaged checkpoint.
        std::string ignored;
        if (!fs::exists(p / marker_name, ec) && !mark(p, writer, ignored)) continue;
        remove_ours(p);
        if (removed && !fs::exists(fs::symlink_status(p, ec))) removed->push_back(p.string());
    }
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

bool is_checkpoint(const std::string& dir) {
    std::string why;
    return read_manifest(dir, why).has_value();
}

bool save_target(const std::string& dir, fs::path& target, fs::path& parent, std::string& error) {
    target = fs::path(dir).lexically_normal();
    if (!target.has_filename()) target = target.parent_path();  // "ckpt/"
    const std::string name = target.filename().string();
    if (name.empty() || name == "." || name == "..") {
        error = fmt::format("'{}' does not name a folder to create", dir);
        return false;
    }
    parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    return true;
}

fs::path temporary(const fs::path& target, const char* kind) {
    return target.parent_path() / fmt::format(".{}.{}-{}", target.filename().string(), kind, writer_tag(this_writer()));
}

bool can_save_checkpoint(const std::string& dir, std::string& error) {
    fs::path target, parent;
    if (!save_target(dir, target, parent, error)) return false;
    std::error_code ec;
    const auto status = fs::symlink_status(target, ec);
    if (fs::exists(status)) {
        if (fs::is_symlink(status) || !fs::is_directory(status)) {
            error = fmt::format("'{}' exists and is not a folder; it is left as it is", target.string());
            return false;
        }
        if (!replaceable(target, error)) return false;
    }
    // The folders the save would create, up to the first that exists: that one must be a folder we may
    // write in.
    fs::path existing = parent;
    while (!fs::exists(existing, ec) && existing.has_relative_path() && existing.has_parent_path() &&
           existing.parent_path() != existing)
        existing = existing.parent_path();
    if (!fs::exists(existing, ec)) existing = ".";
    if (!fs::is_directory(existing, ec)) {
        error = fmt::format("'{}' is not a folder", existing.string());
        return false;
    }
    if (::access(existing.c_str(), W_OK | X_OK) != 0) {
        error = fmt::format("cannot write in '{}': {}", existing.string(), std::strerror(errno));
        return false;
    }
    // A folder of this process's name for its temporary copy that is not its own debris would block the
    // save at the end.
    for (const char* kind : {"tmp", "old"}) {
        const fs::path tmp = temporary(target, kind);
        if (fs::exists(fs::symlink_status(tmp, ec)) && !ours_to_remove(tmp, this_writer())) {
            error = fmt::format("'{}' is in the way of the save's temporary copy; it is left as it is", tmp.string());
            return false;
        }
    }
    return true;
}

bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensorRef>& tensors,
                     const nlohmann::json& meta, std::string& error, std::vector<std::string>* removed) {
    std::set<std::string> names;
    for (const auto& t : tensors) {
        if (!valid_name(t.name)) {
            error = fmt::format("'{}' cannot be a tensor name in a checkpoint (it becomes a file name)", t.name);
            return false;
        }
        if (!names.insert(t.name).second) {
            error = fmt::format("tensor '{}' appears twice", t.name);
            return false;
        }
        std::int64_t n = 1;
        for (auto d : t.shape) n *= d;
        if (n != static_cast<std::int64_t>(t.data.size())) {
            error = fmt::format("tensor '{}': shape {} has {} elements, the data {}", t.name, shape_str(t.shape), n,
                                t.data.size());
            return false;
        }
    }

    fs::path target, parent;
    if (!save_target(dir, target, parent, error)) return false;
    const std::string name = target.filename().string();
    remove_stale(
        parent, [&](const std::string& n) { return n == name; }, removed);
    if (!can_save_checkpoint(dir, error)) return false;
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (!fs::is_directory(parent, ec)) {
        error = fmt::format("cannot create the folder '{}'", parent.string());
        return false;
    }
    const bool exists = fs::exists(fs::symlink_status(target, ec));

    // The temporary folder is marked before anything is written in it, so that, should this process die,
    // a later save knows it for debris; the mark is taken off just before the folder becomes the checkpoint.
    const Writer pid = this_writer();
    const fs::path tmp = temporary(target, "tmp");
    if (!fs::create_directory(tmp, ec)) {
        error = fmt::format("cannot create '{}': {}", tmp.string(), ec ? ec.message() : "it exists");
        return false;
    }
    auto fail = [&] {
        std::string ignored;
        if (mark(tmp, pid, ignored) && ours_to_remove(tmp, pid)) remove_ours(tmp);
        return false;
    };
    crash_point();
    if (!mark(tmp, pid, error)) {
        fs::remove(tmp, ec);
        return false;
    }
    crash_point();

    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : tensors) {
        const std::string file = t.name + ".npy";
        if (!write_npy((tmp / file).string(), t.shape, t.data.data(), error)) return fail();
        if (&t == &tensors.front()) crash_point();  // a kill after each would try the same thing again
        list.push_back({{"name", t.name}, {"file", file}, {"shape", t.shape}, {"dtype", "float32"}});
    }
    const nlohmann::json manifest{{"format", format_name},
                                  {"version", format_version},
                                  {"tensors", std::move(list)},
                                  {"meta", meta.is_null() ? nlohmann::json::object() : meta}};
    crash_point();
    if (!write_text(tmp / "manifest.json", manifest.dump(2) + "\n", error)) return fail();
    crash_point();
    // The old checkpoint, once out of the way, is marked in its turn and removed.
    auto drop = [&](const fs::path& old) {
        std::string ignored;
        if (mark(old, pid, ignored) && ours_to_remove(old, pid)) remove_ours(old);
    };
    auto unmark = [&](const fs::path& folder) {
        if (!fs::remove(folder / marker_name, ec)) {
            error = fmt::format("cannot write in '{}': {}", folder.string(), ec.message());
            return false;
        }
        fsync_path(folder);
        return true;
    };
    if (!unmark(tmp)) return fail();
    crash_point();

    if (!exists) {
        // Fails rather than replace a non-empty folder that appeared meanwhile.
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            error = fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), target.string(), std::strerror(errno));
            return fail();
        }
        crash_point();
    } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        crash_point();
        drop(tmp);  // now the old checkpoint
    } else {
        // No atomic exchange on this file system: move the old one aside, the new one in, then drop the old.
        // (A folder in the way of `old` that is not empty makes the first rename fail.)
        const fs::path old = temporary(target, "old");
        if (::rename(target.c_str(), old.c_str()) != 0) {
            error = fmt::format("cannot move '{}' aside: {}", target.string(), std::strerror(errno));
            return fail();
        }
        crash_point();
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            error = fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), target.string(), std::strerror(errno));
            ::rename(old.c_str(), target.c_str());
            return fail();
        }
        crash_point();
        drop(old);
    }
    fsync_path(parent);
    return true;
}

bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& meta,
                     std::string& error, std::vector<std::string>* removed) {
    std::vector<CheckpointTensorRef> refs;
    refs.reserve(tensors.size());
    for (const auto& t : tensors) refs.push_back({t.name, t.shape, std::span<const float>(t.data)});
    return save_checkpoint(dir, refs, meta, error, removed);
}

namespace {

// A trainer's checkpoint's meta: the step, the seed and network of the run, the optimizer whose state it
// holds, and dynamic loss scaling's state, so that a resumed run scales as the uninterrupted one.
nlohmann::json trainer_meta(const Trainer& trainer, std::int64_t step, std::uint64_t seed, const std::string& network) {
    nlohmann::json meta{{"step", step},
                        {"seed", seed},
                        {"network", network},
                        {"optimizer", frontend::optimizer_name(trainer.config().optimizer)}};
    if (const Trainer::LossScale ls = trainer.loss_scale(); ls.scale > 0.0)
        meta["loss_scale"] = {{"scale", ls.scale}, {"good_steps", ls.good_steps}};
    return meta;
}

}  // namespace

bool save(Trainer& trainer, const std::string& dir, std::int64_t step, std::uint64_t seed, const std::string& network,
          std::string& error, std::vector<std::string>* removed) {
    return save(trainer, trainer.state(), dir, step, seed, network, error, removed);
}

bool save(const Trainer& trainer, const std::vector<StateTensor>& state, const std::string& dir, std::int64_t step,
          std::uint64_t seed, const std::string& network, std::string& error, std::vector<std::string>* removed) {
    std::vector<CheckpointTensorRef> refs;
    for (const auto& s : state)
        refs.push_back({s.name, s.shape, std::span<const float>(s.data, static_cast<std::size_t>(s.size))});
    return save_checkpoint(dir, refs, trainer_meta(trainer, step, seed, network), error, removed);
}

bool save_to_series(const Trainer& trainer, const std::vector<StateTensor>& state, const std::string& dir,
                    std::int64_t step, std::uint64_t seed, const std::string& network, int keep, std::string& error,
                    SeriesSave* report) {
    std::vector<CheckpointTensorRef> refs;
    for (const auto& s : state)
        refs.push_back({s.name, s.shape, std::span<const float>(s.data, static_cast<std::size_t>(s.size))});
    return save_to_series(dir, refs, trainer_meta(trainer, step, seed, network), step, keep, error, report);
}

bool restore(Trainer& trainer, const Checkpoint& ckpt, std::int64_t& step, std::string& error) {
    const auto saved_step = ckpt.meta.contains("step") ? count_of(ckpt.meta["step"]) : std::nullopt;
    if (!saved_step) {
        error = "the checkpoint's meta has no step (a count from 0 to 2^63-1)";
        return false;
    }
    // Adam and AdamW keep the same moments; SGD keeps a momentum. A checkpoint without the field is SGD's
    // (written before there were others).
    const auto saved_optimizer = ckpt.meta.contains("optimizer") && ckpt.meta["optimizer"].is_string()
                                     ? ckpt.meta["optimizer"].get<std::string>()
                                     : std::string("sgd");
    const std::string optimizer = frontend::optimizer_name(trainer.config().optimizer);
    if ((saved_optimizer == "sgd") != (optimizer == "sgd") ||
        (saved_optimizer != "sgd" && saved_optimizer != "adam" && saved_optimizer != "adamw")) {
        error = fmt::format(
            "the checkpoint holds the state of optimizer '{}', and this run trains with '{}': their states differ "
            "(train with '{}', as the network's train line or --optimizer says)",
            saved_optimizer, optimizer, saved_optimizer);
        return false;
    }
    const auto state = trainer.writable_state();
    std::set<std::string> wanted;
    // Everything is checked before anything is copied, so a failed restore leaves the trainer as it was.
    for (const auto& s : state) {
        wanted.insert(s.name);
        const CheckpointTensor* t = ckpt.find(s.name);
        if (!t) {
            error = fmt::format("the checkpoint has no tensor '{}'", s.name);
            return false;
        }
        if (t->shape != s.shape || static_cast<std::int64_t>(t->data.size()) != s.size) {
            error = fmt::format("'{}' is {} in the checkpoint but {} in the network", s.name, shape_str(t->shape),
                                shape_str(s.shape));
            return false;
        }
    }
    for (const auto& t : ckpt.tensors)
        if (!wanted.count(t.name)) {
            error = fmt::format("the checkpoint holds '{}', which the network does not have", t.name);
            return false;
        }
    for (const auto& s : state) {
        const CheckpointTensor* t = ckpt.find(s.name);
        if (s.size > 0) std::memcpy(s.data, t->data.data(), static_cast<std::size_t>(s.size) * sizeof(float));
    }
    trainer.state_written();
    trainer.set_updates(*saved_step);
    // A run with loss scaling takes the scale where the checkpoint has one (else it starts from its own).
    if (trainer.loss_scale().scale > 0.0 && ckpt.meta.contains("loss_scale")) {
        const nlohmann::json& ls = ckpt.meta["loss_scale"];
        if (ls.is_object() && ls.contains("scale") && ls["scale"].is_number() && ls["scale"].get<double>() > 0.0) {
            Trainer::LossScale restored{ls["scale"].get<double>(), 0};
            if (ls.contains("good_steps")) restored.good_steps = count_of(ls["good_steps"]).value_or(0);
            trainer.set_loss_scale(restored);
        }
    }
    step = *saved_step;
    return true;
}

}  // namespace dsl::backend
