// Model configurations of the zoo and the spec strings that select them from the CLI.
//
//   gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128
//   bert:layers=2,hidden=64,heads=4,seq=32,vocab=128
//   t5:enc_layers=2,dec_layers=2,hidden=64,heads=4,seq=32,vocab=128
//   llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=128,seq=32,vocab=128
//   mixtral:layers=2,hidden=64,heads=4,kv_heads=2,experts=8,topk=2,ffn=128,seq=32,vocab=128
//   nemotron:layers=2,hidden=64,heads=4,kv_heads=2,ffn=256,seq=32,vocab=128,rotary_pct=0.5
//
// Keys: layers (gpt, bert; for t5 it sets both enc_layers and dec_layers), enc_layers and
// dec_layers (t5), hidden, heads, seq (max positions = the built sequence length), dec_seq (t5,
// default seq), vocab, ffn (default 4*hidden), tied=0|1 (default 1), gelu=erf|tanh (gpt and bert;
// default erf), batch (the micro-batch the IR is built for, default 1), dtype=f32|f64|bf16|f16
// (default f32). Llama adds kv_heads (default heads; grouped-query attention when fewer), ffn
// (default Llama's rule: 8/3 hidden rounded up to a multiple of 256), rope_theta (default
// 10000), norm_eps (RMSNorm epsilon, default 1e-5) and an untied head by default (tied=0).
// Mixtral is Llama with a sparse mixture-of-experts block for the MLP (docs/moe.md): experts
// (required), topk (required, experts each token is routed to) and capacity (capacity factor;
// absent or 0: dropless); ffn is each expert's SwiGLU size; shared_ffn (a shared SwiGLU expert
// every token goes through, scaled by sigmoid of a learned [1, hidden] gate: Qwen2-MoE's; default
// none), norm_topk=0|1 (renormalise the top-k probabilities, default 1; Qwen2-MoE's
// norm_topk_prob) and qwen2_moe=1 (transformers' Qwen2-MoE names: mlp.gate, mlp.experts.{e}.
// gate_proj/up_proj/down_proj, mlp.shared_expert.*, mlp.shared_expert_gate).
// Nemotron (nemotron:..., NVIDIA's Nemotron-4) is Llama's decoder with LayerNorm1P (LayerNorm
// with weight and bias, computed with weight + 1) for the norms, a squared-ReLU MLP
// (down(relu(up(x))^2), no gate) and rotary embeddings on the first rotary_pct of each head's
// dims; ffn is required.
// GPT adds transformers' GPT-2 keys (HfConfig.h): positions (rows of the learned position table,
// default seq; the first seq rows are used), norm_eps (LayerNorm epsilon, default 1e-5),
// scale_attn=0|1 (scores scaled by 1/sqrt(head_dim), default 1) and hf_gpt2=1 (transformers'
// GPT-2 parameter names under transformer.: wte, wpe, h.{l}.ln_1, h.{l}.attn.c_attn.{q,k,v},
// h.{l}.attn.c_proj, h.{l}.ln_2, h.{l}.mlp.c_fc, h.{l}.mlp.c_proj, ln_f; q, k and v held
// apart in nn.Linear's [out, in], so each splits by heads under tp).
//
// Llama-family keys (llama, mixtral, nemotron) for transformers' config fields (HfConfig.h):
// head_dim (default hidden/heads), qkv_bias and o_bias (biases on the q/k/v and the output
// projections, default 0), mlp_bias (biases on the MLP's projections, default 0),
// rope_llama3=FACTOR:LOW:HIGH:ORIGINAL (Llama 3.1's rope_scaling: factor, low_freq_factor,
// high_freq_factor, original_max_position_embeddings) and rotary_pct (the rotated fraction of
// each head's dims, default 1; nemotron only).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "frontends/dsl/GraphBuilder.h"

