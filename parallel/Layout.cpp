// Names of the precisions and recompute policies, and a layout's description (Layout.h).
#include "parallel/Layout.h"

namespace megac {

const char *precisionName(Precision precision) {
  switch (precision) {
  case Precision::fp32:
    return "fp32";
  case Precision::fp64:
    return "fp64";
  case Precision::bf16:
    return "bf16";
  case Precision::fp16:
    return "fp16";
  }
  return "fp32";
}

std::optional<Precision> parsePrecision(std::string_view name) {
  for (Precision p : {Precision::fp32, Precision::fp64, Precision::bf16, Precision::fp16})
    if (name == precisionName(p))
      return p;
  return std::nullopt;
}

const char *recomputeName(Recompute recompute) {
  switch (recompute) {
  case Recompute::none:
    return "none";
  case Recompute::selective:
    return "selective";
  case Recompute::full:
    return "full";
  }
  return "none";
}

std::optional<Recompute> parseRecompute(std::string_view name) {
  for (Recompute r : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == recomputeName(r))
      return r;
  return std::nullopt;
}

std::string Layout::describe() const {
  return "tp " + std::to_string(tp) + ", pp " + std::to_string(pp) + ", dp " + std::to_string(dp) +
         (ep > 1 ? ", ep " + std::to_string(ep) : "") +
         (cp > 1 ? ", cp " + std::to_string(cp) : "") + ", vpp " + std::to_string(vpp) + ", zero " +
         std::to_string(zero) +
         (zero == 3 && !reshardAfterForward ? " (no reshard after forward)" : "") +
         (sequenceParallel ? ", sequence parallel" : "");
}

} // namespace megac
