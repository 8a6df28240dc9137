// The opcode signatures the plan loader checks instructions against: how many inputs each
// opcode takes and which attrs table it carries (from runtime/plan/Opcodes.def).
#pragma once

#include "runtime/plan/plan_generated.h"

#include <string>

namespace megac::runtime {

/// What an opcode takes: its input count range and its attrs member (NONE: no attrs).
struct OpSignature {
  int minInputs;
  int maxInputs; // -1: any number
  megac::plan::Attrs attrs;
};

/// The signature of `op`; minInputs is -1 for an opcode this runtime does not know.
OpSignature signatureOf(megac::plan::Opcode op);

/// How errors name an attrs member: its table name, or "no attrs".
std::string attrsName(megac::plan::Attrs a);

} // namespace megac::runtime
