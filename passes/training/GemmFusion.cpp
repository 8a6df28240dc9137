// mega-training-gemm-fusion: GEMMs read transposed operands as layout flags, and weight-gradient
// GEMMs accumulate into their gradient accumulator (beta = 1), so neither a transpose copy nor a
// separate accumulation add is left in the training step.
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;

namespace megac::passes {

#define GEN_PASS_DEF_TRAININGGEMMFUSION
#include "passes/training/Passes.h.inc"

namespace {

/// Whether `perm` swaps the last two dims and keeps the others in place.
bool swapsLastTwo(ArrayRef<int64_t> perm) {
  int64_t rank = static_cast<int64_t>(perm.size());
  if (rank < 2)
    return false;
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (perm[d] != d)
      return false;
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

/// The input of a transpose of the last two dims that defines `v`, or null.
Value transposedFrom(Value v) {
  auto t = v.getDefiningOp<mega::TransposeOp>();
  return t && swapsLastTwo(t.getPerm()) ? t.getInput() : Value();
}

void eraseIfDead(Value v) {
  if (Operation *op = v.getDefiningOp(); op && op->use_empty() && isMemoryEffectFree(op))
    op->erase();
}

/// Folds transposes of the last two dims feeding `mm` into its flags (a transpose of a
/// transpose toggles twice); dead transposes go.
void foldTransposes(mega::MatmulOp mm) {
  for (bool lhs : {true, false}) {
    while (true) {
      Value operand = lhs ? mm.getLhs() : mm.getRhs();
      Value source = transposedFrom(operand);
      if (!source)
        break;
      if (lhs) {
        mm.getLhsMutable().assign(source);
        mm.setTransposeLhs(!mm.getTransposeLhs());
      } else {
        mm.getRhsMutable().assign(source);
        mm.setTransposeRhs(!mm.getTransposeRhs());
      }
      eraseIfDead(operand);
    }
  }
}

/// linear(x, transpose(w, [1, 0])) without a bias is x w: a matmul reading w as stored (w
/// broadcasts over x's leading dims). With a bias the linear and its transpose stay.
void linearToMatmul(mega::LinearOp linear) {
  Value w = transposedFrom(linear.getWeight());
  if (!w || linear.getBias() || linear.getInput().getType().getRank() < 2)
    return;
  Value wt = linear.getWeight();
  OpBuilder b(linear);
  auto mm = mega::MatmulOp::create(b, linear.getLoc(), linear.getType(), linear.getInput(), w);
  linear.getResult().replaceAllUsesWith(mm.getResult());
  linear.erase();
  eraseIfDead(wt);
}

/// A GEMM result read once, by the accumulation, without an accumulator of its own: a matmul or
/// a MoE expert weight gradient (the grouped GEMM over each expert's active rows), of the
/// accumulator's type.
Operation *fusibleProduct(Value v, Value acc) {
  Operation *op = v.getDefiningOp();
  auto type = cast<RankedTensorType>(v.getType()), accType = cast<RankedTensorType>(acc.getType());
  if (!op || type.getShape() != accType.getShape() ||
      type.getElementType() != accType.getElementType() || !v.hasOneUse())
    return nullptr;
  if (auto mm = dyn_cast<mega::MatmulOp>(op))
    return mm.getAccumulate() ? nullptr : op;
  if (auto wg = dyn_cast<mega::MoeMatmulWeightGradOp>(op))
    return wg.getAccumulate() ? nullptr : op;
  return nullptr;
}

/// Makes `product` (a fusibleProduct) add its result to `acc`.
void setAccumulator(Operation *product, Value acc) {
  if (auto mm = dyn_cast<mega::MatmulOp>(product))
    mm.getAccumulateMutable().assign(acc);
  else
    cast<mega::MoeMatmulWeightGradOp>(product).getAccumulateMutable().assign(acc);
}

/// `acc' = add(acc, grad)` updating accumulator `acc` (a state argument of the function):
///   grad = matmul(a, b)                -> acc' = matmul(a, b) accumulate acc
///   grad = moe_matmul_weight_grad(...) -> acc' = moe_matmul_weight_grad(...) accumulate acc
///   grad = add(rest, matmul(a, b))     -> acc' = matmul(a, b) accumulate add(acc, rest)
/// (a tied weight's two gradients: the embedding's scatter and the head's GEMM). The fused GEMM
/// writes the accumulator in place (codegen: a GEMM with an accumulator may write its state
/// buffer). Element types must agree: under bf16/fp16 the weight gradient is a half GEMM cast up
/// to the f32 accumulator, and cblas has no half-input, f32-output GEMM, so acc + cast(matmul)
/// stays an add (the widening would be one more pass over the product anyway).
bool fuseAccumulation(mega::AddOp add, Value acc) {
  Value grad = add.getLhs() == acc ? add.getRhs() : add.getLhs();
  if (grad == acc)
    return false;
  OpBuilder b(add);
  if (Operation *product = fusibleProduct(grad, acc)) {
    product->moveBefore(add);
    setAccumulator(product, acc);
    add.getResult().replaceAllUsesWith(product->getResult(0));
    add.erase();
    return true;
  }
  auto sum = grad.getDefiningOp<mega::AddOp>();
  if (!sum || !grad.hasOneUse())
    return false;
  for (bool lhsIsProduct : {true, false}) {
    Value productValue = lhsIsProduct ? sum.getLhs() : sum.getRhs();
    Value rest = lhsIsProduct ? sum.getRhs() : sum.getLhs();
    Operation *product = fusibleProduct(productValue, acc);
    if (!product)
      continue;
    auto partial = mega::AddOp::create(b, add.getLoc(), acc.getType(), acc, rest);
    product->moveBefore(add);
    setAccumulator(product, partial.getResult());
    add.getResult().replaceAllUsesWith(product->getResult(0));
    add.erase();
    sum.erase();
    return true;
  }
  return false;
}

/// Fuses the accumulation of every `mega.updates` result of `f` that adds a GEMM's product to
/// the state it updates. Fails (with a diagnostic) on a result updating a state that no argument
/// of `f` holds.
LogicalResult fuseAccumulations(func::FuncOp f) {
  if (f.isExternal())
    return success();
  llvm::DenseMap<StringAttr, Value> states;
  for (BlockArgument arg : f.getArguments())
    if (auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kStateAttr))
      states[name] = arg;
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, kUpdatesAttr);
    if (!name || !name.getValue().starts_with("grad."))
      continue;
    auto it = states.find(name);
    if (it == states.end())
      return f.emitError() << "mega-training-gemm-fusion: result " << i << " of @" << f.getSymName()
                           << " updates '" << name.getValue()
                           << "', but no argument has mega.state = '" << name.getValue()
                           << "'; gradient accumulators come from mega-training-autodiff";
    auto add = ret.getOperand(i).getDefiningOp<mega::AddOp>();
    Value acc = it->second;
    if (add && add->hasOneUse() && (add.getLhs() == acc || add.getRhs() == acc))
      fuseAccumulation(add, acc);
  }
  return success();
}

struct TrainingGemmFusionPass : impl::TrainingGemmFusionBase<TrainingGemmFusionPass> {
  using TrainingGemmFusionBase::TrainingGemmFusionBase;

  void runOnOperation() override {
    SmallVector<mega::LinearOp> linears;
    getOperation()->walk([&](mega::LinearOp linear) { linears.push_back(linear); });
    for (mega::LinearOp linear : linears)
      linearToMatmul(linear);
    SmallVector<mega::MatmulOp> products;
    getOperation()->walk([&](mega::MatmulOp mm) { products.push_back(mm); });
    for (mega::MatmulOp mm : products)
      foldTransposes(mm);
    WalkResult result = getOperation()->walk([](func::FuncOp f) {
      return failed(fuseAccumulations(f)) ? WalkResult::interrupt() : WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace

} // namespace megac::passes
