// PyTorch's serialization (zip, pickle) and NumPy's .npz written from C++, and a checkpoint as the state_dict of
// the network's PyTorch translation.
#include <dsl/backend/torch_export.hpp>

#include "../kinds/kind.hpp"

#include <dsl/backend/npy.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>

#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

namespace dsl::backend {

static_assert(std::endian::native == std::endian::little, "the files hold little-endian elements, as memory does");

namespace {

void put16(std::string& out, std::uint32_t v) {
    out += static_cast<char>(v & 0xff);
    out += static_cast<char>((v >> 8) & 0xff);
}

void put32(std::string& out, std::uint32_t v) {
    put16(out, v & 0xffff);
    put16(out, v >> 16);
}

constexpr std::size_t field_alignment = 64;  // torch's kFieldAlignment (caffe2/serialize/inline_container.cc)
constexpr std::size_t local_header_size = 30;
constexpr std::uint32_t dos_date = (0 << 9) | (1 << 5) | 1;  // 1980-01-01, 00:00: files do not depend on when

std::int64_t elements(const std::vector<std::int64_t>& shape) {
    std::int64_t n = 1;
    for (const std::int64_t d : shape) n *= d;
    return n;
}

std::int64_t element_size(ArrayType t) { return t == ArrayType::f4 ? 4 : 8; }

// The checks both writers make of their arrays: bytes that fit the shape, names that are set and unique.
bool check_arrays(const std::vector<NamedArray>& arrays, std::string& error) {
    std::set<std::string> seen;
    for (const auto& a : arrays) {
        if (a.name.empty() || !seen.insert(a.name).second) {
            error = fmt::format("the array name '{}' is empty or appears twice", a.name);
            return false;
        }
        if (static_cast<std::int64_t>(a.bytes.size()) != elements(a.shape) * element_size(a.type)) {
            error = fmt::format("array '{}': shape {} needs {} bytes, the data has {}", a.name, shape_str(a.shape),
                                elements(a.shape) * element_size(a.type), a.bytes.size());
            return false;
        }
    }
    return true;
}

// The opcodes of pickle protocol 2 that a state_dict needs (Lib/pickle.py names them), written out with the
// arguments they take. Python's unpickler and torch's weights_only one both read them.
class Pickler {
public:
    Pickler() { out_ += "\x80\x02"; }  // PROTO 2

    void global(std::string_view module, std::string_view name) {
        out_ += 'c';
        out_ += module;
        out_ += '\n';
        out_ += name;
        out_ += '\n';
    }
    void text(std::string_view s) {  // BINUNICODE: a str, UTF-8
        out_ += 'X';
        put32(out_, static_cast<std::uint32_t>(s.size()));
        out_ += s;
    }
    void integer(std::int64_t v) {
        if (v >= 0 && v < 0x100) {
            out_ += 'K';  // BININT1
            out_ += static_cast<char>(v);
        } else if (v >= 0 && v < 0x10000) {
            out_ += 'M';  // BININT2
            put16(out_, static_cast<std::uint32_t>(v));
        } else if (v >= std::numeric_limits<std::int32_t>::min() && v <= std::numeric_limits<std::int32_t>::max()) {
            out_ += 'J';  // BININT: signed 32 bits
            put32(out_, static_cast<std::uint32_t>(v));
        } else {
            out_ += '\x8a';  // LONG1: a length byte, then two's complement, little-endian
            out_ += '\x08';
            put32(out_, static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) & 0xffffffffu));
            put32(out_, static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32));
        }
    }
    void tuple_of(const std::vector<std::int64_t>& items) {
        if (items.empty()) {
            out_ += ')';  // EMPTY_TUPLE
            return;
        }
        if (items.size() > 3) mark();
        for (const std::int64_t v : items) integer(v);
        out_ += items.size() == 1 ? '\x85' : items.size() == 2 ? '\x86' : items.size() == 3 ? '\x87' : 't';
    }
    void mark() { out_ += '('; }
    void tuple() { out_ += 't'; }          // TUPLE: the items since the mark
    void empty_tuple() { out_ += ')'; }    // EMPTY_TUPLE
    void reduce() { out_ += 'R'; }         // REDUCE: callable(*args)
    void persistent_id() { out_ += 'Q'; }  // BINPERSID: the unpickler's persistent_load(the tuple on the stack)
    void false_() { out_ += '\x89'; }      // NEWFALSE
    void set_items() { out_ += 'u'; }      // SETITEMS: the key, value pairs since the mark into the dict below
    std::string finish() {
        out_ += '.';  // STOP
        return std::move(out_);
    }

private:
    std::string out_;
};

