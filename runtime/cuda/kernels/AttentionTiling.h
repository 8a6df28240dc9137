// The fused attention kernels' tiling (Attention.cu, AttentionWmma.cuh, AttentionWmmaGrad.cuh) as
// plain functions of the shapes: causal limits, tile ranges, shared-memory layouts and launch
// sizes. The kernels call them on the device; tests/unit/cuda/AttentionTilingTest.cpp runs them
// on the host against a brute-force mask and the H200's limits. No CUDA headers needed.
#pragma once

#include "runtime/cuda/kernels/LaunchConfig.h"

#include <cstddef>
#include <cstdint>

namespace megac::runtime::cuda::tiling {

// ---- Causal limits ---------------------------------------------------------------------------

/// Keys query i may see: j < attnVisible(i). The s queries are the last s of t positions, so
/// causal hides key j > i + (t - s); clamped to [0, t].
MEGAC_HD constexpr int64_t attnVisible(bool causal, int64_t s, int64_t t, int64_t i) {
  if (!causal)
    return t;
  int64_t v = i + (t - s) + 1;
  return v < 0 ? 0 : (v > t ? t : v);
}

/// End of the keys a block of query rows [q0, q0 + rows) visits (in key tiles from 0): every key
/// at or past it is masked for every row of the block. q0 < s.
MEGAC_HD constexpr int64_t attnKeyEnd(bool causal, int64_t s, int64_t t, int64_t q0, int64_t rows) {
  int64_t last = (s < q0 + rows ? s : q0 + rows) - 1;
  return attnVisible(causal, s, t, last);
}

/// First query a block of keys starting at k0 visits (in query tiles up to s): no earlier query
/// sees key k0 or any later key.
MEGAC_HD constexpr int64_t attnQueryStart(bool causal, int64_t s, int64_t t, int64_t k0) {
  return causal && k0 > t - s ? k0 - (t - s) : 0;
}

// ---- Tile sizes ------------------------------------------------------------------------------

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * 32;
/// SIMT kernels: 4 rows per warp, 16 rows per block, key (or query) tiles of 32, one per lane.
constexpr int kSimtRows = 4;
constexpr int kSimtBQ = kAttnWarps * kSimtRows;
constexpr int kSimtBK = 32;
/// WMMA kernels: 16 rows per warp, 64 rows per block, tiles of 64.
constexpr int kWmmaRowsPerWarp = 16;
constexpr int kWmmaBQ = kAttnWarps * kWmmaRowsPerWarp;
constexpr int kWmmaBK = 64;

// ---- Shared memory ---------------------------------------------------------------------------

/// Floats of dynamic shared memory of each SIMT kernel for head dims padded to D.
constexpr size_t simtForwardFloats(int D) {
  return kSimtBQ * D + kSimtBK * (D + 1) + kSimtBK * D + kAttnWarps * 32;
}
constexpr size_t simtGradQFloats(int D) {
  return 2 * kSimtBQ * D + 2 * kSimtBK * (D + 1) + kAttnWarps * 32;
}
constexpr size_t simtGradKVFloats(int D) {
  return 2 * kSimtBQ * D + 2 * kSimtBK * (D + 1) + 2 * kSimtBK + 2 * kAttnWarps * 32;
}

/// Leading dims (elements) of the WMMA kernels' shared tiles: inputs [.][D + 8] and P/dS
/// [.][BK + 8] in the input type, S/dP [.][BK + 4] and accumulators [.][D + 4] in f32. The
/// padding staggers banks and keeps every 16-row fragment 32-byte aligned.
constexpr int wmmaLdIn(int D) { return D + 8; }
constexpr int kWmmaLdP = kWmmaBK + 8;
constexpr int kWmmaLdS = kWmmaBK + 4;
constexpr int wmmaLdAcc(int D) { return D + 4; }

/// Byte offsets of the WMMA forward's regions: Q, K, V [64][LD], P [64][LP] (input type), then
/// S [64][LS] and O [64][LO] (f32); `end` is the total.
struct WmmaForwardLayout {
  size_t q, k, v, p, s, o, end;
};
constexpr WmmaForwardLayout wmmaForwardLayout(int D, size_t es) {
  WmmaForwardLayout l{};
  l.q = 0;
  l.k = l.q + size_t(kWmmaBQ) * wmmaLdIn(D) * es;
  l.v = l.k + size_t(kWmmaBK) * wmmaLdIn(D) * es;
  l.p = l.v + size_t(kWmmaBK) * wmmaLdIn(D) * es;
  l.s = l.p + size_t(kWmmaBQ) * kWmmaLdP * es;
  l.o = l.s + size_t(kWmmaBQ) * kWmmaLdS * sizeof(float);
  l.end = l.o + size_t(kWmmaBQ) * wmmaLdAcc(D) * sizeof(float);
  return l;
}

/// flashGradQWmma: Q, dO, K, V [64][LD], dS [64][LP] (input type), S, dP [64][LS], dQ [64][LO].
struct WmmaGradQLayout {
  size_t q, dout, k, v, ds, s, dp, acc, end;
};
constexpr WmmaGradQLayout wmmaGradQLayout(int D, size_t es) {
  WmmaGradQLayout l{};
  size_t in = size_t(64) * wmmaLdIn(D) * es;
  l.q = 0;
  l.dout = l.q + in;
  l.k = l.dout + in;
  l.v = l.k + in;
  l.ds = l.v + in;
  l.s = l.ds + size_t(64) * kWmmaLdP * es;
  l.dp = l.s + size_t(64) * kWmmaLdS * sizeof(float);
  l.acc = l.dp + size_t(64) * kWmmaLdS * sizeof(float);
  l.end = l.acc + size_t(64) * wmmaLdAcc(D) * sizeof(float);
  return l;
}

/// flashGradKVWmma: K, V, Q, dO [64][LD], P^T, dS^T [64][LP] (input type), S^T, dP^T [64][LS],
/// dK, dV [64][LO] (f32), lse and delta [64] (f32).
struct WmmaGradKVLayout {
  size_t k, v, q, dout, pt, dst, st, dpt, accK, accV, lse, delta, end;
};
constexpr WmmaGradKVLayout wmmaGradKVLayout(int D, size_t es) {
  WmmaGradKVLayout l{};
  size_t in = size_t(64) * wmmaLdIn(D) * es, f = sizeof(float);
  l.k = 0;
  l.v = l.k + in;
  l.q = l.v + in;
  l.dout = l.q + in;
  l.pt = l.dout + in;
  l.dst = l.pt + size_t(64) * kWmmaLdP * es;
  l.st = l.dst + size_t(64) * kWmmaLdP * es;
  l.dpt = l.st + size_t(64) * kWmmaLdS * f;
  l.accK = l.dpt + size_t(64) * kWmmaLdS * f;
  l.accV = l.accK + size_t(64) * wmmaLdAcc(D) * f;
  l.lse = l.accV + size_t(64) * wmmaLdAcc(D) * f;
  l.delta = l.lse + 64 * f;
  l.end = l.delta + 64 * f;
  return l;
}

constexpr size_t wmmaForwardBytes(int D, size_t es) { return wmmaForwardLayout(D, es).end; }
constexpr size_t wmmaGradQBytes(int D, size_t es) { return wmmaGradQLayout(D, es).end; }
constexpr size_t wmmaGradKVBytes(int D, size_t es) { return wmmaGradKVLayout(D, es).end; }

/// Whether every WMMA fragment pointer of a region at byte offset `base` with leading dim `ld`
/// (elements of `es` bytes) is 32-byte aligned (load/store_matrix_sync's requirement): the
/// kernels address fragments at row offsets that are multiples of 16 and column offsets that are
/// multiples of 16, and ld must be a multiple of 16 bytes.
constexpr bool wmmaFragmentsAligned(size_t base, int ld, size_t es) {
  return base % 32 == 0 && (16 * size_t(ld) * es) % 32 == 0 && (16 * es) % 32 == 0 &&
         (size_t(ld) * es) % 16 == 0;
}

template <int D, size_t es> constexpr bool wmmaLayoutsValid() {
  constexpr WmmaForwardLayout f = wmmaForwardLayout(D, es);
  constexpr WmmaGradQLayout g = wmmaGradQLayout(D, es);
  constexpr WmmaGradKVLayout kv = wmmaGradKVLayout(D, es);
  constexpr int LD = wmmaLdIn(D), LO = wmmaLdAcc(D);
  constexpr size_t F = sizeof(float);
  return wmmaFragmentsAligned(f.q, LD, es) && wmmaFragmentsAligned(f.k, LD, es) &&
         wmmaFragmentsAligned(f.v, LD, es) && wmmaFragmentsAligned(f.p, kWmmaLdP, es) &&
         wmmaFragmentsAligned(f.s, kWmmaLdS, F) && wmmaFragmentsAligned(f.o, LO, F) &&
         wmmaFragmentsAligned(g.q, LD, es) && wmmaFragmentsAligned(g.dout, LD, es) &&
         wmmaFragmentsAligned(g.k, LD, es) && wmmaFragmentsAligned(g.v, LD, es) &&
         wmmaFragmentsAligned(g.ds, kWmmaLdP, es) && wmmaFragmentsAligned(g.s, kWmmaLdS, F) &&
         wmmaFragmentsAligned(g.dp, kWmmaLdS, F) && wmmaFragmentsAligned(g.acc, LO, F) &&
         wmmaFragmentsAligned(kv.k, LD, es) && wmmaFragmentsAligned(kv.v, LD, es) &&
         wmmaFragmentsAligned(kv.q, LD, es) && wmmaFragmentsAligned(kv.dout, LD, es) &&
         wmmaFragmentsAligned(kv.pt, kWmmaLdP, es) && wmmaFragmentsAligned(kv.dst, kWmmaLdP, es) &&
         wmmaFragmentsAligned(kv.st, kWmmaLdS, F) && wmmaFragmentsAligned(kv.dpt, kWmmaLdS, F) &&
         wmmaFragmentsAligned(kv.accK, LO, F) && wmmaFragmentsAligned(kv.accV, LO, F) &&
         kv.lse % 4 == 0;
}

// The WMMA kernels run for bf16/f16 (2 bytes) with head dims padded to 32, 64, 128.
static_assert(wmmaLayoutsValid<32, 2>() && wmmaLayoutsValid<64, 2>() && wmmaLayoutsValid<128, 2>(),
              "a WMMA fragment of the attention kernels is not 32-byte aligned");
static_assert(wmmaForwardBytes(128, 2) <= kMaxDynamicSmemBytes &&
                  wmmaGradQBytes(128, 2) <= kMaxDynamicSmemBytes &&
                  wmmaGradKVBytes(128, 2) <= kMaxDynamicSmemBytes,
              "a WMMA attention kernel needs more shared memory than an H200 block has");
static_assert(simtForwardFloats(128) * 4 <= kMaxDynamicSmemBytes &&
                  simtGradQFloats(128) * 4 <= kMaxDynamicSmemBytes &&
                  simtGradKVFloats(128) * 4 <= kMaxDynamicSmemBytes,
              "a SIMT attention kernel needs more shared memory than an H200 block has");

// ---- Launch sizes ----------------------------------------------------------------------------

enum class AttnKernel { Forward, GradQ, GradKV };

/// The shapes a fused attention launch depends on: q [b,s,h,.], k/v [b,t,hk,.], head dims padded
/// to D (32, 64, 128), element size es; tensor cores for bf16/f16.
struct AttnLaunchShape {
  int64_t b = 1, s = 1, h = 1, t = 1, hk = 1;
  int D = 32;
  size_t es = 4;
  bool tensorCores = false;
};

/// Grid, block and dynamic shared memory of one fused kernel: Forward (and the backward's stats
/// pass) and GradQ take a block per query tile of (head, batch), GradKV a block per key tile of
/// (kv head, batch).
inline LaunchConfig attnLaunch(AttnKernel kernel, const AttnLaunchShape &a) {
  int64_t rows = a.tensorCores ? kWmmaBQ : kSimtBQ;
  LaunchConfig c;
  c.block[0] = kAttnThreads;
  bool byKeys = kernel == AttnKernel::GradKV;
  int64_t count = byKeys ? a.t : a.s;
  c.grid[0] = (count + rows - 1) / rows;
  c.grid[1] = byKeys ? a.hk : a.h;
  c.grid[2] = a.b;
  if (a.tensorCores)
    c.smem = kernel == AttnKernel::Forward ? wmmaForwardBytes(a.D, a.es)
             : kernel == AttnKernel::GradQ ? wmmaGradQBytes(a.D, a.es)
                                           : wmmaGradKVBytes(a.D, a.es);
  else
    c.smem = (kernel == AttnKernel::Forward ? simtForwardFloats(a.D)
              : kernel == AttnKernel::GradQ ? simtGradQFloats(a.D)
                                            : simtGradKVFloats(a.D)) *
             sizeof(float);
  return c;
}

} // namespace megac::runtime::cuda::tiling
