// The MoE block's MLP as kernels on one rank (planner/BlockKernels.cpp's blocks use it): the
// router, dispatch, the local experts' products, combine and the ep exchange, forward and
// backward. Internal to the block inventory; MLIR-free.
#pragma once

#include "planner/BlockKernels.h"
#include "planner/CostModel.h"
#include "planner/KernelBuilder.h"

#include <algorithm>
#include <cmath>

namespace megac::planner::detail {

/// megac's unfused graph of d(silu(a)·b) over `mlpAct` bytes of activation: five products and
/// 1 - σ (elementwise, two operands in and one out each), and σ(a) itself, whose exp per element
/// makes it cost what a SiLU does on the CPU (its calibrated `silu` rate, a third of the
/// elementwise one on the machines measured), not what its bytes do.
inline void swigluGradUnfused(Builder &b, double mlpAct) {
  b.mem(KernelClass::elementwise, 3 * mlpAct, 6);
  b.mem(KernelClass::silu, 2 * mlpAct);
}

/// The MLP of an MoE block (docs/moe.md, "Planner"), forward and backward, on one rank for one
/// micro-batch: the router, the dispatch of each token to its topk experts, the local experts'
/// GEMMs on their rows, the combine; under expert parallelism the token exchange among the ep
/// ranks (exchange() below; forward and, as adjoints, backward); under Megatron's expert tensor
/// parallelism the routed rows' all-gather and reduce-scatter over tp. Balanced routing (each
/// expert gets T·k/E of the rows) unless a measured load says how much the busiest ep rank gets.
struct MoeKernels {
  const TransformerShape &s;
  const LayerGeometry &g;
  const StackProfile &stack;
  int64_t t, e, h, E, k, localExperts, ffn;
  bool split, grouped;
  // megac at tp > 1 under SP (experts whole on every tp rank): the router is column-parallel
  // over the experts on the gathered tokens, its logits gathered, and the routing computed on
  // all T tokens on every tp rank; each rank then takes its own rows for dispatch and combine.
  bool routerSplit;
  // ... and with ep > 1 (megac's all-to-all dispatcher): the experts compute on the rows of
  // the whole ep group (ep·Tr tokens, the routing all-gathered over ep and sliced to this tp
  // rank's rows and the local experts, once for the products and once for the combine), the
  // combine's partial sums reduce-scattered over ep and, in the backward, dy all-gathered over
  // ep (the compiled graph at tp 2 x ep 2 with SP, e2e_plan_kernels).
  bool epGathersTokens;
  double Tr;          // tokens this rank routes (its micro-batch tokens, T/tp under SP)
  double Tg;          // tokens the router computes on (T when routerSplit, else Tr)
  int64_t Er;         // the router's expert columns on this rank (E/tp when routerSplit)
  int64_t rows;       // expert GEMM rows on this rank (all its local experts)
  int64_t perExpert;  // rows of one local expert's GEMM
  double routedRows;  // rows of the routed buffers its memory-bound passes touch
  double routerBytes; // one fp32 [Tg, E] tensor
  double dispatched;  // tokens the dispatch reads and the combine writes (megac: the ep group's)

