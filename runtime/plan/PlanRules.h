// Structural rules of plan instructions that the producer (codegen) and the loader share:
// which opcodes may write in place and how many outputs each has. Header-only over the
// generated schema, so codegen uses it without linking the runtime.
#pragma once

#include "runtime/plan/plan_generated.h"

namespace megac::plan {

/// Whether an instruction of `op` may write an output in place: into the very memory of one of
/// its inputs, or into a parameter or state buffer (a `mega.updates` result). The elementwise
/// opcodes (unary and binary math, Compare, Where, Copy, Cast, Gelu, GeluGrad, Silu, Dropout), AdamW,
/// ClipByNorm and AllReduce: each output element depends only on the inputs' elements at its own
/// index (or on 0-d inputs read before any write; AllReduce reads its whole input first).
inline bool writesInPlace(Opcode op) {
  if (op >= Opcode::Neg && op <= Opcode::Copy)
    return true;
  switch (op) {
  case Opcode::Cast:
  case Opcode::Gelu:
  case Opcode::GeluGrad:
  case Opcode::Silu:
  case Opcode::Dropout:
  case Opcode::AdamW:
  case Opcode::ClipByNorm:
  case Opcode::AllReduce:
    return true;
  default:
    return false;
  }
}

/// How many outputs an instruction of `op` with `inputs` inputs has.
inline int outputCount(Opcode op, int inputs) {
  switch (op) {
  case Opcode::LayerNormGrad:
  case Opcode::AdamW:
    return 3;
  case Opcode::RmsNormGrad:
    return 2;
  case Opcode::AttentionGrad:
    return inputs - 1; // dq, dk, dv and, with a mask, dmask
  case Opcode::Send:
    return 0;
  default:
    return 1;
  }
}

} // namespace megac::plan
