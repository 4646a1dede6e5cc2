// The data source over files (`--data NAME=FILE`): each input and label layer reads its own array, a .npy
// file (memory-mapped) or an HDF5 data set (a hyperslab per sample of the tile, so that no process reads
// more than its tile), through the order of the epoch (--shuffle), the inputs' transforms (transforms.hpp)
// and their normalization.
#include <dsl/backend/data.hpp>
#include <dsl/backend/watchdog.hpp>

#include "../random/splitmix.hpp"
#include "array.hpp"
#include "augment.hpp"
#include "file_guard.hpp"
#include "transforms.hpp"

#include <dsl/backend/npy.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <hdf5.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace dsl::backend {

using frontend::Layer;
using frontend::OpKind;

namespace {

using data::Array;
using data::FileGuard;

std::string range_message(std::int64_t v, std::int64_t sample, std::int64_t classes) {
    return fmt::format("label {} of sample {} is outside [0, {})", v, sample, classes);
}

class NpyArray : public Array {
public:
    explicit NpyArray(NpyFile f) : file_(std::move(f)) {}
    const std::vector<std::int64_t>& shape() const override { return file_.shape(); }
    std::string type_name() const override { return npy_descr(file_.dtype()); }
    bool integer() const override { return npy_is_integer(file_.dtype()); }
    bool number() const override { return true; }
    void read(std::int64_t s, const Index& at, View out) override {
        std::string error;
        if (!copy_sample_tile(file_, s, 0, at, out, error)) throw UserError(error);
    }
    void read(std::int64_t s, const Index& at, BasicView<std::int32_t> out) override {
        std::string error;
        if (!copy_label_tile(file_, s, at, out, error)) throw UserError(error);
    }
    void read_dense(std::int64_t s, std::int64_t first, const Index& at, View out) override {
        std::string error;
        if (!copy_sample_tile(file_, s, first, at, out, error)) throw UserError(error);
    }
    std::string out_of_range(std::int64_t classes) override {
        const std::int64_t per_sample = file_.elements() / std::max<std::int64_t>(1, file_.shape()[0]);
        for (std::int64_t i = 0; i < file_.elements(); ++i) {
            const std::int64_t v = file_.integer_at(i);
            if (v < 0 || v >= classes) return range_message(v, i / per_sample, classes);
        }
        return {};
    }
    bool attribute(const std::string& name, std::vector<double>&, std::string& error) override {
        error = fmt::format("a .npy file has no attribute '{}' (--normalize file reads an HDF5 data set's)", name);
        return false;
    }

private:
    NpyFile file_;
};

// An HDF5 identifier, closed by its own function.
class Handle {
public:
    Handle() = default;
    Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
    Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = H5I_INVALID_HID; }
    Handle& operator=(Handle&& o) noexcept {
        std::swap(id_, o.id_);
        std::swap(close_, o.close_);
        return *this;
    }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    ~Handle() {
        if (id_ >= 0 && close_) close_(id_);
    }
    hid_t get() const { return id_; }
    bool ok() const { return id_ >= 0; }

private:
    hid_t id_ = H5I_INVALID_HID;
    herr_t (*close_)(hid_t) = nullptr;
};

std::string hdf5_type_name(hid_t type) {
    const std::size_t bytes = H5Tget_size(type);
    switch (H5Tget_class(type)) {
        case H5T_INTEGER: return fmt::format("{}int{}", H5Tget_sign(type) == H5T_SGN_NONE ? "u" : "", 8 * bytes);
        case H5T_FLOAT: return fmt::format("float{}", 8 * bytes);
        case H5T_STRING: return "string";
        case H5T_COMPOUND: return "compound";
        case H5T_ENUM: return "enum";
        case H5T_ARRAY: return "array";
        case H5T_BITFIELD: return "bitfield";
        case H5T_OPAQUE: return "opaque";
        case H5T_REFERENCE: return "reference";
        case H5T_VLEN: return "variable-length";
        default: return "unknown";
    }
}

// The data sets of a file, for the message that names a missing one.
herr_t collect_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
    if (info->type == H5O_TYPE_DATASET && name[0] != '.')
        static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
    return 0;
}

