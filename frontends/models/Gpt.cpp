// GPT (GPT-2 / Megatron GPT): decoder-only, learned positions, pre-LN, GELU MLP, tied head; and
// the same model under transformers' GPT-2 names (hf_gpt2=1, `--model hf:` of model_type gpt2).
#include "frontends/models/Layers.h"

namespace megac::models {

using dsl::Tensor;

namespace {

/// The token table `wteName` [vocab, h] gathered by input_ids [b, s] plus the learned positions
/// `wpeName` [positions (else seq), h], whose first seq rows are added to every sequence
/// (positions 0..seq-1); in a decode step (kvDecode: Layers.h KvCache) one token, plus the row
/// of its position_ids. `wte` is set to the token table (a tied head reads it).
Tensor tokensAndPositions(dsl::GraphBuilder &b, const ModelConfig &c, const KvCache &cache,
                          const Tensor &ids, std::string_view wteName, std::string_view wpeName,
                          Tensor &wte) {
  InitStd std(c);
  int64_t rows = c.positions > 0 ? c.positions : c.seq;
  wte = b.parameter(wteName, {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  Tensor wpe = b.parameter(wpeName, {rows, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  if (cache.positions)
    return b.embedding(wte, ids) + b.embedding(wpe, *cache.positions);
  if (rows != c.seq)
    wpe = b.slice(wpe, {0, 0}, {c.seq, c.hidden});
  return b.embedding(wte, ids) + wpe;
}

/// The attention's score scale: 1 without GPT-2's scale_attn_weights, else 1/sqrt(head_dim).
std::optional<double> attentionScale(const ModelConfig &c) {
  return c.scaleAttn ? std::nullopt : std::optional<double>(1.0);
}

/// logits [b, s, vocab] of the final hidden `x`: the head is the token table `wte` when tied,
/// else lm_head.weight [vocab, h].
void logitsOutput(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x, const Tensor &wte) {
  Tensor head = c.tied ? wte
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(InitStd(c).base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

/// GPT-2 as transformers names it (GPT2LMHeadModel's state_dict): the decoder under
/// `transformer.`, q/k/v as three nn.Linear-layout parameters `attn.c_attn.{q,k,v}` (the
/// file's fused Conv1D c_attn [in, 3 out] is split and transposed by driver/HfWeights), the
/// other Conv1D projections held as nn.Linear [out, in] too. The position table has
/// `positions` rows (n_positions) of which the first seq are used. With megac generate's KV
/// cache (kvOutputs, kvDecode: Layers.h KvCache) the forward outputs each layer's keys and
/// values, or the function is one decode step.
void buildGpt2Hf(dsl::GraphBuilder &b, const ModelConfig &c) {
  InitStd std(c);
  Tensor ids, x, wte;
  KvCache cache = kvCacheInputs(b, c, ids);
  int64_t seq = cache.tokens;
  {
    auto t = b.scope("transformer");
    x = tokensAndPositions(b, c, cache, ids, "wte.weight", "wpe.weight", wte);
    for (int64_t l = 0; l < c.layers; ++l) {
      auto s = b.scope("h." + std::to_string(l));
      Tensor a = layerNormLayer(b, "ln_1", x, c.normEps);
      {
        auto attn = b.scope("attn");
        auto heads = [&](const Tensor &t) {
          return b.reshape(t, {c.batch, seq, c.heads, c.hidden / c.heads});
        };
        Tensor q, k, v;
        {
          auto fused = b.scope("c_attn");
          q = heads(linearLayer(b, "q", a, c.hidden, true, std.base));
          k = heads(linearLayer(b, "k", a, c.hidden, true, std.base));
          v = heads(linearLayer(b, "v", a, c.hidden, true, std.base));
        }
        Tensor o = cachedAttention(b, c, cache, l, q, k, v, attentionScale(c));
        o = b.reshape(o, {c.batch, seq, c.hidden});
        x = x + linearLayer(b, "c_proj", o, c.hidden, true, std.output);
      }
      Tensor m = layerNormLayer(b, "ln_2", x, c.normEps);
      {
        auto mlp = b.scope("mlp");
        Tensor h = linearLayer(b, "c_fc", m, c.ffn, true, std.base);
        h = b.gelu(h, c.gelu);
        x = x + linearLayer(b, "c_proj", h, c.hidden, true, std.output);
      }
    }
    x = layerNormLayer(b, "ln_f", x, c.normEps);
  }
  logitsOutput(b, c, x, wte);
}

} // namespace

// input_ids [b, s] -> logits [b, s, vocab]. With ffn = 4h and a tied head the parameter count
// is 12 l h^2 + 13 l h + (V + s) h + 2 h (SC21's formula plus the final LayerNorm).
void buildGpt(dsl::GraphBuilder &b, const ModelConfig &c) {
  if (c.hfGpt2)
    return buildGpt2Hf(b, c);
  Tensor ids, wte;
  KvCache cache = kvCacheInputs(b, c, ids);
  Tensor x = tokensAndPositions(b, c, cache, ids, "wte", "wpe", wte);
  Activation act = c.gelu == dsl::Gelu::tanh ? Activation::gelu_tanh : Activation::gelu_erf;
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("h" + std::to_string(l));
    Tensor a = layerNormLayer(b, "ln1", x, c.normEps);
    x = x + attentionLayer(
                b, "attn", c, a, a,
                {.bias = true, .causal = true, .mask = cache.padding, .scale = attentionScale(c)});
    Tensor m = layerNormLayer(b, "ln2", x, c.normEps);
    x = x + mlpLayer(b, "mlp", c, m, act, /*bias=*/true);
  }
  x = layerNormLayer(b, "ln_f", x, c.normEps);
  logitsOutput(b, c, x, wte);
}

} // namespace megac::models
