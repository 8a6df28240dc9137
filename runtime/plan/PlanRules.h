// Structural rules of plan instructions that the producer (codegen) and the loader share:
// which opcodes may write in place and how many outputs each has, from the opcode table
// (runtime/plan/Opcodes.def). Header-only over the generated schema, so codegen uses it without
// linking the runtime.
#pragma once

#include "runtime/plan/Opcodes.h"

namespace megac::plan {

/// Whether an instruction of `op` may write an output in place: into the very memory of one of
/// its inputs, or into a parameter or state buffer (a `mega.updates` result). The opcodes
/// flagged InPlace in Opcodes.def: the elementwise ones, Dropout, AdamW, ClipByNorm and
/// AllReduce, whose output elements depend only on the inputs' elements at their own index (or
/// on 0-d inputs read before any write; AllReduce reads its whole input first).
inline bool writesInPlace(Opcode op) { return opcodeHas(op, opflag::InPlace); }

/// Whether an instruction of `op` with `inputs` inputs accumulates into its last input: a
/// MatMul with an accumulator (out = lhs rhs + acc, BLAS's beta = 1) or a MoeMatmulWeightGrad
/// with one (out = acc + per-expert sums). Its output may be the accumulator's very memory or a
/// state buffer (each output element depends on the accumulator's element at its index), but
/// never another input's memory, which the GEMM reads whole while it writes.
inline bool accumulatesInPlace(Opcode op, int inputs) {
  return (op == Opcode::MatMul && inputs == 3) ||
         (op == Opcode::MoeMatmulWeightGrad && inputs == 4);
}

/// How many outputs an instruction of `op` with `inputs` inputs has (1 for an unknown opcode).
inline int outputCount(Opcode op, int inputs) {
  const OpcodeInfo *info = opcodeInfo(op);
  return info ? info->outputsFor(inputs) : 1;
}

/// Whether `op` starts an asynchronous collective (its output is in flight until the
/// CollectiveDone that reads it).
inline bool isCollectiveStart(Opcode op) {
  return op == Opcode::AllReduceStart || op == Opcode::AllGatherStart ||
         op == Opcode::ReduceScatterStart;
}

/// The blocking collective an asynchronous start computes (its shapes and attrs); `op` itself
/// for any other opcode.
inline Opcode blockingTwin(Opcode op) {
  switch (op) {
  case Opcode::AllReduceStart:
    return Opcode::AllReduce;
  case Opcode::AllGatherStart:
    return Opcode::AllGather;
  case Opcode::ReduceScatterStart:
    return Opcode::ReduceScatter;
  default:
    return op;
  }
}

} // namespace megac::plan
