// A series of checkpoints in one folder: a folder per save, never replaced, and a small file naming the
// newest, replaced by rename, so that a save killed at any point leaves every whole checkpoint it found and
// a `latest` that names one of them, on any POSIX file system (no atomic exchange of folders needed).
#include "checkpoint_folder.hpp"

#include <dsl/backend/checkpoint.hpp>
#include <dsl/base/crash_point.hpp>
#include <dsl/base/source.hpp>
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>

#include <unistd.h>

namespace dsl::backend {

namespace fs = std::filesystem;

namespace {

constexpr const char* latest_name = "latest";

// A folder of the series: "step-NNNNNNNN" (`copy` 1) or "step-NNNNNNNN-K" (K from 2), and its place.
struct StepFolder {
    std::string name;
    std::int64_t step = 0;
    std::int64_t copy = 1;
    bool operator<(const StepFolder& o) const { return std::tie(step, copy) < std::tie(o.step, o.copy); }
};

std::optional<std::int64_t> digits_value(const std::string& s) {
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    return std::stoll(s);
}

std::optional<StepFolder> step_folder(const std::string& name) {
    const std::string prefix = "step-";
    if (name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    const std::string rest = name.substr(prefix.size());
    const std::size_t dash = rest.find('-');
    const auto step = digits_value(rest.substr(0, dash));
    if (!step || rest.substr(0, dash).size() < 8) return std::nullopt;
    StepFolder f{name, *step, 1};
    if (dash != std::string::npos) {
        const auto copy = digits_value(rest.substr(dash + 1));
        if (!copy || *copy < 2) return std::nullopt;
        f.copy = *copy;
    }
    return f;
}

std::string folder_name(std::int64_t step, std::int64_t copy) {
    return copy == 1 ? fmt::format("step-{:08d}", step) : fmt::format("step-{:08d}-{}", step, copy);
}

// The series' folders in `dir` (folders, not links), newest first.
std::vector<StepFolder> step_folders(const fs::path& dir) {
    std::vector<StepFolder> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const auto f = step_folder(e.path().filename().string());
        if (f && fs::is_directory(fs::symlink_status(e.path(), ec))) out.push_back(*f);
    }
    std::sort(out.rbegin(), out.rend());
    return out;
}

// The folder `latest` names, or why it names none.
std::optional<std::string> read_latest(const fs::path& dir, std::string& why) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir / latest_name, ec))) {
        why = fmt::format("'{}' is missing", (dir / latest_name).string());
        return std::nullopt;
    }
    std::string text;
    if (!read_regular_file((dir / latest_name).string(), text, why)) {
        why = fmt::format("'{}' cannot be read: {}", (dir / latest_name).string(), why);
        return std::nullopt;
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (!step_folder(text)) {
        why = fmt::format("'{}' names no checkpoint of the series", (dir / latest_name).string());
        return std::nullopt;
    }
    return text;
}

// Whether `dir` holds a series: a folder of one, what a save killed before it wrote the first one left
// (".step-N.tmp-PID-HOST", ".latest.tmp-PID-HOST"), or a `latest` that names one (a file of the user's that
// happens to be called so is not taken for one).
bool is_series(const fs::path& dir) {
    std::string why;
    if (!step_folders(dir).empty() || read_latest(dir, why).has_value()) return true;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(".step-", 0) == 0 || name.rfind(".latest.tmp-", 0) == 0) return true;
    }
    return false;
}

bool loadable(const fs::path& folder, std::string& why) {
    std::set<std::string> files;
    return read_checkpoint(folder, false, files, why).has_value();
}

}  // namespace

std::optional<std::string> checkpoint_folder(const std::string& dir_name, std::string& error, std::string* note) {
    const fs::path dir(dir_name);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
        error = fmt::format("'{}' is not a folder", dir_name);
        return std::nullopt;
    }
    if (!is_series(dir)) return dir_name;  // a checkpoint folder (read_checkpoint says whether it is one)
    std::string why;
    const auto latest = read_latest(dir, why);
    if (latest) {
        std::string damage;
        if (loadable(dir / *latest, damage)) return (dir / *latest).string();
        why = fmt::format("'{}' names '{}', which is damaged ({})", (dir / latest_name).string(), *latest, damage);
    }
    for (const StepFolder& f : step_folders(dir)) {
        std::string ignored;
        if (f.name == latest.value_or("") || !loadable(dir / f.name, ignored)) continue;
        if (note) *note = fmt::format("{}: loading '{}', the newest whole checkpoint", why, (dir / f.name).string());
        return (dir / f.name).string();
    }
    error = fmt::format("'{}' holds no whole checkpoint ({})", dir_name, why);
    return std::nullopt;
}

