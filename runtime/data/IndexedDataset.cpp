// Megatron's indexed dataset: mmap reader, atomic builder and training windows (IndexedDataset.h).
#include "runtime/data/IndexedDataset.h"

#include "runtime/data/Samples.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <numeric>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace megac::runtime::data {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
constexpr uint64_t kVersion = 1;
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

template <typename T> T load(const uint8_t *p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

std::string errnoText() { return std::strerror(errno); }

/// Maps `path` read-only; an empty file maps to {nullptr, 0}.
StatusOr<std::pair<const uint8_t *, size_t>> mapFile(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open " + path + ": " + errnoText() +
                         " (write it with `megac data prep`)");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::error("cannot stat " + path + ": " + errnoText());
  }
  size_t size = static_cast<size_t>(st.st_size);
  const uint8_t *data = nullptr;
  if (size > 0) {
    void *p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return Status::error("cannot mmap " + path + ": " + errnoText());
    }
    data = static_cast<const uint8_t *>(p);
  }
  ::close(fd);
  return std::pair{data, size};
}

/// Converts `count` elements of dtype `type` at `p` to int64.
void convert(TokenType type, const uint8_t *p, size_t count, int64_t *out) {
  auto copy = [&](auto tag) {
    using T = decltype(tag);
    for (size_t k = 0; k < count; ++k)
      out[k] = static_cast<int64_t>(load<T>(p + k * sizeof(T)));
  };
  switch (type) {
  case TokenType::u8:
    return copy(uint8_t{});
  case TokenType::i8:
    return copy(int8_t{});
  case TokenType::i16:
    return copy(int16_t{});
  case TokenType::i32:
    return copy(int32_t{});
  case TokenType::i64:
    return copy(int64_t{});
  case TokenType::f64:
    return copy(double{});
  case TokenType::f32:
    return copy(float{});
  case TokenType::u16:
    return copy(uint16_t{});
  }
}

} // namespace

size_t tokenTypeSize(uint8_t code) {
  switch (code) {
  case 1:
  case 2:
    return 1;
  case 3:
  case 8:
    return 2;
  case 4:
  case 7:
    return 4;
  case 5:
  case 6:
    return 8;
  default:
    return 0;
  }
}

// ---- Reader -------------------------------------------------------------------------------

