// The layout search (planner/Planner.h): enumerate the layouts the pins allow, prune by memory
// and by dominance before computing times, rank the fitting ones by predicted step time.
#include "planner/CostModel.h"

#include <algorithm>
#include <chrono>
#include <string>

namespace megac::planner {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      out.push_back(d);
  return out;
}

template <typename T> std::vector<T> pinnedOr(const std::optional<T> &pin, std::vector<T> all) {
  if (pin)
    return {*pin};
  return all;
}

/// The choices left for one (tp, pp, dp).
struct Choices {
  std::vector<int64_t> eps, vpps, microBatches;
  std::vector<bool> sps;
  std::vector<int> zeros;
  std::vector<Recompute> recomputes;
};

class Searcher {
public:
  Searcher(const TransformerShape &shape, const Cluster &cluster, int64_t globalBatch,
           const Pins &pins, int topK, const StackProfile &stack)
      : shape_(shape), cluster_(cluster), globalBatch_(globalBatch), pins_(pins),
        topK_(std::max(1, topK)), estimator_(shape, cluster, globalBatch, stack),
        replicatesKvHeads_(stack.replicatesKvHeads), expertParallel_(stack.supportsExpertParallel),
        contextParallel_(stack.supportsContextParallel), stack_(stack),
        zeroBubble_(stack.zeroBubbleSchedules), stackName_(stack.name) {}

  SearchResult run() {
    int64_t devices = cluster_.devices();
    if (shape_.layers < 1 || shape_.heads < 1 || globalBatch_ < 1 || devices < 1) {
      result_.why = "model shape, global batch and cluster size must be positive";
      return result_;
    }
    // A zero-bubble pin the stack cannot run, or with one pipeline stage: nothing to search.
    if (pins_.schedule && schedule::splitsBackward(*pins_.schedule)) {
      std::string name = schedule::scheduleName(*pins_.schedule);
      if (!zeroBubble_) {
        result_.why = "the " + stackName_ +
                      " stack has no zero-bubble schedules; use --schedule "
                      "1f1b (" +
                      name + " runs on megac's own stack)";
        return result_;
      }
      if (pins_.pp == 1) {
        result_.why = "--schedule " + name + " needs pipeline stages: pp > 1, not 1";
        return result_;
      }
    }
    // tp divides the heads and ffn (and the kv heads, unless the stack replicates them) and
    // stays in a node unless pinned; pp divides
    // the layers (whole blocks per stage, as Megatron requires).
    int64_t kvHeads = shape_.kvHeads > 0 ? shape_.kvHeads : shape_.heads;
    int64_t ffn = shape_.ffn > 0 ? shape_.ffn : 4 * shape_.hidden;
    std::vector<int64_t> tps;
    for (int64_t t : divisors(shape_.heads))
      if ((kvHeads % t == 0 || (replicatesKvHeads_ && kvReplicas(shape_, t) > 0)) && ffn % t == 0 &&
          t <= cluster_.device.devicesPerNode)
        tps.push_back(t);
    // cp: divisors of the devices whose double divides the sequence (two load-balanced chunks
    // per rank), on stacks with context parallelism. Enumerated from the sequence, not the
    // device count: a hostile cluster of 10^18 devices must not make this loop 10^18 times.
    std::vector<int64_t> cps{1};
    if (contextParallel_ && shape_.seq >= 2 && shape_.seq % 2 == 0)
      for (int64_t c : divisors(shape_.seq / 2))
        if (c > 1 && devices % c == 0)
          cps.push_back(c);
    for (int64_t tp : pinnedOr(pins_.tp, tps))
      for (int64_t pp : pinnedOr(pins_.pp, divisors(shape_.layers)))
        for (int64_t cp : pinnedOr(pins_.cp, cps))
          searchDegrees(tp, pp, cp);
    // The best of the cp variant #1's best cp layout did not use, for the report.
    if (result_.bestWithCp) {
      bool ring = result_.bestWithCp->layout.cpRing;
      result_.bestOtherCpVariant = ring ? bestCpVariant_[0] : bestCpVariant_[1];
    }

    if (result_.best.empty() && smallest_) {
      if (std::optional<StepCost> cost = estimator_.estimate(*smallest_, nullptr)) {
        ++result_.evaluated;
        result_.smallestMemory = PlanCandidate{*smallest_, *cost};
      }
    }
    // The layouts reported, estimated again with their GEMMs listed (the search leaves them out).
    estimator_.listGemms(true);
    for (std::optional<PlanCandidate> *c :
         {&result_.smallestMemory, &result_.bestZero3, &result_.bestWithCp, &result_.bestWithoutCp,
          &result_.bestZeroBubble, &result_.bestOtherCpVariant})
      if (*c)
        listGemmsOf(**c);
    for (PlanCandidate &c : result_.best)
      listGemmsOf(c);
    if (result_.best.empty() && !result_.smallestMemory)
      result_.why = firstInvalid_.empty()
                        ? "no layout of " + std::to_string(devices) + " devices satisfies the pins"
                        : firstInvalid_;
    return result_;
  }

private:
  void listGemmsOf(PlanCandidate &c) {
    if (std::optional<StepCost> cost = estimator_.estimate(c.layout, nullptr)) {
      c.cost.gemmShapes = std::move(cost->gemmShapes);
      c.cost.firstStage = std::move(cost->firstStage);
      c.cost.lastStage = std::move(cost->lastStage);
      c.cost.middleStage = std::move(cost->middleStage);
    }
  }