  MoeKernels(const TransformerShape &shape, const LayerGeometry &geometry,
             const StackProfile &profile)
      : s(shape), g(geometry), stack(profile) {
    t = g.tp;
    e = elementBytes(g.precision);
    h = s.hidden;
    E = s.experts;
    k = std::max<int64_t>(1, s.topk);
    localExperts = std::max<int64_t>(1, E / std::max<int64_t>(1, g.ep));
    split = stack.expertTensorParallel && t > 1;
    grouped = stack.groupedExpertGemms;
    int64_t fullFfn = s.ffn > 0 ? s.ffn : 4 * h;
    ffn = split ? ceilDiv(fullFfn, t) : fullFfn;
    int64_t T = g.microBatch * s.seq / std::max<int64_t>(1, g.cp);
    Tr = g.sequenceParallel ? double(T) / double(t) : double(T);
    routerSplit = stack.routerOpByOp && !split && t > 1 && g.sequenceParallel;
    Tg = routerSplit ? double(T) : Tr;
    Er = routerSplit ? ceilDiv(s.experts, t) : s.experts;
    epGathersTokens = routerSplit && g.ep > 1 && stack.allToAllDispatch;
    // Megatron gathers the tp group's routed rows before its tp-split experts.
    double gathered = split && g.sequenceParallel ? double(t) : 1.0;
    // Dropless routing as measured (TransformerShape::moeLoad): the busiest ep rank's share.
    rows = int64_t(std::llround(Tr * double(k) * gathered * busiestExpertRankShare(s, g.ep)));
    perExpert = ceilDiv(rows, localExperts);
    routedRows = stack.packedRouting ? double(rows) : double(E) * Tr;
    routerBytes = Tg * double(E) * 4;
    dispatched = stack.allToAllDispatch ? Tr : Tr * double(std::max<int64_t>(1, g.ep));
  }

  double tokenBytes(double n) const { return n * double(h) * double(e); }
  // Tokens the combine writes and the backward's dispatch reads.
  double combined() const { return epGathersTokens ? Tr * double(g.ep) : dispatched; }
  // One GEMM per local expert, or one grouped launch over them (StackProfile::groupedExpertGemms).
  // `weightGradient`: [m, n] = A^T B over the routed rows (k); else routed rows [m, k] x [k, n].
  // megac's static [E, T, f] layout (no packedRouting): each product packs its active rows
  // (runtime/cpu/Moe.cpp) and a forward or input-gradient one zero-fills its whole output first.
  void expertGemm(Builder &b, int64_t m, int64_t n, int64_t kDim,
                  bool weightGradient = false) const {
    if (grouped)
      b.gemm(m, n, kDim, localExperts);
    else
      b.gemm(m, n, kDim, 1, double(localExperts));
    KernelOp &op = b.pass->kernels.back();
    op.routed = true;
    // The expert's weight (forward, dx) or its gradient (dW), from main memory.
    op.coldBytes = double(weightGradient ? m * n : n * kDim) * double(e) *
                   (grouped ? double(localExperts) : 1.0);
    if (!stack.packedRouting) {
      double local = double(localExperts) / double(E);
      op.bytes = weightGradient
                     ? 2.0 * double(rows) * double(m + n) * double(e)
                     : (routedRows * local * double(n) + 2.0 * double(rows) * double(kDim + n)) *
                           double(e);
      op.bytes /= grouped ? 1.0 : double(localExperts); // per launch
    }
  }
  // Megatron's packed layout runs gate and up as one [h, 2·ffn] matrix; megac's as two.
  int fc1Count() const { return s.gatedMlp && !stack.packedRouting ? 2 : 1; }
  int64_t fc1Width() const { return s.gatedMlp && stack.packedRouting ? 2 * ffn : ffn; }
  // A scalar or [E]-sized pass of the router's statistics (bytes only to give it a launch).
  static constexpr double kTiny = 64;
  // The token exchange among the ep ranks, entering (`into`) or leaving the experts. The
  // all-to-all dispatchers (Megatron's alltoall, megac's moe_exchange) send each rank's T·k
  // routed rows to their experts' ranks and back; megac first all-gathers the group's [T, E]
  // routing (in the model's element type). The all-gather dispatcher gathers the ep group's
  // tokens (and routing weights) before the dispatch, each rank routing all of them to its E/ep
  // experts, and reduce-scatters the combine's partial sums back: ep·T rows of h each way, ep/k
  // times the all-to-all's bytes.
  void exchange(Builder &b, bool into, bool forward) const {
    if (g.ep <= 1)
      return;
    if (stack.allToAllDispatch) {
      double group = Tr * double(g.ep);
      if (epGathersTokens && into != forward) { // the combine's return, the backward's dy
        b.pass->ep.push_back(
            {into ? Collective::allGather : Collective::reduceScatter, tokenBytes(group)});
        return;
      }
      if (into && forward && stack.gathersRouting) {
        b.pass->ep.push_back({Collective::allGather, Tr * double(g.ep) * double(E) * double(e)});
        // megac: the local experts' columns of the gathered routing (a shard slice).
        b.mem(KernelClass::copy, 2 * Tr * double(g.ep) * double(localExperts) * double(e));
      }
      b.pass->ep.push_back({Collective::allToAll, tokenBytes(Tr * double(k))});
      return;
    }
    double group = Tr * double(g.ep);
    if (into) {
      b.pass->ep.push_back({Collective::allGather, tokenBytes(group)});
      if (forward) // the routing weights, kept for the backward
        b.pass->ep.push_back({Collective::allGather, group * double(E) * 4});
    } else {
      b.pass->ep.push_back({Collective::reduceScatter, tokenBytes(group)});
    }
  }
  void gatherRows(Builder &b, Collective kind) const {
    if (split && g.sequenceParallel)
      b.comm(kind, tokenBytes(double(rows)));
  }

