// The layout search of `megac plan --cluster` and its report (PlanSearch.h).
#include "driver/PlanSearch.h"

#include "driver/PlanExplain.h"

#include "codegen/PlanWriter.h"
#include "frontends/models/ModelConfig.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingPipeline.h"
#include "planner/CostModel.h"
#include "planner/ModelShape.h"
#include "planner/ModelStats.h"
#include "planner/Timeline.h"
#include "runtime/plan/PlanLoader.h"
#include "support/Files.h"
#include "support/Json.h"

#include "mlir/IR/MLIRContext.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace megac::driver {

namespace {

using Emit = std::function<void(const std::string &)>;

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(1ull << 30));
  return text;
}

std::string layoutText(const Layout &l) {
  std::ostringstream out;
  out << "tp=" << l.tp;
  if (l.cp > 1) // with its K/V exchange, Megatron's cp_comm_type
    out << " cp=" << l.cp << (l.cpRing ? "(p2p)" : "(all_gather)");
  out << " pp=" << l.pp << " dp=" << l.dp;
  if (l.ep > 1)
    out << " ep=" << l.ep;
  if (l.vpp > 1)
    out << " vpp=" << l.vpp;
  if (l.pp > 1 && schedule::splitsBackward(l.schedule)) // 1f1b (interleaved at vpp > 1): unsaid
    out << " " << schedule::scheduleName(l.schedule);
  out << " mb=" << l.microBatch;
  if (l.sequenceParallel)
    out << " sp";
  if (l.zero)
    out << " zero" << l.zero;
  if (!l.reshardAfterForward) // ZeRO-3 keeping the forward's gathers for the backward
    out << " no-reshard";
  if (l.recompute != Recompute::none)
    out << " recompute=" << recomputeName(l.recompute);
  return out.str();
}

std::string candidateJson(const planner::PlanCandidate &c) {
  const Layout &l = c.layout;
  const planner::StepCost &s = c.cost;
  std::ostringstream out;
  out.precision(17);
  out << "{\"tp\": " << l.tp << ", \"cp\": " << l.cp << ", \"cp_comm_type\": \""
      << (l.cp > 1 && l.cpRing ? "p2p" : "all_gather") << "\", \"pp\": " << l.pp
      << ", \"dp\": " << l.dp << ", \"ep\": " << l.ep << ", \"vpp\": " << l.vpp
      << ", \"schedule\": \"" << schedule::scheduleName(l.pipelineSchedule())
      << "\", \"micro_batch\": " << l.microBatch
      << ", \"sequence_parallel\": " << (l.sequenceParallel ? "true" : "false")
      << ", \"zero\": " << l.zero
      << ", \"reshard_after_forward\": " << (l.reshardAfterForward ? "true" : "false")
      << ", \"recompute\": \"" << recomputeName(l.recompute) << "\", \"precision\": \""
      << precisionName(l.precision) << "\", \"step_time_s\": " << s.stepSeconds
      << ", \"tokens_per_s\": " << s.tokensPerSecond
      << ", \"tflops_per_gpu\": " << s.hardwareTflopsPerGpu << ", \"mfu\": " << s.mfu
      << ", \"memory_per_gpu_bytes\": " << s.totalBytes
      << ", \"fits\": " << (s.fits ? "true" : "false")
      << ", \"breakdown\": {\"compute_s\": " << s.computeSeconds
      << ", \"tp_comm_s\": " << s.tpCommSeconds << ", \"pp_comm_s\": " << s.ppCommSeconds
      << ", \"dp_comm_s\": " << s.dpCommSeconds << ", \"ep_comm_s\": " << s.epCommSeconds
      << ", \"cp_comm_s\": " << s.cpCommSeconds << ", \"zero_gather_s\": " << s.zeroGatherSeconds
      << ", \"zero_reduce_scatter_s\": " << s.zeroReduceScatterSeconds
      << ", \"bubble_s\": " << s.bubbleSeconds << ", \"optimizer_s\": " << s.optimizerSeconds
      << ", \"gemm_s\": " << s.gemmSeconds << ", \"attention_s\": " << s.attentionSeconds
      << ", \"memory_bound_s\": " << s.memoryBoundSeconds
      << ", \"overhead_s\": " << s.overheadSeconds
      << ", \"tp_all_reduce_s\": " << s.tpAllReduceSeconds
      << ", \"tp_all_gather_s\": " << s.tpAllGatherSeconds
      << ", \"tp_reduce_scatter_s\": " << s.tpReduceScatterSeconds
      << ", \"dp_reduce_s\": " << s.dpReduceSeconds << ", \"dp_gather_s\": " << s.dpGatherSeconds
      << "}";
  // A {class: value} map.
  auto classes = [&](const std::vector<std::pair<std::string, double>> &list) {
    out << "{";
    for (size_t i = 0; i < list.size(); ++i)
      out << (i ? ", " : "") << "\"" << list[i].first << "\": " << list[i].second;
    out << "}";
  };
  out << ", \"kernel_launches\": ";
  classes(s.kernelLaunches);
  out << ", \"kernel_seconds\": ";
  classes(s.kernelSeconds);
  out << ", \"kernel_bytes\": ";
  classes(s.kernelBytes);
  auto gemms = [&](const std::vector<planner::GemmShape> &list) {
    out << "[";
    for (size_t i = 0; i < list.size(); ++i) {
      const planner::GemmShape &g = list[i];
      out << (i ? ", " : "") << "{\"m\": " << g.m << ", \"n\": " << g.n << ", \"k\": " << g.k
          << ", \"batch\": " << g.batch << ", \"count\": " << g.count
          << (g.routed ? ", \"routed\": true" : "") << "}";
    }
    out << "]";
  };
  out << ", \"gemms\": ";
  gemms(s.gemmShapes);
  if (l.pp > 1) {
    // The first and the last stage, and with pp > 2 a middle one (its blocks only).
    std::vector<std::pair<const char *, const planner::StageInventory *>> stages = {
        {"first", &s.firstStage}, {"last", &s.lastStage}};
    if (l.pp > 2)
      stages.push_back({"middle", &s.middleStage});
    auto perStage = [&](const char *key, auto write) {
      out << ", \"" << key << "\": {";
      for (size_t i = 0; i < stages.size(); ++i) {
        out << (i ? ", " : "") << "\"" << stages[i].first << "\": ";
        write(*stages[i].second);
      }
      out << "}";
    };
    perStage("stage_gemms", [&](const planner::StageInventory &st) { gemms(st.gemms); });
    perStage("stage_kernel_launches",
             [&](const planner::StageInventory &st) { classes(st.launches); });
    perStage("stage_kernel_bytes", [&](const planner::StageInventory &st) { classes(st.bytes); });
  }
  out << ", \"memory\": {\"parameters\": " << s.parameterBytes
      << ", \"gradients\": " << s.gradientBytes << ", \"optimizer\": " << s.optimizerBytes
      << ", \"activations\": " << s.activationBytes << ", \"workspace\": " << s.workspaceBytes
      << "}}";
  return out.str();
}

