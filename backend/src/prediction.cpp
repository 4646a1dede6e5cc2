// `dsl predict`'s outputs: a .npy file that the first process sizes and every process fills with pwrite,
// or an HDF5 dataset that the first process creates and the processes fill in turn, each with hyperslabs.
#include <dsl/backend/prediction.hpp>

#include <dsl/backend/npy.hpp>
#include <dsl/base/error.hpp>

#include <fmt/format.h>
#include <hdf5.h>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace dsl::backend {

namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::int64_t elements(const std::vector<std::int64_t>& shape) {
    std::int64_t e = 1;
    for (std::int64_t v : shape) e *= v;
    return e;
}

// Whether an array of `shape` holds channels for tiles of `d`: a dimension more than their spatial ones.
bool has_channels(const std::vector<std::int64_t>& shape, const Dims& d) {
    return static_cast<int>(shape.size()) == 2 + d.rank();
}

// HDF5 prints a stack of its own on every failure unless told not to: our messages say what failed.
void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// The dataset's path components: "/a/b/c" is {"a", "b", "c"}.
std::vector<std::string> components(const std::string& dataset) {
    std::vector<std::string> out;
    std::size_t i = 0;
    while (i < dataset.size()) {
        const std::size_t j = dataset.find('/', i);
        const std::string part = dataset.substr(i, j == std::string::npos ? std::string::npos : j - i);
        if (!part.empty()) out.push_back(part);
        if (j == std::string::npos) break;
        i = j + 1;
    }
    return out;
}

// Whether `dataset` names a link in the open file (every group on its way existing).
bool link_exists(hid_t file, const std::string& dataset) {
    std::string path;
    for (const std::string& part : components(dataset)) {
        path += "/" + part;
        if (H5Lexists(file, path.c_str(), H5P_DEFAULT) <= 0) return false;
    }
    return true;
}

class NpyOutput : public OutputArray {
public:
    NpyOutput(int fd, std::int64_t data_offset, std::vector<std::int64_t> shape)
        : fd_(fd), offset_(data_offset), shape_(std::move(shape)) {}
    ~NpyOutput() override {
        if (fd_ >= 0) ::close(fd_);
    }
    bool write(std::int64_t n0, const Index& at, const Dims& d, const float* values, std::string& error) override {
        // One row of the tile at a time: it is contiguous in the file.
        const auto bytes = static_cast<std::size_t>(row_length(d)) * sizeof(float);
        const bool channels = has_channels(shape_, d);
        bool ok = true;
        for_each_row(dense_view(values, d), [&](std::int64_t n, std::int64_t c, const Index& i, const float* row) {
            Index place = at;
            for (int k = 0; k < place.rank(); ++k) place[k] += i[k];
            const std::int64_t first = npy_offset(shape_, n0 + n, channels, c, place);
            for (std::size_t done = 0; ok && done < bytes;) {
                const ssize_t k = ::pwrite(fd_, reinterpret_cast<const char*>(row) + done, bytes - done,
                                           static_cast<off_t>(offset_ + first * 4 + static_cast<std::int64_t>(done)));
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) {
                    error = std::strerror(errno);
                    ok = false;
                }
                done += static_cast<std::size_t>(std::max<ssize_t>(k, 0));
            }
        });
        return ok;
    }
    bool close(std::string& error) override {
        const bool ok = ::fsync(fd_) == 0;
        if (!ok) error = std::strerror(errno);
        const bool closed = ::close(fd_) == 0;
        fd_ = -1;
        if (ok && !closed) error = std::strerror(errno);
        return ok && closed;
    }

private:
    int fd_;
    std::int64_t offset_;
    std::vector<std::int64_t> shape_;
};

class Hdf5Output : public OutputArray {
public:
    Hdf5Output(OutputPath path, std::vector<std::int64_t> shape, Comm& comm)
        : path_(std::move(path)), shape_(std::move(shape)), comm_(comm) {}

