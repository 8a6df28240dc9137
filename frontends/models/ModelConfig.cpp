// Parsing and validation of model spec strings.
#include "frontends/models/ModelConfig.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

namespace megac::models {

const char *archName(Arch arch) {
  switch (arch) {
  case Arch::gpt:
    return "gpt";
  case Arch::bert:
    return "bert";
  case Arch::t5:
    return "t5";
  case Arch::llama:
    return "llama";
  case Arch::mixtral:
    return "mixtral";
  case Arch::nemotron:
    return "nemotron";
  }
  return "?";
}

namespace {

const std::vector<std::string> &keysOf(Arch arch) {
  static const std::vector<std::string> bert = {"layers", "hidden", "heads", "ffn",  "seq",
                                                "vocab",  "batch",  "tied",  "gelu", "dtype"};
  static const std::vector<std::string> gpt = {
      "layers", "hidden", "heads",    "ffn",       "seq",        "vocab",   "batch",  "tied",
      "gelu",   "dtype",  "norm_eps", "positions", "scale_attn", "hf_gpt2", "padding"};
  static const std::vector<std::string> t5 = {"layers", "enc_layers", "dec_layers", "hidden",
                                              "heads",  "ffn",        "seq",        "dec_seq",
                                              "vocab",  "batch",      "tied",       "dtype"};
  static const std::vector<std::string> llama = {
      "layers", "hidden", "heads", "kv_heads",   "ffn",      "seq",    "vocab",
      "batch",  "tied",   "dtype", "rope_theta", "norm_eps", "padding"};
  static const std::vector<std::string> mixtral = {
      "layers",  "hidden", "heads",    "kv_heads",   "ffn",        "seq",
      "vocab",   "batch",  "tied",     "dtype",      "rope_theta", "norm_eps",
      "experts", "topk",   "capacity", "shared_ffn", "norm_topk",  "qwen2_moe", "padding"};
  // transformers' config fields of the llama family (HfConfig.h), after each arch's own keys.
  static const std::vector<std::string> family = {"head_dim", "qkv_bias", "o_bias", "mlp_bias",
                                                  "rope_llama3"};
  auto with = [](std::vector<std::string> keys, const std::vector<std::string> &more) {
    keys.insert(keys.end(), more.begin(), more.end());
    return keys;
  };
  static const std::vector<std::string> llamaFamily = with(llama, family);
  static const std::vector<std::string> mixtralFamily = with(mixtral, family);
  static const std::vector<std::string> nemotron = with(llamaFamily, {"rotary_pct"});
  if (arch == Arch::llama)
    return llamaFamily;
  if (arch == Arch::mixtral)
    return mixtralFamily;
  if (arch == Arch::nemotron)
    return nemotron;
  return arch == Arch::t5 ? t5 : arch == Arch::gpt ? gpt : bert;
}

std::string join(const std::vector<std::string> &items) {
  std::string out;
  for (const std::string &s : items)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

ConfigResult fail(std::string message) { return {std::nullopt, std::move(message)}; }

/// The shortest text that parses back to `v` ("10000", "1e-05").
std::string shortest(double v) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, end);
}

} // namespace

namespace {

/// Upper bounds of the integer spec keys: far above any model trained (the largest published
/// have ~10^2 layers, hidden ~10^4, vocabularies ~10^5-10^6), low enough that parameter counts
/// stay exact in 64-bit integers and a mistyped size fails at once instead of building for hours.
int64_t specBound(std::string_view key) {
  if (key == "layers" || key == "enc_layers" || key == "dec_layers")
    return 4096;
  if (key == "hidden")
    return int64_t(1) << 18;
  if (key == "heads" || key == "kv_heads" || key == "head_dim")
    return int64_t(1) << 14;
  if (key == "experts" || key == "topk")
    return int64_t(1) << 12;
  if (key == "ffn" || key == "seq" || key == "dec_seq" || key == "shared_ffn" || key == "positions")
    return int64_t(1) << 22;
  if (key == "vocab")
    return 2147483647;     // token ids are int32
  return int64_t(1) << 20; // batch
}

/// Forward FLOPs of one pass, in floating point: 2 x tokens x (the layers' matrices + the
/// head) + the attention scores, for the bound on what megac counts in 64-bit integers.
double approximateForwardFlops(const ModelConfig &c) {
  double h = double(c.hidden), layers = double(c.totalLayers() > 0 ? c.totalLayers() : c.layers);
  double tokens = double(c.batch) * double(std::max(c.seq, c.decSeq));
  double routed = c.arch == Arch::mixtral ? double(c.topk) : 1.0;
  double perLayer = 4 * h * h + 3 * h * double(c.ffn) * routed;
  return 2 * tokens * (layers * perLayer + double(c.vocab) * h) +
         4 * tokens * double(std::max(c.seq, c.decSeq)) * h * layers;
}

} // namespace