  /// Records why a layout is invalid. A `deep` reason (a layout whose degrees divide the
  /// devices and the batch, refused by the estimator) says more than a degree's, so it wins.
  void invalid(std::string why, bool deep = false) {
    if (firstInvalid_.empty() || (deep && !deepInvalid_)) {
      firstInvalid_ = std::move(why);
      deepInvalid_ = deep;
    }
  }

  void considerMemory(const Layout &l, const StepCost &memory) {
    if (!smallest_ || memory.totalBytes < smallestBytes_) {
      smallest_ = l;
      smallestBytes_ = memory.totalBytes;
    }
  }

  Choices choices(int64_t tp, int64_t pp, int64_t dp) const {
    Choices c;
    // Expert parallelism: ep divides dp and the experts (MoE models on stacks that have it).
    for (int64_t e : divisors(dp))
      if (e == 1 || (shape_.experts > 0 && expertParallel_ && shape_.experts % e == 0))
        c.eps.push_back(e);
    c.eps = pinnedOr(pins_.ep, c.eps);
    for (int64_t v = 1; pp * v <= shape_.layers; v *= 2)
      if (shape_.layers % (pp * v) == 0 && (v == 1 || pp > 1))
        c.vpps.push_back(v);
    c.vpps = pinnedOr(pins_.vpp, c.vpps);
    for (int64_t b = 1; b <= globalBatch_ / dp; b *= 2)
      if ((globalBatch_ / dp) % b == 0)
        c.microBatches.push_back(b);
    c.microBatches = pinnedOr(pins_.microBatch, c.microBatches);
    // Sequence parallelism dominates its absence in this model (the same collective bytes,
    // 1/tp of the norm and residual work, of the activations and of the pipeline sends), so
    // it is only off when pinned off or tp = 1.
    c.sps = pinnedOr(pins_.sequenceParallel, std::vector<bool>{tp > 1});
    c.zeros = pinnedOr(pins_.zero, dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0});
    c.recomputes =
        pinnedOr(pins_.recompute,
                 std::vector<Recompute>{Recompute::none, Recompute::selective, Recompute::full});
    return c;
  }

  /// cp's K/V exchange variants to try (Layout::cpRing): each the stack runs, or the pinned
  /// one; none when the pin asks for one the stack lacks. cp 1 has no exchange: one choice.
  std::vector<bool> cpVariants(int64_t cp) {
    if (cp == 1)
      return {false};
    std::vector<bool> out;
    if (stack_.contextParallelAllGatherKv)
      out.push_back(false);
    if (stack_.contextParallelRing)
      out.push_back(true);
    if (out.empty()) // a stack with cp but no variant named: what it runs
      out.push_back(stack_.runsContextParallelRing(false));
    if (!pins_.cpRing)
      return out;
    if (std::find(out.begin(), out.end(), *pins_.cpRing) == out.end()) {
      invalid(
          "the " + stack_.name + " stack has no " +
          (*pins_.cpRing ? "ring (--cp-comm-type p2p)" : "all-gather (--cp-comm-type all_gather)") +
          " for context parallelism; use --cp-comm-type " + (*pins_.cpRing ? "all_gather" : "p2p"));
      return {};
    }
    return {*pins_.cpRing};
  }

  // Memory lower bound of a (tp, pp): the most frugal choices. If even that does not fit,
  // nothing with this tp and pp does (memory grows with vpp, micro-batch, less recompute, no SP
  // and no ZeRO); it still competes as the smallest-memory layout. Each cp variant is tried
  // (the ring holds less at large cp, megac's more at cp 2).
  bool frugalFits(int64_t tp, int64_t pp, int64_t dp, int64_t cp, const Choices &c,
                  const std::vector<bool> &variants) {
    bool fits = false;
    for (bool ring : variants)
      fits = frugalFits(tp, pp, dp, cp, c, ring) || fits;
    return fits;
  }
  bool frugalFits(int64_t tp, int64_t pp, int64_t dp, int64_t cp, const Choices &c, bool ring) {
    if (c.vpps.empty() || c.microBatches.empty())
      return false;
    if (c.eps.empty())
      return false;
    Layout l{tp,
             pp,
             dp,
             *std::min_element(c.vpps.begin(), c.vpps.end()),
             *std::min_element(c.microBatches.begin(), c.microBatches.end()),
             std::find(c.sps.begin(), c.sps.end(), true) != c.sps.end(),
             *std::max_element(c.zeros.begin(), c.zeros.end()),
             c.recomputes.back(),
             pins_.precision};
    l.ep = *std::max_element(c.eps.begin(), c.eps.end()); // the least expert memory
    // 1F1B holds the fewest micro-batches (zb-h1 and zbv as many, zb-h2 2p - 1); a pinned
    // schedule the least vpp cannot run leaves memory() invalid, and the enumeration says why.
    if (pins_.schedule && *pins_.schedule != ScheduleKind::interleaved)
      l.schedule = *pins_.schedule;
    l.cp = cp;
    l.cpRing = ring;
    std::optional<StepCost> memory = estimator_.memory(l, nullptr);
    if (!memory)
      return true; // invalid here; the full enumeration says why
    considerMemory(l, *memory);
    return memory->fits;
  }

  void searchDegrees(int64_t tp, int64_t pp, int64_t cp) {
    int64_t devices = cluster_.devices();
    const char *product = cp > 1 ? "tp*cp*pp" : "tp*pp";
    if (tp < 1 || pp < 1 || cp < 1 || devices % (tp * pp * cp))
      return invalid(std::string(product) + " = " + std::to_string(tp * pp * cp) +
                     " does not divide the " + std::to_string(devices) + " devices");
    int64_t dp = devices / (tp * pp * cp);
    if (pins_.dp && *pins_.dp != dp)
      return invalid("dp " + std::to_string(*pins_.dp) + " != devices/(" + product +
                     ") = " + std::to_string(dp));
    if (globalBatch_ % dp)
      return invalid("dp " + std::to_string(dp) + " does not divide the global batch " +
                     std::to_string(globalBatch_));
    Choices c = choices(tp, pp, dp);
    std::vector<bool> variants = cpVariants(cp);
    if (variants.empty() || !frugalFits(tp, pp, dp, cp, c, variants))
      return;
    for (bool ring : variants)
      for (int64_t ep : c.eps)
        for (int64_t vpp : c.vpps)
          for (int64_t b : c.microBatches)
            for (bool sp : c.sps)
              for (int zero : c.zeros) {
                Layout l{tp, pp, dp, vpp, b, sp, zero, Recompute::none, pins_.precision};
                l.ep = ep;
                l.cp = cp;
                l.cpRing = ring;
                trySchedules(l, c.recomputes);
              }
  }

  /// Each pipeline schedule (Layout::schedule) `l` may run: 1F1B (interleaved at vpp > 1)
  /// always, and where the stack has them and the schedule library accepts the shape
  /// (micro-batches >= pp), zb-h1 and zb-h2 at vpp 1 and zbv at vpp 2 (docs/pipeline.md). A pin
  /// keeps its kind only: a zero-bubble pin needs pp > 1, an interleaved pin vpp > 1.
  void trySchedules(Layout l, const std::vector<Recompute> &recomputes) {
    std::optional<ScheduleKind> pin = pins_.schedule;
    if (!pin || *pin == ScheduleKind::oneFOneB ||
        (*pin == ScheduleKind::interleaved && l.vpp > 1)) {
      l.schedule = ScheduleKind::oneFOneB;
      tryRecomputes(l, recomputes);
    }
    // dp * micro-batch may overflow (a hostile --micro-batch): divide in steps.
    int64_t m = globalBatch_ / l.dp / l.microBatch;
    if (l.pp == 1 || !zeroBubble_ || m < l.pp)
      return;
    for (ScheduleKind kind : {ScheduleKind::zbH1, ScheduleKind::zbH2, ScheduleKind::zbv}) {
      if ((pin && *pin != kind) || l.vpp != (kind == ScheduleKind::zbv ? 2 : 1))
        continue;
      l.schedule = kind;
      tryRecomputes(l, recomputes);
    }
  }

  // ZeRO-3 in a step whose forward and backward run in one function (pp = vpp = 1) chooses
  // between gathering each parameter again for the backward (less memory) and keeping the
  // forward's copy (one gather fewer per layer): both are tried unless pinned.
  // Keeping costs memory only (every gathered parameter held from the forward to the backward),
  // so unpinned it must save at least kKeepMargin of the re-gathering layout's step: with
  // prefetch the backward's gathers are mostly hidden, and a tie is not worth gigabytes.
  void tryRecomputes(Layout l, const std::vector<Recompute> &recomputes) {
    std::vector<bool> reshards{true};
    if (l.zero == 3 && l.pp * l.vpp == 1)
      reshards = {true, false};
    std::optional<double> regather;
    for (bool reshard : pinnedOr(pins_.reshardAfterForward, reshards)) {
      l.reshardAfterForward = reshard;
      std::optional<double> limit;
      if (!reshard && regather && !pins_.reshardAfterForward)
        limit = *regather * (1 - kKeepMargin);
      std::optional<double> seconds = tryRecomputesFor(l, recomputes, limit);
      if (reshard)
        regather = seconds;
    }
  }
  static constexpr double kKeepMargin = 0.01;

  // The least recompute that fits is the fastest (recompute only adds work), so the later
  // recompute choices are dominated once one fits. A layout whose busy time alone cannot beat
  // the K-th best is not simulated. Returns the step time of the layout it evaluated; one not
  // under `limit` is left out.
  std::optional<double> tryRecomputesFor(Layout l, const std::vector<Recompute> &recomputes,
                                         std::optional<double> limit = std::nullopt) {
    for (Recompute recompute : recomputes) {
      l.recompute = recompute;
      std::string why;
      std::optional<StepCost> memory = estimator_.memory(l, &why);
      if (!memory) {
        invalid(why, /*deep=*/true); // invalid for every recompute choice alike
        return std::nullopt;
      }
      considerMemory(l, *memory);
      if (!memory->fits)
        continue;
      if (int64_t(result_.best.size()) == topK_) {
        // Pruned only when it can beat neither the K-th best nor the best of its category
        // (ZeRO-3, cp > 1, cp = 1), which the report compares #1 with.
        double bound = estimator_.lowerBoundSeconds(l);
        bool beatsCategory = false;
        for (std::optional<PlanCandidate> *category : categories(l))
          beatsCategory = beatsCategory || !*category || bound < (*category)->cost.stepSeconds;
        if (bound >= result_.best.back().cost.stepSeconds && !beatsCategory)
          return std::nullopt;
      }
      std::optional<StepCost> cost = estimator_.estimate(l, nullptr);
      ++result_.evaluated;
      if (!cost)
        return std::nullopt;
      if (limit && cost->stepSeconds >= *limit)
        return cost->stepSeconds;
      for (std::optional<PlanCandidate> *category : categories(l))
        if (!*category || cost->stepSeconds < (*category)->cost.stepSeconds)
          *category = PlanCandidate{l, *cost};
      insert(PlanCandidate{l, *cost});
      return cost->stepSeconds;
    }
    return std::nullopt;
  }

  /// The categories `l` belongs to (SearchResult's bestZero3, bestWithCp, bestWithoutCp, and
  /// the best of each cp variant).
  std::vector<std::optional<PlanCandidate> *> categories(const Layout &l) {
    std::vector<std::optional<PlanCandidate> *> out;
    if (l.zero == 3)
      out.push_back(&result_.bestZero3);
    out.push_back(l.cp > 1 ? &result_.bestWithCp : &result_.bestWithoutCp);
    if (l.pp > 1 && schedule::splitsBackward(l.schedule))
      out.push_back(&result_.bestZeroBubble);
    if (l.cp > 1)
      out.push_back(&bestCpVariant_[l.cpRing ? 1 : 0]);
    return out;
  }

  void insert(PlanCandidate c) {
    auto at = std::upper_bound(result_.best.begin(), result_.best.end(), c,
                               [](const PlanCandidate &a, const PlanCandidate &b) {
                                 return a.cost.stepSeconds < b.cost.stepSeconds;
                               });
    result_.best.insert(at, std::move(c));
    if (int64_t(result_.best.size()) > topK_)
      result_.best.pop_back();
  }

  const TransformerShape &shape_;
  const Cluster &cluster_;
  int64_t globalBatch_;
  const Pins &pins_;
  int64_t topK_;
  StepEstimator estimator_;
  bool replicatesKvHeads_; // the stack replicates kv heads when tp exceeds them
  bool expertParallel_;    // the stack has expert parallelism
  bool contextParallel_;   // the stack has context parallelism
  const StackProfile &stack_;
  SearchResult result_;
  std::optional<PlanCandidate> bestCpVariant_[2]; // the best cp > 1 layout: all-gather, ring
  std::string firstInvalid_;
  bool deepInvalid_ = false;
  std::optional<Layout> smallest_;
  double smallestBytes_ = 0;
  bool zeroBubble_; // the stack runs zb-h1, zb-h2 and zbv
  std::string stackName_;
};

} // namespace

SearchResult search(const TransformerShape &shape, const Cluster &cluster, int64_t globalBatch,
                    const Pins &pins, int topK, const StackProfile &stack) {
  auto start = std::chrono::steady_clock::now();
  SearchResult result = Searcher(shape, cluster, globalBatch, pins, topK, stack).run();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

} // namespace megac::planner
