// Reading and writing safetensors files, validating the header against the file's size.
#include "runtime/io/Safetensors.h"

#include "support/Checked.h"
#include "support/Files.h"
#include "support/Json.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

namespace megac::runtime {

namespace {

/// The reference implementation's cap; a larger header is a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// A non-negative integer that fits int64, or false.
bool nonNegativeInt(const json::Value &v, int64_t &out) {
  if (v.kind != json::Value::Kind::number || !v.isInteger || v.integer < 0)
    return false;
  out = v.integer;
  return true;
}

/// A header entry's dtype, shape and data offsets, checked against a data section of
/// `dataBytes` bytes; `begin`/`end` are relative to the data section.
Status parseEntry(const json::Value &entry, uint64_t dataBytes, HostTensor &out, int64_t &begin,
                  int64_t &end) {
  if (entry.kind != json::Value::Kind::object)
    return Status::error("entry is not an object");
  const json::Value *dtype = entry.find("dtype");
  const json::Value *shape = entry.find("shape");
  const json::Value *offsets = entry.find("data_offsets");
  if (!dtype || dtype->kind != json::Value::Kind::string)
    return Status::error("missing or non-string \"dtype\"");
  if (!dtypeFromSafetensors(dtype->string, out.dtype))
    return Status::error("dtype '" + dtype->string +
                         "' is not supported (supported: F64 F32 BF16 F16 I64 I32 BOOL)");
  if (!shape || shape->kind != json::Value::Kind::array)
    return Status::error("missing or non-array \"shape\"");
  for (const json::Value &d : shape->items) {
    int64_t dim;
    if (!nonNegativeInt(d, dim))
      return Status::error("shape entries must be non-negative integers");
    out.shape.push_back(dim);
  }
  ASSIGN_OR_RETURN(uint64_t need, checkedByteSize(out.shape, dtypeSize(out.dtype)));
  if (!offsets || offsets->kind != json::Value::Kind::array || offsets->items.size() != 2)
    return Status::error("\"data_offsets\" must be an array [begin, end]");
  if (!nonNegativeInt(offsets->items[0], begin) || !nonNegativeInt(offsets->items[1], end))
    return Status::error("\"data_offsets\" must be non-negative integers");
  std::string range = "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
  if (begin > end || static_cast<uint64_t>(end) > dataBytes)
    return Status::error("data_offsets " + range + " lie outside the data section (" +
                         std::to_string(dataBytes) + " bytes; is the file truncated?)");
  if (static_cast<uint64_t>(end - begin) != need)
    return Status::error("data_offsets " + range + " hold " + std::to_string(end - begin) +
                         " bytes, but shape " + shapeString(out.shape) + " of " + dtype->string +
                         " needs " + std::to_string(need));
  return Status::ok();
}

Status parseTensor(const json::Value &entry, std::span<const uint8_t> data, HostTensor &out) {
  int64_t begin = 0, end = 0;
  RETURN_IF_ERROR(parseEntry(entry, data.size(), out, begin, end));
  out.bytes.assign(data.begin() + begin, data.begin() + end);
  if (out.dtype == DType::i1)
    for (uint8_t &b : out.bytes)
      b = b != 0;
  return Status::ok();
}

StatusOr<SafetensorsFile> parseFile(const std::vector<uint8_t> &bytes) {
  if (bytes.size() < 8)
    return Status::error("the file has " + std::to_string(bytes.size()) +
                         " bytes, too few for the 8-byte header length");
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | bytes[i];
  if (headerLen > kMaxHeaderBytes || headerLen > bytes.size() - 8)
    return Status::error("header length " + std::to_string(headerLen) + " exceeds the file (" +
                         std::to_string(bytes.size()) + " bytes; is it truncated or corrupt?)");
  std::string_view text(reinterpret_cast<const char *>(bytes.data()) + 8, headerLen);
  StatusOr<json::Value> header = json::parse(text);
  if (!header.isOk())
    return Status::error("bad header: " + header.status().message());
  if (header->kind != json::Value::Kind::object)
    return Status::error("bad header: not a JSON object");
  std::span<const uint8_t> data(bytes.data() + 8 + headerLen, bytes.size() - 8 - headerLen);
  SafetensorsFile file;
  for (size_t i = 0; i < header->keys.size(); ++i) {
    const std::string &name = header->keys[i];
    const json::Value &entry = header->items[i];
    if (name == "__metadata__") {
      if (entry.kind != json::Value::Kind::object)
        return Status::error("__metadata__ is not an object");
      for (size_t j = 0; j < entry.keys.size(); ++j) {
        if (entry.items[j].kind != json::Value::Kind::string)
          return Status::error("__metadata__ value '" + entry.keys[j] + "' is not a string");
        file.metadata[entry.keys[j]] = entry.items[j].string;
      }
      continue;
    }
    HostTensor t;
    if (Status s = parseTensor(entry, data, t); !s.isOk())
      return Status::error("tensor '" + name + "': " + s.message());
    file.tensors.emplace(name, std::move(t));
  }
  return file;
}

} // namespace

const char *safetensorsDtype(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return "F64";
  case DType::f32:
    return "F32";
  case DType::bf16:
    return "BF16";
  case DType::f16:
    return "F16";
  case DType::i64:
    return "I64";
  case DType::i32:
    return "I32";
  case DType::i1:
    return "BOOL";
  }
  return "";
}

bool dtypeFromSafetensors(std::string_view name, DType &out) {
  for (DType d :
       {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i64, DType::i32, DType::i1})
    if (name == safetensorsDtype(d)) {
      out = d;
      return true;
    }
  return false;
}

