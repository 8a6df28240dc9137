// A small recursive-descent JSON parser and a string quoter, for safetensors headers.
#include "runtime/io/Json.h"

#include <charconv>
#include <cmath>
#include <unordered_set>

namespace megac::runtime::json {

const Value *Value::find(std::string_view key) const {
  if (kind != Kind::object)
    return nullptr;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key)
      return &items[i];
  return nullptr;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<Value> document() {
    Value v;
    RETURN_IF_ERROR(value(v, 0));
    skipSpace();
    if (pos_ != text_.size())
      return fail("unexpected text after the JSON value");
    return v;
  }

private:
  Status fail(std::string_view what) const {
    return Status::error("JSON error at byte " + std::to_string(pos_) + ": " + std::string(what));
  }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word)
      return false;
    pos_ += word.size();
    return true;
  }

  Status value(Value &out, int depth) {
    if (depth > kMaxDepth)
      return fail("nesting deeper than 64 levels");
    skipSpace();
    if (pos_ >= text_.size())
      return fail("unexpected end of input");
    char c = text_[pos_];
    if (c == '{')
      return object(out, depth);
    if (c == '[')
      return array(out, depth);
    if (c == '"') {
      out.kind = Value::Kind::string;
      return string(out.string);
    }
    if (consume("true")) {
      out.kind = Value::Kind::boolean;
      out.boolean = true;
      return Status::ok();
    }
    if (consume("false")) {
      out.kind = Value::Kind::boolean;
      return Status::ok();
    }
    if (consume("null")) {
      out.kind = Value::Kind::null;
      return Status::ok();
    }
    if (c == '-' || (c >= '0' && c <= '9'))
      return number(out);
    return fail(std::string("unexpected character '") + c + "'");
  }

  Status object(Value &out, int depth) {
    out.kind = Value::Kind::object;
    ++pos_; // '{'
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return Status::ok();
    }
    // Duplicate keys: a linear scan for small objects, a hash set past kLinearKeys keys (a
    // tokenizer vocab has 50k, where the scan would be quadratic).
    constexpr size_t kLinearKeys = 32;
    std::unordered_set<std::string> seen;
    while (true) {
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != '"')
        return fail("expected a string key");
      std::string key;
      RETURN_IF_ERROR(string(key));
      if (out.keys.size() == kLinearKeys)
        seen.insert(out.keys.begin(), out.keys.end());
      bool duplicate =
          out.keys.size() < kLinearKeys ? out.find(key) != nullptr : !seen.insert(key).second;
      if (duplicate)
        return fail("duplicate key \"" + key + "\"");
      skipSpace();
      if (pos_ >= text_.size() || text_[pos_] != ':')
        return fail("expected ':'");
      ++pos_;
      Value member;
      RETURN_IF_ERROR(value(member, depth + 1));
      out.keys.push_back(std::move(key));
      out.items.push_back(std::move(member));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return Status::ok();
      }
      return fail("expected ',' or '}'");
    }
  }

  Status array(Value &out, int depth) {
    out.kind = Value::Kind::array;
    ++pos_; // '['
    skipSpace();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return Status::ok();
    }
    while (true) {
      Value item;
      RETURN_IF_ERROR(value(item, depth + 1));
      out.items.push_back(std::move(item));
      skipSpace();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      return fail("expected ',' or ']'");
    }
  }

  static void appendUtf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  Status hex4(uint32_t &out) {
    if (pos_ + 4 > text_.size())
      return fail("truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      out <<= 4;
      if (c >= '0' && c <= '9')
        out |= c - '0';
      else if (c >= 'a' && c <= 'f')
        out |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        out |= c - 'A' + 10;
      else
        return fail("bad hex digit in \\u escape");
    }
    return Status::ok();
  }

  Status string(std::string &out) {
    ++pos_; // '"'
    while (true) {
      if (pos_ >= text_.size())
        return fail("unterminated string");
      char c = text_[pos_++];
      if (c == '"')
        return Status::ok();
      if (static_cast<unsigned char>(c) < 0x20)
        return fail("control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size())
        return fail("unterminated escape");
      char e = text_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp = 0;
        RETURN_IF_ERROR(hex4(cp));
        if (cp >= 0xd800 && cp < 0xdc00) { // a high surrogate needs its low half
          uint32_t low = 0;
          if (!consume("\\u"))
            return fail("unpaired surrogate in \\u escape");
          RETURN_IF_ERROR(hex4(low));
          if (low < 0xdc00 || low >= 0xe000)
            return fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
          return fail("unpaired surrogate in \\u escape");
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        return fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  Status number(Value &out) {
    size_t start = pos_;
    if (text_[pos_] == '-')
      ++pos_;
    auto digits = [&] {
      size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        ++pos_;
      return pos_ - from;
    };
    if (digits() == 0)
      return fail("malformed number");
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0)
        return fail("malformed number");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      integral = false;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-'))
        ++pos_;
      if (digits() == 0)
        return fail("malformed number");
    }
    const char *first = text_.data() + start, *last = text_.data() + pos_;
    out.kind = Value::Kind::number;
    if (integral) {
      auto [ptr, ec] = std::from_chars(first, last, out.integer);
      out.isInteger = ec == std::errc() && ptr == last;
    }
    auto [ptr, ec] = std::from_chars(first, last, out.number);
    if (ec == std::errc::invalid_argument || ptr != last)
      return fail("malformed number");
    if (ec == std::errc::result_out_of_range)
      out.number = (*first == '-') ? -HUGE_VAL : HUGE_VAL;
    return Status::ok();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

} // namespace

StatusOr<Value> parse(std::string_view text) { return Parser(text).document(); }

std::string quote(std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

} // namespace megac::runtime::json
