// Completing and checking a run's configuration (RunConfig.h).
#include "driver/RunConfig.h"

#include "driver/HfSave.h"
#include "driver/HfWeights.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace megac::driver {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

/// Context parallelism (docs/context-parallel.md): it composes with tp, sp, dp, pp, ep and
/// ZeRO; the CUDA attention kernel does not take query/key positions yet.
Status checkContextParallel(const RunConfig &c) {
  const Layout &layout = c.layout();
  if (layout.cp < 1)
    return Status::error("--cp " + str(layout.cp) + " must be >= 1");
  if (layout.cp > 1 && c.exec.backend == runtime::Backend::cuda)
    return Status::error("--cp " + str(layout.cp) +
                         " with --backend cuda is not supported yet (the CUDA attention kernel "
                         "does not take positions); use --backend cpu");
  if (layout.cpRing && layout.cp == 1)
    return Status::error("the ring variant of context parallelism (--cp-comm-type p2p) needs "
                         "--cp C > 1");
  return Status::ok();
}

/// The ranks of the job, dp derived from them, and the layout's combination checked; the
/// model's micro-batch (b*dp) and the micro-batches per step from the batch sizes.
Status finishLayout(RunConfig &c) {
  Layout &layout = c.training.layout;
  bool ranksGiven = c.exec.ranks > 0;
  if (!ranksGiven)
    c.exec.ranks = 1;
  if (int64_t launched = launchedRanks(); launched > 1) {
    if (ranksGiven && c.exec.ranks != launched)
      return Status::error("--ranks " + str(c.exec.ranks) + " differs from the " + str(launched) +
                           " ranks mpirun started");
    c.exec.ranks = launched;
  }
  if (layout.vpp > 1 && layout.pp == 1)
    return Status::error("--vpp " + str(layout.vpp) + " needs pipeline stages (--pp > 1)");
  // zbv runs two chunks per stage in V order (docs/pipeline.md); other vpp values are the
  // schedule library's to refuse.
  if (layout.schedule == schedule::ScheduleKind::zbv && layout.pp > 1 && layout.vpp == 1)
    layout.vpp = 2;
  if (layout.sequenceParallel && layout.tp == 1)
    return Status::error("--sequence-parallel needs tensor parallelism (--tp > 1)");
  int64_t ranks = c.exec.ranks;
  if (Status s = checkContextParallel(c); !s.isOk())
    return s;
  int64_t model = layout.tp * layout.cp * layout.pp; // the ranks of one data-parallel replica
  if (layout.dp == 0) // pure data parallel over whatever tp, cp and pp leave
    layout.dp = ranks % model == 0 ? ranks / model : 1;
  if (layout.ranks() != ranks)
    return Status::error("--ranks " + str(ranks) + " is not tp " + str(layout.tp) +
                         (layout.cp > 1 ? " x cp " + str(layout.cp) : std::string()) + " x pp " +
                         str(layout.pp) + " x dp " + str(layout.dp) + " = " + str(layout.ranks()));
  if (layout.zero < 0 || layout.zero > 3)
    return Status::error("--zero " + str(layout.zero) + " is not a ZeRO stage (0, 1, 2 or 3)");
  if (layout.zero >= 1 && layout.dp == 1)
    return Status::error("--zero " + str(layout.zero) +
                         (layout.zero == 1   ? " shards the optimizer state"
                          : layout.zero == 2 ? " shards the optimizer state and gradients"
                                             : " shards the parameters, gradients and optimizer "
                                               "state") +
                         " over data-parallel ranks; it needs dp > 1");
  // Keeping ZeRO-3's forward gathers for the backward needs both in one function; pipeline
  // chunks run them as two (docs/training-step.md, "Reshard after forward").
  if (!layout.reshardAfterForward && (layout.zero != 3 || layout.pp * layout.vpp > 1))
    return Status::error("--reshard-after-forward off keeps ZeRO-3's gathered parameters from the "
                         "forward to the backward of one function: it needs --zero 3 and one "
                         "pipeline chunk (got --zero " +
                         str(layout.zero) + ", pp " + str(layout.pp) + ", vpp " + str(layout.vpp) +
                         ")");
  if (layout.ep < 1 || layout.dp % layout.ep != 0)
    return Status::error("--ep " + str(layout.ep) + " must divide dp = " + str(layout.dp) +
                         ": expert parallelism is carved out of data parallelism (docs/moe.md)");
  // ZeRO shards over the mesh's dp axis: with ep, the dp / ep ranks holding the same experts.
  if (layout.zero >= 1 && layout.ep > 1 && layout.dp == layout.ep)
    return Status::error("--zero " + str(layout.zero) + " with --ep " + str(layout.ep) +
                         " = dp leaves no ranks to shard the optimizer over (ZeRO-" +
                         str(layout.zero) +
                         " shards over the dp / ep = 1 ranks that hold the same experts); use "
                         "dp > ep");

  // Megatron: --micro-batch is per data-parallel rank; the model sees b*dp rows.
  runtime::train::BatchSplit &split = c.data.batch;
  int64_t b = layout.microBatch, global = b * layout.dp;
  if (c.planOnly && split.globalBatch == 0) // a plan: enough micro-batches to fill the pipe
    split.globalBatch = global * std::max<int64_t>(layout.pp, 1);
  if (split.globalBatch % global != 0 && layout.dp > 1) // dp 1: BatchSplit::validate says it
    return Status::error("--global-batch " + str(split.globalBatch) +
                         " is not a multiple of --micro-batch " + str(b) + " x dp " +
                         str(layout.dp) + " = " + str(global));
  split.microBatch = global;
  layout.microBatches = split.globalBatch / global;
  // The schedule library's rules for the schedule (m >= p for the zero-bubble schedules, zbv's
  // two chunks per stage, interleaving's m % p), before anything compiles.
  if (layout.pp > 1 && layout.microBatches > 0) {
    schedule::ScheduleKind kind = layout.pipelineSchedule();
    std::string why;
    if (!schedule::buildSchedule(
            kind, {layout.pp, layout.vpp, layout.microBatches, schedule::placementOf(kind)}, &why))
      return Status::error(why);
  }
  return Status::ok();
}

