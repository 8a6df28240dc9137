// GPT (GPT-2 / Megatron GPT): decoder-only, learned positions, pre-LN, GELU MLP, tied head.
#include "frontends/models/Layers.h"

namespace megac::models {

using dsl::Tensor;

// input_ids [b, s] -> logits [b, s, vocab]. With ffn = 4h and a tied head the parameter count
// is 12 l h^2 + 13 l h + (V + s) h + 2 h (SC21's formula plus the final LayerNorm).
void buildGpt(dsl::GraphBuilder &b, const ModelConfig &c) {
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  Tensor wte = b.parameter("wte", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  Tensor wpe = b.parameter("wpe", {c.seq, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  // Positions 0..seq-1 are the whole position table, added to every sequence of the batch.
  Tensor x = b.embedding(wte, ids) + wpe;
  Activation act = c.gelu == dsl::Gelu::tanh ? Activation::gelu_tanh : Activation::gelu_erf;
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("h" + std::to_string(l));
    Tensor a = layerNormLayer(b, "ln1", x);
    x = x +
        attentionLayer(b, "attn", c, a, a, {.bias = true, .causal = true, .mask = {}, .scale = {}});
    Tensor m = layerNormLayer(b, "ln2", x);
    x = x + mlpLayer(b, "mlp", c, m, act, /*bias=*/true);
  }
  x = layerNormLayer(b, "ln_f", x);
  Tensor head = c.tied ? wte
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(std.base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

} // namespace megac::models
