// Argument checks and geometry shared by the CPU and CUDA kernels (see ShapeChecks.h).
#include "runtime/cpu/ShapeChecks.h"

#include "runtime/cpu/KernelUtil.h"

namespace megac::runtime::cpu::detail {

StatusOr<SliceSource> sliceSource(const TensorRef &x, std::span<const int64_t> starts,
                                  std::span<const int64_t> strides, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Slice", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (starts.size() != rank || strides.size() != rank || out.shape.size() != rank)
    return fail("Slice", "starts " + shapeString(starts) + ", strides " + shapeString(strides) +
                             " and output " + shapeString(out.shape) +
                             " must all have the input's rank " + std::to_string(rank));
  SliceSource src;
  src.strides.resize(rank);
  std::vector<int64_t> xStrides = stridesOf(x.shape);
  bool empty = out.numElements() == 0;
  for (size_t d = 0; d < rank; ++d) {
    int64_t size = out.shape[d], dim = x.shape[d];
    if (strides[d] == 0)
      return fail("Slice", "stride 0 in dim " + std::to_string(d));
    if (!empty) {
      int64_t span, last;
      bool overflow = __builtin_mul_overflow(size - 1, strides[d], &span) ||
                      __builtin_add_overflow(starts[d], span, &last);
      if (starts[d] < 0 || starts[d] >= dim || overflow || last < 0 || last >= dim)
        return fail("Slice", "dim " + std::to_string(d) + ": " + std::to_string(size) +
                                 " elements from " + std::to_string(starts[d]) + " by stride " +
                                 std::to_string(strides[d]) + " leave the input's extent " +
                                 std::to_string(dim));
      src.base += starts[d] * xStrides[d];
    }
    src.strides[d] = strides[d] * xStrides[d];
  }
  return src;
}

StatusOr<std::vector<int64_t>> checkTranspose(const TensorRef &x, std::span<const int64_t> perm,
                                              const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Transpose", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (perm.size() != rank)
    return fail("Transpose", "perm has " + std::to_string(perm.size()) +
                                 " entries for an input of rank " + std::to_string(rank));
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> expected(rank), srcStrides(rank);
  std::vector<int64_t> xStrides = stridesOf(x.shape);
  for (size_t i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= static_cast<int64_t>(rank) || seen[perm[i]])
      return fail("Transpose", "perm " + shapeString(perm) + " is not a permutation of 0.." +
                                   std::to_string(rank - 1));
    seen[perm[i]] = true;
    expected[i] = x.shape[perm[i]];
    srcStrides[i] = xStrides[perm[i]];
  }
  RETURN_IF_ERROR(expectShape("Transpose", "output", out, expected));
  return srcStrides;
}

StatusOr<std::vector<int64_t>> checkBroadcast(const TensorRef &x, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Broadcast", "output", out, x.dtype));
  size_t rank = out.shape.size(), xRank = x.shape.size();
  if (xRank > rank)
    return fail("Broadcast", "cannot broadcast " + shapeString(x.shape) + " to lower rank " +
                                 shapeString(out.shape));
  std::vector<int64_t> xStrides = stridesOf(x.shape), srcStrides(rank, 0);
  for (size_t i = 0; i < xRank; ++i) {
    size_t d = rank - xRank + i;
    if (x.shape[i] == out.shape[d])
      srcStrides[d] = x.shape[i] == 1 ? 0 : xStrides[i];
    else if (x.shape[i] != 1)
      return fail("Broadcast",
                  "cannot broadcast " + shapeString(x.shape) + " to " + shapeString(out.shape));
  }
  return srcStrides;
}

