// The CUDA kernels: one function per plan opcode, each with the contract of its CPU reference
// in runtime/cpu/Kernels.h (same name, same arguments, same shape and dtype checks, same error
// messages starting with the op's name), plus a leading Context. Every one is tested against
// the CPU kernel (tests/unit/cuda, |got - ref| <= atol + rtol*|ref| per dtype).
//
// Memory: a TensorRef's `data` points to device memory; its shape lives on the host. Kernels
// are asynchronous: they check shapes and dtypes on the host, enqueue work on ctx.stream and
// return; a launch failure is a Status error. Nothing synchronizes the stream.
//
// Data-dependent errors (an embedding id or a label out of range, a gather index) cannot be
// returned from the device: the kernel records a DeviceError code in *ctx.errors (the first one
// wins) and leaves the offending output rows zero; the executor reads the flag after each
// function and reports the code with the op's name (deviceErrorMessage).
//
// Dtypes: where the CPU kernel takes f32/f64, the CUDA kernel takes f32, f64, bf16 and f16;
// half types are loaded into f32, computed in f32 and rounded once into the output (the CPU
// reference runs them through computeInF32, so the results agree to the half type's rounding).
// Statistics the CPU keeps in double (norms, softmax sums, losses) are kept in f32 for f32 and
// half inputs and in double for f64 inputs. Reductions have a fixed order for a given shape
// (no floating-point atomics), so a kernel gives the same bits on every run.
//
// Scratch: a kernel that needs temporary device memory asks ctx.scratch (stream-ordered, valid
// until the kernel's work on ctx.stream has finished; several requests in one call get
// distinct memory).
#pragma once

#include "runtime/cpu/Kernels.h"
#include "support/Status.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

namespace megac::runtime::cuda {

using cpu::AdamWConfig;
using cpu::BinaryOp;
using cpu::ComparePredicate;
using cpu::MatMulFlags;
using cpu::ReduceKind;
using cpu::TensorRef;
using cpu::UnaryOp;

/// Codes a kernel writes into *Context::errors (0: none).
enum class DeviceError : int {
  none = 0,
  indexOutOfRange = 1, // Gather: an index outside [-n, n)
  idOutOfRange = 2,    // Embedding / EmbeddingGrad: an id outside [0, V)
  labelOutOfRange = 3, // CrossEntropy / CrossEntropyGrad: a label outside [0, V), not ignored
  divideByZero = 4,    // integer Div by zero
};
/// "an embedding id outside [0, V)", ...
const char *deviceErrorMessage(DeviceError error);

struct Context {
  cudaStream_t stream = nullptr;
  /// For matmul/linear (cuBLASLt); workspace of workspaceBytes device bytes (may be 0).
  cublasLtHandle_t lt = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  /// f32 GEMMs on tensor cores through TF32 (only when asked: `--allow-tf32`).
  bool allowTf32 = false;
  /// One device int: the first DeviceError a kernel hit (see above).
  int *errors = nullptr;
  /// Temporary device memory (see above); an error when it cannot be had.
  std::function<StatusOr<void *>(size_t bytes)> scratch;
};

/// The error of the last launch on this thread (cudaGetLastError), as "<op>: <CUDA message>".
Status launchStatus(const char *op);

// ---- Elementwise (kernels/Elementwise.cu) ---------------------------------------------------
/// Whether unary()/binary() run `op` on a device: Not, And, Or and every opcode with a formula
/// in kernels/ElementwiseMath.def. The others are an error naming the op.
bool hasUnaryKernel(UnaryOp op);
bool hasBinaryKernel(BinaryOp op);
Status unary(const Context &ctx, UnaryOp op, const TensorRef &x, const TensorRef &out);
Status binary(const Context &ctx, BinaryOp op, const TensorRef &a, const TensorRef &b,
              const TensorRef &out);
Status compare(const Context &ctx, ComparePredicate predicate, const TensorRef &a,
               const TensorRef &b, const TensorRef &out);
Status where(const Context &ctx, const TensorRef &cond, const TensorRef &a, const TensorRef &b,
             const TensorRef &out);
Status cast(const Context &ctx, const TensorRef &x, const TensorRef &out);
Status gelu(const Context &ctx, const TensorRef &x, bool tanh, const TensorRef &out);
Status geluGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x, bool tanh,
                const TensorRef &dx);
