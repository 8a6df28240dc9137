// `megac plan`: with --cluster the planner (driver/PlanSearch.h); with a layout (--ranks N ...)
// the partitioned training step's plan for every rank, compiled exactly as `megac train` with
// the same flags would, explained or written, never run. `megac compile` with a layout is the
// latter too.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"
#include "tools/megac/RunFlags.h"

#include "driver/Compile.h"
#include "driver/PlanExplain.h"
#include "driver/PlanFile.h"
#include "driver/PlanSearch.h"

#include <cstdio>
#include <string_view>

namespace megac::cli {

namespace {

/// The planner's flags into a request; a one-line error for a bad command line.
std::string searchRequest(Flags &f, driver::PlanSearchRequest &r,
                          const std::optional<std::string> &spec, const std::string &cluster,
                          const std::optional<std::string> &stack,
                          const std::optional<std::string> &zero, bool sp, bool noSp) {
  if (f.positional().size() > 1)
    return "give one model file";
  std::optional<std::string> file;
  if (!f.positional().empty())
    file = f.positional().front();
  if (spec.has_value() == file.has_value())
    return "give either --model SPEC or a model file (.onnx, .mlir)";
  std::string why;
  std::optional<planner::Cluster> parsed = planner::parseCluster(cluster, &why);
  if (!parsed)
    return "--cluster: " + why;
  r.cluster = *parsed;
  r.clusterSpec = cluster;
  if (sp || noSp)
    r.pins.sequenceParallel = sp;
  if (zero) {
    r.pins.zero = std::stoi(*zero);
    // ZeRO-2/3 shard over the data-parallel ranks: with dp pinned to 1 there are none.
    if (*r.pins.zero >= 2 && r.pins.dp == 1)
      return "--zero " + *zero + " shards gradients" +
             (*r.pins.zero == 3 ? " and parameters" : "") +
             " over the data-parallel ranks, but --dp is 1; use --zero 0 or a --dp > 1";
  }
  if (!f.given("--global-batch"))
    return "missing --global-batch B (samples per optimizer step)";
  StatusOr<planner::StackProfile> profile = driver::resolveStack(stack, r.cluster);
  if (!profile.isOk())
    return "--stack: " + profile.status().message();
  r.stack = *profile;
  StatusOr<driver::ModelSource> model = driver::ModelSource::parse(spec, file);
  if (!model.isOk())
    return model.status().message();
  r.model = std::move(model).value();
  return {};
}

int searchCommand(int argc, char **argv) {
  Flags f("megac plan", kPlanHelp);
  driver::PlanSearchRequest r;
  std::optional<std::string> spec, cluster, stack, timeline, trace, moeLoad;
  std::string zero, recompute, precision = "bf16", cpCommType;
  std::vector<std::string> inputShapes;
  std::string scheduleName;    // --schedule: a Pins::schedule
  std::string reshard;         // --reshard-after-forward on|off: ZeRO-3's choice pinned
  std::string overlap = "off"; // --overlap on|off: the compiled plan's latency hiding
  int64_t bucketSize = 0;      // --bucket-size N: the plan's dp buckets (0: Megatron's default)
  int64_t threads = 0, seq = 0, top = 5, tp = 0, pp = 0, dp = 0, ep = 0, cp = 0, vpp = 0,
          microBatch = 0;
  double dropout = 0;
  bool sp = false, noSp = false, noCompile = false;
  f.text("--model", spec, "SPEC").text("--cluster", cluster, "SPEC");
  f.count("--global-batch", r.globalBatch, 1, "B").count("--seq", seq, 1, "S");
  f.count("--tp", tp, 1, "T").count("--pp", pp, 1, "P").count("--dp", dp, 1, "D");
  f.count("--ep", ep, 1, "E").count("--cp", cp, 1, "C");
  f.choice("--cp-comm-type", cpCommType, {"all_gather", "p2p"});
  f.count("--vpp", vpp, 1, "V").count("--micro-batch", microBatch, 1, "b");
  f.choice("--zero", zero, {"0", "1", "2", "3"})
      .choice("--recompute", recompute, {"none", "selective", "full"});
  f.choice("--schedule", scheduleName, {"1f1b", "interleaved", "zb-h1", "zb-h2", "zbv"});
  f.choice("--precision", precision, {"bf16", "fp16", "fp32"});
  f.count("--threads", threads, 1, "T")
      .count("--top", top, 1, "K", 1 << 20)
      .text("--timeline", timeline, "FILE.svg");
  f.text("--trace", trace, "FILE.json").repeated("--input-shape", inputShapes, "NAME=DIMS");
  f.text("--stack", stack, "NAME").text("--moe-load", moeLoad, "TRAIN.jsonl");
  f.number(
      "--dropout", dropout, [](double p) { return p >= 0 && p < 1; }, "a probability in [0, 1)",
      "P");
  f.flag("--json", r.json).flag("--explain", r.explain).flag("--sequence-parallel", sp);
  f.flag("--no-sequence-parallel", noSp).flag("--no-compile", noCompile);
  f.choice("--reshard-after-forward", reshard, {"on", "off"});
  f.choice("--overlap", overlap, {"off", "on"}).count("--bucket-size", bucketSize, 1, "N");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  for (auto [name, value, pin] : {std::tuple{"--tp", tp, &r.pins.tp},
                                  {"--pp", pp, &r.pins.pp},
                                  {"--dp", dp, &r.pins.dp},
                                  {"--ep", ep, &r.pins.ep},
                                  {"--cp", cp, &r.pins.cp},
                                  {"--vpp", vpp, &r.pins.vpp},
                                  {"--micro-batch", microBatch, &r.pins.microBatch}})
    if (f.given(name))
      *pin = value;
  if (f.given("--recompute"))
    r.pins.recompute = *parseRecompute(recompute);
  if (f.given("--schedule"))
    r.pins.schedule = scheduleName == "interleaved" ? schedule::ScheduleKind::interleaved
                                                    : *schedule::parseScheduleKind(scheduleName);
  if (f.given("--reshard-after-forward"))
    r.pins.reshardAfterForward = reshard == "on";
  if (f.given("--cp-comm-type")) {
    if (f.given("--cp") && cp == 1)
      return f.usage("--cp-comm-type applies with --cp C > 1 (context parallelism)");
    r.pins.cpRing = cpCommType == "p2p";
  }
  r.pins.precision = *parsePrecision(precision);
  if (f.given("--seq"))
    r.seq = seq;
  if (f.given("--dropout"))
    r.dropout = dropout;
  r.moeLoadPath = moeLoad;
  r.top = int(top);
  r.compile = !noCompile;
  r.timelinePath = timeline;
  r.tracePath = trace;
  if (std::string e =
          searchRequest(f, r, spec, cluster.value_or(""), stack,
                        f.given("--zero") ? std::optional(zero) : std::nullopt, sp, noSp);
      !e.empty())
    return f.usage(e);
  // The plan's options the megac stack's overlap follows (StackProfile::overlapFollowsPlan).
  r.stack.latencyHiding = overlap == "on";
  r.stack.bucketSize = bucketSize;
  // CPU kernel threads per rank of the planned layouts: the calibration's occupancy
  // (planner/Calibration.h, calibrationFor).
  r.cluster.device.threadsPerRank = threads;
  StatusOr<bool> found = driver::searchLayouts(r, [](const std::string &text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  });
  if (!found.isOk())
    return fail("megac plan", found.status().message());
  return *found ? 0 : 1;
}

/// The plan of every rank of a layout: explained (--explain, --json) and/or written (-o).
int layoutPlan(int argc, char **argv, const char *command, const char *help) {
  Flags f(command, help);
  RunFlags run;
  run.declare(f);
  bool explain = false, json = false;
  std::optional<std::string> out;
  f.flag("--explain", explain).flag("--json", json).text("-o,--output", out, "FILE.mplan");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (std::string e = run.configure(f, /*planOnly=*/true); !e.empty())
    return f.usage(e);
  StatusOr<driver::TrainModel> model = driver::compileRunPlan(run.config);
  if (!model.isOk())
    return fail(command, model.status().message());
  StatusOr<driver::LoadedPlan> plan = driver::loadCompiledPlan(model->plan, model->description);
  if (!plan.isOk())
    return fail(command, plan.status().message());
  if (out)
    if (Status s = driver::writePlanFile(*out, model->plan); !s.isOk())
      return fail(command, "cannot write " + *out);
  if (json)
    std::fputs(driver::explainPlanJson(*plan).c_str(), stdout);
  else if (explain || !out)
    std::fputs(driver::explainPlan(*plan).c_str(), stdout);
  return 0;
}

} // namespace

int planCommand(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string_view(argv[i]) == "--cluster" ||
        std::string_view(argv[i]).starts_with("--cluster="))
      return searchCommand(argc, argv);
  return layoutPlan(argc, argv, "megac plan", kPlanHelp);
}

bool hasLayoutFlag(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    for (const char *flag :
         {"--ranks", "--tp", "--pp", "--dp", "--vpp", "--cp", "--zero", "--sequence-parallel",
          "--recompute", "--schedule", "--reshard-after-forward"}) {
      std::string_view arg = argv[i];
      if (arg == flag || arg.starts_with(std::string(flag) + "="))
        return true;
    }
  return false;
}

int compileWithLayout(int argc, char **argv) {
  return layoutPlan(argc, argv, "megac compile", kCompileHelp);
}

} // namespace megac::cli
