// Llama (Llama 2/3-style): decoder-only, pre-RMSNorm, rotary position embeddings on q and k,
// grouped-query attention, SwiGLU MLP, no biases, final RMSNorm, untied head by default; and
// the variants transformers' configs select (qkv/output/MLP biases, head_dim, Llama 3.1's rotary
// scaling), and Nemotron's decoder (LayerNorm1P, squared-ReLU MLP, partial rotary).
// Parameter names are transformers' LlamaForCausalLM (NemotronForCausalLM) names without the
// "model." prefix.
#include "frontends/models/Layers.h"

#include <cmath>
#include <string>
#include <vector>

namespace megac::models {

using dsl::Tensor;

namespace {

/// cos and sin of the rotary angles, [1, seq, 1, rotary dims], broadcast over batch and heads.
struct RotaryTables {
  Tensor cos, sin;
};

/// The rotary frequency of pair i of d rotated dims: theta^(-2i/d), rescaled as Llama 3.1's
/// rope_scaling says (transformers' _compute_llama3_parameters): wavelengths longer than
/// original/low are slowed by factor, shorter than original/high kept, and those between blended.
double inverseFrequency(const ModelConfig &c, int64_t i, int64_t d) {
  double f = std::pow(c.ropeTheta, -double(2 * i) / double(d));
  const ModelConfig::Llama3Rope &r = c.ropeLlama3;
  if (r.factor <= 0)
    return f;
  double original = double(r.originalMaxPositions);
  double wavelength = 2 * M_PI / f;
  if (wavelength > original / r.lowFreqFactor)
    return f / r.factor;
  if (wavelength < original / r.highFreqFactor)
    return f;
  double smooth = (original / wavelength - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
  return (1 - smooth) * f / r.factor + smooth * f;
}

/// transformers' LlamaRotaryEmbedding: angle(p, j) = p * theta^(-2i/d) with i = j mod d/2 (the
/// two halves of the rotated dims repeat the d/2 frequencies, the pairing rotate_half expects);
/// d is the rotated part of a head (all of it but for Nemotron's partial rotary). Computed in
/// double and rounded once to the model's dtype. In a decode step (Layers.h KvCache) the rows of
/// positions 0..seq-1 are gathered at the token's position_ids.
RotaryTables rotaryTables(dsl::GraphBuilder &b, const ModelConfig &c, const KvCache &cache) {
  int64_t d = c.rotaryDim(), half = d / 2;
  std::vector<double> cos(c.seq * d), sin(c.seq * d);
  for (int64_t p = 0; p < c.seq; ++p)
    for (int64_t j = 0; j < d; ++j) {
      double angle = double(p) * inverseFrequency(c, j % half, d);
      cos[p * d + j] = std::cos(angle);
      sin[p * d + j] = std::sin(angle);
    }
  auto scope = b.scope("rotary");
  if (!cache.positions)
    return {b.constant(cos, {1, c.seq, 1, d}, c.dtype), b.constant(sin, {1, c.seq, 1, d}, c.dtype)};
  auto at = [&](const std::vector<double> &table) {
    Tensor rows = b.embedding(b.constant(table, {c.seq, d}, c.dtype), *cache.positions);
    return b.reshape(rows, {c.batch, 1, 1, d});
  };
  return {at(cos), at(sin)};
}

/// x * cos + rotate_half(x) * sin with rotate_half(x) = concat(-x[..., r/2:], x[..., :r/2]) on
/// the first r = rotary dims of each head; the rest pass unrotated (Nemotron's partial rotary).
/// `x [b, s, heads, d]`.
Tensor applyRotary(dsl::GraphBuilder &b, const Tensor &x, const RotaryTables &rotary) {
  int64_t n = x.dim(0), s = x.dim(1), h = x.dim(2), d = x.dim(3), r = rotary.cos.dim(3);
  Tensor rotate = r == d ? x : b.slice(x, {0, 0, 0, 0}, {n, s, h, r});
  Tensor first = b.slice(rotate, {0, 0, 0, 0}, {n, s, h, r / 2});
  Tensor second = b.slice(rotate, {0, 0, 0, r / 2}, {n, s, h, r});
  Tensor rotated = b.concat({-second, first}, 3);
  Tensor out = rotate * rotary.cos + rotated * rotary.sin;
  return r == d ? out : b.concat({out, b.slice(x, {0, 0, 0, r}, {n, s, h, d})}, 3);
}

/// Causal self-attention with kv_heads key/value heads, each shared by heads/kv_heads query heads
/// (mega.attention's grouped-query form: query head i reads key/value head i / (heads/kv_heads),
/// as transformers' repeat_kv does). `x [b, s, hidden]` -> `[b, s, hidden]`.
Tensor selfAttention(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x,
                     const RotaryTables &rotary, const KvCache &cache, int64_t layer) {
  auto scope = b.scope("self_attn");
  InitStd std(c);
  int64_t batch = x.dim(0), seq = x.dim(1), dh = c.headDim();
  auto heads = [&](const Tensor &t, int64_t n) { return b.reshape(t, {batch, seq, n, dh}); };
  bool bias = c.qkvBias;
  Tensor q = heads(linearLayer(b, "q_proj", x, c.heads * dh, bias, std.base), c.heads);
  Tensor k = heads(linearLayer(b, "k_proj", x, c.kvHeads * dh, bias, std.base), c.kvHeads);
  Tensor v = heads(linearLayer(b, "v_proj", x, c.kvHeads * dh, bias, std.base), c.kvHeads);
  q = applyRotary(b, q, rotary);
  k = applyRotary(b, k, rotary);
  Tensor o = cachedAttention(b, c, cache, layer, q, k, v, std::nullopt);
  o = b.reshape(o, {batch, seq, c.heads * dh});
  return linearLayer(b, "o_proj", o, c.hidden, c.oBias, std.output);
}

/// SwiGLU: down(silu(gate(x)) * up(x)) with silu(g) = g * sigmoid(g).
Tensor swigluMlp(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x) {
  auto scope = b.scope("mlp");
  InitStd std(c);
  Tensor gate = linearLayer(b, "gate_proj", x, c.ffn, c.mlpBias, std.base);
  Tensor up = linearLayer(b, "up_proj", x, c.ffn, c.mlpBias, std.base);
  Tensor h = gate * b.sigmoid(gate) * up;
  return linearLayer(b, "down_proj", h, c.hidden, c.mlpBias, std.output);
}

/// Nemotron's MLP: down(relu(up(x))^2), no gate (transformers' NemotronMLP, hidden_act relu2).
Tensor squaredReluMlp(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x) {
  auto scope = b.scope("mlp");
  InitStd std(c);
  Tensor r = b.relu(linearLayer(b, "up_proj", x, c.ffn, c.mlpBias, std.base));
  return linearLayer(b, "down_proj", r * r, c.hidden, c.mlpBias, std.output);
}

/// The decoder's norm: Nemotron's LayerNorm1P (LayerNorm with weight + 1, its weight initialised
/// to zeros so the scale starts at 1, as Megatron's layernorm_zero_centered_gamma), else RMSNorm.
Tensor decoderNorm(dsl::GraphBuilder &b, const ModelConfig &c, std::string_view name,
                   const Tensor &x) {
  if (c.arch != Arch::nemotron)
    return rmsNormLayer(b, name, x, c.normEps);
  auto s = b.scope(name);
  int64_t h = x.dim(-1);
  Tensor w = b.parameter("weight", {h}, x.dtype(), dsl::Init::zeros());
  Tensor bias = b.parameter("bias", {h}, x.dtype(), dsl::Init::zeros());
  return b.layerNorm(x, w + b.splat(1.0, {h}, x.dtype()), bias, c.normEps);
}

} // namespace

void buildLlamaDecoder(dsl::GraphBuilder &b, const ModelConfig &c, const FeedForward &feedForward) {
  InitStd std(c);
  Tensor ids;
  KvCache cache = kvCacheInputs(b, c, ids);
  Tensor embed =
      b.parameter("embed_tokens.weight", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  RotaryTables rotary = rotaryTables(b, c, cache);
  Tensor x = b.embedding(embed, ids);
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("layers." + std::to_string(l));
    Tensor a = decoderNorm(b, c, "input_layernorm", x);
    x = x + selfAttention(b, c, a, rotary, cache, l);
    Tensor m = decoderNorm(b, c, "post_attention_layernorm", x);
    x = x + feedForward(b, c, m);
  }
  x = decoderNorm(b, c, "norm", x);
  Tensor head = c.tied ? embed
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(std.base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

// input_ids [b, s] -> logits [b, s, vocab]. Parameters, with d = hidden/heads and g = kv_heads:
// l (2 h^2 + 2 h g d + 3 h ffn + 2 h) + V h (embedding) + h (final norm) + V h (untied head).
void buildLlama(dsl::GraphBuilder &b, const ModelConfig &c) { buildLlamaDecoder(b, c, swigluMlp); }

// input_ids [b, s] -> logits [b, s, vocab]. Parameters, with a = heads, d = head_dim, g =
// kv_heads: l (2 h a d + 2 h g d + 2 h ffn + 4 h) + V h + 2 h (final norm) + V h (untied head).
void buildNemotron(dsl::GraphBuilder &b, const ModelConfig &c) {
  buildLlamaDecoder(b, c, squaredReluMlp);
}

} // namespace megac::models
