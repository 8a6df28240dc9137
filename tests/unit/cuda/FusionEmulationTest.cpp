// The generated CUDA C of every fusion test plan, built for the host (cuda_fusion_emit and
// FusionHostShim.h), against the CPU kernels run one instruction at a time: both sides use the
// host's libm and IEEE arithmetic, so every stored value must have the CPU's bits. This checks
// the code generation (operands, formulas, constants, rounding points, in-place updates) where
// no GPU is; the device's own libm is cuda_fusion_gpu_test's business.
#include "runtime/cuda/Fusion.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/unit/cuda/FusionHostShim.h"
#include "tests/unit/cuda/FusionPlans.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::testing;

namespace {

const EmulatedKernel *findEmulated(const std::string &name) {
  for (size_t i = 0; i < kEmulatedKernelCount; ++i)
    if (name == kEmulatedKernels[i].name)
      return &kEmulatedKernels[i];
  return nullptr;
}

bool isNan(const uint8_t *p, DType dtype) {
  uint64_t bits = 0;
  std::memcpy(&bits, p, dtypeSize(dtype));
  switch (dtype) {
  case DType::f64:
    return (bits & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
  case DType::f32:
    return (bits & 0x7fffffffu) > 0x7f800000u;
  case DType::bf16:
    return (bits & 0x7fffu) > 0x7f80u;
  case DType::f16:
    return (bits & 0x7fffu) > 0x7c00u;
  default:
    return false;
  }
}

} // namespace

TEST(FusionEmulation, GeneratedKernelsGiveTheCpuKernelsBits) {
  constexpr int64_t kElements = 4099;
  size_t checked = 0;
  for (const NamedPlan &plan : fusionTestPlans(kElements)) {
    SCOPED_TRACE(plan.name);
    auto loaded = loadPlanFromBytes(plan.spec.build());
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    const fb::Program &program = *loaded->plan().programs()->Get(0);
    const fb::Function &fn = *program.functions()->Get(0);
    std::vector<FusedGroup> groups = findFusionGroups(program, 0);
    ASSERT_EQ(groups.size(), 1u);
    const FusedGroup &group = groups[0];
    const EmulatedKernel *kernel = findEmulated(group.kernelName);
    ASSERT_NE(kernel, nullptr) << group.kernelName << " was not emitted: cuda_fusion_emit is stale";

    std::vector<uint8_t> arena(program.arena_bytes());
    fillInputs(program, arena, plan.ranges);
    std::vector<uint8_t> want = arena, got = arena;
    for (const fb::Instruction *inst : *fn.instructions()) {
      Status s = runReference(program, *inst, want.data());
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    std::vector<void *> pointers;
    for (uint32_t b : group.inputs)
      pointers.push_back(got.data() + program.buffers()->Get(b)->offset());
    for (uint32_t b : group.outputs)
      pointers.push_back(got.data() + program.buffers()->Get(b)->offset());
    kernel->run(pointers.data(), group.elements);

    for (uint32_t b : group.outputs) {
      const fb::Buffer *buf = program.buffers()->Get(b);
      DType dtype = static_cast<DType>(buf->dtype());
      size_t size = dtypeSize(dtype);
      int reported = 0;
      for (uint64_t at = buf->offset(); at < buf->offset() + buf->bytes(); at += size) {
        const uint8_t *g = got.data() + at, *w = want.data() + at;
        bool same = std::memcmp(g, w, size) == 0 || (isNan(g, dtype) && isNan(w, dtype));
        if (!same && reported++ < 3) {
          uint64_t gb = 0, wb = 0;
          std::memcpy(&gb, g, size);
          std::memcpy(&wb, w, size);
          ADD_FAILURE() << buf->name()->str() << " (" << dtypeName(dtype) << ") element "
                        << (at - buf->offset()) / size << ": generated bits 0x" << std::hex << gb
                        << ", CPU 0x" << wb << std::dec << "\n"
                        << group.source;
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 20u);
}
