// Shard files of a checkpoint: streaming safetensors writes, box reads by pread (ShardFiles.h).
#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/io/Safetensors.h"

#include "support/Checked.h"
#include "support/Json.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac::runtime::checkpoint {

namespace {

/// The reference implementation's cap; a larger header is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
/// The chunk a file's CRC32 is computed in (bounded memory for any file size).
constexpr size_t kCrcChunk = 4 << 20;

} // namespace

namespace {

int64_t product(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::string hex32(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, value);
  return buf;
}

/// Calls `row(wholeElement, boxElement, elements)` for every contiguous row of the box at
/// `offset` with `shape` in a row-major tensor of shape `global`.
template <typename F>
void forEachRow(std::span<const int64_t> global, std::span<const int64_t> offset,
                std::span<const int64_t> shape, F row) {
  size_t rank = shape.size();
  int64_t count = product(shape);
  if (count == 0)
    return;
  if (rank == 0) {
    row(0, 0, 1);
    return;
  }
  int64_t rowLen = shape[rank - 1];
  std::vector<int64_t> index(rank, 0); // over every dim but the last
  for (int64_t r = 0; r < count / rowLen; ++r) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d)
      at = at * global[d] + offset[d] + (d + 1 < rank ? index[d] : 0);
    row(at, r * rowLen, rowLen);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

Status writeAll(int fd, const uint8_t *data, size_t size, const std::string &path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return Status::error("cannot write checkpoint file '" + path + "': " + std::strerror(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::ok();
}

/// Reads exactly `size` bytes at `at`; a short file is an error naming it.
Status readAt(int fd, uint8_t *data, size_t size, uint64_t at, const std::string &path) {
  while (size > 0) {
    ssize_t n = ::pread(fd, data, size, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return Status::error("cannot read checkpoint file '" + path + "': " + std::strerror(errno));
    if (n == 0)
      return Status::error(path + " ends early (truncated)");
    data += n;
    size -= static_cast<size_t>(n);
    at += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

using HeaderInfos = std::map<std::string, std::pair<DType, std::vector<int64_t>>>;
using HeaderRanges = std::map<std::string, std::pair<uint64_t, uint64_t>>;

/// Parses the header of the safetensors file open as `fd` (`fileSize` bytes): every tensor's
/// dtype, shape and data range (checked against the data section); returns the data's start.
StatusOr<uint64_t> parseHeader(int fd, uint64_t fileSize, const std::string &path,
                               HeaderInfos &infos, HeaderRanges &ranges) {
  uint8_t lenBytes[8];
  if (fileSize < 8)
    return Status::error(path + " has " + std::to_string(fileSize) +
                         " bytes, too few for a safetensors header (truncated)");
  RETURN_IF_ERROR(readAt(fd, lenBytes, 8, 0, path));
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | lenBytes[i];
  if (headerLen > kMaxHeaderBytes || headerLen > fileSize - 8)
    return Status::error(path + ": safetensors header length " + std::to_string(headerLen) +
                         " exceeds the file (truncated or corrupt)");
  std::string text(headerLen, '\0');
  RETURN_IF_ERROR(readAt(fd, reinterpret_cast<uint8_t *>(text.data()), headerLen, 8, path));
  StatusOr<json::Value> header = json::parse(text);
  if (!header.isOk() || header->kind != json::Value::Kind::object)
    return Status::error(path + ": the safetensors header is not a JSON object (corrupt)");
  uint64_t dataSize = fileSize - 8 - headerLen;
  for (size_t i = 0; i < header->keys.size(); ++i) {
    const std::string &name = header->keys[i];
    const json::Value &entry = header->items[i];
    if (name == "__metadata__")
      continue;
    std::string where = path + ": tensor '" + name + "'";
    const json::Value *dtype = entry.find("dtype");
    const json::Value *shape = entry.find("shape");
    const json::Value *offsets = entry.find("data_offsets");
    DType dt = DType::f32;
    if (!dtype || dtype->kind != json::Value::Kind::string ||
        !dtypeFromSafetensors(dtype->string, dt))
      return Status::error(where + " has a missing or unsupported dtype");
    std::vector<int64_t> dims;
    if (!shape || shape->kind != json::Value::Kind::array)
      return Status::error(where + " has no shape");
    for (const json::Value &d : shape->items) {
      if (d.kind != json::Value::Kind::number || !d.isInteger || d.integer < 0)
        return Status::error(where + ": shape entries must be non-negative integers");
      dims.push_back(d.integer);
    }
    if (!offsets || offsets->kind != json::Value::Kind::array || offsets->items.size() != 2 ||
        !offsets->items[0].isInteger || !offsets->items[1].isInteger)
      return Status::error(where + ": \"data_offsets\" must be [begin, end]");
    int64_t begin = offsets->items[0].integer, end = offsets->items[1].integer;
    StatusOr<uint64_t> bytes = checkedByteSize(dims, dtypeSize(dt));
    if (!bytes.isOk())
      return Status::error(where + ": " + bytes.status().message());
    if (begin < 0 || begin > end || static_cast<uint64_t>(end) > dataSize ||
        static_cast<uint64_t>(end - begin) != *bytes)
      return Status::error(where + ": data_offsets [" + std::to_string(begin) + ", " +
                           std::to_string(end) + "] do not fit its shape or the file");
    infos[name] = {dt, std::move(dims)};
    ranges[name] = {static_cast<uint64_t>(begin), static_cast<uint64_t>(end)};
  }
  return 8 + headerLen;
}

} // namespace

std::optional<Box> intersectBoxes(const Box &a, const Box &b) {
  if (a.offset.size() != b.offset.size())
    return std::nullopt;
  Box out;
  for (size_t d = 0; d < a.offset.size(); ++d) {
    int64_t lo = std::max(a.offset[d], b.offset[d]);
    int64_t hi = std::min(a.offset[d] + a.shape[d], b.offset[d] + b.shape[d]);
    if (hi <= lo)
      return std::nullopt;
    out.offset.push_back(lo);
    out.shape.push_back(hi - lo);
  }
  return out;
}

HostTensor extractBox(const HostTensor &whole, std::span<const int64_t> offset,
                      std::span<const int64_t> shape) {
  HostTensor out = HostTensor::zeros(whole.dtype, {shape.begin(), shape.end()});
  size_t elem = dtypeSize(whole.dtype);
  forEachRow(whole.shape, offset, shape, [&](int64_t w, int64_t s, int64_t n) {
    std::memcpy(out.bytes.data() + s * elem, whole.bytes.data() + w * elem, n * elem);
  });
  return out;
}

void insertBox(HostTensor &whole, const HostTensor &shard, std::span<const int64_t> offset) {
  size_t elem = dtypeSize(whole.dtype);
  forEachRow(whole.shape, offset, shard.shape, [&](int64_t w, int64_t s, int64_t n) {
    std::memcpy(whole.bytes.data() + w * elem, shard.bytes.data() + s * elem, n * elem);
  });
}

StatusOr<FileRecord> writeShardFile(const std::string &path,
                                    const std::vector<ShardToWrite> &tensors,
                                    const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsEntry> entries;
  for (const ShardToWrite &t : tensors)
    entries.push_back({t.name, t.dtype, t.shape});
  std::vector<uint8_t> head = safetensorsHead(entries, metadata);

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error("cannot create checkpoint file '" + path + "': " + std::strerror(errno));
  // The checksum is of the bytes handed to write(); the load verifies the bytes on disk.
  FileRecord record{head.size(), crc32(head)};
  Status status = writeAll(fd, head.data(), head.size(), path);
  for (size_t i = 0; status.isOk() && i < tensors.size(); ++i) {
    const ShardToWrite &t = tensors[i];
    StatusOr<HostTensor> value = t.value();
    if (!value.isOk()) {
      status = value.status();
      break;
    }
    if (value->dtype != t.dtype || value->shape != t.shape ||
        value->bytes.size() != uint64_t(product(t.shape)) * dtypeSize(t.dtype)) {
      status =
          Status::error("cannot write '" + t.name + "' to " + path + ": its value is " +
                        dtypeName(value->dtype) + " " + shapeString(value->shape) + ", not the " +
                        dtypeName(t.dtype) + " " + shapeString(t.shape) + " announced");
      break;
    }
    record.crc32 = crc32(value->bytes, record.crc32);
    record.bytes += value->bytes.size();
    status = writeAll(fd, value->bytes.data(), value->bytes.size(), path);
  }
  if (status.isOk() && ::fsync(fd) != 0)
    status = Status::error("cannot fsync checkpoint file '" + path + "': " + std::strerror(errno));
  if (::close(fd) != 0 && status.isOk())
    status = Status::error("cannot close checkpoint file '" + path + "': " + std::strerror(errno));
  if (!status.isOk())
    return status;
  return record;
}

StatusOr<std::map<std::string, std::pair<DType, std::vector<int64_t>>>>
readSafetensorsHeader(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open checkpoint file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::error("cannot stat checkpoint file '" + path + "'");
  }
  HeaderInfos infos;
  HeaderRanges ranges;
  StatusOr<uint64_t> start = parseHeader(fd, uint64_t(st.st_size), path, infos, ranges);
  ::close(fd);
  if (!start.isOk())
    return start.status();
  return infos;
}

ShardReader::~ShardReader() {
  for (auto &[name, file] : files_)
    if (file.fd >= 0)
      ::close(file.fd);
}

StatusOr<ShardReader::OpenFile *> ShardReader::open(const std::string &name) {
  if (auto it = files_.find(name); it != files_.end())
    return &it->second;
  std::string path = index_.path + "/" + name;
  auto rec = index_.files.find(name);
  if (rec == index_.files.end())
    return Status::error(index_.path + "/meta.json: a shard lies in '" + name +
                         "', which its file table does not list");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open checkpoint file '" + path + "': " + std::strerror(errno) +
                         " (the checkpoint is incomplete)");
  OpenFile file;
  file.fd = fd;
  auto fail = [&](Status s) -> Status {
    ::close(fd);
    return s;
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return fail(Status::error("cannot stat checkpoint file '" + path + "'"));
  if (uint64_t(st.st_size) != rec->second.bytes)
    return fail(Status::error(path + " is " + std::to_string(st.st_size) +
                              " bytes, but meta.json records " + std::to_string(rec->second.bytes) +
                              " (truncated or damaged)"));
  std::vector<uint8_t> chunk(std::min<uint64_t>(kCrcChunk, rec->second.bytes));
  uint32_t crc = 0;
  for (uint64_t at = 0; at < rec->second.bytes; at += chunk.size()) {
    size_t n = std::min<uint64_t>(chunk.size(), rec->second.bytes - at);
    if (Status s = readAt(fd, chunk.data(), n, at, path); !s.isOk())
      return fail(s);
    crc = crc32({chunk.data(), n}, crc);
  }
  if (crc != rec->second.crc32)
    return fail(Status::error(path + " has CRC32 " + hex32(crc) + ", but meta.json records " +
                              hex32(rec->second.crc32) + " (corrupt)"));
  StatusOr<uint64_t> start = parseHeader(fd, rec->second.bytes, path, file.infos, file.ranges);
  if (!start.isOk())
    return fail(start.status());
  file.dataStart = *start;
  return &files_.emplace(name, std::move(file)).first->second;
}

Status ShardReader::verifyAll() {
  for (const auto &[name, record] : index_.files)
    RETURN_IF_ERROR(open(name).status());
  return Status::ok();
}

StatusOr<HostTensor> ShardReader::readBox(const TensorTable &table, const std::string &name,
                                          const Box &box) {
  const TensorRecord &tensor = table.at(name);
  StatusOr<HostTensor> zeroed = checkedZeros(tensor.dtype, box.shape);
  if (!zeroed.isOk())
    return Status::error(index_.path + "/meta.json: tensor '" + name +
                         "': " + zeroed.status().message());
  HostTensor out = std::move(zeroed).value();
  size_t elem = dtypeSize(tensor.dtype);
  std::vector<uint8_t> covered(size_t(product(box.shape)), 0);
  for (const ShardRecord &shard : tensor.shards) {
    std::optional<Box> common = intersectBoxes(box, {shard.offset, shard.shape});
    if (!common)
      continue;
    ASSIGN_OR_RETURN(OpenFile * file, open(shard.file));
    std::string path = index_.path + "/" + shard.file;
    auto info = file->infos.find(name);
    if (info == file->infos.end())
      return Status::error(path + " has no tensor '" + name + "', which meta.json places there");
    if (info->second.first != tensor.dtype || info->second.second != shard.shape)
      return Status::error(path + ": tensor '" + name + "' is " + dtypeName(info->second.first) +
                           " " + shapeString(info->second.second) + ", but meta.json records " +
                           dtypeName(tensor.dtype) + " " + shapeString(shard.shape));
    std::vector<int64_t> inShard(box.shape.size()), inBox(box.shape.size());
    for (size_t d = 0; d < box.shape.size(); ++d) {
      inShard[d] = common->offset[d] - shard.offset[d];
      inBox[d] = common->offset[d] - box.offset[d];
    }
    // The common box, read row by row from the shard's bytes (rows adjacent in the file merged
    // into one pread), straight into `out` when it is all of the box.
    bool whole = common->shape == box.shape;
    HostTensor part = whole ? HostTensor{} : HostTensor::zeros(tensor.dtype, common->shape);
    uint8_t *dest = whole ? out.bytes.data() : part.bytes.data();
    uint64_t base = file->dataStart + file->ranges.at(name).first;
    int64_t runSrc = -1, runDst = 0, runLen = 0;
    Status status = Status::ok();
    auto flush = [&] {
      if (runLen > 0 && status.isOk())
        status = readAt(file->fd, dest + runDst * elem, size_t(runLen) * elem,
                        base + uint64_t(runSrc) * elem, path);
      runLen = 0;
    };
    forEachRow(shard.shape, inShard, common->shape, [&](int64_t s, int64_t d, int64_t n) {
      if (runLen > 0 && runSrc + runLen == s && runDst + runLen == d) {
        runLen += n;
        return;
      }
      flush();
      runSrc = s, runDst = d, runLen = n;
    });
    flush();
    RETURN_IF_ERROR(status);
    if (!whole)
      insertBox(out, part, inBox);
    forEachRow(box.shape, inBox, common->shape, [&](int64_t w, int64_t, int64_t n) {
      std::fill_n(covered.begin() + w, n, uint8_t(1));
    });
  }
  if (std::find(covered.begin(), covered.end(), uint8_t(0)) != covered.end())
    return Status::error(index_.path + "/meta.json: the shards of '" + name +
                         "' do not cover its box at offset " + shapeString(box.offset) +
                         " of shape " + shapeString(box.shape));
  if (tensor.dtype == DType::i1)
    for (uint8_t &b : out.bytes)
      b = b != 0;
  return out;
}

} // namespace megac::runtime::checkpoint