/// Silu and Rope (kernels/Llama.cu): the contracts of cpu::silu and cpu::rope.
Status silu(const Context &ctx, const TensorRef &x, const TensorRef &out);
Status rope(const Context &ctx, const TensorRef &x, const TensorRef &cos, const TensorRef &sin,
            const TensorRef &out);
/// `seed` is a 0-d i64/i32 in device memory; the mask is cpu::dropoutKeeps' (philox4x32-10),
/// bit for bit.
Status dropout(const Context &ctx, const TensorRef &x, const TensorRef &seed, double ratio,
               int64_t stream, const TensorRef &out, uint64_t firstIndex = 0);
Status dropoutShard(const Context &ctx, const TensorRef &x, const TensorRef &seed, double ratio,
                    int64_t stream, std::span<const int64_t> globalShape,
                    std::span<const int64_t> shardOffset, const TensorRef &out);

// ---- Data movement (kernels/DataMovement.cu); any dtype --------------------------------------
Status copy(const Context &ctx, const TensorRef &x, const TensorRef &out);
Status transpose(const Context &ctx, const TensorRef &x, std::span<const int64_t> perm,
                 const TensorRef &out);
Status slice(const Context &ctx, const TensorRef &x, std::span<const int64_t> starts,
             std::span<const int64_t> strides, const TensorRef &out);
Status concat(const Context &ctx, std::span<const TensorRef> inputs, int64_t axis,
              const TensorRef &out);
Status broadcast(const Context &ctx, const TensorRef &x, const TensorRef &out);
Status gather(const Context &ctx, const TensorRef &data, const TensorRef &indices, int64_t axis,
              const TensorRef &out);
Status embedding(const Context &ctx, const TensorRef &table, const TensorRef &ids,
                 const TensorRef &out);

// ---- Element indexing (kernels/Indexing.cu): the CPU kernels' contracts, deterministic ------
Status cumsum(const Context &ctx, const TensorRef &x, int64_t axis, bool exclusive, bool reverse,
              const TensorRef &out);
Status gatherElements(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                      int64_t axis, const TensorRef &out);
Status scatterElements(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                       const TensorRef &updates, int64_t axis, bool accumulate,
                       const TensorRef &out);
Status scatterNd(const Context &ctx, const TensorRef &data, const TensorRef &indices,
                 const TensorRef &updates, bool accumulate, const TensorRef &out);
/// dtable = 0, then dtable[ids[i]] += dy[i] summed in a fixed order (ids sorted with their
/// positions, each row's contributions added in position order): deterministic.
Status embeddingGrad(const Context &ctx, const TensorRef &dy, const TensorRef &ids,
                     const TensorRef &dtable);
Status pad(const Context &ctx, const TensorRef &x, std::span<const int64_t> low,
           std::span<const int64_t> high, std::span<const int64_t> interior, const TensorRef &out);

// ---- Vocab-parallel pieces (kernels/DataMovement.cu, kernels/Reduction.cu) -------------------
// The local halves of Megatron's VocabParallelEmbedding and vocab_parallel_cross_entropy; the
// executor adds the collectives (runtime/cuda/DeviceCommOps).

/// Embedding on the vocab shard [vocabStart, vocabStart + V_local) of the table: ids outside it
/// give zero rows.
Status embeddingShard(const Context &ctx, const TensorRef &table, const TensorRef &ids,
                      int64_t vocabStart, const TensorRef &out);
/// dtable of the shard: ids outside it are skipped (deterministic, as embeddingGrad).
Status embeddingShardGrad(const Context &ctx, const TensorRef &dy, const TensorRef &ids,
                          int64_t vocabStart, const TensorRef &dtable);
