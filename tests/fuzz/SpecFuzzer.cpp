// Fuzz target of the spec strings and the hardware JSON: the input is parsed as a model spec
// ("gpt:layers=2,..."), as a transformers config.json (--model hf:), as a cluster spec
// ("h100-sxm:2x8") and as a device spec file; what parses is used (the config bound to a
// sequence, the device count). Never a crash, never a hang.
#include "FuzzFiles.h"

#include "frontends/models/HfConfig.h"
#include "frontends/models/ModelConfig.h"
#include "planner/Hardware.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string text(reinterpret_cast<const char *>(data), size);
  (void)models::parseModelSpec(text); // its bounds and FLOP-overflow checks run while parsing
  if (models::HfResult hf = models::parseHfConfig(text, "config.json"); hf.model)
    (void)hf.model->at(int64_t(size) + 1); // the sliding-window check and the zoo's, at some seq
  std::string error;
  if (std::optional<planner::Cluster> cluster = planner::parseCluster(text, &error))
    (void)cluster->devices();
  const std::string path = fuzz::scratchDir() + "/device.json";
  fuzz::writeFile(path, text);
  (void)planner::loadDeviceSpec(path, &error);
  return 0;
}
