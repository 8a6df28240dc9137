// The CPU reference kernels: one function per plan opcode, the numerics every other backend
// (CUDA) is tested against.
//
// Kernels know nothing of plans or FlatBuffers: they take TensorRefs (dtype, shape, memory) and
// plain attributes, check every shape and dtype they rely on, and write a caller-allocated
// output. A mismatch, an unsupported dtype or a bad index is a Status error that starts with
// the op's name ("Linear: ..."); a kernel never reads or writes outside the refs it is given.
// Outputs must not overlap inputs (the executor routes overlapping ones through scratch memory),
// except that the elementwise kernels (unary, binary, compare, where, cast, copy, gelu,
// geluGrad, dropout), adamw and clipByNorm may run in place: an output whose memory is exactly
// an input's, element for element.
//
// Dtypes: floating kernels run on f32 and f64. bf16 and f16 are storage types: Cast, Copy and
// the data-movement kernels (Transpose, Slice, Concat, Broadcast, Where, Gather, Embedding, Pad)
// handle them; arithmetic on them is an error naming the op and dtype here, and the executor
// runs it through computeInF32 (HalfCompute.h): the f32 kernel on widened inputs, rounded.
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <optional>
#include <span>

namespace megac::runtime::cpu {

/// A tensor's dtype, row-major shape and memory. Does not own anything.
struct TensorRef {
  DType dtype = DType::f32;
  std::span<const int64_t> shape;
  void *data = nullptr;