/// printf into a string.
template <typename... Args> std::string format(const char *fmt, Args... args) {
  char text[512];
  std::snprintf(text, sizeof text, fmt, args...);
  return text;
}

std::string tableText(const std::vector<planner::PlanCandidate> &best) {
  std::string out = format("%-4s %-52s %10s %12s %9s %6s %11s\n", "#", "layout", "step (s)",
                           "tokens/s", "TFLOP/s", "MFU", "memory/GPU");
  for (size_t i = 0; i < best.size(); ++i) {
    const planner::StepCost &s = best[i].cost;
    out += format("%-4zu %-52s %10.3f %12.0f %9.1f %5.1f%% %11s\n", i + 1,
                  layoutText(best[i].layout).c_str(), s.stepSeconds, s.tokensPerSecond,
                  s.hardwareTflopsPerGpu, 100 * s.mfu, gib(s.totalBytes).c_str());
  }
  return out;
}

/// When `a` (#1) and `b` run different pipeline schedules and one of them is zero-bubble (issue
/// 35): the bubble the split backward saves in seconds and, when the zero-bubble layout loses,
/// what it pays for it: ZB-H2's 2p - 1 micro-batches in flight (1F1B and ZB-H1 keep p), and the
/// recompute or smaller micro-batch that memory forces. Empty otherwise.
std::string scheduleWhy(const planner::PlanCandidate &a, const planner::PlanCandidate &b,
                        const std::string &label) {
  const Layout &x = a.layout, &y = b.layout;
  schedule::ScheduleKind ka = x.pipelineSchedule(), kb = y.pipelineSchedule();
  bool za = x.pp > 1 && schedule::splitsBackward(ka), zb = y.pp > 1 && schedule::splitsBackward(kb);
  if (ka == kb || (!za && !zb) || x.pp == 1 || y.pp == 1)
    return {};
  const char *na = schedule::scheduleName(ka), *nb = schedule::scheduleName(kb);
  std::string whose = label == "it" ? "its" : label + "'s";
  std::ostringstream out;
  out.precision(3);
  out << std::fixed;
  double saved = b.cost.bubbleSeconds - a.cost.bubbleSeconds;
  if (za) { // #1 runs the zero-bubble schedule
    out << "#1's " << na << " runs each backward as B then W and fills the pipeline bubble with "
        << "the W's: bubble " << a.cost.bubbleSeconds << " s vs " << b.cost.bubbleSeconds
        << " s under " << whose << " " << nb << " (" << saved << " s/step saved)";
    return out.str();
  }
  // The zero-bubble layout loses: its bubble saving, and what outweighs it.
  out << (label == "it" ? std::string("Its") : whose) << " " << nb << " idles "
      << b.cost.bubbleSeconds << " s vs #1's " << a.cost.bubbleSeconds << " s under " << na;
  if (saved < 0)
    out << " (" << -saved << " s less bubble) but";
  else
    out << ", and";
  if (kb == schedule::ScheduleKind::zbH2)
    out << " keeps 2p - 1 = " << 2 * y.pp - 1 << " micro-batches in flight (" << na << ": "
        << (x.vpp > 1 ? "more" : std::to_string(x.pp)) << "), the W's kept tensors with them:";
  else
    out << " keeps each micro-batch's activations until its W:";
  out << " activations " << b.cost.activationBytes / double(1ull << 30) << " GiB vs "
      << a.cost.activationBytes / double(1ull << 30) << " GiB";
  if (y.recompute != x.recompute)
    out << ", so it needs recompute=" << recomputeName(y.recompute) << " (compute "
        << b.cost.computeSeconds << " s vs " << a.cost.computeSeconds << " s)";
  else if (y.microBatch != x.microBatch)
    out << ", so it runs micro-batch " << y.microBatch << " (compute " << b.cost.computeSeconds
        << " s vs " << a.cost.computeSeconds << " s)";
  return out.str();
}

