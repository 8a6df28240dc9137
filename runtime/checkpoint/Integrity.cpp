// meta.json's checksum and the model fingerprint (Integrity.h).
#include "runtime/checkpoint/Integrity.h"
#include "runtime/checkpoint/Checkpoint.h"

#include "support/HostTensor.h"

#include <cinttypes>
#include <cstdio>

namespace megac::runtime::checkpoint {

namespace {

constexpr std::string_view kSealKey = "\"meta_crc32\": \"";

std::string hex32(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, value);
  return buf;
}

uint32_t crcOf(std::string_view text) {
  return crc32({reinterpret_cast<const uint8_t *>(text.data()), text.size()});
}

/// Where the 8 hex digits of the seal start in `text`, or npos.
size_t sealAt(std::string_view text) {
  size_t at = text.rfind(kSealKey);
  if (at == std::string_view::npos || at + kSealKey.size() + 9 > text.size() ||
      text[at + kSealKey.size() + 8] != '"')
    return std::string_view::npos;
  return at + kSealKey.size();
}

std::string listNames(const std::vector<std::string> &names) {
  std::string out = names.front();
  if (names.size() > 1)
    out += " and " + std::to_string(names.size() - 1) + " more";
  return out;
}

} // namespace

std::string sealMeta(std::string text) {
  size_t at = sealAt(text);
  if (at == std::string::npos) {
    std::string original = text;
    size_t close = text.rfind('}');
    if (close == std::string::npos)
      return text;
    size_t end = close;
    while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' '))
      --end;
    bool empty = end > 0 && text[end - 1] == '{';
    text.replace(end, close - end,
                 std::string(empty ? "\n  " : ",\n  ") + std::string(kSealKey) + "00000000\"\n");
    at = sealAt(text);
    if (at == std::string::npos) // a malformed seal later in the text: nothing to seal
      return original;
  }
  text.replace(at, 8, "00000000");
  text.replace(at, 8, hex32(crcOf(text)));
  return text;
}

Status verifyMetaSeal(std::string_view text, const std::string &path) {
  size_t at = sealAt(text);
  if (at == std::string_view::npos) {
    if (text.find("\"meta_crc32\"") != std::string_view::npos)
      return Status::error(path + ": \"meta_crc32\" is not 8 hex digits (corrupt)");
    return Status::ok();
  }
  std::string copy(text);
  std::string recorded = copy.substr(at, 8);
  copy.replace(at, 8, "00000000");
  std::string actual = hex32(crcOf(copy));
  if (recorded != actual)
    return Status::error(path + " has CRC32 " + actual + ", but its \"meta_crc32\" records " +
                         recorded + " (corrupt or edited)");
  return Status::ok();
}

std::string fingerprintJson(const ModelFingerprint &f) {
  std::string out = "{\"model\": " + json::quote(f.model) +
                    ", \"graph_hash\": " + json::quote(f.graphHash) + ", \"parameters\": {";
  bool first = true;
  for (const auto &[name, shape] : f.parameters) {
    out += (first ? "\n    " : ",\n    ") + json::quote(name) + ": [";
    for (size_t i = 0; i < shape.size(); ++i)
      out += (i ? ", " : "") + std::to_string(shape[i]);
    out += "]";
    first = false;
  }
  return out + (first ? "}}" : "}}");
}

StatusOr<ModelFingerprint> parseFingerprint(const json::Value &value, const std::string &where) {
  auto bad = [&](const std::string &what) {
    return Status::error(where + ": \"model_fingerprint\" " + what);
  };
  if (value.kind != json::Value::Kind::object)
    return bad("is not an object");
  ModelFingerprint f;
  const json::Value *model = value.find("model"), *hash = value.find("graph_hash"),
                    *params = value.find("parameters");
  if (!model || model->kind != json::Value::Kind::string || !hash ||
      hash->kind != json::Value::Kind::string)
    return bad("lacks a string \"model\" or \"graph_hash\"");
  f.model = model->string;
  f.graphHash = hash->string;
  if (!params || params->kind != json::Value::Kind::object)
    return bad("lacks \"parameters\"");
  for (size_t i = 0; i < params->keys.size(); ++i) {
    const json::Value &shape = params->items[i];
    if (shape.kind != json::Value::Kind::array)
      return bad("parameter '" + params->keys[i] + "' has no shape");
    std::vector<int64_t> dims;
    for (const json::Value &d : shape.items) {
      if (d.kind != json::Value::Kind::number || !d.isInteger || d.integer < 0)
        return bad("parameter '" + params->keys[i] + "': dims must be non-negative integers");
      dims.push_back(d.integer);
    }
    f.parameters[params->keys[i]] = std::move(dims);
  }
  return f;
}

std::string fingerprintMismatch(const ModelFingerprint &saved, const ModelFingerprint &run) {
  std::vector<std::string> extra, missing;
  for (const auto &[name, shape] : saved.parameters) {
    auto it = run.parameters.find(name);
    if (it == run.parameters.end())
      extra.push_back(name);
    else if (it->second != shape)
      return "the checkpoint's parameter '" + name + "' has shape " + shapeString(shape) +
             "; this model's has " + shapeString(it->second) + " (checkpoint of " + saved.model +
             ", this run " + run.model + ")";
  }
  for (const auto &[name, shape] : run.parameters)
    if (!saved.parameters.count(name))
      missing.push_back(name);
  if (!extra.empty())
    return "the checkpoint has " + std::to_string(saved.parameters.size()) +
           " parameters, this model " + std::to_string(run.parameters.size()) + ": " +
           listNames(extra) + " not in this model (checkpoint of " + saved.model + ", this run " +
           run.model + ")";
  if (!missing.empty())
    return "this model has parameters the checkpoint lacks: " + listNames(missing) +
           " (checkpoint of " + saved.model + ", this run " + run.model + ")";
  if (saved.graphHash != run.graphHash)
    return "the checkpoint's model computes something else with the same parameters: " +
           saved.model + " (forward graph " + saved.graphHash + ") vs this run's " + run.model +
           " (" + run.graphHash + ")";
  return "";
}

} // namespace megac::runtime::checkpoint
