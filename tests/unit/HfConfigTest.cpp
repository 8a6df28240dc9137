// transformers config.json files read into zoo configs (frontends/models/HfConfig.h): each
// family's fields and defaults, the models built from them against closed-form parameter counts,
// and the one-line refusals naming the file and field.
#include "frontends/models/HfConfig.h"
#include "frontends/models/ModelZoo.h"
#include "planner/ModelStats.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace megac;
using models::Arch;

namespace {

models::HfModel read(const std::string &json) {
  models::HfResult r = models::parseHfConfig(json, "config.json");
  EXPECT_TRUE(r.model) << r.error;
  return r.model ? *r.model : models::HfModel{};
}

std::string refusal(const std::string &json) {
  models::HfResult r = models::parseHfConfig(json, "dir/config.json");
  EXPECT_FALSE(r.model) << "accepted: " << json;
  EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
  return r.error;
}

/// The parameters of the model `config` builds at seq 8, counted off its IR.
int64_t builtParameters(const models::ModelConfig &config) {
  mlir::MLIRContext ctx;
  models::ModelConfig c = config;
  c.seq = 8;
  std::string error;
  auto module = models::buildModel(ctx, c, error);
  EXPECT_TRUE(module) << error;
  if (!module)
    return -1;
  planner::ModelStatsResult stats = planner::computeModelStats(*module, "");
  EXPECT_TRUE(stats.stats) << stats.error;
  return stats.stats ? stats.stats->parameters : -1;
}

const char *kLlama31 = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "vocab_size": 128, "hidden_act": "silu",
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "bos_token_id": 128000, "eos_token_id": 128001,
  "transformers_version": "4.44.2", "use_cache": true, "initializer_range": 0.02,
  "pretraining_tp": 1})";

TEST(HfConfig, LlamaFieldsAndLlama3RopeScaling) {
  models::HfModel m = read(kLlama31);
  const models::ModelConfig &c = m.config;
  EXPECT_EQ(m.modelType, "llama");
  EXPECT_EQ(c.arch, Arch::llama);
  EXPECT_EQ(c.layers, 2);
  EXPECT_EQ(c.hidden, 64);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kvHeads, 2);
  EXPECT_EQ(c.ffn, 96);
  EXPECT_EQ(c.vocab, 128);
  EXPECT_EQ(c.seq, 0); // max_position_embeddings is not the training length
  EXPECT_EQ(c.ropeTheta, 500000.0);
  EXPECT_EQ(c.normEps, 1e-5);
  EXPECT_FALSE(c.tied);
  EXPECT_EQ(c.ropeLlama3.factor, 8.0);
  EXPECT_EQ(c.ropeLlama3.originalMaxPositions, 8192);
  EXPECT_EQ(m.slidingWindow, 0);
  models::ConfigResult at = m.at(16);
  ASSERT_TRUE(at.config) << at.error;
  EXPECT_EQ(at.config->spec(),
            "llama:layers=2,hidden=64,heads=4,kv_heads=2,ffn=96,seq=16,vocab=128,batch=1,tied=0,"
            "rope_theta=5e+05,norm_eps=1e-05,rope_llama3=8:1:4:8192,dtype=f32");
  // Untied head, no biases: l (2 h^2 + 2 h g d + 3 h f + 2 h) + 2 V h + h.
  int64_t l = 2, h = 64, g = 2, d = 16, f = 96, v = 128;
  EXPECT_EQ(builtParameters(c),
            l * (2 * h * h + 2 * h * g * d + 3 * h * f + 2 * h) + 2 * v * h + h);
}

