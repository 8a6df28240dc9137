// JSON through nlohmann/json's SAX parser (a well-tested parser), building megac's small Value
// tree: keys in file order, duplicate keys refused, nesting bounded, integers kept exact.
#include "support/Json.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <unordered_set>

namespace megac::json {
namespace {

constexpr int kMaxDepth = 64;

/// A char iterator that tells how far the parser has read, so errors the builder raises (a
/// duplicate key, too deep) carry a byte offset as the parser's own errors do.
class CountingIterator {
public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char *;
  using reference = const char &;

  CountingIterator() = default;
  CountingIterator(const char *at, const char *begin, size_t *read)
      : at_(at), begin_(begin), read_(read) {}
  reference operator*() const { return *at_; }
  CountingIterator &operator++() {
    ++at_;
    *read_ = size_t(at_ - begin_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator &o) const { return at_ == o.at_; }
  bool operator!=(const CountingIterator &o) const { return at_ != o.at_; }

private:
  const char *at_ = nullptr, *begin_ = nullptr;
  size_t *read_ = nullptr;
};

class Builder : public nlohmann::json_sax<nlohmann::json> {
public:
  explicit Builder(const size_t *read) : read_(read) {}

  bool null() override { return add(Value{}); }
  bool boolean(bool b) override {
    Value v;
    v.kind = Value::Kind::boolean;
    v.boolean = b;
    return add(std::move(v));
  }
  bool number_integer(number_integer_t i) override { return add(integer(i, true)); }
  bool number_unsigned(number_unsigned_t u) override {
    bool fits = u <= uint64_t(std::numeric_limits<int64_t>::max());
    Value v = integer(fits ? int64_t(u) : 0, fits);
    if (!fits)
      v.number = double(u);
    return add(std::move(v));
  }
  bool number_float(number_float_t x, const string_t &) override {
    Value v;
    v.kind = Value::Kind::number;
    v.number = x;
    return add(std::move(v));
  }
  bool string(string_t &s) override {
    Value v;
    v.kind = Value::Kind::string;
    v.string = std::move(s);
    return add(std::move(v));
  }
  bool binary(binary_t &) override { return fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return open(Value::Kind::object); }
  bool start_array(std::size_t) override { return open(Value::Kind::array); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t &k) override {
    // Duplicate keys: a linear scan for small objects, a hash set past kLinearKeys keys (a
    // tokenizer vocabulary has 50k, where the scan would be quadratic).
    constexpr size_t kLinearKeys = 32;
    Open &open = stack_.back();
    Value &object = *open.value;
    if (object.keys.size() == kLinearKeys)
      open.seen.insert(object.keys.begin(), object.keys.end());
    bool duplicate =
        object.keys.size() < kLinearKeys ? object.find(k) != nullptr : !open.seen.insert(k).second;
    if (duplicate)
      return fail("duplicate key \"" + k + "\"");
    object.keys.push_back(std::move(k));
    return true;
  }
  bool parse_error(std::size_t position, const std::string &,
                   const nlohmann::detail::exception &e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 4: syntax error ..."
    std::string what = e.what();
    if (size_t colon = what.find(": "); colon != std::string::npos)
      what = what.substr(colon + 2);
    error_ = "JSON error at byte " + std::to_string(position) + ": " + what;
    return false;
  }

  const std::string &error() const { return error_; }
  Value &root() { return root_; }

private:
  static Value integer(int64_t i, bool exact) {
    Value v;
    v.kind = Value::Kind::number;
    v.isInteger = exact;
    v.integer = i;
    v.number = double(i);
    return v;
  }
  bool fail(const std::string &what) {
    error_ = "JSON error at byte " + std::to_string(*read_) + ": " + what;
    return false;
  }
  // Places `v` in the innermost open container (or as the document) and returns where it went.
  Value *place(Value v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Value &parent = *stack_.back().value;
    parent.items.push_back(std::move(v));
    return &parent.items.back();
  }
  bool add(Value v) {
    place(std::move(v));
    return true;
  }
  bool open(Value::Kind kind) {
    if (int(stack_.size()) >= kMaxDepth)
      return fail("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    Value v;
    v.kind = kind;
    stack_.push_back({place(std::move(v)), {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  const size_t *read_;
  Value root_;
  // Open containers, innermost last. A container's items vector only grows while it is the
  // innermost one, so pointers to its ancestors' last items stay valid.
  struct Open {
    Value *value;
    std::unordered_set<std::string> seen; // an object's keys, once it has many
  };
  std::vector<Open> stack_;
  std::string error_;
};

} // namespace

const Value *Value::find(std::string_view key) const {
  if (kind != Kind::object)
    return nullptr;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key)
      return &items[i];
  return nullptr;
}

StatusOr<Value> parse(std::string_view text) {
  size_t read = 0;
  Builder builder(&read);
  CountingIterator first(text.data(), text.data(), &read);
  CountingIterator last(text.data() + text.size(), text.data(), &read);
  if (!nlohmann::json::sax_parse(first, last, &builder, nlohmann::json::input_format_t::json,
                                 /*strict=*/true))
    return Status::error(builder.error().empty() ? "JSON error: malformed document"
                                                 : builder.error());
  return std::move(builder.root());
}

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

} // namespace megac::json
