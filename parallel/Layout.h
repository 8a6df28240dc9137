// The one Layout of a training step (how it is split over the mesh <pp, dp, tp>, micro-batched,
// recomputed and in which precision it computes), shared by the planner (a candidate), the passes
// (what to partition) and the driver (a run's configuration). MLIR-free.
#pragma once

#include "parallel/PipelineSchedule.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace megac {

/// The training precision (mega-training-precision): fp32; fp64 everywhere; bf16/fp16 mixed
/// precision with f32 master weights (fp16 with dynamic loss scaling).
enum class Precision { fp32, fp64, bf16, fp16 };

/// Activation recompute (docs/pipeline.md): none; selective = recompute attention outputs in
/// the backward pass (Megatron's core-attention recompute); full = keep only each chunk's inputs.
enum class Recompute { none, selective, full };

/// "fp32", "fp64", "bf16", "fp16".
const char *precisionName(Precision precision);
/// The precision precisionName names; nullopt for any other text.
std::optional<Precision> parsePrecision(std::string_view name);
/// "none", "selective", "full".
const char *recomputeName(Recompute recompute);
/// The policy recomputeName names; nullopt for any other text.
std::optional<Recompute> parseRecompute(std::string_view name);

/// How one training step runs on the mesh <pp, dp, cp, tp> (docs/pipeline.md). Degrees of 1 mean
/// no split; their product is the number of ranks. The planner searches these fields, the
/// passes partition by them, and a run is configured with them.
struct Layout {
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t dp = 1;
  /// Virtual pipeline stages (model chunks) per pipeline rank: interleaved 1F1B when > 1.
  int64_t vpp = 1;
  /// Samples per micro-batch on each data-parallel rank (Megatron's --micro-batch-size).
  int64_t microBatch = 1;
  /// Megatron's sequence parallelism: norms and residuals sharded on the sequence dim over tp.
  bool sequenceParallel = false;
  /// 0: gradients all-reduced over dp; 1: Megatron's distributed optimizer (ZeRO-1); 2: gradients
  /// reduce-scattered too (ZeRO-2); 3: parameters sharded as well (ZeRO-3 / FSDP). Issue 31.
  int zero = 0;
  Recompute recompute = Recompute::none;
  Precision precision = Precision::fp32;
  /// Micro-batches per optimizer step (per data-parallel rank): the pipeline schedule's m.
  int64_t microBatches = 1;
  /// The requested pipeline schedule (1f1b or gpipe); pipelineSchedule() is what runs.
  schedule::ScheduleKind schedule = schedule::ScheduleKind::oneFOneB;
  /// Expert parallelism (docs/moe.md), carved out of dp as Megatron does: ep divides dp; the
  /// experts of each MoE layer are split over ep ranks, the tokens stay split over all dp.
  /// (Last, so that positional initializers of the fields above stay valid.)
  int64_t ep = 1;
  /// Context parallelism (issue 32, Megatron's --context-parallel-size): each sequence split over
  /// cp ranks, its own mesh axis (world = tp * cp * pp * dp; dp excludes cp); the gradient
  /// reduction runs over dp x cp.
  int64_t cp = 1;
  /// How cp exchanges keys and values (docs/context-parallel.md): false, all-gathered over cp
  /// (Megatron's cp_comm_type "all_gather"); true, blocks passed around the cp ring point to
  /// point (its "p2p", `--cp-comm-type p2p`).
  bool cpRing = false;
  /// ZeRO-3 (issue 31): each parameter is all-gathered again before its backward use (true, the
  /// default: FSDP's reshard_after_forward), or the forward's gathered copy is kept for the
  /// backward (false: one gather fewer per layer, every gathered parameter of the step live from
  /// its forward use to its backward; `--reshard-after-forward off`). Only a step whose forward
  /// and backward run in one function has the choice (pp = vpp = 1; pipeline chunks gather in
  /// each function), so false needs zero 3 and pp = vpp = 1.
  bool reshardAfterForward = true;

  int64_t ranks() const { return tp * cp * pp * dp; }
  bool partitioned() const { return ranks() > 1; }
  /// The schedule the pipeline runs: interleaved 1F1B for 1f1b with vpp > 1.
  schedule::ScheduleKind pipelineSchedule() const {
    return schedule::resolveSchedule(schedule, vpp);
  }
  /// "tp 2, pp 1, dp 2, vpp 1, zero 1, sequence parallel": how checkpoints record a layout.
  std::string describe() const;
};

} // namespace megac