/// Why `a` (#1) beats `b` (`label`: "#2", "the best zero-3 layout", ...): the cost components
/// that differ most, and a pipeline schedule's part (scheduleWhy).
std::string whyBetter(const planner::PlanCandidate &a, const planner::PlanCandidate &b,
                      const std::string &label = "#2") {
  struct Part {
    const char *name;
    double a, b;
  };
  Part parts[] = {{"compute", a.cost.computeSeconds, b.cost.computeSeconds},
                  {"tensor-parallel communication", a.cost.tpCommSeconds, b.cost.tpCommSeconds},
                  {"expert-parallel token exchange", a.cost.epCommSeconds, b.cost.epCommSeconds},
                  {"pipeline transfers", a.cost.ppCommSeconds, b.cost.ppCommSeconds},
                  {"context-parallel K/V exchange", a.cost.cpCommSeconds, b.cost.cpCommSeconds},
                  {"ZeRO-3 parameter gathers", a.cost.zeroGatherSeconds, b.cost.zeroGatherSeconds},
                  {"ZeRO-2/3 gradient reduce-scatters", a.cost.zeroReduceScatterSeconds,
                   b.cost.zeroReduceScatterSeconds},
                  {"exposed gradient reduction", a.cost.dpReduceSeconds, b.cost.dpReduceSeconds},
                  {"exposed parameter all-gather", a.cost.dpGatherSeconds, b.cost.dpGatherSeconds},
                  {"pipeline bubble", a.cost.bubbleSeconds, b.cost.bubbleSeconds},
                  {"optimizer", a.cost.optimizerSeconds, b.cost.optimizerSeconds}};
  std::sort(std::begin(parts), std::end(parts),
            [](const Part &x, const Part &y) { return std::abs(x.b - x.a) > std::abs(y.b - y.a); });
  std::ostringstream out;
  out.precision(3);
  out << "#1 beats " << label << " by " << std::fixed << (b.cost.stepSeconds - a.cost.stepSeconds)
      << " s/step: ";
  for (int i = 0; i < 2; ++i)
    if (i == 0 || std::abs(parts[i].b - parts[i].a) >= 0.0005) // a difference that prints
      out << (i ? "; " : "") << parts[i].name << " " << parts[i].a << " s vs " << parts[i].b
          << " s";
  if (std::string schedule = scheduleWhy(a, b, label); !schedule.empty())
    out << ". " << schedule;
  return out.str();
}

