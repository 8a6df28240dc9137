// Verifiers, result-shape inference and costs of the mixture-of-experts ops (ir/MegaMoeOps.td).
#include "ir/MegaCost.h"
#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"

#include <string>

using namespace mlir;
using namespace mega;

namespace {

shape::Dims dimsOf(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return {t.getShape().data(), t.getShape().size()};
}

Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

bool allRanked(ValueRange values) {
  return llvm::all_of(values, [](Value v) { return v && isa<RankedTensorType>(v.getType()); });
}

/// The inferred type of an MoE op: the rule's shape in the first operand's element type, which
/// every operand must share.
LogicalResult inferMoe(std::optional<Location> loc, ValueRange operands, const char *op,
                       const std::function<shape::Result()> &rule, SmallVectorImpl<Type> &out) {
  if (!allRanked(operands))
    return emitOptionalError(loc, "operands must be ranked tensors");
  Type element = elementOf(operands.front());
  for (Value v : operands)
    if (elementOf(v) != element)
      return emitOptionalError(loc, op, " operands must share one element type; cast first");
  shape::Result r = rule();
  if (!r.ok())
    return emitOptionalError(loc, r.error);
  out.push_back(RankedTensorType::get(r.shape, element));
  return success();
}

/// Tokens routed by `weights [t..., E]`: the product of its leading dims.
int64_t tokensOf(Value weights) {
  auto t = cast<RankedTensorType>(weights.getType());
  return t.getNumElements() / std::max<int64_t>(1, t.getShape().back());
}

int64_t elems(Value v) { return cost::numElements(v.getType()); }

/// Why `topk` and `global_experts` do not fit `experts` (this op's expert dim), or empty.
std::string checkRouting(int64_t topk, std::optional<uint64_t> globalExperts, int64_t experts) {
  int64_t all = globalExperts ? static_cast<int64_t>(*globalExperts) : experts;
  if (all < experts || (experts > 0 && all % experts != 0))
    return "global_experts = " + std::to_string(all) + " must be a multiple of the " +
           std::to_string(experts) + " experts it holds";
  if (topk < 1 || topk > all)
    return "topk = " + std::to_string(topk) + " must be in [1, " + std::to_string(all) + "]";
  return {};
}

/// 2 x the active rows x in x out: T·topk rows over all experts, the shard's share of them.
int64_t routedFlops(int64_t tokens, uint64_t topk, std::optional<uint64_t> globalExperts,
                    int64_t experts, int64_t in, int64_t out) {
  int64_t all = globalExperts ? static_cast<int64_t>(*globalExperts) : experts;
  return 2 * tokens * static_cast<int64_t>(topk) * in * out * experts / std::max<int64_t>(1, all);
}

} // namespace

LogicalResult TopKMaskOp::verify() {
  auto type = getInput().getType();
  if (type.getRank() < 1)
    return emitOpError() << "needs a last dim to choose from";
  int64_t n = type.getShape().back(), k = static_cast<int64_t>(getK());
  if (k < 1 || k > n)
    return emitOpError() << "k = " << k << " must be in [1, " << n
                         << "] (the size of the last dim)";
  return success();
}
int64_t TopKMaskOp::getFlops() { return elems(getInput()); }

LogicalResult MoeDispatchOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                              Adaptor a, SmallVectorImpl<Type> &out) {
  Value input = a.getInput(), weights = a.getWeights();
  return inferMoe(loc, {input, weights}, "moe_dispatch",
                  [&] { return shape::moeDispatch(dimsOf(input), dimsOf(weights)); }, out);
}
LogicalResult MoeDispatchOp::verify() { return success(); }
int64_t MoeDispatchOp::getFlops() { return elems(getInput()); }

LogicalResult MoeCombineOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor a, SmallVectorImpl<Type> &out) {
  Value input = a.getInput(), weights = a.getWeights();
  return inferMoe(loc, {input, weights}, "moe_combine",
                  [&] { return shape::moeCombine(dimsOf(input), dimsOf(weights)); }, out);
}
LogicalResult MoeCombineOp::verify() { return success(); }
int64_t MoeCombineOp::getFlops() { return 2 * elems(getInput()); }