StatusOr<IndexedDataset> IndexedDataset::open(const std::string &prefix) {
  std::string idxPath = prefix + ".idx", binPath = prefix + ".bin";
  IndexedDataset ds;
  ASSIGN_OR_RETURN(auto idx, mapFile(idxPath));
  ds.idx_ = {idx.first, idx.second};
  const uint8_t *p = ds.idx_.data;
  size_t size = ds.idx_.size;
  if (size < sizeof(kMagic) || std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    return Status::error(idxPath + ": not an indexed dataset index (no MMIDIDX magic)");
  if (size < kHeaderBytes)
    return Status::error(idxPath + ": truncated header (" + std::to_string(size) + " bytes)");
  uint64_t version = load<uint64_t>(p + 9);
  if (version != kVersion)
    return Status::error(idxPath + ": version " + std::to_string(version) +
                         " is not supported (only 1)");
  uint8_t code = p[17];
  if (tokenTypeSize(code) == 0)
    return Status::error(idxPath + ": unknown dtype code " + std::to_string(code));
  ds.type_ = static_cast<TokenType>(code);
  uint64_t count = load<uint64_t>(p + 18), docs = load<uint64_t>(p + 26);
  // Checked against the file length before multiplying, so huge counts cannot overflow.
  if (count > size / 12 || docs > size / 8 || kHeaderBytes + 12 * count + 8 * docs != size)
    return Status::error(idxPath + ": " + std::to_string(count) + " sequences and " +
                         std::to_string(docs) + " document index entries need " +
                         "a different file length than its " + std::to_string(size) + " bytes");
  ds.count_ = static_cast<int64_t>(count);
  ds.sizes_ = p + kHeaderBytes;
  ds.pointers_ = ds.sizes_ + 4 * count;
  const uint8_t *docp = ds.pointers_ + 8 * count;
  if (docs < 1)
    return Status::error(idxPath + ": empty document index (it starts with 0)");
  ds.documentIndex_.resize(docs);
  for (uint64_t d = 0; d < docs; ++d) {
    int64_t v = load<int64_t>(docp + 8 * d);
    if ((d == 0 && v != 0) || v < 0 || v > ds.count_ || (d > 0 && v < ds.documentIndex_[d - 1]))
      return Status::error(idxPath + ": document index entry " + std::to_string(d) + " (" +
                           std::to_string(v) + ") is not a sequence boundary in order");
    ds.documentIndex_[d] = v;
  }
  if (ds.documentIndex_.back() != ds.count_)
    return Status::error(idxPath + ": the document index ends at sequence " +
                         std::to_string(ds.documentIndex_.back()) + ", not at the count " +
                         std::to_string(ds.count_));

  ASSIGN_OR_RETURN(auto bin, mapFile(binPath));
  ds.bin_ = {bin.first, bin.second};
  int64_t item = static_cast<int64_t>(tokenTypeSize(code));
  int64_t binSize = static_cast<int64_t>(ds.bin_.size);
  for (int64_t i = 0; i < ds.count_; ++i) {
    int64_t n = ds.sequenceLength(i), at = ds.pointer(i);
    if (n < 0 || at < 0 || at > binSize || n > (binSize - at) / item)
      return Status::error(binPath + ": sequence " + std::to_string(i) + " (" + std::to_string(n) +
                           " tokens at byte " + std::to_string(at) +
                           ") lies past the end of the file (" + std::to_string(binSize) +
                           " bytes; truncated?)");
    ds.totalTokens_ += n;
  }
  return ds;
}

IndexedDataset::IndexedDataset(IndexedDataset &&other) noexcept { *this = std::move(other); }

IndexedDataset &IndexedDataset::operator=(IndexedDataset &&other) noexcept {
  if (this != &other) {
    release();
    idx_ = std::exchange(other.idx_, {});
    bin_ = std::exchange(other.bin_, {});
    type_ = other.type_;
    count_ = other.count_;
    totalTokens_ = other.totalTokens_;
    sizes_ = other.sizes_;
    pointers_ = other.pointers_;
    documentIndex_ = std::move(other.documentIndex_);
  }
  return *this;
}

IndexedDataset::~IndexedDataset() { release(); }

void IndexedDataset::release() {
  for (Mapping *m : {&idx_, &bin_})
    if (m->data)
      ::munmap(const_cast<uint8_t *>(m->data), m->size);
  idx_ = bin_ = {};
}

int64_t IndexedDataset::sequenceLength(int64_t i) const { return load<int32_t>(sizes_ + 4 * i); }

int64_t IndexedDataset::pointer(int64_t i) const { return load<int64_t>(pointers_ + 8 * i); }

void IndexedDataset::read(int64_t i, int64_t offset, std::span<int64_t> out) const {
  size_t item = tokenTypeSize(static_cast<uint8_t>(type_));
  convert(type_, bin_.data + pointer(i) + offset * static_cast<int64_t>(item), out.size(),
          out.data());
}

std::vector<int64_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int64_t> out(static_cast<size_t>(sequenceLength(i)));
  read(i, 0, out);
  return out;
}

// ---- Builder ------------------------------------------------------------------------------

namespace {

constexpr size_t kFlushBytes = 1 << 20;

Status writeAll(int fd, const uint8_t *p, size_t n, const std::string &path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return Status::error("cannot write " + path + ": " + errnoText());
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::ok();
}

Status fsyncDirectoryOf(const std::string &path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::ok(); // best effort: the renames are done
  ::fsync(fd);
  ::close(fd);
  return Status::ok();
}

template <typename T> void append(std::vector<uint8_t> &buf, T value) {
  size_t at = buf.size();
  buf.resize(at + sizeof(T));
  std::memcpy(buf.data() + at, &value, sizeof(T));
}

} // namespace

StatusOr<IndexedDatasetBuilder> IndexedDatasetBuilder::create(const std::string &prefix,
                                                              TokenType type) {
  if (type == TokenType::f32 || type == TokenType::f64)
    return Status::error("indexed dataset " + prefix + ": token dtype must be an integer type");
  IndexedDatasetBuilder b;
  b.prefix_ = prefix;
  b.type_ = type;
  std::string tmp = prefix + ".bin.tmp";
  b.fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (b.fd_ < 0)
    return Status::error("cannot create " + tmp + ": " + errnoText());
  b.buffer_.reserve(kFlushBytes + 4096);
  return b;
}

