// Fuzz target of the tensor file readers: the input is read as a .npy file, as a safetensors
// file (runtime/io's whole-file reader and the checkpoint's header parser) and, split at the
// seed framing, as an indexed dataset's .idx and .bin. Never a crash.
#include "FuzzFiles.h"

#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/io/Npy.h"
#include "runtime/io/Safetensors.h"

#include <algorithm>
#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string_view input(reinterpret_cast<const char *>(data), size);
  const std::string dir = fuzz::scratchDir();
  fuzz::writeFile(dir + "/t.npy", input);
  (void)runtime::readNpy(dir + "/t.npy").isOk();
  fuzz::writeFile(dir + "/t.safetensors", input);
  (void)runtime::readSafetensorsFile(dir + "/t.safetensors").isOk();
  (void)runtime::checkpoint::readSafetensorsHeader(dir + "/t.safetensors").isOk();
  auto [idx, bin] = fuzz::splitInput(input);
  fuzz::writeFile(dir + "/d.idx", idx);
  fuzz::writeFile(dir + "/d.bin", bin);
  StatusOr<runtime::data::IndexedDataset> ds = runtime::data::IndexedDataset::open(dir + "/d");
  if (ds.isOk())
    for (int64_t i = 0; i < std::min<int64_t>(ds->sequenceCount(), 16); ++i)
      (void)ds->sequence(i);
  return 0;
}
