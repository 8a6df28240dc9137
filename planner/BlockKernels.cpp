// The kernel inventory of a block and the model's edges (planner/BlockKernels.h).
// Shapes are local to one rank: T tokens of the micro-batch, Tl of them in the norm/residual
// region (T/tp under sequence parallelism), h hidden, local heads, local ffn columns.
#include "planner/BlockKernels.h"

#include "planner/CostModel.h"
#include "planner/KernelBuilder.h"
#include "planner/MoeBlockKernels.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace megac::planner {
namespace {

using detail::Builder;
using detail::MoeKernels;
using detail::swigluGradUnfused;

/// A linear layer's weight-side shapes (local): y[T, out] = x[T, in] · W[in, out].
struct Linear {
  int64_t in, out;
  bool bias;
};

bool isHalf(Precision precision) {
  return precision == Precision::bf16 || precision == Precision::fp16;
}

/// Whether this step's weight gradients accumulate inside their GEMM: in fp32/fp64 where the
/// stack fuses at all, in bf16/fp16 where its GEMM also reads half operands into the fp32
/// accumulator (StackProfile::gemmAccumulatesHalfWeightGrads).
bool gemmAccumulates(const StackProfile &stack, Precision precision) {
  return stack.gemmAccumulatesWeightGrads &&
         (!isHalf(precision) || stack.gemmAccumulatesHalfWeightGrads);
}

/// megac's mixed precision as instructions (StackProfile::halfCastInstructions): whether this
/// step casts, the Cast kernels it adds (each element read at one size, written at the other),
/// and how many casts of a gathered parameter a micro-batch makes (ZeRO-3 casts each gathered
/// copy: StackProfile::gathersMasterWeights, LayerGeometry::parameterGathers).
struct HalfCasts {
  bool on = false;
  int64_t e = 4;
  double gatheredCopies = 1;

  HalfCasts(const StackProfile &stack, const LayerGeometry &g)
      : on(stack.halfCastInstructions && isHalf(g.precision)), e(elementBytes(g.precision)),
        gatheredCopies(stack.gathersMasterWeights
                           ? double(std::max<int64_t>(1, g.parameterGathers))
                           : 1.0) {}
  /// `count` casts of `elements` each (nothing when the step does not cast).
  void operator()(Builder &b, double elements, double count = 1) const {
    if (on)
      b.mem(KernelClass::cast, elements * double(e + 4), count);
  }
  /// One activation region's bytes for an op the step runs in f32 (4 per element when casting).
  double f32Region(double elements) const { return elements * double(on ? 4 : e); }
};

} // namespace