TEST(HfConfig, Qwen2HasQkvBiasesAndMissingFieldsTakeTheClassDefaults) {
  models::HfModel m = read(R"({"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 96, "num_hidden_layers": 2,
      "vocab_size": 128, "use_sliding_window": false, "sliding_window": 16,
      "max_window_layers": 2, "tie_word_embeddings": true})");
  const models::ModelConfig &c = m.config;
  EXPECT_TRUE(c.qkvBias);
  EXPECT_FALSE(c.oBias);
  EXPECT_TRUE(c.tied);
  EXPECT_EQ(c.normEps, 1e-6);      // Qwen2Config's rms_norm_eps
  EXPECT_EQ(c.ropeTheta, 10000.0); // and rope_theta
  EXPECT_EQ(m.slidingWindow, 0);   // use_sliding_window false
  // Tied: l (2 h^2 + 2 h g d + 3 h f + 2 h + (h + 2 g d) q/k/v biases) + V h + h.
  int64_t l = 2, h = 64, g = 2, d = 16, f = 96, v = 128;
  EXPECT_EQ(builtParameters(c),
            l * (2 * h * h + 2 * h * g * d + 3 * h * f + 2 * h + h + 2 * g * d) + v * h + h);

  models::HfModel mistral = read(R"({"model_type": "mistral"})");
  EXPECT_EQ(mistral.config.hidden, 4096);
  EXPECT_EQ(mistral.config.kvHeads, 8);
  EXPECT_EQ(mistral.config.ffn, 14336);
  EXPECT_EQ(mistral.slidingWindow, 4096); // MistralConfig's sliding_window
  EXPECT_EQ(read(R"({"model_type": "mistral", "sliding_window": null})").slidingWindow, 0);
}

TEST(HfConfig, NemotronIsLayerNorm1PSquaredReluAndPartialRotary) {
  models::HfModel m = read(R"({"model_type": "nemotron", "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24,
      "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 128,
      "hidden_act": "relu2", "norm_eps": 1e-05, "partial_rotary_factor": 0.5,
      "attention_bias": true, "mlp_bias": true})");
  const models::ModelConfig &c = m.config;
  EXPECT_EQ(c.arch, Arch::nemotron);
  EXPECT_EQ(c.headDim(), 24);
  EXPECT_EQ(c.rotaryDim(), 12);
  EXPECT_TRUE(c.qkvBias && c.oBias && c.mlpBias);
  // l (q, o: 2 h a d; k, v: 2 h g d; up/down 2 h f; four LayerNorm1P vectors 4 h; biases
  // a d + 2 g d + h + f + h) + 2 V h + 2 h.
  int64_t l = 2, h = 64, a = 4, g = 2, d = 24, f = 96, v = 128;
  int64_t biases = a * d + 2 * g * d + h + f + h;
  EXPECT_EQ(builtParameters(c),
            l * (2 * h * a * d + 2 * h * g * d + 2 * h * f + 4 * h + biases) + 2 * v * h + 2 * h);
  // partial_rotary_factor absent: NemotronConfig's 0.5.
  EXPECT_EQ(read(R"({"model_type": "nemotron", "hidden_size": 64, "num_attention_heads": 4,
      "intermediate_size": 96, "num_hidden_layers": 1, "vocab_size": 128})")
                .config.rotaryPct,
            0.5);
}

TEST(HfConfig, Gpt2PositionTableConv1DNamesAndDefaults) {
  // The hub's gpt2 config.json, shrunk: dropout rates and the summary head change no logits.
  models::HfModel m = read(R"({"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2,
      "n_positions": 32, "n_ctx": 32, "vocab_size": 128, "n_inner": null,
      "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
      "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "summary_type": "cls_index",
      "summary_use_proj": true, "summary_activation": null, "summary_proj_to_labels": true,
      "summary_first_dropout": 0.1, "scale_attn_weights": true,
      "architectures": ["GPT2LMHeadModel"], "bos_token_id": 50256, "eos_token_id": 50256})");
  const models::ModelConfig &c = m.config;
  EXPECT_EQ(c.arch, Arch::gpt);
  EXPECT_TRUE(c.hfGpt2 && c.tied && c.scaleAttn);
  EXPECT_EQ(c.positions, 32);
  EXPECT_EQ(c.ffn, 4 * 64); // n_inner null: 4 x n_embd
  EXPECT_EQ(c.gelu, dsl::Gelu::tanh);
  // l (12 h^2 + 13 h) + (V + positions) h + 2 h, whatever seq (the whole n_positions table).
  int64_t l = 2, h = 64, v = 128, p = 32;
  EXPECT_EQ(builtParameters(c), l * (12 * h * h + 13 * h) + (v + p) * h + 2 * h);
  EXPECT_TRUE(m.at(32).config);
  models::ConfigResult over = m.at(33);
  EXPECT_FALSE(over.config);
  EXPECT_EQ(over.error, "config.json: field 'n_positions' is 32, shorter than seq 33; GPT-2's "
                        "learned position table has that many rows, so use seq <= 32");
  models::ConfigResult spec = models::parseModelSpec(m.at(16).config->spec());
  ASSERT_TRUE(spec.config) << spec.error;
  EXPECT_EQ(spec.config->spec(), m.at(16).config->spec());
  // GPT2Config's defaults; gelu is erf.
  models::HfModel d = read(R"({"model_type": "gpt2", "activation_function": "gelu",
      "scale_attn_weights": false, "tie_word_embeddings": false})");
  EXPECT_EQ(d.config.hidden, 768);
  EXPECT_EQ(d.config.positions, 1024);
  EXPECT_EQ(d.config.vocab, 50257);
  EXPECT_EQ(d.config.gelu, dsl::Gelu::erf);
  EXPECT_FALSE(d.config.scaleAttn || d.config.tied);
}