StatusOr<PadTarget> checkPad(const TensorRef &x, std::span<const int64_t> low,
                             std::span<const int64_t> high, std::span<const int64_t> interior,
                             const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Pad", "output", out, x.dtype));
  size_t rank = x.shape.size();
  if (low.size() != rank || high.size() != rank || interior.size() != rank)
    return fail("Pad", "low " + shapeString(low) + ", high " + shapeString(high) +
                           " and interior " + shapeString(interior) +
                           " must have the input's rank " + std::to_string(rank));
  std::vector<int64_t> expected(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (low[d] < 0 || high[d] < 0 || interior[d] < 0)
      return fail("Pad", "dim " + std::to_string(d) + " has a negative amount (low " +
                             std::to_string(low[d]) + ", high " + std::to_string(high[d]) +
                             ", interior " + std::to_string(interior[d]) + ")");
    int64_t n = x.shape[d];
    expected[d] = low[d] + high[d] + n + (n > 0 ? (n - 1) * interior[d] : 0);
  }
  RETURN_IF_ERROR(expectShape("Pad", "output", out, expected));
  // Element (i0, i1, ...) of x lands at (low + i * (interior + 1)) per dim.
  std::vector<int64_t> dstStrides = stridesOf(out.shape);
  PadTarget target;
  target.strides.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    target.strides[d] = (interior[d] + 1) * dstStrides[d];
    target.base += low[d] * dstStrides[d];
  }
  return target;
}

StatusOr<ConcatGeometry> checkConcat(std::span<const TensorRef> inputs, int64_t axis,
                                     const TensorRef &out) {
  if (inputs.empty())
    return fail("Concat", "no inputs");
  size_t rank = out.shape.size();
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    return fail("Concat", "axis " + std::to_string(axis) + " is out of range for rank " +
                              std::to_string(rank));
  int64_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorRef &in = inputs[i];
    std::string which = "input " + std::to_string(i);
    RETURN_IF_ERROR(expectDtype("Concat", which.c_str(), in, out.dtype));
    bool ok = in.shape.size() == rank;
    for (size_t d = 0; ok && d < rank; ++d)
      ok = static_cast<int64_t>(d) == axis || in.shape[d] == out.shape[d];
    if (!ok)
      return fail("Concat", which + " has shape " + shapeString(in.shape) +
                                ", which does not match output " + shapeString(out.shape) +
                                " outside axis " + std::to_string(axis));
    total += in.shape[axis];
  }
  if (total != out.shape[axis])
    return fail("Concat", "inputs add up to " + std::to_string(total) + " along axis " +
                              std::to_string(axis) + " but the output has " +
                              std::to_string(out.shape[axis]));
  ConcatGeometry geometry;
  geometry.outer = product(out.shape.subspan(0, axis));
  geometry.outInner = product(out.shape.subspan(axis));
  for (const TensorRef &in : inputs)
    geometry.inner.push_back(product(in.shape.subspan(axis)));
  return geometry;
}

StatusOr<GatherGeometry> checkGather(const TensorRef &data, const TensorRef &indices, int64_t axis,
                                     const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Gather", "output", out, data.dtype));
  RETURN_IF_ERROR(expectIndexDtype("Gather", "indices", indices));
  int64_t rank = static_cast<int64_t>(data.shape.size());
  if (axis < 0 || axis >= rank)
    return fail("Gather", "axis " + std::to_string(axis) + " is out of range for data of rank " +
                              std::to_string(rank));
  std::vector<int64_t> expected(data.shape.begin(), data.shape.begin() + axis);
  expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
  expected.insert(expected.end(), data.shape.begin() + axis + 1, data.shape.end());
  RETURN_IF_ERROR(expectShape("Gather", "output", out, expected));
  GatherGeometry geometry;
  geometry.outer = product(data.shape.subspan(0, axis));
  geometry.dim = data.shape[axis];
  geometry.count = indices.numElements();
  geometry.inner = product(data.shape.subspan(axis + 1));
  return geometry;
}

Status checkEmbedding(const TensorRef &table, const TensorRef &ids, const TensorRef &out) {
  RETURN_IF_ERROR(expectDtype("Embedding", "output", out, table.dtype));
  RETURN_IF_ERROR(expectIndexDtype("Embedding", "ids", ids));
  if (table.shape.size() != 2)
    return fail("Embedding", "table must be [V, h], not " + shapeString(table.shape));
  std::vector<int64_t> expected(ids.shape.begin(), ids.shape.end());
  expected.push_back(table.shape[1]);
  return expectShape("Embedding", "output", out, expected);
}

