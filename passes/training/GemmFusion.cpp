// mega-training-gemm-fusion: GEMMs read transposed operands as layout flags, and weight-gradient
// GEMMs accumulate into their gradient accumulator (beta = 1; half GEMMs into the f32 one), so
// neither a transpose copy nor a separate accumulation add is left in the training step.
#include "passes/training/Passes.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

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

/// Whether a GEMM with `operand` elements may accumulate into `acc` elements: the same type, or
/// bf16/f16 operands into f32 (MatmulOp's mixed-precision accumulation).
bool accumulatesInto(Type operand, Type acc) {
  return operand == acc || (isa<BFloat16Type, Float16Type>(operand) && acc.isF32());
}

/// A GEMM whose result reaches an accumulation: `op`, and the cast that widens its half
/// product to the accumulator's f32 (null when the product has the accumulator's type).
struct Product {
  Operation *op = nullptr;
  mega::CastOp widen;
  explicit operator bool() const { return op != nullptr; }
};

/// A GEMM result read once, by the accumulation, without an accumulator of its own: a matmul or
/// a MoE expert weight gradient (the grouped GEMM over each expert's active rows) of the
/// accumulator's type; or, under bf16/fp16, a half matmul read once by the cast that widens it
/// to the f32 accumulator (the GEMM then reads the half operands into the accumulator itself:
/// MoeMatmulWeightGrad has no mixed-precision form and keeps its cast and add).
Product fusibleProduct(Value v, Value acc) {
  Operation *op = v.getDefiningOp();
  auto type = cast<RankedTensorType>(v.getType()), accType = cast<RankedTensorType>(acc.getType());
  if (!op || type.getShape() != accType.getShape() ||
      type.getElementType() != accType.getElementType() || !v.hasOneUse())
    return {};
  if (auto widen = dyn_cast<mega::CastOp>(op)) {
    Value half = widen.getInput();
    auto mm = half.getDefiningOp<mega::MatmulOp>();
    if (!mm || mm.getAccumulate() || !half.hasOneUse() ||
        !isa<BFloat16Type, Float16Type>(mm.getType().getElementType()) ||
        !accumulatesInto(mm.getType().getElementType(), accType.getElementType()))
      return {};
    return {mm, widen};
  }
  if (auto mm = dyn_cast<mega::MatmulOp>(op))
    return mm.getAccumulate() ? Product{} : Product{op, {}};
  if (auto wg = dyn_cast<mega::MoeMatmulWeightGradOp>(op))
    return wg.getAccumulate() ? Product{} : Product{op, {}};
  return {};
}

/// Makes `product` (a fusibleProduct) add its result to `acc` and replaces `add` (the
/// accumulation it feeds) with it; a widening cast goes, the GEMM writes the f32 accumulator.
void fuseInto(Product product, Value acc, mega::AddOp add) {
  product.op->moveBefore(add);
  if (auto mm = dyn_cast<mega::MatmulOp>(product.op)) {
    mm.getAccumulateMutable().assign(acc);
    mm.getResult().setType(
        mm.getType().clone(cast<RankedTensorType>(acc.getType()).getElementType()));
  } else {
    cast<mega::MoeMatmulWeightGradOp>(product.op).getAccumulateMutable().assign(acc);
  }
  add.getResult().replaceAllUsesWith(product.op->getResult(0));
  add.erase();
  if (product.widen)
    product.widen.erase();
}