BlockKernels blockKernels(const TransformerShape &s, const LayerGeometry &g,
                          const StackProfile &stack) {
  const int64_t t = g.tp, e = elementBytes(g.precision);
  // Context parallelism: this rank's tokens are seq/cp of each sample (two load-balanced chunks).
  const int64_t cp = std::max<int64_t>(1, g.cp), sq = s.seq / cp;
  const int64_t T = g.microBatch * sq, h = s.hidden, dh = s.hidden / s.heads;
  // Fewer kv heads than tp (megac replicates them, passes/partition): every rank computes all
  // kv heads in whole k/v projections, repeats each `replicas` times and keeps its slice.
  const int64_t kvAll = s.kvHeads > 0 ? s.kvHeads : s.heads;
  const int64_t replicas = std::max<int64_t>(1, kvReplicas(s, t));
  const int64_t heads = s.heads / t, kvHeads = replicas > 1 ? kvAll : kvAll / t;
  const int64_t ffn = ceilDiv(s.ffn > 0 ? s.ffn : 4 * h, t);
  const double Tl = g.sequenceParallel ? double(T) / double(t) : double(T);
  const double act = double(T) * double(h) * double(e); // one full activation, bytes
  const double region = Tl * double(h) * double(e);     // one norm/residual-region activation
  // megac's half precision (StackProfile::halfCastInstructions): the norms run in f32 on a
  // widened input and narrow their output (and so do their gradients).
  const HalfCasts convert(stack, g);
  const bool casts = convert.on;
  const double normRegion = convert.f32Region(Tl * double(h));
  const bool dropout = s.dropout > 0;
  const bool bias = s.biases;
  const KernelClass norm = s.biases ? KernelClass::layerNorm : KernelClass::rmsNorm;
  const KernelClass normGrad = s.biases ? KernelClass::layerNormGrad : KernelClass::rmsNormGrad;
  // q, k and v as the stack runs them: megac's zoo and HF exports have three linears, Megatron
  // one fused column-parallel QKV GEMM.
  std::vector<Linear> qkv;
  if (stack.separateProjections)
    qkv = {{h, heads * dh, bias}, {h, kvHeads * dh, bias}, {h, kvHeads * dh, bias}};
  else
    qkv = {{h, (heads + 2 * kvHeads) * dh, bias}};
  const Linear proj{heads * dh, h, bias};
  // A gated MLP's gate and up projections: two linears in megac's graphs, one fused GEMM in
  // Megatron's.
  std::vector<Linear> fc1;
  if (s.gatedMlp && stack.separateProjections)
    fc1 = {{h, ffn, bias}, {h, ffn, bias}};
  else
    fc1 = {{h, ffn * (s.gatedMlp ? 2 : 1), bias}};
  const Linear fc2{ffn, h, bias};

  BlockKernels out;
  Builder fwd{&out.forward}, bwd{&out.backward};
  std::optional<MoeKernels> moe;
  if (s.experts > 0)
    moe.emplace(s, g, stack);
  auto linearForward = [&](const Linear &l) {
    // The bias rides in the GEMM (cuBLAS epilogue / addmm, megac's Linear kernel) or in the
    // next fused elementwise kernel.
    fwd.gemm(T, l.out, l.in);
    fwd.cold(double(l.in) * double(l.out) * double(e)); // W, last touched a step ago
  };
  auto linearBackward = [&](const Linear &l) {
    const double weightBytes = double(l.in) * double(l.out) * double(e);
    bwd.gemm(T, l.in, l.out); // dx = dy · Wᵀ
    if (!stack.transposeInstructions)
      bwd.cold(weightBytes);
    bwd.gemm(l.out, l.in, T); // dW = dyᵀ · x
    bwd.cold(weightBytes);    // written back
    out.backward.kernels.back().weightGradient = true;
    if (g.gradientShards > 1) { // ZeRO-2/3: the half dW widened for its f32 reduce-scatter
      convert(bwd, double(l.in) * double(l.out));
      if (casts)
        out.backward.kernels.back().weightGradient = true;
    }
    if (stack.transposeInstructions) {
      // megac: Wᵀ and dyᵀ are transposed into buffers of their own before the two GEMMs.
      bwd.mem(KernelClass::transpose, 2.0 * weightBytes);
      bwd.cold(weightBytes); // W read from memory; dx's GEMM then reads the fresh Wᵀ
      bwd.mem(KernelClass::transpose, 2.0 * double(T) * double(l.out) * double(e));
    }
    if (l.bias) { // db = row sum of dy
      bwd.mem(KernelClass::reduce, double(T) * double(l.out) * double(e));
      out.backward.kernels.back().weightGradient = true;
      convert(bwd, double(l.out)); // widened for its f32 accumulation
      if (casts)
        out.backward.kernels.back().weightGradient = true;
    }
  };
  auto residual = [&](Builder &b, bool backward) {
    if (dropout && stack.fusedBiasDropoutAdd) {
      // bias + dropout + add in one kernel: reads x, the residual (or dy), writes y and a mask.
      b.mem(KernelClass::dropout, Tl * double(h) * double(3 * e + 1));
      return;
    }
    if (dropout)
      b.mem(KernelClass::dropout, Tl * double(h) * double(2 * e + 1));
    b.mem(KernelClass::elementwise, 3 * region); // the add (backward: the two gradients summed)
    (void)backward;
  };
  auto tpEnter = [&](Builder &b, bool backward) {
    // Into a column-parallel region: SP all-gathers (its backward reduce-scatters); without SP
    // the forward is an identity and the backward all-reduces the input gradient.
    if (t == 1)
      return;
    if (g.sequenceParallel)
      b.comm(backward ? Collective::reduceScatter : Collective::allGather, act);
    else if (backward)
      b.comm(Collective::allReduce, act);
  };
  auto tpLeave = [&](Builder &b, bool backward) {
    if (t == 1)
      return;
    if (g.sequenceParallel)
      b.comm(backward ? Collective::allGather : Collective::reduceScatter, act);
    else if (!backward)
      b.comm(Collective::allReduce, act);
  };

  // Attention core, forward; its kernels also go to out.attentionCore.
  size_t coreBegin = 0, coreEnd = 0;
  // Under context parallelism the local queries (sq = seq/cp) attend to the whole sequence's
  // keys; a causal kernel does 1/cp of the causal work on each rank (load-balanced chunks), the
  // materialised scores are [sq, seq].
  const double scores = double(g.microBatch) * double(heads) * double(sq) * double(s.seq);
  const double share = 1.0 / double(cp);
  auto coreForward = [&]() {
    coreBegin = out.forward.kernels.size();
    if (stack.flashAttention || stack.attentionKernel) {
      fwd.attention(g.microBatch * heads, s.seq, dh, false, share);
    } else {
      fwd.gemm(sq, s.seq, dh, g.microBatch * heads); // q·kᵀ
      if (!stack.fusedSoftmax)
        fwd.mem(KernelClass::elementwise, 2 * scores * double(e)); // scale and mask
      fwd.mem(KernelClass::softmax, 2 * scores * double(e));
      if (dropout)
        fwd.mem(KernelClass::dropout, scores * double(2 * e + 1));
      fwd.gemm(sq, dh, s.seq, g.microBatch * heads); // p·v
    }
    coreEnd = out.forward.kernels.size();
  };
  auto coreBackward = [&]() {
    if (stack.flashAttention || stack.attentionKernel) {
      bwd.attention(g.microBatch * heads, s.seq, dh, true, share);
      return;
    }
    int64_t bh = g.microBatch * heads;
    bwd.gemm(s.seq, dh, sq, bh); // dv = pᵀ·do
    bwd.gemm(sq, s.seq, dh, bh); // dp = do·vᵀ
    if (dropout)
      bwd.mem(KernelClass::dropout, scores * double(2 * e + 1));
    bwd.mem(KernelClass::softmaxGrad, 3 * scores * double(e));
    bwd.gemm(sq, dh, s.seq, bh); // dq = ds·k
    bwd.gemm(s.seq, dh, sq, bh); // dk = dsᵀ·q
  };
  // Context parallelism's K/V exchange around the core (the local kv heads' K and V):
  // all-gather-kv gathers the whole sequence's pair before the core, forward and again backward
  // (not kept), and reduce-scatters dK/dV after the backward; the ring passes cp - 1 blocks of
  // this rank's K/V forward and, backward, K/V and dK/dV blocks (2(cp - 1) transfers).
  const double kvWholeSeq =
      2.0 * double(g.microBatch) * double(s.seq) * double(kvHeads) * double(dh) * double(e);
  auto cpExchange = [&](Builder &b, bool backward) {
    if (cp == 1)
      return;
    if (!g.cpRing) {
      b.pass->cp.push_back({Collective::allGather, kvWholeSeq});
      if (backward)
        b.pass->cp.push_back({Collective::reduceScatter, kvWholeSeq});
      return;
    }
    b.pass->cpRingBytes = kvWholeSeq / double(cp);
    b.pass->cpRingTransfers = double(cp - 1) * (backward ? 2 : 1);
    b.pass->cpRingSteps = double(cp);
    if (backward && stack.ringGradientsBlock) {
      // megac: K/V blocks overlapped (cp - 1), dK/dV after each block's computation (cp).
      b.pass->cpRingTransfers = double(cp - 1);
      b.pass->cpRingBlockingTransfers = double(cp);
    }
    if (backward && stack.ringBackwardRecomputesStatistics) {
      // The forward ring again for the row statistics: its transfers and its attention.
      b.pass->cpRingTransfers += double(cp - 1);
      b.pass->cpRingSteps += double(cp);
      b.attention(g.microBatch * heads, s.seq, dh, false, share);
    }
  };
  // Head split/merge copies (megac: q, k, v and the output; Megatron: the merged context).
  double headBytes = 2.0 * double(T) * double(heads * dh) * double(e);
  auto headCopies = [&](Builder &b) {
    if (stack.headCopies > 0)
      b.mem(KernelClass::transpose, headBytes, double(stack.headCopies));
  };

  // ---- forward: norm, [gather], qkv, attention, proj, [reduce], residual; the same for the MLP.
  fwd.mem(norm, 2 * normRegion);
  convert(fwd, Tl * double(h), 2);
  tpEnter(fwd, false);
  for (const Linear &l : qkv)
    linearForward(l);
  // Rotary embedding of q and k (two kernels in megac's graphs, one fused in Megatron's), each
  // reading the cos and sin tables ([seq, head size] each) besides its tensor.
  const double tables = 2.0 * double(sq) * double(dh) * double(e);
  const double qBytes = 2.0 * double(T) * double(heads * dh) * double(e) + tables;
  const double kBytes = 2.0 * double(T) * double(kvHeads * dh) * double(e) + tables;
  auto rope = [&](Builder &b) {
    if (!s.rope)
      return;
    if (stack.ropePerTensor) {
      b.mem(KernelClass::rope, qBytes);
      b.mem(KernelClass::rope, kBytes);
    } else {
      b.mem(KernelClass::rope, qBytes + kBytes);
    }
  };
  // Replicated kv heads: k and v repeated (a broadcast of the whole heads) and each rank's slice
  // copied out; backward, the slices' gradients all-gathered and summed over the replicas.
  const double kvWhole = double(T) * double(kvAll * dh) * double(e);
  auto repeatKv = [&](Builder &b, bool backward) {
    if (replicas == 1)
      return;
    double repeated = kvWhole * double(replicas);
    if (!backward) {
      b.mem(KernelClass::broadcast, kvWhole + repeated, 2);
      b.mem(KernelClass::copy, 2 * repeated / double(t), 2);
    } else {
      b.comm(Collective::allGather, repeated);
      b.comm(Collective::allGather, repeated);
      b.mem(KernelClass::reduce, repeated + kvWhole, 2);
    }
  };
  rope(fwd);
  repeatKv(fwd, false);
  headCopies(fwd);
  cpExchange(fwd, false);
  coreForward();
  // What nothing in the backward reads: the row-parallel linear's output, its reduction and
  // bias, and the residual add (StackProfile::recomputeDropsUnreadForward).
  std::vector<std::pair<size_t, size_t>> unreadKernels, unreadComms;
  auto unreadFrom = [&](size_t kernel, size_t comm) {
    unreadKernels.push_back({kernel, out.forward.kernels.size()});
    unreadComms.push_back({comm, out.forward.tp.size()});
  };
  size_t unreadKernel = out.forward.kernels.size(), unreadComm = out.forward.tp.size();
  linearForward(proj);
  tpLeave(fwd, false);
  if (stack.rowParallelBiasKernel && t > 1 && bias) { // the row-parallel bias, once, after the sum:
    fwd.mem(KernelClass::broadcast, region + double(h) * double(e)); // [h] read, [Tl, h] written
    fwd.mem(KernelClass::elementwise, 3 * region);                   // and added
  }
  residual(fwd, false);
  unreadFrom(unreadKernel, unreadComm);
  fwd.mem(norm, 2 * normRegion);
  convert(fwd, Tl * double(h), 2);
  double mlpAct = double(T) * double(ffn) * double(e);
  if (moe) {
    moe->forward(fwd);
    residual(fwd, false);
  } else {
    tpEnter(fwd, false);
    for (const Linear &l : fc1)
      linearForward(l);
    if (s.gatedMlp) {
      if (stack.elementwiseFusion || stack.fusedBiasActivation)
        fwd.mem(KernelClass::silu, 3 * mlpAct); // silu(gate) · up in one kernel
      else {
        fwd.mem(KernelClass::silu, 2 * mlpAct);
        fwd.mem(KernelClass::elementwise, 3 * mlpAct);
      }
    } else {
      fwd.mem(KernelClass::gelu, 2 * mlpAct);
    }
    unreadKernel = out.forward.kernels.size(), unreadComm = out.forward.tp.size();
    linearForward(fc2);
    tpLeave(fwd, false);
    if (stack.rowParallelBiasKernel && t > 1 && bias) {
      fwd.mem(KernelClass::broadcast, region + double(h) * double(e));
      fwd.mem(KernelClass::elementwise, 3 * region);
    }
    residual(fwd, false);
    unreadFrom(unreadKernel, unreadComm);
  }
  out.attentionCore.assign(out.forward.kernels.begin() + long(coreBegin),
                           out.forward.kernels.begin() + long(coreEnd));
  out.fullRecompute = out.forward;
  out.chunkLastRecompute = out.forward;
  if (stack.recomputeDropsUnreadForward) {
    // The forward without the kernels and collectives in `kernels` / `comms` (index ranges).
    auto without = [&](const std::vector<std::pair<size_t, size_t>> &kernels,
                       const std::vector<std::pair<size_t, size_t>> &comms) {
      auto in = [](const std::vector<std::pair<size_t, size_t>> &ranges, size_t i) {
        for (auto [begin, end] : ranges)
          if (i >= begin && i < end)
            return true;
        return false;
      };
      PassKernels kept = out.forward;
      kept.kernels.clear();
      kept.tp.clear();
      for (size_t i = 0; i < out.forward.kernels.size(); ++i)
        if (!in(kernels, i))
          kept.kernels.push_back(out.forward.kernels[i]);
      for (size_t i = 0; i < out.forward.tp.size(); ++i)
        if (!in(comms, i))
          kept.tp.push_back(out.forward.tp[i]);
      return kept;
    };
    out.fullRecompute = without(unreadKernels, unreadComms);
    if (unreadKernels.size() > 1) // a dense MLP: its part is the last range
      out.chunkLastRecompute = without({unreadKernels.back()}, {unreadComms.back()});
  }
  if (casts && !moe) {
    // Full recompute re-runs the parameter casts the backward reads: every weight (each input
    // gradient's product reads it) and the biases of the layers it recomputes (not the
    // projection's and fc2's where their outputs are not recomputed).
    Builder re{&out.fullRecompute};
    bool unreadOut = stack.recomputeDropsUnreadForward;
    for (const std::vector<Linear> *group : {&qkv, &fc1})
      for (const Linear &l : *group) {
        convert(re, double(l.in) * double(l.out));
        if (l.bias)
          convert(re, double(l.out));
      }
    for (const Linear *l : {&proj, &fc2}) {
      convert(re, double(l->in) * double(l->out));
      if (l->bias && !unreadOut)
        convert(re, double(l->out));
    }
  }

  // ---- backward, in reverse.
  residual(bwd, true);
  if (moe) {
    moe->backward(bwd);
  } else {
    tpLeave(bwd, true);
    linearBackward(fc2);
    if (s.gatedMlp) {
      // d(silu(a)·b): one fused kernel (reads dy, a, b; writes da, db: Megatron's bias-SwiGLU
      // fusion has its backward), or megac's graph of it (five products and 1 - σ, and the
      // sigmoid: an exp per element, priced as SiLU is).
      if (stack.elementwiseFusion || stack.fusedBiasActivation)
        bwd.mem(KernelClass::elementwise, 5 * mlpAct);
      else
        swigluGradUnfused(bwd, mlpAct);
    } else {
      bwd.mem(KernelClass::geluGrad, 3 * mlpAct);
    }
    for (const Linear &l : fc1)
      linearBackward(l);
    if (fc1.size() > 1) // the gate's and the up projection's input gradients summed
      bwd.mem(KernelClass::elementwise, 3 * act);
    tpEnter(bwd, true);
  }
  bwd.mem(normGrad, 3 * normRegion);
  convert(bwd, Tl * double(h), 2);
  residual(bwd, true);
  tpLeave(bwd, true);
  linearBackward(proj);
  headCopies(bwd);
  cpExchange(bwd, true);
  coreBackward();
  repeatKv(bwd, true);
  rope(bwd);
  for (const Linear &l : qkv)
    linearBackward(l);
  if (qkv.size() > 1) // the three input gradients summed
    bwd.mem(KernelClass::elementwise, 3 * act, double(qkv.size() - 1));
  tpEnter(bwd, true);
  bwd.mem(normGrad, 3 * normRegion);
  convert(bwd, Tl * double(h), 2);

  if (casts) {
    // Each half-consumed parameter cast once per micro-batch (its function casts it before its
    // first use; charged with the backward, which no recompute repeats); under ZeRO-3 each
    // gathered copy of a matrix (the biases are cast once).
    const double copies = convert.gatheredCopies;
    for (const std::vector<Linear> *group : {&qkv, &fc1})
      for (const Linear &l : *group)
        if (!moe || group == &qkv) {
          convert(bwd, double(l.in) * double(l.out), copies);
          if (l.bias)
            convert(bwd, double(l.out));
        }
    convert(bwd, double(proj.in) * double(proj.out), copies);
    if (proj.bias)
      convert(bwd, double(proj.out));
    if (!moe) {
      convert(bwd, double(fc2.in) * double(fc2.out), copies);
      if (fc2.bias)
        convert(bwd, double(fc2.out));
    } else {
      // MoE: the expert matrices and the router's weight; the router's logits widened for its
      // f32 softmax and the probabilities narrowed (its gradient's the same); each expert
      // matrix's half gradient (moe_matmul_weight_grad) widened for its f32 accumulation.
      double expertMatrix = double(moe->localExperts) * double(h) * double(moe->ffn);
      double matrices = s.gatedMlp ? 3 : 2;
      convert(bwd, expertMatrix, matrices * copies);
      convert(bwd, double(moe->Er) * double(h), copies);
      convert(fwd, moe->Tg * double(moe->Er), 2);
      convert(bwd, moe->Tg * double(moe->Er), 2);
      convert(bwd, expertMatrix, matrices);
    }
  }

  if (stack.separateGradAccumulation) {
    // Per micro-batch: main_grad (fp32) += this micro-batch's gradient of every local weight.
    // One add per parameter tensor (megac's accumulators; Megatron's main_grad hooks).
    double wholeKv = replicas > 1 ? kvProjectionParameters(s) : 0.0;
    double experts = expertParameters(s);
    double params = (layerParameters(s) - experts - wholeKv) / double(t) + wholeKv +
                    experts / double(g.ep) / (stack.expertTensorParallel ? double(t) : 1.0);
    double matrices = double(qkv.size()) + 1 + (s.gatedMlp ? 3 : 2) + (s.experts > 0 ? 1 : 0);
    double tensors = matrices * (bias ? 2 : 1) + (bias ? 4 : 2);
    if (gemmAccumulates(stack, g.precision)) {
      // The matrices accumulate inside their weight-gradient GEMM; each bias (column-parallel
      // ones split over tp, row-parallel ones whole) and the two norms' vectors keep an add.
      const double all = params;
      params = double(bias ? 4 : 2) * double(h);
      if (bias) {
        for (const std::vector<Linear> *column : {&qkv, &fc1})
          for (const Linear &l : *column)
            params += double(l.out) / double(t);
        params += double(proj.out + fc2.out);
      }
      tensors = (bias ? matrices : 0) + (bias ? 4 : 2);
      if (g.gradientShards > 1) {
        // ZeRO-2/3: each matrix's gradient is reduce-scattered before it is accumulated, into
        // its 1/shards shard, so no GEMM can accumulate it: one add per matrix (experts too).
        params += (all - params) / double(g.gradientShards);
        tensors += matrices;
      } else if (s.experts > 0 && isHalf(g.precision)) {
        // The experts' weight gradients (moe_matmul_weight_grad) keep a widened add under half.
        params += experts / double(g.ep) / (stack.expertTensorParallel ? double(t) : 1.0);
        tensors += s.gatedMlp ? 3 : 2;
      }
    }
    // Reads the gradient (f32 once widened: halfCastInstructions) and the f32 accumulator,
    // writes the accumulator.
    PassKernels acc;
    Builder{&acc}.mem(KernelClass::elementwise, params * double(casts ? 12 : e + 8) / tensors,
                      tensors);
    for (KernelOp &op : acc.kernels)
      op.f32Operands = casts;
    out.gradAccumulation = acc.kernels;
  }
  return out;
}

