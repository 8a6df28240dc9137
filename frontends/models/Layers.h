// Transformer building blocks shared by the zoo's models, written in the graph DSL.
#pragma once

#include "frontends/dsl/GraphBuilder.h"
#include "frontends/models/ModelConfig.h"

#include <cmath>
#include <functional>
#include <optional>
#include <string_view>

namespace megac::models {

/// Megatron's init: normal(0, 0.02), and 0.02 / sqrt(2 * layers) for the projections that write
/// into the residual stream (attention output, MLP output).
struct InitStd {
  double base = 0.02;
  double output = 0.02;
  explicit InitStd(const ModelConfig &c)
      : output(0.02 / std::sqrt(2.0 * static_cast<double>(c.totalLayers()))) {}
};

/// `name.weight [out, in]` (normal(0, std)) and, if `bias`, `name.bias [out]` (zeros).
dsl::Tensor linearLayer(dsl::GraphBuilder &b, std::string_view name, const dsl::Tensor &x,
                        int64_t out, bool bias, double stddev);
/// `name.weight` (ones) and `name.bias` (zeros) over the last dim.
dsl::Tensor layerNormLayer(dsl::GraphBuilder &b, std::string_view name, const dsl::Tensor &x,
                           double epsilon = 1e-5);
/// `name.weight` (ones) over the last dim.
dsl::Tensor rmsNormLayer(dsl::GraphBuilder &b, std::string_view name, const dsl::Tensor &x,
                         double epsilon = 1e-6);

struct AttentionBlock {
  bool bias = true; // biases on q, k, v and the output projection
  bool causal = false;
  std::optional<dsl::Tensor> mask; // additive, broadcastable to [b, heads, s, t]
  std::optional<double> scale;     // default 1/sqrt(head_dim)
};
/// Multi-head attention in scope `name`: q from `x`, k and v from `kv` (self-attention when
/// they are the same tensor), separate q/k/v projections so each splits by heads, and the
/// output projection. `x [b, s, hidden]` -> `[b, s, hidden]`.
dsl::Tensor attentionLayer(dsl::GraphBuilder &b, std::string_view name, const ModelConfig &c,
                           const dsl::Tensor &x, const dsl::Tensor &kv,
                           const AttentionBlock &options);

/// megac generate's KV cache in a decoder builder (ModelConfig::kvOutputs, kvDecode). A decode
/// step (kvDecode) takes input_ids [batch, 1] (the token at position p) and these inputs:
///   position_ids [batch, 1] (i64): p, for the learned or rotary positions;
///   cache_mask [batch, 1, 1, seq + 1]: additive over the keys attended, slots 0..seq-1 of the
///     cache and then the token's own key: 0 for slots 0..p-1 and for its own key, a large
///     negative (-1e30) for the slots p..seq-1 not yet written;
///   past_key_L, past_value_L [batch, seq, kv_heads, head_dim] per layer L: slot j holds
///     position j's key (after rotary) and value;
/// and outputs logits [batch, 1, vocab] and present_key_L, present_value_L [batch, 1, kv_heads,
/// head_dim], the token's key and value, which the caller writes into slot p.
struct KvCache {
  std::optional<dsl::Tensor> positions; // position_ids (decode step only)
  std::optional<dsl::Tensor> mask;      // cache_mask (decode step only)
  /// With padding=1 (not in a decode step): the attention_mask input [batch, seq] (1 token, 0
  /// padding) as an additive key mask [batch, 1, 1, seq], 0 kept and -inf on padding, which
  /// every layer's causal attention adds (a query that sees only padding gives zeros).
  std::optional<dsl::Tensor> padding;
  /// The tokens a call of the function runs: 1 in a decode step, else seq.
  int64_t tokens = 0;
};
/// input_ids [batch, tokens] and, in a decode step, position_ids and cache_mask (in that order);
/// with padding=1 otherwise, attention_mask [batch, seq] after input_ids.
KvCache kvCacheInputs(dsl::GraphBuilder &b, const ModelConfig &c, dsl::Tensor &ids);
/// Layer `layer`'s attention over this call's `k`, `v` [batch, tokens, kv_heads, head_dim]
/// (`q` [batch, tokens, heads, head_dim]): causal over them in a forward; in a decode step
/// over the layer's past_key/past_value inputs followed by k and v, masked by cache_mask. k
/// and v are output as present_key/present_value when kvOutputs or kvDecode.
dsl::Tensor cachedAttention(dsl::GraphBuilder &b, const ModelConfig &c, const KvCache &cache,
                            int64_t layer, const dsl::Tensor &q, const dsl::Tensor &k,
                            const dsl::Tensor &v, std::optional<double> scale);

enum class Activation { gelu_erf, gelu_tanh, relu };
/// fc [ffn, hidden] -> activation -> proj [hidden, ffn], in scope `name`.
dsl::Tensor mlpLayer(dsl::GraphBuilder &b, std::string_view name, const ModelConfig &c,
                     const dsl::Tensor &x, Activation activation, bool bias);

/// The forward graphs of the zoo, built into `b` (inputs, parameters, outputs).
void buildGpt(dsl::GraphBuilder &b, const ModelConfig &c);
void buildBert(dsl::GraphBuilder &b, const ModelConfig &c);
void buildT5(dsl::GraphBuilder &b, const ModelConfig &c);
void buildLlama(dsl::GraphBuilder &b, const ModelConfig &c);
void buildMixtral(dsl::GraphBuilder &b, const ModelConfig &c);
void buildNemotron(dsl::GraphBuilder &b, const ModelConfig &c);

/// A decoder layer's feed-forward block on the normalized residual `x [b, s, hidden]`.
using FeedForward =
    std::function<dsl::Tensor(dsl::GraphBuilder &, const ModelConfig &, const dsl::Tensor &)>;
/// Llama's decoder (Llama.cpp): embedding, layers of pre-RMSNorm rotary grouped-query attention
/// and `feedForward` (in each layer's scope), the final norm and the head (transformers' names
/// without "model.").
void buildLlamaDecoder(dsl::GraphBuilder &b, const ModelConfig &c, const FeedForward &feedForward);

} // namespace megac::models
