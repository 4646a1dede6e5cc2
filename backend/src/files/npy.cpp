// The .npy reader (mmap, header parsed by a small parser of the Python dict literal NumPy writes) and writer.
#include <dsl/backend/npy.hpp>

#include <dsl/base/source.hpp>

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsl::backend {

// Element bytes are copied as they lie in the file; the files are little-endian.
static_assert(std::endian::native == std::endian::little, "the .npy code assumes a little-endian host");

namespace {

constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

struct TypeInfo {
    NpyType type;
    const char* code;  // without the byte-order character
    const char* descr;
    std::int64_t size;
};

constexpr TypeInfo types[] = {
    {NpyType::f2, "f2", "<f2", 2}, {NpyType::f4, "f4", "<f4", 4}, {NpyType::f8, "f8", "<f8", 8},
    {NpyType::i1, "i1", "|i1", 1}, {NpyType::i2, "i2", "<i2", 2}, {NpyType::i4, "i4", "<i4", 4},
    {NpyType::i8, "i8", "<i8", 8}, {NpyType::u1, "u1", "|u1", 1}, {NpyType::u2, "u2", "<u2", 2},
    {NpyType::u4, "u4", "<u4", 4}, {NpyType::u8, "u8", "<u8", 8}, {NpyType::b1, "b1", "|b1", 1},
};

const TypeInfo& info(NpyType t) {
    for (const auto& i : types)
        if (i.type == t) return i;
    return types[1];
}

// An IEEE 754 half-precision number (NumPy's float16), converted exactly: every half is a float.
struct Half {
    std::uint16_t bits;
    explicit operator float() const {
        const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
        const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
        if (exponent == 0) {  // zero and subnormals: mantissa * 2^-24
            const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
            return sign ? -magnitude : magnitude;
        }
        const std::uint32_t e = exponent == 0x1f ? 0xffu : exponent + 112;  // infinities and NaNs stay so
        return std::bit_cast<float>(sign | (e << 23) | (mantissa << 13));
    }
};

// '<' little, '|' not applicable (one byte), '=' native (little here); '>' only for one-byte types.
std::optional<NpyType> type_from_descr(const std::string& d) {
    if (d.size() < 2) return std::nullopt;
    const char order = d[0];
    const std::string code = d.substr(1);
    for (const auto& i : types) {
        if (code != i.code) continue;
        if (order == '<' || order == '=') return i.type;
        if ((order == '|' || order == '>') && i.size == 1) return i.type;
        return std::nullopt;
    }
    return std::nullopt;
}

template <typename T>
T load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class DictParser {
public:
    explicit DictParser(std::string text) : s_(std::move(text)) {}

    bool parse(std::string& descr, bool& fortran, std::vector<std::int64_t>& shape, std::string& why) {
        bool have_descr = false, have_fortran = false, have_shape = false;
        ws();
        if (!eat('{')) return fail(why, "the header is not a dict");
        for (;;) {
            ws();
            if (eat('}')) break;
            std::string key;
            if (!string(key)) return fail(why, "expected a quoted key");
            ws();
            if (!eat(':')) return fail(why, "expected ':' after '" + key + "'");
            ws();
            if (key == "descr") {
                if (!string(descr)) return fail(why, "'descr' is not a string (structured dtypes are unsupported)");
                have_descr = true;
            } else if (key == "fortran_order") {
                if (word("True"))
                    fortran = true;
                else if (word("False"))
                    fortran = false;
                else
                    return fail(why, "'fortran_order' is not True or False");
                have_fortran = true;
            } else if (key == "shape") {
                if (!tuple(shape)) return fail(why, "'shape' is not a tuple of non-negative integers");
                have_shape = true;
            } else {
                return fail(why, "unexpected key '" + key + "'");
            }
            ws();
            if (eat(',')) continue;
            ws();
            if (eat('}')) break;
            return fail(why, "expected ',' or '}'");
        }
        if (!have_descr) return fail(why, "no 'descr'");
        if (!have_fortran) return fail(why, "no 'fortran_order'");
        if (!have_shape) return fail(why, "no 'shape'");
        ws();
        if (pos_ != s_.size()) return fail(why, "text after the dict");
        return true;
    }

private:
    static bool fail(std::string& why, const std::string& w) {
        why = w;
        return false;
    }
    void ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }
    bool eat(char c) {
        if (pos_ < s_.size() && s_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }
    bool word(const char* w) {
        const std::size_t n = std::strlen(w);
        if (s_.compare(pos_, n, w) != 0) return false;
        pos_ += n;
        return true;
    }
    bool string(std::string& out) {
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
        const char q = s_[pos_++];
        const std::size_t end = s_.find(q, pos_);
        if (end == std::string::npos) return false;
        out = s_.substr(pos_, end - pos_);
        pos_ = end + 1;
        return true;
    }
    bool integer(std::int64_t& v) {
        const std::size_t start = pos_;
        v = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            if (v > (std::numeric_limits<std::int64_t>::max() - 9) / 10) return false;
            v = v * 10 + (s_[pos_++] - '0');
        }
        if (pos_ == start) return false;
        eat('L');  // Python 2 longs
        return true;
    }
    bool tuple(std::vector<std::int64_t>& out) {
        out.clear();
        if (!eat('(')) return false;
        for (;;) {
            ws();
            if (eat(')')) return true;
            std::int64_t v = 0;
            if (!integer(v)) return false;
            out.push_back(v);
            ws();
            if (eat(',')) continue;
            ws();
            return eat(')');
        }
    }

    std::string s_;
    std::size_t pos_ = 0;
};

template <typename T>
void convert_row(const unsigned char* src, float* dst, std::int64_t w) {
    if constexpr (std::is_same_v<T, float>) {
        std::memcpy(dst, src, static_cast<std::size_t>(w) * sizeof(float));
    } else {
        for (std::int64_t i = 0; i < w; ++i) dst[i] = static_cast<float>(load<T>(src + i * sizeof(T)));
    }
}

bool in_range(std::int64_t start, std::int64_t count, std::int64_t extent) {
    return start >= 0 && count >= 0 && start <= extent && count <= extent - start;
}

bool write_array(const std::string& path, const std::vector<std::int64_t>& shape, const char* descr, const void* data,
                 std::int64_t elem_size, std::string& error) {
    std::int64_t count = 1;
    for (auto d : shape) {
        if (d < 0) {
            error = fmt::format("{}: negative dimension in shape {}", path, shape_str(shape));
            return false;
        }
        count *= d;
    }
    const std::string head = npy_header(shape, descr);

    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        error = fmt::format("{}: cannot write: {}", path, std::strerror(errno));
        return false;
    }
    bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size();
    const auto bytes = static_cast<std::size_t>(count * elem_size);
    if (ok && bytes > 0) ok = std::fwrite(data, 1, bytes, f) == bytes;
    // Flushed to the disk: a checkpoint is renamed into place only once its files are durable.
    ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const int saved = errno;
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) {
        error = fmt::format("{}: write failed: {}", path, std::strerror(saved ? saved : errno));
        return false;
    }
    return true;
}

}  // namespace

