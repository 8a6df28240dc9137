// The plan validator's checks of one instruction: its signature (input, output and buffer
// counts, attrs table) and format version from the opcode table (Opcodes.def), what it may
// write, and its attributes, collectives' and Send/Recv's groups and shapes included.
#include "runtime/plan/PlanValidator.h"

#include "runtime/plan/OpSignatures.h"
#include "runtime/plan/Opcodes.h"
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/PlanRules.h"
#include "support/HostTensor.h"

#include <algorithm>
#include <cmath>

namespace megac::runtime {

namespace fb = megac::plan;

namespace {

/// MatMul's dtypes: lhs and rhs alike; the output (and an accumulator, input 2) of their dtype,
/// or f32 under bf16/f16 operands when accumulating (mixed-precision gradient accumulation:
/// the half product summed into the f32 accumulator). "" when they agree, else what is wrong.
std::string matmulDtypeError(const fb::Program &prog, const fb::Instruction &inst) {
  auto dtype = [&](uint32_t b) { return prog.buffers()->Get(b)->dtype(); };
  auto name = [](fb::DType d) { return std::string(fb::EnumNameDType(d)); };
  fb::DType lhs = dtype(inst.inputs()->Get(0)), rhs = dtype(inst.inputs()->Get(1));
  fb::DType out = dtype(inst.outputs()->Get(0));
  bool accumulates = inst.inputs()->size() > 2;
  if (lhs != rhs)
    return "MatMul reads " + name(lhs) + " and " + name(rhs) + " operands; both need one dtype";
  bool half = lhs == fb::DType::bf16 || lhs == fb::DType::f16;
  if (out != lhs && !(accumulates && half && out == fb::DType::f32))
    return "MatMul writes " + name(out) + " from " + name(lhs) + " operands; its output is " +
           name(lhs) +
           (half ? ", or f32 when it accumulates (3 inputs: bf16/f16 products "
                   "summed into an f32 gradient accumulator)"
                 : "");
  if (!accumulates)
    return "";
  if (fb::DType acc = dtype(inst.inputs()->Get(2)); acc != out)
    return "MatMul accumulates into a " + name(acc) + " accumulator (input 2) but writes " +
           name(out) + "; the accumulator and the output need one dtype";
  return "";
}

} // namespace

Status PlanValidator::instError(size_t i, const std::string &what) const {
  return planError(describeInstruction(*prog_, progIndex_, fnIndex_, i) + ": " + what);
}

Status PlanValidator::instruction(const fb::Instruction &inst, size_t i) {
  OpSignature sig = signatureOf(inst.op());
  if (sig.minInputs < 0)
    return instError(i, "unknown opcode " + std::to_string(static_cast<int>(inst.op())));
  int inputs = static_cast<int>(sizeOf(inst.inputs()));
  if (inputs < sig.minInputs || (sig.maxInputs >= 0 && inputs > sig.maxInputs))
    return instError(
        i, "has " + std::to_string(inputs) + " inputs, expected " + std::to_string(sig.minInputs) +
               (sig.maxInputs == sig.minInputs
                    ? std::string()
                    : (sig.maxInputs < 0 ? " or more" : " to " + std::to_string(sig.maxInputs))));
  int outputs = static_cast<int>(sizeOf(inst.outputs()));
  int expectedOutputs = fb::outputCount(inst.op(), inputs);
  if (outputs != expectedOutputs)
    return instError(i, "has " + std::to_string(outputs) + " outputs, expected " +
                            std::to_string(expectedOutputs));
  for (int k = 0; k < inputs; ++k) {
    uint32_t b = inst.inputs()->Get(k);
    if (b >= numBuffers_)
      return instError(i, "input " + std::to_string(k) + " is buffer " + std::to_string(b) +
                              ", but the program has " + std::to_string(numBuffers_) + " buffers");
  }
  for (int k = 0; k < outputs; ++k) {
    uint32_t out = inst.outputs()->Get(k);
    if (out >= numBuffers_)
      return instError(i, "output " + std::to_string(k) + " is buffer " + std::to_string(out) +
                              ", but the program has " + std::to_string(numBuffers_) + " buffers");
  }
  RETURN_IF_ERROR(writes(inst, i));
  if (inst.op() == fb::Opcode::MatMul)
    if (std::string e = matmulDtypeError(*prog_, inst); !e.empty())
      return instError(i, e);
  if (fb::opcodeHas(inst.op(), fb::opflag::OptionalAttrs) && inst.attrs_type() == fb::Attrs::NONE)
    return Status::ok();
  if (uint32_t needed = minimumVersion(inst.op()); plan_.format_version() < needed)
    return instError(i, std::string(fb::EnumNameOpcode(inst.op())) +
                            " needs plan format version " + std::to_string(needed) +
                            "; recompile the model");
  if (inst.attrs_type() != sig.attrs)
    return instError(i, "has " + attrsName(inst.attrs_type()) + ", but " +
                            fb::EnumNameOpcode(inst.op()) + " takes " + attrsName(sig.attrs));
  if (sig.attrs != fb::Attrs::NONE && !inst.attrs())
    return instError(i, "its " + attrsName(sig.attrs) + " table is missing");
  AttrsCheck check = attrsCheck(sig.attrs);
  if (!check)
    return instError(i, "has " + attrsName(sig.attrs) + ", which this validator cannot check");
  size_t inRank = sizeOf(inst.inputs()) ? rankOf(inst.inputs()->Get(0)) : 0;
  return (this->*check)(inst, i, inRank);
}

bool PlanValidator::hasRule(fb::Opcode op) {
  const fb::OpcodeInfo *info = fb::opcodeInfo(op);
  return info && attrsCheck(info->attrs) != nullptr;
}

Status PlanValidator::writes(const fb::Instruction &inst, size_t i) {
  size_t inputs = sizeOf(inst.inputs());
  bool accumulates = fb::accumulatesInPlace(inst.op(), static_cast<int>(inputs));
  bool inPlace = fb::writesInPlace(inst.op()) || accumulates;
  const std::string why =
      std::string(": only the elementwise opcodes, AdamW, ClipByNorm, AllReduce and a MatMul or ") +
      "MoeMatmulWeightGrad into its accumulator write in place, not " +
      fb::EnumNameOpcode(inst.op());
  for (size_t k = 0; k < sizeOf(inst.outputs()); ++k) {
    uint32_t out = inst.outputs()->Get(flatbuffers::uoffset_t(k));
    std::string which = "output " + std::to_string(k) + " (" + bufferName(out) + ")";
    if (kind_[out] == Kind::constant)
      return instError(i, which + " is a constant; constants are never written");
    if (kind_[out] != Kind::temporary && !inPlace)
      return instError(i, which + " is a " + kindName(kind_[out]) + why);
    if (auto p = persistentOverlap(out); p && *p != out)
      return instError(i, which + " shares bytes with the " + kindName(kind_[*p]) + " in " +
                              bufferName(*p));
    for (size_t j = 0; j < inputs; ++j) {
      uint32_t in = inst.inputs()->Get(flatbuffers::uoffset_t(j));
      if (in == out && !inPlace)
        return instError(i, which + " is also input " + std::to_string(j) + why);
      // AdamWMulti's tensors run together: output k (tensor k / 3's p, m or v) may be only
      // that tensor's own p, m or v (input 2 + 4 (k / 3) + {0, 2, 3}[k % 3]).
      if (inst.op() == fb::Opcode::AdamWMulti && overlap(in, out) &&
          j != 2 + 4 * (k / 3) + (k % 3 == 0 ? 0 : k % 3 + 1))
        return instError(i, which + " shares bytes with input " + std::to_string(j) +
                                ", which AdamWMulti reads while it writes; a tensor's p, m, v "
                                "may be written only over themselves");
      // An accumulating GEMM writes over its accumulator only; lhs and rhs are read whole.
      if (accumulates && j + 1 < inputs && overlap(in, out))
        return instError(i, which + " shares bytes with input " + std::to_string(j) + ", which " +
                                fb::EnumNameOpcode(inst.op()) +
                                " reads whole while it writes; only its accumulator (input " +
                                std::to_string(inputs - 1) + ") may be its output");
    }
    for (size_t j = 0; j < k; ++j)
      if (overlap(out, inst.outputs()->Get(flatbuffers::uoffset_t(j))))
        return instError(i, which + " shares bytes with output " + std::to_string(j));
  }
  return Status::ok();
}

uint32_t PlanValidator::minimumVersion(fb::Opcode op) {
  switch (op) {
  case fb::Opcode::AdamWMulti: // max_norm: a version-3 reader would skip the clip
  case fb::Opcode::AllReduceStart:
  case fb::Opcode::AllGatherStart:
  case fb::Opcode::ReduceScatterStart:
  case fb::Opcode::CollectiveDone:
  case fb::Opcode::RingAttention: // the arena scratch output
  case fb::Opcode::RingAttentionGrad:
    return 4;
  default:
    break;
  }
  if (fb::opcodeHas(op, fb::opflag::Collective) || fb::opcodeHas(op, fb::opflag::PointToPoint))
    return 3;
  return 2;
}

PlanValidator::AttrsCheck PlanValidator::attrsCheck(fb::Attrs attrs) {
  switch (attrs) {
  case fb::Attrs::NONE:
  case fb::Attrs::GeluAttrs:   // one bool: nothing to check
  case fb::Attrs::MatMulAttrs: // two bools: nothing to check
    return &PlanValidator::noAttrs;
  case fb::Attrs::CompareAttrs:
    return &PlanValidator::compareAttrs;
  case fb::Attrs::TransposeAttrs:
    return &PlanValidator::transposeAttrs;
  case fb::Attrs::SliceAttrs:
    return &PlanValidator::sliceAttrs;
  case fb::Attrs::AxisAttrs:
    return &PlanValidator::axisAttrs;
  case fb::Attrs::ReduceAttrs:
    return &PlanValidator::reduceAttrs;
  case fb::Attrs::NormAttrs:
    return &PlanValidator::normAttrs;
  case fb::Attrs::AttentionAttrs:
    return &PlanValidator::attentionAttrs;
  case fb::Attrs::DropoutAttrs:
  case fb::Attrs::PadAttrs:
  case fb::Attrs::AdamWAttrs:
  case fb::Attrs::ClipAttrs:
  case fb::Attrs::AdamWMultiAttrs:
    return &PlanValidator::trainingAttrs;
  case fb::Attrs::CrossEntropyAttrs:
  case fb::Attrs::EmbeddingAttrs:
    return &PlanValidator::vocabAttrs;
  case fb::Attrs::CollectiveAttrs:
    return &PlanValidator::collectiveAttrs;
  case fb::Attrs::P2PAttrs:
    return &PlanValidator::p2pAttrs;
  case fb::Attrs::CumSumAttrs:
  case fb::Attrs::ScatterAttrs:
    return &PlanValidator::indexAttrs;
  case fb::Attrs::TopKAttrs:
  case fb::Attrs::MoeMatmulAttrs:
    return &PlanValidator::moeAttrs;
  }
  return nullptr;
}

Status PlanValidator::axisInRange(size_t i, int64_t axis, size_t rank, const char *of) const {
  if (axis < 0 || axis >= static_cast<int64_t>(rank))
    return instError(i, "axis " + std::to_string(axis) + " is out of range for " + of +
                            " of rank " + std::to_string(rank));
  return Status::ok();
}

Status PlanValidator::noAttrs(const fb::Instruction &, size_t, size_t) { return Status::ok(); }

Status PlanValidator::compareAttrs(const fb::Instruction &inst, size_t i, size_t) {
  if (fb::EnumNameComparePredicate(inst.attrs_as_CompareAttrs()->predicate())[0] == 0)
    return instError(i, "unknown compare predicate");
  return Status::ok();
}

Status PlanValidator::transposeAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  if (sizeOf(inst.attrs_as_TransposeAttrs()->perm()) != inRank)
    return instError(i, "perm has " +
                            std::to_string(sizeOf(inst.attrs_as_TransposeAttrs()->perm())) +
                            " entries for an input of rank " + std::to_string(inRank));
  return Status::ok();
}

