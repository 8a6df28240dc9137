// The CPU reference kernels: one function per plan opcode, the numerics every other backend
// (CUDA) is tested against.
//
// Kernels know nothing of plans or FlatBuffers: they take TensorRefs (dtype, shape, memory) and
// plain attributes, check every shape and dtype they rely on, and write a caller-allocated
// output. A mismatch, an unsupported dtype or a bad index is a Status error that starts with
// the op's name ("Linear: ..."); a kernel never reads or writes outside the refs it is given.
// Outputs must not overlap inputs (the executor routes overlapping ones through scratch memory).
//
// Dtypes: floating kernels run on f32 and f64. bf16 and f16 are storage types for now: Cast,
// Copy and the data-movement kernels (Transpose, Slice, Concat, Broadcast, Where, Gather,
// Embedding) handle them; arithmetic on them is an error naming the op and dtype.
#pragma once

#include "runtime/Status.h"
#include "runtime/io/HostTensor.h"

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

enum class UnaryOp { Neg, Abs, Exp, Log, Tanh, Erf, Sigmoid, Relu, Sqrt, Rsqrt, Not };
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

/// Whether dropout keeps element `index`: the first word of philox4x32 with counter
/// (index lo, index hi, stream lo, stream hi) and key (seed lo, seed hi) is >= ratio * 2^32.
bool dropoutKeeps(uint64_t seed, int64_t stream, uint64_t index, double ratio);
/// out[i] = keep(firstIndex + i) ? x[i] / (1 - ratio) : 0, with the seed read from `seed` (a
/// 0-d i64 or i32). ratio in [0, 1]; 0 is the identity, 1 gives zeros. `firstIndex` lets a
/// caller that holds elements [a, b) of a larger tensor draw that tensor's mask.
Status dropout(const TensorRef &x, const TensorRef &seed, double ratio, int64_t stream,
               const TensorRef &out, uint64_t firstIndex = 0);

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

/// lhs [..., m, k] x rhs [..., k, n] -> out [..., m, n], batch dims broadcast numpy-style.
/// Through cblas_sgemm/dgemm.
Status matmul(const TensorRef &lhs, const TensorRef &rhs, const TensorRef &out);
/// out [..., out] = x [..., in] * weight[out, in]^T (+ bias [out]).
Status linear(const TensorRef &x, const TensorRef &weight, const TensorRef *bias,
              const TensorRef &out);
/// Normalizes over the last dim with the biased variance (statistics in double), then
/// * weight (+ bias); weight and bias have the last dim's size.
Status layerNorm(const TensorRef &x, const TensorRef &weight, const TensorRef *bias, double epsilon,
                 const TensorRef &out);
/// x / sqrt(mean(x^2) + epsilon) * weight over the last dim (statistics in double).
Status rmsNorm(const TensorRef &x, const TensorRef &weight, double epsilon, const TensorRef &out);
/// Scaled dot-product attention. q [b,s,h,d], k [b,t,hk,d], v [b,t,hk,dv] -> out [b,s,h,dv];
/// hk divides h and query head i reads kv head i / (h / hk). scores = scale * q.k + mask, the
/// mask broadcast numpy-style to [b,h,s,t]: of q's dtype it is added, of i1 it keeps where
/// true (PyTorch's boolean attn_mask). `causal` masks key j > i + (t - s). Softmax in double
/// with max subtraction; a fully masked row gives zeros, not NaN.
Status attention(const TensorRef &q, const TensorRef &k, const TensorRef &v, const TensorRef *mask,
                 bool causal, double scale, const TensorRef &out);

} // namespace megac::runtime::cpu