/// The winner's predicted step split by op class (`--explain`): kernels by class (the optimizer's
/// included), each tensor-parallel collective, pipeline sends, the exposed data-parallel
/// communication and the bubble. The lines sum to the step time.
std::string timeByClass(const planner::StepCost &c, const Layout &l,
                        const planner::StackProfile &stack) {
  // Context parallelism's exchange as the layout runs it on the stack (StackProfile.h).
  const char *cpLine = stack.runsContextParallelRing(l.cpRing)
                           ? "cp ring K/V transfers (exposed)"
                           : "cp K/V all-gather + dK/dV reduce-scatter";
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
               {"ep token exchange", c.epCommSeconds},
               {cpLine, c.cpCommSeconds},
               {"zero-3 parameter all-gathers (exposed)", c.zeroGatherSeconds},
               {"zero-2/3 grad reduce-scatters (exposed)", c.zeroReduceScatterSeconds},
               {"pipeline sends", c.ppCommSeconds},
               {"dp gradient reduction (exposed)", c.dpReduceSeconds},
               {"dp parameter all-gather (exposed)", c.dpGatherSeconds},
               {"pipeline bubble", c.bubbleSeconds}};
  std::ostringstream out;
  char text[160];
  std::snprintf(text, sizeof text, "predicted step time of #1 by op class (stack %s):\n",
                stack.name.c_str());
  out << text;
  for (const Line &l : lines) {
    std::snprintf(text, sizeof text, "  %-40s %10.4f s %6.1f%%\n", l.name, l.seconds,
                  100 * l.seconds / c.stepSeconds);
    out << text;
  }
  std::snprintf(text, sizeof text, "  %-40s %10.4f s\n", "total", c.stepSeconds);
  out << text;
  return out.str();
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The model with `rows` samples per micro-batch (a zoo spec's batch, an ONNX input_ids dim 0)
/// and the request's sequence length, through the input pipeline.
StatusOr<LoadedModel> loadRaised(mlir::MLIRContext &ctx, const PlanSearchRequest &r, int64_t rows,
                                 int64_t seq, llvm::raw_ostream &diagnostics) {
  ModelSource source = r.model;
  InputShapes shapes;
  if (const models::ModelConfig *model = r.model.config()) {
    models::ModelConfig config = *model;
    config.batch = rows;
    if (r.seq)
      config.seq = *r.seq;
    if (config.seq == 0) // hf:PATH without seq=
      return Status::error("--model " + r.model.text() + " needs --seq S or hf:PATH,seq=S");
    ASSIGN_OR_RETURN(source, r.model.bound(std::move(config)));
  } else if (seq > 0) {
    shapes["input_ids"] = {rows, seq};
  }
  ASSIGN_OR_RETURN(LoadedModel model, loadModel(ctx, source, shapes, diagnostics));
  if (mlir::failed(passes::runInputPipeline(*model.module)))
    return Status::error("cannot raise " + model.description + " to coarse ops");
  return model;
}

std::string headerText(const PlanSearchRequest &r, const planner::TransformerShape &s,
                       const planner::SearchResult &result, double readSeconds) {
  std::string moe;
  if (s.experts > 0) {
    double active = double(s.parameters) - double(s.layers) * (planner::layerParameters(s) -
                                                               planner::activeLayerParameters(s));
    moe = format(", %lld experts top-%lld (%s active)", (long long)s.experts, (long long)s.topk,
                 planner::humanParams(active).c_str());
  }
  return format("%s: %s parameters, %lld blocks, hidden %lld, heads %lld, seq %lld, vocab %lld%s\n",
                s.name.c_str(), planner::humanParams(double(s.parameters)).c_str(),
                (long long)s.layers, (long long)s.hidden, (long long)s.heads, (long long)s.seq,
                (long long)s.vocab, moe.c_str()) +
         format("cluster %s: %lld x %s, global batch %lld, %s, stack %s; %lld layouts evaluated "
                "in %.3f s (model read in %.3f s)\n\n",
                r.clusterSpec.c_str(), (long long)r.cluster.devices(),
                r.cluster.device.name.c_str(), (long long)r.globalBatch,
                precisionName(r.pins.precision), r.stack.name.c_str(), (long long)result.evaluated,
                result.seconds, readSeconds);
}

std::string jsonText(const PlanSearchRequest &r, const planner::TransformerShape &s,
                     const planner::SearchResult &result) {
  std::string out = format("{\"model\": \"%s\", \"cluster\": \"%s\", \"stack\": \"%s\", "
                           "\"devices\": %lld, \"global_batch\": %lld, \"evaluated\": %lld, "
                           "\"search_seconds\": %.6f, \"layouts\": [",
                           s.name.c_str(), r.clusterSpec.c_str(), r.stack.name.c_str(),
                           (long long)r.cluster.devices(), (long long)r.globalBatch,
                           (long long)result.evaluated, result.seconds);
  for (size_t i = 0; i < result.best.size(); ++i)
    out += (i ? ", " : "") + candidateJson(result.best[i]);
  out += "]";
  if (result.best.empty() && result.smallestMemory)
    out += ", \"smallest_memory\": " + candidateJson(*result.smallestMemory);
  return out + "}\n";
}

/// Nothing fits: what the smallest layout needs, and the first single change that fits.
std::string noFitText(const PlanSearchRequest &r, const planner::TransformerShape &s,
                      const planner::SearchResult &result) {
  // No layout is valid at all (dp cannot divide the batch, ...): say why, not that none fits.
  if (!result.smallestMemory && !result.why.empty())
    return "no layout of the " + std::to_string(r.cluster.devices()) +
           " devices is valid: " + result.why + "\n";
  std::string out = "no layout fits in " + gib(r.cluster.device.memoryBytes) + " per device.\n";
  if (!result.smallestMemory)
    return out;
  const planner::PlanCandidate &small = *result.smallestMemory;
  out += format("the smallest needs %s per device (%s): parameters %s, gradients %s, optimizer "
                "%s, activations %s.\n",
                gib(small.cost.totalBytes).c_str(), layoutText(small.layout).c_str(),
                gib(small.cost.parameterBytes).c_str(), gib(small.cost.gradientBytes).c_str(),
                gib(small.cost.optimizerBytes).c_str(), gib(small.cost.activationBytes).c_str());
  const Layout &l = small.layout;
  std::vector<std::pair<std::string, Layout>> fixes;
  auto with = [&](auto change) {
    Layout next = l;
    change(next);
    return next;
  };
  fixes.push_back({"--recompute full", with([](Layout &x) { x.recompute = Recompute::full; })});
  if (l.dp > 1)
    for (int zero : {1, 2, 3})
      if (l.zero < zero)
        fixes.push_back(
            {"--zero " + std::to_string(zero), with([zero](Layout &x) { x.zero = zero; })});
  if (l.dp % 2 == 0 && r.stack.supportsContextParallel && s.seq % (4 * l.cp) == 0)
    fixes.push_back({"--cp " + std::to_string(2 * l.cp), with([](Layout &x) {
                       x.cp *= 2;
                       x.dp /= 2;
                     })});
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
  if (s.experts > 0 && l.dp % (2 * l.ep) == 0 && s.experts % (2 * l.ep) == 0)
    fixes.push_back({"--ep " + std::to_string(2 * l.ep), with([](Layout &x) { x.ep *= 2; })});
  if (l.microBatch > 1)
    fixes.push_back({"--micro-batch " + std::to_string(l.microBatch / 2),
                     with([](Layout &x) { x.microBatch /= 2; })});
  for (auto &[flag, layout] : fixes) {
    std::string why;
    auto cost = planner::estimate(s, r.cluster, r.globalBatch, layout, &why, r.stack);
    if (cost && cost->fits)
      return out + format("%s would fit: %s per device (%s).\n", flag.c_str(),
                          gib(cost->totalBytes).c_str(), layoutText(layout).c_str());
  }
  return out + "no single change fits: more devices (--cluster) or a smaller model.\n";
}

/// ZeRO-3's reshard-after-forward choice of `c` (`what`: "#1", "the best zero-3 layout") against
/// the other setting of the same layout: the gathers kept saves and the memory it costs. The
/// search tries both where the step has the choice (zero 3 at pp = vpp = 1).
std::string reshardText(const PlanSearchRequest &r, const planner::TransformerShape &s,
                        const planner::PlanCandidate &c, const char *what) {
  const Layout &l = c.layout;
  if (l.zero != 3)
    return {};
  if (l.pp * l.vpp > 1)
    return format("    %s gathers each parameter again in its backward chunk: a pipeline chunk's "
                  "forward and backward are two functions, so reshard after forward is no "
                  "choice there\n",
                  what);
  Layout other = l;
  other.reshardAfterForward = !l.reshardAfterForward;
  std::string why;
  std::optional<planner::StepCost> alt =
      planner::estimate(s, r.cluster, r.globalBatch, other, &why, r.stack);
  const char *chosen = l.reshardAfterForward ? "on" : "off";
  if (!alt)
    return format("    %s: reshard after forward %s (the other setting: %s)\n", what, chosen,
                  why.c_str());
  const planner::StepCost &keep = l.reshardAfterForward ? *alt : c.cost;
  const planner::StepCost &regather = l.reshardAfterForward ? c.cost : *alt;
  std::string verdict;
  if (l.reshardAfterForward && !keep.fits)
    verdict = format("kept, they would not fit (%s > %s)", gib(keep.totalBytes).c_str(),
                     gib(r.cluster.device.memoryBytes).c_str());
  else
    verdict =
        format("%s s/step %s vs %s s/step %s%s", format("%.4f", c.cost.stepSeconds).c_str(),
               l.reshardAfterForward ? "re-gathering" : "keeping",
               format("%.4f", alt->stepSeconds).c_str(),
               l.reshardAfterForward ? "keeping" : "re-gathering",
               l.reshardAfterForward ? " (the search keeps them only for a 1% faster step)" : "");
  return format("    %s: reshard after forward %s (--reshard-after-forward %s): keeping the "
                "forward's gathered parameters for the backward saves %.3f s of exposed gathers "
                "(%.3f s vs %.3f s) for %s more per GPU (%s vs %s); %s\n",
                what, chosen, chosen, regather.zeroGatherSeconds - keep.zeroGatherSeconds,
                keep.zeroGatherSeconds, regather.zeroGatherSeconds,
                gib(keep.totalBytes - regather.totalBytes).c_str(), gib(keep.totalBytes).c_str(),
                gib(regather.totalBytes).c_str(), verdict.c_str());
}

std::string bestText(const PlanSearchRequest &r, const planner::TransformerShape &s,
                     const planner::SearchResult &result) {
  std::string out = tableText(result.best);
  const planner::StepCost &w = result.best.front().cost;
  out += format("\n#1: compute %.3f s, tp comm %.3f s, pp comm %.3f s, exposed dp comm %.3f s, "
                "bubble %.3f s, optimizer %.3f s",
                w.computeSeconds, w.tpCommSeconds, w.ppCommSeconds, w.dpCommSeconds,
                w.bubbleSeconds, w.optimizerSeconds);
  if (w.epCommSeconds > 0)
    out += format(", ep token exchange %.3f s", w.epCommSeconds);
  out += "\n";
  out += format("    memory: parameters %s, gradients %s, optimizer %s, activations %s, "
                "workspace %s\n",
                gib(w.parameterBytes).c_str(), gib(w.gradientBytes).c_str(),
                gib(w.optimizerBytes).c_str(), gib(w.activationBytes).c_str(),
                gib(w.workspaceBytes).c_str());
  if (const planner::DeviceSpec &d = r.cluster.device; d.cacheBytes > 0 && d.calibration.cores > 0)
    out += format("    cache: training state %.0f MB a rank x %lld ranks per node %s the %.0f MB "
                  "last-level cache: %s\n",
                  w.trainingStateBytes / 1e6, static_cast<long long>(d.devicesPerNode),
                  w.trainingStateBytes * double(d.devicesPerNode) > d.cacheBytes ? ">" : "<=",
                  d.cacheBytes / 1e6,
                  w.weightsInMemory ? "weights and their gradients stream from memory"
                                    : "weights costed at the cached tables' rates");
  if (!w.dominant.empty()) {
    out += "    dominant:";
    for (const std::string &d : w.dominant)
      out += " " + d + ";";
    out += "\n";
  }
  if (result.best.size() > 1)
    out += "    " + whyBetter(result.best[0], result.best[1]) + "\n";
  // The choices issues 31 and 32 ask the planner to justify: ZeRO-3 (FSDP) and context
  // parallelism, each against #1 when #1 did not pick it.
  const planner::PlanCandidate &win = result.best.front();
  auto against = [&](const std::optional<planner::PlanCandidate> &other, const char *what) {
    if (!other)
      return;
    if (other->layout.zero == win.layout.zero && other->layout.cp == win.layout.cp &&
        other->layout.schedule == win.layout.schedule && other->cost.stepSeconds == w.stepSeconds)
      return;
    out += format("    best %s: %s, %.3f s, %s; ", what, layoutText(other->layout).c_str(),
                  other->cost.stepSeconds, gib(other->cost.totalBytes).c_str()) +
           whyBetter(win, *other, "it") + "\n";
  };
  if (win.layout.zero == 3) {
    out += "    #1 shards parameters, gradients and optimizer state (zero 3)\n";
    out += reshardText(r, s, win, "#1");
  } else {
    against(result.bestZero3, "zero-3 layout");
    if (result.bestZero3)
      out += reshardText(r, s, *result.bestZero3, "the best zero-3 layout");
  }
  if (win.layout.cp > 1)
    against(result.bestWithoutCp, "layout without cp");
  else
    against(result.bestWithCp, "layout with cp");
  // The cp exchange (--cp-comm-type): why #1's beats the other variant's best layout.
  if (win.layout.cp > 1 && result.bestOtherCpVariant)
    against(result.bestOtherCpVariant,
            win.layout.cpRing ? "layout with cp all_gather" : "layout with the cp ring (p2p)");
  // Zero-bubble schedules (issue 35): why #1 does not run one, when it pipelines.
  if (win.layout.pp > 1 && !schedule::splitsBackward(win.layout.pipelineSchedule()))
    against(result.bestZeroBubble, "zero-bubble layout");
  if (r.explain)
    out += "\n" + timeByClass(w, win.layout, r.stack);
  return out;
}

/// The winner's pipeline, drawn and traced from the same schedule generator the runtime runs.
Status writeTimeline(const PlanSearchRequest &r, const planner::PlanCandidate &win) {
  const Layout &l = win.layout;
  schedule::ScheduleKind kind = l.pipelineSchedule();
  schedule::PipelineShape pipe{l.pp, l.vpp, r.globalBatch / (l.microBatch * l.dp),
                               schedule::placementOf(kind)};
  std::string why;
  auto steps = schedule::buildSchedule(kind, pipe, &why);
  if (!steps)
    return Status::error("the winner's schedule: " + why);
  double chunks = double(l.pp * l.vpp);
  double forward =
      win.cost.computeSeconds / double(pipe.microBatches) / 3.0 * double(l.pp) / chunks;
  // A zero-bubble schedule draws B and W: W the estimate's weight-gradient share of a backward.
  double weight = 0;
  if (schedule::splitsBackward(kind) && win.cost.chunkBackwardSeconds > 0)
    weight = 2 * forward * win.cost.chunkWeightSeconds / win.cost.chunkBackwardSeconds;
  planner::Timeline timeline = planner::simulateTimeline(
      pipe, *steps, {{forward}, {2 * forward}, 0.0, {weight}}, schedule::scheduleName(kind));
  if (!timeline.error.empty())
    return Status::error("the winner's timeline: " + timeline.error);
  std::string subtitle = layoutText(l) + " on " + r.clusterSpec;
  for (auto [path, svg] : {std::pair{&r.timelinePath, true}, {&r.tracePath, false}})
    if (*path) { // checked to the close: a stream's buffered bytes failed only there, unseen
      std::string text =
          svg ? planner::timelineSvg(timeline, subtitle) : planner::chromeTrace(timeline);
      std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(text.data()), text.size());
      RETURN_IF_ERROR(writeFileAtomically(**path, {&piece, 1}))
          << (svg ? " (--timeline)" : " (--trace)");
    }
  return Status::ok();
}

