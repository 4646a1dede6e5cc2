// A data file's array, [S, ...], read a sample's block at a time: a .npy file's or an HDF5 data set's
// (data_files.cpp), or one of those stored channels-last, read channels-first (channels_last.cpp).
#pragma once

#include <dsl/backend/view.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dsl::backend::data {

class Array {
public:
    virtual ~Array() = default;
    virtual const std::vector<std::int64_t>& shape() const = 0;
    virtual std::string type_name() const = 0;  // "float32", "uint8", "string"
    virtual bool integer() const = 0;
    virtual bool number() const = 0;  // an integer or a float, which converts to float
    // Sample s's channels [0, out.c) and the spatial block of out's extents at `at`: `out` is {1, c, extents}
    // of an array [S, C, spatial...] ([S, K] without spatial dimensions), or, for class labels, {1, 1,
    // extents} of an array [S, spatial...] ([S] without).
    virtual void read(std::int64_t s, const Index& at, View out) = 0;
    virtual void read(std::int64_t s, const Index& at, BasicView<std::int32_t> out) = 0;
    // The first value outside [0, classes), as "label V of sample S is outside [0, K)", or empty; read a block
    // of samples at a time.
    virtual std::string out_of_range(std::int64_t classes) = 0;
    // The numbers of attribute `name`, for --normalize file; false with the reason.
    virtual bool attribute(const std::string& name, std::vector<double>& out, std::string& error) = 0;
    // Sample s's block of its own axes after S, densely into `out`: the first from `first` (an [S, C, ...]
    // array's channels), the rest from `at`, of out's extents ({1, count of the first, the rest}).
    virtual void read_dense(std::int64_t s, std::int64_t first, const Index& at, View out) = 0;
    // A collection's files with the samples each holds, in order; none for one file.
    virtual std::vector<std::pair<std::string, std::int64_t>> files() const { return {}; }
};

// The array of `spec`: a .npy file, or an HDF5 data set `FILE.h5:/path`; null with the reason where it cannot
// be opened. `one_sample`: the file holds one sample, [dims...], seen as [1, dims...].
std::unique_ptr<Array> open_array(const std::string& spec, std::string& error, bool one_sample = false);

// Whether `spec` names a collection of files rather than one: a glob ('boxes/*.h5:/full'), a folder ('boxes',
// 'boxes:/full') or a list, one path a line ('@list.txt', '@list.txt:/full' for an HDF5 data set in each).
bool is_collection(const std::string& spec);
// Its files, each with the data set where one is named, sorted (a list's in its order); none with the reason.
std::vector<std::string> collection_files(const std::string& spec, std::string& error);
// The files as one array, their samples numbered across them in order: each file holds one sample of
// `sample_rank` dimensions or a block [S, ...] of them, every sample of the first's shape and kind. Each file is
// opened and checked here, once; null with the reason, naming the file, where one does not fit.
std::unique_ptr<Array> open_collection(const std::string& spec, const std::vector<std::string>& files,
                                       std::size_t sample_rank, std::string& error);

// An array stored channels-last, [S, spatial..., C] (an image's NHWC, a volume's NDHWC), read as the
// channels-first [S, C, spatial...] the trainer's tiles hold: each read takes the tile's block with every
// channel, densely, and transposes it.
std::unique_ptr<Array> channels_last(std::unique_ptr<Array> stored);

}  // namespace dsl::backend::data
