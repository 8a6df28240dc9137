// MatMul and Linear on cuBLASLt. Row-major C [m,n] = A [m,k] B [k,n] is, in cuBLASLt's
// column-major view, C^T [n,m] = B^T [n,k] A^T [k,m]: the row-major buffers are passed as they
// are, with the operands swapped. bf16/f16 compute in f32 (tensor cores), f32 in f32 (TF32 with
// ctx.allowTf32), f64 in f64; an accumulating MatMul may read bf16/f16 A and B into an f32 D
// (C = D, beta = 1: mixed-precision gradient accumulation, the product never rounded to half).
// Descriptors, layouts and the heuristic's algorithm are cached per problem in a thread_local map,
// so a repeated shape does not query the heuristic again. The argument checks are the CPU kernels'
// (runtime/cpu/ShapeChecks.h).
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/ShapeChecks.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/kernels/GemmShape.h"
#include "runtime/cuda/kernels/StridedGemm.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace megac::runtime::cuda {

namespace {

using cpu::detail::fail;

bool isFloatType(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

Status unsupported(const char *op, DType dtype) {
  return fail(op,
              std::string("dtype ") + dtypeName(dtype) + " is not supported (f64, f32, bf16, f16)");
}

/// The dtypes cuBLASLt runs, checked between MatMul's/Linear's dtype and shape checks.
Status checkGemmDtype(const char *op, DType dtype) {
  return isFloatType(dtype) ? Status::ok() : unsupported(op, dtype);
}

cudaDataType_t dataTypeOf(DType d) {
  switch (d) {
  case DType::f64:
    return CUDA_R_64F;
  case DType::bf16:
    return CUDA_R_16BF;
  case DType::f16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

/// One GEMM problem in cuBLASLt's column-major terms: D [rows, cols] = op(A) B (+ bias), with
/// batchCount strided batches. Everything the descriptors and the heuristic depend on.
struct GemmKey {
  int dtype = 0;    // A's and B's
  int outDtype = 0; // D's: dtype, or f32 under bf16/f16 A and B (an accumulating MatMul)
  bool tf32 = false;
  bool transA = false, transB = false;
  bool bias = false;
  uint64_t rows = 0, cols = 0, inner = 0; // D rows, D cols, contraction
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, strideA = 0, strideB = 0, strideD = 0;
  uint32_t alignA = 0, alignB = 0, alignD = 0, alignBias = 0;
  size_t workspace = 0;

  auto tie() const {
    return std::tie(dtype, outDtype, tf32, transA, transB, bias, rows, cols, inner, lda, ldb, ldd,
                    batch, strideA, strideB, strideD, alignA, alignB, alignD, alignBias, workspace);
  }
  bool operator<(const GemmKey &o) const { return tie() < o.tie(); }
};

/// The cached cuBLASLt objects of one GemmKey.
struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  GemmPlan() = default;
  GemmPlan(const GemmPlan &) = delete;
  GemmPlan &operator=(const GemmPlan &) = delete;
  ~GemmPlan() {
    if (d)
      cublasLtMatrixLayoutDestroy(d);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (desc)
      cublasLtMatmulDescDestroy(desc);
  }
};

std::string problemString(const GemmKey &k) {
  std::string out = k.outDtype == k.dtype
                        ? std::string()
                        : std::string(", D ") + dtypeName(static_cast<DType>(k.outDtype));
  return "(D " + std::to_string(k.rows) + "x" + std::to_string(k.cols) + ", inner " +
         std::to_string(k.inner) + ", batch " + std::to_string(k.batch) + ", dtype " +
         dtypeName(static_cast<DType>(k.dtype)) + out + ")";
}

Status ltError(const char *op, const char *what, cublasStatus_t status, const GemmKey &key) {
  return fail(op, std::string(what) + " failed with cublasStatus " +
                      std::to_string(static_cast<int>(status)) + " for " + problemString(key));
}

#define LT_CHECK(call, what)                                                                       \
  do {                                                                                             \
    cublasStatus_t st_ = (call);                                                                   \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                              \
      return ltError(op, what, st_, key);                                                          \
  } while (0)

Status makeLayout(const char *op, const GemmKey &key, cublasLtMatrixLayout_t *layout,
                  cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, int64_t stride) {
  LT_CHECK(cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (key.batch > 1) {
    int32_t count = static_cast<int32_t>(key.batch);
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                              sizeof(count)),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
    LT_CHECK(cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof(stride)),
             "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
  }
  return Status::ok();
}

/// The cached plan of `key`, built (and the heuristic queried) on first use.
StatusOr<GemmPlan *> planFor(const char *op, const Context &ctx, const GemmKey &key) {
  thread_local std::map<GemmKey, std::unique_ptr<GemmPlan>> cache;
  thread_local cublasLtHandle_t cachedFor = nullptr;
  if (cachedFor != ctx.lt) { // plans belong to one handle
    cache.clear();
    cachedFor = ctx.lt;
  }
  auto found = cache.find(key);
  if (found != cache.end())
    return found->second.get();
  if (cache.size() > 512) // a runaway number of shapes: start over rather than grow forever
    cache.clear();
  auto plan = std::make_unique<GemmPlan>();
  DType dtype = static_cast<DType>(key.dtype);
  cudaDataType_t type = dataTypeOf(dtype);
  cublasComputeType_t compute = dtype == DType::f64 ? CUBLAS_COMPUTE_64F
                                : key.tf32          ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                    : CUBLAS_COMPUTE_32F;
  cudaDataType_t scaleType = dtype == DType::f64 ? CUDA_R_64F : CUDA_R_32F;
  LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, compute, scaleType), "cublasLtMatmulDescCreate");
  cublasOperation_t ta = key.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = key.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
           "cublasLtMatmulDescSetAttribute(TRANSA)");
  LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
           "cublasLtMatmulDescSetAttribute(TRANSB)");
  if (key.bias) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                            sizeof(epilogue)),
             "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type,
                                            sizeof(type)),
             "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
  }
  // A is [inner, rows] stored (transposed by op) or [rows, inner]; B [cols, inner] stored
  // (transposed by op) or [inner, cols]; D [rows, cols].
  uint64_t aRows = key.transA ? key.inner : key.rows, aCols = key.transA ? key.rows : key.inner;
  uint64_t bRows = key.transB ? key.cols : key.inner, bCols = key.transB ? key.inner : key.cols;
  RETURN_IF_ERROR(makeLayout(op, key, &plan->a, type, aRows, aCols, key.lda, key.strideA));
  RETURN_IF_ERROR(makeLayout(op, key, &plan->b, type, bRows, bCols, key.ldb, key.strideB));
  RETURN_IF_ERROR(makeLayout(op, key, &plan->d, dataTypeOf(static_cast<DType>(key.outDtype)),
                             key.rows, key.cols, key.ldd, key.strideD));

  cublasLtMatmulPreference_t pref = nullptr;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  cublasStatus_t (*)(cublasLtMatmulPreference_t)>
      prefGuard(pref, cublasLtMatmulPreferenceDestroy);
  size_t ws = key.workspace;
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof(ws)),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignA},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignB},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignD},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignD}};
  for (const auto &[attr, value] : aligns) {
    uint32_t v = value;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.lt, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                          pref, 1, &result, &found_count),
           "cublasLtMatmulAlgoGetHeuristic");
  if (found_count < 1)
    return fail(op, "cuBLASLt has no algorithm for " + problemString(key));
  plan->algo = result.algo;
  GemmPlan *raw = plan.get();
  cache.emplace(key, std::move(plan));
  return raw;
}