/// The winner's training step compiled as `megac train` would (with --explain down to the plan,
/// explained with predicted collective times; without, one sample per micro-batch and no data
/// parallelism, which is quick).
Status confirmWinner(const PlanSearchRequest &r, const planner::TransformerShape &s,
                     const planner::PlanCandidate &win, std::optional<LoadedModel> model,
                     mlir::MLIRContext &ctx, const Emit &emit, llvm::raw_ostream &diagnostics) {
  const Layout &l = win.layout;
  int64_t rows = r.explain ? l.microBatch * l.dp : 1;
  if (r.explain) {
    ASSIGN_OR_RETURN(
        model, loadRaised(ctx, r, rows, r.model.file() ? r.seq.value_or(s.seq) : 0, diagnostics));
  }
  passes::TrainingOptions options;
  options.lossKind = lossKindOf(r.model);
  options.layout = l;
  options.layout.dp = r.explain ? l.dp : 1;
  options.layout.zero = r.explain ? l.zero : 0;
  options.layout.reshardAfterForward = !r.explain || l.reshardAfterForward;
  options.layout.ep = r.explain ? l.ep : 1; // ep is carved out of dp
  // The quick check compiles one dp rank of one cp rank's role: tp, pp and vpp are what the
  // partitioner must accept; --explain compiles the whole layout.
  options.layout.cp = r.explain ? l.cp : 1;
  options.layout.cpRing = r.explain && l.cpRing;
  int64_t microBatches = r.globalBatch / (l.microBatch * l.dp);
  options.layout.microBatches = r.explain ? microBatches : 1;
  auto start = std::chrono::steady_clock::now();
  if (mlir::failed(passes::buildTrainingStep(*model->module, options)))
    return Status::error("the winner (" + layoutText(l) + ") does not compile (see above)");
  std::string ep = options.layout.ep > 1 ? format(" ep=%lld", (long long)options.layout.ep) : "";
  emit(format("    the partitioner accepts #1 (tp=%lld pp=%lld vpp=%lld%s%s): compiled in %.2f s\n",
              (long long)l.tp, (long long)l.pp, (long long)l.vpp, ep.c_str(),
              l.sequenceParallel ? " sp" : "", secondsSince(start)));
  if (!r.explain)
    return Status::ok();
  codegen::CodegenOptions codegenOptions;
  codegenOptions.microBatches = microBatches;
  auto bytes = codegen::writePlan(*model->module, codegenOptions);
  if (mlir::failed(bytes))
    return Status::error("cannot write the winner's plan (see above)");
  ASSIGN_OR_RETURN(runtime::LoadedPlan plan, runtime::loadPlanFromBytes(std::move(*bytes)));
  const planner::Cluster &c = r.cluster;
  CommPredictor predict = [&c](const std::string &op, int64_t size, int64_t stride,
                               uint64_t bytes) {
    if (op == "Send" || op == "Recv")
      return planner::p2pSeconds(c, stride >= c.device.devicesPerNode, double(bytes));
    planner::Collective kind = op == "AllGather"              ? planner::Collective::allGather
                               : op == "ReduceScatter"        ? planner::Collective::reduceScatter
                               : op.rfind("AllToAll", 0) == 0 ? planner::Collective::allToAll
                                                              : planner::Collective::allReduce;
    // An all-gather's input is one shard; the model takes the whole buffer.
    double whole = op == "AllGather" ? double(bytes) * double(size) : double(bytes);
    return planner::collectiveSeconds(c, kind, size, stride, whole);
  };
  emit("\n" + explainPlan(plan, predict));
  return Status::ok();
}

} // namespace

