// `megac plan ... --cluster SPEC`: the planner. Reads the model's shape off its IR
// (planner/ModelShape), searches layouts with the cost model (planner/Planner.h) under the
// pins the user gave, prints the best ones and why, and compiles the winner's training step to
// confirm the partitioner accepts it.
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"
#include "tools/megac/ModelSource.h"
#include "tools/megac/PlanExplain.h"

#include "codegen/PlanWriter.h"
#include "frontends/models/ModelConfig.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingPipeline.h"
#include "planner/CostModel.h"
#include "planner/ModelShape.h"
#include "planner/ModelStats.h"
#include "planner/Planner.h"
#include "planner/Timeline.h"
#include "runtime/plan/PlanLoader.h"

#include "mlir/IR/MLIRContext.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac plan";

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

std::string layoutText(const Layout &l) {
  std::ostringstream out;
  out << "tp=" << l.tp << " pp=" << l.pp << " dp=" << l.dp;
  if (l.vpp > 1)
    out << " vpp=" << l.vpp;
  out << " mb=" << l.microBatch;
  if (l.sequenceParallel)
    out << " sp";
  if (l.zero)
    out << " zero1";
  if (l.recompute != Recompute::none)
    out << " recompute=" << recomputeName(l.recompute);
  return out.str();
}

std::string candidateJson(const planner::PlanCandidate &c) {
  const Layout &l = c.layout;
  const planner::StepCost &s = c.cost;
  std::ostringstream out;
  out.precision(17);
  out << "{\"tp\": " << l.tp << ", \"pp\": " << l.pp << ", \"dp\": " << l.dp
      << ", \"vpp\": " << l.vpp << ", \"micro_batch\": " << l.microBatch
      << ", \"sequence_parallel\": " << (l.sequenceParallel ? "true" : "false")
      << ", \"zero\": " << l.zero << ", \"recompute\": \"" << recomputeName(l.recompute)
      << "\", \"precision\": \"" << precisionName(l.precision)
      << "\", \"step_time_s\": " << s.stepSeconds << ", \"tokens_per_s\": " << s.tokensPerSecond
      << ", \"tflops_per_gpu\": " << s.hardwareTflopsPerGpu << ", \"mfu\": " << s.mfu
      << ", \"memory_per_gpu_bytes\": " << s.totalBytes
      << ", \"fits\": " << (s.fits ? "true" : "false")
      << ", \"breakdown\": {\"compute_s\": " << s.computeSeconds
      << ", \"tp_comm_s\": " << s.tpCommSeconds << ", \"pp_comm_s\": " << s.ppCommSeconds
      << ", \"dp_comm_s\": " << s.dpCommSeconds << ", \"bubble_s\": " << s.bubbleSeconds
      << ", \"optimizer_s\": " << s.optimizerSeconds << ", \"gemm_s\": " << s.gemmSeconds
      << ", \"attention_s\": " << s.attentionSeconds
      << ", \"memory_bound_s\": " << s.memoryBoundSeconds
      << ", \"overhead_s\": " << s.overheadSeconds
      << ", \"tp_all_reduce_s\": " << s.tpAllReduceSeconds
      << ", \"tp_all_gather_s\": " << s.tpAllGatherSeconds
      << ", \"tp_reduce_scatter_s\": " << s.tpReduceScatterSeconds
      << ", \"dp_reduce_s\": " << s.dpReduceSeconds << ", \"dp_gather_s\": " << s.dpGatherSeconds
      << "}, \"kernel_launches\": {";
  for (size_t i = 0; i < s.kernelLaunches.size(); ++i)
    out << (i ? ", " : "") << "\"" << s.kernelLaunches[i].first
        << "\": " << s.kernelLaunches[i].second;
  out << "}, \"memory\": {\"parameters\": " << s.parameterBytes
      << ", \"gradients\": " << s.gradientBytes << ", \"optimizer\": " << s.optimizerBytes
      << ", \"activations\": " << s.activationBytes << ", \"workspace\": " << s.workspaceBytes
      << "}}";
  return out.str();
}

