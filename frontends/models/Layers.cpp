// Transformer building blocks shared by the zoo's models.
#include "frontends/models/Layers.h"

#include <limits>
#include <string>

namespace megac::models {

using dsl::Init;
using dsl::Tensor;

Tensor linearLayer(dsl::GraphBuilder &b, std::string_view name, const Tensor &x, int64_t out,
                   bool bias, double stddev) {
  auto s = b.scope(name);
  Tensor w = b.parameter("weight", {out, x.dim(-1)}, x.dtype(), Init::normal(stddev));
  std::optional<Tensor> bv;
  if (bias)
    bv = b.parameter("bias", {out}, x.dtype(), Init::zeros());
  return b.linear(x, w, bv);
}

Tensor layerNormLayer(dsl::GraphBuilder &b, std::string_view name, const Tensor &x,
                      double epsilon) {
  auto s = b.scope(name);
  Tensor w = b.parameter("weight", {x.dim(-1)}, x.dtype(), Init::ones());
  Tensor bias = b.parameter("bias", {x.dim(-1)}, x.dtype(), Init::zeros());
  return b.layerNorm(x, w, bias, epsilon);
}

Tensor rmsNormLayer(dsl::GraphBuilder &b, std::string_view name, const Tensor &x, double epsilon) {
  auto s = b.scope(name);
  Tensor w = b.parameter("weight", {x.dim(-1)}, x.dtype(), Init::ones());
  return b.rmsNorm(x, w, epsilon);
}

Tensor attentionLayer(dsl::GraphBuilder &b, std::string_view name, const ModelConfig &c,
                      const Tensor &x, const Tensor &kv, const AttentionBlock &options) {
  auto s = b.scope(name);
  InitStd std(c);
  int64_t batch = x.dim(0), seq = x.dim(1), kvSeq = kv.dim(1);
  auto heads = [&](const Tensor &t, int64_t len) {
    return b.reshape(t, {batch, len, c.heads, c.headDim()});
  };
  Tensor q = heads(linearLayer(b, "q", x, c.hidden, options.bias, std.base), seq);
  Tensor k = heads(linearLayer(b, "k", kv, c.hidden, options.bias, std.base), kvSeq);
  Tensor v = heads(linearLayer(b, "v", kv, c.hidden, options.bias, std.base), kvSeq);
  Tensor o = b.attention(q, k, v, {options.causal, options.mask, options.scale});
  o = b.reshape(o, {batch, seq, c.hidden});
  return linearLayer(b, "proj", o, c.hidden, options.bias, std.output);
}

Tensor mlpLayer(dsl::GraphBuilder &b, std::string_view name, const ModelConfig &c, const Tensor &x,
                Activation activation, bool bias) {
  auto s = b.scope(name);
  InitStd std(c);
  Tensor h = linearLayer(b, "fc", x, c.ffn, bias, std.base);
  switch (activation) {
  case Activation::gelu_erf:
    h = b.gelu(h, dsl::Gelu::erf);
    break;
  case Activation::gelu_tanh:
    h = b.gelu(h, dsl::Gelu::tanh);
    break;
  case Activation::relu:
    h = b.relu(h);
    break;
  }
  return linearLayer(b, "proj", h, c.hidden, bias, std.output);
}

KvCache kvCacheInputs(dsl::GraphBuilder &b, const ModelConfig &c, Tensor &ids) {
  KvCache cache;
  cache.tokens = c.kvDecode ? 1 : c.seq;
  ids = b.input("input_ids", {c.batch, cache.tokens}, dsl::DType::i64);
  if (c.kvDecode) {
    cache.positions = b.input("position_ids", {c.batch, 1}, dsl::DType::i64);
    cache.mask = b.input("cache_mask", {c.batch, 1, 1, c.seq + 1}, c.dtype);
  } else if (c.padding) {
    dsl::Shape rows{c.batch, c.seq};
    Tensor keep = b.input("attention_mask", rows, dsl::DType::i64);
    Tensor padded = b.compare(dsl::Compare::eq, keep, b.splat(0.0, rows, dsl::DType::i64));
    Tensor add = b.where(padded, b.splat(-std::numeric_limits<double>::infinity(), rows, c.dtype),
                         b.splat(0.0, rows, c.dtype));
    cache.padding = b.reshape(add, {c.batch, 1, 1, c.seq});
  }
  return cache;
}

Tensor cachedAttention(dsl::GraphBuilder &b, const ModelConfig &c, const KvCache &cache,
                       int64_t layer, const Tensor &q, const Tensor &k, const Tensor &v,
                       std::optional<double> scale) {
  std::string suffix = "_" + std::to_string(layer);
  if (c.kvOutputs || c.kvDecode) {
    b.output("present_key" + suffix, k);
    b.output("present_value" + suffix, v);
  }
  if (!c.kvDecode)
    return b.attention(q, k, v, {.causal = true, .mask = cache.padding, .scale = scale});
  Tensor pastK = b.input("past_key" + suffix, {c.batch, c.seq, k.dim(2), k.dim(3)}, k.dtype());
  Tensor pastV = b.input("past_value" + suffix, {c.batch, c.seq, v.dim(2), v.dim(3)}, v.dtype());
  return b.attention(q, b.concat({pastK, k}, 1), b.concat({pastV, v}, 1),
                     {.causal = false, .mask = cache.mask, .scale = scale});
}

} // namespace megac::models