Status PlanValidator::sliceAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  const fb::SliceAttrs *a = inst.attrs_as_SliceAttrs();
  if (sizeOf(a->starts()) != inRank || sizeOf(a->strides()) != inRank)
    return instError(i, "starts and strides must have the input's rank " + std::to_string(inRank));
  return Status::ok();
}

Status PlanValidator::axisAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  int64_t axis = inst.attrs_as_AxisAttrs()->axis();
  if (inst.op() == fb::Opcode::Concat) // the axis of the output, which any input may lack
    return axisInRange(i, axis, rankOf(inst.outputs()->Get(0)), "the output");
  return axisInRange(i, axis, inRank, "the input");
}

Status PlanValidator::indexAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  if (const fb::CumSumAttrs *a = inst.attrs_as_CumSumAttrs())
    return axisInRange(i, a->axis(), inRank, "the input");
  int64_t axis = inst.attrs_as_ScatterAttrs()->axis();
  if (inst.op() == fb::Opcode::ScatterND && axis != 0)
    return instError(i, "ScatterND's axis must be 0, not " + std::to_string(axis));
  return axisInRange(i, axis, inRank, "the input");
}

Status PlanValidator::moeAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  const fb::TopKAttrs *a = inst.attrs_as_TopKAttrs();
  if (!a)
    return Status::ok(); // MoeMatmulAttrs: a flag
  const auto *shape = buffer(inst.inputs()->Get(0)).shape();
  int64_t n = inRank ? shape->Get(static_cast<flatbuffers::uoffset_t>(inRank - 1)) : 0;
  if (a->k() < 1 || a->k() > n)
    return instError(i, "TopKMask's k = " + std::to_string(a->k()) + " must be in [1, " +
                            std::to_string(n) + "] (the input's last dim)");
  return Status::ok();
}

