// Helpers shared by the runtime tests: building host tensors, seeded random data, closeness.
#pragma once

#include "support/HostTensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

namespace megac::runtime::testing {

/// A tensor of `dtype` holding `values` (C++ type T must match the dtype's storage).
template <typename T>
HostTensor makeTensor(DType dtype, std::vector<int64_t> shape, const std::vector<T> &values) {
  HostTensor t = HostTensor::zeros(dtype, std::move(shape));
  EXPECT_EQ(t.bytes.size(), values.size() * sizeof(T)) << "test bug: value count vs shape";
  if (t.bytes.size() == values.size() * sizeof(T) && !values.empty())
    std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline HostTensor f32(std::vector<int64_t> shape, const std::vector<float> &v) {
  return makeTensor(DType::f32, std::move(shape), v);
}
inline HostTensor f64(std::vector<int64_t> shape, const std::vector<double> &v) {
  return makeTensor(DType::f64, std::move(shape), v);
}
inline HostTensor i64(std::vector<int64_t> shape, const std::vector<int64_t> &v) {
  return makeTensor(DType::i64, std::move(shape), v);
}
inline HostTensor i32(std::vector<int64_t> shape, const std::vector<int32_t> &v) {
  return makeTensor(DType::i32, std::move(shape), v);
}
inline HostTensor i1(std::vector<int64_t> shape, const std::vector<uint8_t> &v) {
  return makeTensor(DType::i1, std::move(shape), v);
}

/// Seeded uniform values in [lo, hi).
template <typename T = float>
std::vector<T> randomValues(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<T> v(n);
  for (T &x : v)
    x = static_cast<T>(dist(gen));
  return v;
}

template <typename T> std::vector<T> valuesOf(const HostTensor &t) {
  std::vector<T> v(t.bytes.size() / sizeof(T));
  if (!v.empty())
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

/// |got - want| <= atol + rtol * |want| elementwise (NaN only matches NaN).
template <typename A, typename B>
void expectClose(const std::vector<A> &got, const std::vector<B> &want, double rtol, double atol,
                 const std::string &what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double g = static_cast<double>(got[i]), w = static_cast<double>(want[i]);
    bool ok = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w) ||
              std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && reported++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w << " (rtol "
                    << rtol << ", atol " << atol << ")";
  }
}

/// A fresh directory under the test's temp dir, removed at destruction.
class TempDir {
public:
  TempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "megac-runtime-test-XXXXXX").string();
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    char *made = mkdtemp(buf.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = made ? made : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty())
      std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string &name) const { return path_ + "/" + name; }
  const std::string &path() const { return path_; }

private:
  std::string path_;
};

} // namespace megac::runtime::testing
