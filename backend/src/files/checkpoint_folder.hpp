// The pieces of a checkpoint folder's writing and reading that the series of checkpoints (checkpoint_series.cpp)
// shares with the folder itself (checkpoint.cpp): the test a folder passes to be loaded, the temporary names,
// the marker of a folder being written, and the removal of what a killed save left.
#pragma once

#include <dsl/backend/checkpoint.hpp>
#include <dsl/base/whole_file.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dsl::backend {

// A count read from a manifest (a size, a step): an integer in [0, 2^63).
std::optional<std::int64_t> count_of(const nlohmann::json& j);

// The test a folder passes to be loaded, and to be replaced by a save: a manifest of this format, and every
// tensor it lists a regular .npy file in the folder, float32, of the listed shape. The tensors' elements are
// copied when `copy`; `files` gets the file names the manifest lists.
std::optional<Checkpoint> read_checkpoint(const std::filesystem::path& dir, bool copy, std::set<std::string>& files,
                                          std::string& error);

// Whether an existing folder may be replaced: empty, or a checkpoint that --load would accept with nothing
// in it but the manifest and the files it lists (a file of the user's put inside a checkpoint, or listed by
// a forged manifest, is not removed silently).
bool replaceable(const std::filesystem::path& dir, std::string& error);

// Marks `folder` as one being written (or removed) by `writer`: a later save removes it once that process
// has provably ended.
bool mark(const std::filesystem::path& folder, const Writer& writer, std::string& error);

// Whether `folder` is one that a save of `writer` made and marked, holding nothing but its marker, .npy
// files and a manifest (the debris of a killed save, or the old checkpoint it was replacing). A save killed
// between making its folder and finishing the marker leaves the folder empty, or holding only the start of
// the marker: that is its debris too, with nothing in it to lose. A whole checkpoint without a marker is too
// (one a killed save had moved aside).
bool ours_to_remove(const std::filesystem::path& folder, const Writer& writer);

// Removes a folder ours_to_remove accepts, its marker last: a kill on the way leaves a folder that is still
// marked, which the next save removes.
void remove_ours(const std::filesystem::path& folder);

// Temporary folders of earlier saves in `parent` (".NAME.tmp-PID-HOST", ".NAME.old-PID-HOST", for the
// NAMEs that `named` accepts) whose process has provably ended (on this machine) or is this one: removed
// when they hold only a save's files, so that a killed run leaves no lasting debris and a folder of the
// user's with such a name is never touched. Folders of live processes, of other machines, and of names
// without a host are left. The folders removed, into `removed` where given.
void remove_stale(const std::filesystem::path& parent, const std::function<bool(const std::string&)>& named,
                  std::vector<std::string>* removed);

// The folder a save to `dir` writes ("ckpt/" is "ckpt"), and the folder it is written in.
bool save_target(const std::string& dir, std::filesystem::path& target, std::filesystem::path& parent,
                 std::string& error);

// ".NAME.KIND-PID-HOST" beside `target`: this process's temporary name for it.
std::filesystem::path temporary(const std::filesystem::path& target, const char* kind);

}  // namespace dsl::backend
