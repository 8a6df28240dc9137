// Parsing and validating the options of `megac train` (TrainOptions.h).
#include "tools/megac/TrainOptions.h"

#include "tools/megac/BackendOption.h"
#include "tools/megac/Compile.h"
#include "tools/megac/TrainData.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <unistd.h>

// OpenBLAS's thread count (libopenblas, linked through the CPU kernels).
extern "C" void openblas_set_num_threads(int threads);

namespace megac::cli {

namespace train = runtime::train;

std::optional<double> parseNumber(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != 0 || !std::isfinite(value))
    return std::nullopt;
  return value;
}

namespace {

/// Reads the number option `name` into `out` (keeping its default when absent) and checks
/// `valid`; returns an error message or empty.
template <typename Valid>
std::string numberOption(const Args &args, const char *name, double &out, Valid valid,
                         const char *expected) {
  std::optional<std::string> text = args.get(name);
  if (!text)
    return {};
  std::optional<double> value = parseNumber(*text);
  if (!value || !valid(*value))
    return std::string("--") + name + ": '" + *text + "' is not " + expected;
  out = *value;
  return {};
}

} // namespace

std::string countOption(const Args &args, const char *name, int64_t min, int64_t &out,
                        bool required) {
  std::optional<std::string> text = args.get(name);
  if (!text)
    return required ? std::string("missing --") + name : std::string();
  std::optional<uint64_t> value = parseSeed(*text);
  if (!value || *value > uint64_t(INT64_MAX) || int64_t(*value) < min)
    return std::string("--") + name + ": '" + *text +
           "' is not an integer >= " + std::to_string(min);
  out = int64_t(*value);
  return {};
}

int64_t launchedRanks() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoll(value);
  return 0;
}