Status checkEmbeddingGrad(const TensorRef &dy, const TensorRef &ids, const TensorRef &dtable) {
  const char *name = "EmbeddingGrad";
  RETURN_IF_ERROR(expectIndexDtype(name, "ids", ids));
  RETURN_IF_ERROR(expectDtype(name, "dtable", dtable, dy.dtype));
  if (dtable.shape.size() != 2)
    return fail(name, "dtable must be [V, h], not " + shapeString(dtable.shape));
  std::vector<int64_t> expected(ids.shape.begin(), ids.shape.end());
  expected.push_back(dtable.shape[1]);
  return expectShape(name, "dy", dy, expected);
}

StatusOr<MatMulGeometry> checkMatMul(const TensorRef &lhs, const TensorRef &rhs,
                                     const TensorRef &out, DtypeCheck dtypeCheck, bool transLhs,
                                     bool transRhs, const TensorRef *acc) {
  const char *name = "MatMul";
  RETURN_IF_ERROR(expectDtype(name, "rhs", rhs, lhs.dtype));
  // Mixed precision: bf16/f16 operands accumulated into an f32 output.
  bool mixed =
      acc && (lhs.dtype == DType::bf16 || lhs.dtype == DType::f16) && out.dtype == DType::f32;
  if (!mixed)
    RETURN_IF_ERROR(expectDtype(name, "output", out, lhs.dtype));
  if (acc)
    RETURN_IF_ERROR(expectDtype(name, "accumulator", *acc, out.dtype));
  if (dtypeCheck)
    RETURN_IF_ERROR(dtypeCheck(name, lhs.dtype));
  if (lhs.shape.size() < 2 || rhs.shape.size() < 2)
    return fail(name, "operands must have rank >= 2, got " + shapeString(lhs.shape) + " and " +
                          shapeString(rhs.shape));
  size_t lr = lhs.shape.size(), rr = rhs.shape.size();
  MatMulGeometry g;
  g.transLhs = transLhs;
  g.transRhs = transRhs;
  g.m = lhs.shape[transLhs ? lr - 1 : lr - 2];
  g.k = lhs.shape[transLhs ? lr - 2 : lr - 1];
  g.n = rhs.shape[transRhs ? rr - 2 : rr - 1];
  if (rhs.shape[transRhs ? rr - 1 : rr - 2] != g.k)
    return fail(name, std::string("contraction dims differ: lhs ") +
                          (transLhs ? "(transposed) " : "") + shapeString(lhs.shape) + ", rhs " +
                          (transRhs ? "(transposed) " : "") + shapeString(rhs.shape));
  g.lhsBatch = lhs.shape.first(lr - 2);
  g.rhsBatch = rhs.shape.first(rr - 2);
  if (!broadcastShapes(g.lhsBatch, g.rhsBatch, g.batch))
    return fail(name, "batch dims of " + shapeString(lhs.shape) + " and " + shapeString(rhs.shape) +
                          " do not broadcast");
  std::vector<int64_t> expected = g.batch;
  expected.push_back(g.m);
  expected.push_back(g.n);
  RETURN_IF_ERROR(expectShape(name, "output", out, expected));
  if (acc)
    RETURN_IF_ERROR(expectShape(name, "accumulator", *acc, expected));
  g.batches = product(g.batch);
  g.foldBatch = product(g.rhsBatch) == 1 && sameShape(g.lhsBatch, g.batch) && !transLhs;
  g.lhsStrides = broadcastStrides(g.lhsBatch, g.batch, g.m * g.k);
  g.rhsStrides = broadcastStrides(g.rhsBatch, g.batch, g.k * g.n);
  return g;
}

