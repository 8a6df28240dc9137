// Transformer building blocks shared by the zoo's models, written in the graph DSL.
#pragma once

#include "frontends/dsl/GraphBuilder.h"
#include "frontends/models/ModelConfig.h"

#include <cmath>
#include <functional>
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
