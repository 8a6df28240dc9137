// Helpers of cuda_kernels_nn_test (NnKernelsTest.cpp, AttentionKernelsTest.cpp): the fixture of
// ElementwiseTestUtil.h plus a cuBLASLt handle and a 32 MiB workspace, and a one-call
// "run on the device, run the CPU reference, compare" for kernels with float outputs.
#pragma once

#include "ElementwiseTestUtil.h"

#include <cublasLt.h>

#include <functional>
#include <memory>

namespace megac::runtime::cuda::test {

/// CudaKernelTest with ctx.lt and ctx.workspace set.
class NnKernelTest : public CudaKernelTest {
protected:
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

  void SetUp() override {
    CudaKernelTest::SetUp();
    ASSERT_EQ(cublasLtCreate(&lt_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMalloc(&workspace_, kWorkspaceBytes), cudaSuccess);
    ctx.lt = lt_;
    ctx.workspace = workspace_;
    ctx.workspaceBytes = kWorkspaceBytes;
  }
  void TearDown() override {
    CudaKernelTest::TearDown(); // synchronizes the stream first
    cudaFree(workspace_);
    if (lt_)
      cublasLtDestroy(lt_);
  }

  /// A tensor filled uniformly in [lo, hi) with `seed` and uploaded.
  std::unique_ptr<Tensor> random(DType dtype, std::vector<int64_t> shape, uint32_t seed,
                                 double lo = -1.0, double hi = 1.0) {
    auto t = std::make_unique<Tensor>(dtype, std::move(shape));
    fillUniform(*t, lo, hi, seed);
    t->upload();
    return t;
  }
  /// An output tensor, its device memory poisoned (so an unwritten element shows).
  std::unique_ptr<Tensor> output(DType dtype, std::vector<int64_t> shape) {
    auto t = std::make_unique<Tensor>(dtype, std::move(shape));
    t->poison();
    return t;
  }

private:
  cublasLtHandle_t lt_ = nullptr;
  void *workspace_ = nullptr;
};

/// Compares each device output with the CPU reference computed into fresh host tensors by
/// `kernel` (through computeInF32 for half types) on the inputs' host copies.
inline void expectMatchesCpu(std::vector<Tensor *> inputs, std::vector<Tensor *> outputs,
                             const cpu::KernelCall &kernel, Tolerance tol,
                             const std::string &what) {
  std::vector<std::unique_ptr<Tensor>> refs;
  std::vector<TensorRef> in, out;
  for (Tensor *t : inputs)
    in.push_back(t->hostRef());
  for (Tensor *t : outputs) {
    refs.push_back(std::make_unique<Tensor>(t->dtype(), t->shape()));
    out.push_back(refs.back()->hostRef());
  }
  Status status = cpuReference(in, out, kernel);
  ASSERT_TRUE(status.isOk()) << what << ": CPU reference: " << status.message();
  for (size_t i = 0; i < outputs.size(); ++i)
    expectClose(outputs[i]->dtype(), outputs[i]->download(), refs[i]->host, tol,
                what + " output " + std::to_string(i));
}

} // namespace megac::runtime::cuda::test
