// Trained weights for PyTorch and NumPy, written without Python: a state_dict as torch.save writes it (a zip
// of a protocol-2 pickle and one raw storage per tensor), or a .npz, of the module that bench/pytorch_mesh.py
// builds for the same network.
#pragma once

#include <dsl/backend/checkpoint.hpp>
#include <dsl/frontend/network.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsl::backend {

// The element types a state_dict holds: float32 (parameters, running statistics) and int64
// (num_batches_tracked).
enum class ArrayType { f4, i8 };

// A named array: its shape (empty for a 0-d tensor) and its elements in C order, little-endian.
struct NamedArray {
    std::string name;
    std::vector<std::int64_t> shape;
    ArrayType type = ArrayType::f4;
    std::string bytes;
};

// The CRC-32 of zip (and zlib): polynomial 0xEDB88320, reflected; `crc` continues an earlier one.
std::uint32_t crc32(std::string_view bytes, std::uint32_t crc = 0);

// A zip archive of `files` (name, contents) in order, stored without compression, each file's data at a
// multiple of 64 bytes from the start of the archive, as torch's writer places them (the padding in an
// extra field 'FB', as its writer has it). Without ZIP64: nullopt with the reason past 4 GiB or 65535 files.
std::optional<std::string> zip_archive(const std::vector<std::pair<std::string, std::string>>& files,
                                       std::string& error);

// What torch.save(state_dict) writes in PyTorch 1.6 and later: archive/data.pkl (pickle protocol 2: a
// collections.OrderedDict of torch._utils._rebuild_tensor_v2 of persistent storages), archive/byteorder,
// archive/data/0, 1, ... (one storage per array, in order) and archive/version ("3"). torch.load (also with
// weights_only=True) returns the OrderedDict in `arrays`' order, each tensor contiguous and on the CPU.
std::optional<std::string> torch_save_bytes(const std::vector<NamedArray>& arrays, std::string& error);

// What numpy.savez writes: NAME.npy per array (format 1.0), for numpy.load.
std::optional<std::string> npz_bytes(const std::vector<NamedArray>& arrays, std::string& error);

// The state_dict of `net`'s PyTorch module as bench/pytorch_mesh.py builds it, from a checkpoint of `net`:
// the module's layers in a ModuleDict `mods` keyed by each layer's index in the network's order
// ("mods.3.weight"), in the order module.state_dict() has them; the parameters (conv, deconv and fc weights and
// biases, batch and group norm scales and shifts), batch norm's running statistics and its num_batches_tracked
// (the checkpoint's step: one forward in training mode per step). A window's weights have the input's spatial
// rank: Conv2d's [out, in, kh, kw] or Conv3d's [out, in, kd, kh, kw], ConvTranspose2d's and 3d's [in, out,
// kernel...]; a periodic convolution's are a zero-padded one's. Optimizer state is left out. Nullopt with the
// reason where the checkpoint does not fit the network: a tensor missing, of another shape, or not of this
// network.
std::optional<std::vector<NamedArray>> torch_state_dict(const frontend::Network& net, const Checkpoint& ckpt,
                                                        std::string& error);

}  // namespace dsl::backend