IndexedDatasetBuilder::IndexedDatasetBuilder(IndexedDatasetBuilder &&o) noexcept
    : prefix_(std::move(o.prefix_)), type_(o.type_), fd_(std::exchange(o.fd_, -1)),
      buffer_(std::move(o.buffer_)), sizes_(std::move(o.sizes_)), pointers_(std::move(o.pointers_)),
      documentIndex_(std::move(o.documentIndex_)), offset_(o.offset_), tokens_(o.tokens_) {}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (fd_ >= 0) { // not finished: leave nothing under PREFIX
    ::close(fd_);
    std::remove((prefix_ + ".bin.tmp").c_str());
  }
}

Status IndexedDatasetBuilder::flush() {
  RETURN_IF_ERROR(writeAll(fd_, buffer_.data(), buffer_.size(), prefix_ + ".bin.tmp"));
  buffer_.clear();
  return Status::ok();
}

Status IndexedDatasetBuilder::addSequence(std::span<const int64_t> tokens) {
  if (fd_ < 0)
    return Status::error("indexed dataset " + prefix_ + " is already finished");
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return Status::error("a sequence of " + std::to_string(tokens.size()) +
                         " tokens does not fit the index's int32 sizes");
  int64_t lo = 0, hi = 0;
  switch (type_) {
  case TokenType::u8:
    lo = 0, hi = UINT8_MAX;
    break;
  case TokenType::i8:
    lo = INT8_MIN, hi = INT8_MAX;
    break;
  case TokenType::i16:
    lo = INT16_MIN, hi = INT16_MAX;
    break;
  case TokenType::u16:
    lo = 0, hi = UINT16_MAX;
    break;
  case TokenType::i32:
    lo = INT32_MIN, hi = INT32_MAX;
    break;
  default:
    lo = INT64_MIN, hi = INT64_MAX;
  }
  size_t at = buffer_.size(), item = tokenTypeSize(static_cast<uint8_t>(type_));
  buffer_.resize(at + tokens.size() * item);
  uint8_t *out = buffer_.data() + at;
  auto store = [&](auto tag) -> Status {
    using T = decltype(tag);
    for (size_t k = 0; k < tokens.size(); ++k) {
      int64_t t = tokens[k];
      if (t < lo || t > hi) {
        buffer_.resize(at);
        return Status::error("token " + std::to_string(t) + " does not fit the dataset's dtype (" +
                             std::to_string(lo) + ".." + std::to_string(hi) + ")");
      }
      T value = static_cast<T>(t);
      std::memcpy(out + k * sizeof(T), &value, sizeof(T));
    }
    return Status::ok();
  };
  switch (type_) {
  case TokenType::u8:
    RETURN_IF_ERROR(store(uint8_t{}));
    break;
  case TokenType::i8:
    RETURN_IF_ERROR(store(int8_t{}));
    break;
  case TokenType::i16:
    RETURN_IF_ERROR(store(int16_t{}));
    break;
  case TokenType::u16:
    RETURN_IF_ERROR(store(uint16_t{}));
    break;
  case TokenType::i32:
    RETURN_IF_ERROR(store(int32_t{}));
    break;
  default:
    RETURN_IF_ERROR(store(int64_t{}));
  }
  sizes_.push_back(static_cast<int32_t>(tokens.size()));
  pointers_.push_back(offset_);
  offset_ += static_cast<int64_t>(tokens.size() * item);
  tokens_ += static_cast<int64_t>(tokens.size());
  if (buffer_.size() >= kFlushBytes)
    RETURN_IF_ERROR(flush());
  return Status::ok();
}

void IndexedDatasetBuilder::endDocument() {
  if (documentIndex_.back() != sequenceCount())
    documentIndex_.push_back(sequenceCount());
}

Status IndexedDatasetBuilder::addDocument(std::span<const int64_t> tokens) {
  RETURN_IF_ERROR(addSequence(tokens));
  endDocument();
  return Status::ok();
}