namespace {

/// --tp/--pp/--dp/--vpp, --sequence-parallel, --zero, --recompute, --schedule into
/// c.training.layout, and the per-rank micro-batch into the model's global micro-batch.
std::string parseLayout(const Args &args, TrainConfig &c) {
  Layout &layout = c.training.layout;
  int64_t zero = 0, dp = 0;
  for (std::string e :
       {countOption(args, "ranks", 1, c.ranks, false), countOption(args, "tp", 1, layout.tp, false),
        countOption(args, "pp", 1, layout.pp, false), countOption(args, "dp", 1, dp, false),
        countOption(args, "vpp", 1, layout.vpp, false), countOption(args, "zero", 0, zero, false),
        countOption(args, "threads", 1, c.threads, false),
        countOption(args, "comm-timeout", 1, c.commTimeout, false)})
    if (!e.empty())
      return e;
  if (int64_t launched = launchedRanks(); launched > 1) {
    if (args.get("ranks") && c.ranks != launched)
      return "--ranks " + std::to_string(c.ranks) + " differs from the " +
             std::to_string(launched) + " ranks mpirun started";
    c.ranks = launched;
  }
  if (zero > 1)
    return "--zero: '" + *args.get("zero") + "' is not 0 or 1";
  // Plan mode (`megac plan`, `megac compile --ranks`) runs nothing: no device query for the
  // default backend.
  if (args.has("plan-only") && !args.get("backend"))
    c.backend = runtime::Backend::cpu;
  else if (std::string e = parseBackendOption(args, c.backend, c.allowTf32); !e.empty())
    return e;
  layout.zero = int(zero);
  layout.sequenceParallel = args.has("sequence-parallel");
  std::string recompute = args.get("recompute").value_or("none");
  if (recompute == "none")
    layout.recompute = Recompute::none;
  else if (recompute == "selective")
    layout.recompute = Recompute::selective;
  else if (recompute == "full")
    layout.recompute = Recompute::full;
  else
    return "--recompute: '" + recompute + "' is not none, selective or full";
  std::string scheduleName = args.get("schedule").value_or("1f1b");
  std::optional<schedule::ScheduleKind> kind = schedule::parseScheduleKind(scheduleName);
  if (!kind || *kind == schedule::ScheduleKind::interleaved)
    return "--schedule: '" + scheduleName + "' is not 1f1b or gpipe";
  layout.schedule = *kind;
  if (layout.vpp > 1 && layout.pp == 1)
    return "--vpp " + std::to_string(layout.vpp) + " needs pipeline stages (--pp > 1)";
  if (layout.sequenceParallel && layout.tp == 1)
    return "--sequence-parallel needs tensor parallelism (--tp > 1)";
  if (dp == 0) // pure data parallel over whatever tp and pp leave
    dp = c.ranks % (layout.tp * layout.pp) == 0 ? c.ranks / (layout.tp * layout.pp) : 1;
  layout.dp = dp;
  if (layout.ranks() != c.ranks)
    return "--ranks " + std::to_string(c.ranks) + " is not tp " + std::to_string(layout.tp) +
           " x pp " + std::to_string(layout.pp) + " x dp " + std::to_string(layout.dp) + " = " +
           std::to_string(layout.ranks());
  if (layout.zero == 1 && layout.dp == 1)
    return "--zero 1 shards the optimizer state over data-parallel ranks; it needs dp > 1";
  // Megatron: --micro-batch is per data-parallel rank; the model sees b*dp rows.
  int64_t b = c.split.microBatch, global = b * layout.dp;
  if (c.planOnly && !args.get("global-batch")) // a plan: enough micro-batches to fill the pipe
    c.split.globalBatch = global * std::max<int64_t>(layout.pp, 1);
  if (c.split.globalBatch % global != 0 && layout.dp > 1) // dp 1: BatchSplit::validate says it
    return "--global-batch " + std::to_string(c.split.globalBatch) +
           " is not a multiple of --micro-batch " + std::to_string(b) + " x dp " +
           std::to_string(layout.dp) + " = " + std::to_string(global);
  c.rankMicroBatch = b;
  c.split.microBatch = global;
  layout.microBatches = c.split.globalBatch / global;
  return {};
}

/// --trace FILE and --trace-steps N: N steps (default 2) from step 2, the first step (which
/// warms caches and allocates) left out, clipped to the run; a one-step run traces step 1.
std::string parseTrace(const Args &args, TrainConfig &c) {
  int64_t count = 2;
  if (std::string e = countOption(args, "trace-steps", 1, count, false); !e.empty())
    return e;
  c.tracePath = args.get("trace");
  if (!c.tracePath) {
    if (args.get("trace-steps"))
      return "--trace-steps needs --trace FILE.json";
    return {};
  }
  int64_t steps = c.schedule.totalSteps;
  c.traceFirst = steps >= 2 ? 2 : 1;
  c.traceLast = std::min(steps, c.traceFirst + count - 1);
  return {};
}

} // namespace