  int64_t numElements() const;
  size_t byteSize() const { return static_cast<size_t>(numElements()) * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
};

inline TensorRef refOf(HostTensor &t) { return {t.dtype, t.shape, t.bytes.data()}; }
/// Inputs are never written through, so a const tensor may back a ref.
inline TensorRef refOf(const HostTensor &t) {
  return {t.dtype, t.shape, const_cast<uint8_t *>(t.bytes.data())};
}

// ---- Elementwise (Elementwise.cpp) ---------------------------------------------------------

enum class UnaryOp { Neg, Abs, Exp, Log, Tanh, Erf, Sigmoid, Relu, Sqrt, Rsqrt, Not, Sin, Cos };
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Min, Max, And, Or };
enum class ComparePredicate { eq, ne, lt, le, gt, ge };

const char *unaryOpName(UnaryOp op);
const char *binaryOpName(BinaryOp op);

/// out = op(x), same shape and dtype. Neg/Abs/Relu: f32 f64 i64 i32; Not: i1; the rest: f32
/// f64. Integer Neg/Abs wrap around (as two's complement) instead of overflowing.
Status unary(UnaryOp op, const TensorRef &x, const TensorRef &out);
/// out = op(a, b); a, b and out of one shape and dtype. Add/Sub/Mul/Div/Min/Max: f32 f64 i64
/// i32 (integers wrap; integer Div truncates toward zero, and dividing by zero is an error);
/// Pow: f32 f64 (std::pow); And/Or: i1. Min/Max propagate NaN, as torch.minimum does.
Status binary(BinaryOp op, const TensorRef &a, const TensorRef &b, const TensorRef &out);
/// out (i1) = a <pred> b; a and b of one shape and dtype (f32 f64 i64 i32 i1).
Status compare(ComparePredicate predicate, const TensorRef &a, const TensorRef &b,
               const TensorRef &out);
/// out = cond ? a : b, cond i1; all of one shape; a, b, out of one dtype (any).
Status where(const TensorRef &cond, const TensorRef &a, const TensorRef &b, const TensorRef &out);
/// Converts x to out's dtype (same shape); every pair of dtypes. Float -> int truncates toward
/// zero and saturates (NaN -> 0); -> i1 is x != 0; i1 -> 1 or 0; -> bf16/f16 rounds to nearest
/// even (a double goes through float first, as in PyTorch).
Status cast(const TensorRef &x, const TensorRef &out);
/// GELU: exact x*0.5*(1+erf(x/sqrt 2)), or with `tanh` 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))).
Status gelu(const TensorRef &x, bool tanh, const TensorRef &out);
/// SiLU: x / (1 + exp(-x)) (x * sigmoid(x)).
Status silu(const TensorRef &x, const TensorRef &out);

/// Whether dropout keeps element `index`: the first word of philox4x32 with counter
/// (index lo, index hi, stream lo, stream hi) and key (seed lo, seed hi) is >= ratio * 2^32.
bool dropoutKeeps(uint64_t seed, int64_t stream, uint64_t index, double ratio);
/// out[i] = keep(firstIndex + i) ? x[i] / (1 - ratio) : 0, with the seed read from `seed` (a
/// 0-d i64 or i32). ratio in [0, 1]; 0 is the identity, 1 gives zeros. `firstIndex` lets a
/// caller that holds elements [a, b) of a larger tensor draw that tensor's mask.
Status dropout(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
               const TensorRef &out, uint64_t firstIndex = 0);
/// Dropout of x, the shard at `shardOffset` of a tensor of `globalShape` (both of x's rank):
/// element i of x draws the mask of its row-major index in the global tensor, so every
/// sharding of a tensor drops the same elements.
Status dropoutShard(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
                    std::span<const int64_t> globalShape, std::span<const int64_t> shardOffset,
                    const TensorRef &out);

// ---- Data movement (DataMovement.cpp); any dtype ------------------------------------------

/// out = x, byte for byte; the shapes may differ (a reshape) but the element counts may not.
Status copy(const TensorRef &x, const TensorRef &out);
/// out.shape[i] = x.shape[perm[i]].
Status transpose(const TensorRef &x, std::span<const int64_t> perm, const TensorRef &out);
/// out[i...] = x[starts + i * strides] per dim; the sizes are out's shape. A stride may be
/// negative (a reversed slice) but not 0.
Status slice(const TensorRef &x, std::span<const int64_t> starts, std::span<const int64_t> strides,
             const TensorRef &out);
/// Joins `inputs` along `axis` (every other dim equal).
Status concat(std::span<const TensorRef> inputs, int64_t axis, const TensorRef &out);
/// numpy broadcast of x to out's shape (right-aligned; x's dims equal out's or are 1).
Status broadcast(const TensorRef &x, const TensorRef &out);
/// ONNX Gather: out = data[..., indices[...], ...] along `axis`; out's shape is
/// data.shape[:axis] + indices.shape + data.shape[axis+1:]. Indices i64/i32 in [-n, n); a
/// negative one counts from the end; anything else is an error naming it.
Status gather(const TensorRef &data, const TensorRef &indices, int64_t axis, const TensorRef &out);
/// out[..., :] = table[ids[...], :]; table [V, h], ids i64/i32 in [0, V), out [..., h].
Status embedding(const TensorRef &table, const TensorRef &ids, const TensorRef &out);
/// Zero padding: per dim `low` zeros before, `high` after and `interior` between neighbouring
/// elements (all >= 0); out's dims are low + high + n + max(n - 1, 0) * interior.
Status pad(const TensorRef &x, std::span<const int64_t> low, std::span<const int64_t> high,
           std::span<const int64_t> interior, const TensorRef &out);

// ---- Element indexing (Indexing.cpp) -------------------------------------------------------
// Indices are i64 or i32 in [-n, n) for the dim they index (negative ones count from the end);
// any other is an error naming it, raised before the output is written.

/// Cumulative sum along `axis` (j <= i; j < i with exclusive; from the end with reverse), in
/// index order; f32 f64 i64 i32 (integers wrap). May run in place.
Status cumsum(const TensorRef &x, int64_t axis, bool exclusive, bool reverse, const TensorRef &out);
/// ONNX GatherElements: out[i...] = data[i with coordinate `axis` replaced by indices[i...]];
/// indices (data's rank, no dim larger than data's but `axis`) and out have one shape.
Status gatherElements(const TensorRef &data, const TensorRef &indices, int64_t axis,
                      const TensorRef &out);
/// ONNX ScatterElements: out = data, then out[i with `axis` = indices[i...]] = updates[i...]
/// (+= with accumulate: f32 f64 i64 i32) in row-major order; updates has indices' shape.
Status scatterElements(const TensorRef &data, const TensorRef &indices, const TensorRef &updates,
                       int64_t axis, bool accumulate, const TensorRef &out);
/// ONNX ScatterND: indices [..., k]; out = data, then the slice data[j_0..j_{k-1}] of each tuple
/// is overwritten by (or, with accumulate, added to) the matching updates slice, in order.
Status scatterNd(const TensorRef &data, const TensorRef &indices, const TensorRef &updates,
                 bool accumulate, const TensorRef &out);

// ---- Reductions (Reduction.cpp) -----------------------------------------------------------

enum class ReduceKind { sum, mean, max, min };

/// Reduces x over `axes` (distinct, in [0, rank)); out's rank says whether the reduced dims
/// are kept (as 1s) or dropped. Floats accumulate in double; integers wrap (mean truncates).
/// Max/min propagate NaN and are an error over an empty set.
Status reduce(ReduceKind kind, const TensorRef &x, std::span<const int64_t> axes,
              const TensorRef &out);
/// Softmax along `axis`, with max subtraction and a double sum. A row of all -inf gives NaN,
/// as in PyTorch (Attention, unlike Softmax, turns fully masked rows into zeros).
Status softmax(const TensorRef &x, int64_t axis, const TensorRef &out);
/// Per-token loss: out[...] = logsumexp(logits[..., :]) - logits[..., label], computed in
/// double; labels i64/i32 in [0, V) or equal to the ignore index (loss 0). out has logits'
/// dtype and labels' shape.
Status crossEntropy(const TensorRef &logits, const TensorRef &labels,
                    std::optional<int64_t> ignoreIndex, const TensorRef &out);

// ---- Contractions and coarse ops (Nn.cpp), f32 and f64 -------------------------------------

/// How MatMul reads its operands (plan MatMulAttrs): with transposeLhs lhs is stored
/// [..., k, m] and read as its last-two-dims transpose, likewise rhs [..., n, k].
struct MatMulFlags {
  bool transposeLhs = false, transposeRhs = false;
};
/// op(lhs) [..., m, k] x op(rhs) [..., k, n] (+ acc) -> out [..., m, n], batch dims broadcast
/// numpy-style; op is the transpose of the last two dims where `flags` say so (BLAS's trans
/// flags, no copy). With `acc` (out's shape and dtype; it may be out's very memory) the product
/// is added to it: gradient accumulation with beta = 1. Through cblas_sgemm/dgemm. With `acc`,
/// bf16/f16 lhs and rhs may accumulate into an f32 out (mixed precision): cblas_sgemm on the
/// exactly widened operands, so the product is summed in f32 and never rounded to half.
Status matmul(const TensorRef &lhs, const TensorRef &rhs, const TensorRef &out,
              MatMulFlags flags = {}, const TensorRef *acc = nullptr);
/// out [..., out] = x [..., in] * weight[out, in]^T (+ bias [out]).
Status linear(const TensorRef &x, const TensorRef &weight, const TensorRef *bias,
              const TensorRef &out);
/// Normalizes over the last dim with the biased variance (statistics in double), then
/// * weight (+ bias); weight and bias have the last dim's size.
Status layerNorm(const TensorRef &x, const TensorRef &weight, const TensorRef *bias, double epsilon,
                 const TensorRef &out);
/// x / sqrt(mean(x^2) + epsilon) * weight over the last dim (statistics in double).
Status rmsNorm(const TensorRef &x, const TensorRef &weight, double epsilon, const TensorRef &out);
/// Rotary embedding, rotate_half convention: out = x * cos + rotate_half(x) * sin with
/// rotate_half(x) = [-x[..., d/2:], x[..., :d/2]]; x [..., d] with d even; cos and sin of one
/// shape ending in d that broadcasts to x's (right-aligned). Not in place (reads both halves).
Status rope(const TensorRef &x, const TensorRef &cos, const TensorRef &sin, const TensorRef &out);
/// Scaled dot-product attention. q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv] -> out [b,s,h,dv];
/// hk divides h and query head i reads kv head i / (h / hk). scores = scale * q.k + mask, the
/// mask broadcast numpy-style to [b,h,s,t]: of q's dtype it is added, of i1 it keeps where
/// true (PyTorch's boolean attn_mask). `causal` masks key j > i + (t - s). Per (batch, head):
/// scores and out by GEMM in the input type; softmax with max subtraction, row sums in double;
/// a fully masked row gives zeros, not NaN.
/// `positions` (instead of `causal` and the mask): causal by global position, query i sees key
/// j iff positions.key[j] <= positions.query[i] (i64 [s] and [t]; context parallelism's
/// permuted sequence).
struct AttentionPositions {
  const TensorRef *query = nullptr, *key = nullptr;
};
Status attention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef *mask,
                 bool causal, double scale, const TensorRef &out,
                 AttentionPositions positions = {});

