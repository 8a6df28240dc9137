// Elementwise fusion for the CUDA executor (runtime/cuda/Fusion.cpp, Nvrtc.cpp): runs of
// consecutive elementwise instructions of a function become one kernel, generated as CUDA C
// when the plan is loaded and compiled with NVRTC (cubins cached on disk by source hash).
//
// Fusion happens at load time, not in codegen: the plan stays backend-neutral (the same .mplan
// runs on the CPU reference and on GPUs) and the CPU executor needs no fused opcode.
//
// A group is a maximal run of >= 2 instructions, each of them fusible (an opcode flagged Fusible
// in runtime/plan/Opcodes.def, on the dtypes its emitter admits: float math for the Unary and
// Binary formulas, Gelu, GeluGrad and Silu; i1 for Not, And, Or; Compare of floats, Where, Cast
// between float and i1 types, Copy of equal shapes), all of one element count, in which each thread
// handles element i of every operand. A value produced and consumed inside the group stays in
// registers; it is stored only when it is live-out: read by a later instruction of the function, a
// function output, or a parameter/state buffer. The group is cut where a live-out store could
// overlap memory another thread still reads (arena reuse at a different offset), so the fused
// kernel is race-free and gives the unfused results bit for bit (same f32/f64 arithmetic in the
// same order, half types rounded at the same points as the unfused kernels).
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace megac::plan {
struct Program;
enum class Opcode : uint16_t;
}

namespace megac::runtime::cuda {

struct FusedGroup {
  size_t first = 0; // the group is instructions [first, first + count) of the function
  size_t count = 0;
  int64_t elements = 0;
  std::vector<uint32_t> inputs;  // buffers the kernel reads, in kernel-parameter order
  std::vector<uint32_t> outputs; // buffers it stores, after the inputs in parameter order
  std::string kernelName;        // extern "C" __global__ name in `source`
  std::string source;            // CUDA C: one kernel (const T* in..., T* out..., int64_t n)
};

/// Whether the fusion's emitter table writes `op` (OpcodeTableTest: exactly the opcodes flagged
/// Fusible in Opcodes.def).
bool hasFusionRule(megac::plan::Opcode op);

/// The groups of function `function` of `program`, in instruction order (no overlap).
std::vector<FusedGroup> findFusionGroups(const megac::plan::Program &program, size_t function);

/// A compiled fused kernel, loaded on the current device.
class FusedKernel {
public:
  virtual ~FusedKernel() = default;
  /// Launches over `elements` with the group's buffers' device pointers (inputs then outputs)
  /// on `stream` (a cudaStream_t).
  virtual Status launch(const std::vector<void *> &pointers, int64_t elements,
                        void *stream) const = 0;
};

/// Compiles `group.source` for the current device with NVRTC (or loads the cubin cached under
/// `cacheDir`/<hash>.cubin; "" disables the cache) and loads it. Errors name the kernel and
/// carry NVRTC's log.
StatusOr<std::unique_ptr<FusedKernel>> compileFusedKernel(const FusedGroup &group,
                                                          const std::string &cacheDir);

/// NVRTC alone, without a device (so CI can check generated sources): compiles `source` for
/// `arch` (e.g. "sm_90") and returns the cubin bytes, or the error with the log.
StatusOr<std::vector<char>> nvrtcCompile(const std::string &source, const std::string &name,
                                         const std::string &arch);

/// The default cache directory: $MEGAC_CACHE_DIR, else $XDG_CACHE_HOME/megac/nvrtc, else
/// ~/.cache/megac/nvrtc.
std::string defaultKernelCacheDir();

} // namespace megac::runtime::cuda
