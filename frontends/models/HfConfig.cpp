// Reading transformers' config.json into the zoo's config (HfConfig.h). A field missing from the
// file takes its transformers config class's default (save_pretrained leaves out the fields
// equal to it), as in transformers 4.44.
#include "frontends/models/HfConfig.h"

#include "support/Json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

namespace megac::models {

namespace {

/// A family's defaults: transformers' config class defaults for the fields megac reads.
struct Family {
  const char *type;
  Arch arch;
  int64_t vocab, hidden, ffn, layers, heads, kvHeads; // kvHeads 0: num_attention_heads
  double normEps, ropeTheta;
  const char *normEpsField; // rms_norm_eps, or nemotron's norm_eps
  const char *activation;   // the hidden_act megac builds
  bool attentionBias;       // reads attention_bias (q, k, v and o)
  bool qkvBias;             // q, k and v biased whatever the config says (qwen2)
  bool mlpBias;             // reads mlp_bias
  bool ropeScaling;         // reads rope_scaling (llama3)
  int64_t slidingWindow;    // the default sliding_window; -1: the family has none
  bool windowNeedsSwitch;   // applied only with use_sliding_window (qwen2)
};

const std::vector<Family> &families() {
  static const std::vector<Family> table = {
      {"llama", Arch::llama, 32000, 4096, 11008, 32, 32, 0, 1e-6, 10000.0, "rms_norm_eps", "silu",
       true, false, true, true, -1, false},
      {"mistral", Arch::llama, 32000, 4096, 14336, 32, 32, 8, 1e-6, 10000.0, "rms_norm_eps", "silu",
       false, false, false, false, 4096, false},
      {"qwen2", Arch::llama, 151936, 4096, 22016, 32, 32, 0, 1e-6, 10000.0, "rms_norm_eps", "silu",
       false, true, false, false, 0, true},
      {"mixtral", Arch::mixtral, 32000, 4096, 14336, 32, 32, 8, 1e-5, 1e6, "rms_norm_eps", "silu",
       false, false, false, false, 0, false},
      {"qwen2_moe", Arch::mixtral, 151936, 2048, 5632, 24, 16, 0, 1e-6, 10000.0, "rms_norm_eps",
       "silu", false, true, false, false, 4096, true},
      {"nemotron", Arch::nemotron, 256000, 6144, 24576, 32, 48, 0, 1e-5, 10000.0, "norm_eps",
       "relu2", true, false, true, false, -1, false},
  };
  return table;
}

/// Fields that change no math of the model megac builds: metadata, token ids, generation
/// settings, initialisation (megac initialises as its zoo does), and the longest sequence the
/// model was trained for (the training length is hf:PATH,seq=S).
const std::set<std::string> &noMathFields() {
  static const std::set<std::string> fields = {
      "architectures", "torch_dtype", "use_cache", "bos_token_id", "eos_token_id", "pad_token_id",
      "sep_token_id", "decoder_start_token_id", "transformers_version", "initializer_range",
      "initializer_factor", "_name_or_path", "model_type", "max_position_embeddings",
      "tokenizer_class", "return_dict", "output_hidden_states", "output_attentions", "torchscript",
      "use_bfloat16", "id2label", "label2id", "problem_type", "finetuning_task",
      "task_specific_params", "prefix", "pruned_heads", "tf_legacy_loss", "chunk_size_feed_forward",
      "is_decoder", "tie_encoder_decoder", "cross_attention_hidden_size", "bad_words_ids",
      "begin_suppress_tokens", "suppress_tokens", "forced_bos_token_id", "forced_eos_token_id",
      "remove_invalid_values", "exponential_decay_length_penalty", "max_length", "min_length",
      "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
      "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
      "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "num_return_sequences",
      "output_scores", "return_dict_in_generate", "attn_implementation",
      "_attn_implementation_autoset",
      // pretraining_tp > 1 splits transformers' matmuls into slices: the same sums in another
      // order, no other math.
      "pretraining_tp",
      // The router's aux loss is a training option (--moe-aux-loss-coeff), not the model's.
      "output_router_logits", "router_aux_loss_coef"};
  return fields;
}

/// `v` as JSON text for an error ("silu" quoted, numbers as written, objects in full).
std::string render(const json::Value &v) {
  using Kind = json::Value::Kind;
  switch (v.kind) {
  case Kind::null:
    return "null";
  case Kind::boolean:
    return v.boolean ? "true" : "false";
  case Kind::number: {
    if (v.isInteger)
      return std::to_string(v.integer);
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v.number);
    return std::string(buffer, end);
  }
  case Kind::string:
    return json::quote(v.string);
  case Kind::array: {
    std::string out = "[";
    for (size_t i = 0; i < v.items.size(); ++i)
      out += (i ? ", " : "") + render(v.items[i]);
    return out + "]";
  }
  case Kind::object: {
    std::string out = "{";
    for (size_t i = 0; i < v.items.size(); ++i)
      out += (i ? ", " : "") + json::quote(v.keys[i]) + ": " + render(v.items[i]);
    return out + "}";
  }
  }
  return "?";
}

std::string shortest(double v) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, end);
}

