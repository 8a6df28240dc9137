// The opcode signature table: each opcode's input count range and attrs member, which the plan
// validator checks every instruction against, read from the opcode table (Opcodes.def).
#include "runtime/plan/OpSignatures.h"

#include "runtime/plan/Opcodes.h"

namespace megac::runtime {

namespace fb = megac::plan;

OpSignature signatureOf(fb::Opcode op) {
  const fb::OpcodeInfo *info = fb::opcodeInfo(op);
  if (!info)
    return {-1, -1, fb::Attrs::NONE}; // unknown opcode
  return {info->minInputs, info->maxInputs, info->attrs};
}

std::string attrsName(fb::Attrs a) {
  return a == fb::Attrs::NONE ? "no attrs" : std::string(fb::EnumNameAttrs(a));
}

} // namespace megac::runtime