  void forward(Builder &b) const {
    // Router: logits, softmax (fp32), top-k mask, renormalised gates, the aux loss' sums.
    if (routerSplit)
      b.comm(Collective::allGather, tokenBytes(Tg)); // the norm's output, for the router
    b.gemm(int64_t(Tg), Er, h);
    if (routerSplit)
      b.comm(Collective::allGather, Tg * double(E) * double(e)); // the logits' expert columns
    b.mem(KernelClass::softmax, 2 * routerBytes);
    if (stack.routerOpByOp) {
      // top-k mask, gates x mask, / their row sum (broadcast); the loss' sums: 5 reductions of
      // [T, E] (the row sum, per-sample expert means of p and m, their totals), 3 of [E] or
      // less, 4 scalar products; and an add summing the layers' logged statistics (2 per
      // layer after the first, measured: at most one per micro-batch too many).
      b.mem(KernelClass::elementwise, 3 * routerBytes, 3);
      b.mem(KernelClass::broadcast, routerBytes);
      b.mem(KernelClass::reduce, routerBytes, 5);
      b.mem(KernelClass::reduce, kTiny, 3);
      b.mem(KernelClass::elementwise, kTiny, 5);
      if (routerSplit) // this rank's rows of the gates, for the dispatch (and the combine)
        b.mem(KernelClass::copy, 2 * Tr * double(E) * 4, epGathersTokens ? 1 : 2);
    } else {
      b.mem(KernelClass::elementwise, 2 * routerBytes, 4);
      b.mem(KernelClass::reduce, routerBytes, 2);
    }
    // Dispatch: each token copied (megac: scaled by its gate) to its experts' rows, sent to the
    // experts' ranks.
    const KernelClass dispatch =
        stack.dispatchScalesTokens ? KernelClass::elementwise : KernelClass::copy;
    exchange(b, true, true);
    b.mem(dispatch, tokenBytes(dispatched + routedRows));
    if (epGathersTokens)            // the ep group's routing, for the products and for the combine:
      for (int i = 0; i < 2; ++i) { // gathered, this tp rank's rows, the local experts' columns
        b.pass->ep.push_back({Collective::allGather, Tg * double(g.ep) * double(E) * double(e)});
        b.mem(KernelClass::copy, 2 * Tr * double(g.ep) * double(E) * double(e));
        b.mem(KernelClass::copy, 2 * Tr * double(g.ep) * double(localExperts) * double(e));
      }
    gatherRows(b, Collective::allGather);
    for (int i = 0; i < fc1Count(); ++i)
      expertGemm(b, perExpert, fc1Width(), h);
    double mlpAct = routedRows * double(ffn) * double(e);
    if (s.gatedMlp) {
      if (stack.elementwiseFusion || stack.fusedBiasActivation)
        b.mem(KernelClass::silu, 3 * mlpAct);
      else {
        b.mem(KernelClass::silu, 2 * mlpAct);
        b.mem(KernelClass::elementwise, 3 * mlpAct);
      }
    } else {
      b.mem(KernelClass::gelu, 2 * mlpAct);
    }
    expertGemm(b, perExpert, h, ffn);
    gatherRows(b, Collective::reduceScatter);
    exchange(b, false, true);
    // Combine: the k outputs of each token weighted by its gates.
    b.mem(KernelClass::elementwise, tokenBytes(routedRows + combined()) + routerBytes);
    if (split && !g.sequenceParallel) // tp-split experts without SP: partial sums all-reduced
      b.comm(Collective::allReduce, tokenBytes(Tr));
  }

