// HDF5 files for the tests of the data sources, written through the HDF5 C API so that the tests need
// nothing but the library dsl itself reads with: a data set of any shape and type, contiguous or chunked per
// sample and compressed with gzip, and number attributes on it.
#pragma once

#include <hdf5.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dsl::test {

// Writes `data` (C order, `shape`) as data set `name` of the file at `path` (created, or added to), stored
// as `file_type` from memory of `memory_type`; with `chunked`, one chunk per sample, gzip level 4.
inline void write_h5(const std::string& path, const std::string& name, const std::vector<std::int64_t>& shape,
                     const void* data, hid_t memory_type, hid_t file_type, bool chunked,
                     const std::vector<std::pair<std::string, std::vector<double>>>& attributes = {}) {
    const hid_t file = std::filesystem::exists(path) ? H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT)
                                                     : H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(file >= 0);
    std::vector<hsize_t> dims(shape.begin(), shape.end());
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        std::vector<hsize_t> chunk = dims;
        chunk[0] = 1;
        REQUIRE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) >= 0);
        REQUIRE(H5Pset_deflate(dcpl, 4) >= 0);
    }
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t set = H5Dcreate2(file, name.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT);
    REQUIRE(set >= 0);
    REQUIRE(H5Dwrite(set, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
    for (const auto& [key, values] : attributes) {
        const hsize_t n = values.size();
        const hid_t aspace = H5Screate_simple(1, &n, nullptr);
        const hid_t attr = H5Acreate2(set, key.c_str(), H5T_IEEE_F64LE, aspace, H5P_DEFAULT, H5P_DEFAULT);
        REQUIRE(H5Awrite(attr, H5T_NATIVE_DOUBLE, values.data()) >= 0);
        H5Aclose(attr);
        H5Sclose(aspace);
    }
    H5Dclose(set);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
}

template <class T>
void write_h5(const std::string& path, const std::string& name, const std::vector<std::int64_t>& shape,
              const std::vector<T>& data, hid_t memory_type, hid_t file_type, bool chunked = true,
              const std::vector<std::pair<std::string, std::vector<double>>>& attributes = {}) {
    write_h5(path, name, shape, data.data(), memory_type, file_type, chunked, attributes);
}

}  // namespace dsl::test
