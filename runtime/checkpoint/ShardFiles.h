// A checkpoint's shard files: boxes of logical tensors, writing a rank's shards to a safetensors
// file one tensor at a time (with its CRC32), and reading any box of a logical tensor from the
// shards that intersect it (pread of the data section, each file verified once, on first use).
#pragma once

#include "runtime/checkpoint/Checkpoint.h"

#include <functional>
#include <optional>

namespace megac::runtime::checkpoint {

/// A box of a tensor: start and extent per dimension (a 0-d tensor: both empty).
struct Box {
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
  bool operator==(const Box &) const = default;
};

/// The common part of two boxes of the same rank, or nullopt when it is empty.
std::optional<Box> intersectBoxes(const Box &a, const Box &b);

/// The box of `whole` (row-major, `global` shape) at `offset` with `shape`, as a tensor.
HostTensor extractBox(const HostTensor &whole, std::span<const int64_t> offset,
                      std::span<const int64_t> shape);
/// Copies `shard` into the box of `whole` at `offset` (the inverse of extractBox).
void insertBox(HostTensor &whole, const HostTensor &shard, std::span<const int64_t> offset);

/// One tensor of a shard file: its (shard) dtype and shape, and how to get its value (called
/// once, while writing, so a rank holds one tensor's copy at a time).
struct ShardToWrite {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::function<StatusOr<HostTensor>()> value;
};

/// Writes `tensors` as a safetensors file at `path` and fsyncs it; returns its size and CRC32.
StatusOr<FileRecord> writeShardFile(const std::string &path,
                                    const std::vector<ShardToWrite> &tensors,
                                    const std::map<std::string, std::string> &metadata);

/// Reads boxes of a checkpoint's logical tensors. Each file is opened once, on first use, and
/// refused (an error naming it) when its size or CRC32 differs from meta.json or its header
/// disagrees with the tensor table.
class ShardReader {
public:
  explicit ShardReader(const CheckpointIndex &index) : index_(index) {}
  ~ShardReader();
  ShardReader(const ShardReader &) = delete;
  ShardReader &operator=(const ShardReader &) = delete;

  /// The box of `name` (a tensor of `table`, one of the index's tables), assembled from every
  /// shard intersecting it; an error when the shards leave part of it uncovered.
  StatusOr<HostTensor> readBox(const TensorTable &table, const std::string &name, const Box &box);

  /// Verifies every file of the index (size and CRC32), opening those not yet used.
  Status verifyAll();

private:
  struct OpenFile {
    int fd = -1;
    uint64_t dataStart = 0; // the data section's offset in the file
    std::map<std::string, std::pair<uint64_t, uint64_t>> ranges; // name -> [begin, end) in data
    std::map<std::string, std::pair<DType, std::vector<int64_t>>> infos;
  };
  StatusOr<OpenFile *> open(const std::string &name);

  const CheckpointIndex &index_;
  std::map<std::string, OpenFile> files_;
};

/// The tensors of a safetensors file, from its header alone: name -> dtype and shape. Used to
/// index a format version 1 checkpoint.
StatusOr<std::map<std::string, std::pair<DType, std::vector<int64_t>>>>
readSafetensorsHeader(const std::string &path);

} // namespace megac::runtime::checkpoint