/// `acc' = add(acc, grad)` updating accumulator `acc` (a state argument of the function):
///   grad = matmul(a, b)                -> acc' = matmul(a, b) accumulate acc
///   grad = moe_matmul_weight_grad(...) -> acc' = moe_matmul_weight_grad(...) accumulate acc
///   grad = add(rest, matmul(a, b))     -> acc' = matmul(a, b) accumulate add(acc, rest)
/// (a tied weight's two gradients: the embedding's scatter and the head's GEMM). The fused GEMM
/// writes the accumulator in place (codegen: a GEMM with an accumulator may write its state
/// buffer). Under bf16/fp16 the weight gradient is a half GEMM cast up to the f32 accumulator:
///   grad = cast(matmul(a, b))            -> acc' = matmul(a, b) accumulate acc
///   grad = cast(add(rest, matmul(a, b))) -> acc' = matmul(a, b) accumulate add(acc, cast(rest))
/// the GEMM reading its half operands into the f32 accumulator (cuBLASLt's bf16/f16 A and B with
/// f32 C and D; the CPU's f32 GEMM on the widened operands), so the product is never rounded to
/// half and no widening pass or add is left.
bool fuseAccumulation(mega::AddOp add, Value acc) {
  Value grad = add.getLhs() == acc ? add.getRhs() : add.getLhs();
  if (grad == acc)
    return false;
  OpBuilder b(add);
  if (Product product = fusibleProduct(grad, acc)) {
    fuseInto(product, acc, add);
    return true;
  }
  // A tied weight: the sum of the two gradients, in the accumulator's type or (half) widened.
  auto accType = cast<RankedTensorType>(acc.getType());
  mega::CastOp widenSum = grad.getDefiningOp<mega::CastOp>();
  Value sumValue = widenSum && grad.hasOneUse() ? widenSum.getInput() : grad;
  auto sum = sumValue.getDefiningOp<mega::AddOp>();
  if (!sum || !sumValue.hasOneUse() || !grad.hasOneUse())
    return false;
  for (bool lhsIsProduct : {true, false}) {
    Value productValue = lhsIsProduct ? sum.getLhs() : sum.getRhs();
    Value rest = lhsIsProduct ? sum.getRhs() : sum.getLhs();
    // Under a widened sum the half product is read by the sum, not by a cast of its own.
    Product product;
    if (widenSum) {
      auto mm = productValue.getDefiningOp<mega::MatmulOp>();
      if (mm && !mm.getAccumulate() && productValue.hasOneUse() &&
          accumulatesInto(mm.getType().getElementType(), accType.getElementType()))
        product = {mm, {}};
    } else {
      product = fusibleProduct(productValue, acc);
    }
    if (!product)
      continue;
    if (widenSum)
      rest = mega::CastOp::create(b, add.getLoc(), accType, rest);
    auto partial = mega::AddOp::create(b, add.getLoc(), accType, acc, rest);
    fuseInto(product, partial.getResult(), add);
    if (widenSum)
      widenSum.erase();
    sum.erase();
    return true;
  }
  return false;
}

/// Moves `op` up to just after the latest op of its block defining one of its operands, or, when
/// block arguments are all it reads, to just after `*atStart` (the last op so placed at the
/// block's start; null: the start itself), keeping such ops in their order. Only upward: every
/// operand stays defined before it and every use after it.
void raiseToOperands(Operation *op, Operation *&atStart) {
  Block *block = op->getBlock();
  Operation *latest = nullptr;
  for (Value operand : op->getOperands())
    if (Operation *def = operand.getDefiningOp();
        def && def->getBlock() == block && (!latest || latest->isBeforeInBlock(def)))
      latest = def;
  if (!latest) {
    if (!atStart)
      op->moveBefore(block, block->begin());
    else if (atStart != op)
      op->moveAfter(atStart);
    atStart = op;
  } else if (latest->isBeforeInBlock(op) && latest->getNextNode() != op) {
    op->moveAfter(latest);
  }
}

/// Raises each gradient accumulation of `f` (the op giving a `grad.*` `mega.updates` result, and
/// the one-use adds and casts that feed it: a tied weight's partial sum) to where its operands
/// are final. The accumulator is a state argument, so a weight-gradient GEMM that accumulates
/// into it runs where its product is computable, in the backward next to its layer's input
/// gradient, not where autodiff emitted the add (after the whole backward): a dp bucket's
/// gradients are then final one layer after another (the overlap schedule starts its reduction
/// there) and each layer's saved activations die with its layer. Only ops move, upward; the
/// arithmetic is the same.
void raiseAccumulations(func::FuncOp f) {
  auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
  llvm::SetVector<Operation *> chain;
  std::function<void(Operation *)> collect = [&](Operation *op) {
    if (!op || op->getBlock() != ret->getBlock() || !chain.insert(op))
      return;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && operand.hasOneUse() && isa<mega::AddOp, mega::CastOp>(def))
        collect(def);
  };
  for (unsigned i = 0; i < f.getNumResults(); ++i)
    if (auto name = f.getResultAttrOfType<StringAttr>(i, kUpdatesAttr);
        name && name.getValue().starts_with("grad."))
      collect(ret.getOperand(i).getDefiningOp());
  // In block order, so each op's chain operands have already risen above it.
  SmallVector<Operation *> ordered;
  for (Operation &op : ret->getBlock()->without_terminator())
    if (chain.contains(&op))
      ordered.push_back(&op);
  Operation *atStart = nullptr;
  for (Operation *op : ordered)
    raiseToOperands(op, atStart);
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
  raiseAccumulations(f);
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