Status PlanValidator::reduceAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  const fb::ReduceAttrs *a = inst.attrs_as_ReduceAttrs();
  if (!a->axes())
    return instError(i, "ReduceAttrs has no axes");
  if (fb::EnumNameReduceKind(a->kind())[0] == 0)
    return instError(i, "unknown reduce kind " + std::to_string(int(a->kind())));
  for (int64_t axis : *a->axes())
    RETURN_IF_ERROR(axisInRange(i, axis, inRank, "the input"));
  return Status::ok();
}

Status PlanValidator::normAttrs(const fb::Instruction &inst, size_t i, size_t) {
  double eps = inst.attrs_as_NormAttrs()->epsilon();
  if (!std::isfinite(eps) || eps < 0)
    return instError(i, "epsilon " + std::to_string(eps) + " must be finite and >= 0");
  return Status::ok();
}

Status PlanValidator::attentionAttrs(const fb::Instruction &inst, size_t i, size_t) {
  const fb::AttentionAttrs *a = inst.attrs_as_AttentionAttrs();
  if (!std::isfinite(a->scale()))
    return instError(i, "scale is not finite");
  bool ring = inst.op() == fb::Opcode::RingAttention || inst.op() == fb::Opcode::RingAttentionGrad;
  bool hasAxes = a->ring_axes() && a->ring_axes()->size() > 0;
  if (ring != hasAxes)
    return instError(i, ring ? "a ring attention needs its ring's mesh axes (ring_axes)"
                             : "ring_axes is for RingAttention and RingAttentionGrad only");
  if (ring && a->causal())
    return instError(i, "a ring attention is causal by its positions, not `causal`");
  return Status::ok();
}