/// The fields of one config object, each read at most once; the first error is kept.
class Fields {
public:
  Fields(const json::Value &root, std::string file) : root_(root), file_(std::move(file)) {}

  bool failed() const { return !error_.empty(); }
  const std::string &error() const { return error_; }
  void fail(const std::string &message) {
    if (error_.empty())
      error_ = file_ + ": " + message;
  }
  /// "field 'x' is VALUE; " + why.
  void refuse(const std::string &key, const std::string &why) {
    const json::Value *v = root_.find(key);
    fail("field '" + key + "' is " + (v ? render(*v) : "absent") + "; " + why);
  }

  /// Whether the file has the field (JSON null included).
  bool given(const std::string &key) const { return root_.find(key) != nullptr; }
  /// The field, null when absent or JSON null; marks it read.
  const json::Value *get(const std::string &key) {
    read_.insert(key);
    const json::Value *v = root_.find(key);
    return v && v->kind != json::Value::Kind::null ? v : nullptr;
  }
  int64_t integer(const std::string &key, int64_t fallback) {
    const json::Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind != json::Value::Kind::number || !v->isInteger || v->integer < 1) {
      refuse(key, "megac needs a positive integer");
      return fallback;
    }
    return v->integer;
  }
  double number(const std::string &key, double fallback) {
    const json::Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind != json::Value::Kind::number || !(v->number > 0) || !std::isfinite(v->number)) {
      refuse(key, "megac needs a positive number");
      return fallback;
    }
    return v->number;
  }
  bool boolean(const std::string &key, bool fallback) {
    const json::Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind != json::Value::Kind::boolean) {
      refuse(key, "megac needs true or false");
      return fallback;
    }
    return v->boolean;
  }
  std::string text(const std::string &key, const std::string &fallback) {
    const json::Value *v = get(key);
    if (!v)
      return fallback;
    if (v->kind != json::Value::Kind::string) {
      refuse(key, "megac needs a string");
      return fallback;
    }
    return v->string;
  }
  /// A field that changes the math: accepted when absent, null or `accepted(value)`, else
  /// refused with `why`.
  void only(const std::string &key, const std::function<bool(const json::Value &)> &accepted,
            const std::string &why) {
    if (const json::Value *v = get(key); v && !accepted(*v))
      refuse(key, why);
  }
  /// Every field not read is refused unless it changes no math.
  void refuseUnread(const std::string &type) {
    for (size_t i = 0; i < root_.keys.size() && !failed(); ++i) {
      const std::string &key = root_.keys[i];
      if (read_.count(key) || noMathFields().count(key))
        continue;
      refuse(key, "megac does not know this field of model_type '" + type +
                      "' and refuses it in case it changes the model's math (docs/huggingface.md "
                      "lists the fields it reads)");
    }
  }

private:
  const json::Value &root_;
  std::string file_;
  std::set<std::string> read_;
  std::string error_;
};

bool isZero(const json::Value &v) { return v.kind == json::Value::Kind::number && v.number == 0; }
bool isFalse(const json::Value &v) { return v.kind == json::Value::Kind::boolean && !v.boolean; }

