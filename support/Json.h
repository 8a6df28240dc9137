// A small JSON reader and writer, enough for safetensors headers (no third-party package).
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megac::json {

/// A parsed JSON value. Objects keep their keys in file order; duplicate keys are rejected.
struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0.0;
  bool isInteger = false; // a number written without fraction or exponent that fits int64
  int64_t integer = 0;
  std::string string;
  std::vector<Value> items;      // array elements, or object values
  std::vector<std::string> keys; // object keys, parallel to items

  /// The member `key` of an object, or null if absent (or this is not an object).
  const Value *find(std::string_view key) const;
};

/// Parses one JSON document (surrounding whitespace allowed). Nesting deeper than 64 levels is
/// an error, so hostile input cannot exhaust the stack. Errors give the byte offset.
StatusOr<Value> parse(std::string_view text);

/// `text` as a JSON string literal, quotes included.
std::string quote(std::string_view text);

} // namespace megac::json
