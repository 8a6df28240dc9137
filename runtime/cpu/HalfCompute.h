// bf16/f16 compute for the f32 kernels: half inputs widened to f32 scratch, the f32 kernel, and
// its f32 results rounded (to nearest even) into the half outputs.
#pragma once

#include "runtime/cpu/Kernels.h"

#include <functional>
#include <span>
#include <vector>

namespace megac::runtime::cpu {

/// True when a ref is bf16 or f16.
inline bool isHalf(const TensorRef &t) { return t.dtype == DType::bf16 || t.dtype == DType::f16; }
inline bool anyHalf(std::span<const TensorRef> refs) {
  for (const TensorRef &t : refs)
    if (isHalf(t))
      return true;
  return false;
}

/// A kernel over (inputs, outputs), as the executor calls it.
using KernelCall =
    std::function<Status(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs)>;

/// Runs `kernel` with every bf16/f16 input converted to f32 and every bf16/f16 output computed
/// in f32 and then rounded to its dtype; other refs pass through unchanged. The result is the
/// f32 kernel's on the exactly widened inputs, rounded once. Outputs may alias inputs (the f32
/// copies are separate memory).
Status computeInF32(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs,
                    const KernelCall &kernel);

} // namespace megac::runtime::cpu