/// Per row of logits [..., V_local] (the shard starting at vocabStart): rowMax [...] (f32, or
/// f64 for f64 logits) and targetLogit [...] (the label's logit when the label is in the shard,
/// else 0).
Status crossEntropyShardStats(const Context &ctx, const TensorRef &logits, const TensorRef &labels,
                              int64_t vocabStart, const TensorRef &rowMax,
                              const TensorRef &targetLogit);
/// sumExp [...] = sum_j exp(logits[..., j] - globalMax[...]) over the shard.
Status crossEntropyShardSumExp(const Context &ctx, const TensorRef &logits,
                               const TensorRef &globalMax, const TensorRef &sumExp);
/// out = log(sumExp) + globalMax - targetLogit per row (0 for ignored labels), in out's dtype.
Status crossEntropyShardLoss(const Context &ctx, const TensorRef &globalMax,
                             const TensorRef &sumExp, const TensorRef &targetLogit,
                             const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                             const TensorRef &out);
/// dlogits of the shard = dloss * (exp(logits - globalMax) / sumExp - onehot(label - vocabStart));
/// ignored rows 0.
Status crossEntropyShardGrad(const Context &ctx, const TensorRef &dloss, const TensorRef &logits,
                             const TensorRef &labels, int64_t vocabStart,
                             const TensorRef &globalMax, const TensorRef &sumExp,
                             std::optional<int64_t> ignoreIndex, const TensorRef &dlogits);

// ---- Reductions (kernels/Reduction.cu) --------------------------------------------------------
Status reduce(const Context &ctx, ReduceKind kind, const TensorRef &x,
              std::span<const int64_t> axes, const TensorRef &out);
Status softmax(const Context &ctx, const TensorRef &x, int64_t axis, const TensorRef &out);
Status softmaxGrad(const Context &ctx, const TensorRef &dy, const TensorRef &y, int64_t axis,
                   const TensorRef &dx);
Status crossEntropy(const Context &ctx, const TensorRef &logits, const TensorRef &labels,
                    std::optional<int64_t> ignoreIndex, const TensorRef &out);
Status crossEntropyGrad(const Context &ctx, const TensorRef &dloss, const TensorRef &logits,
                        const TensorRef &labels, std::optional<int64_t> ignoreIndex,
                        const TensorRef &dlogits);

// ---- GEMMs (kernels/Gemm.cpp): cuBLASLt; bf16/f16 on tensor cores with f32 accumulation, f32
// ---- in f32 (TF32 only with ctx.allowTf32), f64 in f64 ---------------------------------------
/// op(lhs) op(rhs) (+ acc) as cpu::matmul: the transposes are cuBLASLt's TRANSA/TRANSB, the
/// accumulation its beta = 1 on out (acc copied there first unless it is out's memory); bf16/f16
/// lhs and rhs may accumulate into an f32 out and acc (A, B half, C = D f32, CUBLAS_COMPUTE_32F).
Status matmul(const Context &ctx, const TensorRef &lhs, const TensorRef &rhs, const TensorRef &out,
              MatMulFlags flags = {}, const TensorRef *acc = nullptr);
/// out = x * weight^T (+ bias), the bias fused as a cuBLASLt epilogue.
Status linear(const Context &ctx, const TensorRef &x, const TensorRef &weight,
              const TensorRef *bias, const TensorRef &out);

// ---- Normalization and attention (kernels/Norm.cu, kernels/Attention.cu) ----------------------
Status layerNorm(const Context &ctx, const TensorRef &x, const TensorRef &weight,
                 const TensorRef *bias, double epsilon, const TensorRef &out);
Status rmsNorm(const Context &ctx, const TensorRef &x, const TensorRef &weight, double epsilon,
               const TensorRef &out);
Status layerNormGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x,
                     const TensorRef &weight, double epsilon, const TensorRef &dx,
                     const TensorRef &dweight, const TensorRef &dbias);