TEST(HfConfig, MixtralExperts) {
  models::HfModel m = read(R"({"model_type": "mixtral", "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
      "num_hidden_layers": 2, "vocab_size": 128, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": null, "router_aux_loss_coef": 0.02,
      "output_router_logits": false, "router_jitter_noise": 0.0})");
  EXPECT_EQ(m.config.arch, Arch::mixtral);
  EXPECT_EQ(m.config.experts, 4);
  EXPECT_EQ(m.config.topk, 2);
  EXPECT_EQ(m.config.normEps, 1e-5); // MixtralConfig's
  int64_t l = 2, h = 64, g = 2, d = 16, f = 96, v = 128, e = 4;
  EXPECT_EQ(builtParameters(m.config),
            l * (2 * h * h + 2 * h * g * d + e * 3 * h * f + h * e + 2 * h) + 2 * v * h + h);
}

TEST(HfConfig, RefusalsNameTheFileAndField) {
  EXPECT_EQ(refusal(R"({"model_type": "llama", "attn_logit_softcapping": 50.0})"),
            "dir/config.json: field 'attn_logit_softcapping' is 50; megac does not soft-cap "
            "logits");
  EXPECT_EQ(refusal(R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2}})"),
            "dir/config.json: field 'rope_scaling' is {\"type\": \"linear\", \"factor\": 2}; "
            "megac honours rope_type \"llama3\" only (Llama 3.1's scaling)");
  EXPECT_EQ(refusal(R"({"model_type": "qwen2", "rope_scaling": {"rope_type": "llama3"}})")
                .find("dir/config.json: field 'rope_scaling'"),
            0u);
  EXPECT_EQ(refusal(R"({"model_type": "llama", "hidden_act": "gelu"})"),
            "dir/config.json: field 'hidden_act' is \"gelu\"; megac builds llama with silu only");
  EXPECT_EQ(refusal(R"({"model_type": "llama", "frobnicate": 3})"),
            "dir/config.json: field 'frobnicate' is 3; megac does not know this field of "
            "model_type 'llama' and refuses it in case it changes the model's math "
            "(docs/huggingface.md lists the fields it reads)");
  EXPECT_EQ(refusal(R"({"model_type": "llama", "attention_dropout": 0.1})"),
            "dir/config.json: field 'attention_dropout' is 0.1; megac's attention has no dropout "
            "(train with --dropout for the model's own)");
  EXPECT_EQ(refusal(R"({"model_type": "mixtral", "router_jitter_noise": 0.01})"),
            "dir/config.json: field 'router_jitter_noise' is 0.01; megac's router adds no jitter "
            "noise");
  EXPECT_EQ(refusal(R"({"model_type": "llama", "hidden_size": "big"})"),
            "dir/config.json: field 'hidden_size' is \"big\"; megac needs a positive integer");
  EXPECT_EQ(refusal(R"({"model_type": "qwen2_moe", "decoder_sparse_step": 2})"),
            "dir/config.json: field 'decoder_sparse_step' is 2; megac builds every layer of a "
            "qwen2_moe model sparse (decoder_sparse_step 1)");
  EXPECT_EQ(refusal(R"({"model_type": "gpt_neox"})"),
            "dir/config.json: model_type 'gpt_neox' is not supported; --model hf: builds llama, "
            "mistral, qwen2, mixtral, qwen2_moe, nemotron, gpt2");
  EXPECT_EQ(refusal(R"({"model_type": "gpt2", "scale_attn_by_inverse_layer_idx": true})"),
            "dir/config.json: field 'scale_attn_by_inverse_layer_idx' is true; megac does not "
            "scale attention by 1/(layer + 1)");
  EXPECT_EQ(refusal(R"({"model_type": "gpt2", "reorder_and_upcast_attn": true})"),
            "dir/config.json: field 'reorder_and_upcast_attn' is true; megac does not reorder or "
            "upcast GPT-2's attention (false is the math it builds)");
  EXPECT_EQ(refusal(R"({"model_type": "gpt2", "activation_function": "quick_gelu"})"),
            "dir/config.json: field 'activation_function' is \"quick_gelu\"; megac builds gpt2 "
            "with gelu_new, gelu_pytorch_tanh or gelu_fast (tanh approximation) or gelu (erf)");
  EXPECT_EQ(refusal(R"({"hidden_size": 64})"),
            "dir/config.json: no model_type (a string naming the family: llama, mistral, qwen2, "
            "mixtral, qwen2_moe, nemotron, gpt2)");
  EXPECT_EQ(refusal("[1]"), "dir/config.json: not a JSON object (a transformers config.json)");
  EXPECT_EQ(refusal("{\"model_type\": ").find("dir/config.json: not JSON: "), 0u);
  // The zoo's own checks, named by the file.
  EXPECT_EQ(refusal(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "num_key_value_heads": 3})"),
            "dir/config.json: key 'heads' (4) is not divisible by key 'kv_heads' (3); "
            "grouped-query attention needs kv_heads to divide heads");
}