// ---- Backward ops (Grad.cpp), f32 and f64; reductions accumulate in double, except the GEMMs
// ---- of attentionGrad (dq, dk, dv), which run in the input type inside BLAS -----------------
//
// Each is the exact derivative of its forward kernel above, recomputing the statistics or
// probabilities from the forward's inputs, and reduces in a fixed order (deterministic).

/// LayerNorm without or with bias: dx, dweight = sum(dy * xhat) and dbias = sum(dy) over all but
/// the last dim; biased variance, as the forward.
Status layerNormGrad(const TensorRef &dy, const TensorRef &x, const TensorRef &weight,
                     double epsilon, const TensorRef &dx, const TensorRef &dweight,
                     const TensorRef &dbias);
/// RmsNorm: dx and dweight = sum(dy * x / rms) over all but the last dim.
Status rmsNormGrad(const TensorRef &dy, const TensorRef &x, const TensorRef &weight, double epsilon,
                   const TensorRef &dx, const TensorRef &dweight);
/// Attention (same contract as attention()): dq, dk, dv from the output's gradient `dout`
/// [b,s,h,dv], probabilities recomputed; dk and dv sum over the query heads sharing a kv head.
/// With a mask (of q's dtype: additive; an i1 mask has no gradient and is an error here),
/// `dmask` (the mask's shape) is the gradient of the added scores summed over the dims the mask
/// broadcast along. Fully masked rows contribute nothing. With `positions` (as attention()'s)
/// there is no mask and no dmask.
Status attentionGrad(const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                     const TensorRef &v, const TensorRef *mask, bool causal, double scale,
                     const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                     const TensorRef *dmask, AttentionPositions positions = {});
