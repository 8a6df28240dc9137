// Fuzz target of the plan loader: any bytes give a loaded plan or an error, never a crash. A
// sealed input is re-sealed first (its CRC32 recomputed) so that the FlatBuffers verifier and
// megac's validator behind the checksum see the mutated body.
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/PlanSeal.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac::runtime;
  std::vector<uint8_t> bytes(data, data + size);
  if (isSealedPlan(bytes) && bytes.size() >= kPlanSealBytes)
    bytes = sealPlan({bytes.data() + kPlanSealBytes, bytes.size() - kPlanSealBytes});
  auto body = unsealPlan(std::move(bytes), "fuzz.mplan");
  if (body.isOk())
    (void)loadPlanFromBytes(std::move(body.value()), "fuzz.mplan").isOk();
  return 0;
}