/// The routed rows per block and expert of a `megac train --log-json` file: every step record's
/// moe_load, summed. Errors name the file, the line and what does not match the model.
StatusOr<std::vector<std::vector<double>>> readMoeLoad(const std::string &path,
                                                       const planner::TransformerShape &s) {
  const std::string what = "--moe-load " + path;
  if (s.experts <= 0)
    return Status::error(what + ": applies to a mixture-of-experts model; " + s.name +
                         " has no experts");
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "the MoE load log"));
  std::string text(bytes.begin(), bytes.end());
  std::vector<std::vector<double>> sum;
  std::istringstream lines(text);
  std::string line;
  int64_t number = 0, records = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    StatusOr<json::Value> record = json::parse(line);
    if (!record.isOk())
      return Status::error(what + ":" + std::to_string(number) + ": not a JSON step record (" +
                           record.status().message() + ")");
    const json::Value *load = record->find("moe_load");
    if (!load)
      continue; // a record of another kind (an evaluation line)
    std::string where = what + ":" + std::to_string(number) + ": moe_load ";
    if (load->kind != json::Value::Kind::array || int64_t(load->items.size()) != s.layers)
      return Status::error(where + "does not have one entry per block (" + s.name + " has " +
                           std::to_string(s.layers) + ")");
    sum.resize(load->items.size(), std::vector<double>(size_t(s.experts), 0.0));
    for (size_t b = 0; b < load->items.size(); ++b) {
      const json::Value &experts = load->items[b];
      if (experts.kind != json::Value::Kind::array || int64_t(experts.items.size()) != s.experts)
        return Status::error(where + "block " + std::to_string(b) + " does not list " +
                             std::to_string(s.experts) + " experts (the model's)");
      for (size_t x = 0; x < experts.items.size(); ++x) {
        const json::Value &rows = experts.items[x];
        if (rows.kind != json::Value::Kind::number || !(rows.number >= 0))
          return Status::error(where + "block " + std::to_string(b) + ", expert " +
                               std::to_string(x) + ": not a count of routed rows");
        sum[b][x] += rows.number;
      }
    }
    ++records;
  }
  if (records == 0)
    return Status::error(what + ": no step record with a moe_load (expected the --log-json "
                                "file of `megac train` on this mixture-of-experts model)");
  return sum;
}