  void backward(Builder &b) const {
    // Combine's adjoint (a dispatch of dy by the gates) and the gates' gradient (row dots).
    exchange(b, true, false);
    b.mem(stack.dispatchScalesTokens ? KernelClass::elementwise : KernelClass::copy,
          tokenBytes(combined() + routedRows) + routerBytes);
    b.mem(KernelClass::reduce, tokenBytes(routedRows + combined()));
    if (routerSplit) // the gates' gradient gathered for the router's backward on all T
      b.comm(Collective::allGather, Tg * double(E) * double(e));
    if (epGathersTokens) { // ... its local experts' columns over ep first; this rank's samples
      b.pass->ep.push_back({Collective::allGather, Tr * double(g.ep) * double(E) * double(e)});
      b.mem(KernelClass::copy, 2 * Tg * double(E) * double(e));
    }
    gatherRows(b, Collective::allGather);
    auto linearBackward = [&](int64_t in, int64_t out) {
      expertGemm(b, perExpert, in, out);            // dx
      expertGemm(b, out, in, perExpert, true);      // dW, per expert
      b.pass->kernels.back().weightGradient = true; // a zero-bubble schedule's W (issue 35)
      if (stack.transposeInstructions)
        b.mem(KernelClass::transpose, 2.0 * double(in) * double(out) * double(e),
              double(localExperts));
    };
    linearBackward(ffn, h);
    double mlpAct = routedRows * double(ffn) * double(e);
    if (s.gatedMlp) {
      if (stack.elementwiseFusion || stack.fusedBiasActivation)
        b.mem(KernelClass::elementwise, 5 * mlpAct);
      else
        swigluGradUnfused(b, mlpAct);
    } else {
      b.mem(KernelClass::geluGrad, 3 * mlpAct);
    }
    for (int i = 0; i < fc1Count(); ++i)
      linearBackward(h, fc1Width());
    if (fc1Count() > 1)
      b.mem(KernelClass::elementwise, 3 * tokenBytes(routedRows));
    gatherRows(b, Collective::reduceScatter);
    // Dispatch's adjoint (each token's k row gradients summed), sent back; the router's
    // backward, and the router's input gradient added to the experts'.
    b.mem(KernelClass::elementwise, tokenBytes(routedRows + dispatched));
    exchange(b, false, false);
    if (stack.routerOpByOp) {
      // The loss' and the renormalisation's adjoints over [T, E]: 7 elementwise passes, a row
      // sum, 2 broadcasts, and one product of [b, E].
      b.mem(KernelClass::elementwise, 3 * routerBytes, 7);
      b.mem(KernelClass::elementwise, kTiny);
      b.mem(KernelClass::broadcast, routerBytes, 2);
      b.mem(KernelClass::reduce, routerBytes);
    }
    b.mem(KernelClass::softmaxGrad, 3 * routerBytes);
    if (!stack.routerOpByOp)
      b.mem(KernelClass::elementwise, 2 * routerBytes, 3);
    if (routerSplit) // the logits' gradient, this rank's expert columns
      b.mem(KernelClass::copy, 2 * Tg * double(Er) * 4);
    b.gemm(int64_t(Tg), h, Er);
    b.gemm(Er, h, int64_t(Tg)); // the router's dW
    b.pass->kernels.back().weightGradient = true;
    if (routerSplit) // the router's input gradient back to this rank's rows
      b.comm(Collective::reduceScatter, tokenBytes(Tg));
    b.mem(KernelClass::elementwise, 3 * tokenBytes(Tr));
    if (split && !g.sequenceParallel)
      b.comm(Collective::allReduce, tokenBytes(Tr));
  }
};

} // namespace megac::planner::detail