Status IndexedDatasetBuilder::finish() {
  if (fd_ < 0)
    return Status::error("indexed dataset " + prefix_ + " is already finished");
  Status s = writeAndRename();
  if (!s.isOk()) { // leave no temporary files behind
    if (fd_ >= 0)
      ::close(std::exchange(fd_, -1));
    std::remove((prefix_ + ".bin.tmp").c_str());
    std::remove((prefix_ + ".idx.tmp").c_str());
  }
  return s;
}

Status IndexedDatasetBuilder::writeAndRename() {
  endDocument();
  std::string binTmp = prefix_ + ".bin.tmp", idxTmp = prefix_ + ".idx.tmp";
  RETURN_IF_ERROR(flush());
  if (::fsync(fd_) != 0)
    return Status::error("cannot fsync " + binTmp + ": " + errnoText());
  ::close(std::exchange(fd_, -1));

  std::vector<uint8_t> idx(kMagic, kMagic + sizeof(kMagic));
  append<uint64_t>(idx, kVersion);
  append<uint8_t>(idx, static_cast<uint8_t>(type_));
  append<uint64_t>(idx, sizes_.size());
  append<uint64_t>(idx, documentIndex_.size());
  size_t at = idx.size();
  idx.resize(at + 4 * sizes_.size() + 8 * pointers_.size() + 8 * documentIndex_.size());
  std::memcpy(idx.data() + at, sizes_.data(), 4 * sizes_.size());
  at += 4 * sizes_.size();
  std::memcpy(idx.data() + at, pointers_.data(), 8 * pointers_.size());
  at += 8 * pointers_.size();
  std::memcpy(idx.data() + at, documentIndex_.data(), 8 * documentIndex_.size());

  int fd = ::open(idxTmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::error("cannot create " + idxTmp + ": " + errnoText());
  Status s = writeAll(fd, idx.data(), idx.size(), idxTmp);
  if (s.isOk() && ::fsync(fd) != 0)
    s = Status::error("cannot fsync " + idxTmp + ": " + errnoText());
  ::close(fd);
  if (!s.isOk())
    return s;
  // .bin first: a reader that finds the new .idx also finds its .bin.
  for (auto [from, to] : {std::pair{binTmp, prefix_ + ".bin"}, {idxTmp, prefix_ + ".idx"}})
    if (std::rename(from.c_str(), to.c_str()) != 0)
      return Status::error("cannot rename " + from + " to " + to + ": " + errnoText());
  return fsyncDirectoryOf(prefix_ + ".idx");
}

// ---- Training windows ---------------------------------------------------------------------

std::vector<DocumentRange> splitDocuments(int64_t documents, const std::vector<double> &weights) {
  double sum = 0;
  for (double w : weights)
    sum += w;
  std::vector<DocumentRange> parts;
  double cumulative = 0;
  int64_t first = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    cumulative += weights[i];
    int64_t last = i + 1 == weights.size()
                       ? documents
                       : static_cast<int64_t>(std::llround(cumulative / sum * double(documents)));
    last = std::clamp<int64_t>(last, first, documents);
    parts.push_back({first, last});
    first = last;
  }
  return parts;
}

StatusOr<Windows> trainingWindows(const IndexedDataset &dataset, int64_t sequenceLength,
                                  int64_t maxRows, std::optional<uint64_t> shuffleSeed,
                                  DocumentRange documents) {
  // A non-owning view: the samples live only in this call.
  std::shared_ptr<const IndexedDataset> view(std::shared_ptr<void>(), &dataset);
  ASSIGN_OR_RETURN(
      std::unique_ptr<WindowSamples> samples,
      WindowSamples::create(view, "the dataset", sequenceLength, shuffleSeed, documents));
  Windows w;
  w.total = samples->windows();
  w.rows = std::min(w.total, std::max<int64_t>(maxRows, 1));
  int64_t row = samples->rowLength();
  w.tokens.resize(static_cast<size_t>(w.rows * row));
  for (int64_t r = 0; r < w.rows; ++r)
    samples->readWindow(samples->window(r), {w.tokens.data() + r * row, static_cast<size_t>(row)});
  return w;
}

} // namespace megac::runtime::data
