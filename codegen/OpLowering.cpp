// Lowering mega ops to plan instructions: an op naming an attribute-free plan opcode
// (Mega_Plan<"Name"> in ODS) lowers from its name through the opcode table
// (runtime/plan/Opcodes.def); the ops that need attributes or a choice are lowered here by hand.
#include "codegen/ProgramLowering.h"

#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"
#include "runtime/plan/Opcodes.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/RingScratch.h"

#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace megac::codegen::detail {

namespace {

using mlir::failure;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::success;
using mlir::Value;

pl::ComparePredicate comparePredicate(mega::ComparePredicate predicate) {
  switch (predicate) {
  case mega::ComparePredicate::eq:
    return pl::ComparePredicate::eq;
  case mega::ComparePredicate::ne:
    return pl::ComparePredicate::ne;
  case mega::ComparePredicate::lt:
    return pl::ComparePredicate::lt;
  case mega::ComparePredicate::le:
    return pl::ComparePredicate::le;
  case mega::ComparePredicate::gt:
    return pl::ComparePredicate::gt;
  case mega::ComparePredicate::ge:
    return pl::ComparePredicate::ge;
  }
  return pl::ComparePredicate::eq;
}

pl::ReduceKind reduceKind(mega::ReduceKind kind) {
  switch (kind) {
  case mega::ReduceKind::sum:
    return pl::ReduceKind::sum;
  case mega::ReduceKind::mean:
    return pl::ReduceKind::mean;
  case mega::ReduceKind::max:
    return pl::ReduceKind::max;
  case mega::ReduceKind::min:
    return pl::ReduceKind::min;
  }
  return pl::ReduceKind::sum;
}

/// The attention scale: the op's, else 1/sqrt(head dim).
double attentionScale(std::optional<llvm::APFloat> scale, Value query) {
  int64_t headDim = mlir::cast<mlir::ShapedType>(query.getType()).getShape().back();
  return scale ? scale->convertToDouble() : 1.0 / std::sqrt(static_cast<double>(headDim));
}

} // namespace

LogicalResult ProgramLowering::emit(Operation *op, pl::Opcode opcode, pl::Attrs attrsType,
                                    fb::Offset<void> attrs) {
  FunctionInfo &fn = functions_.back();
  int64_t index = fn.instructions.size();
  InstructionInfo instruction;
  instruction.op = opcode;
  instruction.attrsType = attrsType;
  instruction.attrs = attrs;
  instruction.location = locationString(op->getLoc());
  for (Value operand : op->getOperands())
    instruction.inputs.push_back(use(operand, index));
  // A GEMM with an accumulator (its last input) writes over it (beta = 1) and reads its other
  // inputs whole, so it may write a state buffer that none of those is.
  bool accumulates = pl::accumulatesInPlace(opcode, static_cast<int>(op->getNumOperands()));
  auto mayWrite = [&](uint32_t buffer) {
    return pl::writesInPlace(opcode) ||
           (accumulates && llvm::none_of(llvm::ArrayRef(instruction.inputs).drop_back(),
                                         [&](uint32_t in) { return in == buffer; }));
  };
  for (Value result : op->getResults()) {
    // A `mega.updates` result of an opcode that may write in place goes straight into the
    // parameter's or state's buffer.
    if (auto it = updateOf_.find(result); it != updateOf_.end() &&
                                          mayWrite(updates_[it->second].buffer) &&
                                          !updates_[it->second].writtenAt) {
      Update &update = updates_[it->second];
      update.writtenAt = index;
      update.writer = op;
      bufferOf_[result] = update.buffer;
      instruction.outputs.push_back(update.buffer);
      continue;
    }
    auto buffer = addBuffer(result, valueName(result), op->getLoc());
    if (failed(buffer))
      return failure();
    buffers_[*buffer].request.def = index;
    buffers_[*buffer].request.lastUse = index;
    instruction.outputs.push_back(*buffer);
  }
  instructionOf_[op] = index;
  fn.instructions.push_back(std::move(instruction));
  return success();
}