LogicalResult MoeMatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor a, SmallVectorImpl<Type> &out) {
  Value input = a.getInput(), weight = a.getWeight(), weights = a.getWeights();
  bool transposed = a.getTransposeWeight();
  return inferMoe(loc, {input, weight, weights}, "moe_matmul",
                  [&] {
                    return shape::moeMatmul(dimsOf(input), dimsOf(weight), dimsOf(weights),
                                            transposed);
                  },
                  out);
}
LogicalResult MoeMatmulOp::verify() {
  int64_t experts = getWeight().getType().getShape()[0];
  if (std::string e = checkRouting(static_cast<int64_t>(getTopk()), getGlobalExperts(), experts);
      !e.empty())
    return emitOpError() << e;
  return success();
}
int64_t MoeMatmulOp::getMatmulFlops() {
  ArrayRef<int64_t> w = getWeight().getType().getShape();
  return routedFlops(tokensOf(getWeights()), getTopk(), getGlobalExperts(), w[0], w[1], w[2]);
}
int64_t MoeMatmulOp::getFlops() { return getMatmulFlops(); }

LogicalResult AddAuxLossOp::verify() {
  if (getAux().getType().getRank() != 0)
    return emitOpError() << "aux must be a scalar (0-d), not " << getAux().getType();
  return success();
}
int64_t AddAuxLossOp::getFlops() { return 0; }

LogicalResult MoeRowDotOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor a, SmallVectorImpl<Type> &out) {
  Value input = a.getInput(), other = a.getOther(), weights = a.getWeights();
  return inferMoe(loc, {input, other, weights}, "moe_row_dot",
                  [&] {
                    return shape::moeRowDot(dimsOf(input), dimsOf(other), dimsOf(weights));
                  },
                  out);
}
LogicalResult MoeRowDotOp::verify() { return success(); }
int64_t MoeRowDotOp::getFlops() { return 2 * elems(getInput()); }

LogicalResult MoeMatmulWeightGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                      Adaptor a, SmallVectorImpl<Type> &out) {
  Value lhs = a.getLhs(), rhs = a.getRhs(), weights = a.getWeights();
  return inferMoe(loc, {lhs, rhs, weights}, "moe_matmul_weight_grad",
                  [&] {
                    return shape::moeMatmulWeightGrad(dimsOf(lhs), dimsOf(rhs), dimsOf(weights));
                  },
                  out);
}
LogicalResult MoeMatmulWeightGradOp::verify() {
  int64_t experts = getLhs().getType().getShape()[0];
  if (std::string e = checkRouting(static_cast<int64_t>(getTopk()), getGlobalExperts(), experts);
      !e.empty())
    return emitOpError() << e;
  if (Value acc = getAccumulate(); acc && acc.getType() != getResult().getType())
    return emitOpError() << "accumulator " << acc.getType() << " must have the result's type "
                         << getResult().getType()
                         << " (cast the product first; the GEMM accumulates in its own type)";
  return success();
}
int64_t MoeMatmulWeightGradOp::getMatmulFlops() {
  ArrayRef<int64_t> r = getResult().getType().getShape();
  // The accumulation is one more add per result element.
  return routedFlops(tokensOf(getWeights()), getTopk(), getGlobalExperts(), r[0], r[1], r[2]) +
         (getAccumulate() ? elems(getResult()) : 0);
}
int64_t MoeMatmulWeightGradOp::getFlops() { return getMatmulFlops(); }

LogicalResult MoeExchangeOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getRank() < 3 || in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError() << "input " << in << " and result " << out
                         << " must be routed tensors [E, tokens..., h] of one element type";
  if (getAxes().empty())
    return emitOpError() << "needs the expert-parallel mesh axes";
  return success();
}
int64_t MoeExchangeOp::getFlops() { return 0; }
// What crosses the network is the routed rows only; as a bound, the input once.
int64_t MoeExchangeOp::getBytesRead() { return cost::numBytes(getInput().getType()); }
int64_t MoeExchangeOp::getBytesWritten() { return cost::numBytes(getResult().getType()); }