ConfigResult parseModelSpec(std::string_view spec) {
  auto colon = spec.find(':');
  std::string archText(spec.substr(0, colon));
  ModelConfig c;
  if (archText == "gpt")
    c.arch = Arch::gpt;
  else if (archText == "bert")
    c.arch = Arch::bert;
  else if (archText == "t5")
    c.arch = Arch::t5;
  else if (archText == "llama")
    c.arch = Arch::llama;
  else if (archText == "mixtral")
    c.arch = Arch::mixtral;
  else if (archText == "nemotron")
    c.arch = Arch::nemotron;
  else
    return fail("unknown model '" + archText + "' in spec '" + std::string(spec) +
                "'; expected gpt, bert, t5, llama, mixtral or nemotron (e.g. "
                "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=128)");

  const std::vector<std::string> &known = keysOf(c.arch);
  std::map<std::string, std::string> values;
  std::string_view rest = colon == std::string_view::npos ? "" : spec.substr(colon + 1);
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
    auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fail("model spec item '" + std::string(item) + "' is not key=value");
    std::string key(item.substr(0, eq)), value(item.substr(eq + 1));
    if (std::find(known.begin(), known.end(), key) == known.end())
      return fail("unknown key '" + key + "' for " + archText + "; known keys: " + join(known));
    if (values.count(key))
      return fail("key '" + key + "' is given twice");
    values[key] = value;
  }

  std::string error;
  auto integer = [&](const char *key, int64_t fallback) -> int64_t {
    auto it = values.find(key);
    if (it == values.end())
      return fallback;
    int64_t v = 0;
    const std::string &text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if ((ec != std::errc() || end != text.data() + text.size() || v < 1) && error.empty())
      error = "key '" + std::string(key) + "' needs a positive integer, got '" + text + "'";
    int64_t bound = specBound(key);
    if (v > bound) {
      if (error.empty())
        error = "key '" + std::string(key) + "' is " + text + ", above megac's bound of " +
                std::to_string(bound) + " for it";
      return bound; // keeps derived sizes (ffn = 4 x hidden) in range until the error is seen
    }
    return v;
  };
  c.layers = integer("layers", 0);
  c.hidden = integer("hidden", 0);
  c.heads = integer("heads", 0);
  c.seq = integer("seq", 0);
  c.vocab = integer("vocab", 0);
  c.batch = integer("batch", 1);
  c.ffn = integer("ffn", c.llamaLike() ? llamaDefaultFfn(c.hidden) : 4 * c.hidden);
  c.experts = integer("experts", 0);
  c.topk = integer("topk", 0);
  c.sharedFfn = integer("shared_ffn", 0);
  c.kvHeads = integer("kv_heads", c.heads);
  c.headDimKey = integer("head_dim", 0);
  c.positions = integer("positions", 0);
  if (c.arch == Arch::t5) {
    c.encLayers = integer("enc_layers", c.layers);
    c.decLayers = integer("dec_layers", c.layers);
    c.decSeq = integer("dec_seq", c.seq);
    c.layers = 0;
  }
  auto real = [&](const char *key, double fallback) -> double {
    auto it = values.find(key);
    if (it == values.end())
      return fallback;
    double v = 0;
    const std::string &text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if ((ec != std::errc() || end != text.data() + text.size() || !(v > 0) || !std::isfinite(v)) &&
        error.empty())
      error = "key '" + std::string(key) + "' needs a positive number, got '" + text + "'";
    return v;
  };
  c.ropeTheta = real("rope_theta", c.ropeTheta);
  c.normEps = real("norm_eps", c.normEps);
  if (auto it = values.find("capacity"); it != values.end() && it->second != "0")
    c.capacity = real("capacity", 0.0);
  c.rotaryPct = real("rotary_pct", 1.0);
  if (!error.empty())
    return fail(error);
  if (c.rotaryPct > 1)
    return fail("key 'rotary_pct' needs a fraction in (0, 1], got '" + values["rotary_pct"] + "'");
  if (auto it = values.find("rope_llama3"); it != values.end()) {
    std::vector<double> parts; // FACTOR:LOW:HIGH:ORIGINAL; -1 for a part that is no number > 0
    std::string_view text = it->second;
    for (bool more = true; more;) {
      auto sep = text.find(':');
      std::string_view part = text.substr(0, sep);
      double v = 0;
      auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
      bool number =
          ec == std::errc() && end == part.data() + part.size() && v > 0 && std::isfinite(v);
      parts.push_back(number ? v : -1);
      more = sep != std::string_view::npos;
      if (more)
        text = text.substr(sep + 1);
    }
    bool ok = parts.size() == 4 &&
              std::all_of(parts.begin(), parts.end(), [](double v) { return v > 0; }) &&
              parts[3] == std::floor(parts[3]) && parts[3] <= double(int64_t(1) << 22) &&
              parts[2] > parts[1];
    if (!ok)
      return fail("key 'rope_llama3' needs FACTOR:LOW:HIGH:ORIGINAL (numbers > 0, HIGH > LOW, "
                  "ORIGINAL an integer; e.g. 8:1:4:8192), got '" +
                  it->second + "'");
    c.ropeLlama3 = {parts[0], parts[1], parts[2], static_cast<int64_t>(parts[3])};
  }

  c.tied = !c.llamaLike(); // Llama's head is its own matrix; the others share the table
  if (auto it = values.find("tied"); it != values.end()) {
    if (it->second != "0" && it->second != "1")
      return fail("key 'tied' needs 0 or 1, got '" + it->second + "'");
    c.tied = it->second == "1";
  }
  for (auto [key, flag] : {std::pair{"qkv_bias", &c.qkvBias},
                           {"o_bias", &c.oBias},
                           {"mlp_bias", &c.mlpBias},
                           {"norm_topk", &c.normTopk},
                           {"qwen2_moe", &c.qwen2MoeNames},
                           {"scale_attn", &c.scaleAttn},
                           {"hf_gpt2", &c.hfGpt2},
                           {"padding", &c.padding}})
    if (auto it = values.find(key); it != values.end()) {
      if (it->second != "0" && it->second != "1")
        return fail("key '" + std::string(key) + "' needs 0 or 1, got '" + it->second + "'");
      *flag = it->second == "1";
    }
  if (auto it = values.find("gelu"); it != values.end()) {
    if (it->second != "erf" && it->second != "tanh")
      return fail("key 'gelu' needs erf or tanh, got '" + it->second + "'");
    c.gelu = it->second == "tanh" ? dsl::Gelu::tanh : dsl::Gelu::erf;
  }
  if (auto it = values.find("dtype"); it != values.end()) {
    static const std::map<std::string, dsl::DType> dtypes = {{"f64", dsl::DType::f64},
                                                             {"f32", dsl::DType::f32},
                                                             {"bf16", dsl::DType::bf16},
                                                             {"f16", dsl::DType::f16}};
    auto d = dtypes.find(it->second);
    if (d == dtypes.end())
      return fail("key 'dtype' needs f64, f32, bf16 or f16, got '" + it->second + "'");
    c.dtype = d->second;
  }

  // Required keys, then consistency.
  std::vector<std::string> required = {"hidden", "heads", "seq", "vocab"};
  if (c.arch == Arch::t5) {
    if (!values.count("layers") && (!values.count("enc_layers") || !values.count("dec_layers")))
      return fail("t5 needs enc_layers and dec_layers (or layers for both)");
  } else {
    required.insert(required.begin(), "layers");
  }
  if (c.arch == Arch::mixtral) {
    required.push_back("experts");
    required.push_back("topk");
  }
  if (c.arch == Arch::nemotron)
    required.push_back("ffn"); // no rule gives Nemotron's MLP size
  for (const std::string &key : required)
    if (!values.count(key))
      return fail("missing key '" + key + "' for " + archText);
  if (c.headDimKey == 0 && c.hidden % c.heads != 0)
    return fail("key 'hidden' (" + std::to_string(c.hidden) +
                ") is not divisible by key 'heads' (" + std::to_string(c.heads) + ")");
  if (c.positions > 0 && c.seq > c.positions)
    return fail("key 'seq' (" + std::to_string(c.seq) + ") is longer than key 'positions' (" +
                std::to_string(c.positions) + "), the rows of the learned position table");
  if (c.heads % c.kvHeads != 0)
    return fail("key 'heads' (" + std::to_string(c.heads) + ") is not divisible by key " +
                "'kv_heads' (" + std::to_string(c.kvHeads) +
                "); grouped-query attention needs kv_heads to divide heads");
  if (c.arch == Arch::mixtral && c.topk > c.experts)
    return fail("key 'topk' (" + std::to_string(c.topk) + ") is larger than key 'experts' (" +
                std::to_string(c.experts) + "): each token is routed to topk distinct experts");
  if (c.llamaLike() && c.rotaryDim() < 2)
    return fail("key 'rotary_pct' (" + shortest(c.rotaryPct) + ") leaves no pair of the " +
                std::to_string(c.headDim()) + " head dims to rotate");
  if (c.llamaLike() && c.rotaryDim() % 2 != 0)
    return fail(std::string(archName(c.arch)) +
                (c.rotaryPct < 1 ? "'s rotary dims rotary_pct x head_dim ("
                 : c.headDimKey  ? "'s head_dim ("
                                 : "'s head dim hidden/heads (") +
                std::to_string(c.rotaryDim()) +
                ") is odd; rotary embeddings rotate pairs of dims, so it must be even");
  // FLOP and parameter counts are int64 (the cost interface, describe, plan): refuse a model
  // whose forward pass would overflow them rather than print a wrapped number.
  constexpr double kCountLimit = 4.6e18; // ~2^62
  if (double flops = approximateForwardFlops(c); flops > kCountLimit) {
    char text[64];
    std::snprintf(text, sizeof text, "%.3g", flops);
    return fail("model spec '" + std::string(spec) + "' is too large: about " + text +
                " FLOP per forward pass of batch " + std::to_string(c.batch) +
                ", beyond the 64-bit counts megac keeps (4.6e18); use smaller sizes or batch");
  }
  return {c, {}};
}