std::optional<Checkpoint> load_checkpoint(const std::string& dir, std::string& error, std::string* note) {
    const auto folder = checkpoint_folder(dir, error, note);
    if (!folder) return std::nullopt;
    std::set<std::string> files;
    return read_checkpoint(*folder, true, files, error);
}

bool can_save_series(const std::string& dir, std::string& error) {
    fs::path target, parent;
    if (!save_target(dir, target, parent, error)) return false;
    std::error_code ec;
    const auto status = fs::symlink_status(target, ec);
    if (!fs::exists(status)) return can_save_checkpoint(dir, error);  // the folders it would make
    if (fs::is_symlink(status) || !fs::is_directory(status)) {
        error = fmt::format("'{}' exists and is not a folder; it is left as it is", target.string());
        return false;
    }
    // A folder of the user's is not made a series: only an empty one, a series, or a checkpoint.
    if (!is_series(target) && !replaceable(target, error)) return false;
    if (::access(target.c_str(), W_OK | X_OK) != 0) {
        error = fmt::format("cannot write in '{}': {}", target.string(), std::strerror(errno));
        return false;
    }
    return true;
}

bool save_to_series(const std::string& dir, const std::vector<CheckpointTensorRef>& tensors, const nlohmann::json& meta,
                    std::int64_t step, int keep, std::string& error, SeriesSave* report) {
    SeriesSave ignored;
    SeriesSave& r = report ? *report : ignored;
    if (!can_save_series(dir, error)) return false;
    fs::path target, parent;
    if (!save_target(dir, target, parent, error)) return false;
    std::error_code ec;
    fs::create_directories(target, ec);
    if (!fs::is_directory(target, ec)) {
        error = fmt::format("cannot create the folder '{}'", target.string());
        return false;
    }
    // A new folder for every save, so that none is ever replaced: where this step was saved already (a run
    // resumed from an earlier checkpoint), the next copy's name.
    std::string name;
    for (std::int64_t copy = 1; name.empty(); ++copy)
        if (!fs::exists(fs::symlink_status(target / folder_name(step, copy), ec))) name = folder_name(step, copy);
    r.folder = (target / name).string();
    if (!save_checkpoint(r.folder, tensors, meta, error, &r.removed)) return false;

    // `latest` names it once it is whole, and is replaced whole.
    WholeFile latest((target / latest_name).string());
    if (!latest.write(name + "\n")) {
        error = latest.error();
        return false;
    }
    crash_point();
    if (!latest.commit()) {
        error = latest.error();
        return false;
    }
    crash_point();

    // Then, and only then, the older checkpoints past the `keep` newest whole ones go: each moved out of the
    // series first (a kill meanwhile leaves a whole checkpoint under a temporary name of this process, which
    // the next save removes as its own), then marked and removed. A folder that is not a whole checkpoint
    // holding only its own files is neither counted nor touched.
    int whole = 0;
    for (const StepFolder& f : step_folders(target)) {
        std::string why;
        if (!replaceable(target / f.name, why) || fs::is_empty(target / f.name, ec)) continue;
        if (++whole <= keep || f.name == name) continue;
        const fs::path aside = temporary(target / f.name, "old");
        if (::rename((target / f.name).c_str(), aside.c_str()) != 0) continue;  // left for a later save
        crash_point();
        if (mark(aside, this_writer(), why)) {
            crash_point();
            remove_ours(aside);
        }
        r.dropped.push_back((target / f.name).string());
    }
    // What killed saves of this machine left in the series, now that `latest` names a newer whole one.
    remove_stale(
        target, [](const std::string& n) { return step_folder(n).has_value(); }, &r.removed);
    return true;
}

bool save_to_series(const std::string& dir, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& meta,
                    std::int64_t step, int keep, std::string& error, SeriesSave* report) {
    std::vector<CheckpointTensorRef> refs;
    refs.reserve(tensors.size());
    for (const auto& t : tensors) refs.push_back({t.name, t.shape, std::span<const float>(t.data)});
    return save_to_series(dir, refs, meta, step, keep, error, report);
}

}  // namespace dsl::backend
