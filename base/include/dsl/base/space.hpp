// Dimensions as data: a tensor is samples (N), channels (C) and a list of spatial dimensions, none for a
// vector, two for an image (H, W), three for a volume (D, H, W). Boxes, margins, windows, tiles and views hold
// a Space of values, one per spatial dimension, so that a rule such as "grow by the halo" is a loop over
// dimensions, written once for every rank. (C++17: the GPU's kernel files include it.)
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace dsl {

// The most spatial dimensions a tensor has: depth, height and width.
inline constexpr int max_space = 3;

// The spatial axes, outermost first, by the letters that schedules and shapes give them and the words that
// messages use for their indices. A tensor of spatial rank r has the last r: an image H and W, a volume D, H
// and W. axis_of gives the axis of its dimension d.
inline constexpr const char* axis_letters[max_space] = {"D", "H", "W"};
inline constexpr const char* axis_units[max_space] = {"planes of depth", "rows", "columns"};
inline constexpr const char* axis_unit[max_space] = {"plane of depth", "row", "column"};
constexpr int axis_of(int d, int rank) { return max_space - rank + d; }

// `n` places along `axis`, in words: "1 row", "8 planes of depth".
inline std::string count_along(std::int64_t n, int axis) {
    return std::to_string(n) + " " + (n == 1 ? axis_unit[axis] : axis_units[axis]);
}

// One value per spatial dimension, outermost first. Its capacity is fixed, so that boxes and views copy
// without allocating in a halo exchange's loops.
template <typename T>
class Space {
public:
    constexpr Space() = default;
    constexpr Space(std::initializer_list<T> values) {
        for (const T& v : values) v_[static_cast<std::size_t>(rank_++)] = v;
    }
    // `rank` values, each `value`.
    static constexpr Space filled(int rank, const T& value) {
        Space s;
        for (s.rank_ = 0; s.rank_ < rank; ++s.rank_) s.v_[static_cast<std::size_t>(s.rank_)] = value;
        return s;
    }

    constexpr int rank() const { return rank_; }
    constexpr T& operator[](int d) { return v_[static_cast<std::size_t>(d)]; }
    constexpr const T& operator[](int d) const { return v_[static_cast<std::size_t>(d)]; }
    constexpr T* begin() { return v_.data(); }
    constexpr T* end() { return v_.data() + rank_; }
    constexpr const T* begin() const { return v_.data(); }
    constexpr const T* end() const { return v_.data() + rank_; }

    friend constexpr bool operator==(const Space& a, const Space& b) {
        if (a.rank_ != b.rank_) return false;
        for (int d = 0; d < a.rank_; ++d)
            if (!(a[d] == b[d])) return false;
        return true;
    }
    friend constexpr bool operator!=(const Space& a, const Space& b) { return !(a == b); }

private:
    std::array<T, max_space> v_{};
    int rank_ = 0;
};

// The product of the values (1 for rank 0): the points of a spatial extent.
constexpr std::int64_t product(const Space<std::int64_t>& s) {
    std::int64_t p = 1;
    for (std::int64_t v : s) p *= v;
    return p;
}

// The sizes of a tensor or of a block of it: samples, channels and the spatial extents. A matrix [N, K] is
// {n, k} with no spatial dimension; an image's tile {n, c, {h, w}}.
struct Dims {
    std::int64_t n = 0, c = 0;
    Space<std::int64_t> space;

    constexpr int rank() const { return space.rank(); }
    constexpr std::int64_t points() const { return product(space); }  // per sample and channel
    constexpr std::int64_t elements() const { return n * c * points(); }
    friend constexpr bool operator==(const Dims& a, const Dims& b) {
        return a.n == b.n && a.c == b.c && a.space == b.space;
    }
    friend constexpr bool operator!=(const Dims& a, const Dims& b) { return !(a == b); }
};

}  // namespace dsl