int64_t llamaDefaultFfn(int64_t hidden) {
  int64_t f = 2 * 4 * hidden / 3;
  return (f + 255) / 256 * 256;
}

std::string ModelConfig::spec() const {
  std::string s = std::string(archName(arch)) + ":";
  if (arch == Arch::t5)
    s += "enc_layers=" + std::to_string(encLayers) + ",dec_layers=" + std::to_string(decLayers);
  else
    s += "layers=" + std::to_string(layers);
  s += ",hidden=" + std::to_string(hidden) + ",heads=" + std::to_string(heads);
  if (llamaLike())
    s += ",kv_heads=" + std::to_string(kvHeads);
  if (llamaLike() && headDimKey > 0)
    s += ",head_dim=" + std::to_string(headDimKey);
  if (arch == Arch::mixtral)
    s += ",experts=" + std::to_string(experts) + ",topk=" + std::to_string(topk);
  s += ",ffn=" + std::to_string(ffn) + ",seq=" + std::to_string(seq);
  if (arch == Arch::t5)
    s += ",dec_seq=" + std::to_string(decSeq);
  s += ",vocab=" + std::to_string(vocab) + ",batch=" + std::to_string(batch) +
       ",tied=" + (tied ? "1" : "0");
  if (arch == Arch::mixtral && capacity > 0)
    s += ",capacity=" + shortest(capacity);
  // Qwen2-MoE's keys only when set, so earlier mixtral specs read back unchanged.
  if (arch == Arch::mixtral && sharedFfn > 0)
    s += ",shared_ffn=" + std::to_string(sharedFfn);
  if (arch == Arch::mixtral && !normTopk)
    s += ",norm_topk=0";
  if (arch == Arch::mixtral && qwen2MoeNames)
    s += ",qwen2_moe=1";
  if (llamaLike())
    s += ",rope_theta=" + shortest(ropeTheta) + ",norm_eps=" + shortest(normEps);
  // The llama family's optional keys only when set, so earlier specs read back unchanged.
  if (llamaLike()) {
    for (auto [key, flag] :
         {std::pair{",qkv_bias=1", qkvBias}, {",o_bias=1", oBias}, {",mlp_bias=1", mlpBias}})
      if (flag)
        s += key;
    if (ropeLlama3.factor > 0)
      s += ",rope_llama3=" + shortest(ropeLlama3.factor) + ":" +
           shortest(ropeLlama3.lowFreqFactor) + ":" + shortest(ropeLlama3.highFreqFactor) + ":" +
           std::to_string(ropeLlama3.originalMaxPositions);
    if (rotaryPct != 1.0)
      s += ",rotary_pct=" + shortest(rotaryPct);
  } else if (arch != Arch::t5)
    s += std::string(",gelu=") + (gelu == dsl::Gelu::tanh ? "tanh" : "erf");
  // GPT-2's keys only when set, so earlier gpt specs read back unchanged.
  if (arch == Arch::gpt) {
    if (positions > 0)
      s += ",positions=" + std::to_string(positions);
    if (normEps != 1e-5)
      s += ",norm_eps=" + shortest(normEps);
    if (!scaleAttn)
      s += ",scale_attn=0";
    if (hfGpt2)
      s += ",hf_gpt2=1";
  }
  if (padding)
    s += ",padding=1";
  s += std::string(",dtype=") + dsl::dtypeName(dtype);
  return s;
}

} // namespace megac::models
