// BERT: post-LN encoder with bidirectional attention, a padding mask and the MLM head.
// No segment (token type) embeddings and no next-sentence head: megac trains BERT with the
// masked-LM objective only.
#include "frontends/models/Layers.h"

namespace megac::models {

using dsl::Tensor;

// input_ids [b, s], attention_mask [b, s] (1 = token, 0 = padding) -> logits [b, s, vocab].
void buildBert(dsl::GraphBuilder &b, const ModelConfig &c) {
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  Tensor keep = b.input("attention_mask", {c.batch, c.seq}, dsl::DType::i64);
  // Additive mask: 0 where attended, -10000 on padding (as the original BERT), [b, 1, 1, s].
  Tensor mask = (1.0 - b.cast(keep, c.dtype)) * -10000.0;
  mask = b.reshape(mask, {c.batch, 1, 1, c.seq});

  Tensor wte = b.parameter("wte", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  Tensor wpe = b.parameter("wpe", {c.seq, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  Tensor x = layerNormLayer(b, "ln_emb", b.embedding(wte, ids) + wpe, 1e-12);
  Activation act = c.gelu == dsl::Gelu::tanh ? Activation::gelu_tanh : Activation::gelu_erf;
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("layer" + std::to_string(l));
    x = layerNormLayer(
        b, "ln1",
        x + attentionLayer(b, "attn", c, x, x,
                           {.bias = true, .causal = false, .mask = mask, .scale = {}}),
        1e-12);
    x = layerNormLayer(b, "ln2", x + mlpLayer(b, "mlp", c, x, act, /*bias=*/true), 1e-12);
  }
  // MLM head: transform, then the (tied) decoder with its own bias.
  auto s = b.scope("mlm");
  Tensor h = linearLayer(b, "transform", x, c.hidden, /*bias=*/true, std.base);
  h = layerNormLayer(b, "ln", b.gelu(h, c.gelu), 1e-12);
  Tensor decoder = c.tied ? wte
                          : b.parameter("decoder.weight", {c.vocab, c.hidden}, c.dtype,
                                        dsl::Init::normal(std.base));
  Tensor bias = b.parameter("decoder.bias", {c.vocab}, c.dtype, dsl::Init::zeros());
  b.output("logits", b.linear(h, decoder, bias));
}

} // namespace megac::models