const char* npy_descr(NpyType t) { return info(t).descr; }
std::int64_t npy_size(NpyType t) { return info(t).size; }
bool npy_is_integer(NpyType t) { return t != NpyType::f2 && t != NpyType::f4 && t != NpyType::f8; }

std::string shape_str(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::int64_t NpyHeader::elements() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
}

std::optional<NpyHeader> parse_npy_header(const unsigned char* bytes, std::int64_t size, const std::string& path,
                                          std::string& error) {
    if (size < 10 || std::memcmp(bytes, magic, 6) != 0) {
        error = fmt::format("{}: not a .npy file", path);
        return std::nullopt;
    }
    NpyHeader h;
    h.major_version = bytes[6];
    std::int64_t len = 0, prefix = 0;
    if (h.major_version == 1) {
        len = bytes[8] | (bytes[9] << 8);
        prefix = 10;
    } else if (h.major_version == 2 || h.major_version == 3) {
        if (size < 12) {
            error = fmt::format("{}: file is truncated: the header is incomplete", path);
            return std::nullopt;
        }
        len = static_cast<std::int64_t>(load<std::uint32_t>(bytes + 8));
        prefix = 12;
    } else {
        error = fmt::format("{}: unsupported .npy format version {}.{}", path, bytes[6], bytes[7]);
        return std::nullopt;
    }
    if (prefix + len > size) {
        error = fmt::format("{}: file is truncated: the header is incomplete", path);
        return std::nullopt;
    }
    h.data_offset = prefix + len;

    std::string descr, why;
    bool fortran = false;
    DictParser parser(std::string(reinterpret_cast<const char*>(bytes + prefix), static_cast<std::size_t>(len)));
    if (!parser.parse(descr, fortran, h.shape, why)) {
        error = fmt::format("{}: bad .npy header: {}", path, why);
        return std::nullopt;
    }
    const auto type = type_from_descr(descr);
    if (!type) {
        error =
            fmt::format("{}: unsupported dtype '{}' (little-endian f2, f4, f8, i1-i8, u1-u8 or b1 only)", path, descr);
        return std::nullopt;
    }
    h.dtype = *type;
    if (fortran) {
        error = fmt::format(
            "{}: fortran_order is True: only C-order arrays are supported "
            "(save with numpy.ascontiguousarray)",
            path);
        return std::nullopt;
    }
    std::int64_t n = 1;
    for (auto d : h.shape)
        if (__builtin_mul_overflow(n, d, &n)) {
            error = fmt::format("{}: bad .npy header: shape {} is too large", path, shape_str(h.shape));
            return std::nullopt;
        }
    return h;
}