std::string supportedTypes() {
  std::string out;
  for (const std::string &t : hfModelTypes())
    out += (out.empty() ? "" : ", ") + t;
  return out;
}

/// Llama 3.1's rope_scaling ({"rope_type": "llama3", "factor": 8.0, ...}) into the config.
void readRopeScaling(Fields &f, const Family &family, ModelConfig &c) {
  const json::Value *v = f.get("rope_scaling");
  if (!v)
    return;
  if (!family.ropeScaling) {
    f.refuse("rope_scaling", "megac builds " + std::string(family.type) +
                                 " without rotary scaling (rope_scaling null)");
    return;
  }
  const json::Value *type = v->find("rope_type");
  if (!type)
    type = v->find("type"); // transformers' older spelling
  if (v->kind != json::Value::Kind::object || !type || type->kind != json::Value::Kind::string ||
      type->string != "llama3") {
    f.refuse("rope_scaling", "megac honours rope_type \"llama3\" only (Llama 3.1's scaling)");
    return;
  }
  auto part = [&](const char *key, double &out) {
    const json::Value *p = v->find(key);
    if (!p || p->kind != json::Value::Kind::number || !(p->number > 0)) {
      f.refuse("rope_scaling",
               std::string("its llama3 scaling needs a number > 0 for '") + key + "'");
      return;
    }
    out = p->number;
  };
  double original = 0;
  ModelConfig::Llama3Rope &r = c.ropeLlama3;
  part("factor", r.factor);
  part("low_freq_factor", r.lowFreqFactor);
  part("high_freq_factor", r.highFreqFactor);
  part("original_max_position_embeddings", original);
  for (size_t i = 0; i < v->keys.size(); ++i) {
    static const std::set<std::string> known = {
        "rope_type",        "type",
        "factor",           "low_freq_factor",
        "high_freq_factor", "original_max_position_embeddings"};
    if (!known.count(v->keys[i]))
      f.refuse("rope_scaling", "megac does not know its key '" + v->keys[i] + "'");
  }
  if (!f.failed() && (original != std::floor(original) || r.highFreqFactor <= r.lowFreqFactor))
    f.refuse("rope_scaling", "its llama3 scaling needs high_freq_factor > low_freq_factor and an "
                             "integer original_max_position_embeddings");
  r.originalMaxPositions = static_cast<int64_t>(original);
}

