// Training data: a synthetic generator that is a pure function of (seed, sample, coordinates), so that each
// process makes just its own tile, and the trainer's DataSource over it or over .npy files.
#pragma once

#include <dsl/backend/synthetic.hpp>
#include <dsl/backend/tensor.hpp>
#include <dsl/backend/trainer.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dsl::backend {

// The classes of label layer `label`: the channel count of the logits that the cross-entropy reading it
// compares it with (2 where no loss says).
std::int64_t label_classes(const frontend::Network& net, int label);

// The synthetic data set for a network: shapes from its input and label layers, classes from the loss that
// reads each label. Per-pixel labels get class squares of about 8 input pixels.
SyntheticData synthetic_for(const frontend::Network& net, std::uint64_t seed);

// The data `dsl run` trains on: synthetic (both paths empty), or samples from an [S, C, H, W] .npy file and
// labels from an [S] or [S, H, W] one, checked against the network's single input and label; step after
// step the sample index wraps around S. Null with the reason when the files do not fit the network.
std::unique_ptr<DataSource> make_data_source(const frontend::Network& net, std::uint64_t seed,
                                             const std::string& inputs_path, const std::string& labels_path,
                                             std::string& error);

// The files a run's data come from, by layer: `files` pairs an `input` or `label` layer's name with a
// `.npy` file or an HDF5 data set, `FILE.h5:/path/to/dataset` (also `.hdf5`, `.he5`). Every input and
// label of the network is named once, or none is (synthetic data). Every file holds the same number of
// samples S, first: inputs [S, C, H, W]; class labels [S] or [S, H, W], integers; float labels [S, ...the
// layer's shape]. Any float or integer type, converted to float (int32 for class labels).
struct DataFiles {
    std::vector<std::pair<std::string, std::string>> files;
    // A new order of the samples every epoch (every S samples), a pure function of (seed, epoch): every
    // process computes the same, so a run reads the same samples under any schedule.
    bool shuffle = false;
    // Inputs become (x - mean[c]) / std[c]: "" (as they are); "M,S" (every channel); "M1,M2,...:S1,S2,..."
    // (one value per channel, or one for all, on each side of the colon); "file" (the HDF5 attributes
    // `mean` and `std` of each input's data set, a number or one per channel).
    std::string normalize;
    // Element-wise functions of an input's values, applied as they are read, in order, after the conversion
    // to float and before `normalize`: input name, then "log1p", "sqrt" or "clip(A, B)", comma-separated.
    std::vector<std::pair<std::string, std::string>> transforms = {};
    // How an input's file lays out each sample: input name, then "NCHW" or "NHWC" for an image, "NCDHW" or
    // "NDHWC" for a volume (channels first, the default, or last: MLPerf HPC CosmoFlow's [128, 128, 128, 4]).
    std::vector<std::pair<std::string, std::string>> layouts = {};
    // Each sample of each epoch flipped along each spatial axis ("flip") and its equal-sized spatial axes
    // permuted ("transpose") at random, a function of (seed, epoch, sample): "", "flip", "transpose" or both,
    // comma-separated. Pixel and voxel labels move with their inputs.
    std::string augment = {};
    // Labels may go unnamed (`dsl predict`, whose loss nobody reads): such a label reads as zeros, class 0.
    bool labels_optional = false;
};

// The data `dsl run` trains on, from `files` (synthetic when it names none). Every file is checked against
// the network before it returns: its shape, its type, and every class label against its loss's classes
// (read a block at a time). Null with the reason, `FILE: what is wrong`, when they do not fit.
std::unique_ptr<DataSource> make_data_source(const frontend::Network& net, std::uint64_t seed, const DataFiles& files,
                                             std::string& error);

// The files whose samples layer `layer` reads, in their order, each with its count of samples, where they are
// a collection (--data NAME=PATTERN); empty where the layer reads one file, or made-up data.
std::vector<std::pair<std::string, std::int64_t>> source_files(const DataSource& source, const std::string& layer);

// Reading ahead of the step (`dsl run --prefetch K`): a thread of the process reads the blocks of the next
// `depth` mini-batches while the step computes. The first step's reads, made when asked for, are the pattern
// that every later step repeats (the same blocks of its own samples); the thread makes each of them through
// the same source, in the same order, into a host buffer, so that the values are bitwise those of a read
// made when asked for. A call into the source is made by one thread at a time (HDF5 may not be built to be
// thread-safe), and a read that fails ahead fails the step that asks for it, with the same error. A block
// outside the pattern is read when asked for.
struct ReadAhead {
    int depth = 2;  // mini-batches read ahead of the step's own
    std::int64_t batch = 1;
    // The run's steps: step k reads samples [k * batch, k * batch + batch); none beyond `end` is read ahead.
    std::int64_t first_step = 0, end_step = 0;
    // The buffers' memory: page-locked for a GPU (gpu_allocate_pinned), so that they upload without a copy;
    // null for ordinary memory (or where allocate gives null).
    void* (*allocate)(std::size_t bytes) = nullptr;
    void (*release)(void* data) = nullptr;
};
std::unique_ptr<DataSource> read_ahead(std::unique_ptr<DataSource> source, const ReadAhead& options);

// The order of the samples [0, S) in epoch `epoch` under --shuffle: a permutation that is a pure function of
// (S, seed, epoch).
std::vector<std::int64_t> shuffle_order(std::int64_t samples, std::uint64_t seed, std::int64_t epoch);

// An HDF5 data set named as `FILE.h5:/path`: its file and path, or nothing when `spec` names a .npy file
// (or anything without ':/' after an HDF5 extension).
std::optional<std::pair<std::string, std::string>> hdf5_dataset_name(const std::string& spec);
// The file `spec` names: FILE of `FILE.h5:/path`, or `spec` itself.
std::string data_file_name(const std::string& spec);

}  // namespace dsl::backend
