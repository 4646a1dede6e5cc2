// Element-wise functions of an input's values as a data file holds them (`--transform NAME=F,...`): each
// process applies them to its own tile as it reads it, after the conversion to float and before
// --normalize, so that a transform commutes with every split. MLPerf HPC's CosmoFlow reads its int16 counts
// as log(x + 1): `--transform x=log1p`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsl::backend {

struct Transform {
    enum class Kind { log1p, sqrt, clip } kind = Kind::log1p;
    float lo = 0.0f, hi = 0.0f;  // clip's bounds
    float operator()(float v) const;
    std::string text() const;  // as written: "log1p", "clip(0, 1)"
};

// "log1p", "sqrt", "clip(A, B)", comma-separated and applied in that order; nothing with the reason, for
// "--transform NAME=TEXT: ...", where one is not such a function.
std::optional<std::vector<Transform>> parse_transforms(const std::string& text, std::string& error);

// Applies `fs` in order to each of the `n` values at `row`. The first value they turn into a NaN or an
// infinity (log1p below -1, sqrt below 0) stops it: its index, the value and what it became, for the caller
// to name the file and the sample; `at` -1 where every value stayed finite.
struct BadValue {
    std::int64_t at = -1;
    float value = 0.0f, result = 0.0f;
};
BadValue apply_transforms(const std::vector<Transform>& fs, float* row, std::int64_t n);

// An input's transforms as its reads apply them: for a stored integer type of at most 16 bits (int8, uint8,
// int16, uint16: the .npy and HDF5 names of `type_name`) by a table of their results for every value of the
// type, made once, so that a read looks each value up instead of computing it again (log1p costs some 15 ns a
// value; the lookup a few); for any other type value by value (apply_transforms). The same floats and the same
// BadValue either way.
class InputTransforms {
public:
    InputTransforms() = default;
    InputTransforms(std::vector<Transform> fs, const std::string& type_name);
    bool empty() const { return fs_.empty(); }
    // apply_transforms(fs, row, n).
    BadValue apply(float* row, std::int64_t n) const;

private:
    std::vector<Transform> fs_;
    std::int64_t least_ = 0;
    std::vector<float> results_;  // of least_, least_ + 1, ...; empty: computed as read
};

}  // namespace dsl::backend