std::optional<NpyFile> NpyFile::open(const std::string& path, std::string& error) {
    std::string why;
    const int fd = open_regular_file(path, why);
    if (fd < 0) {
        error = fmt::format("{}: cannot open: {}", path, why);
        return std::nullopt;
    }
    struct stat st {};
    ::fstat(fd, &st);
    if (st.st_size < 10) {  // also keeps mmap from a zero length
        ::close(fd);
        error = fmt::format("{}: not a .npy file", path);
        return std::nullopt;
    }
    void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int saved = errno;
    ::close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) {
        error = fmt::format("{}: cannot map: {}", path, std::strerror(saved));
        return std::nullopt;
    }
    NpyFile f;
    f.path_ = path;
    f.base_ = static_cast<const unsigned char*>(p);
    f.mapped_ = st.st_size;
    auto h = parse_npy_header(f.base_, f.mapped_, path, error);
    if (!h) return std::nullopt;  // f unmaps
    f.header_ = *h;
    const std::int64_t size = npy_size(h->dtype);
    const std::int64_t holds = (f.mapped_ - h->data_offset) / size;
    if (holds < h->elements()) {
        error =
            fmt::format("{}: file is truncated: header says {} elements, data holds {}", path, h->elements(), holds);
        return std::nullopt;
    }
    return std::optional<NpyFile>(std::move(f));
}

NpyFile::NpyFile(NpyFile&& o) noexcept
    : path_(std::move(o.path_)),
      header_(std::move(o.header_)),
      base_(std::exchange(o.base_, nullptr)),
      mapped_(std::exchange(o.mapped_, 0)) {}

NpyFile& NpyFile::operator=(NpyFile&& o) noexcept {
    if (this != &o) {
        if (base_) ::munmap(const_cast<unsigned char*>(base_), static_cast<std::size_t>(mapped_));
        path_ = std::move(o.path_);
        header_ = std::move(o.header_);
        base_ = std::exchange(o.base_, nullptr);
        mapped_ = std::exchange(o.mapped_, 0);
    }
    return *this;
}

NpyFile::~NpyFile() {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), static_cast<std::size_t>(mapped_));
}

double NpyFile::at(std::int64_t i) const {
    const unsigned char* p = data() + i * npy_size(dtype());
    switch (dtype()) {
        case NpyType::f2: return static_cast<float>(load<Half>(p));
        case NpyType::f4: return load<float>(p);
        case NpyType::f8: return load<double>(p);
        default: return static_cast<double>(integer_at(i));
    }
}

