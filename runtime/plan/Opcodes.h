// The plan opcode table (runtime/plan/Opcodes.def) as constexpr data over plan.fbs's enums:
// each opcode's arity, attrs member, kernel kind and flags, checked against the generated enum
// at compile time. Header-only, so codegen uses it without linking the runtime.
#pragma once

#include "runtime/plan/plan_generated.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace megac::plan {

/// An opcode's flags (Opcodes.def explains each).
namespace opflag {
enum : unsigned {
  NoFlags = 0,
  Elementwise = 1u << 0,
  InPlace = 1u << 1,
  Fusible = 1u << 2,
  Collective = 1u << 3,
  PointToPoint = 1u << 4,
  OptionalAttrs = 1u << 5,
  PositionPair = 1u << 6,
};
} // namespace opflag

/// How the backends run an opcode: their unary or binary elementwise kernel of the opcode's
/// name, or a handler of its own.
enum class OpKernel : uint8_t { Unary, Binary, Own };

/// MaxInputs of an opcode that takes any number of inputs.
inline constexpr int kVariadic = -1;

/// One row of Opcodes.def.
struct OpcodeInfo {
  Opcode op;
  const char *name;
  int minInputs, maxInputs; // maxInputs: kVariadic for any number
  int minOutputs, maxOutputs;
  Attrs attrs; // NONE: no attrs
  OpKernel kernel;
  unsigned flags;

  constexpr bool has(unsigned flag) const { return (flags & flag) == flag; }
  constexpr bool acceptsInputs(int n) const {
    return n >= minInputs && (maxInputs == kVariadic || n <= maxInputs);
  }
  /// Whether an instruction with `inputs` inputs ends in a (query, key) position pair (after
  /// a mask where there are MinIn + 3).
  constexpr bool hasPositionPair(int inputs) const {
    return has(opflag::PositionPair) && (inputs == minInputs + 2 || inputs == minInputs + 3);
  }
  /// The outputs of an instruction with `inputs` inputs: fixed, one more per input beyond the
  /// minimum (a position pair adds none), or (maxOutputs variadic: AdamWMulti) three per four
  /// inputs beyond it.
  constexpr int outputsFor(int inputs) const {
    if (hasPositionPair(inputs))
      inputs -= 2;
    if (maxOutputs == kVariadic)
      return minOutputs + (inputs - minInputs) / 4 * 3;
    return minOutputs == maxOutputs ? minOutputs : minOutputs + (inputs - minInputs);
  }
};

namespace detail {
using namespace opflag;
inline constexpr int VARIADIC = kVariadic;

inline constexpr OpcodeInfo kOpcodeTable[] = {
#define MEGAC_OPCODE(Name, Number, MinIn, MaxIn, MinOut, MaxOut, AttrsMember, Kernel, Flags)       \
  {Opcode::Name, #Name, MinIn, MaxIn, MinOut, MaxOut, Attrs::AttrsMember, OpKernel::Kernel, Flags},
#include "runtime/plan/Opcodes.def"
#undef MEGAC_OPCODE
};

// plan.fbs's enum against the table: every row's number is its enum value and its index (rows
// in number order, no gaps), and the enum has no value the table lacks.
#define MEGAC_OPCODE(Name, Number, ...)                                                            \
  static_assert(static_cast<int>(Opcode::Name) == (Number),                                        \
                "Opcodes.def: " #Name " is not number " #Number " in plan.fbs");                   \
  static_assert(kOpcodeTable[Number].op == Opcode::Name,                                           \
                "Opcodes.def: the rows must be in number order, without gaps (" #Name ")");
#include "runtime/plan/Opcodes.def"
#undef MEGAC_OPCODE
static_assert(std::size(kOpcodeTable) == static_cast<size_t>(Opcode::MAX) + 1,
              "plan.fbs has an opcode that Opcodes.def lacks");
} // namespace detail

/// Every opcode, in number order.
inline constexpr std::span<const OpcodeInfo> kOpcodes(detail::kOpcodeTable);
inline constexpr size_t kOpcodeCount = kOpcodes.size();

/// The row of `op`, or null for a number this build does not know (a newer plan's opcode).
constexpr const OpcodeInfo *opcodeInfo(Opcode op) {
  switch (op) {
#define MEGAC_OPCODE(Name, Number, ...)                                                            \
  case Opcode::Name:                                                                               \
    return &detail::kOpcodeTable[Number];
#include "runtime/plan/Opcodes.def"
#undef MEGAC_OPCODE
  }
  return nullptr;
}

/// The index of `op` in kOpcodes (its number), for tables indexed by opcode; nullopt for an
/// unknown number.
constexpr std::optional<size_t> opcodeIndex(Opcode op) {
  const OpcodeInfo *info = opcodeInfo(op);
  if (!info)
    return std::nullopt;
  return static_cast<size_t>(info - detail::kOpcodeTable);
}

/// Whether `op` is a known opcode with every flag in `flag`.
constexpr bool opcodeHas(Opcode op, unsigned flag) {
  const OpcodeInfo *info = opcodeInfo(op);
  return info && info->has(flag);
}

/// The opcode named `name` ("Silu"), as the ODS ops name their plan opcode.
constexpr std::optional<Opcode> opcodeNamed(std::string_view name) {
  for (const OpcodeInfo &info : kOpcodes)
    if (name == info.name)
      return info.op;
  return std::nullopt;
}

} // namespace megac::plan
