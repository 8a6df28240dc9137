// The CPU backend's handler of each plan opcode (runtime/exec/CpuHandlers.cpp): a table filled
// from the opcode table (runtime/plan/Opcodes.def) — Unary and Binary opcodes call the CPU
// elementwise kernel of their name, the others register a handler by hand.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/InFlight.h"
#include "runtime/plan/plan_generated.h"

#include <span>

namespace megac::runtime::exec {

/// One instruction on the CPU: its inputs' and outputs' memory (outputs never overlapping
/// inputs, except exactly in place for the opcodes that allow it) and the rank's communicator
/// (collectives, vocab-parallel ops and sharded Dropout need it; may be null otherwise).
struct CpuCall {
  const megac::plan::Instruction &inst;
  std::span<const cpu::TensorRef> in;
  std::span<const cpu::TensorRef> out;
  comm::Communicator *comm = nullptr;
  int rank = 0;
  /// The executor's asynchronous collectives in flight (the start and done opcodes need it).
  InFlight *inFlight = nullptr;
};

struct CpuHandler {
  /// Null for an opcode the CPU backend does not handle.
  Status (*run)(const CpuCall &call) = nullptr;
  /// bf16/f16 operands go through f32 (cpu::computeInF32); false for the data-movement
  /// opcodes, Cast and the collectives, which handle half storage themselves.
  bool computeInF32 = true;
  /// Only moves data between ranks (the tracing communicator records it, not the kernel lane).
  bool communicates = false;
};

/// The handler of `op` (an empty one for an unknown opcode).
const CpuHandler &cpuHandler(megac::plan::Opcode op);

/// Runs `call` on its opcode's handler, with bf16/f16 math through f32 where the handler asks.
/// An opcode without a handler is an error naming it.
Status runCpuInstruction(const CpuCall &call);

} // namespace megac::runtime::exec
