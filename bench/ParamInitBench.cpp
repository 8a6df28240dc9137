// Seconds to initialise parameters with runtime/init's fillShard on 1, 2, 4, ... threads, and
// whether every thread count filled the same bits. Prints numbers; never fails on time.
//
//   bench-param-init [million-elements]   (default 64: a 1.3B model is ~1300)
#include "runtime/init/ParamInit.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using namespace megac::init;

int main(int argc, char **argv) {
  int64_t millions = argc > 1 ? std::atoll(argv[1]) : 64;
  if (millions < 1) {
    std::fprintf(stderr, "usage: bench-param-init [million-elements >= 1]\n");
    return 2;
  }
  // One (rows, 2048) weight, as a GPT's (4C, C) MLP matrix at C = 2048 repeated.
  const int64_t cols = 2048, rows = millions * 1000000 / cols;
  std::vector<int64_t> shape{rows, cols}, zero{0, 0};
  InitSpec spec{InitKind::normal, 0.02};
  std::vector<float> reference(size_t(rows * cols)), out(reference.size());
  int hardware = std::max(1, int(std::thread::hardware_concurrency()));
  std::printf("fillShard of a (%lld, %lld) normal weight (%.1f M elements), %d hardware threads\n",
              (long long)rows, (long long)cols, rows * cols / 1e6, hardware);
  double serial = 0;
  std::vector<int> counts;
  for (int t = 1; t < hardware; t *= 2)
    counts.push_back(t);
  counts.push_back(hardware);
  for (int threads : counts) {
    std::vector<float> &dst = threads == 1 ? reference : out;
    auto start = std::chrono::steady_clock::now();
    if (!fillShard(spec, 1234, "h0.mlp.fc.weight", shape, zero, shape, dst, threads)) {
      std::fprintf(stderr, "fillShard refused the box\n");
      return 1;
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (threads == 1)
      serial = seconds;
    bool same = std::memcmp(dst.data(), reference.data(), reference.size() * sizeof(float)) == 0;
    std::printf("threads %3d: %8.3f s  %7.1f M elements/s  speed-up %5.2fx  %s\n", threads, seconds,
                rows * cols / seconds / 1e6, serial / seconds,
                same ? "same bits as 1 thread" : "DIFFERENT BITS FROM 1 THREAD");
    if (!same)
      return 1;
  }
  return 0;
}
