// Reading and writing NumPy .npy files (versions 1.0, 2.0, 3.0), little-endian C order.
#include "runtime/io/Npy.h"

#include "support/Checked.h"
#include "support/Files.h"
#include "support/Float16.h"

#include <cstring>
#include <limits>

namespace megac::runtime {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct NpyHeader {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
};

/// Parses the header, a Python dict literal such as
/// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  Status parse(NpyHeader &out) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    skipSpace();
    if (!eat('{'))
      return fail("expected '{'");
    while (true) {
      skipSpace();
      if (eat('}'))
        break;
      std::string key;
      RETURN_IF_ERROR(quoted(key));
      skipSpace();
      if (!eat(':'))
        return fail("expected ':' after '" + key + "'");
      skipSpace();
      if (key == "descr") {
        RETURN_IF_ERROR(quoted(out.descr));
        haveDescr = true;
      } else if (key == "fortran_order") {
        if (word("True"))
          out.fortranOrder = true;
        else if (word("False"))
          out.fortranOrder = false;
        else
          return fail("fortran_order must be True or False");
        haveOrder = true;
      } else if (key == "shape") {
        RETURN_IF_ERROR(tuple(out.shape));
        haveShape = true;
      } else {
        return fail("unexpected key '" + key + "'");
      }
      skipSpace();
      if (eat(','))
        continue;
      skipSpace();
      if (eat('}'))
        break;
      return fail("expected ',' or '}'");
    }
    if (!haveDescr || !haveOrder || !haveShape)
      return Status::error("header lacks one of 'descr', 'fortran_order', 'shape'");
    return Status::ok();
  }

private:
  Status fail(const std::string &what) const {
    return Status::error("malformed header at byte " + std::to_string(pos_) + ": " + what);
  }
  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(std::string_view w) {
    if (text_.substr(pos_, w.size()) != w)
      return false;
    pos_ += w.size();
    return true;
  }
  Status quoted(std::string &out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"'))
      return fail("expected a quoted string");
    char q = text_[pos_++];
    size_t end = text_.find(q, pos_);
    if (end == std::string_view::npos)
      return fail("unterminated string");
    out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return Status::ok();
  }
  Status tuple(std::vector<int64_t> &out) {
    if (!eat('('))
      return fail("shape must be a tuple");
    while (true) {
      skipSpace();
      if (eat(')'))
        return Status::ok();
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
        return fail("shape entries must be non-negative integers");
      int64_t v = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10)
          return fail("shape entry too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      if (pos_ < text_.size() && text_[pos_] == 'L') // Python 2 longs
        ++pos_;
      out.push_back(v);
      skipSpace();
      if (eat(','))
        continue;
      skipSpace();
      if (eat(')'))
        return Status::ok();
      return fail("expected ',' or ')' in shape");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

StatusOr<DType> dtypeFromDescr(const std::string &descr) {
  if (descr == "<f8")
    return DType::f64;
  if (descr == "<f4")
    return DType::f32;
  if (descr == "<f2")
    return DType::f16;
  if (descr == "<i8")
    return DType::i64;
  if (descr == "<i4")
    return DType::i32;
  if (descr == "|b1")
    return DType::i1;
  if (!descr.empty() && descr[0] == '>')
    return Status::error("dtype '" + descr + "' is big-endian; only little-endian is supported");
  return Status::error("dtype '" + descr +
                       "' is not supported (supported: <f8 <f4 <f2 <i8 <i4 |b1)");
}

const char *descrOf(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return "<f8";
  case DType::f32:
  case DType::bf16: // written as float32
    return "<f4";
  case DType::f16:
    return "<f2";
  case DType::i64:
    return "<i8";
  case DType::i32:
    return "<i4";
  case DType::i1:
    return "|b1";
  }
  return "";
}

uint32_t readLe(const uint8_t *p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

StatusOr<HostTensor> parseNpy(const std::vector<uint8_t> &bytes) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    return Status::error("not a .npy file (no \\x93NUMPY magic)");
  uint8_t major = bytes[6];
  if (major < 1 || major > 3)
    return Status::error(".npy format version " + std::to_string(major) + "." +
                         std::to_string(bytes[7]) + " is not supported (1.0-3.0 are)");
  size_t lenBytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + lenBytes)
    return Status::error("truncated header");
  size_t headerLen = readLe(bytes.data() + 8, static_cast<int>(lenBytes));
  size_t dataStart = 8 + lenBytes + headerLen;
  if (dataStart > bytes.size())
    return Status::error("header length " + std::to_string(headerLen) + " exceeds the file (" +
                         std::to_string(bytes.size()) + " bytes)");
  std::string_view text(reinterpret_cast<const char *>(bytes.data()) + 8 + lenBytes, headerLen);
  NpyHeader header;
  RETURN_IF_ERROR(HeaderParser(text).parse(header));
  if (header.fortranOrder)
    return Status::error("fortran_order=True is not supported; save a C-order array "
                         "(numpy.ascontiguousarray)");
  ASSIGN_OR_RETURN(DType dtype, dtypeFromDescr(header.descr));
  ASSIGN_OR_RETURN(uint64_t dataBytes, checkedByteSize(header.shape, dtypeSize(dtype)));
  if (bytes.size() - dataStart != dataBytes)
    return Status::error("shape " + shapeString(header.shape) + " of " + header.descr + " needs " +
                         std::to_string(dataBytes) + " data bytes but the file has " +
                         std::to_string(bytes.size() - dataStart));
  HostTensor t;
  t.dtype = dtype;
  t.shape = header.shape;
  t.bytes.assign(bytes.begin() + static_cast<ptrdiff_t>(dataStart), bytes.end());
  if (dtype == DType::i1)
    for (uint8_t &b : t.bytes)
      b = b != 0;
  return t;
}

} // namespace