StatusOr<planner::StackProfile> resolveStack(const std::optional<std::string> &name,
                                             const planner::Cluster &cluster) {
  std::optional<planner::StackProfile> profile =
      name ? planner::stackProfile(*name, cluster.device.name == "cpu" ||
                                              cluster.device.calibration.threads > 0)
           : planner::defaultStack(cluster);
  if (profile)
    return *profile;
  std::string names;
  for (const std::string &n : planner::stackNames())
    names += (names.empty() ? "" : ", ") + n;
  return Status::error("'" + *name + "' is not a known software stack (" + names + ")");
}

StatusOr<bool> searchLayouts(const PlanSearchRequest &r, const Emit &emit,
                             llvm::raw_ostream &diagnostics) {
  // The model, one sample per micro-batch: the planner scales it.
  auto start = std::chrono::steady_clock::now();
  mlir::MLIRContext ctx;
  ASSIGN_OR_RETURN(LoadedModel model,
                   loadRaised(ctx, r, 1, r.model.file() ? r.seq.value_or(0) : 0, diagnostics));
  planner::ModelShapeResult shape = planner::computeModelShape(*model.module, model.description);
  if (!shape.shape)
    return Status::error(model.description + ": " + shape.error);
  double readSeconds = secondsSince(start);
  if (r.dropout)
    shape.shape->dropout = *r.dropout;
  if (r.moeLoadPath) {
    ASSIGN_OR_RETURN(shape.shape->moeLoad, readMoeLoad(*r.moeLoadPath, *shape.shape));
  }
  const planner::TransformerShape &s = *shape.shape;
  planner::SearchResult result =
      planner::search(s, r.cluster, r.globalBatch, r.pins, r.top, r.stack);
  if (r.json) {
    emit(jsonText(r, s, result));
  } else {
    emit(headerText(r, s, result, readSeconds));
    if (result.best.empty()) {
      emit(noFitText(r, s, result));
      return false;
    }
    emit(bestText(r, s, result));
  }
  if (result.best.empty())
    return false;
  const planner::PlanCandidate &win = result.best.front();
  if (r.timelinePath || r.tracePath)
    RETURN_IF_ERROR(writeTimeline(r, win));
  if (r.compile && !r.json)
    RETURN_IF_ERROR(confirmWinner(r, s, win, std::move(model), ctx, emit, diagnostics));
  return true;
}

} // namespace megac::driver
