// safetensors files (the format the ecosystem reads): an 8-byte little-endian header length,
// a JSON header {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {...}}, then the tensor bytes.
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime {

/// A dtype's safetensors name ("F32", "BF16", ...), and back (false when unknown).
const char *safetensorsDtype(DType dtype);
bool dtypeFromSafetensors(std::string_view name, DType &out);

/// One tensor's entry in a safetensors header (its data follows the previous entry's).
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
/// The bytes a safetensors file starts with: the u64 little-endian header length and the JSON
/// header (metadata, then the entries with consecutive data offsets), space-padded so the data
/// section starts 8-byte aligned, as the reference writer does.
std::vector<uint8_t> safetensorsHead(const std::vector<SafetensorsEntry> &entries,
                                     const std::map<std::string, std::string> &metadata);

StatusOr<TensorMap> readSafetensors(const std::string &path);

/// A whole safetensors file: tensors and the string map under "__metadata__".
struct SafetensorsFile {
  TensorMap tensors;
  std::map<std::string, std::string> metadata;
};
StatusOr<SafetensorsFile> readSafetensorsFile(const std::string &path);

/// One tensor of a safetensors file's header: where its bytes lie in the file.
struct SafetensorsTensorInfo {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; // byte offsets in the file (not in the data section)
};
/// A safetensors file's header alone, checked against the file's size (every tensor's bytes lie
/// inside the file and fit its shape and dtype), without reading the tensors: what a lazy
/// reader of a big model pread()s from. Errors name the file and the tensor.
struct SafetensorsHeader {
  std::vector<SafetensorsTensorInfo> tensors; // in the header's order
  std::map<std::string, std::string> metadata;
  uint64_t fileBytes = 0;
};
StatusOr<SafetensorsHeader> readSafetensorsHeader(const std::string &path);
/// Reads exactly `size` bytes at byte `offset` of the open file `fd` (pread, retried on short
/// reads and EINTR); the error is strerror's or "unexpected end of file".
Status preadExact(int fd, uint8_t *out, size_t size, uint64_t offset);

/// Writes atomically: to `path`.tmp, fsync, then rename.
Status writeSafetensors(const std::string &path, const TensorMap &tensors,
                        const std::map<std::string, std::string> &metadata = {});

} // namespace megac::runtime