std::int64_t NpyFile::integer_at(std::int64_t i) const {
    const unsigned char* p = data() + i * npy_size(dtype());
    switch (dtype()) {
        case NpyType::f2: return static_cast<std::int64_t>(static_cast<float>(load<Half>(p)));
        case NpyType::f4: return static_cast<std::int64_t>(load<float>(p));
        case NpyType::f8: return static_cast<std::int64_t>(load<double>(p));
        case NpyType::i1: return load<std::int8_t>(p);
        case NpyType::i2: return load<std::int16_t>(p);
        case NpyType::i4: return load<std::int32_t>(p);
        case NpyType::i8: return load<std::int64_t>(p);
        case NpyType::u1: return load<std::uint8_t>(p);
        case NpyType::u2: return load<std::uint16_t>(p);
        case NpyType::u4: return load<std::uint32_t>(p);
        case NpyType::u8: {
            const auto v = load<std::uint64_t>(p);
            return v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                       ? std::numeric_limits<std::int64_t>::max()
                       : static_cast<std::int64_t>(v);
        }
        case NpyType::b1: return p[0] != 0;
    }
    return 0;
}

namespace {

// The shape a tile of `out`'s rank reads, as a message names it: [S, C, H, W] (an image's), [S, C, D, H, W]
// (a volume's), [S, K] (a vector's); without channels, class labels: [S], [S, H, W], [S, D, H, W].
std::string sample_shape(bool channels, int rank) {
    static const char* const letters[max_space] = {"D", "H", "W"};
    std::string out = "[S";
    if (channels) out += rank == 0 ? ", K" : ", C";
    for (int d = 0; d < rank; ++d) out += std::string(", ") + letters[max_space - rank + d];
    return out + "]";
}

// Whether samples [s0, s0 + n), channels [c0, c0 + c) (when the array has them) and the spatial block of
// `extents` at `at` lie within an array of `shape`; else the message.
bool tile_in_range(const NpyFile& file, const char* what, std::int64_t s0, std::int64_t n, bool channels,
                   std::int64_t c0, std::int64_t c, const Index& at, const Space<std::int64_t>& extents,
                   std::string& error) {
    const auto& sh = file.shape();
    const std::size_t first = channels ? 2 : 1;
    bool ok = in_range(s0, n, sh[0]) && (!channels || in_range(c0, c, sh[1]));
    std::string block = fmt::format("{}:{}", s0, s0 + n);
    if (channels) block += fmt::format(", {}:{}", c0, c0 + c);
    for (int d = 0; d < at.rank(); ++d) {
        ok = ok && in_range(at[d], extents[d], sh[first + static_cast<std::size_t>(d)]);
        block += fmt::format(", {}:{}", at[d], at[d] + extents[d]);
    }
    if (!ok) error = fmt::format("{}: the {} [{}] is outside the array {}", file.path(), what, block, shape_str(sh));
    return ok;
}

Index plus(Index a, const Index& b) {
    for (int d = 0; d < a.rank(); ++d) a[d] += b[d];
    return a;
}

}  // namespace

std::int64_t npy_offset(const std::vector<std::int64_t>& shape, std::int64_t s, bool channels, std::int64_t c,
                        const Index& at) {
    std::int64_t o = s;
    std::size_t k = 1;
    if (channels) o = o * shape[k++] + c;
    for (int d = 0; d < at.rank(); ++d) o = o * shape[k++] + at[d];
    return o;
}