HfResult fromFamily(Fields &f, const Family &family, const std::string &file) {
  HfModel m;
  m.file = file;
  m.modelType = family.type;
  ModelConfig &c = m.config;
  c.arch = family.arch;
  c.vocab = f.integer("vocab_size", family.vocab);
  c.hidden = f.integer("hidden_size", family.hidden);
  c.ffn = f.integer("intermediate_size", family.ffn);
  c.layers = f.integer("num_hidden_layers", family.layers);
  c.heads = f.integer("num_attention_heads", family.heads);
  c.kvHeads = f.integer("num_key_value_heads", family.kvHeads ? family.kvHeads : c.heads);
  // head_dim absent or null: hidden / heads (which the zoo then checks divides).
  if (int64_t headDim = f.integer("head_dim", 0);
      headDim > 0 && (c.hidden % c.heads != 0 || headDim != c.hidden / c.heads))
    c.headDimKey = headDim;
  c.normEps = f.number(family.normEpsField, family.normEps);
  c.ropeTheta = f.number("rope_theta", family.ropeTheta);
  c.tied = f.boolean("tie_word_embeddings", false);
  std::string act = f.text("hidden_act", family.activation);
  if (act != family.activation && !(act == "swish" && std::string(family.activation) == "silu"))
    f.refuse("hidden_act",
             "megac builds " + std::string(family.type) + " with " + family.activation + " only");
  if (family.attentionBias)
    c.qkvBias = c.oBias = f.boolean("attention_bias", false);
  c.qkvBias = c.qkvBias || family.qkvBias;
  if (family.mlpBias)
    c.mlpBias = f.boolean("mlp_bias", false);
  readRopeScaling(f, family, c);
  f.only("attention_dropout", isZero,
         "megac's attention has no dropout (train with --dropout for the model's own)");
  f.only("is_encoder_decoder", isFalse, "megac builds decoder-only models here");
  f.only("add_cross_attention", isFalse, "megac builds decoder-only models here");
  for (const char *cap : {"attn_logit_softcapping", "final_logit_softcapping"})
    f.only(
        cap, [](const json::Value &) { return false; }, "megac does not soft-cap logits");
  if (family.arch == Arch::nemotron) {
    const json::Value *pct = f.get("partial_rotary_factor");
    c.rotaryPct = pct ? pct->number : 0.5;
    if (pct && (pct->kind != json::Value::Kind::number || !(pct->number > 0) || pct->number > 1))
      f.refuse("partial_rotary_factor", "megac needs a fraction in (0, 1]");
  }
  if (family.arch == Arch::mixtral && std::string(family.type) == "qwen2_moe") {
    // Every layer sparse (decoder_sparse_step 1, no mlp_only_layers): intermediate_size, the
    // size of the dense layers' MLP, then changes nothing.
    c.qwen2MoeNames = true;
    c.experts = f.integer("num_experts", 60);
    c.topk = f.integer("num_experts_per_tok", 4);
    c.ffn = f.integer("moe_intermediate_size", 1408);
    c.sharedFfn = f.integer("shared_expert_intermediate_size", 5632);
    c.normTopk = f.boolean("norm_topk_prob", false);
    f.only(
        "decoder_sparse_step",
        [](const json::Value &v) { return v.kind == json::Value::Kind::number && v.number == 1; },
        "megac builds every layer of a qwen2_moe model sparse (decoder_sparse_step 1)");
    f.only(
        "mlp_only_layers",
        [](const json::Value &v) { return v.kind == json::Value::Kind::array && v.items.empty(); },
        "megac builds every layer of a qwen2_moe model sparse (mlp_only_layers [])");
  } else if (family.arch == Arch::mixtral) {
    c.experts = f.integer("num_local_experts", 8);
    c.topk = f.integer("num_experts_per_tok", 2);
    f.only("router_jitter_noise", isZero, "megac's router adds no jitter noise");
  }
  if (family.slidingWindow >= 0) {
    bool applied = true;
    if (family.windowNeedsSwitch)
      applied = f.boolean("use_sliding_window", false);
    // Absent: the class default; null: no window.
    bool given = f.given("sliding_window");
    const json::Value *window = f.get("sliding_window");
    int64_t value = given ? 0 : family.slidingWindow;
    if (window) {
      if (window->kind != json::Value::Kind::number || !window->isInteger || window->integer < 1)
        f.refuse("sliding_window", "megac needs null or a positive integer");
      else
        value = window->integer;
    }
    if (applied && value > 0) {
      m.slidingWindow = value;
      m.slidingWindowField = "sliding_window";
    }
    if (family.windowNeedsSwitch)
      f.get("max_window_layers"); // which layers window: only with use_sliding_window
  }
  f.refuseUnread(family.type);
  if (f.failed())
    return {std::nullopt, f.error()};
  // The zoo's own checks (divisibility, bounds, rotary pairs) on a one-token build.
  if (ConfigResult checked = m.at(1); !checked.config)
    return {std::nullopt, checked.error};
  return {std::move(m), {}};
}