StatusOr<HostTensor> readNpy(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, ".npy file"));
  StatusOr<HostTensor> t = parseNpy(bytes);
  if (!t.isOk())
    return Status::error(".npy file '" + path + "': " + t.status().message());
  return t;
}

Status writeNpy(const std::string &path, const HostTensor &tensor) {
  int64_t n = tensor.numElements();
  if (n < 0 || tensor.bytes.size() != static_cast<size_t>(n) * dtypeSize(tensor.dtype))
    return Status::error("cannot write .npy file '" + path + "': the tensor has " +
                         std::to_string(tensor.bytes.size()) + " bytes, but shape " +
                         shapeString(tensor.shape) + " of " + dtypeName(tensor.dtype) + " needs " +
                         std::to_string(n * int64_t(dtypeSize(tensor.dtype))));
  std::string dict =
      "{'descr': '" + std::string(descrOf(tensor.dtype)) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < tensor.shape.size(); ++i)
    dict += std::to_string(tensor.shape[i]) + (tensor.shape.size() == 1 ? ",)" : ", ");
  if (tensor.shape.size() != 1) {
    if (!tensor.shape.empty())
      dict.resize(dict.size() - 2);
    dict += ")";
  }
  dict += ", }";
  // Pad with spaces and end with '\n' so the data starts on a 64-byte boundary, as numpy does.
  size_t fixed = 10; // magic, version, 2-byte length (version 1.0)
  int major = 1;
  if (dict.size() + 1 + 63 > 65535) { // the padded header would not fit a 2-byte length
    major = 2;
    fixed = 12;
  }
  size_t total = (fixed + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - fixed - dict.size() - 1, ' ');
  dict += '\n';
  std::vector<uint8_t> head(kMagic, kMagic + kMagicLen);
  head.push_back(static_cast<uint8_t>(major));
  head.push_back(0);
  uint32_t len = static_cast<uint32_t>(dict.size());
  for (size_t i = 0; i < fixed - 8; ++i)
    head.push_back(static_cast<uint8_t>(len >> (8 * i)));
  head.insert(head.end(), dict.begin(), dict.end());

  std::vector<uint8_t> converted;
  std::span<const uint8_t> data(tensor.bytes);
  if (tensor.dtype == DType::bf16) {
    converted.resize(static_cast<size_t>(n) * 4);
    const uint16_t *src = tensor.data<uint16_t>();
    float *dst = reinterpret_cast<float *>(converted.data());
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16ToFloat(src[i]);
    data = converted;
  }
  std::span<const uint8_t> pieces[] = {head, data};
  RETURN_IF_ERROR(writeFileAtomically(path, pieces)) << " (while writing .npy file)";
  return Status::ok();
}

} // namespace megac::runtime