/// dx = dy * gelu'(x) for the exact or the tanh GELU.
Status geluGrad(const TensorRef &dy, const TensorRef &x, bool tanh, const TensorRef &dx);
/// From y = softmax(x, axis): dx = y * (dy - sum(dy * y, axis)).
Status softmaxGrad(const TensorRef &dy, const TensorRef &y, int64_t axis, const TensorRef &dx);
/// dlogits[..., j] = dloss[...] * (softmax(logits)[..., j] - (j == label)); rows whose label is
/// the ignore index are zero, and any other label outside [0, V) is an error.
Status crossEntropyGrad(const TensorRef &dloss, const TensorRef &logits, const TensorRef &labels,
                        std::optional<int64_t> ignoreIndex, const TensorRef &dlogits);
/// dtable [V, h] = 0, then dtable[ids[i], :] += dy[i, :] for i in order (dy [..., h], ids
/// [...] i64/i32). An id outside [0, V) is an error.
Status embeddingGrad(const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable);

// ---- Mixture of experts (Moe.cpp), f32 and f64 ---------------------------------------------
// Routing weights w [t..., E] (T tokens: the leading dims flattened); routed tensors [E, t..., f];
// (t, e) is active where w[t, e] != 0. Only active rows are computed; inactive rows are 0.
// Sums run experts ascending, tokens ascending (deterministic).

