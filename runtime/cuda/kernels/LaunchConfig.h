// Launch sizes of the CUDA kernels as plain host functions, the device limits they must respect,
// and the block reduction's combining pattern: included by the kernels and by the CPU tests
// (tests/unit/cuda/LaunchConfigTest.cpp), so no CUDA headers here.
#pragma once

#include <climits>
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

/// Transpose of the last two dims (DataMovement.cu): 32x32 tiles, grid (column tiles, row tiles,
/// batch up to 65535; the kernel loops over the rest), blocks of 32x8. grid[0] 0 when the tiles
/// do not fit a grid (the gather kernel does those).
inline LaunchConfig transposeLastTwoLaunch(int64_t batch, int64_t rows, int64_t cols,
                                           int tile = 32) {
  LaunchConfig c;
  int64_t rowTiles = (rows + tile - 1) / tile, colTiles = (cols + tile - 1) / tile;
  if (rowTiles > 65535 || colTiles > int64_t(INT32_MAX)) {
    c.grid[0] = 0;
    return c;
  }
  c.grid[0] = colTiles;
  c.grid[1] = rowTiles;
  c.grid[2] = batch < 65535 ? batch : 65535;
  c.block[0] = tile;
  c.block[1] = 8;
  return c;
}

/// The norm gradient's parameter partials (Norm.cu): rows in chunks of at least 32 rows and at
/// most 1024 chunks; grid (ceil(n / 256), chunks) of 256 threads.
struct NormChunks {
  int64_t rowsPerChunk = 32, chunks = 1;
};
inline NormChunks normGradChunks(int64_t rows) {
  NormChunks c;
  c.rowsPerChunk = (rows + 1023) / 1024 > 32 ? (rows + 1023) / 1024 : 32;
  int64_t chunks = (rows + c.rowsPerChunk - 1) / c.rowsPerChunk;
  c.chunks = chunks > 1 ? chunks : 1;
  return c;
}
inline LaunchConfig normParamPartialsLaunch(int64_t rows, int64_t n) {
  LaunchConfig c;
  c.grid[0] = (n + 255) / 256;
  c.grid[1] = normGradChunks(rows).chunks;
  c.block[0] = 256;
  return c;
}

/// The mixture-of-experts grouped GEMM (Moe.cu): grid (m tiles, n tiles, experts), each capped
/// (the kernel loops over the rest), `threads` per block.
inline LaunchConfig groupedGemmLaunch(int64_t experts, int64_t maxM, int64_t n, int tileM,
                                      int tileN, int threads) {
  LaunchConfig c;
  int64_t mTiles = (maxM + tileM - 1) / tileM, nTiles = (n + tileN - 1) / tileN;
  c.grid[0] = mTiles < INT32_MAX ? mTiles : INT32_MAX;
  c.grid[1] = nTiles < 65535 ? nTiles : 65535;
  c.grid[2] = experts < 65535 ? experts : 65535;
  c.block[0] = threads;
  return c;
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
