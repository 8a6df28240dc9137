// The arena scratch of context parallelism's ring (plan opcodes RingAttention and
// RingAttentionGrad, docs/context-parallel.md "The ring"): codegen sizes it and makes it the
// instruction's last output, an f64 [words] buffer live for that instruction alone, so the
// plan's memory counts it; the runtime's ring (runtime/exec/RingAttention.cpp) cuts it into the
// regions below. Header-only, so that codegen and the runtime agree without linking each other.
#pragma once

#include <cstdint>

namespace megac::plan {

/// One ring attention call: this rank's queries q [b, s, h, d], a key/value block k [b, t, hk, d]
/// and v [b, t, hk, dv] with i64 key positions [t], in elements of `elementBytes` (f32 or f64);
/// with `mask`, the block's additive key padding mask [b, 1, 1, t] travels with it (and, in the
/// backward, its gradient with dk and dv).
struct RingDims {
  int64_t b = 0, s = 0, h = 0, d = 0, t = 0, hk = 0, dv = 0, elementBytes = 4;
  bool mask = false;
};

/// Byte offsets into the scratch (each region 64-byte aligned) and its size.
struct RingScratchLayout {
  uint64_t blockBytes = 0; // one travelling block: key positions, [mask,] k, v back to back
  uint64_t gradBytes = 0;  // one block's dk, dv[, dmask] back to back (backward)
  uint64_t rows = 0;           // b * h * s query rows: one f64 statistic each
  uint64_t blocks[2] = {};     // the block being computed and the one arriving
  uint64_t gradBlocks[2] = {}; // the dk/dv accumulators held and arriving (backward)
  uint64_t output = 0;         // the recomputed output [b, s, h, dv] (backward)
  uint64_t max = 0, sum = 0;   // running row max and sum of exponentials, f64 [b, h, s]
  uint64_t delta = 0;          // rowsum(dout * out), f64 [b, h, s] (backward)
  uint64_t bytes = 0;          // the whole scratch
  uint64_t words() const { return (bytes + 7) / 8; }
};

inline constexpr uint64_t kRingScratchAlignment = 64;

/// The scratch of the forward (`backward` false) or the backward of one ring attention call.
inline RingScratchLayout ringScratchLayout(const RingDims &d, bool backward) {
  auto align = [](uint64_t n) {
    return (n + kRingScratchAlignment - 1) / kRingScratchAlignment * kRingScratchAlignment;
  };
  auto u = [](int64_t v) { return static_cast<uint64_t>(v < 0 ? 0 : v); };
  const uint64_t e = u(d.elementBytes);
  const uint64_t kBytes = u(d.b) * u(d.t) * u(d.hk) * u(d.d) * e;
  const uint64_t vBytes = u(d.b) * u(d.t) * u(d.hk) * u(d.dv) * e;
  const uint64_t maskBytes = d.mask ? u(d.b) * u(d.t) * e : 0;
  RingScratchLayout l;
  l.blockBytes = 8 * u(d.t) + maskBytes + kBytes + vBytes; // positions first: 8-byte aligned
  l.gradBytes = kBytes + vBytes + maskBytes;
  l.rows = u(d.b) * u(d.h) * u(d.s);
  uint64_t at = 0;
  auto take = [&](uint64_t bytes) {
    uint64_t offset = at;
    at += align(bytes);
    return offset;
  };
  l.blocks[0] = take(l.blockBytes);
  l.blocks[1] = take(l.blockBytes);
  if (backward) {
    l.gradBlocks[0] = take(l.gradBytes);
    l.gradBlocks[1] = take(l.gradBytes);
    l.output = take(u(d.b) * u(d.s) * u(d.h) * u(d.dv) * e);
  }
  l.max = take(8 * l.rows);
  l.sum = take(8 * l.rows);
  if (backward)
    l.delta = take(8 * l.rows);
  l.bytes = at;
  return l;
}

} // namespace megac::plan
