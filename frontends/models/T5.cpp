// T5 (v1.0): encoder-decoder with RMSNorm, bias-free linears, ReLU MLP, unscaled attention and
// T5's bucketed relative position bias (one table per stack, shared by its layers).
#include "frontends/models/Layers.h"

#include <cmath>
#include <cstdlib>
#include <vector>

namespace megac::models {

using dsl::Tensor;

namespace {

constexpr int64_t kNumBuckets = 32;
constexpr int64_t kMaxDistance = 128;

/// T5's relative_position_bucket for relative position `rel` = key - query.
int64_t relativeBucket(int64_t rel, bool bidirectional) {
  int64_t buckets = kNumBuckets, bucket = 0;
  if (bidirectional) {
    buckets /= 2;
    if (rel > 0)
      bucket += buckets;
    rel = std::llabs(rel);
  } else {
    rel = rel < 0 ? -rel : 0;
  }
  int64_t maxExact = buckets / 2;
  if (rel < maxExact)
    return bucket + rel;
  // In float32, as the reference implementation computes it.
  float large = std::log(static_cast<float>(rel) / static_cast<float>(maxExact)) /
                std::log(static_cast<float>(kMaxDistance) / static_cast<float>(maxExact)) *
                static_cast<float>(buckets - maxExact);
  int64_t v = maxExact + static_cast<int64_t>(large);
  return bucket + std::min(v, buckets - 1);
}

/// The additive bias [1, heads, q, k] from the table `name` [buckets, heads].
Tensor relativePositionBias(dsl::GraphBuilder &b, const ModelConfig &c, std::string_view name,
                            int64_t q, int64_t k, bool bidirectional) {
  std::vector<int64_t> buckets;
  buckets.reserve(q * k);
  for (int64_t i = 0; i < q; ++i)
    for (int64_t j = 0; j < k; ++j)
      buckets.push_back(relativeBucket(j - i, bidirectional));
  Tensor table =
      b.parameter(name, {kNumBuckets, c.heads}, c.dtype, dsl::Init::normal(InitStd(c).base));
  Tensor index = b.constant(buckets, {q, k}, dsl::DType::i64);
  Tensor bias = b.transpose(b.gather(table, index, 0), {2, 0, 1}); // [heads, q, k]
  return b.reshape(bias, {1, c.heads, q, k});
}

} // namespace

// input_ids [b, seq], decoder_input_ids [b, dec_seq] -> logits [b, dec_seq, vocab].
void buildT5(dsl::GraphBuilder &b, const ModelConfig &c) {
  InitStd std(c);
  Tensor ids = b.input("input_ids", {c.batch, c.seq}, dsl::DType::i64);
  Tensor decIds = b.input("decoder_input_ids", {c.batch, c.decSeq}, dsl::DType::i64);
  Tensor shared = b.parameter("shared", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));

  Tensor enc;
  {
    auto s = b.scope("encoder");
    Tensor bias = relativePositionBias(b, c, "rel_bias", c.seq, c.seq, /*bidirectional=*/true);
    Tensor x = b.embedding(shared, ids);
    for (int64_t l = 0; l < c.encLayers; ++l) {
      auto ls = b.scope("block" + std::to_string(l));
      Tensor a = rmsNormLayer(b, "ln1", x);
      x = x + attentionLayer(b, "attn", c, a, a, {.bias = false, .mask = bias, .scale = 1.0});
      x = x + mlpLayer(b, "mlp", c, rmsNormLayer(b, "ln2", x), Activation::relu, false);
    }
    enc = rmsNormLayer(b, "ln_f", x);
  }

  auto s = b.scope("decoder");
  Tensor bias = relativePositionBias(b, c, "rel_bias", c.decSeq, c.decSeq, /*bidirectional=*/false);
  Tensor x = b.embedding(shared, decIds);
  for (int64_t l = 0; l < c.decLayers; ++l) {
    auto ls = b.scope("block" + std::to_string(l));
    Tensor a = rmsNormLayer(b, "ln1", x);
    x = x + attentionLayer(b, "attn", c, a, a,
                           {.bias = false, .causal = true, .mask = bias, .scale = 1.0});
    Tensor cq = rmsNormLayer(b, "ln_cross", x);
    x = x + attentionLayer(b, "cross", c, cq, enc,
                           {.bias = false, .causal = false, .mask = {}, .scale = 1.0});
    x = x + mlpLayer(b, "mlp", c, rmsNormLayer(b, "ln2", x), Activation::relu, false);
  }
  x = rmsNormLayer(b, "ln_f", x);
  if (c.tied) {
    // A tied head rescales by hidden^-0.5, as T5 does.
    x = x * (1.0 / std::sqrt(static_cast<double>(c.hidden)));
    b.output("logits", b.linear(x, shared, std::nullopt));
  } else {
    Tensor head =
        b.parameter("lm_head.weight", {c.vocab, c.hidden}, c.dtype, dsl::Init::normal(std.base));
    b.output("logits", b.linear(x, head, std::nullopt));
  }
}

} // namespace megac::models
