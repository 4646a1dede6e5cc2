// NumPy .npy files: a memory-mapped reader (format 1.0, 2.0, 3.0, little-endian, C order) that copies tiles
// of samples out without reading the whole file, and a writer (format 1.0) for float and int32 arrays.
#pragma once

#include <dsl/backend/tensor.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dsl::backend {

enum class NpyType { f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8, b1 };

const char* npy_descr(NpyType t);  // "<f4", "|u1", ...
std::int64_t npy_size(NpyType t);  // bytes per element
bool npy_is_integer(NpyType t);    // the types labels may have (b1 included)

// What a header says: the element type, the shape, and where the data starts.
struct NpyHeader {
    NpyType dtype = NpyType::f4;
    std::vector<std::int64_t> shape;
    std::int64_t data_offset = 0;  // bytes from the start of the file
    int major_version = 1;
    std::int64_t elements() const;
};

// Parses the header at the start of `bytes` (the whole file or at least its header); `path` prefixes
// messages. Checks the magic, version, dict keys, dtype and fortran_order, but not the file's length.
std::optional<NpyHeader> parse_npy_header(const unsigned char* bytes, std::int64_t size, const std::string& path,
                                          std::string& error);

// A read-only mapping of a .npy file: pages are read as tiles touch them, so a data set larger than memory
// can be used. Move-only.
class NpyFile {
public:
    static std::optional<NpyFile> open(const std::string& path, std::string& error);

    NpyFile(NpyFile&&) noexcept;
    NpyFile& operator=(NpyFile&&) noexcept;
    ~NpyFile();

    const std::string& path() const { return path_; }
    NpyType dtype() const { return header_.dtype; }
    const std::vector<std::int64_t>& shape() const { return header_.shape; }
    std::int64_t elements() const { return header_.elements(); }
    const NpyHeader& header() const { return header_; }

    // Element `i` in C order, converted; i must be in [0, elements()).
    double at(std::int64_t i) const;
    std::int64_t integer_at(std::int64_t i) const;  // for integer types (exact); floats are truncated
    const unsigned char* data() const { return base_ + header_.data_offset; }
    // Sees a file of one sample, [dims...], as the block [1, dims...] (the same bytes).
    void add_sample_axis() { header_.shape.insert(header_.shape.begin(), 1); }

private:
    NpyFile() = default;
    std::string path_;
    NpyHeader header_;
    const unsigned char* base_ = nullptr;
    std::int64_t mapped_ = 0;
};

// Copies samples [s0, s0 + out.n), channels [c0, c0 + out.c) and the spatial block of out's extents at `at`
// of an array [S, C, spatial...] (an image's [S, C, H, W]; [S, K] for a view without spatial dimensions) into
// `out`, converted to float. False (with the reason) when the array's rank is not out's or the region is out
// of range.
bool copy_sample_tile(const NpyFile& file, std::int64_t s0, std::int64_t c0, const Index& at, View out,
                      std::string& error);

// Copies labels of an integer array [S] (out is {n, 1}) or [S, spatial...] (out is {n, 1, extents}, from `at`:
// an image's [S, H, W]) into `out`. False when the type is not an integer one, the array's rank is not out's,
// the region is out of range, or a value does not fit in int32.
bool copy_label_tile(const NpyFile& file, std::int64_t s0, const Index& at, BasicView<std::int32_t> out,
                     std::string& error);

// The header of a C-order array of `descr` ("<f4") and `shape` in format 1.0 (2.0 if it would not fit), its
// length a multiple of 64 bytes: the data follows it.
std::string npy_header(const std::vector<std::int64_t>& shape, const char* descr);

// Writes a C-order array in format 1.0 (2.0 if the header would not fit), flushed to disk before it returns.
bool write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data, std::string& error);
bool write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::int32_t* data,
               std::string& error);

std::string shape_str(const std::vector<std::int64_t>& shape);  // "[2, 3]"

// The offset, in elements, of sample s, channel c (when the array has channels) and place `at` in a C-order
// array of `shape`: [S, C, spatial...], or [S, spatial...] without channels.
std::int64_t npy_offset(const std::vector<std::int64_t>& shape, std::int64_t s, bool channels, std::int64_t c,
                        const Index& at);

}  // namespace dsl::backend
