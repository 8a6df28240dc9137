// One rank's part of a pipelined optimizer step (docs/pipeline.md, "Runtime protocol"): runs the
// stage's scheduled forward.c<c>/backward.c<c> steps, moving activations and their gradients
// between stages and keeping stashed residuals per (chunk, micro-batch). No MLIR, no MPI: the
// executor and the communicator are interfaces.
#pragma once

#include "parallel/PipelineSchedule.h"
#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace megac::runtime::train {

/// What one rank runs in one optimizer step.
struct PipelineRun {
  /// This rank's stage's steps, in execution order: the plan's Program.schedule as stored, which
  /// the plan validator checked (every chunk of the stage forward then the whole backward, or
  /// forward, input-gradient and weight-gradient backward, once per micro-batch); the runner does
  /// not check it again.
  std::vector<schedule::ScheduleStep> steps;
  int64_t stages = 1;       // pp
  int64_t chunks = 1;       // stages * virtual stages; chunk c runs on stageOfChunk(c)
  int64_t microBatches = 1; // per optimizer step
  /// Where chunks run (schedule::stageOfChunk): c % stages, or zbv's V.
  schedule::ChunkPlacement placement = schedule::ChunkPlacement::loop;
  /// The pp axis: an index into comm.mesh() (unused when stages == 1). Peers are this rank with
  /// its coordinate on that axis replaced by the peer stage.
  uint32_t ppAxis = 0;
  /// Sets the data inputs of a micro-batch (those of input_ids, labels, loss_normalizer that
  /// executor.inputNames() lists). Called before a step whose function reads an input other
  /// than act.*, grad.act.* and stash.*, when the micro-batch differs from the last one set
  /// (inputs persist in the executor). May be empty when the caller set them once for all.
  std::function<Status(int64_t microBatch)> setDataInputs;
  /// Called after each forward step of the last chunk (its outputs, such as the loss and the MoE
  /// metrics, are readable then). May be empty.
  std::function<Status()> afterLastForward;
  /// Post each step's receives ahead of it (`--overlap on`): before a step computes, the
  /// receives of the next steps (PipelineRunner.cpp's lookahead) are posted through
  /// comm.startRecv, so the transfers progress while it computes; a step then waits for its
  /// own. Off: each step posts its receive when it starts and blocks on it. Sends return at once
  /// either way (the communicator keeps a copy until the send completes) and every one has
  /// completed when the step ends (flushSends): nothing is in flight across a save, an
  /// evaluation or a stop.
  bool postReceivesEarly = false;
  /// While it records: each step on the pipeline lane, named "F3 c1" (schedule::stepLabel) like
  /// the planned timeline. Null: no tracing.
  runtime::Trace *trace = nullptr; // declared in Executor.h
};

/// The run of `rank` in a pipelined plan: its program's schedule, Plan.pipeline's stages,
/// virtual stages and micro-batches, and the mesh axis named "pp". setDataInputs is left empty.
/// Errors if the plan has no pipeline or the rank's program no schedule.
StatusOr<PipelineRun> pipelineRunForRank(const LoadedPlan &plan, int rank);

/// Runs `run.steps` on this rank (docs/pipeline.md): zeroes the "grad." state, then for each
/// step receives the activations (or their gradients) from the neighbouring chunk's stage,
/// runs forward.c<c>, backward.c<c>, backward_input.c<c> or backward_weight.c<c>, sends its
/// activations (gradients) on, and finally waits for every send (flushSends). Returns the sum of
/// the `loss` outputs of the last chunk over the micro-batches (0 on other stages). The caller
/// then runs apply_gradients.
///
/// Ports: act.c<c> (or act.c<c>.<i>, sent in order of i) with tag (m*chunks + c)*2, grad.act.c<c>
/// (.<i>) with tag (m*chunks + c)*2 + 1; stash.c<c>.* outputs of forward.c<c> are kept per
/// micro-batch and set as backward.c<c>'s (backward_input.c<c>'s) inputs. Split backward: what
/// backward_weight.c<c> reads of the stash, of the received grad.act.c<c+1> and of
/// backward_input.c<c>'s stash.c<c>.w<k> outputs is kept per micro-batch from its input-gradient
/// step to its weight-gradient step. Transfers between chunks of one stage stay local. An error
/// names the step: "backward of chunk 3, micro-batch 5: ...".
StatusOr<double> runPipelinedMicroBatches(Executor &executor, comm::Communicator &comm,
                                          const PipelineRun &run);

} // namespace megac::runtime::train
