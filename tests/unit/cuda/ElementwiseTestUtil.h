// Helpers of the CUDA kernel tests (cuda_kernels_elementwise_test): a fixture with a stream, an
// error flag and a scratch allocator; tensors held on the host and on the device; random fills
// with fixed seeds; and comparisons against the CPU reference kernels.
#pragma once

#include "runtime/cpu/HalfCompute.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cuda/Kernels.h"
#include "support/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace megac::runtime::cuda::test {

using cpu::TensorRef;

#define CUDA_ASSERT(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define ASSERT_OK(expr)                                                                            \
  do {                                                                                             \
    ::megac::Status s_ = (expr);                                                                   \
    ASSERT_TRUE(s_.isOk()) << s_.message();                                                        \
  } while (0)

inline int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// A tensor on the host (`host`) with a device buffer of the same bytes (`dev`).
class Tensor {
public:
  Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    host.assign(static_cast<size_t>(elementsOf(shape_)) * dtypeSize(dtype_), 0);
    if (cudaMalloc(&dev_, host.size() ? host.size() : 1) != cudaSuccess)
      dev_ = nullptr;
  }
  Tensor(const Tensor &) = delete;
  Tensor &operator=(const Tensor &) = delete;
  ~Tensor() { cudaFree(dev_); }

  DType dtype() const { return dtype_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  int64_t size() const { return elementsOf(shape_); }
  TensorRef hostRef() { return {dtype_, shape_, host.data()}; }
  TensorRef devRef() const { return {dtype_, shape_, dev_}; }
  void *dev() const { return dev_; }
  /// host -> device.
  void upload() {
    ASSERT_NE(dev_, nullptr);
    if (!host.empty()) {
      ASSERT_EQ(cudaMemcpy(dev_, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  /// device -> a fresh host vector (the stream must be synchronized by the caller).
  std::vector<uint8_t> download() const {
    std::vector<uint8_t> out(host.size());
    if (!out.empty()) {
      EXPECT_EQ(cudaMemcpy(out.data(), dev_, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }
  /// Fills the device buffer with a byte (to see that a kernel writes everything).
  void poison(int byte = 0x7b) {
    if (!host.empty()) {
      EXPECT_EQ(cudaMemset(dev_, byte, host.size()), cudaSuccess);
    }
  }

  std::vector<uint8_t> host;

private:
  DType dtype_;
  std::vector<int64_t> shape_;
  void *dev_ = nullptr;
};

/// Element i of bytes of dtype as a double.
inline double valueAt(DType dtype, const uint8_t *bytes, int64_t i) {
  switch (dtype) {
  case DType::f64:
    return reinterpret_cast<const double *>(bytes)[i];
  case DType::f32:
    return reinterpret_cast<const float *>(bytes)[i];
  case DType::bf16:
    return bf16ToFloat(reinterpret_cast<const uint16_t *>(bytes)[i]);
  case DType::f16:
    return halfToFloat(reinterpret_cast<const uint16_t *>(bytes)[i]);
  case DType::i64:
    return static_cast<double>(reinterpret_cast<const int64_t *>(bytes)[i]);
  case DType::i32:
    return reinterpret_cast<const int32_t *>(bytes)[i];
  default:
    return bytes[i];
  }
}

/// Writes a double into element i (floats rounded to nearest even; ints truncated).
inline void setAt(DType dtype, uint8_t *bytes, int64_t i, double v) {
  switch (dtype) {
  case DType::f64:
    reinterpret_cast<double *>(bytes)[i] = v;
    break;
  case DType::f32:
    reinterpret_cast<float *>(bytes)[i] = static_cast<float>(v);
    break;
  case DType::bf16:
    reinterpret_cast<uint16_t *>(bytes)[i] = floatToBf16(static_cast<float>(v));
    break;
  case DType::f16:
    reinterpret_cast<uint16_t *>(bytes)[i] = floatToHalf(static_cast<float>(v));
    break;
  case DType::i64:
    reinterpret_cast<int64_t *>(bytes)[i] = static_cast<int64_t>(v);
    break;
  case DType::i32:
    reinterpret_cast<int32_t *>(bytes)[i] = static_cast<int32_t>(v);
    break;
  default:
    bytes[i] = v != 0;
    break;
  }
}

/// Uniform values in [lo, hi) (integers: whole numbers in [lo, hi]), fixed seed.
inline void fillUniform(Tensor &t, double lo, double hi, uint32_t seed) {
  std::mt19937_64 rng(seed);
  bool integral = t.dtype() == DType::i64 || t.dtype() == DType::i32 || t.dtype() == DType::i1;
  for (int64_t i = 0; i < t.size(); ++i) {
    double v;
    if (integral)
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(
          static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng));
    else
      v = std::uniform_real_distribution<double>(lo, hi)(rng);
    setAt(t.dtype(), t.host.data(), i, v);
  }
}

struct Tolerance {
  double atol, rtol;
};
/// The per-dtype tolerances of the brief: f64 1e-12, f32 1e-5, bf16 1e-2, f16 2e-3.
inline Tolerance toleranceFor(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-12, 1e-12};
  case DType::f32:
    return {1e-5, 1e-5};
  case DType::bf16:
    return {1e-2, 1e-2};
  case DType::f16:
    return {2e-3, 2e-3};
  default:
    return {0, 0};
  }
}

inline bool isFloatDtype(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

/// |got - ref| <= atol + rtol |ref| elementwise (NaN matches NaN, inf matches the same inf).
inline void expectClose(DType dtype, const std::vector<uint8_t> &got,
                        const std::vector<uint8_t> &ref, Tolerance tol, const std::string &what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  int64_t n = static_cast<int64_t>(got.size() / dtypeSize(dtype)), bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    double g = valueAt(dtype, got.data(), i), r = valueAt(dtype, ref.data(), i);
    bool ok = (std::isnan(g) && std::isnan(r)) || g == r ||
              std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r);
    if (!ok && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " of " << n << " is " << g << ", expected " << r
                    << " (diff " << std::fabs(g - r) << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements out of tolerance";
}

/// Equal element for element: bytes, except that any NaN matches any NaN for float dtypes (the
/// device canonicalizes NaN payloads in some conversions).
inline void expectExact(DType dtype, const std::vector<uint8_t> &got,
                        const std::vector<uint8_t> &ref, const std::string &what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  size_t elem = dtypeSize(dtype);
  int64_t n = static_cast<int64_t>(got.size() / elem), bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool same = std::memcmp(got.data() + i * elem, ref.data() + i * elem, elem) == 0;
    if (!same && isFloatDtype(dtype))
      same = std::isnan(valueAt(dtype, got.data(), i)) && std::isnan(valueAt(dtype, ref.data(), i));
    if (!same && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " of " << n << " is "
                    << valueAt(dtype, got.data(), i) << ", expected "
                    << valueAt(dtype, ref.data(), i);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " elements differ";
}

/// Runs a CPU kernel as the reference: directly, or through computeInF32 when any ref is a half
/// type (the CPU kernels take f32/f64 only).
inline Status cpuReference(std::vector<TensorRef> inputs, std::vector<TensorRef> outputs,
                           const cpu::KernelCall &kernel) {
  if (cpu::anyHalf(inputs) || cpu::anyHalf(outputs))
    return cpu::computeInF32(inputs, outputs, kernel);
  return kernel(inputs, outputs);
}

/// A Context on its own stream, with an error flag and a cudaMalloc scratch allocator whose
/// memory is freed when the test ends.
class CudaKernelTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&errors_), sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(errors_, 0, sizeof(int)), cudaSuccess);
    ctx.stream = stream_;
    ctx.errors = errors_;
    ctx.scratch = [this](size_t bytes) -> StatusOr<void *> {
      void *p = nullptr;
      if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess)
        return Status::error("scratch: cudaMalloc of " + std::to_string(bytes) + " bytes failed");
      scratch_.push_back(p);
      return p;
    };
  }
  void TearDown() override {
    if (stream_) {
      EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    }
    for (void *p : scratch_)
      cudaFree(p);
    cudaFree(errors_);
    if (stream_)
      cudaStreamDestroy(stream_);
  }
  /// Waits for the stream and fails the test on an asynchronous error.
  void sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }
  /// The device error flag (after a sync); resets it to 0.
  int takeError() {
    int value = -1;
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(&value, errors_, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemset(errors_, 0, sizeof(int)), cudaSuccess);
    return value;
  }
  size_t scratchCount() const { return scratch_.size(); }

  Context ctx;

private:
  cudaStream_t stream_ = nullptr;
  int *errors_ = nullptr;
  std::vector<void *> scratch_;
};

/// Every float dtype the CUDA kernels take.
inline const std::vector<DType> &floatDtypes() {
  static const std::vector<DType> kDtypes = {DType::f64, DType::f32, DType::bf16, DType::f16};
  return kDtypes;
}

/// Shapes of rank 0 to 5 (odd sizes) plus the flat odd sizes 1, 7 and 1000003.
inline const std::vector<std::vector<int64_t>> &testShapes() {
  static const std::vector<std::vector<int64_t>> kShapes = {
      {}, {1}, {7}, {1000003}, {3, 5}, {2, 3, 4}, {2, 1, 3, 5}, {2, 3, 1, 2, 3}, {0, 3}};
  return kShapes;
}

inline std::string shapeName(const std::vector<int64_t> &shape) { return shapeString(shape); }

} // namespace megac::runtime::cuda::test