namespace megac::models {

enum class Arch { gpt, bert, t5, llama, mixtral, nemotron };
const char *archName(Arch arch);

struct ModelConfig {
  Arch arch = Arch::gpt;
  int64_t layers = 0;    // gpt, bert
  int64_t encLayers = 0; // t5
  int64_t decLayers = 0; // t5
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0; // key/value heads (== heads except for llama's grouped-query attention)
  int64_t ffn = 0;
  int64_t seq = 0;
  int64_t decSeq = 0; // t5
  int64_t vocab = 0;
  int64_t batch = 1;
  bool tied = true;
  dsl::Gelu gelu = dsl::Gelu::erf;
  dsl::DType dtype = dsl::DType::f32;
  double ropeTheta = 10000.0; // llama: rotary base
  double normEps = 1e-5;      // llama: RMSNorm epsilon
  int64_t experts = 0;        // mixtral: experts per MoE layer
  int64_t topk = 0;           // mixtral: experts each token is routed to
  double capacity = 0.0;      // mixtral: capacity factor; 0 = dropless
  int64_t sharedFfn = 0;      // mixtral: a sigmoid-gated shared SwiGLU expert of this size; 0: none
  bool normTopk = true;       // mixtral: top-k probabilities renormalised to sum 1 (0: as routed)
  bool qwen2MoeNames = false; // mixtral: transformers' Qwen2-MoE parameter names (mlp.experts...)
  int64_t headDimKey = 0;     // llama family: head_dim when given (0: hidden / heads)
  bool qkvBias = false;       // llama family: biases on q, k and v
  bool oBias = false;         // llama family: a bias on the attention's output projection
  bool mlpBias = false;       // llama family: biases on the MLP's projections
  /// Llama 3.1's rotary frequency scaling (rope_llama3); factor 0: none.
  struct Llama3Rope {
    double factor = 0, lowFreqFactor = 1, highFreqFactor = 4;
    int64_t originalMaxPositions = 8192;
  } ropeLlama3;
  double rotaryPct = 1.0; // nemotron: the fraction of each head's dims that rotary rotates
  int64_t positions = 0;  // gpt: rows of the learned position table (0: seq); seq <= positions
  bool scaleAttn = true;  // gpt: scores scaled by 1/sqrt(head_dim) (GPT-2's scale_attn_weights)
  bool hfGpt2 = false;    // gpt: transformers' GPT-2 names (transformer.h.{l}.attn.c_attn.q...)
  /// gpt, llama family: an attention_mask input [batch, seq] (1 token, 0 padding) whose padded
  /// keys every attention masks out (Layers.h KvCache::padding); megac train fills it from
  /// --pad-token-id.
  bool padding = false;
  /// megac generate's KV cache (driver/Generate.cpp; set there, not spec keys), for gpt with
  /// hf_gpt2 and the llama family (Layers.h kvCacheInputs). kvOutputs: the forward also outputs
  /// each layer's keys and values, present_key_L and present_value_L [batch, seq, kv_heads,
  /// head_dim] (keys after rotary). kvDecode: one decode step in place of the forward.
  bool kvOutputs = false;
  bool kvDecode = false;

  int64_t headDim() const { return headDimKey > 0 ? headDimKey : hidden / heads; }
  /// The rotated dims of each head: rotary_pct of head_dim (transformers' int()).
  int64_t rotaryDim() const { return static_cast<int64_t>(double(headDim()) * rotaryPct); }
  /// Llama's decoder (rotary, grouped-query attention): llama, mixtral and nemotron.
  bool llamaLike() const {
    return arch == Arch::llama || arch == Arch::mixtral || arch == Arch::nemotron;
  }
  /// Whether kvOutputs and kvDecode are built: GPT-2 under transformers' names and the Llama
  /// family (every hf: model_type).
  bool buildsKvCache() const { return llamaLike() || (arch == Arch::gpt && hfGpt2); }
  /// Transformer layers in total (encoder plus decoder for t5).
  int64_t totalLayers() const { return arch == Arch::t5 ? encLayers + decLayers : layers; }
  /// "gpt:layers=2,hidden=64,...": a spec that parses back to this config.
  std::string spec() const;
};

/// A parsed config, or a one-line error naming the key.
struct ConfigResult {
  std::optional<ModelConfig> config;
  std::string error;
};

ConfigResult parseModelSpec(std::string_view spec);

/// Llama's MLP size for `hidden` when ffn= is not given (Meta's reference model):
/// 256 * ceil(floor(2 * 4 * hidden / 3) / 256); 11008 for hidden 4096.
int64_t llamaDefaultFfn(int64_t hidden);

} // namespace megac::models