StatusOr<LinearGeometry> checkLinear(const TensorRef &x, const TensorRef &weight,
                                     const TensorRef *bias, const TensorRef &out,
                                     DtypeCheck dtypeCheck) {
  const char *name = "Linear";
  RETURN_IF_ERROR(expectDtype(name, "weight", weight, x.dtype));
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  if (dtypeCheck)
    RETURN_IF_ERROR(dtypeCheck(name, x.dtype));
  if (x.shape.empty() || weight.shape.size() != 2 || weight.shape[1] != x.shape.back())
    return fail(name, "weight must be [out, in] with in = the input's last dim; got input " +
                          shapeString(x.shape) + ", weight " + shapeString(weight.shape));
  LinearGeometry g;
  g.inF = weight.shape[1];
  g.outF = weight.shape[0];
  g.rows = product(x.shape.first(x.shape.size() - 1));
  std::vector<int64_t> expected(x.shape.begin(), x.shape.end() - 1);
  expected.push_back(g.outF);
  RETURN_IF_ERROR(expectShape(name, "output", out, expected));
  if (bias) {
    RETURN_IF_ERROR(expectDtype(name, "bias", *bias, x.dtype));
    RETURN_IF_ERROR(expectShape(name, "bias", *bias, std::vector<int64_t>{g.outF}));
  }
  return g;
}

namespace {

const char *reduceKindName(ReduceKind kind) {
  switch (kind) {
  case ReduceKind::sum:
    return "sum";
  case ReduceKind::mean:
    return "mean";
  case ReduceKind::max:
    return "max";
  case ReduceKind::min:
    return "min";
  }
  return "?";
}

} // namespace

StatusOr<ReduceGeometry> checkReduce(ReduceKind kind, const TensorRef &x,
                                     std::span<const int64_t> axes, const TensorRef &out) {
  const char *name = "Reduce";
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  int64_t rank = static_cast<int64_t>(x.shape.size());
  ReduceGeometry g;
  g.reduced.assign(size_t(rank), false);
  for (int64_t a : axes) {
    if (a < 0 || a >= rank || g.reduced[size_t(a)])
      return fail(name, "axes " + shapeString(axes) + " must be distinct dims of the rank-" +
                            std::to_string(rank) + " input");
    g.reduced[size_t(a)] = true;
  }
  std::vector<int64_t> keepShape, dropShape;
  for (int64_t d = 0; d < rank; ++d) {
    keepShape.push_back(g.reduced[size_t(d)] ? 1 : x.shape[d]);
    if (g.reduced[size_t(d)])
      g.count *= x.shape[d];
    else
      dropShape.push_back(x.shape[d]), g.outputs *= x.shape[d];
  }
  if (!sameShape(out.shape, keepShape) && !sameShape(out.shape, dropShape))
    return fail(name, "output shape " + shapeString(out.shape) + " is neither " +
                          shapeString(keepShape) + " (dims kept) nor " + shapeString(dropShape) +
                          " (dims dropped)");
  bool integral = x.dtype == DType::i64 || x.dtype == DType::i32;
  if (g.count == 0 && g.outputs > 0 &&
      (kind == ReduceKind::max || kind == ReduceKind::min ||
       (integral && kind == ReduceKind::mean)))
    return fail(name, std::string(reduceKindName(kind)) + " over an empty set of elements");
  return g;
}