Status PlanValidator::vocabAttrs(const fb::Instruction &inst, size_t i, size_t) {
  const flatbuffers::Vector<uint32_t> *axes = inst.attrs_type() == fb::Attrs::CrossEntropyAttrs
                                                  ? inst.attrs_as_CrossEntropyAttrs()->vocab_axes()
                                                  : inst.attrs_as_EmbeddingAttrs()->vocab_axes();
  return meshAxes(axes, "vocab_axes", false, [&](const std::string &m) { return instError(i, m); });
}

Status PlanValidator::collectiveAttrs(const fb::Instruction &inst, size_t i, size_t) {
  const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
  auto error = [&](const std::string &m) { return instError(i, m); };
  RETURN_IF_ERROR(meshAxes(a->axes(), "axes", true, error));
  const fb::Buffer &in = buffer(inst.inputs()->Get(0)), &out = buffer(inst.outputs()->Get(0));
  if (in.dtype() != out.dtype())
    return error(std::string("the output is ") + fb::EnumNameDType(out.dtype()) + ", the input " +
                 fb::EnumNameDType(in.dtype()));
  size_t rank = sizeOf(in.shape());
  if (sizeOf(out.shape()) != rank)
    return error("the output's rank " + std::to_string(sizeOf(out.shape())) +
                 " differs from the input's " + std::to_string(rank));
  std::vector<int64_t> want(in.shape()->begin(), in.shape()->end());
  int64_t g = groupSize(a->axes());
  fb::Opcode op = fb::blockingTwin(inst.op()); // a start's shapes are its blocking twin's
  if (op == fb::Opcode::AllReduce || op == fb::Opcode::ReduceScatter) {
    if (a->kind() != fb::ReduceKind::sum && a->kind() != fb::ReduceKind::max)
      return error(std::string("reduce kind ") + fb::EnumNameReduceKind(a->kind()) +
                   " is not supported by collectives (sum or max)");
    bool isFloat = in.dtype() <= fb::DType::f16;
    if (!isFloat && in.dtype() != fb::DType::i64 && in.dtype() != fb::DType::i32)
      return error(std::string("cannot reduce ") + fb::EnumNameDType(in.dtype()) + " values");
  }
  if (op != fb::Opcode::AllReduce) {
    if (a->dim() < 0 || a->dim() >= int64_t(rank))
      return error("dim " + std::to_string(a->dim()) + " is out of range for the input of rank " +
                   std::to_string(rank));
    int64_t &d = want[size_t(a->dim())];
    if (op == fb::Opcode::AllGather) {
      d *= g;
    } else {
      if (d % g != 0)
        return error("dim " + std::to_string(a->dim()) + " of size " + std::to_string(d) +
                     " does not divide over the group's " + std::to_string(g) + " ranks");
      d /= g;
    }
    if (op == fb::Opcode::AllToAll || op == fb::Opcode::MoeAllToAll) {
      if (a->concat_dim() < 0 || a->concat_dim() >= int64_t(rank))
        return error("concat_dim " + std::to_string(a->concat_dim()) +
                     " is out of range for the input of rank " + std::to_string(rank));
      want[size_t(a->concat_dim())] *= g;
    }
  }
  if (!std::equal(want.begin(), want.end(), out.shape()->begin()))
    return error("the output's shape " + shapeString({out.shape()->data(), rank}) + " should be " +
                 shapeString(want) + " for a group of " + std::to_string(g) + " ranks");
  return Status::ok();
}

