// GPT (GPT-2 / Megatron GPT): decoder-only, learned positions, pre-LN, GELU MLP, tied head; and
// the same model under transformers' GPT-2 names (hf_gpt2=1, `--model hf:` of model_type gpt2).
#include "frontends/models/Layers.h"

namespace megac::models {

using dsl::Tensor;

namespace {

/// GPT-2 as transformers names it (GPT2LMHeadModel's state_dict): the decoder under
/// `transformer.`, q/k/v as three nn.Linear-layout parameters `attn.c_attn.{q,k,v}` (the
/// file's fused Conv1D c_attn [in, 3 out] is split and transposed by driver/HfWeights), the
/// other Conv1D projections held as nn.Linear [out, in] too. The position table has
/// `positions` rows (n_positions) of which the first seq are used.
void buildGpt2Hf(dsl::GraphBuilder &b, const ModelConfig &c) {
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  int64_t rows = c.positions > 0 ? c.positions : c.seq;
  Tensor x, wte;
  {
    auto t = b.scope("transformer");
    wte = b.parameter("wte.weight", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
    Tensor wpe = b.parameter("wpe.weight", {rows, c.hidden}, c.dtype, dsl::Init::normal(std.base));
    if (rows != c.seq)
      wpe = b.slice(wpe, {0, 0}, {c.seq, c.hidden});
    x = b.embedding(wte, ids) + wpe;
    std::optional<double> scale;
    if (!c.scaleAttn)
      scale = 1.0;
    for (int64_t l = 0; l < c.layers; ++l) {
      auto s = b.scope("h." + std::to_string(l));
      Tensor a = layerNormLayer(b, "ln_1", x, c.normEps);
      {
        auto attn = b.scope("attn");
        auto heads = [&](const Tensor &t) {
          return b.reshape(t, {c.batch, c.seq, c.heads, c.hidden / c.heads});
        };
        Tensor q, k, v;
        {
          auto fused = b.scope("c_attn");
          q = heads(linearLayer(b, "q", a, c.hidden, true, std.base));
          k = heads(linearLayer(b, "k", a, c.hidden, true, std.base));
          v = heads(linearLayer(b, "v", a, c.hidden, true, std.base));
        }
        Tensor o = b.attention(q, k, v, {true, {}, scale});
        o = b.reshape(o, {c.batch, c.seq, c.hidden});
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
  Tensor head = c.tied ? wte
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(std.base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

} // namespace

// input_ids [b, s] -> logits [b, s, vocab]. With ffn = 4h and a tied head the parameter count
// is 12 l h^2 + 13 l h + (V + s) h + 2 h (SC21's formula plus the final LayerNorm).
void buildGpt(dsl::GraphBuilder &b, const ModelConfig &c) {
  if (c.hfGpt2)
    return buildGpt2Hf(b, c);
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  int64_t rows = c.positions > 0 ? c.positions : c.seq;
  Tensor wte = b.parameter("wte", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  Tensor wpe = b.parameter("wpe", {rows, c.hidden}, c.dtype, dsl::Init::normal(std.base));
  // Positions 0..seq-1: the table's first seq rows, added to every sequence of the batch.
  if (rows != c.seq)
    wpe = b.slice(wpe, {0, 0}, {c.seq, c.hidden});
  Tensor x = b.embedding(wte, ids) + wpe;
  Activation act = c.gelu == dsl::Gelu::tanh ? Activation::gelu_tanh : Activation::gelu_erf;
  std::optional<double> scale;
  if (!c.scaleAttn)
    scale = 1.0;
  for (int64_t l = 0; l < c.layers; ++l) {
    auto s = b.scope("h" + std::to_string(l));
    Tensor a = layerNormLayer(b, "ln1", x, c.normEps);
    x = x + attentionLayer(b, "attn", c, a, a,
                           {.bias = true, .causal = true, .mask = {}, .scale = scale});
    Tensor m = layerNormLayer(b, "ln2", x, c.normEps);
    x = x + mlpLayer(b, "mlp", c, m, act, /*bias=*/true);
  }
  x = layerNormLayer(b, "ln_f", x, c.normEps);
  Tensor head = c.tied ? wte
                       : b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype,
                                     dsl::Init::normal(std.base));
  b.output("logits", b.linear(x, head, std::nullopt));
}

} // namespace megac::models
