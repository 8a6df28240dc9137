// The names and sizes of the element types, for every enum that spells them f64, f32, bf16, f16,
// i64, i32, i1 (the runtime's megac::DType, the plan schema's megac::plan::DType and the graph
// DSL's dsl::DType).
#pragma once

#include <cstddef>

namespace megac {

/// The enumerator's name, or `invalid` for a value that names none.
template <typename DTypeEnum>
constexpr const char *dtypeNameOr(DTypeEnum dtype, const char *invalid) {
  switch (dtype) {
  case DTypeEnum::f64:
    return "f64";
  case DTypeEnum::f32:
    return "f32";
  case DTypeEnum::bf16:
    return "bf16";
  case DTypeEnum::f16:
    return "f16";
  case DTypeEnum::i64:
    return "i64";
  case DTypeEnum::i32:
    return "i32";
  case DTypeEnum::i1:
    return "i1";
  }
  return invalid;
}

/// Bytes per element (i1 is stored as one byte), or `invalid` for a value that names none.
template <typename DTypeEnum> constexpr size_t dtypeSizeOr(DTypeEnum dtype, size_t invalid) {
  switch (dtype) {
  case DTypeEnum::f64:
  case DTypeEnum::i64:
    return 8;
  case DTypeEnum::f32:
  case DTypeEnum::i32:
    return 4;
  case DTypeEnum::bf16:
  case DTypeEnum::f16:
    return 2;
  case DTypeEnum::i1:
    return 1;
  }
  return invalid;
}

} // namespace megac
