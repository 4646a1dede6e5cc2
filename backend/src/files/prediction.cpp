// `dsl predict`'s outputs: a .npy file that the first process sizes and every process fills with pwrite,
// or an HDF5 dataset that the first process creates and every process fills with hyperslabs, all of them
// together in collective writes over MPI-IO (one per mini-batch, however many processes there are).
// Both are written under a temporary name (a file beside the destination, or a link beside the dataset in
// an existing HDF5 file) and moved into place once every process has written its part.
#include <dsl/backend/prediction.hpp>

#include <dsl/backend/npy.hpp>
#include <dsl/base/error.hpp>
#include <dsl/base/whole_file.hpp>

#include <fmt/format.h>
#include <hdf5.h>
#include <mpi.h>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

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

// The dataset's temporary link while it is written: ".NAME.tmp-PID-HOST" beside it in its group.
std::string temporary_link(const std::string& dataset, const Writer& writer) {
    const std::size_t slash = dataset.rfind('/');
    return dataset.substr(0, slash + 1) + fmt::format(".{}.tmp-{}", dataset.substr(slash + 1), writer_tag(writer));
}

// The first process, as every process names it: its number and its machine's name, which the others take
// from it (as sums in which every other process gives zeros).
Writer first_process(Comm& comm) {
    const Writer me = this_writer();
    std::vector<double> v(1 + 256, 0.0);
    if (comm.rank() == 0) {
        v[0] = static_cast<double>(me.pid);
        for (std::size_t i = 0; i < me.host.size() && i < 256; ++i) v[1 + i] = static_cast<unsigned char>(me.host[i]);
    }
    comm.allreduce(v.data(), static_cast<std::int64_t>(v.size()));
    Writer first{static_cast<long>(v[0]), {}};
    for (std::size_t i = 1; i < v.size() && v[i] != 0.0; ++i) first.host.push_back(static_cast<char>(v[i]));
    return first;
}

// Removes the temporary links beside `dataset` that writes of ended processes left in the open file.
void remove_debris_links(hid_t file, const std::string& dataset) {
    const std::size_t slash = dataset.rfind('/');
    const std::string group = slash == 0 ? "/" : dataset.substr(0, slash);
    const std::string prefix = "." + dataset.substr(slash + 1) + ".tmp-";
    if (group != "/" && !link_exists(file, group)) return;
    std::vector<std::string> names;
    auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
    };
    H5Literate_by_name(file, group.c_str(), H5_INDEX_NAME, H5_ITER_NATIVE, nullptr, collect, &names, H5P_DEFAULT);
    for (const std::string& name : names) {
        if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
        const auto writer = writer_of(std::string_view(name).substr(prefix.size()));
        if (writer && writer_ended(*writer))
            H5Ldelete(file, (group == "/" ? "/" + name : group + "/" + name).c_str(), H5P_DEFAULT);
    }
}

// Where an output is written until it is whole, and where it goes then.
struct Placement {
    OutputPath final, written;  // `written`: the temporary file, or the temporary link in the final file
    bool new_file = true;       // the whole file moves into place (a .npy, a new HDF5 file), not a link
    bool force = false;

