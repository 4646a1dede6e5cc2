// Where `dsl predict` writes a layer's output: a .npy file or a dataset of an HDF5 file, an [S, ...] float32
// array that every process fills with its own tiles (no process ever holds the whole of it).
#pragma once

#include <dsl/backend/comm.hpp>
#include <dsl/backend/tensor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsl::backend {

// `OUT.npy`, or `OUT.h5:/path/to/dataset` (also .hdf5).
struct OutputPath {
    std::string file;
    std::string dataset;  // empty for .npy
    bool hdf5() const { return !dataset.empty(); }
    std::string str() const { return hdf5() ? file + ":" + dataset : file; }
};

// The path `spec` names; nullopt with the reason when it has neither form.
std::optional<OutputPath> parse_output_path(const std::string& spec, std::string& error);

// Whether the output could be written, checked before any work: its folder exists and is writable; a .npy
// file (or the HDF5 dataset) that exists is refused unless `force`; an existing HDF5 file must be one, and
// gets the dataset added beside what it holds. False with the reason.
bool can_write_output(const OutputPath& path, bool force, std::string& error);

// An array being written by every process of `comm`. Made and closed by all of them alike; `write` is
// called by all of them alike too (HDF5's writes are collective), each with its own block (or none: n = 0).
class OutputArray {
public:
    virtual ~OutputArray() = default;
    // Samples [n0, n0 + d.n), every channel and the spatial block of d's extents at `at` (of an array [S, C,
    // spatial...], or one without channels: class labels' [S, spatial...]), from `values` dense in C order over
    // d. False with the reason.
    virtual bool write(std::int64_t n0, const Index& at, const Dims& d, const float* values, std::string& error) = 0;
    // Flushes and closes (every process alike, `whole` where this process wrote every part it had), then
    // moves the output into place where every process's part is whole; otherwise removes it, leaving what
    // was under the name before. False where the output is not in place, with the reason on the processes that
    // have one (their part, or the first process's move).
    // An output dropped unclosed is removed; one whose processes are killed leaves its temporary file (or
    // HDF5 link) behind, which the next output of that name removes.
    virtual bool close(bool whole, std::string& error) = 0;
};

// Creates the array of `shape` ([S] + the layer's per-sample shape) for `path`: the first process makes the
// file (or dataset) at its full size under a temporary name (".NAME.tmp-PID" beside the file, or beside the
// dataset in an existing HDF5 file) while the others wait, then every process opens it. What `path` names
// already stays as it is until close() moves the whole output into place. Null with the
// reason on a process where that failed (the caller agrees before writing).
std::unique_ptr<OutputArray> create_output(const OutputPath& path, const std::vector<std::int64_t>& shape, bool force,
                                           Comm& comm, std::string& error);

}  // namespace dsl::backend