std::string parseTrainArgs(const Args &args, TrainConfig &c) {
  for (const char *unsupported : {"cp", "ep", "fp8"})
    if (args.has(unsupported) || args.get(unsupported))
      return std::string("--") + unsupported + " is not supported yet";
  if (args.positional().size() > 1)
    return "give one model file";
  if (!args.positional().empty())
    c.file = args.positional().front();
  c.spec = args.get("model");
  if (c.spec.has_value() == c.file.has_value())
    return "give either --model SPEC or a model file (.onnx, .mlir)";
  c.planOnly = args.has("plan-only");
  c.explain = args.has("explain");
  c.explainJson = args.has("json");
  c.planOut = args.get("plan-out");
  if (std::string e = parseDataArgs(args, c); !e.empty())
    return e;
  auto positive = [](double v) { return v > 0; };
  auto nonNegative = [](double v) { return v >= 0; };
  auto beta = [](double v) { return v >= 0 && v < 1; };
  double lr = -1;
  for (std::string e :
       {countOption(args, "steps", 1, c.schedule.totalSteps, !c.planOnly),
        countOption(args, "global-batch", 1, c.split.globalBatch, !c.planOnly),
        countOption(args, "micro-batch", 1, c.split.microBatch, !c.planOnly),
        countOption(args, "warmup-steps", 0, c.schedule.warmupSteps, false),
        numberOption(args, "lr", lr, nonNegative, "a number >= 0"),
        numberOption(args, "min-lr", c.schedule.minLr, nonNegative, "a number >= 0"),
        numberOption(args, "adam-beta1", c.training.beta1, beta, "a number in [0, 1)"),
        numberOption(args, "adam-beta2", c.training.beta2, beta, "a number in [0, 1)"),
        numberOption(args, "adam-eps", c.training.eps, positive, "a number > 0"),
        numberOption(args, "weight-decay", c.training.weightDecay, nonNegative, "a number >= 0"),
        numberOption(args, "clip-grad", c.training.clipGrad, nonNegative,
                     "a number >= 0 (0: no clipping)")})
    if (!e.empty())
      return e;
  if (!args.get("lr") && !c.planOnly)
    return "missing --lr";
  if (c.planOnly) {
    if (!args.get("steps"))
      c.schedule.totalSteps = 1;
    if (!args.get("micro-batch"))
      c.split.microBatch = 1;
    if (!args.get("lr"))
      lr = 0;
  }
  c.schedule.lr = lr;
  std::string decay = args.get("lr-schedule").value_or("constant");
  std::optional<train::LrDecay> parsed = train::parseLrDecay(decay);
  if (!parsed)
    return "--lr-schedule: '" + decay + "' is not constant or cosine";
  c.schedule.decay = *parsed;
  if (c.schedule.decay == train::LrDecay::constant && args.get("min-lr"))
    return "--min-lr applies to --lr-schedule cosine";
  if (Status s = c.schedule.validate(); !s.isOk())
    return s.message();
  if (std::string e = parseLayout(args, c); !e.empty())
    return e;
  if (Status s = c.split.validate(); !s.isOk())
    return s.message();
  if (auto seed = args.get("seed")) {
    std::optional<uint64_t> value = parseSeed(*seed);
    if (!value)
      return "--seed: '" + *seed + "' is not a non-negative integer";
    c.seed = *value;
  }
  std::string precision = args.get("precision").value_or("fp32");
  if (precision == "fp32")
    c.training.layout.precision = Precision::fp32;
  else if (precision == "fp64")
    c.training.layout.precision = Precision::fp64;
  else if (precision == "bf16")
    c.training.layout.precision = Precision::bf16;
  else if (precision == "fp16")
    c.training.layout.precision = Precision::fp16;
  else
    return "--precision: '" + precision + "' is not fp32, fp64, bf16 or fp16";
  bool scaling = false;
  for (const char *name :
       {"initial-loss-scale", "loss-scale-window", "hysteresis", "min-loss-scale"})
    scaling = scaling || args.get(name).has_value();
  if (scaling && c.training.layout.precision != Precision::fp16)
    return "loss scaling (--initial-loss-scale, --loss-scale-window, --hysteresis, "
           "--min-loss-scale) applies to --precision fp16";
  for (std::string e :
       {numberOption(args, "initial-loss-scale", c.scaler.initialScale, positive, "a number > 0"),
        numberOption(args, "min-loss-scale", c.scaler.minScale, positive, "a number > 0"),
        countOption(args, "loss-scale-window", 1, c.scaler.growthInterval, false),
        countOption(args, "hysteresis", 1, c.scaler.hysteresis, false)})
    if (!e.empty())
      return e;
  if (Status s = c.scaler.validate(); !s.isOk())
    return s.message();
  c.training.logits = args.get("logits").value_or("");
  c.logJson = args.get("log-json");
  if (std::string e = countOption(args, "log-interval", 1, c.logInterval, false); !e.empty())
    return e;
  c.saveWeights = args.get("save-weights");
  c.saveGrads = args.get("save-grads");
  c.oversubscribe = args.has("oversubscribe");
  c.saveDir = args.get("save");
  c.loadDir = args.get("load");
  if (std::string e = countOption(args, "save-interval", 1, c.saveInterval, false); !e.empty())
    return e;
  if (c.saveInterval > 0 && !c.saveDir)
    return "--save-interval needs --save DIR";
  if (c.loadDir && !std::filesystem::is_directory(*c.loadDir))
    return "--load: no checkpoint directory " + *c.loadDir;
  if (c.loadDir && args.get("trace"))
    return "--trace with --load is not supported yet (the traced steps count from step 1)";
  if (c.loadDir && args.get("save-grads"))
    return "--save-grads writes step 1's gradients; a run resumed with --load does not run step 1";
  if (std::string e = parseTrace(args, c); !e.empty())
    return e;
  for (auto [flag, file] : {std::pair{"save-weights", &c.saveWeights},
                            {"save-grads", &c.saveGrads},
                            {"trace", &c.tracePath}})
    if (*file) {
      std::filesystem::path dir = std::filesystem::path(**file).parent_path();
      if (!dir.empty() && !std::filesystem::is_directory(dir))
        return std::string("--") + flag + ": no directory " + dir.string();
    }
  return {};
}

