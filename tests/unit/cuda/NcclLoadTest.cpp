// NCCL opened at run time (runtime/cuda/NcclApi.cpp): a missing library or one without megac's
// functions fails every NCCL call with a message naming it; the real libnccl loads. No GPU needed.
#include "runtime/cuda/NcclApi.h"

#include <gtest/gtest.h>

#include <string>

using megac::runtime::cuda::NcclApi;

TEST(NcclLoad, AMissingLibraryFailsEveryCallNamingIt) {
  std::unique_ptr<NcclApi> api = NcclApi::open("/nonexistent/libnccl.so.2");
  std::string error = api->loadError();
  EXPECT_NE(error.find("cannot load NCCL (/nonexistent/libnccl.so.2)"), std::string::npos) << error;
  EXPECT_NE(error.find("MEGAC_NCCL_LIBRARY"), std::string::npos) << error;
  ncclUniqueId id;
  EXPECT_EQ(api->getUniqueId(&id), ncclSystemError);
  EXPECT_EQ(api->groupStart(), ncclSystemError);
  EXPECT_EQ(std::string(api->getErrorString(ncclSystemError)), error);
  EXPECT_EQ(std::string(api->getLastError(nullptr)), error);
}

TEST(NcclLoad, ALibraryWithoutNcclsFunctionsIsRefused) {
  std::unique_ptr<NcclApi> api = NcclApi::open("libm.so.6");
  EXPECT_NE(api->loadError().find("has no ncclGetUniqueId"), std::string::npos) << api->loadError();
  ncclUniqueId id;
  EXPECT_EQ(api->getUniqueId(&id), ncclSystemError);
}

TEST(NcclLoad, TheToolkitsNcclLoads) {
  std::unique_ptr<NcclApi> api = NcclApi::open(MEGAC_TEST_NCCL_LIBRARY);
  EXPECT_EQ(api->loadError(), "");
  // ncclGetErrorString needs no device: the library's own text for success.
  EXPECT_FALSE(std::string(api->getErrorString(ncclSuccess)).empty());
}