Status PlanValidator::p2pAttrs(const fb::Instruction &inst, size_t i, size_t) {
  const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
  if (a->axis() >= meshRank())
    return instError(i, "axis " + std::to_string(a->axis()) + " is not a mesh axis (the mesh has " +
                            std::to_string(meshRank()) + ")");
  if (a->shift() == 0)
    return instError(i, "shift is 0 (a rank does not send to itself)");
  if (a->tag() < 0 || a->tag() > INT32_MAX)
    return instError(i, "tag " + std::to_string(a->tag()) + " is outside [0, 2^31)");
  for (size_t r = 0; r < sizeOf(plan_.ranks()); ++r) {
    const fb::RankEntry *entry = plan_.ranks()->Get(flatbuffers::uoffset_t(r));
    if (entry->role() != progIndex_)
      continue;
    int64_t c = entry->coords()->Get(a->axis()) + a->shift();
    if (c < 0 || c >= axisSize(a->axis()))
      return instError(i, "rank " + std::to_string(r) + "'s peer is outside the mesh (coordinate " +
                              std::to_string(c) + " on axis " + std::to_string(a->axis()) +
                              " of size " + std::to_string(axisSize(a->axis())) + ")");
  }
  return Status::ok();
}

Status PlanValidator::trainingAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
  switch (inst.attrs_type()) {
  case fb::Attrs::DropoutAttrs: {
    const fb::DropoutAttrs *a = inst.attrs_as_DropoutAttrs();
    double ratio = a->ratio();
    if (!(ratio >= 0 && ratio <= 1))
      return instError(i, "dropout ratio " + std::to_string(ratio) + " is outside [0, 1]");
    if (bool(a->global_shape()) != bool(a->shard_offset()))
      return instError(i, "DropoutAttrs has global_shape without shard_offset or the reverse");
    if (a->global_shape() &&
        (sizeOf(a->global_shape()) != inRank || sizeOf(a->shard_offset()) != inRank))
      return instError(i, "global_shape and shard_offset must have the input's rank " +
                              std::to_string(inRank));
    if (sizeOf(a->shard_dims()) && !a->global_shape())
      return instError(i, "DropoutAttrs has shard_dims without global_shape");
    for (size_t k = 0; k < sizeOf(a->shard_dims()); ++k) {
      const fb::DimSharding *ds = a->shard_dims()->Get(flatbuffers::uoffset_t(k));
      if (ds->dim() >= inRank)
        return instError(i, "shard_dims " + std::to_string(k) + " names dim " +
                                std::to_string(ds->dim()) + " of a rank-" + std::to_string(inRank) +
                                " input");
      RETURN_IF_ERROR(meshAxes(ds->axes(), "shard_dims " + std::to_string(k) + " axes", true,
                               [&](const std::string &m) { return instError(i, m); }));
    }
    return Status::ok();
  }
  case fb::Attrs::PadAttrs: {
    const fb::PadAttrs *a = inst.attrs_as_PadAttrs();
    if (sizeOf(a->low()) != inRank || sizeOf(a->high()) != inRank ||
        sizeOf(a->interior()) != inRank)
      return instError(i, "low, high and interior must have the input's rank " +
                              std::to_string(inRank));
    for (const auto *amounts : {a->low(), a->high(), a->interior()})
      for (int64_t amount : *amounts)
        if (amount < 0)
          return instError(i, "pad amount " + std::to_string(amount) + " is negative");
    return Status::ok();
  }
  case fb::Attrs::AdamWAttrs: {
    const fb::AdamWAttrs *a = inst.attrs_as_AdamWAttrs();
    if (!(a->beta1() >= 0 && a->beta1() < 1) || !(a->beta2() >= 0 && a->beta2() < 1))
      return instError(i, "betas (" + std::to_string(a->beta1()) + ", " +
                              std::to_string(a->beta2()) + ") must be in [0, 1)");
    if (!(a->eps() >= 0) || !std::isfinite(a->eps()) || !std::isfinite(a->weight_decay()))
      return instError(i, "eps " + std::to_string(a->eps()) + " and weight_decay " +
                              std::to_string(a->weight_decay()) + " must be finite (eps >= 0)");
    return Status::ok();
  }
  case fb::Attrs::AdamWMultiAttrs: {
    const fb::AdamWMultiAttrs *a = inst.attrs_as_AdamWMultiAttrs();
    size_t inputs = sizeOf(inst.inputs());
    if (!(a->max_norm() >= 0) || !std::isfinite(a->max_norm()))
      return instError(i, "max_norm " + std::to_string(a->max_norm()) +
                              " must be finite and > 0 (or 0: no clip)");
    size_t clip = a->max_norm() > 0 ? 1 : 0; // the norm, the last input
    if (inputs < 6 + clip || (inputs - 2 - clip) % 4 != 0)
      return instError(i, "has " + std::to_string(inputs) +
                              " inputs; AdamWMulti takes lr, step and four (p, g, m, v) per "
                              "tensor, for one tensor or more" +
                              (clip ? ", then the clip's norm (max_norm > 0)" : ""));
    if (sizeOf(a->weight_decays()) != (inputs - 2) / 4)
      return instError(i, "has " + std::to_string(sizeOf(a->weight_decays())) +
                              " weight decays for " + std::to_string((inputs - 2) / 4) +
                              " tensors; give one per tensor");
    if (!(a->beta1() >= 0 && a->beta1() < 1) || !(a->beta2() >= 0 && a->beta2() < 1))
      return instError(i, "betas (" + std::to_string(a->beta1()) + ", " +
                              std::to_string(a->beta2()) + ") must be in [0, 1)");
    if (!(a->eps() >= 0) || !std::isfinite(a->eps()))
      return instError(i, "eps " + std::to_string(a->eps()) + " must be finite and >= 0");
    for (double decay : *a->weight_decays())
      if (!std::isfinite(decay))
        return instError(i, "weight decay " + std::to_string(decay) + " must be finite");
    return Status::ok();
  }
  case fb::Attrs::ClipAttrs: {
    double maxNorm = inst.attrs_as_ClipAttrs()->max_norm();
    if (!(maxNorm > 0) || !std::isfinite(maxNorm))
      return instError(i, "max_norm " + std::to_string(maxNorm) + " must be finite and > 0");
    return Status::ok();
  }
  default:
    return Status::ok();
  }
}

} // namespace megac::runtime