EdgeKernels edgeKernels(const TransformerShape &s, const LayerGeometry &g,
                        const StackProfile &stack) {
  const int64_t t = g.tp, e = elementBytes(g.precision);
  const int64_t sq = s.seq / std::max<int64_t>(1, g.cp); // this rank's tokens of a sample
  const int64_t T = g.microBatch * sq, h = s.hidden, vocab = ceilDiv(s.vocab, t);
  const double Tl = g.sequenceParallel ? double(T) / double(t) : double(T);
  const double act = double(T) * double(h) * double(e);
  const double region = Tl * double(h) * double(e);
  const HalfCasts convert(stack, g);
  const bool casts = convert.on;
  const double normRegion = convert.f32Region(Tl * double(h));
  EdgeKernels out;
  // Embedding: vocab-parallel lookup (a partial sum over tp: all-reduced, or reduce-scattered
  // under SP), learned positions added; backward scatters into the table's gradient.
  Builder ef{&out.embedForward}, eb{&out.embedBackward};
  // Kernel bytes are operands + results (the CostOpInterface's and `megac calibrate`'s count):
  // the lookup reads the table shard and the ids and writes the rows.
  const double table = double(vocab) * double(h) * double(e), ids = double(T) * 8;
  // The table, for the lookup (and a tied head): under ZeRO-3 each gathered copy.
  convert(ef, double(vocab) * double(h), convert.gatheredCopies);
  if (!s.rope)
    convert(ef, double(sq) * double(h)); // the learned positions
  ef.mem(KernelClass::embedding, table + ids + act);
  if (!s.rope && !stack.elementwiseFusion) { // learned positions broadcast over the batch, added
    // Under sequence parallelism megac slices this rank's rows of the table first (ShardSlice).
    // The broadcast then reads those rows and writes the rank's region.
    bool sliced = stack.positionBroadcastKernel && t > 1 && g.sequenceParallel;
    if (sliced)
      ef.mem(KernelClass::copy, 2 * double(sq / t) * double(h) * double(e));
    if (stack.positionBroadcastKernel)
      ef.mem(KernelClass::broadcast, sliced ? region + double(sq / t) * double(h) * double(e)
                                            : act + double(sq) * double(h) * double(e));
    ef.mem(KernelClass::elementwise, 3 * act);
  }
  if (s.dropout > 0)
    ef.mem(KernelClass::dropout, Tl * double(h) * double(2 * e + 1));
  if (t > 1)
    ef.comm(g.sequenceParallel ? Collective::reduceScatter : Collective::allReduce, act);
  if (t > 1 && g.sequenceParallel)
    eb.comm(Collective::allGather, act);
  // The first block's two input gradients are summed by the block's own backward (each block
  // charges the sum at its start, which is the sum for the input of the block after it: the
  // count per stage is its blocks', e2e_plan_kernels' pp 4 middle stages check it). Learned
  // positions' row sum.
  if (stack.embeddingGradKernels) {
    if (!s.rope) {
      eb.mem(KernelClass::reduce, act);
      convert(eb, double(sq) * double(h)); // the positions' gradient, widened
    }
    else { // rope's backward table -swap_halves(sin): a negation, two slices and a concat
      double sinTable = 2.0 * double(sq) * double(h / s.heads) * double(e);
      Builder rt{&out.ropeTable};
      rt.mem(KernelClass::elementwise, sinTable);
      rt.mem(KernelClass::copy, sinTable, 3);
      eb.pass->kernels.insert(eb.pass->kernels.end(), out.ropeTable.kernels.begin(),
                              out.ropeTable.kernels.end());
    }
  }
  eb.mem(KernelClass::embeddingGrad, act + ids + table);
  out.embedBackward.kernels.back().weightGradient = true;
  convert(eb, double(vocab) * double(h)); // the table's gradient, widened
  // Logit layer: final norm, [gather], logits GEMM against the (tied) table, vocab-parallel
  // cross entropy (three all-reduces of one fp32 per token: max, sum of exp, target logit).
  Builder hf{&out.headForward}, hb{&out.headBackward};
  const KernelClass norm = s.biases ? KernelClass::layerNorm : KernelClass::rmsNorm;
  const KernelClass normGrad = s.biases ? KernelClass::layerNormGrad : KernelClass::rmsNormGrad;
  double logits = double(T) * double(vocab);
  hf.mem(norm, 2 * normRegion);
  convert(hf, Tl * double(h), 2);
  Builder{&out.headChunkRecompute}.mem(norm, 2 * normRegion);
  if (!s.tiedEmbedding)
    convert(hf, double(vocab) * double(h)); // an untied head's weight
  else {
    Builder tied{&out.tiedHeadCast};
    convert(tied, double(vocab) * double(h));
  }
  if (t > 1 && g.sequenceParallel)
    hf.comm(Collective::allGather, act);
  const double headBytes = double(vocab) * double(h) * double(e);
  hf.gemm(T, vocab, h);
  hf.cold(headBytes);
  if (stack.recomputeDropsUnreadForward) { // the logits, for the loss gradient
    Builder re{&out.headRecompute};
    re.gemm(T, vocab, h);
    convert(re, Tl * double(h), 2); // the final norm's casts
    convert(re, logits);           // the logits widened
  }
  // Megatron computes the vocab-parallel loss in fp32 in separate passes (cast, max, subtract,
  // exp, sum, log, target); megac's kernel reads the logits in one fused call.
  bool fused = stack.fusedCrossEntropy;
  // megac's half precision: the logits widened, the loss and its gradient in f32.
  const int64_t le = casts ? 4 : e;
  convert(hf, logits);
  hf.mem(KernelClass::crossEntropy, logits * (fused ? double(le) : double(le + 4 * 5)));
  if (stack.lossKernels) { // the mean over tokens and the loss scale; the scaled gradient broadcast
                           // back
    hf.mem(KernelClass::reduce, double(T) * 4);
    hf.mem(KernelClass::elementwise, 8, 2);
    hb.mem(KernelClass::broadcast, double(T) * 4);
  }
  for (int i = 0; i < 3 && t > 1; ++i)
    hf.comm(Collective::allReduce, double(T) * 4);
  if (s.experts > 0 && stack.routerOpByOp) {
    // The layers' router statistics stacked for the log (a concat); the load-balancing loss'
    // gradient seed: 2 scalar products and 2 small broadcasts (StackProfile::routerOpByOp).
    hf.mem(KernelClass::copy, 64);
    hb.mem(KernelClass::elementwise, 64, 2);
    hb.mem(KernelClass::broadcast, 64, 2);
    // Under half casts: the loss coefficient narrowed, the stacked statistics and the two
    // summed loss terms widened.
    convert(hf, double(s.experts) * double(s.layers), 1);
    convert(hf, 1, 3);
  }
  hb.mem(KernelClass::crossEntropyGrad, logits * (fused ? double(2 * le) : double(4 * 3 + le)));
  convert(hb, logits);
  hb.gemm(T, h, vocab);
  if (!stack.transposeInstructions)
    hb.cold(headBytes);
  hb.gemm(vocab, h, T);
  hb.cold(headBytes);
  out.headBackward.kernels.back().weightGradient = true;
  if (stack.transposeInstructions) {
    hb.mem(KernelClass::transpose, 2.0 * headBytes);
    hb.cold(headBytes);
    hb.mem(KernelClass::transpose, 2.0 * logits * double(e));
  }
  if (t > 1)
    hb.comm(g.sequenceParallel ? Collective::reduceScatter : Collective::allReduce, act);
  hb.mem(normGrad, 3 * normRegion);
  convert(hb, Tl * double(h), 2);
  if (stack.separateGradAccumulation && stack.accumulatesEdgeGradients) {
    // One accumulation add per tensor and micro-batch, each on the stage that holds it: the
    // embedding table and learned positions with the embedding, the final norm (and an untied
    // head) with the head. A tied table's scatter is added to the accumulator first, which the
    // head's GEMM then accumulates into; an untied head's gradient accumulates inside its GEMM
    // where the stack's GEMMs accumulate.
    auto accumulate = [&](Builder &b, double params, double tensors) {
      if (tensors > 0) {
        b.mem(KernelClass::elementwise, params * double(casts ? 12 : e + 8) / tensors, tensors);
        b.pass->kernels.back().f32Operands = casts;
      }
    };
    double table = double(s.vocab) * double(h) / double(t);
    double positions = s.rope ? 0.0 : double(s.seq) * double(h);
    accumulate(eb, table + positions, 1 + (s.rope ? 0 : 1));
    // ZeRO-2/3 reduce-scatter each micro-batch's gradients: a tied table's two (the embedding's
    // scatter, the head's GEMM) are summed into one whole table first (megac plan -o: an Add of
    // [vocab, hidden] before the table's ReduceScatter).
    if (s.tiedEmbedding && g.gradientShards > 1)
      eb.mem(KernelClass::elementwise, 3 * table * double(e));
    bool headAdds = !s.tiedEmbedding && !gemmAccumulates(stack, g.precision);
    double normParams = double(h) * (s.biases ? 2 : 1);
    accumulate(hb, normParams + (headAdds ? table : 0.0), (s.biases ? 2 : 1) + (headAdds ? 1 : 0));
  }
  return out;
}

double busiestExpertRankShare(const TransformerShape &shape, int64_t ep) {
  if (ep <= 1 || shape.moeLoad.empty())
    return 1.0;
  double busiest = 0, mean = 0;
  for (const std::vector<double> &experts : shape.moeLoad) {
    const int64_t E = int64_t(experts.size());
    if (E == 0 || E % ep != 0)
      return 1.0; // not this layout's grouping (PlanSearch validates the counts)
    const int64_t local = E / ep;
    double total = 0, most = 0;
    for (int64_t r = 0; r < ep; ++r) {
      double rank = 0;
      for (int64_t x = r * local; x < (r + 1) * local; ++x)
        rank += experts[size_t(x)];
      most = std::max(most, rank);
      total += rank;
    }
    busiest += most;
    mean += total / double(ep);
  }
  return mean > 0 ? std::max(1.0, busiest / mean) : 1.0;
}

} // namespace megac::planner