StatusOr<SafetensorsFile> readSafetensorsFile(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "safetensors file"));
  StatusOr<SafetensorsFile> file = parseFile(bytes);
  if (!file.isOk())
    return Status::error("safetensors file '" + path + "': " + file.status().message());
  return file;
}

Status preadExact(int fd, uint8_t *out, size_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::pread(fd, out, size, off_t(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return Status::error(n == 0 ? std::string("unexpected end of file") : std::strerror(errno));
    out += n;
    size -= size_t(n);
    offset += uint64_t(n);
  }
  return Status::ok();
}

namespace {

StatusOr<SafetensorsHeader> parseHeader(int fd, uint64_t fileBytes) {
  if (fileBytes < 8)
    return Status::error("the file has " + std::to_string(fileBytes) +
                         " bytes, too few for the 8-byte header length");
  uint8_t lengthBytes[8];
  RETURN_IF_ERROR(preadExact(fd, lengthBytes, 8, 0));
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i)
    headerLen = (headerLen << 8) | lengthBytes[i];
  if (headerLen > kMaxHeaderBytes || headerLen > fileBytes - 8)
    return Status::error("header length " + std::to_string(headerLen) + " exceeds the file (" +
                         std::to_string(fileBytes) + " bytes; is it truncated or corrupt?)");
  std::string text(headerLen, '\0');
  RETURN_IF_ERROR(preadExact(fd, reinterpret_cast<uint8_t *>(text.data()), headerLen, 8));
  StatusOr<json::Value> header = json::parse(text);
  if (!header.isOk())
    return Status::error("bad header: " + header.status().message());
  if (header->kind != json::Value::Kind::object)
    return Status::error("bad header: not a JSON object");
  SafetensorsHeader out;
  out.fileBytes = fileBytes;
  uint64_t dataStart = 8 + headerLen;
  for (size_t i = 0; i < header->keys.size(); ++i) {
    const std::string &name = header->keys[i];
    const json::Value &entry = header->items[i];
    if (name == "__metadata__") {
      if (entry.kind != json::Value::Kind::object)
        return Status::error("__metadata__ is not an object");
      for (size_t j = 0; j < entry.keys.size(); ++j)
        if (entry.items[j].kind == json::Value::Kind::string)
          out.metadata[entry.keys[j]] = entry.items[j].string;
      continue;
    }
    HostTensor t;
    int64_t begin = 0, end = 0;
    if (Status s = parseEntry(entry, fileBytes - dataStart, t, begin, end); !s.isOk())
      return Status::error("tensor '" + name + "': " + s.message());
    out.tensors.push_back({name, t.dtype, std::move(t.shape), dataStart + uint64_t(begin),
                           dataStart + uint64_t(end)});
  }
  return out;
}

} // namespace

StatusOr<SafetensorsHeader> readSafetensorsHeader(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open safetensors file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  StatusOr<SafetensorsHeader> header =
      ::fstat(fd, &st) != 0 ? StatusOr<SafetensorsHeader>(Status::error(
                                  std::string("cannot stat it: ") + std::strerror(errno)))
                            : parseHeader(fd, uint64_t(st.st_size));
  ::close(fd);
  if (!header.isOk())
    return Status::error("safetensors file '" + path + "': " + header.status().message());
  return header;
}

StatusOr<TensorMap> readSafetensors(const std::string &path) {
  ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensorsFile(path));
  return std::move(file.tensors);
}

std::vector<uint8_t> safetensorsHead(const std::vector<SafetensorsEntry> &entries,
                                     const std::map<std::string, std::string> &metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto &[key, value] : metadata) {
      header += (first ? "" : ",") + json::quote(key) + ":" + json::quote(value);
      first = false;
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry &e : entries) {
    int64_t n = 1;
    for (int64_t d : e.shape)
      n *= d;
    uint64_t size = uint64_t(n) * dtypeSize(e.dtype);
    if (header.size() > 1)
      header += ",";
    header += json::quote(e.name) + ":{\"dtype\":\"" + safetensorsDtype(e.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i)
      header += (i ? "," : "") + std::to_string(e.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," +
              std::to_string(offset + size) + "]}";
    offset += size;
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> head(8);
  for (int i = 0; i < 8; ++i)
    head[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  head.insert(head.end(), header.begin(), header.end());
  return head;
}

Status writeSafetensors(const std::string &path, const TensorMap &tensors,
                        const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsEntry> entries;
  for (const auto &[name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      return Status::error("cannot write safetensors file '" + path + "': tensor name '" + name +
                           "' is reserved or empty");
    int64_t n = t.numElements();
    if (n < 0 || t.bytes.size() != static_cast<size_t>(n) * dtypeSize(t.dtype))
      return Status::error("cannot write safetensors file '" + path + "': tensor '" + name +
                           "' has " + std::to_string(t.bytes.size()) + " bytes, but shape " +
                           shapeString(t.shape) + " of " + dtypeName(t.dtype) + " needs " +
                           std::to_string(n * int64_t(dtypeSize(t.dtype))));
    entries.push_back({name, t.dtype, t.shape});
  }
  std::vector<uint8_t> head = safetensorsHead(entries, metadata);
  std::vector<std::span<const uint8_t>> pieces{head};
  for (const auto &[name, t] : tensors)
    pieces.emplace_back(t.bytes);
  RETURN_IF_ERROR(writeFileAtomically(path, pieces)) << " (while writing safetensors file)";
  return Status::ok();
}

} // namespace megac::runtime
