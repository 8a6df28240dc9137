// The block kernels of ring attention (context parallelism's p2p variant,
// docs/context-parallel.md "The ring"): this rank's queries against one key/value block at a
// time, merged by online softmax (running row max and sum, as flash attention), and the
// backward block that accumulates dq and the block's dk and dv. No communication here: the
// ring itself (runtime/exec/RingAttention.cpp) passes the blocks around the cp ranks.
//
// Masking is causal by global position, as Attention's `positions`: query i sees key j iff
// keyPositions[j] <= queryPositions[i], plus an optional additive key padding mask that travels
// with the block. Each block is cut in two halves of queries and of keys
// (the 2·cp load-balanced chunks); a half pair wholly in the future is skipped, one wholly in
// the past needs no mask.
#pragma once

#include "runtime/cpu/Kernels.h"

#include <span>
#include <vector>

namespace megac::runtime::cpu {

/// Per (batch, head, query row) [b, h, s]: the running max of the scaled scores and the sum of
/// their exponentials (relative to that max); max is -inf while a row has seen no key. The rows
/// are the plan's ring scratch (runtime/plan/RingScratch.h) or, left empty, storage of its own.
struct RingRowStats {
  std::span<double> max, sum;

  RingRowStats() = default;
  RingRowStats(std::span<double> maxRows, std::span<double> sumRows) : max(maxRows), sum(sumRows) {}
  RingRowStats(const RingRowStats &) = delete; // the spans may view storage_
  RingRowStats &operator=(const RingRowStats &) = delete;
  RingRowStats(RingRowStats &&) = default; // a moved vector keeps its storage
  RingRowStats &operator=(RingRowStats &&) = default;
  /// Backs max and sum with storage of its own for `rows` rows.
  void own(size_t rows) {
    storage_.assign(2 * rows, 0.0);
    max = {storage_.data(), rows};
    sum = {storage_.data() + rows, rows};
  }

private:
  std::vector<double> storage_;
};

/// Starts a forward ring: out [b, s, h, dv] zeroed, stats for q [b, s, h, d] (their own storage
/// when they have none; otherwise they must hold b·h·s rows).
Status ringAttentionBegin(const TensorRef &q, const TensorRef &out, RingRowStats &stats);
/// Adds one key/value block (k [b, t, hk, d], v [b, t, hk, dv], keyPositions i64 [t]) to the
/// unnormalized out and the stats. f32 or f64. `keyMask` (q's dtype, [b or 1, 1, 1, t]): the
/// block's additive key padding mask, added to every query's scores of its keys (-inf: masked).
Status ringAttentionBlock(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                          const TensorRef &queryPositions, const TensorRef &keyPositions,
                          double scale, const TensorRef &out, RingRowStats &stats,
                          const TensorRef *keyMask = nullptr);
/// Ends the forward ring: out /= sum (a row that saw no key is 0, as Attention's).
Status ringAttentionEnd(const TensorRef &out, const RingRowStats &stats);

/// delta [b, h, s] = sum over dv of dout * out (the softmax backward's row term), in double;
/// delta holds b·h·s rows.
Status ringAttentionDelta(const TensorRef &dout, const TensorRef &out, std::span<double> delta);
/// One block of the backward with the forward's final stats and delta: dq [b, s, h, d] +=, and
/// the block's dk [b, t, hk, d], dv [b, t, hk, dv] += (GQA: summed over the query heads of a
/// kv head). The caller zeroes dq once and each block's dk and dv before its first visit. With
/// the forward's `keyMask`, `dKeyMask` (its shape) += the gradient of the added scores summed
/// over heads and queries (and batch where the mask broadcast along it).
Status ringAttentionGradBlock(const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                              const TensorRef &v, const TensorRef &queryPositions,
                              const TensorRef &keyPositions, double scale,
                              const RingRowStats &stats, std::span<const double> delta,
                              const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                              const TensorRef *keyMask = nullptr,
                              const TensorRef *dKeyMask = nullptr);

} // namespace megac::runtime::cpu