/// out = 1 at the k largest entries of each last-dim row of x, 0 elsewhere; ties go to the
/// lower index, NaN ranks last. 1 <= k <= the last dim.
Status topkMask(const TensorRef &x, int64_t k, const TensorRef &out);
/// out [E, t..., h]: row (e, t) = w[t, e] x[t] where active, else 0; x [t..., h].
Status moeDispatch(const TensorRef &x, const TensorRef &w, const TensorRef &out);
/// out [t..., h] = sum over active e (ascending) of w[t, e] y[e, t]; y [E, t..., h].
Status moeCombine(const TensorRef &y, const TensorRef &w, const TensorRef &out);
/// out [E, t..., out]: active rows x[e, t] weight[e]^T (weight [E, out, in]) or, with
/// transposeWeight, x[e, t] weight[e] (weight [E, in, out]); one GEMM per expert on its active
/// rows packed in token order.
Status moeMatmul(const TensorRef &x, const TensorRef &weight, const TensorRef &w,
                 bool transposeWeight, const TensorRef &out);
/// out [t..., E] = dot(y[e, t], z[t]) where active, else 0; y [E, t..., h], z [t..., h].
Status moeRowDot(const TensorRef &y, const TensorRef &z, const TensorRef &w, const TensorRef &out);
/// out [E, p, q] = sum over e's active rows (token order) of a[e, t]^T b[e, t]; a [E, t..., p],
/// b [E, t..., q]. One GEMM per expert. With `acc` ([E, p, q], out's dtype; may be out's own
/// memory) the sums are added to it (beta = 1): out = acc + sums.
Status moeMatmulWeightGrad(const TensorRef &a, const TensorRef &b, const TensorRef &w,
                           const TensorRef &out, const TensorRef *acc = nullptr);

// ---- Optimizer (Optim.cpp), f32 and f64 -----------------------------------------------------

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.0;
};

/// One step of torch.optim.AdamW on p, g, m, v (one shape and dtype), lr a 0-d f32/f64 and step a
/// 0-d i64/i32 >= 1:
///   p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
///   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
/// per element in double (bias corrections too) from the stored values, each result rounded
/// once. The outputs may be the inputs' memory (in place).
Status adamw(const TensorRef &p, const TensorRef &g, const TensorRef &m, const TensorRef &v,
             const TensorRef &lr, const TensorRef &step, const AdamWConfig &config,
             const TensorRef &pOut, const TensorRef &mOut, const TensorRef &vOut);
/// One tensor of a multi-tensor AdamW: p, g, m, v, where it writes p, m, v (its own inputs'
/// memory, or memory no tensor of the call reads) and its weight decay.
struct AdamWTensor {
  TensorRef p, g, m, v, pOut, mOut, vOut;
  double weightDecay = 0.0;
};
/// adamw on every tensor (f32 or f64, each its own shape and dtype) with one lr, step, betas
/// and eps (config.weightDecay unused: each tensor has its own), in one parallel loop over all
/// their elements: bit for bit adamw's results. With `norm` (0-d, every gradient's dtype) each
/// gradient is clipped first as clipByNorm(g, *norm, maxNorm) would (the same bits), inside the
/// loop.
Status adamwMulti(std::span<const AdamWTensor> tensors, const TensorRef &lr,
                  const TensorRef &step, const AdamWConfig &config,
                  const TensorRef *norm = nullptr, double maxNorm = 0.0);
/// out (0-d f32/f64) = sqrt(sum over every input of sum(x^2)), accumulated in double in one
/// fixed order whatever the thread count (blocks of 8192 elements, 8 lanes each, the block sums
/// in input order), the blocks on the kernel threads; inputs are f32 or f64.
Status globalNorm(std::span<const TensorRef> inputs, const TensorRef &out);
/// out = x * min(1, maxNorm / (norm + 1e-6)) with the coefficient computed in x's dtype, as
/// torch.nn.utils.clip_grad_norm_ does; norm is 0-d of x's dtype, maxNorm > 0.
Status clipByNorm(const TensorRef &x, const TensorRef &norm, double maxNorm, const TensorRef &out);

} // namespace megac::runtime::cpu
