// Measures what the planner's "cpu" preset (planner/Hardware.cpp) needs: single-core fp32 GEMM
// FLOP/s through the BLAS the CPU runtime links (OpenBLAS, one thread = one rank per core) over
// square and skinny shapes, and one core's memory bandwidth (STREAM-style copy and triad).
// Prints numbers; never fails on time.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

extern "C" void openblas_set_num_threads(int threads);

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best-of-N seconds of one sgemm C[m,n] = A[m,k] * B[k,n].
double gemmSeconds(int m, int n, int k) {
  std::vector<float> a(size_t(m) * k, 1.0f), b(size_t(k) * n, 0.5f), c(size_t(m) * n);
  double best = 1e30;
  double budget = 0.5, start = now();
  for (int rep = 0; rep < 200 && (rep < 3 || now() - start < budget); ++rep) {
    double t0 = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
    best = std::min(best, now() - t0);
  }
  return best;
}

} // namespace

int main() {
  openblas_set_num_threads(1);
  std::printf("# sgemm, 1 thread: m n k  GFLOP/s\n");
  struct Shape {
    int m, n, k;
  } shapes[] = {{64, 64, 64},       {128, 128, 128},    {256, 256, 256},  {512, 512, 512},
                {1024, 1024, 1024}, {2048, 2048, 2048}, {1024, 64, 1024}, {64, 1024, 1024},
                {1024, 1024, 64},   {4096, 256, 256},   {256, 768, 3072}, {256, 3072, 768}};
  double peak = 0;
  for (const Shape &s : shapes) {
    double t = gemmSeconds(s.m, s.n, s.k);
    double flops = 2.0 * s.m * s.n * s.k / t;
    peak = std::max(peak, flops);
    std::printf("gemm %5d %5d %5d  %8.2f\n", s.m, s.n, s.k, flops / 1e9);
  }
  std::printf("gemm_peak_gflops %.2f\n", peak / 1e9);

  // One core's bandwidth on arrays far beyond the caches (3 x 64 MiB).
  size_t n = size_t(16) << 20;
  std::vector<float> x(n, 1.0f), y(n, 2.0f), z(n, 0.0f);
  double bestCopy = 1e30, bestTriad = 1e30;
  for (int rep = 0; rep < 10; ++rep) {
    double t0 = now();
    std::copy(x.begin(), x.end(), z.begin());
    bestCopy = std::min(bestCopy, now() - t0);
    t0 = now();
    for (size_t i = 0; i < n; ++i)
      z[i] = x[i] + 3.0f * y[i];
    bestTriad = std::min(bestTriad, now() - t0);
  }
  // The CPU runtime's elementwise kernels map scalar std::exp / std::erf (runtime/cpu): their
  // rate, as bytes read + written per second, says whether they are memory-bound here.
  double bestExp = 1e30, bestErf = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    double t0 = now();
    for (size_t i = 0; i < n; ++i)
      z[i] = std::exp(x[i] * 1e-3f * float(i & 1023));
    bestExp = std::min(bestExp, now() - t0);
    t0 = now();
    for (size_t i = 0; i < n; ++i)
      y[i] = std::erf(z[i] * 1e-3f);
    bestErf = std::min(bestErf, now() - t0);
  }
  std::printf("exp_map_gbs %.2f\n", 2.0 * n * sizeof(float) / bestExp / 1e9);
  std::printf("erf_map_gbs %.2f\n", 2.0 * n * sizeof(float) / bestErf / 1e9);
  std::printf("copy_gbs %.2f\n", 2.0 * n * sizeof(float) / bestCopy / 1e9);
  std::printf("triad_gbs %.2f\n", 3.0 * n * sizeof(float) / bestTriad / 1e9);
  std::printf("checksum %g\n", double(z[n / 2]) + double(y[n / 3]));
  return 0;
}