// The header of a .npy file, format 1.0: the data starts at a multiple of 64 bytes, as numpy.save puts it.
std::string npy_header(const NamedArray& a) {
    std::string shape = "(";
    for (std::size_t i = 0; i < a.shape.size(); ++i) shape += fmt::format("{}, ", a.shape[i]);
    if (a.shape.size() > 1) shape.resize(shape.size() - 2);
    if (a.shape.size() == 1) shape.resize(shape.size() - 1);
    shape += ")";
    std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   a.type == ArrayType::f4 ? "<f4" : "<i8", shape);
    const std::size_t unpadded = 10 + dict.size() + 1;  // magic, version, length; the dict; '\n'
    dict.append((field_alignment - unpadded % field_alignment) % field_alignment, ' ');
    dict += '\n';
    std::string out("\x93NUMPY\x01\x00", 8);
    put16(out, static_cast<std::uint32_t>(dict.size()));
    return out + dict;
}

}  // namespace

std::uint32_t crc32(std::string_view bytes, std::uint32_t crc) {
    static const std::array<std::uint32_t, 256> table = [] {
        std::array<std::uint32_t, 256> t{};
        for (std::uint32_t i = 0; i < 256; ++i) {
            std::uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    crc = ~crc;
    for (const char ch : bytes) crc = table[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
    return ~crc;
}

std::optional<std::string> zip_archive(const std::vector<std::pair<std::string, std::string>>& files,
                                       std::string& error) {
    constexpr std::uint64_t limit = 0xffffffffu;
    if (files.size() >= 0xffff) {
        error = fmt::format("{} files are more than a zip without ZIP64 holds (65534)", files.size());
        return std::nullopt;
    }
    std::string out, directory;
    for (const auto& [name, data] : files) {
        const std::uint64_t offset = out.size();
        // The extra field pads the header so that the data starts at a multiple of field_alignment.
        const std::size_t start = offset + local_header_size + name.size() + 4;
        const std::size_t padding = (field_alignment - start % field_alignment) % field_alignment;
        if (offset + local_header_size + name.size() + 4 + padding + data.size() > limit || name.size() > 0xffff) {
            error = "the file would be larger than 4 GiB, which needs ZIP64 (not written by dsl)";
            return std::nullopt;
        }
        const std::uint32_t crc = crc32(data);
        auto common = [&](std::string& h) {  // the fields from "version needed" to the extra field's length
            put16(h, 20);                    // version 2.0: stored files in folders
            put16(h, 0);                     // flags
            put16(h, 0);                     // method: stored
            put16(h, 0);                     // time
            put16(h, dos_date);
            put32(h, crc);
            put32(h, static_cast<std::uint32_t>(data.size()));  // compressed
            put32(h, static_cast<std::uint32_t>(data.size()));  // uncompressed
            put16(h, static_cast<std::uint32_t>(name.size()));
        };
        put32(out, 0x04034b50);  // local file header
        common(out);
        put16(out, static_cast<std::uint32_t>(4 + padding));
        out += name;
        out += "FB";
        put16(out, static_cast<std::uint32_t>(padding));
        out.append(padding, 'Z');
        out += data;

        put32(directory, 0x02014b50);  // central directory header
        put16(directory, 20);          // made by: version 2.0, MS-DOS attributes
        common(directory);
        put16(directory, 0);  // extra field
        put16(directory, 0);  // comment
        put16(directory, 0);  // disk
        put16(directory, 0);  // internal attributes
        put32(directory, 0);  // external attributes
        put32(directory, static_cast<std::uint32_t>(offset));
        directory += name;
    }
    const std::uint64_t directory_offset = out.size();
    if (directory_offset + directory.size() + 22 > limit) {
        error = "the file would be larger than 4 GiB, which needs ZIP64 (not written by dsl)";
        return std::nullopt;
    }
    out += directory;
    put32(out, 0x06054b50);  // end of central directory
    put16(out, 0);           // this disk
    put16(out, 0);           // the directory's disk
    put16(out, static_cast<std::uint32_t>(files.size()));
    put16(out, static_cast<std::uint32_t>(files.size()));
    put32(out, static_cast<std::uint32_t>(directory.size()));
    put32(out, static_cast<std::uint32_t>(directory_offset));
    put16(out, 0);  // comment
    return out;
}

std::optional<std::string> torch_save_bytes(const std::vector<NamedArray>& arrays, std::string& error) {
    if (!check_arrays(arrays, error)) return std::nullopt;
    // torch.save's pickle (torch/serialization.py, _save; torch/_tensor.py, __reduce_ex__): each tensor is
    // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks), its storage a
    // persistent id ('storage', storage type, key, location, numel) that torch.load reads from data/KEY.
    Pickler p;
    p.global("collections", "OrderedDict");
    p.empty_tuple();
    p.reduce();
    p.mark();
    for (std::size_t i = 0; i < arrays.size(); ++i) {
        const NamedArray& a = arrays[i];
        p.text(a.name);
        p.global("torch._utils", "_rebuild_tensor_v2");
        p.mark();
        p.mark();
        p.text("storage");
        p.global("torch", a.type == ArrayType::f4 ? "FloatStorage" : "LongStorage");
        p.text(std::to_string(i));
        p.text("cpu");
        p.integer(elements(a.shape));
        p.tuple();
        p.persistent_id();
        p.integer(0);  // storage offset
        p.tuple_of(a.shape);
        std::vector<std::int64_t> stride(a.shape.size(), 1);  // C order
        for (std::size_t d = a.shape.size(); d-- > 1;) stride[d - 1] = stride[d] * a.shape[d];
        p.tuple_of(stride);
        p.false_();                              // requires_grad
        p.global("collections", "OrderedDict");  // backward hooks: none
        p.empty_tuple();
        p.reduce();
        p.tuple();
        p.reduce();
    }
    p.set_items();
    std::vector<std::pair<std::string, std::string>> files;
    files.reserve(arrays.size() + 3);
    files.emplace_back("archive/data.pkl", p.finish());
    files.emplace_back("archive/byteorder", "little");
    for (std::size_t i = 0; i < arrays.size(); ++i)
        files.emplace_back(fmt::format("archive/data/{}", i), arrays[i].bytes);
    files.emplace_back("archive/version", "3\n");
    return zip_archive(files, error);
}

std::optional<std::string> npz_bytes(const std::vector<NamedArray>& arrays, std::string& error) {
    if (!check_arrays(arrays, error)) return std::nullopt;
    std::vector<std::pair<std::string, std::string>> files;
    files.reserve(arrays.size());
    for (const auto& a : arrays) files.emplace_back(a.name + ".npy", npy_header(a) + a.bytes);
    return zip_archive(files, error);
}

std::optional<std::vector<NamedArray>> torch_state_dict(const frontend::Network& net, const Checkpoint& ckpt,
                                                        std::string& error) {
    std::optional<std::int64_t> step;
    if (const auto it = ckpt.meta.find("step"); it != ckpt.meta.end() && it->is_number_integer() && *it >= 0)
        step = it->get<std::int64_t>();
    if (!step) {
        error = "the checkpoint's meta has no step (a count from 0 to 2^63-1)";
        return std::nullopt;
    }
    std::vector<NamedArray> out;
    std::set<std::string> taken;  // the checkpoint's tensors that the state_dict holds
    auto add = [&](std::size_t index, const std::string& suffix, std::vector<std::int64_t> shape) {
        const frontend::Layer& l = net.layers[index];
        const std::string name = l.name + "." + suffix;
        const CheckpointTensor* t = ckpt.find(name);
        if (!t) {
            error = fmt::format("the checkpoint has no tensor '{}' (is it a checkpoint of another network?)", name);
            return false;
        }
        if (t->shape != shape) {
            error = fmt::format("'{}' is {} in the checkpoint but {} in the network", name, shape_str(t->shape),
                                shape_str(shape));
            return false;
        }
        DSL_INTERNAL_CHECK(static_cast<std::int64_t>(t->data.size()) == elements(shape), "a checkpoint tensor's size");
        taken.insert(name);
        NamedArray a{fmt::format("mods.{}.{}", index, suffix), std::move(shape), ArrayType::f4, {}};
        a.bytes.assign(reinterpret_cast<const char*>(t->data.data()), t->data.size() * sizeof(float));
        out.push_back(std::move(a));
        return true;
    };
    for (std::size_t i = 0; i < net.layers.size(); ++i) {
        const frontend::Layer& l = net.layers[i];
        if (l.params == 0) continue;
        const frontend::Shape& in = net.layers[static_cast<std::size_t>(l.inputs.at(0))].shape;
        for (const ExportedTensor& e : rules_of(l.op).exported(l, in)) {
            if (e.steps) {
                NamedArray count{fmt::format("mods.{}.{}", i, e.suffix), {}, ArrayType::i8, std::string(8, '\0')};
                std::memcpy(count.bytes.data(), &*step, sizeof(std::int64_t));
                out.push_back(std::move(count));
            } else if (!add(i, e.suffix, e.shape)) {
                return std::nullopt;
            }
        }
    }
    // What else the checkpoint may hold is the optimizer's state of these tensors.
    for (const auto& t : ckpt.tensors) {
        if (taken.count(t.name)) continue;
        bool state = false;
        for (const char* suffix : {".momentum", ".exp_avg", ".exp_avg_sq"}) {
            const std::size_t n = std::strlen(suffix);
            state = state || (t.name.size() > n && t.name.compare(t.name.size() - n, n, suffix) == 0 &&
                              taken.count(t.name.substr(0, t.name.size() - n)));
        }
        if (!state) {
            error = fmt::format("the checkpoint holds '{}', which the network does not have", t.name);
            return std::nullopt;
        }
    }
    return out;
}

}  // namespace dsl::backend
