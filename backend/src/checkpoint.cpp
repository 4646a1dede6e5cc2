// Checkpoint folders: written beside their destination and renamed into place (exchanged with the old one
// where the file system can), read back with every file checked against the manifest.
#include <dsl/backend/checkpoint.hpp>

#include <dsl/backend/npy.hpp>
#include <dsl/backend/trainer.hpp>
#include <dsl/frontend/source.hpp>

#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include <fcntl.h>
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

// Whether an existing folder may be replaced: empty, or a checkpoint with nothing in it but the manifest and
// the files it lists (a file of the user's put inside a checkpoint is not removed silently either).
bool replaceable(const fs::path& dir, std::string& error) {
    std::error_code ec;
    if (fs::is_empty(dir, ec)) return true;
    std::string why;
    const auto manifest = read_manifest(dir, why);
    if (!manifest) {
        if (!fs::exists(dir / "manifest.json", ec))
            error = fmt::format(
                "'{}' exists, is not empty and has no manifest.json: it is not a dsl checkpoint, and it "
                "is left as it is",
                dir.string());
        else
            error = fmt::format("'{}' is not a dsl checkpoint ({}); it is left as it is", dir.string(), why);
        return false;
    }
    std::set<std::string> ours{"manifest.json"};
    for (const auto& t : (*manifest)["tensors"])
        if (t.is_object() && t.contains("file") && t["file"].is_string()) ours.insert(t["file"].get<std::string>());
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (!ours.count(name) || !e.is_regular_file()) {
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

// Temporary folders of earlier saves whose process has died (".NAME.tmp-PID", ".NAME.old-PID"): removed, so
// that a killed run leaves no lasting debris. Folders of live processes are left to them.
void remove_stale(const fs::path& parent, const std::string& name) {
    std::error_code ec;
    std::vector<fs::path> stale;
    for (const auto& e : fs::directory_iterator(parent, ec)) {
        const std::string f = e.path().filename().string();
        const std::string prefixes[] = {"." + name + ".tmp-", "." + name + ".old-"};
        for (const auto& prefix : prefixes) {
            if (f.size() <= prefix.size() || f.compare(0, prefix.size(), prefix) != 0) continue;
            const std::string digits = f.substr(prefix.size());
            if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
            const long pid = std::stol(digits);
            if (pid == static_cast<long>(::getpid()) || (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH))
                stale.push_back(e.path());
        }
    }
    for (const auto& p : stale) fs::remove_all(p, ec);
}

std::string dtype_name(NpyType t) { return t == NpyType::f4 ? "float32" : npy_descr(t); }

}  // namespace

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
    for (const auto& t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

bool is_checkpoint(const std::string& dir) {
    std::string why;
    return read_manifest(dir, why).has_value();
}

bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensorRef>& tensors,
                     const nlohmann::json& meta, std::string& error) {
    fs::path target = fs::path(dir).lexically_normal();
    if (!target.has_filename()) target = target.parent_path();  // "ckpt/"
    const std::string name = target.filename().string();
    if (name.empty() || name == "." || name == "..") {
        error = fmt::format("'{}' does not name a folder to create", dir);
        return false;
    }
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

    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (!fs::is_directory(parent, ec)) {
        error = fmt::format("cannot create the folder '{}'", parent.string());
        return false;
    }
    const auto status = fs::symlink_status(target, ec);
    const bool exists = fs::exists(status);
    if (exists) {
        if (fs::is_symlink(status) || !fs::is_directory(status)) {
            error = fmt::format("'{}' exists and is not a folder; it is left as it is", target.string());
            return false;
        }
        if (!replaceable(target, error)) return false;
    }

    remove_stale(parent, name);
    const std::string pid = std::to_string(::getpid());
    const fs::path tmp = parent / ("." + name + ".tmp-" + pid);
    if (!fs::create_directory(tmp, ec)) {
        error = fmt::format("cannot create '{}': {}", tmp.string(), ec ? ec.message() : "it exists");
        return false;
    }
    auto fail = [&] {
        fs::remove_all(tmp, ec);
        return false;
    };

    nlohmann::json list = nlohmann::json::array();
    for (const auto& t : tensors) {
        const std::string file = t.name + ".npy";
        if (!write_npy((tmp / file).string(), t.shape, t.data.data(), error)) return fail();
        list.push_back({{"name", t.name}, {"file", file}, {"shape", t.shape}, {"dtype", "float32"}});
    }
    const nlohmann::json manifest{{"format", format_name},
                                  {"version", format_version},
                                  {"tensors", std::move(list)},
                                  {"meta", meta.is_null() ? nlohmann::json::object() : meta}};
    if (!write_text(tmp / "manifest.json", manifest.dump(2) + "\n", error)) return fail();
    fsync_path(tmp);

    if (!exists) {
        // Fails rather than replace a non-empty folder that appeared meanwhile.
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            error = fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), target.string(), std::strerror(errno));
            return fail();
        }
    } else if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
        fs::remove_all(tmp, ec);  // now the old checkpoint
    } else {
        // No atomic exchange on this file system: move the old one aside, the new one in, then drop the old.
        const fs::path old = parent / ("." + name + ".old-" + pid);
        fs::remove_all(old, ec);
        if (::rename(target.c_str(), old.c_str()) != 0) {
            error = fmt::format("cannot move '{}' aside: {}", target.string(), std::strerror(errno));
            return fail();
        }
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            error = fmt::format("cannot rename '{}' to '{}': {}", tmp.string(), target.string(), std::strerror(errno));
            ::rename(old.c_str(), target.c_str());
            return fail();
        }
        fs::remove_all(old, ec);
    }
    fsync_path(parent);
    return true;
}

bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& meta,
                     std::string& error) {
    std::vector<CheckpointTensorRef> refs;
    refs.reserve(tensors.size());
    for (const auto& t : tensors) refs.push_back({t.name, t.shape, std::span<const float>(t.data)});
    return save_checkpoint(dir, refs, meta, error);
}

std::optional<Checkpoint> load_checkpoint(const std::string& dir, std::string& error) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        error = fmt::format("'{}' is not a folder", dir);
        return std::nullopt;
    }
    const auto manifest = read_manifest(dir, error);
    if (!manifest) return std::nullopt;
    const std::string where = (fs::path(dir) / "manifest.json").string();
    Checkpoint ckpt;
    if (manifest->contains("meta") && (*manifest)["meta"].is_object()) ckpt.meta = (*manifest)["meta"];
    std::set<std::string> names;
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
        if (!names.insert(out.name).second) {
            error = fmt::format("{}: bad manifest: tensor '{}' appears twice", where, out.name);
            return std::nullopt;
        }
        for (const auto& d : t["shape"]) {
            if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
                error = fmt::format("{}: bad manifest: the shape of '{}' is not a list of sizes", where, out.name);
                return std::nullopt;
            }
            out.shape.push_back(d.get<std::int64_t>());
        }
        const std::string path = (fs::path(dir) / file).string();
        if (!fs::exists(path, ec)) {
            error = fmt::format("{}: missing (the manifest lists it for '{}')", path, out.name);
            return std::nullopt;
        }
        auto npy = NpyFile::open(path, error);
        if (!npy) return std::nullopt;
        if (npy->dtype() != NpyType::f4) {
            error = fmt::format("{}: dtype '{}', expected float32", path, dtype_name(npy->dtype()));
            return std::nullopt;
        }
        if (npy->shape() != out.shape) {
            error = fmt::format("{}: shape mismatch: the manifest says {}, the file holds {}", path,
                                shape_str(out.shape), shape_str(npy->shape()));
            return std::nullopt;
        }
        out.data.resize(static_cast<std::size_t>(npy->elements()));
        if (!out.data.empty()) std::memcpy(out.data.data(), npy->data(), out.data.size() * sizeof(float));
        ckpt.tensors.push_back(std::move(out));
    }
    return ckpt;
}

bool save(Trainer& trainer, const std::string& dir, std::int64_t step, std::uint64_t seed, const std::string& network,
          std::string& error) {
    std::vector<CheckpointTensorRef> refs;
    for (const auto& s : trainer.state())
        refs.push_back({s.name, s.shape, std::span<const float>(s.data, static_cast<std::size_t>(s.size))});
    const nlohmann::json meta{{"step", step}, {"seed", seed}, {"network", network}};
    return save_checkpoint(dir, refs, meta, error);
}

bool restore(Trainer& trainer, const Checkpoint& ckpt, std::int64_t& step, std::string& error) {
    if (!ckpt.meta.contains("step") || !ckpt.meta["step"].is_number_integer() ||
        ckpt.meta["step"].get<std::int64_t>() < 0) {
        error = "the checkpoint's meta has no step";
        return false;
    }
    const auto state = trainer.state();
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
    step = ckpt.meta["step"].get<std::int64_t>();
    return true;
}

}  // namespace dsl::backend
