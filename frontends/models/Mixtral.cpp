// Mixtral: Llama's decoder with a sparse mixture-of-experts block in place of the MLP
// (transformers' MixtralForCausalLM; docs/moe.md). The router is a linear map to E logits; its
// softmax (in at least fp32) picks the top-k experts per token, whose probabilities are
// renormalised to sum 1; each expert is a SwiGLU MLP w2(silu(w1 x) * w3 x) applied to the
// tokens routed to it, and the token's output is the weighted sum of its experts' outputs.
// Parameter names are transformers' without "model.", except that each layer's E experts are
// one stacked tensor per matrix: `block_sparse_moe.experts.w1.weight [E, ffn, h]` holds
// transformers' `block_sparse_moe.experts.{e}.w1.weight` at index e. Weights files use
// transformers' per-expert names (mega.source_stack): --save-weights writes them, and files
// with either form load. Qwen2-MoE (qwen2_moe=1, from --model hf:) is the same block under
// transformers' Qwen2MoeSparseMoeBlock names (mlp.gate, mlp.experts.{e}.gate_proj/up_proj/
// down_proj), optionally without the renormalisation (norm_topk=0) and with a shared expert
// (shared_ffn) added to the routed experts' sum.
#include "frontends/models/Layers.h"

#include <cmath>

namespace megac::models {

using dsl::Tensor;

namespace {

bool isHalf(dsl::DType t) { return t == dsl::DType::bf16 || t == dsl::DType::f16; }

/// Capacity dropping, per sequence (layout-independent: docs/moe.md): expert e keeps the first
/// `capacity` of its routed tokens in position order. `mask [b, s, E]` 0/1 -> the kept 0/1.
Tensor keepWithinCapacity(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &mask) {
  int64_t seq = mask.dim(1);
  auto capacity = static_cast<int64_t>(
      std::ceil(c.capacity * double(seq) * double(c.topk) / double(c.experts)));
  Tensor position = b.cumsum(mask, 1);
  Tensor limit = b.splat(double(capacity), {}, mask.dtype());
  Tensor within =
      b.cast(b.compare(dsl::Compare::le, position, b.broadcast(limit, mask.shape())), mask.dtype());
  return mask * within;
}

/// Qwen2-MoE's shared expert: a SwiGLU MLP every token goes through, scaled per token by
/// sigmoid(shared_expert_gate x) (a [1, hidden] weight). `x [b, s, hidden]` -> the same.
Tensor sharedExpert(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x) {
  InitStd std(c);
  Tensor out = [&] {
    auto scope = b.scope("shared_expert");
    Tensor gate = linearLayer(b, "gate_proj", x, c.sharedFfn, false, std.base);
    Tensor up = linearLayer(b, "up_proj", x, c.sharedFfn, false, std.base);
    return linearLayer(b, "down_proj", gate * b.sigmoid(gate) * up, c.hidden, false, std.output);
  }();
  // The gate's one output is a dot product with x, not a linear map: a linear of output dim 1
  // cannot be split over tp, and x (the normalized residual) is whole on every tp rank.
  Tensor w = [&] {
    auto scope = b.scope("shared_expert_gate");
    return b.parameter("weight", {1, c.hidden}, x.dtype(), dsl::Init::normal(std.base));
  }();
  Tensor dot = b.reduce(dsl::ReduceKind::sum,
                        x * b.broadcast(b.reshape(w, {1, 1, c.hidden}), x.shape()), {-1},
                        /*keepDims=*/true);
  return out * b.broadcast(b.sigmoid(dot), out.shape());
}

/// `x [b, s, hidden]` -> `[b, s, hidden]`, in scope block_sparse_moe (Qwen2-MoE: mlp).
Tensor sparseMoe(dsl::GraphBuilder &b, const ModelConfig &c, const Tensor &x) {
  auto scope = b.scope(c.qwen2MoeNames ? "mlp" : "block_sparse_moe");
  InitStd std(c);
  int64_t E = c.experts, k = c.topk;
  Tensor logits = linearLayer(b, "gate", x, E, false, std.base);
  // transformers computes the routing in float32 whatever the model's dtype.
  dsl::DType routing = isHalf(c.dtype) ? dsl::DType::f32 : c.dtype;
  if (routing != c.dtype)
    logits = b.cast(logits, routing);
  Tensor probs = b.softmax(logits, -1);
  Tensor mask = b.topkMask(probs, k);
  Tensor gates = probs * mask;
  if (c.normTopk) {
    Tensor total = b.reduce(dsl::ReduceKind::sum, gates, {-1}, /*keepDims=*/true);
    gates = gates / b.broadcast(total, gates.shape());
  }
  if (c.capacity > 0) {
    mask = keepWithinCapacity(b, c, mask);
    gates = gates * mask;
  }
  if (routing != c.dtype) {
    gates = b.cast(gates, c.dtype);
    mask = b.cast(mask, c.dtype);
  }
  auto expertWeight = [&](const char *name, int64_t out, int64_t in, double stddev) {
    std::vector<std::string> members;
    for (int64_t e = 0; e < E; ++e)
      members.push_back("experts." + std::to_string(e) + "." + name + ".weight");
    return b.stackedParameter(std::string("experts.") + name + ".weight", {E, out, in}, c.dtype,
                              dsl::Init::normal(stddev), members);
  };
  bool q = c.qwen2MoeNames;
  Tensor w1 = expertWeight(q ? "gate_proj" : "w1", c.ffn, c.hidden, std.base);
  Tensor w2 = expertWeight(q ? "down_proj" : "w2", c.hidden, c.ffn, std.output);
  Tensor w3 = expertWeight(q ? "up_proj" : "w3", c.ffn, c.hidden, std.base);
  Tensor routed = b.moeDispatch(x, mask);
  Tensor gate = b.moeMatmul(routed, w1, mask, k);
  Tensor up = b.moeMatmul(routed, w3, mask, k);
  Tensor hidden = gate * b.sigmoid(gate) * up;
  Tensor out = b.moeCombine(b.moeMatmul(hidden, w2, mask, k), gates);
  return c.sharedFfn > 0 ? out + sharedExpert(b, c, x) : out;
}

} // namespace

// input_ids [b, s] -> logits [b, s, vocab]. Parameters, with d = hidden/heads, g = kv_heads:
// l (2 h^2 + 2 h g d + E h + 3 E h ffn + 2 h) + V h + h + V h (untied head); per token k of the
// E experts are active: l (3 k h ffn) of the expert weights.
void buildMixtral(dsl::GraphBuilder &b, const ModelConfig &c) {
  buildLlamaDecoder(b, c, sparseMoe);
}

} // namespace megac::models
