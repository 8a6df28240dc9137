// What the one-GPU NCCL tests share (NcclCommTest.cpp, NcclAsyncGpuTest.cu): device buffers,
// host round trips, seeded inputs, and a fixture with a compute stream, the kernels' error flag
// and scratch memory for the device ops.
#pragma once

#include "runtime/cuda/DeviceCommOps.h"
#include "runtime/cuda/NcclApi.h"
#include "runtime/cuda/NcclCommunicator.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <vector>

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

namespace megac::runtime::cuda::test {

/// Device memory freed at scope exit.
struct DeviceBuffer {
  void *data = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&data, bytes ? bytes : 1), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
};

inline std::vector<float> randomFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

inline void upload(void *dst, const void *src, size_t bytes) {
  ASSERT_EQ(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

template <typename T> std::vector<T> download(const void *src, size_t count) {
  std::vector<T> out(count);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(out.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

/// A stream, an error flag and scratch memory for the device ops.
class NcclDeviceTest : public ::testing::Test {
protected:
  void SetUp() override {
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreate(&stream_));
    CUDA_OK(cudaMalloc(reinterpret_cast<void **>(&errors_), sizeof(int)));
    CUDA_OK(cudaMemset(errors_, 0, sizeof(int)));
    ctx_.stream = stream_;
    ctx_.errors = errors_;
    ctx_.scratch = [this](size_t bytes) -> StatusOr<void *> {
      void *p = nullptr;
      if (cudaMalloc(&p, bytes) != cudaSuccess)
        return Status::error("scratch cudaMalloc failed");
      scratch_.push_back(p);
      return p;
    };
  }
  void TearDown() override {
    cudaDeviceSynchronize();
    for (void *p : scratch_)
      cudaFree(p);
    cudaFree(errors_);
    cudaStreamDestroy(stream_);
  }
  /// Rank `rank` of `mesh` on this fixture's stream, with no host communicator.
  std::unique_ptr<NcclCommunicator> make(const comm::Mesh &mesh, int rank = 0,
                                         std::chrono::seconds timeout = std::chrono::seconds(300),
                                         NcclApi *api = nullptr) {
    auto c = NcclCommunicator::create(mesh, rank, nullptr, stream_, timeout, api);
    EXPECT_TRUE(c.isOk()) << c.status().message();
    return c.isOk() ? std::move(c).value() : nullptr;
  }
  /// The kernels' error flag once the stream is done (0: no error).
  int errorFlag() {
    int code = -1;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&code, errors_, sizeof code, cudaMemcpyDeviceToHost), cudaSuccess);
    return code;
  }

  cudaStream_t stream_ = nullptr;
  int *errors_ = nullptr;
  Context ctx_;
  std::vector<void *> scratch_;
};

} // namespace megac::runtime::cuda::test