/// The largest power of two (<= 256) dividing the address and every offset in `offsets` (bytes).
uint32_t alignmentOf(const void *base, std::initializer_list<int64_t> offsets) {
  uint64_t bits = reinterpret_cast<uintptr_t>(base) | 256u;
  for (int64_t o : offsets)
    bits |= static_cast<uint64_t>(o < 0 ? -o : o);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

/// Runs one cached GEMM: D = op(A) B (+ bias), pointers already offset.
/// Runs a planned GEMM (see runGemm).
Status runPlan(const char *op, const Context &ctx, const GemmKey &key, GemmPlan &planRef,
               const void *a, const void *b, void *d, const void *bias, bool accumulate) {
  GemmPlan *plan = &planRef;
  if (key.bias)
    LT_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias)),
             "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
  float oneF = 1.0f, zeroF = 0.0f;
  double oneD = 1.0, zeroD = 0.0;
  bool f64 = static_cast<DType>(key.dtype) == DType::f64;
  const void *alpha = f64 ? static_cast<const void *>(&oneD) : &oneF;
  const void *beta =
      f64 ? static_cast<const void *>(accumulate ? &oneD : &zeroD) : (accumulate ? &oneF : &zeroF);
  LT_CHECK(cublasLtMatmul(ctx.lt, plan->desc, alpha, a, plan->a, b, plan->b, beta, d, plan->d, d,
                          plan->d, &plan->algo, ctx.workspace, key.workspace, ctx.stream),
           "cublasLtMatmul");
  return Status::ok();
}

