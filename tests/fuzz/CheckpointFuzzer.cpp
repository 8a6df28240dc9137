// Fuzz target of a checkpoint's meta.json and shard index: the input is meta.json's text,
// re-sealed (meta_crc32 recomputed) and read beside real shard files; what reads is then used
// (every file verified, every tensor's whole box assembled). Never a crash, whatever the text.
#include "FuzzFiles.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/ShardFiles.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>

namespace {

using namespace megac;
namespace ckpt = megac::runtime::checkpoint;

/// A small checkpoint saved once (step 1: two parameters, one optimizer tensor); the input
/// replaces its meta.json. Its own meta.json is the seed (tests/fuzz/seeds/checkpoint/).
const std::string &stepDir() {
  static const std::string dir = [] {
    std::string root = fuzz::scratchDir() + "/ckpt";
    std::filesystem::remove_all(root);
    ckpt::CheckpointMeta meta;
    meta.step = 1;
    meta.dataPosition = 1;
    meta.model = "fuzz";
    meta.layout = "tp 1";
    meta.lossScaler = ckpt::LossScalerState{1024.0, 2, 1};
    meta.fingerprint = ckpt::ModelFingerprint{"fuzz", "0123456789abcdef", {{"w", {2, 3}}}};
    TensorMap model, optimizer;
    model["w"] = HostTensor::zeros(DType::f32, {2, 3});
    model["b"] = HostTensor::zeros(DType::bf16, {3});
    optimizer["adam.m.w"] = HostTensor::zeros(DType::f32, {2, 3});
    if (!ckpt::saveCheckpoint(root, meta, model, optimizer).isOk())
      std::abort();
    if (const char *out = std::getenv("MEGAC_FUZZ_SEED_OUT")) // how the seed was made
      std::filesystem::copy_file(root + "/step-1/meta.json", out,
                                 std::filesystem::copy_options::overwrite_existing);
    return root + "/step-1";
  }();
  return dir;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = stepDir();
  fuzz::writeFile(dir + "/meta.json",
                  ckpt::sealMeta(std::string(reinterpret_cast<const char *>(data), size)));
  StatusOr<ckpt::CheckpointIndex> index = ckpt::readCheckpointIndex(dir);
  if (!index.isOk())
    return 0;
  ckpt::ShardReader reader(*index);
  (void)reader.verifyAll().isOk();
  for (const ckpt::TensorTable *table : {&index->parameters, &index->optimizer})
    for (const auto &[name, tensor] : *table)
      (void)reader.readBox(*table, name, {std::vector<int64_t>(tensor.shape.size(), 0),
                                          tensor.shape})
          .isOk();
  return 0;
}