namespace {

const char *moeName(MoeKernel kernel) {
  switch (kernel) {
  case MoeKernel::dispatch:
    return "MoeDispatch";
  case MoeKernel::combine:
    return "MoeCombine";
  case MoeKernel::matmul:
    return "MoeMatmul";
  case MoeKernel::rowDot:
    return "MoeRowDot";
  case MoeKernel::weightGrad:
    return "MoeMatmulWeightGrad";
  }
  return "Moe";
}

std::vector<int64_t> joined(std::initializer_list<std::span<const int64_t>> parts) {
  std::vector<int64_t> out;
  for (std::span<const int64_t> p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

} // namespace

StatusOr<MoeGeometry> checkMoe(MoeKernel kernel, const TensorRef &a, const TensorRef *b,
                               const TensorRef &w, bool transposeWeight, const TensorRef &out) {
  const char *op = moeName(kernel);
  if (w.dtype != DType::f32 && w.dtype != DType::f64)
    return unsupportedDtype(op, w.dtype);
  for (const TensorRef *t : {&a, b, &out})
    if (t && t->dtype != w.dtype)
      return fail(op, std::string("operands must share the routing weights' dtype ") +
                          dtypeName(w.dtype) + ", got " + dtypeName(t->dtype));
  if (w.shape.size() < 2)
    return fail(op, "routing weights must be [tokens..., experts], got " + shapeString(w.shape));
  std::span<const int64_t> tokens = w.shape.first(w.shape.size() - 1);
  int64_t experts = w.shape.back();
  std::vector<int64_t> e{experts};
  MoeGeometry g{experts, product(tokens), 0, 0};
  auto routed = [&](const char *what, const TensorRef &t) -> StatusOr<int64_t> {
    if (t.shape.size() != tokens.size() + 2)
      return fail(op, std::string(what) + " has shape " + shapeString(t.shape) +
                          ", expected [" + std::to_string(experts) + ", tokens " +
                          shapeString(tokens) + ", features]");
    int64_t f = t.shape.back();
    RETURN_IF_ERROR(expectShape(op, what, t, joined({e, tokens, std::span<const int64_t>(&f, 1)})));
    return f;
  };
  auto perToken = [&](const char *what, const TensorRef &t) -> StatusOr<int64_t> {
    if (t.shape.size() != tokens.size() + 1)
      return fail(op, std::string(what) + " has shape " + shapeString(t.shape) +
                          ", expected [tokens " + shapeString(tokens) + ", features]");
    int64_t f = t.shape.back();
    RETURN_IF_ERROR(expectShape(op, what, t, joined({tokens, std::span<const int64_t>(&f, 1)})));
    return f;
  };
  switch (kernel) {
  case MoeKernel::dispatch: {
    ASSIGN_OR_RETURN(g.in, perToken("input", a));
    g.out = g.in;
    ASSIGN_OR_RETURN(int64_t f, routed("output", out));
    (void)f;
    break;
  }
  case MoeKernel::combine: {
    ASSIGN_OR_RETURN(g.in, routed("input", a));
    g.out = g.in;
    ASSIGN_OR_RETURN(int64_t f, perToken("output", out));
    if (f != g.in)
      return fail(op, "output features " + std::to_string(f) + " differ from the input's " +
                          std::to_string(g.in));
    break;
  }
  case MoeKernel::matmul: {
    ASSIGN_OR_RETURN(g.in, routed("input", a));
    ASSIGN_OR_RETURN(g.out, routed("output", out));
    std::vector<int64_t> want = transposeWeight ? std::vector<int64_t>{experts, g.in, g.out}
                                                : std::vector<int64_t>{experts, g.out, g.in};
    RETURN_IF_ERROR(expectShape(op, "weight", *b, want));
    break;
  }
  case MoeKernel::rowDot: {
    ASSIGN_OR_RETURN(g.in, routed("input", a));
    ASSIGN_OR_RETURN(int64_t f, perToken("other", *b));
    if (f != g.in)
      return fail(op, "other's features " + std::to_string(f) + " differ from the input's " +
                          std::to_string(g.in));
    RETURN_IF_ERROR(expectShape(op, "output", out, w.shape));
    break;
  }
  case MoeKernel::weightGrad: {
    ASSIGN_OR_RETURN(g.in, routed("lhs", a));
    ASSIGN_OR_RETURN(g.out, routed("rhs", *b));
    RETURN_IF_ERROR(expectShape(op, "output", out, std::vector<int64_t>{experts, g.in, g.out}));
    break;
  }
  }
  return g;
}

StatusOr<int64_t> checkTopKMask(const TensorRef &x, int64_t k, const TensorRef &out) {
  const char *op = "TopKMask";
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    return unsupportedDtype(op, x.dtype);
  if (x.shape.empty())
    return fail(op, "the input needs a last dim to choose from");
  RETURN_IF_ERROR(expectShape(op, "output", out, x.shape));
  RETURN_IF_ERROR(expectDtype(op, "output", out, x.dtype));
  int64_t n = x.shape.back();
  if (k < 1 || k > n)
    return fail(op, "k = " + std::to_string(k) + " must be in [1, " + std::to_string(n) + "]");
  return n;
}

} // namespace megac::runtime::cpu::detail