class Hdf5Array : public Array {
public:
    static std::unique_ptr<Hdf5Array> open(const std::string& path, const std::string& dataset, std::string& error) {
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // our messages, not the library's error stack
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) {
            error = fmt::format("{}: cannot open: {}", path,
                                std::filesystem::exists(path, ec) ? "not a regular file" : "no such file");
            return nullptr;
        }
        if (H5Fis_hdf5(path.c_str()) <= 0) {
            error = fmt::format("{}: not an HDF5 file", path);
            return nullptr;
        }
        auto a = std::unique_ptr<Hdf5Array>(new Hdf5Array());
        a->name_ = path + ":" + dataset;
        // Opened by every process on its own (independent reads); without file locks, which a file system
        // under MPI may not have and a reader does not need.
        Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
        H5Pset_file_locking(fapl.get(), false, true);
        a->file_ = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
        if (!a->file_.ok()) {
            error = fmt::format("{}: cannot open as HDF5", path);
            return nullptr;
        }
        const htri_t is_dataset = H5Lexists(a->file_.get(), dataset.c_str(), H5P_DEFAULT) > 0
                                      ? H5Oexists_by_name(a->file_.get(), dataset.c_str(), H5P_DEFAULT)
                                      : 0;
        if (is_dataset > 0) a->dataset_ = Handle(H5Dopen2(a->file_.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
        if (!a->dataset_.ok()) {
            std::vector<std::string> names;
            H5Ovisit(a->file_.get(), H5_INDEX_NAME, H5_ITER_NATIVE, collect_dataset, &names);
            std::string list;
            for (std::size_t i = 0; i < names.size() && i < 8; ++i) list += (i ? ", " : "") + names[i];
            if (names.size() > 8) list += ", ...";
            error = fmt::format("{}: no data set '{}' ({})", path, dataset,
                                names.empty() ? "the file holds none" : "it holds " + list);
            return nullptr;
        }
        a->space_ = Handle(H5Dget_space(a->dataset_.get()), H5Sclose);
        Handle type(H5Dget_type(a->dataset_.get()), H5Tclose);
        a->type_ = hdf5_type_name(type.get());
        a->class_ = H5Tget_class(type.get());
        const int rank = H5Sget_simple_extent_ndims(a->space_.get());
        if (rank < 0) {
            error = fmt::format("{}: cannot read the shape of '{}'", path, dataset);
            return nullptr;
        }
        std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
        H5Sget_simple_extent_dims(a->space_.get(), dims.data(), nullptr);
        for (hsize_t d : dims) a->shape_.push_back(static_cast<std::int64_t>(d));
        return a;
    }

    // Sees a data set of one sample, [dims...], as the block [1, dims...].
    void add_sample_axis() {
        sample_axis_ = false;
        shape_.insert(shape_.begin(), 1);
    }

    const std::vector<std::int64_t>& shape() const override { return shape_; }
    std::string type_name() const override { return type_; }
    bool integer() const override { return class_ == H5T_INTEGER; }
    bool number() const override { return class_ == H5T_INTEGER || class_ == H5T_FLOAT; }

    void read(std::int64_t s, const Index& at, View out) override {
        const Dims d = out.dims;
        // [S, C, spatial...] into a tile that lies within a dense buffer of whole rows, planes and channels (a
        // tensor's interior, margins around it): straight into the tile, HDF5 placing each row at its stride.
        if (const auto padded = padded_extents(out); padded && channels(d) && d.rank() > 0 && d.elements() > 0) {
            std::vector<hsize_t> count{1, static_cast<hsize_t>(d.c)};
            for (std::int64_t e : d.space) count.push_back(static_cast<hsize_t>(e));
            const std::vector<hsize_t> zero(count.size(), 0);
            Handle memory(H5Screate_simple(static_cast<int>(padded->size()), padded->data(), nullptr), H5Sclose);
            H5Sselect_hyperslab(memory.get(), H5S_SELECT_SET, zero.data(), nullptr, count.data(), nullptr);
            return read_block(s, 1, at, d, H5T_NATIVE_FLOAT, out.base, memory.get());
        }
        floats_.resize(static_cast<std::size_t>(d.elements()));
        read_block(s, 1, at, d, H5T_NATIVE_FLOAT, floats_.data());
        const float* in = floats_.data();
        for_each_row(out, [&](std::int64_t, std::int64_t, const Index&, float* row) {
            std::copy_n(in, row_length(d), row);
            in += row_length(d);
        });
    }
    void read_dense(std::int64_t s, std::int64_t first, const Index& at, View out) override {
        read_block(s, 1, at, out.dims, H5T_NATIVE_FLOAT, out.base, H5I_INVALID_HID, first);
    }
    void read(std::int64_t s, const Index& at, BasicView<std::int32_t> out) override {
        const Dims d = out.dims;
        ints_.resize(static_cast<std::size_t>(d.elements()));
        read_block(s, 1, at, d, H5T_NATIVE_INT32, ints_.data());
        const std::int32_t* in = ints_.data();
        for_each_row(out, [&](std::int64_t, std::int64_t, const Index&, std::int32_t* row) {
            std::copy_n(in, row_length(d), row);
            in += row_length(d);
        });
    }

    std::string out_of_range(std::int64_t classes) override {
        // Blocks of about 16M labels, so that a data set larger than memory is checked.
        std::int64_t per_sample = 1;
        for (std::size_t i = 1; i < shape_.size(); ++i) per_sample *= shape_[i];
        const std::int64_t block =
            std::max<std::int64_t>(1, (std::int64_t{1} << 24) / std::max<std::int64_t>(1, per_sample));
        // Class labels [S, spatial...]: a sample is one channel of them.
        Dims d{1, 1, Index::filled(static_cast<int>(shape_.size()) - 1, 0)};
        for (int k = 0; k < d.rank(); ++k) d.space[k] = shape_[static_cast<std::size_t>(k) + 1];
        const Index origin = Index::filled(d.rank(), 0);
        for (std::int64_t s0 = 0; s0 < shape_[0]; s0 += block) {
            const std::int64_t n = std::min(block, shape_[0] - s0);
            ints_.resize(static_cast<std::size_t>(n * per_sample));
            read_block(s0, n, origin, d, H5T_NATIVE_INT32, ints_.data());
            for (std::size_t i = 0; i < ints_.size(); ++i)
                if (ints_[i] < 0 || ints_[i] >= classes)
                    return range_message(ints_[i], s0 + static_cast<std::int64_t>(i) / per_sample, classes);
        }
        return {};
    }

    bool attribute(const std::string& name, std::vector<double>& out, std::string& error) override {
        if (H5Aexists(dataset_.get(), name.c_str()) <= 0) {
            error = fmt::format("{}: the data set has no attribute '{}' (--normalize file reads 'mean' and 'std')",
                                name_, name);
            return false;
        }
        Handle attr(H5Aopen(dataset_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
        Handle space(H5Aget_space(attr.get()), H5Sclose);
        Handle type(H5Aget_type(attr.get()), H5Tclose);
        const H5T_class_t cls = H5Tget_class(type.get());
        const hssize_t n = H5Sget_simple_extent_npoints(space.get());
        if ((cls != H5T_FLOAT && cls != H5T_INTEGER) || n < 1) {
            error = fmt::format("{}: attribute '{}' is not a number or a list of numbers", name_, name);
            return false;
        }
        out.resize(static_cast<std::size_t>(n));
        if (H5Aread(attr.get(), H5T_NATIVE_DOUBLE, out.data()) < 0) {
            error = fmt::format("{}: cannot read attribute '{}'", name_, name);
            return false;
        }
        return true;
    }

private:
    Hdf5Array() = default;

    // Whether the array holds channels for a block of `d`: its rank is one (the samples) more than the block's
    // channels and spatial dimensions ([S, C, H, W] for {1, c, {h, w}}), not only its spatial ones.
    bool channels(const Dims& d) const { return static_cast<int>(shape_.size()) == 2 + d.rank(); }

    // The extents of the dense buffer that `v` is a window of, as an HDF5 memory space {1, C, spatial...},
    // where its strides say (each a multiple of the next, and at least its extent); else nothing.
    template <typename T>
    static std::optional<std::vector<hsize_t>> padded_extents(const BasicView<T>& v) {
        std::vector<hsize_t> e{1, static_cast<hsize_t>(v.dims.c)};
        for (int d = 0; d < v.dims.rank(); ++d) {
            const std::int64_t outer = d == 0 ? v.stride_c : v.stride[d - 1];
            if (v.stride[d] <= 0 || outer % v.stride[d] != 0 || outer / v.stride[d] < v.dims.space[d]) return {};
            e.push_back(static_cast<hsize_t>(outer / v.stride[d]));
        }
        if (v.dims.rank() > 0 && v.stride[v.dims.rank() - 1] != 1) return {};
        return e;
    }

    // Samples [s, s + n) of the block of `d` (its channels from `first_channel` when the array has them, and
    // the spatial extents from `at`), densely into `buffer` as the memory type converts them. `memory`, when given, is where the
    // block goes in `buffer` (a selection of the block's elements).
    void read_block(std::int64_t s, std::int64_t n, const Index& at, const Dims& d, hid_t memory_type, void* buffer,
                    hid_t memory_space = H5I_INVALID_HID, std::int64_t first_channel = 0) {
        std::vector<hsize_t> start{static_cast<hsize_t>(s)}, count{static_cast<hsize_t>(n)};
        if (!sample_axis_) start.clear(), count.clear();  // one sample: s is 0, n is 1
        auto add = [&](std::int64_t first, std::int64_t size) {
            start.push_back(static_cast<hsize_t>(first));
            count.push_back(static_cast<hsize_t>(size));
        };
        if (channels(d)) add(first_channel, d.c);
        for (int k = 0; k < d.rank(); ++k) add(at[k], d.space[k]);
        DSL_INTERNAL_CHECK(start.size() + (sample_axis_ ? 0 : 1) == shape_.size(),
                           "hdf5 read: rank " + std::to_string(shape_.size()));
        // The memory space has the selection's shape, so that HDF5 takes its direct path (reads into the
        // buffer without its own gather, which a 1-D memory space of the same elements would need).
        Handle dense(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
        const hid_t memory = memory_space >= 0 ? memory_space : dense.get();
        herr_t status = H5Sselect_hyperslab(space_.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
        if (status >= 0) status = H5Dread(dataset_.get(), memory_type, memory, space_.get(), H5P_DEFAULT, buffer);
        if (status < 0) {
            std::string from;
            for (int k = 0; k < at.rank(); ++k) from += fmt::format("{}{}", k ? ", " : "", at[k]);
            throw UserError(
                fmt::format("{}: cannot read samples {} to {} (from place [{}])", name_, s, s + n - 1, from));
        }
    }

    std::string name_, type_;
    bool sample_axis_ = true;  // the data set's first axis is the samples' (add_sample_axis)
    H5T_class_t class_ = H5T_NO_CLASS;
    Handle file_, dataset_, space_;
    std::vector<std::int64_t> shape_;
    std::vector<float> floats_;
    std::vector<std::int32_t> ints_;
};

}  // namespace

std::unique_ptr<Array> data::open_array(const std::string& spec, std::string& error, bool one_sample) {
    if (const auto h5 = hdf5_dataset_name(spec)) {
        auto a = Hdf5Array::open(h5->first, h5->second, error);
        if (a && one_sample) a->add_sample_axis();
        return a;
    }
    for (const char* ext : {".h5", ".hdf5", ".he5"})
        if (spec.size() > std::strlen(ext) &&
            spec.compare(spec.size() - std::strlen(ext), std::string::npos, ext) == 0) {
            error = fmt::format("{}: name the data set in the file: {}:/path/to/dataset", spec, spec);
            return nullptr;
        }
    auto f = NpyFile::open(spec, error);
    if (!f) return nullptr;
    if (one_sample) f->add_sample_axis();
    return std::make_unique<NpyArray>(std::move(*f));
}

namespace {

// Every element of a tile set to `value`.
template <typename T>
void fill(BasicView<T> tile, T value) {
    for_each_row(tile, [&](std::int64_t, std::int64_t, const Index&, T* row) {
        std::fill_n(row, row_length(tile.dims), value);
    });
}

// The data file being read, for the SIGBUS handler: a mapped .npy file cut short between the guard's check
// and the read faults in the read, and the run ends as the guard would have ended it, naming the file.
std::atomic<const char*> being_read{nullptr};

extern "C" void on_cut_short(int) {
    const char* file = being_read.load();
    auto say = [](const char* text) { [[maybe_unused]] const ssize_t n = ::write(2, text, std::strlen(text)); };
    say("error: ");
    say(file ? file : "a memory-mapped data file");
    say(": the file changed while the run read it: it was cut short (SIGBUS)\n");
    ::_exit(1);
}

// Marks a read of `spec` for on_cut_short while it lasts.
struct Reading {
    explicit Reading(const std::string& spec) { being_read.store(spec.c_str()); }
    ~Reading() { being_read.store(nullptr); }
};

// What a layer reads from its array.
struct Stream {
    std::string spec;
    std::unique_ptr<Array> array;
    FileGuard guard;
    InputTransforms transforms;         // in order, before the normalization; empty: none
    std::string transforms_text;        // as the command line gave them
    std::vector<float> mean, stddev;    // per channel; empty: as they are
    Index whole;                        // a sample's spatial extents (an input's after its channels)
    std::int64_t classes = 0;           // class labels: every value read is checked to be below it
};

class FileSource : public DataSource {
public:
    FileSource(std::map<std::string, Stream> streams, std::int64_t samples, bool shuffle, std::uint64_t seed,
               data::AugmentOptions augment, Index extents)
        : streams_(std::move(streams)),
          samples_(samples),
          shuffle_(shuffle),
          seed_(seed),
          augment_(augment),
          extents_(std::move(extents)) {
        struct sigaction bus {};
        bus.sa_handler = on_cut_short;
        ::sigaction(SIGBUS, &bus, nullptr);
    }

    std::int64_t samples() const override { return samples_; }

    std::vector<std::pair<std::string, std::int64_t>> files(const std::string& layer) const {
        const auto it = streams_.find(layer);
        return it == streams_.end() ? std::vector<std::pair<std::string, std::int64_t>>{} : it->second.array->files();
    }

    void inputs(const Layer& input, std::int64_t first, const Index& at, View tile) override {
        Stream& s = stream(input);
        const Reading reading(s.spec);
        for (std::int64_t n = 0; n < tile.dims.n; ++n) {
            const View v = one_sample(tile, n);
            const std::int64_t i = sample(first + n);
            read(s, first + n, i, at, v);
            if (!s.transforms.empty())
                for_each_row(v, [&](std::int64_t, std::int64_t c, const Index&, float* row) {
                    const BadValue bad = s.transforms.apply(row, row_length(v.dims));
                    if (bad.at < 0) return;
                    throw UserError(fmt::format(
                        "{}: sample {}, channel {}: --transform {}={} turns {} into {}; give transforms that keep "
                        "every value of the data finite",
                        s.spec, i, c, input.name, s.transforms_text, bad.value,
                        std::isnan(bad.result) ? std::string("nan") : fmt::format("{}", bad.result)));
                });
            if (s.mean.empty()) continue;
            for_each_row(v, [&](std::int64_t, std::int64_t c, const Index&, float* row) {
                const float m = s.mean[static_cast<std::size_t>(c)], d = s.stddev[static_cast<std::size_t>(c)];
                for (std::int64_t x = 0; x < row_length(v.dims); ++x) row[x] = (row[x] - m) / d;
            });
        }
    }
    void labels(const Layer& label, std::int64_t first, const Index& at, BasicView<std::int32_t> tile) override {
        if (!streams_.count(label.name)) return fill(tile, 0);  // an optional label, not given
        Stream& s = stream(label);
        const Reading reading(s.spec);
        for (std::int64_t n = 0; n < tile.dims.n; ++n) {
            const std::int64_t i = sample(first + n);
            const BasicView<std::int32_t> v = one_sample(tile, n);
            read(s, first + n, i, at, v);
            // Checked as read too, not only when the file was opened: a value the loss cannot take is the
            // file's fault, never a failed check inside the loss.
            for_each_row(v, [&](std::int64_t, std::int64_t, const Index&, std::int32_t* row) {
                for (std::int64_t x = 0; x < row_length(v.dims); ++x)
                    if (row[x] < 0 || row[x] >= s.classes)
                        throw UserError(fmt::format("{}: {}", s.spec, range_message(row[x], i, s.classes)));
            });
        }
    }
    void targets(const Layer& label, std::int64_t first, const Index& at, View tile) override {
        if (!streams_.count(label.name)) return fill(tile, 0.0f);
        Stream& s = stream(label);
        const Reading reading(s.spec);
        for (std::int64_t n = 0; n < tile.dims.n; ++n) read(s, first + n, sample(first + n), at, one_sample(tile, n));
    }

private:
    // Sample i's block at `at` (the data set's index `index`, whose epoch augments it), as augmented.
    template <typename T>
    void read(Stream& s, std::int64_t index, std::int64_t i, const Index& at, BasicView<T> v) {
        if (!augment_.any() || v.dims.rank() == 0)
            return s.guard.read([&] { s.array->read(i, at, v); });
        const data::Augmentation a = data::augmentation_of(augment_, seed_, index / samples_, i, extents_);
        data::read_augmented<T>(a, s.whole, at, v, [&](const Index& from, BasicView<T> dense) {
            s.guard.read([&] { s.array->read(i, from, dense); });
        });
    }

    // Sample n of a tile.
    template <typename T>
    static BasicView<T> one_sample(const BasicView<T>& tile, std::int64_t n) {
        Dims one = tile.dims;
        one.n = 1;
        return tile.sub(n, 0, Index::filled(one.rank(), 0), one);
    }

    Stream& stream(const Layer& l) {
        const auto it = streams_.find(l.name);
        DSL_INTERNAL_CHECK(it != streams_.end(), "file data: no layer '" + l.name + "'");
        return it->second;
    }

    // The sample at index i: i mod S, or with --shuffle the (i mod S)-th of epoch i / S's permutation.
    std::int64_t sample(std::int64_t i) {
        const std::int64_t epoch = i / samples_, at = i % samples_;
        if (!shuffle_) return at;
        auto it = orders_.find(epoch);
        if (it == orders_.end()) {
            if (orders_.size() >= 2) orders_.erase(orders_.begin());  // a step spans at most two epochs
            it = orders_.emplace(epoch, shuffle_order(samples_, seed_, epoch)).first;
        }
        return it->second[static_cast<std::size_t>(at)];
    }

    std::map<std::string, Stream> streams_;
    std::int64_t samples_;
    bool shuffle_;
    std::uint64_t seed_;
    std::map<std::int64_t, std::vector<std::int64_t>> orders_;
    data::AugmentOptions augment_;
    Index extents_;  // the spatial extents whose equal ones a transposition permutes (the inputs')
};

// A comma list of numbers, or nothing when one is not a number.
std::optional<std::vector<float>> numbers(const std::string& text) {
    std::vector<float> out;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t end = std::min(text.find(',', at), text.size());
        const std::string word = text.substr(at, end - at);
        char* stop = nullptr;
        const float v = std::strtof(word.c_str(), &stop);
        if (word.empty() || *stop != '\0' || !std::isfinite(v)) return std::nullopt;
        out.push_back(v);
        at = end + 1;
    }
    return out;
}

// The per-channel mean and standard deviation of an input with `channels` channels, from --normalize.
bool normalization(const std::string& text, Stream& s, std::int64_t channels, const std::string& layer,
                   std::string& error) {
    std::vector<float> mean, stddev;
    if (text == "file") {
        std::vector<double> m, d;
        if (!s.array->attribute("mean", m, error) || !s.array->attribute("std", d, error)) {
            if (error.rfind(s.spec, 0) != 0) error = s.spec + ": " + error;
            return false;
        }
        mean.assign(m.begin(), m.end());
        stddev.assign(d.begin(), d.end());
    } else {
        const std::size_t colon = text.find(':');
        const auto m = numbers(text.substr(0, colon));
        const auto d = colon == std::string::npos ? std::nullopt : numbers(text.substr(colon + 1));
        if (colon == std::string::npos && m && m->size() == 2) {
            mean = {(*m)[0]};
            stddev = {(*m)[1]};
        } else if (m && d) {
            mean = *m;
            stddev = *d;
        } else {
            error = fmt::format(
                "--normalize '{}': give MEAN,STD (every channel), MEANS:STDS (comma lists, one per channel) or "
                "'file'",
                text);
            return false;
        }
    }
    auto widen = [&](std::vector<float>& v, const char* what) {
        if (v.size() == 1) v.assign(static_cast<std::size_t>(channels), v[0]);
        if (static_cast<std::int64_t>(v.size()) == channels) return true;
        error = fmt::format("--normalize: {} values of the {}, but input '{}' has {} channel{}", v.size(), what, layer,
                            channels, channels == 1 ? "" : "s");
        if (text == "file") error = s.spec + ": " + error;
        return false;
    };
    if (!widen(mean, "mean") || !widen(stddev, "std")) return false;
    for (float d : stddev)
        if (!(d > 0.0f)) {
            error = fmt::format("--normalize: a standard deviation must be positive, not {}", d);
            if (text == "file") error = s.spec + ": " + error;
            return false;
        }
    s.mean = std::move(mean);
    s.stddev = std::move(stddev);
    return true;
}

}  // namespace

std::vector<std::int64_t> shuffle_order(std::int64_t samples, std::uint64_t seed, std::int64_t epoch) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(samples));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    // Fisher-Yates with the draws a hash of (seed, epoch, position).
    const std::uint64_t key = splitmix64(splitmix64(seed ^ 0x53485546464c45ull) ^ static_cast<std::uint64_t>(epoch));
    for (std::int64_t i = samples - 1; i > 0; --i) {
        const auto j = static_cast<std::int64_t>(splitmix64(key ^ static_cast<std::uint64_t>(i)) %
                                                 static_cast<std::uint64_t>(i + 1));
        std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
    }
    return order;
}

std::optional<std::pair<std::string, std::string>> hdf5_dataset_name(const std::string& spec) {
    for (const char* ext : {".h5:/", ".hdf5:/", ".he5:/"}) {
        const std::size_t at = spec.rfind(ext);
        if (at == std::string::npos) continue;
        const std::size_t colon = at + std::strlen(ext) - 2;
        return std::pair{spec.substr(0, colon), spec.substr(colon + 1)};
    }
    return std::nullopt;
}

std::string data_file_name(const std::string& spec) {
    const auto h5 = hdf5_dataset_name(spec);
    return h5 ? h5->first : spec;
}

std::unique_ptr<DataSource> make_data_source(const frontend::Network& net, std::uint64_t seed, const DataFiles& files,
                                             std::string& error) {
    std::vector<int> layers;  // the inputs, then the labels, in the network's order
    for (OpKind op : {OpKind::input, OpKind::label})
        for (std::size_t i = 0; i < net.layers.size(); ++i)
            if (net.layers[i].op == op) layers.push_back(static_cast<int>(i));
    std::string names;
    for (int l : layers)
        names += fmt::format("{}{} '{}'", names.empty() ? "" : ", ",
                             net.layers[static_cast<std::size_t>(l)].op == OpKind::input ? "input" : "label",
                             net.layers[static_cast<std::size_t>(l)].name);
    if (files.files.empty()) {
        if (files.shuffle || !files.normalize.empty() || !files.transforms.empty() || !files.layouts.empty() ||
            !files.augment.empty()) {
            error = fmt::format("--{} applies to data from files (--data NAME=FILE), not to synthetic data",
                                files.shuffle                ? "shuffle"
                                : !files.normalize.empty()   ? "normalize"
                                : !files.transforms.empty() ? "transform"
                                : !files.layouts.empty()    ? "layout"
                                                             : "augment");
            return nullptr;
        }
        return make_data_source(net, seed, "", "", error);
    }
    std::map<std::string, std::string> given;
    for (const auto& [name, spec] : files.files) {
        const int l = net.find(name);
        const bool data = l >= 0 && net.layers[static_cast<std::size_t>(l)].is_data();
        if (!data) {
            error = fmt::format("--data {}={}: the network has no input or label '{}' (it has {})", name, spec, name,
                                names.empty() ? "none" : names);
            return nullptr;
        }
        if (!given.emplace(name, spec).second) {
            error = fmt::format("--data {}: layer '{}' is given twice", name, name);
            return nullptr;
        }
    }
    // Layouts: an input read from a file, stored channels-first (the default) or channels-last, as its rank
    // says (an image's NCHW or NHWC, a volume's NCDHW or NDHWC).
    std::map<std::string, std::string> channels_last;
    std::set<std::string> laid_out;
    for (const auto& [name, layout] : files.layouts) {
        const int l = net.find(name);
        const bool read = l >= 0 && net.layers[static_cast<std::size_t>(l)].op == OpKind::input && given.count(name);
        const bool volume = read && net.layers[static_cast<std::size_t>(l)].shape.dims.size() == 4;
        const std::string first = volume ? "NCDHW" : "NCHW", last = volume ? "NDHWC" : "NHWC";
        if (!read || (layout != first && layout != last)) {
            error = fmt::format(
                "--layout {}={}: {}", name, layout,
                !read ? fmt::format("a layout is an input's read from a file, and '{}' is not one ({})", name, names)
                      : fmt::format("input '{}' is {}: its file is {} (channels first, the default) or {} "
                                    "(channels last)",
                                    name, net.layers[static_cast<std::size_t>(l)].shape.str(), first, last));
            return nullptr;
        }
        if (!laid_out.insert(name).second) {
            error = fmt::format("--layout {}: input '{}' is given twice", name, name);
            return nullptr;
        }
        if (layout == last) channels_last.emplace(name, layout);
    }
    // Transforms: of inputs read from files, each input once.
    std::map<std::string, std::string> transforms;
    for (const auto& [name, text] : files.transforms) {
        const int l = net.find(name);
        if (l < 0 || net.layers[static_cast<std::size_t>(l)].op != OpKind::input || !given.count(name)) {
            error = fmt::format("--transform {}={}: {} (a transform applies to an input read from a file: {})", name,
                                text,
                                l < 0 ? fmt::format("the network has no layer '{}'", name)
                                : net.layers[static_cast<std::size_t>(l)].op != OpKind::input
                                    ? fmt::format("'{}' is not an input", name)
                                    : fmt::format("input '{}' is given no file (--data {}=FILE)", name, name),
                                names);
            return nullptr;
        }
        if (!transforms.emplace(name, text).second) {
            error = fmt::format("--transform {}: input '{}' is given twice (give its functions in one list, "
                                "comma-separated, applied in order)",
                                name, name);
            return nullptr;
        }
    }
    for (int l : layers) {
        const Layer& layer = net.layers[static_cast<std::size_t>(l)];
        if (!given.count(layer.name)) {
            if (files.labels_optional && layer.op == OpKind::label) continue;
            error = fmt::format("{} '{}' has no data: give --data {}=FILE for each of {}",
                                layer.op == OpKind::input ? "input" : "label", layer.name, layer.name, names);
            return nullptr;
        }
    }

    std::map<std::string, Stream> streams;
    std::int64_t samples = -1;
    std::string samples_from;
    for (int l : layers) {
        const Layer& layer = net.layers[static_cast<std::size_t>(l)];
        const bool input = layer.op == OpKind::input;
        if (!given.count(layer.name)) continue;  // an optional label
        Stream s;
        s.spec = given[layer.name];
        if (input && layer.shape.dims.size() != 3 && layer.shape.dims.size() != 4) {
            error = fmt::format(
                "{}: input '{}' is {}; only images [C, H, W] and volumes [C, D, H, W] can come from "
                "a file",
                s.spec, layer.name, layer.shape.str());
            return nullptr;
        }
        if (data::is_collection(s.spec)) {
            // Each file is checked, and watched as it is read, by the collection.
            const std::vector<std::string> members = data::collection_files(s.spec, error);
            if (members.empty()) return nullptr;
            s.array = data::open_collection(s.spec, members, layer.shape.dims.size(), error);
            if (!s.array) return nullptr;
        } else {
            s.array = data::open_array(s.spec, error);
            if (!s.array) return nullptr;
            s.guard = FileGuard(data_file_name(s.spec));  // a regular file (open_array said so)
        }
        const auto& shape = s.array->shape();
        std::vector<std::int64_t> want{shape.empty() ? 0 : shape[0]};
        if (samples >= 0) want[0] = samples;
        // The layer's dims as the file stores them: channels last, where --layout says so.
        std::vector<std::int64_t> stored = layer.shape.dims;
        const bool last = channels_last.count(layer.name) > 0;
        if (last) std::rotate(stored.begin(), stored.begin() + 1, stored.end());
        want.insert(want.end(), stored.begin(), stored.end());
        const std::string dims = shape_str(stored);
        if (shape != want || want[0] == 0) {
            // A file of the layer's shape stored channels-last, read without --layout.
            std::vector<std::int64_t> rotated(shape.begin() + (shape.empty() ? 0 : 1), shape.end());
            if (!rotated.empty()) std::rotate(rotated.begin(), rotated.end() - 1, rotated.end());
            const bool looks_last = input && !last && rotated == layer.shape.dims;
            error = fmt::format("{}: holds {}, but {} '{}' is {}{}{}: expected {}{}", s.spec, shape_str(shape),
                                input ? "input" : "label", layer.name, layer.shape.str(),
                                last ? fmt::format(", stored channels-last (--layout {}={})", layer.name,
                                                   channels_last.at(layer.name))
                                     : "",
                                samples >= 0 ? fmt::format(" and {} holds {} samples", samples_from, samples) : "",
                                samples >= 0 ? shape_str(want)
                                             : fmt::format("[S{}{}] with S > 0", dims.size() > 2 ? ", " : "",
                                                           dims.substr(1, dims.size() - 2)),
                                looks_last ? fmt::format(" (stored channels-last? --layout {}={})", layer.name,
                                                         layer.shape.dims.size() == 4 ? "NDHWC" : "NHWC")
                                           : "");
            return nullptr;
        }
        if (samples < 0) samples = shape[0], samples_from = s.spec;
        if (last) s.array = data::channels_last(std::move(s.array));
        // Spatial extents: an input's and a float label's after their channels, a class label's all of its dims.
        const std::size_t spatial_from = input || layer.float_label ? 1 : 0;
        const std::size_t spatial = layer.shape.dims.size() - std::min(spatial_from, layer.shape.dims.size());
        s.whole = Index::filled(static_cast<int>(spatial), 0);
        for (int k = 0; k < s.whole.rank(); ++k) s.whole[k] = layer.shape.dims[spatial_from + static_cast<std::size_t>(k)];
        const bool class_labels = !input && !layer.float_label;
        if (!s.array->number()) {
            error = fmt::format("{}: holds {} values, which do not convert to {}", s.spec, s.array->type_name(),
                                class_labels ? "class numbers" : "float");
            return nullptr;
        }
        if (!input && layer.float_label && s.array->integer() && dynamic_cast<NpyArray*>(s.array.get())) {
            error = fmt::format("{}: label '{}' is float: its file must have a float dtype, not '{}'", s.spec,
                                layer.name, s.array->type_name());
            return nullptr;
        }
        if (class_labels) {
            if (!s.array->integer()) {
                error = fmt::format("{}: labels must have an integer {}, not '{}'", s.spec,
                                    dynamic_cast<NpyArray*>(s.array.get()) ? "dtype" : "type", s.array->type_name());
                return nullptr;
            }
            // Every label is checked once here, so a bad one is a user error before training, not a crash in
            // the loss.
            const std::int64_t classes = label_classes(net, l);
            s.classes = classes;
            if (const std::string bad = s.array->out_of_range(classes); !bad.empty()) {
                error = fmt::format("{}: {}: the loss compares '{}' with {} classes", s.spec, bad, layer.name, classes);
                return nullptr;
            }
        }
        if (const auto t = transforms.find(layer.name); t != transforms.end()) {
            const auto parsed = parse_transforms(t->second, error);
            if (!parsed) {
                error = fmt::format("--transform {}={}: {}", layer.name, t->second, error);
                return nullptr;
            }
            s.transforms = InputTransforms(std::move(*parsed), s.array->type_name());
            s.transforms_text = t->second;
        }
        if (input && !files.normalize.empty() &&
            !normalization(files.normalize, s, layer.shape.dims[0], layer.name, error))
            return nullptr;
        streams.emplace(layer.name, std::move(s));
    }
    // Augmentation: the inputs' spatial axes, which the labels' follow axis for axis.
    data::AugmentOptions augment;
    Index extents;
    if (!files.augment.empty()) {
        const auto parsed = data::parse_augment(files.augment, error);
        if (!parsed) return nullptr;
        augment = *parsed;
        for (const auto& [name, s] : streams) {
            if (s.whole.rank() == 0) continue;
            if (extents.rank() == 0) extents = s.whole;
            bool same = s.whole.rank() == extents.rank();
            for (int k = 0; same && k < extents.rank(); ++k)
                for (int j = 0; j < extents.rank(); ++j)
                    if ((extents[k] == extents[j]) != (s.whole[k] == s.whole[j])) same = false;
            if (!same) {
                error = fmt::format("--augment {}: '{}' has {} places a sample, and another input or label has "
                                    "places of another rank or other equal sides: they cannot be flipped and "
                                    "transposed alike",
                                    files.augment, name,
                                    shape_str(std::vector<std::int64_t>(s.whole.begin(), s.whole.end())));
                return nullptr;
            }
        }
    }
    // Collections pair by file: the same count of files, each the same count of samples.
    const Stream* paired = nullptr;
    for (const auto& [name, s] : streams) {
        const auto these = s.array->files();
        if (these.empty()) continue;
        if (!paired) {
            paired = &s;
            continue;
        }
        const auto those = paired->array->files();
        if (these.size() != those.size()) {
            error = fmt::format("--data {} names {} files, but {} names {}: inputs and labels pair by file", s.spec,
                                these.size(), paired->spec, those.size());
            return nullptr;
        }
        for (std::size_t i = 0; i < these.size(); ++i)
            if (these[i].second != those[i].second) {
                error = fmt::format("{} holds {} sample{}, but {} holds {}: inputs and labels pair by file",
                                    these[i].first, these[i].second, these[i].second == 1 ? "" : "s",
                                    those[i].first, those[i].second);
                return nullptr;
            }
    }
    return std::make_unique<FileSource>(std::move(streams), samples, files.shuffle, seed, augment, extents);
}

std::vector<std::pair<std::string, std::int64_t>> source_files(const DataSource& source, const std::string& layer) {
    const auto* files = dynamic_cast<const FileSource*>(&source);
    return files ? files->files(layer) : std::vector<std::pair<std::string, std::int64_t>>{};
}

}  // namespace dsl::backend