Status rmsNormGrad(const Context &ctx, const TensorRef &dy, const TensorRef &x,
                   const TensorRef &weight, double epsilon, const TensorRef &dx,
                   const TensorRef &dweight);
/// Without a mask (causal or not), f32/bf16/f16: cuBLASLt GEMMs with the scores of a chunk of
/// heads (or of a head's query rows) in at most 1 GiB of scratch (kernels/AttentionGemm.h);
/// MEGAC_CUDA_ATTENTION=flash takes the fused flash kernels instead (head dims up to 128,
/// nothing of size s*t stored). A mask tensor, f64 or larger head dims under flash:
/// probabilities through scratch.
Status attention(const Context &ctx, const TensorRef &q, const TensorRef &k, const TensorRef &v,
                 const TensorRef *mask, bool causal, double scale, const TensorRef &out);
Status attentionGrad(const Context &ctx, const TensorRef &dout, const TensorRef &q,
                     const TensorRef &k, const TensorRef &v, const TensorRef *mask, bool causal,
                     double scale, const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                     const TensorRef *dmask);

// ---- Mixture of experts (kernels/Moe.cu): the CPU kernels' contracts, deterministic ----------
// Routing weights w [t..., E]; routed tensors [E, t..., f]; only active rows (w != 0) are
// computed. The GEMMs gather each expert's active rows on the device (a routing kernel writes
// the token lists and counts into ctx.scratch), with no host synchronization.
Status topkMask(const Context &ctx, const TensorRef &x, int64_t k, const TensorRef &out);
Status moeDispatch(const Context &ctx, const TensorRef &x, const TensorRef &w,
                   const TensorRef &out);
Status moeCombine(const Context &ctx, const TensorRef &y, const TensorRef &w, const TensorRef &out);
Status moeMatmul(const Context &ctx, const TensorRef &x, const TensorRef &weight,
                 const TensorRef &w, bool transposeWeight, const TensorRef &out);
Status moeRowDot(const Context &ctx, const TensorRef &y, const TensorRef &z, const TensorRef &w,
                 const TensorRef &out);
/// With `acc` (out's shape and dtype; may be out's memory): out = acc + the per-expert sums.
Status moeMatmulWeightGrad(const Context &ctx, const TensorRef &a, const TensorRef &b,
                           const TensorRef &w, const TensorRef &out,
                           const TensorRef *acc = nullptr);

// ---- Optimizer (kernels/Optim.cu) -------------------------------------------------------------
/// lr and step are 0-d device tensors. With `norm` (0-d, g's dtype) g is clipped first as
/// clipByNorm(g, *norm, maxNorm) would, inside the update.
Status adamw(const Context &ctx, const TensorRef &p, const TensorRef &g, const TensorRef &m,
             const TensorRef &v, const TensorRef &lr, const TensorRef &step,
             const AdamWConfig &config, const TensorRef &pOut, const TensorRef &mOut,
             const TensorRef &vOut, const TensorRef *norm = nullptr, double maxNorm = 0.0);
/// The plan's consecutive AdamW instructions with one config, lr and step, in one launch
/// (multi-tensor apply): each entry's p, g, m, v as adamw's; outputs in place.
struct AdamWTensors {
  TensorRef p, g, m, v;
};
Status adamwMulti(const Context &ctx, std::span<const AdamWTensors> tensors, const TensorRef &lr,
                  const TensorRef &step, const AdamWConfig &config,
                  const TensorRef *norm = nullptr, double maxNorm = 0.0);
/// Sum of squares of every input in a fixed order (per-tensor block partials, then one pass
/// over the partials in input order), accumulated in double; out 0-d f32/f64.
Status globalNorm(const Context &ctx, std::span<const TensorRef> inputs, const TensorRef &out);
Status clipByNorm(const Context &ctx, const TensorRef &x, const TensorRef &norm, double maxNorm,
                  const TensorRef &out);

} // namespace megac::runtime::cuda
