// The flags of a training run into a driver::RunConfig (RunFlags.h), and the process-level parts
// of a multi-rank launch (threads, terminal; the mpirun launcher is Launcher.cpp).
#include "tools/megac/RunFlags.h"

#include "driver/Compile.h"
#include "driver/HfSave.h"
#include "driver/Job.h"
#include "driver/TrainData.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>
#include <unistd.h>

// OpenBLAS's thread count (libopenblas, linked through the CPU kernels).

namespace megac::cli {

namespace {

bool positive(double v) { return v > 0; }
bool nonNegative(double v) { return v >= 0; }
bool beta(double v) { return v >= 0 && v < 1; }

} // namespace

void RunFlags::declare(Flags &f) {
  driver::RunConfig &c = config;
  Layout &l = c.training.layout;
  f.refuse("--fp8", "--fp8 is not supported yet");
  f.text("--model", spec, "SPEC").text("--data", data, "PATH").values("--data-path", dataPath);
  f.count("--seq", c.data.seq, 1, "S").text("--eval-data", evalData, "PATH");
  f.count("--eval-interval", c.data.evalInterval, 1).count("--eval-iters", c.data.evalIters, 1);
  f.text("--split", split, "A,B,C").count("--steps", c.lr.totalSteps, 1);
  f.choice("--objective", objective, {"causal", "mlm"});
  f.count("--mask-token-id", maskTokenId, 0, "ID", std::numeric_limits<int32_t>::max());
  f.count("--pad-token-id", padTokenId, 0, "ID", std::numeric_limits<int32_t>::max());
  f.count("--global-batch", globalBatch, 1, "B").count("--micro-batch", l.microBatch, 1, "b");
  f.count("--warmup-steps", c.lr.warmupSteps, 0, "W");
  f.number("--lr", lrValue, nonNegative, "a number >= 0");
  f.number("--min-lr", c.lr.minLr, nonNegative, "a number >= 0");
  f.choice("--lr-schedule", lrSchedule, {"constant", "cosine"});
  f.number("--adam-beta1", c.training.beta1, beta, "a number in [0, 1)");
  f.number("--adam-beta2", c.training.beta2, beta, "a number in [0, 1)");
  f.number("--adam-eps", c.training.eps, positive, "a number > 0");
  f.number("--weight-decay", c.training.weightDecay, nonNegative, "a number >= 0");
  f.number("--clip-grad", c.training.clipGrad, nonNegative, "a number >= 0 (0: no clipping)");
  f.number("--moe-aux-loss-coeff", c.training.moeAuxLossCoeff, nonNegative, "a number >= 0");
  f.number("--moe-z-loss-coeff", c.training.moeZLossCoeff, nonNegative, "a number >= 0");
  f.text("--seed", seed, "N").choice("--precision", precision, {"fp32", "fp64", "bf16", "fp16"});
  f.number("--initial-loss-scale", c.scaler.initialScale, positive, "a number > 0");
  f.number("--min-loss-scale", c.scaler.minScale, positive, "a number > 0");
  f.count("--loss-scale-window", c.scaler.growthInterval, 1);
  f.count("--hysteresis", c.scaler.hysteresis, 1);
  f.text("--log-json", c.log.jsonPath, "FILE").count("--log-interval", c.log.interval, 1);
  f.text("--tensorboard-dir", c.log.tensorboardDir, "DIR");
  f.text("--logits", logits, "NAME").text("--save-weights", c.checkpoint.saveWeights, "FILE");
  f.text("--save-hf", c.checkpoint.saveHf, "DIR").text("--hf-shard-size", hfShardSize, "SIZE");
  f.repeated("--allow-missing", c.checkpoint.allowMissing, "NAME");
  f.text("--save-grads", c.checkpoint.saveGrads, "FILE")
      .text("--save", c.checkpoint.saveDir, "DIR");
  f.count("--save-interval", c.checkpoint.saveInterval, 1)
      .text("--load", c.checkpoint.loadDir, "DIR");
  f.flag("--finetune", c.checkpoint.finetune).flag("--no-load-optim", c.checkpoint.noLoadOptim);
  f.flag("--no-load-rng", c.checkpoint.noLoadRng);
  f.text("--trace", c.log.tracePath, "FILE").count("--trace-steps", traceSteps, 1);
  f.count("--ranks", c.exec.ranks, 1).count("--tp", l.tp, 1, "T").count("--pp", l.pp, 1, "P");
  f.count("--dp", l.dp, 1, "D").count("--vpp", l.vpp, 1, "V").count("--zero", zero, 0, "0-3");
  f.count("--ep", l.ep, 1, "E").count("--bucket-size", c.training.bucketSize, 1, "N");
  f.count("--cp", l.cp, 1, "C").choice("--cp-comm-type", cpCommType, {"all_gather", "p2p"});
  f.flag("--sequence-parallel", sequenceParallel);
  f.choice("--reshard-after-forward", reshard, {"on", "off"});
  f.choice("--recompute", recompute, {"none", "selective", "full"});
  // The zero-bubble schedules split the backward (docs/pipeline.md, issue 35).
  f.choice("--schedule", schedule,
           {schedule::scheduleName(schedule::ScheduleKind::oneFOneB),
            schedule::scheduleName(schedule::ScheduleKind::gpipe),
            schedule::scheduleName(schedule::ScheduleKind::zbH1),
            schedule::scheduleName(schedule::ScheduleKind::zbH2),
            schedule::scheduleName(schedule::ScheduleKind::zbv)});
  f.count("--threads", c.exec.threads, 1, "N", 4096);
  f.count("--comm-timeout", c.exec.commTimeoutSeconds, 1, "S", driver::kMaxCommTimeoutSeconds);
  f.flag("--oversubscribe", oversubscribe).text("--backend", backend, "cpu|cuda");
  f.flag("--allow-tf32", c.exec.allowTf32);
  f.choice("--overlap", overlap, {"off", "on"}).text("--emulate-link", emulateLink, "B,L");
}

namespace {

/// --data / --data-path / --split / --seq / --eval-*: the data settings and their relations.
std::string configureData(const Flags &f, RunFlags &r, bool planOnly) {
  driver::DataConfig &d = r.config.data;
  if (r.data && !r.dataPath.empty())
    return "give either --data or --data-path, not both";
  if (!r.data && r.dataPath.empty() && !planOnly)
    return "missing --data TOKENS.npy | PREFIX (or --data-path [W1] PREFIX1 [W2 PREFIX2 ...])";
  if (!r.dataPath.empty()) {
    if (Status s = driver::setDataBlend(d, r.dataPath); !s.isOk())
      return s.message();
  } else {
    driver::setDataPath(d, r.data.value_or(""));
  }
  d.evalPath = r.evalData;
  if (r.split) {
    if (!d.indexed)
      return "--split applies to an indexed dataset (--data PREFIX of PREFIX.bin/.idx)";
    if (Status s = driver::setDataSplit(d, *r.split); !s.isOk())
      return s.message();
  }
  bool validationSplit = d.split && (*d.split)[1] > 0, testSplit = d.split && (*d.split)[2] > 0;
  if (d.evalPath && !f.given("--eval-interval"))
    return "--eval-data needs --eval-interval N (validate every N steps)";
  if (!d.evalPath && !validationSplit &&
      (f.given("--eval-interval") || (f.given("--eval-iters") && !testSplit)))
    return "--eval-interval and --eval-iters need --eval-data (the validation tokens) or a "
           "--split with a validation part (--eval-iters also applies to a test part)";
  if (f.given("--objective"))
    d.objective = r.objective;
  if (f.given("--mask-token-id")) {
    if (d.objective != "mlm")
      return "--mask-token-id applies to masked-LM training (--objective mlm)";
    d.maskTokenId = r.maskTokenId;
  }
  if (f.given("--pad-token-id")) {
    if (d.objective == "mlm")
      return "--pad-token-id applies to causal LM training (not --objective mlm)";
    d.padTokenId = r.padTokenId;
  }
  if (f.given("--seq") && !d.indexed)
    return "--seq applies to an indexed dataset (--data PREFIX of PREFIX.bin/.idx)";
  if (d.indexed && !f.given("--seq") && !r.spec)
    return "--data " + d.path + " (an indexed dataset) with a model file needs --seq S";
  return {};
}

/// --overlap (the latency-hiding pass) and --emulate-link (the CPU communicator's link model).
std::string configureOverlap(RunFlags &r) {
  r.config.training.overlap = r.overlap == "on";
  if (!r.emulateLink)
    return {};
  const std::string &text = *r.emulateLink;
  size_t comma = text.find(',');
  char *end = nullptr;
  double bandwidth = 0, latency = -1;
  if (comma != std::string::npos) {
    std::string b = text.substr(0, comma), l = text.substr(comma + 1);
    bandwidth = std::strtod(b.c_str(), &end);
    bool bOk = !b.empty() && *end == '\0';
    latency = std::strtod(l.c_str(), &end);
    if (!bOk || l.empty() || *end != '\0')
      bandwidth = 0;
  }
  if (!(bandwidth > 0) || !(latency >= 0) || !std::isfinite(bandwidth) || !std::isfinite(latency))
    return "--emulate-link: '" + text +
           "' is not BYTES_PER_S,LATENCY_S (a bandwidth > 0 and a latency >= 0: 2e8,2e-5)";
  r.config.exec.emulateLink = {bandwidth, latency};
  return {};
}

/// The layout flags, the backend, precision and loss scaling.
std::string configureStep(const Flags &f, RunFlags &r, bool planOnly) {
  driver::RunConfig &c = r.config;
  Layout &l = c.training.layout;
  // Plan mode (`megac plan`, `megac compile --ranks`) runs nothing: no device query for the
  // default backend.
  if (planOnly && !r.backend) {
    c.exec.backend = driver::Backend::cpu;
  } else {
    StatusOr<driver::Backend> backend = driver::resolveBackend(r.backend);
    if (!backend.isOk())
      return backend.status().message();
    c.exec.backend = *backend;
  }
  if (r.zero > 3)
    return "--zero: '" + std::to_string(r.zero) + "' is not 0, 1, 2 or 3";
  l.zero = int(r.zero);
  l.reshardAfterForward = r.reshard == "on";
  l.sequenceParallel = r.sequenceParallel;
  l.cpRing = r.cpCommType == "p2p"; // Megatron's cp_comm_type: the ring's point-to-point
  if (f.given("--cp-comm-type") && l.cp == 1)
    return "--cp-comm-type applies with --cp C > 1 (context parallelism)";
  l.recompute = *parseRecompute(r.recompute);
  l.schedule = *schedule::parseScheduleKind(r.schedule);
  if (!f.given("--dp"))
    l.dp = 0; // the ranks left by tp and pp
  if (r.hfShardSize && !driver::parseByteSize(*r.hfShardSize, c.checkpoint.hfShardBytes))
    return "--hf-shard-size: '" + *r.hfShardSize +
           "' is not a size (bytes, or a number with KB, MB, GB, KiB, MiB or GiB: 5GB)";
  if (r.hfShardSize && !c.checkpoint.saveHf)
    return "--hf-shard-size applies with --save-hf DIR";
  if (r.seed) {
    std::optional<uint64_t> value = driver::parseSeed(*r.seed);
    if (!value)
      return "--seed: '" + *r.seed + "' is not a non-negative integer";
    c.seed = *value;
  }
  l.precision = *parsePrecision(r.precision);
  for (const char *name :
       {"--initial-loss-scale", "--loss-scale-window", "--hysteresis", "--min-loss-scale"})
    if (f.given(name) && l.precision != Precision::fp16)
      return "loss scaling (--initial-loss-scale, --loss-scale-window, --hysteresis, "
             "--min-loss-scale) applies to --precision fp16";
  return {};
}

} // namespace

std::string RunFlags::configure(const Flags &f, bool planOnly) {
  driver::RunConfig &c = config;
  c.planOnly = planOnly;
  if (f.positional().size() > 1)
    return "give one model file";
  std::optional<std::string> file;
  if (!f.positional().empty())
    file = f.positional().front();
  if (spec.has_value() == file.has_value())
    return "give either --model SPEC or a model file (.onnx, .mlir)";
  StatusOr<driver::ModelSource> model = driver::ModelSource::parse(spec, file);
  if (!model.isOk())
    return model.status().message();
  c.model = std::move(model).value();
  if (std::string e = configureData(f, *this, planOnly); !e.empty())
    return e;
  for (const char *required : {"--steps", "--global-batch", "--micro-batch", "--lr"})
    if (!planOnly && !f.given(required))
      return std::string("missing ") + required;
  c.data.batch.globalBatch = globalBatch;
  c.lr.lr = lrValue;
  c.lr.decay = *driver::parseLrDecay(lrSchedule);
  if (c.lr.decay == driver::LrDecay::constant && f.given("--min-lr"))
    return "--min-lr applies to --lr-schedule cosine";
  if (std::string e = configureOverlap(*this); !e.empty())
    return e;
  if (std::string e = configureStep(f, *this, planOnly); !e.empty())
    return e;
  c.training.logits = logits.value_or("");
  if (c.checkpoint.saveInterval > 0 && !c.checkpoint.saveDir)
    return "--save-interval needs --save DIR";
  for (const char *flag : {"--finetune", "--no-load-optim", "--no-load-rng"})
    if (f.given(flag) && !c.checkpoint.loadDir)
      return std::string(flag) + " needs --load DIR";
  if (f.given("--trace-steps") && !c.log.tracePath)
    return "--trace-steps needs --trace FILE.json";
  c.log.traceSteps = traceSteps;
  if (Status s = driver::finishRunConfig(c); !s.isOk())
    return s.message();
  return {};
}

bool stdoutIsTerminal() {
  // Under mpirun a rank's stdout is the launcher's pipe or pty: `--ranks` passes on whether the
  // launching process's stdout is a terminal.
  if (const char *given = std::getenv("MEGAC_TRAIN_STDOUT_IS_TTY"))
    return std::strcmp(given, "1") == 0;
  return driver::launchedRanks() <= 1 && isatty(fileno(stdout));
}

void setThreads(int64_t threads, int64_t ranks) {
  if (threads == 0) {
    int64_t local = ranks;
    if (const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      local = std::max<int64_t>(1, std::atoll(value));
    threads = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / local);
  }
  driver::setKernelThreads(int(threads));
}

} // namespace megac::cli
