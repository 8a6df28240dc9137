// main() of the GPU tests (ctest label `gpu`): without a usable device it prints why and exits
// 77, which ctest reports as a skip (SKIP_RETURN_CODE), never as a pass.
#include "runtime/cuda/Device.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

int main(int argc, char **argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    listing = listing || std::strncmp(argv[i], "--gtest_list_tests", 18) == 0;
  if (!listing) {
    megac::StatusOr<int> devices = megac::runtime::cuda::usableDevices();
    if (!devices.isOk()) {
      std::printf("SKIP: no usable CUDA device: %s\n", devices.status().message().c_str());
      return 77;
    }
    megac::StatusOr<std::string> name = megac::runtime::cuda::describeDevice(0);
    std::printf("device 0: %s\n", name.isOk() ? name->c_str() : name.status().message().c_str());
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