/// Checkpoint, trace and output files: what can be checked before the run starts.
Status finishFiles(RunConfig &c) {
  const CheckpointConfig &k = c.checkpoint;
  if (k.loadDir && !std::filesystem::is_directory(*k.loadDir))
    return Status::error("--load: no checkpoint directory " + *k.loadDir);
  if (k.loadDir && c.log.tracePath)
    return Status::error(
        "--trace with --load is not supported yet (the traced steps count from step 1)");
  if (k.loadDir && k.saveGrads)
    return Status::error(
        "--save-grads writes step 1's gradients; a run resumed with --load does not run step 1");
  if (c.log.tracePath) { // traceSteps steps from step 2, clipped to the run; one step: step 1
    int64_t steps = c.lr.totalSteps;
    c.log.traceFirst = steps >= 2 ? 2 : 1;
    c.log.traceLast = std::min(steps, c.log.traceFirst + c.log.traceSteps - 1);
  }
  if (k.saveHf && !c.model.isHf())
    return Status::error("--save-hf writes a transformers folder for --model hf:DIR models; "
                         "give --save-weights FILE for this model");
  if (k.saveHf)
    RETURN_IF_ERROR(checkHfSaveDir(*k.saveHf));
  if (!k.allowMissing.empty() && hfWeightsFile(c.model).empty())
    return Status::error("--allow-missing applies to --model hf:DIR folders with weights "
                         "(model.safetensors or model.safetensors.index.json)");
  for (auto [flag, file] : {std::pair{"save-weights", &k.saveWeights},
                            {"save-grads", &k.saveGrads},
                            {"trace", &c.log.tracePath}})
    if (*file) {
      std::filesystem::path dir = std::filesystem::path(**file).parent_path();
      if (!dir.empty() && !std::filesystem::is_directory(dir))
        return Status::error(std::string("--") + flag + ": no directory " + dir.string());
    }
  return Status::ok();
}

} // namespace

int64_t launchedRanks() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoll(value);
  return 0;
}

Status finishRunConfig(RunConfig &c) {
  if (c.planOnly && c.lr.totalSteps == 0)
    c.lr.totalSteps = 1;
  RETURN_IF_ERROR(c.lr.validate());
  RETURN_IF_ERROR(finishLayout(c));
  RETURN_IF_ERROR(c.data.batch.validate());
  RETURN_IF_ERROR(c.scaler.validate());
  return finishFiles(c);
}

} // namespace megac::driver