/// GPT-2 (GPT2Config's fields and defaults): the zoo's GPT under transformers' names, with its
/// n_positions position table, biases everywhere and a tied head.
HfResult fromGpt2(Fields &f, const std::string &file) {
  HfModel m;
  m.file = file;
  m.modelType = "gpt2";
  ModelConfig &c = m.config;
  c.arch = Arch::gpt;
  c.hfGpt2 = true;
  c.vocab = f.integer("vocab_size", 50257);
  c.positions = f.integer("n_positions", 1024);
  c.hidden = f.integer("n_embd", 768);
  c.layers = f.integer("n_layer", 12);
  c.heads = f.integer("n_head", 12);
  c.ffn = f.integer("n_inner", 4 * c.hidden); // null: 4 x n_embd
  c.normEps = f.number("layer_norm_epsilon", 1e-5);
  c.tied = f.boolean("tie_word_embeddings", true);
  c.scaleAttn = f.boolean("scale_attn_weights", true);
  // gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh approximation written three ways.
  std::string act = f.text("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.gelu = dsl::Gelu::tanh;
  else if (act == "gelu")
    c.gelu = dsl::Gelu::erf;
  else
    f.refuse("activation_function", "megac builds gpt2 with gelu_new, gelu_pytorch_tanh or "
                                    "gelu_fast (tanh approximation) or gelu (erf)");
  f.only("scale_attn_by_inverse_layer_idx", isFalse,
         "megac does not scale attention by 1/(layer + 1)");
  f.only("reorder_and_upcast_attn", isFalse,
         "megac does not reorder or upcast GPT-2's attention (false is the math it builds)");
  f.only("is_encoder_decoder", isFalse, "megac builds decoder-only models here");
  f.only("add_cross_attention", isFalse, "megac builds decoder-only models here");
  // Dropout rates (megac trains with --dropout) and GPT2DoubleHeadsModel's summary head (not
  // part of the causal LM) change no logits of the model built; n_ctx is n_positions' old name.
  for (const char *key :
       {"resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout", "summary_type",
        "summary_use_proj", "summary_activation", "summary_proj_to_labels", "n_ctx"})
    f.get(key);
  f.refuseUnread("gpt2");
  if (f.failed())
    return {std::nullopt, f.error()};
  if (ConfigResult checked = m.at(1); !checked.config)
    return {std::nullopt, checked.error};
  return {std::move(m), {}};
}

} // namespace

const std::vector<std::string> &hfModelTypes() {
  static const std::vector<std::string> types = [] {
    std::vector<std::string> out;
    for (const Family &f : families())
      out.push_back(f.type);
    out.push_back("gpt2");
    return out;
  }();
  return types;
}

ConfigResult HfModel::at(int64_t seq) const {
  if (slidingWindow > 0 && seq > slidingWindow)
    return {std::nullopt, file + ": field '" + slidingWindowField + "' is " +
                              std::to_string(slidingWindow) + ", shorter than seq " +
                              std::to_string(seq) +
                              "; megac's attention does not window, so train with seq <= " +
                              std::to_string(slidingWindow)};
  if (config.arch == Arch::gpt && config.positions > 0 && seq > config.positions)
    return {std::nullopt, file + ": field 'n_positions' is " + std::to_string(config.positions) +
                              ", shorter than seq " + std::to_string(seq) +
                              "; GPT-2's learned position table has that many rows, so use seq "
                              "<= " +
                              std::to_string(config.positions)};
  ModelConfig c = config;
  c.seq = seq;
  ConfigResult checked = parseModelSpec(c.spec());
  if (!checked.config)
    return {std::nullopt, file + ": " + checked.error};
  return checked;
}

HfResult parseHfConfig(std::string_view text, const std::string &file) {
  StatusOr<json::Value> root = json::parse(text);
  if (!root.isOk())
    return {std::nullopt, file + ": not JSON: " + root.status().message()};
  if (root->kind != json::Value::Kind::object)
    return {std::nullopt, file + ": not a JSON object (a transformers config.json)"};
  Fields f(*root, file);
  const json::Value *type = f.get("model_type");
  if (!type || type->kind != json::Value::Kind::string)
    return {std::nullopt,
            file + ": no model_type (a string naming the family: " + supportedTypes() + ")"};
  for (const Family &family : families())
    if (type->string == family.type)
      return fromFamily(f, family, file);
  if (type->string == "gpt2")
    return fromGpt2(f, file);
  return {std::nullopt, file + ": model_type '" + type->string + "' is not supported; " +
                            "--model hf: builds " + supportedTypes()};
}

HfResult readHfConfig(const std::string &path) {
  std::filesystem::path file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    file /= "config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return {
        std::nullopt,
        "cannot open " + file.string() +
            (file.filename() == "config.json" ? "" : " (give a model folder or its config.json)")};
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad())
    return {std::nullopt, "cannot read " + file.string()};
  return parseHfConfig(text.str(), file.string());
}

} // namespace megac::models
