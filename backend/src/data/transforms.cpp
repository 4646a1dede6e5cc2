// The element-wise transforms of inputs as they are read (transforms.hpp).
#include "transforms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>

namespace dsl::backend {

float Transform::operator()(float v) const {
    switch (kind) {
        case Kind::log1p: return std::log1p(v);
        case Kind::sqrt: return std::sqrt(v);
        case Kind::clip: return v < lo ? lo : v > hi ? hi : v;  // NaN stays NaN, as numpy's clip
    }
    return v;
}

std::string Transform::text() const {
    switch (kind) {
        case Kind::log1p: return "log1p";
        case Kind::sqrt: return "sqrt";
        case Kind::clip: return fmt::format("clip({}, {})", lo, hi);
    }
    return "";
}

namespace {

// A finite number and nothing else (surrounding spaces allowed).
std::optional<float> number(const std::string& word) {
    const std::size_t first = word.find_first_not_of(' '), last = word.find_last_not_of(' ');
    if (first == std::string::npos) return std::nullopt;
    const std::string w = word.substr(first, last - first + 1);
    char* stop = nullptr;
    const float v = std::strtof(w.c_str(), &stop);
    if (*stop != '\0' || !std::isfinite(v)) return std::nullopt;
    return v;
}

std::string trimmed(const std::string& s) {
    const std::size_t first = s.find_first_not_of(' '), last = s.find_last_not_of(' ');
    return first == std::string::npos ? "" : s.substr(first, last - first + 1);
}

}  // namespace

std::optional<std::vector<Transform>> parse_transforms(const std::string& text, std::string& error) {
    std::vector<Transform> out;
    // The functions, split at the commas outside parentheses.
    std::vector<std::string> words{""};
    int depth = 0;
    for (char c : text) {
        if (c == '(') ++depth;
        if (c == ')') --depth;
        if (c == ',' && depth == 0)
            words.emplace_back();
        else
            words.back() += c;
    }
    for (const std::string& raw : words) {
        const std::string w = trimmed(raw);
        Transform t;
        if (w == "log1p") {
            t.kind = Transform::Kind::log1p;
        } else if (w == "sqrt") {
            t.kind = Transform::Kind::sqrt;
        } else if (w.rfind("clip(", 0) == 0 && w.back() == ')') {
            const std::string args = w.substr(5, w.size() - 6);
            const std::size_t comma = args.find(',');
            const auto lo = comma == std::string::npos ? std::nullopt : number(args.substr(0, comma));
            const auto hi = comma == std::string::npos ? std::nullopt : number(args.substr(comma + 1));
            if (!lo || !hi || !(*lo <= *hi)) {
                error = fmt::format("'{}': clip takes two numbers, the lower bound first: clip(A, B)", w);
                return std::nullopt;
            }
            t.kind = Transform::Kind::clip, t.lo = *lo, t.hi = *hi;
        } else {
            error = fmt::format(
                "'{}' is not a transform: give log1p, sqrt or clip(A, B), comma-separated, applied "
                "in order",
                w);
            return std::nullopt;
        }
        out.push_back(t);
    }
    return out;
}

namespace {

// The values of a stored integer type of at most 16 bits, [least, most], by its .npy or HDF5 name.
std::optional<std::pair<std::int64_t, std::int64_t>> small_integers(const std::string& type_name) {
    if (type_name == "int8" || type_name == "|i1") return std::pair{-128, 127};
    if (type_name == "uint8" || type_name == "|u1") return std::pair{0, 255};
    if (type_name == "int16" || type_name == "<i2") return std::pair{-32768, 32767};
    if (type_name == "uint16" || type_name == "<u2") return std::pair{0, 65535};
    return std::nullopt;
}

float transformed(const std::vector<Transform>& fs, float v) {
    for (const Transform& f : fs) v = f(v);
    return v;
}

}  // namespace

InputTransforms::InputTransforms(std::vector<Transform> fs, const std::string& type_name) : fs_(std::move(fs)) {
    const auto range = small_integers(type_name);
    if (!range || fs_.empty()) return;
    least_ = range->first;
    results_.resize(static_cast<std::size_t>(range->second - range->first + 1));
    for (std::size_t i = 0; i < results_.size(); ++i)
        results_[i] = transformed(fs_, static_cast<float>(least_ + static_cast<std::int64_t>(i)));
}

BadValue InputTransforms::apply(float* row, std::int64_t n) const {
    if (results_.empty()) return apply_transforms(fs_, row, n);
    const auto size = static_cast<std::uint32_t>(results_.size());
    const float* results = results_.data();
    // In chunks: each looked up without a branch, then, where one was outside the table (never a value of the
    // stored type) or became a NaN or an infinity, again one by one from a copy of the chunk as it was read.
    constexpr std::int64_t chunk = 256;
    float in[chunk];
    for (std::int64_t i0 = 0; i0 < n; i0 += chunk) {
        const std::int64_t m = std::min(chunk, n - i0);
        float* out = row + i0;
        std::copy_n(out, m, in);
        bool ok = true;
        for (std::int64_t j = 0; j < m; ++j) {
            const auto at = static_cast<std::uint32_t>(static_cast<std::int32_t>(in[j]) - least_);
            const bool inside = at < size;
            const float r = results[inside ? at : 0];
            ok &= inside & std::isfinite(r);
            out[j] = r;
        }
        if (ok) continue;
        for (std::int64_t j = 0; j < m; ++j) {
            const float v = in[j];
            const std::int64_t at = static_cast<std::int64_t>(v) - least_;
            const float r = at >= 0 && at < static_cast<std::int64_t>(size) && static_cast<float>(at + least_) == v
                                ? results[at]
                                : transformed(fs_, v);
            if (!std::isfinite(r)) return {i0 + j, v, r};
            out[j] = r;
        }
    }
    return {};
}

BadValue apply_transforms(const std::vector<Transform>& fs, float* row, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
        const float v = transformed(fs, row[i]);
        if (!std::isfinite(v)) return {i, row[i], v};
        row[i] = v;
    }
    return {};
}

}  // namespace dsl::backend