bool stdoutIsTerminal() {
  // Under mpirun a rank's stdout is the launcher's pipe or pty: `--ranks` passes on whether the
  // launching process's stdout is a terminal.
  if (const char *given = std::getenv("MEGAC_TRAIN_STDOUT_IS_TTY"))
    return std::strcmp(given, "1") == 0;
  return launchedRanks() <= 1 && isatty(fileno(stdout));
}

int relaunchUnderMpirun(int argc, char **argv, const TrainConfig &c) {
  std::vector<std::string> command = {"mpirun"};
  if (geteuid() == 0)
    command.push_back("--allow-run-as-root");
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (c.oversubscribe || c.ranks > int64_t(cores))
    command.push_back("--oversubscribe");
  command.insert(command.end(), {"-np", std::to_string(c.ranks)});
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  command.push_back(ec ? std::string(argv[0]) : self.string());
  for (int i = 1; i < argc; ++i)
    command.push_back(argv[i]);
  std::vector<char *> args;
  for (std::string &arg : command)
    args.push_back(arg.data());
  args.push_back(nullptr);
  setenv("MEGAC_TRAIN_STDOUT_IS_TTY", isatty(fileno(stdout)) ? "1" : "0", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execvp("mpirun", args.data());
  std::fprintf(stderr,
               "%s: error: --ranks %lld runs the job under mpirun, which cannot be started "
               "(%s); install Open MPI (Debian: openmpi-bin)\n",
               "megac train", (long long)c.ranks, std::strerror(errno));
  return 1;
}

void setThreads(const TrainConfig &c) {
  int64_t threads = c.threads;
  if (threads == 0) {
    int64_t local = c.ranks;
    if (const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      local = std::max<int64_t>(1, std::atoll(value));
    threads = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / local);
  }
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
  openblas_set_num_threads(int(threads));
}

const char *const kTrainHelp =
    R"(usage: megac train (FILE.onnx | FILE.mlir | --model SPEC)
                   (--data TOKENS.npy|PREFIX | --data-path [W1] PREFIX1 [W2 PREFIX2 ...])
                   [--seq S] --steps N --global-batch B --micro-batch b --lr X
                   [--lr-schedule constant|cosine] [--warmup-steps W] [--min-lr Y]
                   [--adam-beta1 0.9] [--adam-beta2 0.999] [--adam-eps 1e-8]
                   [--weight-decay 0.01] [--clip-grad 0] [--seed 0]
                   [--precision fp32|fp64|bf16|fp16] [--initial-loss-scale 65536]
                   [--loss-scale-window 1000] [--hysteresis 2] [--min-loss-scale 1]
                   [--log-json FILE] [--log-interval N] [--logits NAME]
                   [--save-weights FILE.safetensors]
                   [--save-grads FILE.safetensors] [--trace FILE.json [--trace-steps N]]
                   [--save DIR [--save-interval N]] [--load DIR]
                   [--eval-data TOKENS.npy|PREFIX --eval-interval N [--eval-iters K]]
                   [--split TRAIN,VALID,TEST]
                   [--ranks N] [--tp T] [--pp P] [--dp D] [--vpp V] [--sequence-parallel]
                   [--zero 0|1] [--recompute none|selective|full] [--schedule 1f1b|gpipe]
                   [--threads N] [--comm-timeout SECONDS] [--oversubscribe]
                   [--backend cpu|cuda] [--allow-tf32]
  trains the model with AdamW (torch.optim.AdamW; weight decay on parameters of rank >= 2
  only) on one or more CPU ranks and prints one line per step (a live progress line on a
  terminal).

  ranks and layout: --ranks N runs N ranks: megac re-executes itself under
  `mpirun -np N` (adding --allow-run-as-root as root, and --oversubscribe when N exceeds the
  cores or --oversubscribe is given); a job started by mpirun directly is detected. The ranks
  form the mesh <pp, dp, tp> (rank = tp + T*(dp + D*pp), Megatron's order): --tp T tensor
  parallel (Megatron's column/row-parallel linears, vocab-parallel embedding and loss),
  --pp P pipeline stages with --vpp V model chunks per stage (interleaved 1F1B when V > 1) and
  --schedule 1f1b (default) or gpipe, --dp D data parallel (default: N / (T*P)); N must equal
  T*P*D. --sequence-parallel shards norms and residuals over tp; --zero 1 shards the Adam state
  over dp (Megatron's distributed optimizer); --recompute selective|full recomputes attention
  outputs or whole chunks in the backward pass. --cp, --ep and --fp8 are not supported yet.
  --micro-batch b is per data-parallel rank: the model is compiled for b*D rows and a step has
  m = B / (b*D) micro-batches (B must be a multiple of b*D); micro-batch k of rank dp reads
  rows k*b*D + dp*b .. +b of the step's global batch, so every layout trains on the same batch
  as one rank. Only rank 0 prints and writes files. --threads N sets the BLAS/OpenMP threads
  per rank (default: cores / ranks on this node, at least 1). --comm-timeout S (default 300):
  a collective or transfer waiting longer fails, naming the rank, operation and group, and the
  job is aborted.

  backend: --backend cuda runs each rank on one GPU (the local rank's, modulo the devices):
  cuBLASLt GEMMs, fused kernels, NCCL collectives bootstrapped over MPI; --backend cpu on the
  CPU reference kernels (OpenBLAS, MPI). The default is cuda when a CUDA device is usable,
  else cpu; asking for cuda where none is fails with the reason. --allow-tf32 lets f32 GEMMs
  use TF32 tensor cores (cuda only; bf16/fp16 always use tensor cores with f32 accumulation).

  data: TOKENS.npy is an int32 or int64 array [N, S+1]. Step i (0-based) uses samples
  i*B + j for j = 0..B-1, in order (of a .npy: row (i*B + j) mod N); micro-batches of b
  consecutive rows are accumulated (B must be a multiple of b). Causal models (gpt, ONNX, .mlir): input_ids =
  row[:S], labels = row[1:]. BERT (zoo): masked LM on row[:S] -- round(15% of S) seeded
  positions per row become the token vocab-1 ([MASK]) and are the only labelled ones;
  attention_mask is all ones. T5 (zoo): S = seq + dec_seq; the encoder reads row[:seq], the
  decoder reads row[seq:S] and predicts row[seq+1:S+1]. The loss is the mean cross-entropy
  over the global batch's labelled tokens. An ONNX model's input_ids is bound to [b, S]; a
  zoo spec's seq must be S (t5: seq + dec_seq; its batch is set to b).
  --data PREFIX (PREFIX.bin and PREFIX.idx, Megatron's indexed dataset, e.g. from `megac data
  prep`): its sequences are concatenated into one token stream and cut into windows of S+1
  tokens with stride S (Megatron's GPT samples); S is --seq S or the zoo spec's seq (t5: seq +
  dec_seq). Sample k is window perm_e[k mod N] of epoch e = k / N: every epoch reads each of
  the N windows once, epoch 0 in a Fisher-Yates order seeded by --seed, epoch e > 0 by
  SplitMix64(seed ^ SplitMix64(e)). --data-path [W1] PREFIX1 [W2 PREFIX2 ...] blends indexed
  datasets (Megatron's BlendedDataset): with the weights normalized, sample i is the next
  sample of the dataset d maximizing W_d * max(i,1) - taken_d (ties: the first), so every prefix
  holds each dataset's share to within about a sample; --data-path PREFIX alone is --data
  PREFIX. Each data-parallel rank reads only its rows of each micro-batch, when the step runs,
  straight from the memory-mapped files (tokens are checked against the vocabulary then).
  lr schedule, for step s = 1..N (Megatron's, starting at lr/W instead of 0):
    s <= W:   lr * s / W
    constant: lr
    cosine:   min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * (s - W) / (N - W)))
  (in PyTorch: LambdaLR(opt, lambda i: schedule(i + 1) / lr), stepped after each step).
  --clip-grad C > 0 scales the gradients by min(1, C / (norm + 1e-6)).
  --precision fp64 converts the model (parameters and compute) to f64. bf16 and fp16 are mixed
  precision (mega-training-precision): half compute, f32 master weights, gradient accumulators
  and Adam state, f32 LayerNorm/RmsNorm statistics, softmax and loss. fp16 adds dynamic loss
  scaling (Megatron's DynamicGradScaler): gradients are computed for loss * scale; a step whose
  gradients overflow (inf/nan) is skipped (logged "skipped") and, from the hysteresis-th
  overflow since the last growth on, halves the scale (not below --min-loss-scale); after
  --loss-scale-window consecutive clean steps the scale doubles.
  --seed seeds initialization (zoo models) and BERT's masks.
  --log-json writes one JSON object per step and line: step, loss, lr, grad_norm (before
  clipping), loss_scale, skipped, tokens, tokens_per_s, step_time_s. --log-interval N (default
  1; Megatron's): when stdout is not a terminal, one line every N steps (and after the last)
  with the mean loss and step time of those steps and the last step's lr and grad_norm; the
  JSON log still has every step.
  --save-weights writes the final parameters, whole (shards gathered on rank 0), in the layout
  of a one-rank run. --save-grads writes the gradient of every parameter after step 1's
  backward pass, before the optimizer (the accumulators summed over their data-parallel shares,
  shards gathered; fp16 runs write loss-scaled gradients). A non-finite loss stops the run
  (exit 1).
  validation: --eval-data (rows like --data's) is evaluated every --eval-interval steps and
  after the last: the mean loss of --eval-iters global batches and its perplexity, printed and
  logged as {"step", "val_loss", "val_ppl"} lines; training is unaffected (its gradients are
  dropped). --split A,B,C (Megatron's, e.g. 949,50,1; with --data PREFIX or --data-path)
  splits each dataset's documents in order into train, validation and test parts in those
  proportions: training windows come from the first part only, and without --eval-data the
  validation part is what --eval-interval evaluates (windows cut and shuffled the same way).
  A nonzero test part is evaluated once after the last step (--eval-iters batches), printed
  as "test after step N: loss, perplexity" and logged as {"step", "test_loss", "test_ppl"}.
  checkpoints: --save DIR writes DIR/step-<N>/ every --save-interval steps and after the last
  step: each rank writes the shards it holds to model-rank-<R>.safetensors (parameters) and
  optimizer-rank-<R>.safetensors (the Adam moments, adam.m.<p>, adam.v.<p>), a shard several
  ranks hold (dp replicas) by the lowest of them only; rank 0 writes meta.json (format version
  2, step, data position, seed, loss scaler, model, layout, every tensor's dtype, global shape
  and shards {file, offset, shape}, each file's bytes and CRC32). It is written as
  step-<N>.tmp, fsynced and renamed, then DIR/latest (the step) is replaced, so a crash never
  damages the previous checkpoint. --load DIR resumes from the step DIR/latest names (else the
  newest complete step-<N>): each rank reads only the parts of the shards that overlap its
  own, so a checkpoint loads under any layout (tp, pp, dp, ZeRO); a missing file, or one whose
  size or CRC32 differs from meta.json, is refused, naming it, and every rank tries the next
  older checkpoint. --steps is the total: resuming step 4 with --steps 8 runs steps
  5..8 (logs, lr schedule, data and Adam's step count continue from the global step); the same
  layout continues bit-for-bit.
  --trace writes the executed timeline of N steps (--trace-steps, default 2) from step 2 (step 1
  warms up; a one-step run traces step 1) as Chrome trace-event JSON, the format of
  `megac plan --trace` (open it in Perfetto): per rank (pid) the functions and instructions run
  (tid 0), every collective, send, recv and wait with its group and bytes (tid 1), and the
  optimizer steps with their pipeline steps "F<micro-batch> c<chunk>" (tid 2); otherData holds
  each rank's arena_bytes and peak_rss_bytes. The ranks' clocks are aligned by a barrier before
  the first traced step.)";

} // namespace megac::cli
