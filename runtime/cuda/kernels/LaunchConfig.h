// Launch sizes of the CUDA kernels as plain host functions, the device limits they must respect,
// and the block reduction's combining pattern: included by the kernels and by the CPU tests
// (tests/unit/cuda/LaunchConfigTest.cpp), so no CUDA headers here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define MEGAC_HD __host__ __device__ __forceinline__
#else
#define MEGAC_HD inline
#endif

namespace megac::runtime::cuda {

/// The limits of a launch on sm_90 (H200): grid.x < 2^31, grid.y and grid.z <= 65535, at most
/// 1024 threads per block (z <= 64), dynamic shared memory up to 227 KiB with the opt-in
/// (cudaFuncAttributeMaxDynamicSharedMemorySize).
constexpr int64_t kMaxGridX = (int64_t(1) << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;
constexpr int64_t kMaxBlockThreads = 1024;
constexpr int64_t kMaxBlockZ = 64;
constexpr size_t kMaxDynamicSmemBytes = 227 * 1024;

/// One launch's sizes, in 64-bit so that an overflow shows instead of wrapping.
struct LaunchConfig {
  int64_t grid[3] = {1, 1, 1};
  int64_t block[3] = {1, 1, 1};
  size_t smem = 0;
};

/// "" when `c` fits the limits above, else what does not fit.
inline std::string launchLimitError(const LaunchConfig &c) {
  const char *axis[3] = {"x", "y", "z"};
  for (int d = 0; d < 3; ++d) {
    int64_t gmax = d == 0 ? kMaxGridX : kMaxGridYZ;
    if (c.grid[d] < 1 || c.grid[d] > gmax)
      return std::string("grid.") + axis[d] + " " + std::to_string(c.grid[d]) + " outside [1, " +
             std::to_string(gmax) + "]";
  }
  int64_t threads = c.block[0] * c.block[1] * c.block[2];
  if (c.block[0] < 1 || c.block[1] < 1 || c.block[2] < 1 || threads > kMaxBlockThreads ||
      c.block[2] > kMaxBlockZ)
    return "block " + std::to_string(c.block[0]) + "x" + std::to_string(c.block[1]) + "x" +
           std::to_string(c.block[2]) + " outside 1..1024 threads";
  if (c.smem > kMaxDynamicSmemBytes)
    return "dynamic shared memory " + std::to_string(c.smem) + " bytes above " +
           std::to_string(kMaxDynamicSmemBytes);
  return "";
}

namespace detail {

/// Blocks for a grid-stride loop over n elements with `threads` per block (capped: the loop
/// covers the rest).
inline unsigned blocksFor(int64_t n, int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1)
    blocks = 1;
  if (blocks > 65535LL * 32)
    blocks = 65535LL * 32;
  return static_cast<unsigned>(blocks);
}

/// Threads for a block working on one row of n elements: 32..256, a multiple of 32.
inline int rowThreads(int64_t n) {
  if (n > 128)
    return 256;
  if (n > 64)
    return 128;
  if (n > 32)
    return 64;
  return 32;
}

/// Blocks for a grid-stride loop over `rows` rows, one block per row.
inline unsigned rowBlocks(int64_t rows) {
  int64_t b = rows < 1 ? 1 : rows;
  return static_cast<unsigned>(b > (1 << 20) ? (1 << 20) : b);
}

/// The block reduction (BlockReduce.cuh) combines, after each warp's shuffle tree, the warps'
/// partials in warp 0's lanes: lane starts from partial[reducePartialSlot(lane, warps)] and at
/// each xor offset 16, 8, .., 1 combines its partner's value when reduceTakesPartner(...). Lane
/// 0 then holds the combination of every warp's partial exactly once.
MEGAC_HD constexpr int reducePartialSlot(int lane, int warps) { return lane < warps ? lane : 0; }
MEGAC_HD constexpr bool reduceTakesPartner(int lane, int offset, int warps) {
  return (lane ^ offset) < warps && lane < warps;
}

} // namespace detail

} // namespace megac::runtime::cuda
