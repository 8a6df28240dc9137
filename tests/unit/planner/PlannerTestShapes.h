// Model shapes the planner's unit tests share.
#pragma once

#include "planner/Planner.h"

namespace megac::planner::testing {

/// A GPT with ffn = 4·hidden and no grouped-query attention.
inline TransformerShape gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t seq,
                            int64_t vocab) {
  TransformerShape s;
  s.name = "gpt";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kvHeads = heads;
  s.ffn = 4 * hidden;
  s.vocab = vocab;
  s.seq = seq;
  return s;
}

} // namespace megac::planner::testing
