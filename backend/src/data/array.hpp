// A data file's array, [S, ...], read a sample's block at a time: a .npy file's or an HDF5 data set's
// (data_files.cpp), or one of those stored channels-last, read channels-first (channels_last.cpp).
#pragma once

#include <dsl/backend/view.hpp>

#include <cstdint>
#include <memory>
#include <string>
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
};

// An array stored channels-last, [S, spatial..., C] (an image's NHWC, a volume's NDHWC), read as the
// channels-first [S, C, spatial...] the trainer's tiles hold: each read takes the tile's block with every
// channel, densely, and transposes it.
std::unique_ptr<Array> channels_last(std::unique_ptr<Array> stored);

}  // namespace dsl::backend::data