bool copy_sample_tile(const NpyFile& file, std::int64_t s0, std::int64_t c0, const Index& at, View out,
                      std::string& error) {
    const auto& sh = file.shape();
    const Dims d = out.dims;
    if (static_cast<int>(sh.size()) != 2 + d.rank()) {
        error = fmt::format("{}: inputs must be {}, the file holds {}", file.path(), sample_shape(true, d.rank()),
                            shape_str(sh));
        return false;
    }
    if (!tile_in_range(file, "tile", s0, d.n, true, c0, d.c, at, d.space, error)) return false;
    const std::int64_t esize = npy_size(file.dtype());
    auto each_row = [&](auto convert) {
        for_each_row(out, [&](std::int64_t n, std::int64_t c, const Index& i, float* row) {
            convert(file.data() + npy_offset(sh, s0 + n, true, c0 + c, plus(i, at)) * esize, row, row_length(d));
        });
    };
    switch (file.dtype()) {
        case NpyType::f2: each_row(convert_row<Half>); break;
        case NpyType::f4: each_row(convert_row<float>); break;
        case NpyType::f8: each_row(convert_row<double>); break;
        case NpyType::i1: each_row(convert_row<std::int8_t>); break;
        case NpyType::i2: each_row(convert_row<std::int16_t>); break;
        case NpyType::i4: each_row(convert_row<std::int32_t>); break;
        case NpyType::i8: each_row(convert_row<std::int64_t>); break;
        case NpyType::u1: each_row(convert_row<std::uint8_t>); break;
        case NpyType::u2: each_row(convert_row<std::uint16_t>); break;
        case NpyType::u4: each_row(convert_row<std::uint32_t>); break;
        case NpyType::u8: each_row(convert_row<std::uint64_t>); break;
        case NpyType::b1: each_row(convert_row<std::uint8_t>); break;
    }
    return true;
}

bool copy_label_tile(const NpyFile& file, std::int64_t s0, const Index& at, BasicView<std::int32_t> out,
                     std::string& error) {
    const auto& sh = file.shape();
    if (!npy_is_integer(file.dtype())) {
        error = fmt::format("{}: labels must have an integer dtype, not '{}'", file.path(), npy_descr(file.dtype()));
        return false;
    }
    const Dims d = out.dims;
    if (static_cast<int>(sh.size()) != 1 + d.rank()) {
        error = fmt::format("{}: labels must be {}, the file holds {}", file.path(),
                            d.rank() == 0 ? "[S]" : "[S] or " + sample_shape(false, d.rank()), shape_str(sh));
        return false;
    }
    if (d.c != 1 || !tile_in_range(file, "label tile", s0, d.n, false, 0, 1, at, d.space, error)) return false;
    const std::int64_t w = row_length(d);
    bool fits = true;
    for_each_row(out, [&](std::int64_t n, std::int64_t, const Index& i, std::int32_t* row) {
        const std::int64_t first = npy_offset(sh, s0 + n, false, 0, plus(i, at));
        for (std::int64_t x = 0; x < w && fits; ++x) {
            const std::int64_t v = file.integer_at(first + x);
            if (v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()) {
                error = fmt::format("{}: label {} of sample {} does not fit in int32", file.path(), v, s0 + n);
                fits = false;
            }
            row[x] = static_cast<std::int32_t>(v);
        }
    });
    return fits;
}

std::string npy_header(const std::vector<std::int64_t>& shape, const char* descr) {
    std::string dims;
    for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) dims += ",";  // a one-element tuple
    std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
    // The magic, version and length, the dict, spaces and a newline: a multiple of 64 bytes, so that the
    // data is aligned when the file is mapped.
    const bool v2 = dict.size() + 1 + 10 > 65535;
    const std::size_t prefix = v2 ? 12 : 10;
    const std::size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
    dict.append(total - prefix - dict.size() - 1, ' ');
    dict += '\n';

    std::string head(reinterpret_cast<const char*>(magic), 6);
    head += static_cast<char>(v2 ? 2 : 1);
    head += '\0';
    const std::uint32_t len = static_cast<std::uint32_t>(dict.size());
    head += static_cast<char>(len & 0xff);
    head += static_cast<char>((len >> 8) & 0xff);
    if (v2) {
        head += static_cast<char>((len >> 16) & 0xff);
        head += static_cast<char>((len >> 24) & 0xff);
    }
    head += dict;
    return head;
}

bool write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data, std::string& error) {
    return write_array(path, shape, "<f4", data, 4, error);
}

bool write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::int32_t* data,
               std::string& error) {
    return write_array(path, shape, "<i4", data, 4, error);
}

}  // namespace dsl::backend