    // The first process's: moves the whole output into place. False with the reason.
    bool commit(std::string& error) const {
        if (new_file) {
            const int err = move_into_place(written.file, final.file, force);
            if (err == 0) return true;
            error = err == EEXIST
                        ? fmt::format("'{}' appeared meanwhile; it is left as it is (--force replaces it)", final.file)
                        : std::strerror(err);
            return false;
        }
        quiet_hdf5();
        const hid_t file = H5Fopen(final.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        bool ok = file >= 0;
        if (ok && link_exists(file, final.dataset) &&
            (!force || H5Ldelete(file, final.dataset.c_str(), H5P_DEFAULT) < 0))
            ok = false;
        ok = ok && H5Lmove(file, written.dataset.c_str(), file, final.dataset.c_str(), H5P_DEFAULT, H5P_DEFAULT) >= 0;
        if (file >= 0) ok = H5Fclose(file) >= 0 && ok;
        if (!ok) error = fmt::format("cannot move the dataset '{}' into place as '{}'", written.dataset, final.dataset);
        return ok;
    }
    // The first process's, where the output is not whole: removes what was written.
    void discard() const {
        if (new_file) {
            ::unlink(written.file.c_str());
            return;
        }
        quiet_hdf5();
        const hid_t file = H5Fopen(final.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        if (file < 0) return;
        if (link_exists(file, written.dataset)) H5Ldelete(file, written.dataset.c_str(), H5P_DEFAULT);
        H5Fclose(file);
    }
};

// What every output does when the processes close it: agree that every part is written and synced, then
// the first process moves it into place; one dropped unclosed (an error on the way) is removed.
class PlacedOutput : public OutputArray {
public:
    PlacedOutput(Placement place, Comm& comm) : place_(std::move(place)), comm_(comm) {}
    ~PlacedOutput() override {
        if (!closed_ && comm_.rank() == 0) place_.discard();
    }
    bool close(bool whole, std::string& error) override {
        closed_ = true;
        whole = finish(error) && whole;
        if (!comm_.all(whole)) {
            if (comm_.rank() == 0) place_.discard();
            return false;
        }
        const bool placed = comm_.rank() != 0 || place_.commit(error);
        if (!placed) place_.discard();
        return comm_.all(placed);
    }

protected:
    // This process's part flushed to the disk. False with the reason.
    virtual bool finish(std::string& error) = 0;
    const Placement& place() const { return place_; }

private:
    Placement place_;
    Comm& comm_;
    bool closed_ = false;
};

class NpyOutput : public PlacedOutput {
public:
    NpyOutput(Placement place, Comm& comm, int fd, std::int64_t data_offset, std::vector<std::int64_t> shape)
        : PlacedOutput(std::move(place), comm), fd_(fd), offset_(data_offset), shape_(std::move(shape)) {}
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

private:
    bool finish(std::string& error) override {
        const bool ok = ::fsync(fd_) == 0;
        if (!ok) error = std::strerror(errno);
        const bool closed = ::close(fd_) == 0;
        fd_ = -1;
        if (ok && !closed) error = std::strerror(errno);
        return ok && closed;
    }

    int fd_;
    std::int64_t offset_;
    std::vector<std::int64_t> shape_;
};

// Every process of `comm` opens the file together and writes its blocks with collective writes (MPI-IO over
// the run's communicator), so that one mini-batch's write costs one collective operation, whatever the
// number of processes; a single process without MPI writes it alone through HDF5's default driver.
class Hdf5Output : public PlacedOutput {
public:
    Hdf5Output(Placement place, std::vector<std::int64_t> shape, Comm& comm)
        : PlacedOutput(place, comm), shape_(std::move(shape)), comm_(comm) {
        quiet_hdf5();
        const std::optional<int> mpi = comm.mpi_handle();
        const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
        transfer_ = H5Pcreate(H5P_DATASET_XFER);
        if (mpi) {
            H5Pset_fapl_mpio(access, MPI_Comm_f2c(*mpi), MPI_INFO_NULL);
            // Collective calls, each process writing its own block beneath them: a block is whole rows of
            // a tile, runs of the file of a row or more, which gain nothing from MPI-IO's two-phase
            // aggregation (gathering them on a few processes first made the writes 3 times as long on one
            // node: bench/predict_hdf5.sh).
            H5Pset_dxpl_mpio(transfer_, H5FD_MPIO_COLLECTIVE);
            H5Pset_dxpl_mpio_collective_opt(transfer_, H5FD_MPIO_INDIVIDUAL_IO);
        }
        file_ = H5Fopen(place.written.file.c_str(), H5F_ACC_RDWR, access);
        H5Pclose(access);
        set_ = file_ < 0 ? -1 : H5Dopen2(file_, place.written.dataset.c_str(), H5P_DEFAULT);
        space_ = set_ < 0 ? -1 : H5Dget_space(set_);
    }
    ~Hdf5Output() override {
        close_file();
        H5Pclose(transfer_);
    }

    // Whether this process opened the file and the data set (collective: the caller agrees on it).
    bool opened() const { return space_ >= 0; }

    // Every process calls it alike, with its block or none (a write of nothing, which the collective needs
    // from every process), and all of them learn whether every process's block was written.
    bool write(std::int64_t n0, const Index& at, const Dims& d, const float* values, std::string& error) override {
        if (failed_) return false;  // said where it failed; every process stopped there
        // The block in the file's [S, ...] order: the array's dimensions past the samples are the tile's
        // channels (where it has them) and spatial dimensions.
        std::vector<hsize_t> start{static_cast<hsize_t>(n0)}, count{static_cast<hsize_t>(d.n)};
        if (has_channels(shape_, d)) start.push_back(0), count.push_back(static_cast<hsize_t>(d.c));
        for (int k = 0; k < d.rank(); ++k)
            start.push_back(static_cast<hsize_t>(at[k])), count.push_back(static_cast<hsize_t>(d.space[k]));
        const bool empty = d.elements() == 0;
        const std::vector<hsize_t> one(count.size(), 1);
        const hid_t memory =
            H5Screate_simple(static_cast<int>(count.size()), empty ? one.data() : count.data(), nullptr);
        bool ok = memory >= 0;
        if (ok && empty)
            ok = H5Sselect_none(memory) >= 0 && H5Sselect_none(space_) >= 0;
        else if (ok)
            ok = H5Sselect_hyperslab(space_, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr) >= 0;
        // A process whose selection failed takes part all the same (the collective needs every process),
        // writing nothing: the memory's selection is then the file's (H5S_ALL), none.
        if (!ok) H5Sselect_none(space_);
        const float none = 0;
        ok = H5Dwrite(set_, H5T_NATIVE_FLOAT, ok ? memory : H5S_ALL, space_, transfer_, empty ? &none : values) >= 0 &&
             ok;
        if (memory >= 0) H5Sclose(memory);
        if (!ok) error = "an HDF5 write failed";
        failed_ = !comm_.all(ok);
        return !failed_;
    }

private:
    // Every process alike: the file closed (collectively), so that the first can move the data set into place.
    bool finish(std::string& error) override {
        const bool ok = close_file();
        if (!ok) error = "cannot close it";
        return ok;
    }

    bool close_file() {
        if (file_ < 0) return true;
        if (space_ >= 0) H5Sclose(space_);
        if (set_ >= 0) H5Dclose(set_);
        const bool ok = H5Fclose(file_) >= 0;
        file_ = set_ = space_ = -1;
        return ok;
    }

    std::vector<std::int64_t> shape_;
    Comm& comm_;
    hid_t file_ = -1, set_ = -1, space_ = -1, transfer_ = -1;
    bool failed_ = false;
};

// The first process's part of create_output for HDF5: the file (opened, or made under its temporary name),
// the groups on the way, and the dataset under `place.written`, contiguous and allocated at its full size.
// An existing dataset of the name stays as it is until the new one is whole.
bool create_hdf5(const Placement& place, const std::vector<std::int64_t>& shape, std::string& error) {
    quiet_hdf5();
    const OutputPath& path = place.written;
    const hid_t file = !place.new_file ? H5Fopen(path.file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                                       : H5Fcreate(path.file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (file < 0) {
        error = !place.new_file ? "cannot open it as an HDF5 file to write" : "cannot create it";
        return false;
    }
    bool ok = true;
    if (!place.new_file) {
        remove_debris_links(file, place.final.dataset);
        if (link_exists(file, place.final.dataset) && !place.force)
            error = fmt::format("'{}' exists (--force replaces it)", place.final.dataset), ok = false;
        if (ok && link_exists(file, path.dataset) && H5Ldelete(file, path.dataset.c_str(), H5P_DEFAULT) < 0)
            error = fmt::format("cannot remove '{}'", path.dataset), ok = false;
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
    // A look at what the file holds, without the lock a writer takes (a reader does not need it).
    const hid_t access = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(access, false, true);
    const hid_t f = H5Fopen(path.file.c_str(), H5F_ACC_RDONLY, access);
    H5Pclose(access);
    if (f < 0) {
        error = fmt::format("cannot open '{}' as an HDF5 file", path.file);
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
    // The temporary names carry the first process's number, so that a later write knows them for debris
    // once it has ended.
    const Writer first = first_process(comm);
    std::error_code ec;
    const bool into_file = comm.rank() == 0 && path.hdf5() && fs::exists(path.file, ec);
    Placement place{path, path, comm.max(into_file ? 1.0 : 0.0) == 0.0, force};
    if (place.new_file)
        place.written.file = temporary_beside(path.file, first);
    else
        place.written.dataset = temporary_link(path.dataset, first);
    bool made = true;
    if (comm.rank() == 0) {
        if (place.new_file) {
            remove_debris(path.file);
            ::unlink(place.written.file.c_str());  // this process's own, were it ever left
        }
        if (path.hdf5()) {
            made = create_hdf5(place, shape, error);
        } else {
            const std::string head = npy_header(shape, "<f4");
            const int fd = ::open(place.written.file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
            made =
                fd >= 0 && ::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()) &&
                ::ftruncate(fd, static_cast<off_t>(head.size() + static_cast<std::size_t>(elements(shape)) * 4)) == 0;
            if (!made) error = std::strerror(errno);
            if (fd >= 0) made = ::close(fd) == 0 && made;
        }
        if (!made) place.discard();
    }
    // The others open it once it is there.
    if (!comm.all(made)) {
        if (comm.rank() != 0) error = "the first process could not make it";
        return nullptr;
    }
    if (path.hdf5()) {
        auto out = std::make_unique<Hdf5Output>(place, shape, comm);
        const bool opened = out->opened();
        if (!opened) error = "cannot open it to write";
        if (!comm.all(opened)) return nullptr;  // the first process removes the data set
        return out;
    }
    const auto data_offset = static_cast<std::int64_t>(npy_header(shape, "<f4").size());
    const int fd = ::open(place.written.file.c_str(), O_WRONLY | O_CLOEXEC);
    const bool opened = fd >= 0;
    if (!opened) error = std::strerror(errno);
    auto out = std::make_unique<NpyOutput>(place, comm, fd, data_offset, shape);
    if (!comm.all(opened)) return nullptr;  // the first process removes the file
    return out;
}

}  // namespace dsl::backend
