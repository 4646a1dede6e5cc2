// Checkpoints: a folder with one .npy file per named tensor and a manifest.json, written atomically (a
// temporary sibling renamed into place); a series of them in one folder, the newest named by a small file;
// and the trainer's save and restore on top of them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace dsl::backend {

class Trainer;
struct StateTensor;

// A tensor to save: its name ("layer1.0.conv1.weight", "bn1.running_mean", "conv1.weight.momentum"), which
// is also its file name with ".npy" added, its shape, and its elements in C order.
struct CheckpointTensorRef {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<const float> data;
};

// A tensor as loaded.
struct CheckpointTensor {
    std::string name;
    std::vector<std::int64_t> shape;
    std::vector<float> data;
};

struct Checkpoint {
    std::vector<CheckpointTensor> tensors;  // in the manifest's order
    nlohmann::json meta = nlohmann::json::object();

    const CheckpointTensor* find(const std::string& name) const;
};

// Writes `dir`: <name>.npy per tensor and manifest.json {"format": "dsl-checkpoint", "version": 1,
// "tensors": [{"name", "file", "shape", "dtype"}], "meta": meta}. Everything is written into a fresh
// ".DIR.tmp-<pid>-<host>" beside `dir` and renamed into place, so a reader sees the old checkpoint or the new one,
// never a mix. An existing `dir` is replaced only if it is empty or a checkpoint that load_checkpoint accepts
// holding nothing but its own files; anything else is refused and left as it is. The temporary folder is
// marked while it is written, and a later save removes such folders of ended processes of this machine only
// when they carry that mark and nothing but their own files. False with the reason on failure.
// The folders of killed saves removed on the way go into `removed` where given.
bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensorRef>& tensors,
                     const nlohmann::json& meta, std::string& error, std::vector<std::string>* removed = nullptr);
bool save_checkpoint(const std::string& dir, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& meta,
                     std::string& error, std::vector<std::string>* removed = nullptr);

// Whether save_checkpoint(dir, ...) would be allowed, checked before the work whose result it saves: `dir`
// names a folder, is absent or replaceable, and the first of it and its parents that exists is a folder this
// process may write in. False with the reason.
bool can_save_checkpoint(const std::string& dir, std::string& error);

// A series of checkpoints in one folder DIR, as `dsl run --save DIR` writes it: DIR/step-NNNNNNNN, a
// checkpoint folder per save (the step in at least 8 digits; "step-NNNNNNNN-2", "-3", ... where that step
// was saved already: a folder is never replaced), and DIR/latest, a one-line file naming the newest,
// replaced by rename (atomic on every POSIX file system, NFS included). A save writes its folder whole,
// then `latest`, then drops the older folders past the `keep` newest whole ones (never the one `latest`
// names), then removes what killed saves of this machine left in DIR. Nothing else in DIR is touched.
struct SeriesSave {
    std::string folder;                // the checkpoint written: "DIR/step-00000010"
    std::vector<std::string> dropped;  // older checkpoints removed past `keep`
    std::vector<std::string> removed;  // what killed saves had left
};
bool save_to_series(const std::string& dir, const std::vector<CheckpointTensorRef>& tensors, const nlohmann::json& meta,
                    std::int64_t step, int keep, std::string& error, SeriesSave* report = nullptr);
bool save_to_series(const std::string& dir, const std::vector<CheckpointTensor>& tensors, const nlohmann::json& meta,
                    std::int64_t step, int keep, std::string& error, SeriesSave* report = nullptr);

// Whether save_to_series(dir, ...) would be allowed, checked before the work: `dir` is absent, an empty
// folder, a series, or a checkpoint folder of the earlier format (the series is written beside its files,
// which stay), in a place this process may write in. False with the reason.
bool can_save_series(const std::string& dir, std::string& error);

// The checkpoint folder that `--load DIR` means: DIR itself where it holds a manifest and is no series
// (the earlier format, or a series' "DIR/step-N"); in a series, the folder `latest` names, or, where that
// one is damaged or `latest` is missing or unreadable, the newest whole one, with `note` saying so. Nullopt
// with the reason where there is none.
std::optional<std::string> checkpoint_folder(const std::string& dir, std::string& error, std::string* note = nullptr);

// Reads the checkpoint that `dir` means (checkpoint_folder); nullopt with the reason (missing file, bad
// manifest, shape or size mismatch).
std::optional<Checkpoint> load_checkpoint(const std::string& dir, std::string& error, std::string* note = nullptr);

// Whether `dir` holds a dsl checkpoint's manifest.
bool is_checkpoint(const std::string& dir);

// The trainer's state (Trainer::state(), which every process calls where F or C parts split the
// parameters) with meta {"step", "seed", "network"}: from the trainer, or as state() gave it.
bool save(Trainer& trainer, const std::string& dir, std::int64_t step, std::uint64_t seed, const std::string& network,
          std::string& error, std::vector<std::string>* removed = nullptr);
bool save(const Trainer& trainer, const std::vector<StateTensor>& state, const std::string& dir, std::int64_t step,
          std::uint64_t seed, const std::string& network, std::string& error,
          std::vector<std::string>* removed = nullptr);
// The same into the series in `dir` (save_to_series), keeping the `keep` newest.
bool save_to_series(const Trainer& trainer, const std::vector<StateTensor>& state, const std::string& dir,
                    std::int64_t step, std::uint64_t seed, const std::string& network, int keep, std::string& error,
                    SeriesSave* report = nullptr);

// One writer per checkpoint folder: an exclusive lock (flock) on ".DIR.lock" beside `dir`, which names its
// holder (process and host) and which the kernel releases when the holder dies, however it dies. Held for
// a run's life, from before its first step; the lock file is removed when the holder lets it go. A lock
// file left by a process of another machine is refused, never taken as stale (flock may not reach across
// machines). Loading never takes it: a checkpoint being written does not block reading the last whole one.
class SaveLock {
public:
    ~SaveLock();
    SaveLock(const SaveLock&) = delete;
    SaveLock& operator=(const SaveLock&) = delete;

private:
    SaveLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
    friend std::unique_ptr<SaveLock> lock_checkpoint_folder(const std::string& dir, std::string& error);
    std::string path_;
    int fd_ = -1;
};

// Takes the lock of `dir`, at once or not at all: null with the reason ("'DIR' is being saved into by
// another run (process P on host 'H', ...)") where another process holds it.
std::unique_ptr<SaveLock> lock_checkpoint_folder(const std::string& dir, std::string& error);

// Copies every tensor of the trainer's state from `ckpt` (each must be there, with the same shape, and the
// checkpoint must hold nothing else) and sets `step` from the meta. On failure the trainer is unchanged.
bool restore(Trainer& trainer, const Checkpoint& ckpt, std::int64_t& step, std::string& error);

}  // namespace dsl::backend