void printTable(const std::vector<planner::PlanCandidate> &best) {
  std::printf("%-4s %-52s %10s %12s %9s %6s %11s\n", "#", "layout", "step (s)", "tokens/s",
              "TFLOP/s", "MFU", "memory/GPU");
  for (size_t i = 0; i < best.size(); ++i) {
    const planner::StepCost &s = best[i].cost;
    std::printf("%-4zu %-52s %10.3f %12.0f %9.1f %5.1f%% %11s\n", i + 1,
                layoutText(best[i].layout).c_str(), s.stepSeconds, s.tokensPerSecond,
                s.hardwareTflopsPerGpu, 100 * s.mfu, gib(s.totalBytes).c_str());
  }
}

/// Why the winner beats the runner-up: the cost components that differ most.
std::string whyBetter(const planner::PlanCandidate &a, const planner::PlanCandidate &b) {
  struct Part {
    const char *name;
    double a, b;
  };
  Part parts[] = {{"compute", a.cost.computeSeconds, b.cost.computeSeconds},
                  {"tensor-parallel communication", a.cost.tpCommSeconds, b.cost.tpCommSeconds},
                  {"pipeline transfers", a.cost.ppCommSeconds, b.cost.ppCommSeconds},
                  {"exposed gradient reduction", a.cost.dpCommSeconds, b.cost.dpCommSeconds},
                  {"pipeline bubble", a.cost.bubbleSeconds, b.cost.bubbleSeconds},
                  {"optimizer", a.cost.optimizerSeconds, b.cost.optimizerSeconds}};
  std::sort(std::begin(parts), std::end(parts),
            [](const Part &x, const Part &y) { return std::abs(x.b - x.a) > std::abs(y.b - y.a); });
  std::ostringstream out;
  out.precision(3);
  out << "#1 beats #2 by " << std::fixed << (b.cost.stepSeconds - a.cost.stepSeconds)
      << " s/step: ";
  for (int i = 0; i < 2; ++i)
    out << (i ? "; " : "") << parts[i].name << " " << parts[i].a << " s vs " << parts[i].b << " s";
  return out.str();
}

/// The winner's predicted step split by op class (`--explain`): kernels by class (the optimizer's
/// included), each tensor-parallel collective, pipeline sends, the exposed data-parallel
/// communication and the bubble. The lines sum to the step time.
std::string timeByClass(const planner::StepCost &c, const std::string &stack) {
  struct Line {
    const char *name;
    double seconds;
  } lines[] = {{"GEMM", c.gemmSeconds},
               {"attention", c.attentionSeconds},
               {"memory-bound kernels", c.memoryBoundSeconds},
               {"launch / instruction overhead", c.overheadSeconds},
               {"tp all-reduce", c.tpAllReduceSeconds},
               {"tp all-gather", c.tpAllGatherSeconds},
               {"tp reduce-scatter", c.tpReduceScatterSeconds},
               {"pipeline sends", c.ppCommSeconds},
               {"dp gradient reduction (exposed)", c.dpReduceSeconds},
               {"dp parameter all-gather (exposed)", c.dpGatherSeconds},
               {"pipeline bubble", c.bubbleSeconds}};
  std::ostringstream out;
  char text[160];
  std::snprintf(text, sizeof text, "predicted step time of #1 by op class (stack %s):\n",
                stack.c_str());
  out << text;
  for (const Line &l : lines) {
    std::snprintf(text, sizeof text, "  %-36s %10.4f s %6.1f%%\n", l.name, l.seconds,
                  100 * l.seconds / c.stepSeconds);
    out << text;
  }
  std::snprintf(text, sizeof text, "  %-36s %10.4f s\n", "total", c.stepSeconds);
  out << text;
  return out.str();
}

} // namespace

int planSearchCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(
      argc, argv, 2,
      {"model", "cluster", "global-batch", "seq", "tp", "pp", "dp", "vpp", "micro-batch", "zero",
       "recompute", "precision", "top", "timeline", "trace", "input-shape", "stack", "dropout"},
      {"json", "explain", "sequence-parallel", "no-sequence-parallel", "no-compile"});
  std::optional<std::string> file;
  if (error.empty() && args.positional().size() > 1)
    error = "give one model file";
  if (!args.positional().empty())
    file = args.positional().front();
  std::optional<std::string> spec = args.get("model");
  if (error.empty() && spec.has_value() == file.has_value())
    error = "give either --model SPEC or a model file (.onnx, .mlir)";
  std::string clusterError;
  std::optional<planner::Cluster> cluster;
  if (error.empty() && !(cluster = planner::parseCluster(*args.get("cluster"), &clusterError)))
    error = "--cluster: " + clusterError;
  auto count = [&](const char *name) -> std::optional<int64_t> {
    auto text = args.get(name);
    if (!text)
      return std::nullopt;
    char *end = nullptr;
    long long v = std::strtoll(text->c_str(), &end, 10);
    if (!end || *end || v < 1) {
      error = std::string("--") + name + ": '" + *text + "' is not a positive integer";
      return std::nullopt;
    }
    return v;
  };
  planner::Pins pins;
  std::optional<int64_t> globalBatch = count("global-batch"), top = count("top"),
                         seqOverride = count("seq");
  pins.tp = count("tp");
  pins.pp = count("pp");
  pins.dp = count("dp");
  pins.vpp = count("vpp");
  pins.microBatch = count("micro-batch");
  if (args.has("sequence-parallel"))
    pins.sequenceParallel = true;
  if (args.has("no-sequence-parallel"))
    pins.sequenceParallel = false;
  if (auto zero = args.get("zero")) {
    if (*zero != "0" && *zero != "1")
      error = "--zero: '" + *zero + "' is not 0 or 1";
    pins.zero = *zero == "1" ? 1 : 0;
  }
  if (auto r = args.get("recompute")) {
    if (*r == "none")
      pins.recompute = Recompute::none;
    else if (*r == "selective")
      pins.recompute = Recompute::selective;
    else if (*r == "full")
      pins.recompute = Recompute::full;
    else
      error = "--recompute: '" + *r + "' is not none, selective or full";
  }
  std::string precision = args.get("precision").value_or("bf16");
  if (precision == "bf16")
    pins.precision = Precision::bf16;
  else if (precision == "fp16")
    pins.precision = Precision::fp16;
  else if (precision == "fp32")
    pins.precision = Precision::fp32;
  else if (error.empty())
    error = "--precision: '" + precision + "' is not bf16, fp16 or fp32";
  if (error.empty() && !globalBatch)
    error = "missing --global-batch B (samples per optimizer step)";
  std::optional<planner::StackProfile> stack;
  if (error.empty()) {
    if (auto name = args.get("stack")) {
      stack = planner::stackProfile(*name, cluster->device.name == "cpu" ||
                                               cluster->device.calibration.threads > 0);
      if (!stack) {
        error = "--stack: '" + *name + "' is not a known software stack (";
        for (const std::string &n : planner::stackNames())
          error += n + (n == planner::stackNames().back() ? ")" : ", ");
      }
    } else {
      stack = planner::defaultStack(*cluster);
    }
  }
  std::optional<double> dropout;
  if (auto text = args.get("dropout")) {
    char *end = nullptr;
    double p = std::strtod(text->c_str(), &end);
    if (!end || *end || !(p >= 0 && p < 1))
      error = "--dropout: '" + *text + "' is not a probability in [0, 1)";
    else
      dropout = p;
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }

  // The model, one sample per micro-batch: the planner scales it.
  auto start = std::chrono::steady_clock::now();
  mlir::MLIRContext ctx;
  std::optional<std::string> oneSample = spec;
  if (spec) {
    models::ConfigResult parsed = models::parseModelSpec(*spec);
    if (!parsed.config) {
      std::fprintf(stderr, "%s: error: --model: %s\n", kCommand, parsed.error.c_str());
      return 2;
    }
    parsed.config->batch = 1;
    if (seqOverride)
      parsed.config->seq = *seqOverride;
    oneSample = parsed.config->spec();
  }
  InputShapes shapes;
  if (file && seqOverride)
    shapes["input_ids"] = {1, *seqOverride};
  std::optional<LoadedModel> model = loadModel(ctx, oneSample, file, shapes);
  if (!model)
    return 1;
  if (mlir::failed(passes::runInputPipeline(*model->module))) {
    std::fprintf(stderr, "%s: error: cannot raise %s to coarse ops\n", kCommand,
                 model->description.c_str());
    return 1;
  }
  planner::ModelShapeResult shape = planner::computeModelShape(*model->module, model->description);
  if (!shape.shape) {
    std::fprintf(stderr, "%s: error: %s: %s\n", kCommand, model->description.c_str(),
                 shape.error.c_str());
    return 1;
  }
  double readSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (dropout)
    shape.shape->dropout = *dropout;

  planner::SearchResult result =
      planner::search(*shape.shape, *cluster, *globalBatch, pins, int(top.value_or(5)), *stack);
  const planner::TransformerShape &s = *shape.shape;
  if (args.has("json")) {
    std::printf("{\"model\": \"%s\", \"cluster\": \"%s\", \"stack\": \"%s\", \"devices\": %lld, "
                "\"global_batch\": %lld, \"evaluated\": %lld, \"search_seconds\": %.6f, "
                "\"layouts\": [",
                s.name.c_str(), args.get("cluster")->c_str(), stack->name.c_str(),
                (long long)cluster->devices(), (long long)*globalBatch, (long long)result.evaluated,
                result.seconds);
    for (size_t i = 0; i < result.best.size(); ++i)
      std::printf("%s%s", i ? ", " : "", candidateJson(result.best[i]).c_str());
    std::printf("]");
    if (result.best.empty() && result.smallestMemory)
      std::printf(", \"smallest_memory\": %s", candidateJson(*result.smallestMemory).c_str());
    std::printf("}\n");
  } else {
    std::printf("%s: %s parameters, %lld blocks, hidden %lld, heads %lld, seq %lld, vocab %lld\n",
                s.name.c_str(), planner::humanParams(double(s.parameters)).c_str(),
                (long long)s.layers, (long long)s.hidden, (long long)s.heads, (long long)s.seq,
                (long long)s.vocab);
    std::printf("cluster %s: %lld x %s, global batch %lld, %s, stack %s; %lld layouts evaluated "
                "in %.3f s (model read in %.3f s)\n\n",
                args.get("cluster")->c_str(), (long long)cluster->devices(),
                cluster->device.name.c_str(), (long long)*globalBatch, precision.c_str(),
                stack->name.c_str(), (long long)result.evaluated, result.seconds, readSeconds);
    if (result.best.empty()) {
      std::printf("no layout fits in %s per device.\n", gib(cluster->device.memoryBytes).c_str());
      if (result.smallestMemory) {
        const planner::PlanCandidate &small = *result.smallestMemory;
        std::printf("the smallest needs %s per device (%s): parameters %s, gradients %s, "
                    "optimizer %s, activations %s.\n",
                    gib(small.cost.totalBytes).c_str(), layoutText(small.layout).c_str(),
                    gib(small.cost.parameterBytes).c_str(), gib(small.cost.gradientBytes).c_str(),
                    gib(small.cost.optimizerBytes).c_str(),
                    gib(small.cost.activationBytes).c_str());
        // One change at a time, the first that fits: what the user could do about it.
        std::vector<std::pair<std::string, Layout>> fixes;
        Layout l = small.layout;
        auto with = [&](auto change) {
          Layout next = l;
          change(next);
          return next;
        };
        fixes.push_back(
            {"--recompute full", with([](Layout &x) { x.recompute = Recompute::full; })});
        if (l.dp > 1)
          fixes.push_back({"--zero 1", with([](Layout &x) { x.zero = 1; })});
        if (l.dp % 2 == 0) {
          fixes.push_back({"--tp " + std::to_string(2 * l.tp), with([](Layout &x) {
                             x.tp *= 2;
                             x.dp /= 2;
                           })});
          fixes.push_back({"--pp " + std::to_string(2 * l.pp), with([](Layout &x) {
                             x.pp *= 2;
                             x.dp /= 2;
                           })});
        }
        if (l.microBatch > 1)
          fixes.push_back({"--micro-batch " + std::to_string(l.microBatch / 2),
                           with([](Layout &x) { x.microBatch /= 2; })});
        bool found = false;
        for (auto &[flag, layout] : fixes) {
          std::string why;
          auto cost = planner::estimate(s, *cluster, *globalBatch, layout, &why, *stack);
          if (cost && cost->fits) {
            std::printf("%s would fit: %s per device (%s).\n", flag.c_str(),
                        gib(cost->totalBytes).c_str(), layoutText(layout).c_str());
            found = true;
            break;
          }
        }
        if (!found)
          std::printf("no single change fits: more devices (--cluster) or a smaller model.\n");
      }
      return 1;
    }
    printTable(result.best);
    const planner::StepCost &w = result.best.front().cost;
    std::printf("\n#1: compute %.3f s, tp comm %.3f s, pp comm %.3f s, exposed dp comm %.3f s, "
                "bubble %.3f s, optimizer %.3f s\n",
                w.computeSeconds, w.tpCommSeconds, w.ppCommSeconds, w.dpCommSeconds,
                w.bubbleSeconds, w.optimizerSeconds);
    std::printf("    memory: parameters %s, gradients %s, optimizer %s, activations %s, "
                "workspace %s\n",
                gib(w.parameterBytes).c_str(), gib(w.gradientBytes).c_str(),
                gib(w.optimizerBytes).c_str(), gib(w.activationBytes).c_str(),
                gib(w.workspaceBytes).c_str());
    if (!w.dominant.empty()) {
      std::printf("    dominant:");
      for (const std::string &d : w.dominant)
        std::printf(" %s;", d.c_str());
      std::printf("\n");
    }
    if (result.best.size() > 1)
      std::printf("    %s\n", whyBetter(result.best[0], result.best[1]).c_str());
    if (args.has("explain"))
      std::printf("\n%s", timeByClass(w, stack->name).c_str());
  }
  if (result.best.empty())
    return 1;

  // The winner's pipeline, drawn and traced from the same schedule generator the runtime runs.
  const planner::PlanCandidate &win = result.best.front();
  if (args.get("timeline") || args.get("trace")) {
    schedule::PipelineShape pipe{win.layout.pp, win.layout.vpp,
                                 *globalBatch / (win.layout.microBatch * win.layout.dp)};
    schedule::ScheduleKind kind =
        win.layout.vpp > 1 ? schedule::ScheduleKind::interleaved : schedule::ScheduleKind::oneFOneB;
    std::string why;
    auto steps = schedule::buildSchedule(kind, pipe, &why);
    double chunks = double(win.layout.pp * win.layout.vpp);
    double forward =
        win.cost.computeSeconds / double(pipe.microBatches) / 3.0 * double(win.layout.pp) / chunks;
    if (steps) {
      planner::Timeline timeline =
          planner::simulateTimeline(pipe, *steps, {{forward}, {2 * forward}, /*sendLatency=*/0.0},
                                    schedule::scheduleName(kind));
      if (!timeline.error.empty()) {
        std::fprintf(stderr, "%s: error: the winner's timeline: %s\n", kCommand,
                     timeline.error.c_str());
        return 1;
      }
      std::string subtitle = layoutText(win.layout) + " on " + *args.get("cluster");
      for (auto [flag, svg] : {std::pair{"timeline", true}, {"trace", false}})
        if (auto path = args.get(flag)) {
          std::ofstream out(*path);
          out << (svg ? planner::timelineSvg(timeline, subtitle) : planner::chromeTrace(timeline));
          if (!out) {
            std::fprintf(stderr, "%s: error: cannot write %s\n", kCommand, path->c_str());
            return 1;
          }
        }
    } else {
      std::fprintf(stderr, "%s: error: the winner's schedule: %s\n", kCommand, why.c_str());
      return 1;
    }
  }

  // Confirm the partitioner accepts the winner: its training step compiled as `megac train`
  // would (with --explain down to the plan, whose collectives get their predicted times;
  // without, one sample per micro-batch and no data parallelism, which is quick).
  if (!args.has("no-compile") && !args.has("json")) {
    bool explain = args.has("explain");
    int64_t rows = explain ? win.layout.microBatch * win.layout.dp : 1;
    std::optional<LoadedModel> step = std::move(model);
    if (explain) {
      std::optional<std::string> full = spec;
      if (spec) {
        models::ConfigResult parsed = models::parseModelSpec(*spec);
        parsed.config->batch = rows;
        if (seqOverride)
          parsed.config->seq = *seqOverride;
        full = parsed.config->spec();
      }
      InputShapes rowShapes;
      if (file)
        rowShapes["input_ids"] = {rows, seqOverride.value_or(s.seq)};
      step = loadModel(ctx, full, file, rowShapes);
      if (!step || mlir::failed(passes::runInputPipeline(*step->module)))
        return 1;
    }
    passes::TrainingOptions options;
    options.lossKind = s.name.rfind("t5:", 0) == 0     ? passes::LossKind::seq2seq
                       : s.name.rfind("bert:", 0) == 0 ? passes::LossKind::mlm
                                                       : passes::LossKind::causal;
    options.layout = win.layout;
    options.layout.dp = explain ? win.layout.dp : 1;
    options.layout.zero = explain ? win.layout.zero : 0;
    int64_t microBatches = *globalBatch / (win.layout.microBatch * win.layout.dp);
    options.layout.microBatches = explain ? microBatches : 1;
    auto t0 = std::chrono::steady_clock::now();
    if (mlir::failed(passes::buildTrainingStep(*step->module, options))) {
      std::fprintf(stderr, "%s: error: the winner (%s) does not compile (see above)\n", kCommand,
                   layoutText(win.layout).c_str());
      return 1;
    }
    std::printf("    the partitioner accepts #1 (tp=%lld pp=%lld vpp=%lld%s): compiled in %.2f s\n",
                (long long)win.layout.tp, (long long)win.layout.pp, (long long)win.layout.vpp,
                win.layout.sequenceParallel ? " sp" : "",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (explain) {
      codegen::CodegenOptions codegenOptions;
      codegenOptions.microBatches = microBatches;
      auto bytes = codegen::writePlan(*step->module, codegenOptions);
      if (failed(bytes))
        return 1;
      auto plan = runtime::loadPlanFromBytes(std::move(*bytes));
      if (!plan.isOk()) {
        std::fprintf(stderr, "%s: error: %s\n", kCommand, plan.status().message().c_str());
        return 1;
      }
      const planner::Cluster &c = *cluster;
      CommPredictor predict = [&c](const std::string &op, int64_t size, int64_t stride,
                                   uint64_t bytes) {
        if (op == "Send" || op == "Recv")
          return planner::p2pSeconds(c, stride >= c.device.devicesPerNode, double(bytes));
        planner::Collective kind = op == "AllGather"       ? planner::Collective::allGather
                                   : op == "ReduceScatter" ? planner::Collective::reduceScatter
                                                           : planner::Collective::allReduce;
        // An all-gather's input is one shard; the model takes the whole buffer.
        double whole = op == "AllGather" ? double(bytes) * double(size) : double(bytes);
        return planner::collectiveSeconds(c, kind, size, stride, whole);
      };
      std::printf("\n%s", explainPlan(*plan, predict).c_str());
    }
  }
  return 0;
}

} // namespace megac::cli
