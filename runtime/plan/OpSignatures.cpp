// The opcode signature table: each opcode's input count range and attrs member, which the plan
// validator checks every instruction against.
#include "runtime/plan/OpSignatures.h"

namespace megac::runtime {

namespace fb = megac::plan;

OpSignature signatureOf(fb::Opcode op) {
  using O = fb::Opcode;
  using A = fb::Attrs;
  switch (op) {
  case O::Neg:
  case O::Abs:
  case O::Exp:
  case O::Log:
  case O::Tanh:
  case O::Erf:
  case O::Sigmoid:
  case O::Relu:
  case O::Sqrt:
  case O::Rsqrt:
  case O::Not:
  case O::Copy:
  case O::Broadcast:
  case O::Cast:
    return {1, 1, A::NONE};
  case O::Add:
  case O::Sub:
  case O::Mul:
  case O::Div:
  case O::Pow:
  case O::Min:
  case O::Max:
  case O::And:
  case O::Or:
  case O::MatMul:
    return {2, 2, A::NONE};
  case O::Embedding:
  case O::EmbeddingGrad: // EmbeddingAttrs (version 3) or no attrs
    return {2, 2, A::EmbeddingAttrs};
  case O::Compare:
    return {2, 2, A::CompareAttrs};
  case O::Where:
    return {3, 3, A::NONE};
  case O::Transpose:
    return {1, 1, A::TransposeAttrs};
  case O::Slice:
    return {1, 1, A::SliceAttrs};
  case O::Concat:
    return {1, -1, A::AxisAttrs};
  case O::Gather:
    return {2, 2, A::AxisAttrs};
  case O::Reduce:
    return {1, 1, A::ReduceAttrs};
  case O::Softmax:
    return {1, 1, A::AxisAttrs};
  case O::Linear:
    return {2, 3, A::NONE};
  case O::LayerNorm:
    return {2, 3, A::NormAttrs};
  case O::RmsNorm:
    return {2, 2, A::NormAttrs};
  case O::Attention:
    return {3, 4, A::AttentionAttrs};
  case O::Gelu:
    return {1, 1, A::GeluAttrs};
  case O::CrossEntropy:
    return {2, 2, A::CrossEntropyAttrs};
  case O::Dropout:
    return {2, 2, A::DropoutAttrs};
  case O::Pad:
    return {1, 1, A::PadAttrs};
  case O::LayerNormGrad:
  case O::RmsNormGrad:
    return {3, 3, A::NormAttrs};
  case O::AttentionGrad:
    return {4, 5, A::AttentionAttrs};
  case O::GeluGrad:
    return {2, 2, A::GeluAttrs};
  case O::SoftmaxGrad:
    return {2, 2, A::AxisAttrs};
  case O::CrossEntropyGrad:
    return {3, 3, A::CrossEntropyAttrs};
  case O::AdamW:
    return {6, 6, A::AdamWAttrs};
  case O::GlobalNorm:
    return {1, -1, A::NONE};
  case O::ClipByNorm:
    return {2, 2, A::ClipAttrs};
  case O::AllReduce:
  case O::AllGather:
  case O::ReduceScatter:
  case O::AllToAll:
  case O::ShardSlice:
    return {1, 1, A::CollectiveAttrs};
  case O::Send:
    return {1, 1, A::P2PAttrs};
  case O::Recv:
    return {0, 0, A::P2PAttrs};
  case O::Silu:
    return {1, 1, A::NONE};
  case O::Rope:
    return {3, 3, A::NONE};
  }
  return {-1, -1, A::NONE}; // unknown opcode
}

std::string attrsName(fb::Attrs a) {
  return a == fb::Attrs::NONE ? "no attrs" : std::string(fb::EnumNameAttrs(a));
}

} // namespace megac::runtime
