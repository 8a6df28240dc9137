// Model shapes the planner's unit tests share.
#pragma once

#include "planner/CostModel.h"
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

/// A Llama (RMSNorm, rotary, SwiGLU, grouped-query attention, untied head) with its exact
/// parameter count (blocks, two vocabulary tables, the final norm).
inline TransformerShape llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kvHeads,
                              int64_t ffn, int64_t seq, int64_t vocab) {
  TransformerShape s;
  s.name = "llama";
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.kvHeads = kvHeads;
  s.ffn = ffn;
  s.vocab = vocab;
  s.seq = seq;
  s.gatedMlp = true;
  s.rope = true;
  s.biases = false;
  s.tiedEmbedding = false;
  s.parameters = int64_t(double(layers) * layerParameters(s)) + 2 * vocab * hidden + hidden;
  return s;
}

/// Llama 3.1 8B and 70B (Meta's config.json) at sequence `seq`.
inline TransformerShape llama31_8b(int64_t seq) {
  return llama(32, 4096, 32, 8, 14336, seq, 128256);
}
inline TransformerShape llama31_70b(int64_t seq) {
  return llama(80, 8192, 64, 8, 28672, seq, 128256);
}

} // namespace megac::planner::testing
