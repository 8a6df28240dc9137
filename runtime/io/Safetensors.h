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

/// Writes atomically: to `path`.tmp, fsync, then rename.
Status writeSafetensors(const std::string &path, const TensorMap &tensors,
                        const std::map<std::string, std::string> &metadata = {});

} // namespace megac::runtime
