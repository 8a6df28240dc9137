// Llama (Llama 2/3-style): decoder-only, pre-RMSNorm, rotary position embeddings on q and k,
// grouped-query attention, SwiGLU MLP, no biases, final RMSNorm, untied head by default.
// Parameter names are transformers' LlamaForCausalLM names without the "model." prefix.
#include "frontends/models/Layers.h"

#include <cmath>
#include <string>
#include <vector>

namespace megac::models {

using dsl::Tensor;

namespace {

/// cos and sin of the rotary angles, [1, seq, 1, head_dim], broadcast over batch and heads.
struct RotaryTables {
  Tensor cos, sin;
};

/// transformers' LlamaRotaryEmbedding: angle(p, j) = p * theta^(-2i/d) with i = j mod d/2 (the
/// two halves of a head repeat the d/2 frequencies, the pairing rotate_half expects). Computed in
/// double and rounded once to the model's dtype.
RotaryTables rotaryTables(dsl::GraphBuilder &b, const ModelConfig &c) {
  int64_t d = c.headDim(), half = d / 2;
  std::vector<double> cos(c.seq * d), sin(c.seq * d);
  for (int64_t p = 0; p < c.seq; ++p)
    for (int64_t j = 0; j < d; ++j) {
      double inverseFrequency = std::pow(c.ropeTheta, -double(2 * (j % half)) / double(d));
      double angle = double(p) * inverseFrequency;
      cos[p * d + j] = std::cos(angle);
      sin[p * d + j] = std::sin(angle);
    }
  auto scope = b.scope("rotary");
  return {b.constant(cos, {1, c.seq, 1, d}, c.dtype), b.constant(sin, {1, c.seq, 1, d}, c.dtype)};
}

/// x * cos + rotate_half(x) * sin with rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2]);
/// `x [b, s, heads, d]`.
Tensor applyRotary(dsl::GraphBuilder &b, const Tensor &x, const RotaryTables &rotary) {
  int64_t n = x.dim(0), s = x.dim(1), h = x.dim(2), d = x.dim(3);
  Tensor first = b.slice(x, {0, 0, 0, 0}, {n, s, h, d / 2});
  Tensor second = b.slice(x, {0, 0, 0, d / 2}, {n, s, h, d});
  Tensor rotated = b.concat({-second, first}, 3);
  return x * rotary.cos + rotated * rotary.sin;
}

/// Causal self-attention with kv_heads key/value heads, each shared by heads/kv_heads query heads
/// (mega.attention's grouped-query form: query head i reads key/value head i / (heads/kv_heads),
/// as transformers' repeat_kv does). `x [b, s, hidden]` -> `[b, s, hidden]`.
Tensor selfAttention(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x,
                     const RotaryTables &rotary) {
  auto scope = b.scope("self_attn");
  InitStd std(c);
  int64_t batch = x.dim(0), seq = x.dim(1), dh = c.headDim();
  auto heads = [&](const Tensor &t, int64_t n) { return b.reshape(t, {batch, seq, n, dh}); };
  Tensor q = heads(linearLayer(b, "q_proj", x, c.heads * dh, false, std.base), c.heads);
  Tensor k = heads(linearLayer(b, "k_proj", x, c.kvHeads * dh, false, std.base), c.kvHeads);
  Tensor v = heads(linearLayer(b, "v_proj", x, c.kvHeads * dh, false, std.base), c.kvHeads);
  q = applyRotary(b, q, rotary);
  k = applyRotary(b, k, rotary);
  Tensor o = b.attention(q, k, v, {.causal = true, .mask = {}, .scale = {}});
  o = b.reshape(o, {batch, seq, c.heads * dh});
  return linearLayer(b, "o_proj", o, c.hidden, false, std.output);
}

/// SwiGLU: down(silu(gate(x)) * up(x)) with silu(g) = g * sigmoid(g).
Tensor swigluMlp(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x) {
  auto scope = b.scope("mlp");
  InitStd std(c);
  Tensor gate = linearLayer(b, "gate_proj", x, c.ffn, false, std.base);
  Tensor up = linearLayer(b, "up_proj", x, c.ffn, false, std.base);
  Tensor h = gate * b.sigmoid(gate) * up;
  return linearLayer(b, "down_proj", h, c.hidden, false, std.output);
}

} // namespace

void buildLlamaDecoder(dsl::GraphBuilder &b, const ModelConfig &c, const FeedForward &feedForward) {
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  Tensor embed =
      b.parameter("embed_tokens.weight", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  RotaryTables rotary = rotaryTables(b, c);
  Tensor x = b.embedding(embed, ids);
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("layers." + std::to_string(l));
    Tensor a = rmsNormLayer(b, "input_layernorm", x, c.normEps);
    x = x + selfAttention(b, c, a, rotary);
    Tensor m = rmsNormLayer(b, "post_attention_layernorm", x, c.normEps);
    x = x + feedForward(b, c, m);
  }
  x = rmsNormLayer(b, "norm", x, c.normEps);
  Tensor head = c.tied ? embed
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(std.base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

// input_ids [b, s] -> logits [b, s, vocab]. Parameters, with d = hidden/heads and g = kv_heads:
// l (2 h^2 + 2 h g d + 3 h ffn + 2 h) + V h (embedding) + h (final norm) + V h (untied head).
void buildLlama(dsl::GraphBuilder &b, const ModelConfig &c) { buildLlamaDecoder(b, c, swigluMlp); }

} // namespace megac::models