TEST(HfConfig, SlidingWindowBoundsTheSequence) {
  models::HfModel m = read(R"({"model_type": "mistral", "hidden_size": 64,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96,
      "num_hidden_layers": 2, "vocab_size": 128, "sliding_window": 16})");
  EXPECT_TRUE(m.at(16).config);
  models::ConfigResult over = m.at(17);
  EXPECT_FALSE(over.config);
  EXPECT_EQ(over.error, "config.json: field 'sliding_window' is 16, shorter than seq 17; megac's "
                        "attention does not window, so train with seq <= 16");
  models::HfModel qwen = read(R"({"model_type": "qwen2", "hidden_size": 64,
      "num_attention_heads": 4, "intermediate_size": 96, "num_hidden_layers": 2,
      "vocab_size": 128, "use_sliding_window": true, "sliding_window": 8})");
  EXPECT_EQ(qwen.slidingWindow, 8);
}

TEST(HfConfig, NemotronSpecKeysRoundTrip) {
  std::string spec = "nemotron:layers=2,hidden=64,heads=4,kv_heads=2,head_dim=24,ffn=96,seq=8,"
                     "vocab=128,batch=1,tied=0,rope_theta=10000,norm_eps=1e-05,qkv_bias=1,"
                     "o_bias=1,rotary_pct=0.5,dtype=f32";
  models::ConfigResult parsed = models::parseModelSpec(spec);
  ASSERT_TRUE(parsed.config) << parsed.error;
  EXPECT_EQ(parsed.config->spec(), spec);
  EXPECT_EQ(models::parseModelSpec("nemotron:layers=1,hidden=64,heads=4,seq=8,vocab=16").error,
            "missing key 'ffn' for nemotron");
  EXPECT_EQ(models::parseModelSpec("nemotron:layers=1,hidden=64,heads=4,ffn=8,seq=8,vocab=16,"
                                   "rotary_pct=0.2")
                .error,
            "nemotron's rotary dims rotary_pct x head_dim (3) is odd; rotary embeddings rotate "
            "pairs of dims, so it must be even");
  EXPECT_NE(models::parseModelSpec("llama:layers=1,hidden=64,heads=4,seq=8,vocab=16,"
                                   "rope_llama3=8:4:1:8192")
                .error.find("key 'rope_llama3' needs FACTOR:LOW:HIGH:ORIGINAL"),
            std::string::npos);
}

} // namespace