/// With `accumulate`, D += op(A) B (beta 1) instead of D = op(A) B.
Status runGemm(const char *op, const Context &ctx, const GemmKey &key, const void *a, const void *b,
               void *d, const void *bias, bool accumulate = false) {
  if (!ctx.lt)
    return fail(op, "no cuBLASLt handle in the context");
  ASSIGN_OR_RETURN(GemmPlan * plan, planFor(op, ctx, key));
  return runPlan(op, ctx, key, *plan, a, b, d, bias, accumulate);
}
/// The cache key of problem `p`, a GemmProblem or a StridedGemm (alignments, bias and D's dtype
/// left to the caller).
template <typename Problem> GemmKey keyOf(const Problem &p, DType dtype, const Context &ctx) {
  GemmKey key;
  key.dtype = static_cast<int>(dtype);
  key.outDtype = key.dtype;
  key.tf32 = dtype == DType::f32 && ctx.allowTf32;
  key.workspace = ctx.workspace ? ctx.workspaceBytes : 0;
  key.transA = p.transA;
  key.transB = p.transB;
  key.rows = static_cast<uint64_t>(p.rows);
  key.cols = static_cast<uint64_t>(p.cols);
  key.inner = static_cast<uint64_t>(p.inner);
  key.lda = p.lda;
  key.ldb = p.ldb;
  key.ldd = p.ldd;
  key.batch = p.batch;
  key.strideA = p.strideA;
  key.strideB = p.strideB;
  key.strideD = p.strideD;
  return key;
}

} // namespace

Status stridedGemm(const char *op, const Context &ctx, const StridedGemm &g, const void *a,
                   const void *b, void *d, bool accumulate) {
  if (g.rows <= 0 || g.cols <= 0 || g.inner <= 0 || g.batch <= 0)
    return fail(op, "an empty GEMM (internal: the caller skips it)");
  GemmKey key = keyOf(g, g.dtype, ctx);
  key.outDtype = static_cast<int>(g.outDtype);
  int64_t es = static_cast<int64_t>(dtypeSize(g.dtype)),
          esD = static_cast<int64_t>(dtypeSize(g.outDtype));
  key.alignA = alignmentOf(a, {g.lda * es, g.strideA * es});
  key.alignB = alignmentOf(b, {g.ldb * es, g.strideB * es});
  key.alignD = alignmentOf(d, {g.ldd * esD, g.strideD * esD});
  return runGemm(op, ctx, key, a, b, d, nullptr, accumulate);
}

Status matmul(const Context &ctx, const TensorRef &lhs, const TensorRef &rhs, const TensorRef &out,
              MatMulFlags flags, const TensorRef *acc) {
  const char *op = "MatMul";
  ASSIGN_OR_RETURN(cpu::detail::MatMulGeometry g,
                   cpu::detail::checkMatMul(lhs, rhs, out, checkGemmDtype, flags.transposeLhs,
                                            flags.transposeRhs, acc));
  int64_t m = g.m, n = g.n, k = g.k, batches = g.batches;
  size_t es = dtypeSize(lhs.dtype);
  // D's element size: out may be f32 under bf16/f16 operands (checkMatMul allows it with acc).
  int64_t esD = static_cast<int64_t>(dtypeSize(out.dtype));
  if (m == 0 || n == 0 || batches == 0)
    return Status::ok();
  // Accumulation: out holds acc, then beta = 1 (no copy when acc is out's memory).
  if (acc && acc->data != out.data &&
      cudaMemcpyAsync(out.data, acc->data, out.byteSize(), cudaMemcpyDeviceToDevice, ctx.stream) !=
          cudaSuccess)
    return launchStatus(op);
  if (k == 0) {
    if (acc)
      return Status::ok();
    if (cudaMemsetAsync(out.data, 0, out.byteSize(), ctx.stream) != cudaSuccess)
      return launchStatus(op);
    return Status::ok();
  }
  GemmProblem p = matmulProblem(g);
  GemmKey key = keyOf(p, lhs.dtype, ctx);
  key.outDtype = static_cast<int>(out.dtype);
  const char *a = static_cast<const char *>((p.a == GemmOperand::Rhs ? rhs : lhs).data);
  const char *b = static_cast<const char *>((p.b == GemmOperand::Rhs ? rhs : lhs).data);
  char *d = static_cast<char *>(out.data);
  // Alignment over every pointer the loop produces: the base and each outer dim's step.
  uint64_t bitsA = 0, bitsB = 0;
  for (size_t dd = 0; dd < p.outerSizes.size(); ++dd) {
    bitsA |= static_cast<uint64_t>(p.outerStepA[dd] * static_cast<int64_t>(es));
    bitsB |= static_cast<uint64_t>(p.outerStepB[dd] * static_cast<int64_t>(es));
  }
  int64_t ses = static_cast<int64_t>(es);
  key.alignA = alignmentOf(a, {static_cast<int64_t>(bitsA), p.strideA * ses});
  key.alignB = alignmentOf(b, {static_cast<int64_t>(bitsB), p.strideB * ses});
  key.alignD = alignmentOf(d, {p.outerStepD * esD, p.strideD * esD});
  for (int64_t o = 0; o < p.outerCount; ++o) {
    int64_t offA = 0, offB = 0, offD = 0;
    p.offsets(o, offA, offB, offD);
    RETURN_IF_ERROR(runGemm(op, ctx, key, a + offA * ses, b + offB * ses, d + offD * esD, nullptr,
                            acc != nullptr));
  }
  return Status::ok();
}