LogicalResult ProgramLowering::emitWithAxis(Operation *op, pl::Opcode opcode, int64_t axis,
                                            int64_t rank) {
  std::optional<int64_t> normalized = mega::shape::normalizeAxis(axis, rank);
  if (!normalized)
    return op->emitOpError() << "axis " << axis << " is out of range for rank " << rank;
  auto attrs = pl::CreateAxisAttrs(fbb_, *normalized);
  return emit(op, opcode, pl::Attrs::AxisAttrs, fb::Offset<void>(attrs.o));
}

LogicalResult ProgramLowering::lowerOp(Operation *op) {
  using namespace mega;
  using O = pl::Opcode;
  using A = pl::Attrs;
  auto asVoid = [](auto offset) { return fb::Offset<void>(offset.o); };
  auto rankOf = [](Value value) { return mlir::cast<mlir::ShapedType>(value.getType()).getRank(); };
  auto normAttrs = [&](llvm::APFloat eps) {
    return asVoid(pl::CreateNormAttrs(fbb_, eps.convertToDouble()));
  };
  auto crossEntropyAttrs = [&](std::optional<int64_t> ignore, const std::vector<uint32_t> &vocab) {
    return asVoid(pl::CreateCrossEntropyAttrsDirect(fbb_, ignore.has_value(), ignore.value_or(0),
                                                    vocab.empty() ? nullptr : &vocab));
  };
  // Vocab-parallel embedding and cross-entropy: the mesh axes of the vocab split.
  auto vocabAxes = [&](mlir::ArrayAttr names) -> mlir::FailureOr<std::vector<uint32_t>> {
    if (!names)
      return std::vector<uint32_t>{};
    return meshAxes(op, names);
  };
  auto embedding = [&](pl::Opcode opcode, mlir::ArrayAttr names) -> LogicalResult {
    auto vocab = vocabAxes(names);
    if (failed(vocab))
      return failure();
    if (vocab->empty())
      return emit(op, opcode);
    return emit(op, opcode, pl::Attrs::EmbeddingAttrs,
                asVoid(pl::CreateEmbeddingAttrsDirect(fbb_, &*vocab)));
  };
  auto crossEntropy = [&](pl::Opcode opcode, std::optional<int64_t> ignore,
                          mlir::ArrayAttr names) -> LogicalResult {
    auto vocab = vocabAxes(names);
    if (failed(vocab))
      return failure();
    return emit(op, opcode, pl::Attrs::CrossEntropyAttrs, crossEntropyAttrs(ignore, *vocab));
  };
  auto collective = [&](pl::Opcode opcode, mlir::ArrayAttr names, mega::ReduceKind kind,
                        int64_t dim, int64_t concatDim) -> LogicalResult {
    auto axes = meshAxes(op, names);
    if (failed(axes))
      return failure();
    return emit(
        op, opcode, pl::Attrs::CollectiveAttrs,
        asVoid(pl::CreateCollectiveAttrsDirect(fbb_, &*axes, reduceKind(kind), dim, concatDim)));
  };
  auto p2p = [&](pl::Opcode opcode, llvm::StringRef axis, int64_t shift,
                 int64_t tag) -> LogicalResult {
    std::optional<unsigned> index = mesh_ ? mesh_.findAxis(axis) : std::nullopt;
    if (!index)
      return op->emitError() << "mesh axis '" << axis << "' is not an axis of the plan's mesh";
    return emit(op, opcode, pl::Attrs::P2PAttrs,
                asVoid(pl::CreateP2PAttrs(fbb_, *index, shift, tag)));
  };
  // Attention and its gradient; with mega.ring_axes (context parallelism's ring) the ring
  // opcode, whose kernel exchanges the key/value blocks over those mesh axes, with one more
  // output: the ring's scratch (the blocks in flight, the merge statistics; RingScratch.h), an
  // arena buffer live for this instruction alone, so the plan's memory counts it.
  auto attention = [&](pl::Opcode plain, pl::Opcode ring, bool causal,
                       double scale) -> LogicalResult {
    auto names = op->getAttrOfType<mlir::ArrayAttr>(kRingAxesAttr);
    if (!names)
      return emit(op, plain, A::AttentionAttrs,
                  asVoid(pl::CreateAttentionAttrs(fbb_, causal, scale)));
    auto axes = meshAxes(op, names);
    if (failed(axes))
      return failure();
    if (failed(emit(op, ring, A::AttentionAttrs,
                    asVoid(pl::CreateAttentionAttrsDirect(fbb_, causal, scale, &*axes)))))
      return failure();
    bool backward = ring == O::RingAttentionGrad;
    unsigned first = backward ? 1 : 0; // q, k, v (after the gradient's dout)
    auto shapeOf = [&](unsigned i) {
      return mlir::cast<mlir::ShapedType>(op->getOperand(first + i).getType()).getShape();
    };
    auto q = shapeOf(0), k = shapeOf(1), v = shapeOf(2);
    auto dtype =
        dtypeOf(mlir::cast<mlir::ShapedType>(op->getOperand(first).getType()).getElementType());
    if (q.size() != 4 || k.size() != 4 || v.size() != 4 || !dtype)
      return op->emitOpError() << "ring attention needs [b, s, h, d] q, k and v";
    // q, k, v, [key mask,] positions (after the gradient's dout): the mask travels with k, v.
    bool mask = op->getNumOperands() == first + 6;
    pl::RingDims dims{
        q[0], q[1], q[2], q[3], k[1], k[2], v[3], static_cast<int64_t>(dtypeBytes(*dtype)), mask};
    uint64_t words = pl::ringScratchLayout(dims, backward).words();
    FunctionInfo &fn = functions_.back();
    BufferInfo scratch;
    scratch.name = fn.instructions.back().outputs.empty()
                       ? "ring_scratch"
                       : buffers_[fn.instructions.back().outputs.front()].name + ".ring_scratch";
    scratch.dtype = pl::DType::f64;
    scratch.shape = {static_cast<int64_t>(words)};
    scratch.request.bytes = words * 8;
    scratch.request.def = scratch.request.lastUse = int64_t(fn.instructions.size()) - 1;
    scratch.request.function = functions_.size() - 1;
    fn.instructions.back().outputs.push_back(buffers_.size());
    buffers_.push_back(std::move(scratch));
    return success();
  };
  // An op naming an attribute-free opcode (Mega_Plan<"Name">): the opcode table has the rest.
  auto byName = [&](llvm::StringRef name) -> LogicalResult {
    std::optional<pl::Opcode> opcode = pl::opcodeNamed(std::string_view(name.data(), name.size()));
    if (!opcode)
      return op->emitOpError() << "names plan opcode '" << name
                               << "', which is not in runtime/plan/Opcodes.def";
    const pl::OpcodeInfo &info = *pl::opcodeInfo(*opcode);
    if (info.attrs != pl::Attrs::NONE)
      return op->emitOpError() << "lowers to " << info.name << ", which takes "
                               << pl::EnumNameAttrs(info.attrs)
                               << ": codegen/OpLowering.cpp lowers it by hand";
    int inputs = static_cast<int>(op->getNumOperands());
    if (!info.acceptsInputs(inputs) || info.outputsFor(inputs) != int(op->getNumResults()))
      return op->emitOpError() << "has " << inputs << " operands and " << op->getNumResults()
                               << " results, which plan opcode " << info.name << " does not take";
    return emit(op, *opcode);
  };
  auto unsupported = [](Operation *unlowered) -> LogicalResult {
    return unlowered->emitError() << "'" << unlowered->getName()
                                  << "' cannot be lowered to a plan (run mega-spmdize first)";
  };
  // An operand whose producer failed to lower was reported there; skip its users quietly.
  for (Value operand : op->getOperands())
    if (!bufferOf_.count(operand))
      return failure();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ConstantOp c) { return lowerConstant(c, c.getResult(), c.getValue()); })
      .Case([&](mlir::func::ReturnOp r) { return lowerReturn(r); })
      .Case([&](ReshapeOp r) { return lowerReshape(r.getInput(), r.getResult(), r.getLoc()); })
      // The aux term only seeds the backward: the forward is its input, shared.
      .Case([&](AddAuxLossOp a) { return lowerReshape(a.getInput(), a.getResult(), a.getLoc()); })
      .Case([&](TopKMaskOp t) {
        return emit(op, O::TopKMask, A::TopKAttrs, asVoid(pl::CreateTopKAttrs(fbb_, t.getK())));
      })
      .Case([&](MatmulOp m) -> LogicalResult {
        // Plain products keep the attribute-free form (MatMulAttrs is optional).
        if (!m.getTransposeLhs() && !m.getTransposeRhs())
          return emit(op, O::MatMul);
        return emit(op, O::MatMul, A::MatMulAttrs,
                    asVoid(pl::CreateMatMulAttrs(fbb_, m.getTransposeLhs(), m.getTransposeRhs())));
      })
      .Case([&](MoeMatmulOp m) {
        return emit(op, O::MoeMatmul, A::MoeMatmulAttrs,
                    asVoid(pl::CreateMoeMatmulAttrs(fbb_, m.getTransposeWeight())));
      })
      .Case([&](CompareOp c) {
        return emit(op, O::Compare, A::CompareAttrs,
                    asVoid(pl::CreateCompareAttrs(fbb_, comparePredicate(c.getPredicate()))));
      })
      .Case([&](TransposeOp t) {
        std::vector<int64_t> perm(t.getPerm().begin(), t.getPerm().end());
        return emit(op, O::Transpose, A::TransposeAttrs,
                    asVoid(pl::CreateTransposeAttrsDirect(fbb_, &perm)));
      })
      .Case([&](SliceOp s) {
        std::vector<int64_t> starts(s.getStarts().begin(), s.getStarts().end());
        std::vector<int64_t> strides(s.getStrides().begin(), s.getStrides().end());
        return emit(op, O::Slice, A::SliceAttrs,
                    asVoid(pl::CreateSliceAttrsDirect(fbb_, &starts, &strides)));
      })
      .Case([&](ConcatOp c) {
        return emitWithAxis(op, O::Concat, c.getAxis(), rankOf(c.getResult()));
      })
      .Case(
          [&](GatherOp g) { return emitWithAxis(op, O::Gather, g.getAxis(), rankOf(g.getData())); })
      .Case([&](GatherElementsOp g) {
        return emitWithAxis(op, O::GatherElements, g.getAxis(), rankOf(g.getData()));
      })
      .Case([&](ScatterElementsOp s) -> LogicalResult {
        std::optional<int64_t> axis = mega::shape::normalizeAxis(s.getAxis(), rankOf(s.getData()));
        if (!axis)
          return s.emitOpError() << "axis " << s.getAxis() << " is out of range";
        return emit(op, O::ScatterElements, A::ScatterAttrs,
                    asVoid(pl::CreateScatterAttrs(fbb_, *axis, s.getAccumulate())));
      })
      .Case([&](ScatterNdOp s) {
        return emit(op, O::ScatterND, A::ScatterAttrs,
                    asVoid(pl::CreateScatterAttrs(fbb_, 0, s.getAccumulate())));
      })
      .Case([&](CumSumOp c) -> LogicalResult {
        std::optional<int64_t> axis = mega::shape::normalizeAxis(c.getAxis(), rankOf(c.getInput()));
        if (!axis)
          return c.emitOpError() << "axis " << c.getAxis() << " is out of range";
        return emit(op, O::CumSum, A::CumSumAttrs,
                    asVoid(pl::CreateCumSumAttrs(fbb_, *axis, c.getExclusive(), c.getReverse())));
      })
      .Case([&](ReduceOp r) -> LogicalResult {
        int64_t rank = rankOf(r.getInput());
        std::vector<int64_t> axes;
        for (int64_t axis : r.getAxes()) {
          std::optional<int64_t> normalized = mega::shape::normalizeAxis(axis, rank);
          if (!normalized)
            return r.emitOpError() << "axis " << axis << " is out of range for rank " << rank;
          axes.push_back(*normalized);
        }
        std::sort(axes.begin(), axes.end());
        return emit(op, O::Reduce, A::ReduceAttrs,
                    asVoid(pl::CreateReduceAttrsDirect(fbb_, reduceKind(r.getKind()), &axes)));
      })
      .Case([&](SoftmaxOp s) {
        return emitWithAxis(op, O::Softmax, s.getAxis(), rankOf(s.getInput()));
      })
      .Case([&](EmbeddingOp e) { return embedding(O::Embedding, e.getVocabAxesAttr()); })
      .Case([&](LayerNormOp n) {
        return emit(op, O::LayerNorm, A::NormAttrs, normAttrs(n.getEpsilon()));
      })
      .Case([&](RmsNormOp n) {
        return emit(op, O::RmsNorm, A::NormAttrs, normAttrs(n.getEpsilon()));
      })
      .Case([&](AttentionOp a) {
        double scale = attentionScale(a.getScale(), a.getQuery());
        return attention(O::Attention, O::RingAttention, a.getCausal(), scale);
      })
      .Case([&](GeluOp g) {
        bool tanh = g.getApproximation() == GeluApproximation::tanh;
        return emit(op, O::Gelu, A::GeluAttrs, asVoid(pl::CreateGeluAttrs(fbb_, tanh)));
      })
      .Case([&](CrossEntropyOp c) {
        return crossEntropy(O::CrossEntropy, c.getIgnoreIndex(), c.getVocabAxesAttr());
      })
      .Case([&](DropoutOp d) {
        return emit(
            op, O::Dropout, A::DropoutAttrs,
            asVoid(pl::CreateDropoutAttrs(fbb_, d.getRatio().convertToDouble(), d.getStream())));
      })
      // Backward ops.
      .Case([&](PadOp p) {
        std::vector<int64_t> low(p.getLow().begin(), p.getLow().end());
        std::vector<int64_t> high(p.getHigh().begin(), p.getHigh().end());
        std::vector<int64_t> interior(p.getInterior().begin(), p.getInterior().end());
        return emit(op, O::Pad, A::PadAttrs,
                    asVoid(pl::CreatePadAttrsDirect(fbb_, &low, &high, &interior)));
      })
      .Case([&](LayerNormGradOp n) {
        return emit(op, O::LayerNormGrad, A::NormAttrs, normAttrs(n.getEpsilon()));
      })
      .Case([&](RmsNormGradOp n) {
        return emit(op, O::RmsNormGrad, A::NormAttrs, normAttrs(n.getEpsilon()));
      })
      .Case([&](AttentionGradOp a) {
        double scale = attentionScale(a.getScale(), a.getQuery());
        return attention(O::AttentionGrad, O::RingAttentionGrad, a.getCausal(), scale);
      })
      .Case([&](GeluGradOp g) {
        bool tanh = g.getApproximation() == GeluApproximation::tanh;
        return emit(op, O::GeluGrad, A::GeluAttrs, asVoid(pl::CreateGeluAttrs(fbb_, tanh)));
      })
      .Case([&](SoftmaxGradOp s) {
        return emitWithAxis(op, O::SoftmaxGrad, s.getAxis(), rankOf(s.getResult()));
      })
      .Case([&](CrossEntropyGradOp c) {
        return crossEntropy(O::CrossEntropyGrad, c.getIgnoreIndex(), c.getVocabAxesAttr());
      })
      .Case([&](EmbeddingGradOp e) { return embedding(O::EmbeddingGrad, e.getVocabAxesAttr()); })
      // Optimizer ops.
      .Case([&](AdamWUpdateOp a) {
        return emit(op, O::AdamW, A::AdamWAttrs,
                    asVoid(pl::CreateAdamWAttrs(
                        fbb_, a.getBeta1().convertToDouble(), a.getBeta2().convertToDouble(),
                        a.getEps().convertToDouble(), a.getWeightDecay().convertToDouble())));
      })
      // Inputs lr, step, then (p, g, m, v) per parameter, then the clip's norm if any; outputs
      // (p, m, v) per parameter, each into its own parameter's or moment's buffer (the validator
      // holds it to that).
      .Case([&](AdamWUpdateMultiOp a) {
        std::vector<double> decays(a.getWeightDecays().begin(), a.getWeightDecays().end());
        double maxNorm = a.getMaxNorm() ? a.getMaxNorm()->convertToDouble() : 0.0;
        return emit(op, O::AdamWMulti, A::AdamWMultiAttrs,
                    asVoid(pl::CreateAdamWMultiAttrsDirect(
                        fbb_, a.getBeta1().convertToDouble(), a.getBeta2().convertToDouble(),
                        a.getEps().convertToDouble(), &decays, maxNorm)));
      })
      .Case([&](ClipByNormOp c) {
        return emit(op, O::ClipByNorm, A::ClipAttrs,
                    asVoid(pl::CreateClipAttrs(fbb_, c.getMaxNorm().convertToDouble())));
      })
      // Collectives and transfers (partitioned plans).
      .Case([&](AllReduceOp c) { return collective(O::AllReduce, c.getAxes(), c.getKind(), 0, 0); })
      .Case([&](AllGatherOp c) {
        return collective(O::AllGather, c.getAxes(), ReduceKind::sum, c.getDim(), 0);
      })
      .Case([&](ReduceScatterOp c) {
        return collective(O::ReduceScatter, c.getAxes(), c.getKind(), c.getDim(), 0);
      })
      // Asynchronous collectives (their CollectiveDone lowers by name).
      .Case([&](AllReduceStartOp c) {
        return collective(O::AllReduceStart, c.getAxes(), c.getKind(), 0, 0);
      })
      .Case([&](AllGatherStartOp c) {
        return collective(O::AllGatherStart, c.getAxes(), ReduceKind::sum, c.getDim(), 0);
      })
      .Case([&](ReduceScatterStartOp c) {
        return collective(O::ReduceScatterStart, c.getAxes(), c.getKind(), c.getDim(), 0);
      })
      .Case([&](AllToAllOp c) {
        return collective(O::AllToAll, c.getAxes(), ReduceKind::sum, c.getSplitDim(),
                          c.getConcatDim());
      })
      // Tokens to experts: the expert dim is split, the token dim gathered; back, the reverse.
      .Case([&](MoeExchangeOp c) {
        bool toExperts = c.getToExperts();
        return collective(O::MoeAllToAll, c.getAxes(), ReduceKind::sum, toExperts ? 0 : 1,
                          toExperts ? 1 : 0);
      })
      .Case([&](ShardSliceOp c) {
        return collective(O::ShardSlice, c.getAxes(), ReduceKind::sum, c.getDim(), 0);
      })
      // The identity forward; its gradient (an all_reduce) is its own op after autodiff.
      .Case([&](CopyToShardsOp c) { return lowerReshape(c.getInput(), c.getResult(), c.getLoc()); })
      .Case([&](SendOp s) { return p2p(O::Send, s.getAxis(), s.getShift(), s.getTag()); })
      .Case([&](RecvOp r) { return p2p(O::Recv, r.getAxis(), r.getShift(), r.getTag()); })
      .Case<ReshardOp>(unsupported)
      .Case([&](PlanOpInterface planned) { return byName(planned.getPlanOpcode()); })
      .Default([&](Operation *op) -> LogicalResult {
        return op->emitError() << "'" << op->getName()
                               << "' is not a mega op; codegen lowers only mega ops";
      });
}

} // namespace megac::codegen::detail