    // The processes take turns, each opening the file, writing its block and closing it, so that no two
    // write the file's metadata at once (the file is opened without MPI-IO).
    bool write(std::int64_t n0, const Index& at, const Dims& d, const float* values, std::string& error) override {
        bool ok = true;
        for (int turn = 0; turn < comm_.size(); ++turn) {
            if (turn == comm_.rank() && d.elements() > 0) ok = write_now(n0, at, d, values, error);
            comm_.all(true);
        }
        return ok;
    }
    bool close(std::string& error) override {
        (void)error;
        return true;
    }

private:
    bool write_now(std::int64_t n0, const Index& at, const Dims& d, const float* values, std::string& error) {
        quiet_hdf5();
        const hid_t file = H5Fopen(path_.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        if (file < 0) {
            error = "cannot open it to write";
            return false;
        }
        const hid_t set = H5Dopen2(file, path_.dataset.c_str(), H5P_DEFAULT);
        const hid_t space = set < 0 ? -1 : H5Dget_space(set);
        bool ok = space >= 0;
        // The block in the file's [S, ...] order: the array's dimensions past the samples are the tile's
        // channels (where it has them) and spatial dimensions.
        std::vector<hsize_t> start{static_cast<hsize_t>(n0)}, count{static_cast<hsize_t>(d.n)};
        if (has_channels(shape_, d)) start.push_back(0), count.push_back(static_cast<hsize_t>(d.c));
        for (int k = 0; k < d.rank(); ++k)
            start.push_back(static_cast<hsize_t>(at[k])), count.push_back(static_cast<hsize_t>(d.space[k]));
        hid_t memory = -1;
        if (ok) {
            ok = H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0;
            memory = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
            ok = ok && memory >= 0 && H5Dwrite(set, H5T_NATIVE_FLOAT, memory, space, H5P_DEFAULT, values) >= 0;
        }
        if (memory >= 0) H5Sclose(memory);
        if (space >= 0) H5Sclose(space);
        if (set >= 0) H5Dclose(set);
        ok = H5Fclose(file) >= 0 && ok;
        if (!ok) error = "an HDF5 write failed";
        return ok;
    }

    OutputPath path_;
    std::vector<std::int64_t> shape_;
    Comm& comm_;
};

// The first process's part of create_output for HDF5: the file (opened, or made), the groups on the way,
// and the dataset, contiguous and allocated at its full size.
bool create_hdf5(const OutputPath& path, const std::vector<std::int64_t>& shape, bool force, std::string& error) {
    quiet_hdf5();
    const bool exists = fs::exists(path.file);
    const hid_t file = exists ? H5Fopen(path.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                              : H5Fcreate(path.file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        error = exists ? "cannot open it as an HDF5 file to write" : "cannot create it";
        return false;
    }
    bool ok = true;
    if (link_exists(file, path.dataset)) {
        if (!force)
            error = fmt::format("'{}' exists (--force replaces it)", path.dataset), ok = false;
        else if (H5Ldelete(file, path.dataset.c_str(), H5P_DEFAULT) < 0)
            error = fmt::format("cannot remove the old '{}'", path.dataset), ok = false;
    }
    if (ok) {
        std::vector<hsize_t> dims(shape.begin(), shape.end());
        const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
        const hid_t links = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_create_intermediate_group(links, 1);
        const hid_t props = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_alloc_time(props, H5D_ALLOC_TIME_EARLY);
        const hid_t set = H5Dcreate2(file, path.dataset.c_str(), H5T_IEEE_F32LE, space, links, props, H5P_DEFAULT);
        ok = set >= 0;
        if (!ok) error = fmt::format("cannot create the dataset '{}'", path.dataset);
        if (set >= 0) H5Dclose(set);
        H5Pclose(props);
        H5Pclose(links);
        H5Sclose(space);
    }
    if (H5Fclose(file) < 0 && ok) error = "cannot close it", ok = false;
    return ok;
}

}  // namespace

std::optional<OutputPath> parse_output_path(const std::string& spec, std::string& error) {
    for (const char* ext : {".h5:", ".hdf5:"}) {
        const std::size_t at = spec.rfind(ext);
        if (at == std::string::npos || at == 0) continue;
        OutputPath p{spec.substr(0, at + std::strlen(ext) - 1), spec.substr(at + std::strlen(ext))};
        if (p.dataset.size() < 2 || p.dataset[0] != '/' || p.dataset.back() == '/' ||
            p.dataset.find("//") != std::string::npos) {
            error = fmt::format("'{}': the dataset must be a path such as /predictions or /run1/pred", spec);
            return std::nullopt;
        }
        return p;
    }
    if (ends_with(spec, ".npy") && spec.size() > 4) return OutputPath{spec, ""};
    error = fmt::format("'{}' is neither OUT.npy nor OUT.h5:/dataset", spec);
    return std::nullopt;
}

bool can_write_output(const OutputPath& path, bool force, std::string& error) {
    std::error_code ec;
    const fs::path file = fs::absolute(path.file, ec);
    const fs::path folder = file.parent_path();
    if (!fs::is_directory(folder, ec)) {
        error = fmt::format("'{}': the folder '{}' does not exist", path.file, folder.string());
        return false;
    }
    if (fs::is_directory(file, ec)) {
        error = fmt::format("'{}' is a folder", path.file);
        return false;
    }
    const bool exists = fs::exists(file, ec);
    if (exists ? ::access(file.c_str(), W_OK) != 0 : ::access(folder.c_str(), W_OK) != 0) {
        error = fmt::format("cannot write '{}': {}", exists ? path.file : folder.string(), std::strerror(errno));
        return false;
    }
    if (!path.hdf5()) {
        if (exists && !force) {
            error = fmt::format("'{}' exists (--force replaces it)", path.file);
            return false;
        }
        return true;
    }
    if (!exists) return true;
    quiet_hdf5();
    if (H5Fis_hdf5(path.file.c_str()) <= 0) {
        error = fmt::format("'{}' exists and is not an HDF5 file", path.file);
        return false;
    }
    const hid_t f = H5Fopen(path.file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        error = fmt::format("cannot open '{}'", path.file);
        return false;
    }
    const bool there = link_exists(f, path.dataset);
    H5Fclose(f);
    if (there && !force) {
        error = fmt::format("'{}' holds '{}' already (--force replaces it)", path.file, path.dataset);
        return false;
    }
    return true;
}

std::unique_ptr<OutputArray> create_output(const OutputPath& path, const std::vector<std::int64_t>& shape, bool force,
                                           Comm& comm, std::string& error) {
    DSL_INTERNAL_CHECK(!shape.empty() && shape.size() <= 2 + max_space, "an output of rank 1 to 5");
    bool made = true;
    if (comm.rank() == 0) {
        if (path.hdf5()) {
            made = create_hdf5(path, shape, force, error);
        } else {
            const std::string head = npy_header(shape, "<f4");
            const int fd = ::open(path.file.c_str(), O_WRONLY | O_CREAT | (force ? O_TRUNC : O_EXCL), 0644);
            made =
                fd >= 0 && ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()) &&
                ::ftruncate(fd, static_cast<off_t>(head.size() + static_cast<std::size_t>(elements(shape)) * 4)) == 0;
            if (!made) error = std::strerror(errno);
            if (fd >= 0) made = ::close(fd) == 0 && made;
        }
    }
    // The others open it once it is there.
    if (!comm.all(made)) {
        if (comm.rank() != 0) error = "the first process could not make it";
        return nullptr;
    }
    if (path.hdf5()) return std::make_unique<Hdf5Output>(path, shape, comm);
    const auto data_offset = static_cast<std::int64_t>(npy_header(shape, "<f4").size());
    const int fd = ::open(path.file.c_str(), O_WRONLY);
    if (fd < 0) {
        error = std::strerror(errno);
        return nullptr;
    }
    return std::make_unique<NpyOutput>(fd, data_offset, shape);
}

}  // namespace dsl::backend