Status linear(const Context &ctx, const TensorRef &x, const TensorRef &weight,
              const TensorRef *bias, const TensorRef &out) {
  const char *op = "Linear";
  ASSIGN_OR_RETURN(cpu::detail::LinearGeometry g,
                   cpu::detail::checkLinear(x, weight, bias, out, checkGemmDtype));
  int64_t rows = g.rows, inF = g.inF, outF = g.outF;
  size_t es = dtypeSize(x.dtype);
  if (rows == 0 || outF == 0)
    return Status::ok();
  if (inF == 0) { // out = bias (or 0) per row
    if (!bias) {
      if (cudaMemsetAsync(out.data, 0, out.byteSize(), ctx.stream) != cudaSuccess)
        return launchStatus(op);
      return Status::ok();
    }
    for (int64_t r = 0; r < rows; ++r)
      if (cudaMemcpyAsync(static_cast<char *>(out.data) + r * outF * es, bias->data, outF * es,
                          cudaMemcpyDeviceToDevice, ctx.stream) != cudaSuccess)
        return launchStatus(op);
    return Status::ok();
  }
  // Column-major (GemmShape.h): out^T [outF, rows] = W x^T, the weight transposed by op.
  GemmProblem p = linearProblem(g);
  GemmKey key = keyOf(p, x.dtype, ctx);
  key.bias = bias != nullptr;
  const void *a = (p.a == GemmOperand::Rhs ? weight : x).data;
  const void *b = (p.b == GemmOperand::Rhs ? weight : x).data;
  key.alignA = alignmentOf(a, {});
  key.alignB = alignmentOf(b, {});
  key.alignD = alignmentOf(out.data, {});
  key.alignBias = bias ? alignmentOf(bias->data, {}) : 0;
  if (!bias)
    return runGemm(op, ctx, key, a, b, out.data, nullptr);
  if (!ctx.lt)
    return fail(op, "no cuBLASLt handle in the context");
  StatusOr<GemmPlan *> fused = planFor(op, ctx, key);
  if (fused.isOk())
    return runPlan(op, ctx, key, **fused, a, b, out.data, bias->data, false);
  // No bias epilogue for this problem (some dtypes have none): out = bias per row (row 0, then
  // doubling copies of the rows already written), then out += x W^T.
  char *y = static_cast<char *>(out.data);
  size_t rowBytes = static_cast<size_t>(outF) * es;
  if (cudaMemcpyAsync(y, bias->data, rowBytes, cudaMemcpyDeviceToDevice, ctx.stream) != cudaSuccess)
    return launchStatus(op);
  for (int64_t done = 1; done < rows;) {
    int64_t n = std::min(done, rows - done);
    if (cudaMemcpyAsync(y + done * rowBytes, y, n * rowBytes, cudaMemcpyDeviceToDevice,
                        ctx.stream) != cudaSuccess)
      return launchStatus(op);
    done += n;
  }
  key.bias = false;
  key.alignBias = 0;
  return runGemm(op, ctx, key, a, b, out.data, nullptr, true);
}

} // namespace megac::runtime::cuda
