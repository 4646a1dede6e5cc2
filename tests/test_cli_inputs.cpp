// Data files that change under a run: rewritten in place (cut short, refilled with another shape, with the
// same shape, labels outside the classes), on one process and on two: the run stops with exit 1 and an error
// that names the file, never a signal, an internal error or a silent reading with the old shape.
#include "background_command.hpp"
#include "hdf5_files.hpp"
#include "temp_files.hpp"

#include <dsl/backend/npy.hpp>

#include <hdf5.h>
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <functional>
#include <vector>

namespace {

using dsl::test::read_bytes;
using dsl::test::TempDir;

constexpr std::int64_t S = 8;

std::vector<float> inputs(std::int64_t n, float scale) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * static_cast<float>(i % 97) / 97.0f;
    return v;
}

void save(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<float>& v) {
    std::string error;
    REQUIRE(dsl::backend::write_npy(path, shape, v.data(), error));
}

void save_labels(const std::string& path, std::int32_t value) {
    const std::vector<std::int32_t> y(S * 8 * 8, value);
    std::string error;
    REQUIRE(dsl::backend::write_npy(path, {S, 8, 8}, y.data(), error));
}

// `bytes` over the start of `path`, in place and without truncating it, as `rsync --inplace` writes.
void overwrite(const std::string& path, const std::string& bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    ::close(fd);
}

struct Change {
    const char* what;
    const char* file;     // the file the error names
    const char* message;  // and what it says of it
    std::function<void(const TempDir&)> make;
};

}  // namespace

TEST_CASE("a data file rewritten under a run stops it with an error that names the file", "[cli][run][mpi]") {
    const std::int64_t per_sample = 18 * 64 * 64;
    const std::vector<Change> changes{
        {"cut short (np.save of fewer samples)", "x.npy", "the file changed while the run read it",
         [&](const TempDir& d) {
             save(d / "x.npy", {S / 2, 18, 64, 64}, inputs(S / 2 * per_sample, 2.0f));
         }},
        {"another shape of the same size, in place", "x.npy", "it was written",
         [&](const TempDir& d) {
             save(d / "other.npy", {S, 18, 32, 128}, inputs(S * per_sample, 3.0f));
             overwrite(d / "x.npy", read_bytes(d / "other.npy"));
         }},
        {"the same shape, new values", "x.npy", "the file changed while the run read it",
         [&](const TempDir& d) {
             save(d / "x.npy", {S, 18, 64, 64}, inputs(S * per_sample, 4.0f));
         }},
        {"labels outside the classes, the time of the file kept", "y.npy", "label 7 of sample ",
         [&](const TempDir& d) {
             struct stat before {};
             REQUIRE(::stat((d / "y.npy").c_str(), &before) == 0);
             save_labels(d / "seven.npy", 7);
             overwrite(d / "y.npy", read_bytes(d / "seven.npy"));
             const struct timespec times[2] = {before.st_atim, before.st_mtim};
             REQUIRE(::utimensat(AT_FDCWD, (d / "y.npy").c_str(), times, 0) == 0);
         }},
        {"an HDF5 data set rewritten with another shape", "x.h5", "the file changed while the run read it",
         [&](const TempDir& d) {
             const hid_t f = H5Fopen((d / "x.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
             REQUIRE(f >= 0);
             REQUIRE(H5Ldelete(f, "/x", H5P_DEFAULT) >= 0);
             H5Fclose(f);
             dsl::test::write_h5(d / "x.h5", "/x", {S, 18, 32, 128}, inputs(S * per_sample, 5.0f), H5T_NATIVE_FLOAT,
                                 H5T_IEEE_F32LE, false);
         }},
    };
    for (const char* sched : {"", "samples/mesh_tiny_sample_2.sched"}) {
        for (const Change& c : changes) {
            INFO(c.what << (*sched ? " on 2 processes" : " on 1 process"));
            TempDir dir;
            save(dir / "x.npy", {S, 18, 64, 64}, inputs(S * per_sample, 1.0f));
            save_labels(dir / "y.npy", 1);
            dsl::test::write_h5(dir / "x.h5", "/x", {S, 18, 64, 64}, inputs(S * per_sample, 1.0f), H5T_NATIVE_FLOAT,
                                H5T_IEEE_F32LE, false);
            const std::string x = std::string(c.file) == "x.h5" ? dir / "x.h5" + std::string(":/x") : dir / "x.npy";
            Background run(std::string("run samples/mesh_tiny.net ") + sched + " --batch 2 --steps 1000000 --data x=" +
                               x + " --data y=" + (dir / "y.npy") + " --log " + (dir / "log.jsonl"),
                           dir / "out");
            for (int i = 0; i < 24000 && run.running() && read_bytes(dir / "log.jsonl").empty(); ++i)
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
            REQUIRE(run.running());
            c.make(dir);
            const int status = run.end();
            const std::string out = read_bytes(dir / "out");
            INFO(out);
            CHECK(status == 1);
            CHECK(out.find(dir / c.file) != std::string::npos);
            CHECK(out.find(c.message) != std::string::npos);
            CHECK(out.find("internal error") == std::string::npos);
            CHECK(out.find("signal") == std::string::npos);
        }
    }
}
