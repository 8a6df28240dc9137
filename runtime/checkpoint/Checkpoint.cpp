// Checkpoint directories: meta.json (format versions 1 and 2), atomic save, verified load,
// fallback to older steps (Checkpoint.h).
#include "runtime/checkpoint/Checkpoint.h"

#include "runtime/checkpoint/SaveFolder.h"
#include "runtime/checkpoint/ShardFiles.h"

#include "runtime/io/Safetensors.h"
#include "support/Checked.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <sstream>
#include <unistd.h>
#include <zlib.h>

namespace megac::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";
constexpr const char *kMetaFile = "meta.json";

std::string hex32(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, value);
  return buf;
}

/// fsyncs a directory, so the entries renamed into it survive a crash.
Status syncDirectory(const std::string &dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return Status::error("cannot open directory '" + dir + "': " + std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0)
    return Status::error("cannot fsync directory '" + dir + "': " + std::strerror(err));
  return Status::ok();
}

void writeShape(std::ostringstream &os, const std::vector<int64_t> &shape) {
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << "]";
}

void writeTable(std::ostringstream &os, const char *key, const TensorTable &table) {
  os << ",\n  " << json::quote(key) << ": {";
  bool first = true;
  for (const auto &[name, tensor] : table) {
    os << (first ? "\n" : ",\n") << "    " << json::quote(name) << ": {\"dtype\": \""
       << safetensorsDtype(tensor.dtype) << "\", \"shape\": ";
    writeShape(os, tensor.shape);
    os << ", \"shards\": [";
    for (size_t i = 0; i < tensor.shards.size(); ++i) {
      const ShardRecord &shard = tensor.shards[i];
      os << (i ? ", " : "") << "{\"file\": " << json::quote(shard.file) << ", \"offset\": ";
      writeShape(os, shard.offset);
      os << ", \"shape\": ";
      writeShape(os, shard.shape);
      os << "}";
    }
    os << "]}";
    first = false;
  }
  os << (first ? "}" : "\n  }");
}

std::string metaJson(const CheckpointMeta &meta, const TensorTable &parameters,
                     const TensorTable &optimizer, const FileTable &files) {
  std::ostringstream os;
  os.precision(17);
  os << "{\n  \"format_version\": " << kFormatVersion << ",\n  \"step\": " << meta.step
     << ",\n  \"data_position\": " << meta.dataPosition << ",\n  \"seed\": " << meta.seed
     << ",\n  \"model\": " << json::quote(meta.model)
     << ",\n  \"layout\": " << json::quote(meta.layout) << ",\n  \"config\": {";
  bool first = true;
  for (const auto &[key, value] : meta.config) {
    os << (first ? "" : ", ") << json::quote(key) << ": " << json::quote(value);
    first = false;
  }
  os << "},\n  \"loss_scaler\": ";
  if (meta.lossScaler)
    os << "{\"scale\": " << meta.lossScaler->scale
       << ", \"growth_tracker\": " << meta.lossScaler->growthTracker
       << ", \"hysteresis_tracker\": " << meta.lossScaler->hysteresisTracker << "}";
  else
    os << "null";
  if (meta.fingerprint)
    os << ",\n  \"model_fingerprint\": " << fingerprintJson(*meta.fingerprint);
  writeTable(os, "parameters", parameters);
  writeTable(os, "optimizer", optimizer);
  os << ",\n  \"files\": {";
  first = true;
  for (const auto &[name, info] : files) {
    os << (first ? "\n" : ",\n") << "    " << json::quote(name) << ": {\"bytes\": " << info.bytes
       << ", \"crc32\": \"" << hex32(info.crc32) << "\"}";
    first = false;
  }
  os << "\n  }\n}\n";
  return os.str();
}

/// An integer member of a JSON object, or an error naming it.
StatusOr<int64_t> intMember(const json::Value &object, const char *key, const std::string &file) {
  const json::Value *v = object.find(key);
  if (!v || v->kind != json::Value::Kind::number || !v->isInteger)
    return Status::error(file + ": missing or non-integer \"" + key + "\"");
  return v->integer;
}

StatusOr<std::string> stringMember(const json::Value &object, const char *key,
                                   const std::string &file) {
  const json::Value *v = object.find(key);
  if (!v || v->kind != json::Value::Kind::string)
    return Status::error(file + ": missing or non-string \"" + key + "\"");
  return v->string;
}

StatusOr<std::vector<int64_t>> shapeMember(const json::Value &object, const char *key,
                                           const std::string &what) {
  const json::Value *v = object.find(key);
  if (!v || v->kind != json::Value::Kind::array)
    return Status::error(what + ": missing or non-array \"" + key + "\"");
  std::vector<int64_t> out;
  for (const json::Value &d : v->items) {
    if (d.kind != json::Value::Kind::number || !d.isInteger || d.integer < 0)
      return Status::error(what + ": \"" + key + "\" must hold non-negative integers");
    out.push_back(d.integer);
  }
  return out;
}

/// A version 2 tensor table ("parameters" or "optimizer"), checked: every shard lies inside
/// its tensor's global shape.
StatusOr<TensorTable> readTable(const json::Value &root, const char *key, const std::string &path) {
  const json::Value *table = root.find(key);
  if (!table || table->kind != json::Value::Kind::object)
    return Status::error(path + ": missing \"" + key + "\"");
  TensorTable out;
  for (size_t i = 0; i < table->keys.size(); ++i) {
    const json::Value &entry = table->items[i];
    std::string what = path + ": tensor '" + table->keys[i] + "'";
    TensorRecord tensor;
    ASSIGN_OR_RETURN(std::string dtype, stringMember(entry, "dtype", what));
    if (!dtypeFromSafetensors(dtype, tensor.dtype))
      return Status::error(what + ": unknown dtype '" + dtype + "'");
    ASSIGN_OR_RETURN(tensor.shape, shapeMember(entry, "shape", what));
    if (StatusOr<uint64_t> bytes = checkedByteSize(tensor.shape, dtypeSize(tensor.dtype));
        !bytes.isOk())
      return Status::error(what + ": " + bytes.status().message());
    const json::Value *shards = entry.find("shards");
    if (!shards || shards->kind != json::Value::Kind::array)
      return Status::error(what + ": missing \"shards\"");
    for (const json::Value &s : shards->items) {
      ShardRecord shard;
      ASSIGN_OR_RETURN(shard.file, stringMember(s, "file", what));
      ASSIGN_OR_RETURN(shard.offset, shapeMember(s, "offset", what));
      ASSIGN_OR_RETURN(shard.shape, shapeMember(s, "shape", what));
      bool inside =
          shard.offset.size() == tensor.shape.size() && shard.shape.size() == tensor.shape.size();
      for (size_t d = 0; inside && d < tensor.shape.size(); ++d)
        inside = shard.offset[d] <= tensor.shape[d] &&
                 shard.shape[d] <= tensor.shape[d] - shard.offset[d];
      if (!inside)
        return Status::error(what + ": a shard at " + shapeString(shard.offset) + " of shape " +
                             shapeString(shard.shape) + " lies outside its shape " +
                             shapeString(tensor.shape));
      tensor.shards.push_back(std::move(shard));
    }
    out.emplace(table->keys[i], std::move(tensor));
  }
  return out;
}

/// A version 1 checkpoint's table: each tensor of `file` whole, as one shard.
StatusOr<TensorTable> wholeTable(const std::string &stepDir, const std::string &file) {
  ASSIGN_OR_RETURN(auto infos, readSafetensorsHeader(stepDir + "/" + file));
  TensorTable out;
  for (auto &[name, info] : infos)
    out[name] = {info.first,
                 info.second,
                 {{file, std::vector<int64_t>(info.second.size(), 0), info.second}}};
  return out;
}

/// The shards of `table` as one tensor per shard, named by tensor, for a one-process save.
std::vector<ShardToWrite> wholeShards(const TensorMap &tensors) {
  std::vector<ShardToWrite> out;
  for (const auto &[name, t] : tensors)
    out.push_back({name, t.dtype, t.shape, [&t]() -> StatusOr<HostTensor> { return t; }});
  return out;
}

/// The step of a directory named "step-N" (N decimal), else -1.
int64_t stepOfName(const std::string &name) {
  if (!name.starts_with("step-") || name.size() == 5 || name.size() > 5 + 18)
    return -1;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9')
      return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

} // namespace

uint32_t crc32(std::span<const uint8_t> bytes, uint32_t crc) {
  // zlib's crc32 takes at most UINT_MAX bytes per call.
  uLong value = crc;
  for (size_t done = 0; done < bytes.size();) {
    uInt n = uInt(std::min<size_t>(bytes.size() - done, std::numeric_limits<uInt>::max()));
    value = ::crc32(value, bytes.data() + done, n);
    done += n;
  }
  return uint32_t(value);
}

std::string stepPath(const std::string &dir, int64_t step) {
  return dir + "/step-" + std::to_string(step);
}

std::string rankFileName(bool optimizer, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s-rank-%05d.safetensors", optimizer ? "optimizer" : "model",
                rank);
  return buf;
}

StatusOr<std::string> beginSave(const std::string &dir, int64_t step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create checkpoint directory '" + dir + "': " + ec.message());
  // Unique to this process: another run's save never collides with it. What crashed saves left
  // is removed by pruneSaveFolder after the next save that completes (and a crashed save of this
  // step under the name older megac versions used, here).
  std::string tmp = stepPath(dir, step) + tempSuffix();
  fs::remove_all(tmp, ec);
  fs::remove_all(stepPath(dir, step) + ".tmp", ec);
  if (!fs::create_directory(tmp, ec) || ec)
    return Status::error("cannot create '" + tmp + "': " + ec.message());
  return tmp;
}

Status commitSave(const std::string &dir, const std::string &tmp, const CheckpointMeta &meta,
                  const TensorTable &parameters, const TensorTable &optimizer,
                  const FileTable &files) {
  std::string target = stepPath(dir, meta.step);
  std::string text = sealMeta(metaJson(meta, parameters, optimizer, files));
  std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(text.data()), text.size());
  RETURN_IF_ERROR(writeFileAtomically(tmp + "/" + kMetaFile, {&piece, 1}));
  RETURN_IF_ERROR(syncDirectory(tmp));
  // Replace an older save of the same step: move it aside first, so a crash leaves one of them.
  std::error_code ec;
  std::string old = target + ".old";
  if (fs::exists(target, ec)) {
    fs::remove_all(old, ec);
    fs::rename(target, old, ec);
    if (ec)
      return Status::error("cannot move '" + target + "' aside: " + ec.message());
  }
  fs::rename(tmp, target, ec);
  if (ec)
    return Status::error("cannot rename '" + tmp + "' to '" + target + "': " + ec.message());
  RETURN_IF_ERROR(syncDirectory(dir));
  std::string latest = std::to_string(meta.step) + "\n";
  std::span<const uint8_t> latestPiece(reinterpret_cast<const uint8_t *>(latest.data()),
                                       latest.size());
  RETURN_IF_ERROR(writeFileAtomically(dir + "/latest", {&latestPiece, 1}, tempSuffix()));
  fs::remove_all(old, ec);
  return Status::ok();
}

Status saveCheckpoint(const std::string &dir, const CheckpointMeta &meta, const TensorMap &model,
                      const TensorMap &optimizer) {
  ASSIGN_OR_RETURN(std::string tmp, beginSave(dir, meta.step));
  std::map<std::string, std::string> info = {{"producer", "megac train"},
                                             {"step", std::to_string(meta.step)}};
  TensorTable tables[2];
  FileTable files;
  for (int kind = 0; kind < 2; ++kind) {
    const TensorMap &tensors = kind ? optimizer : model;
    if (tensors.empty())
      continue;
    std::string file = rankFileName(kind == 1, 0);
    ASSIGN_OR_RETURN(files[file], writeShardFile(tmp + "/" + file, wholeShards(tensors), info));
    for (const auto &[name, t] : tensors)
      tables[kind][name] = {
          t.dtype, t.shape, {{file, std::vector<int64_t>(t.shape.size(), 0), t.shape}}};
  }
  return commitSave(dir, tmp, meta, tables[0], tables[1], files);
}

StatusOr<CheckpointIndex> readCheckpointIndex(const std::string &stepDir) {
  std::string path = stepDir + "/" + kMetaFile;
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "checkpoint metadata"));
  RETURN_IF_ERROR(
      verifyMetaSeal({reinterpret_cast<const char *>(bytes.data()), bytes.size()}, path));
  StatusOr<json::Value> parsed =
      json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  if (!parsed.isOk())
    return Status::error(path + " is not valid JSON (" + parsed.status().message() + ")");
  const json::Value &root = *parsed;
  if (root.kind != json::Value::Kind::object)
    return Status::error(path + " is not a JSON object");
  CheckpointIndex index;
  index.path = stepDir;
  ASSIGN_OR_RETURN(index.formatVersion, intMember(root, "format_version", path));
  if (index.formatVersion != 1 && index.formatVersion != kFormatVersion)
    return Status::error(path + ": format_version " + std::to_string(index.formatVersion) +
                         " is not supported (this megac reads versions 1 and " +
                         std::to_string(kFormatVersion) + ")");
  CheckpointMeta &meta = index.meta;
  ASSIGN_OR_RETURN(meta.step, intMember(root, "step", path));
  ASSIGN_OR_RETURN(meta.dataPosition, intMember(root, "data_position", path));
  // The step must be the one the folder is named for: a flipped digit would resume at another
  // batch and learning-rate step without a word.
  if (meta.step < 0 || meta.dataPosition < 0)
    return Status::error(path + ": step " + std::to_string(meta.step) + " and data_position " +
                         std::to_string(meta.dataPosition) + " must not be negative");
  std::string folder = std::filesystem::path(stepDir).filename().string();
  bool named = folder.size() > 5 && folder.rfind("step-", 0) == 0 &&
               folder.find_first_not_of("0123456789", 5) == std::string::npos;
  if (named && folder != "step-" + std::to_string(meta.step))
    return Status::error(path + ": \"step\": " + std::to_string(meta.step) +
                         " is not the step of its folder '" + folder + "'");
  ASSIGN_OR_RETURN(int64_t seed, intMember(root, "seed", path));
  meta.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(meta.model, stringMember(root, "model", path));
  ASSIGN_OR_RETURN(meta.layout, stringMember(root, "layout", path));
  if (const json::Value *config = root.find("config");
      config && config->kind == json::Value::Kind::object)
    for (size_t i = 0; i < config->keys.size(); ++i)
      if (config->items[i].kind == json::Value::Kind::string)
        meta.config[config->keys[i]] = config->items[i].string;
  if (const json::Value *fingerprint = root.find("model_fingerprint")) {
    ASSIGN_OR_RETURN(meta.fingerprint, parseFingerprint(*fingerprint, path));
  }
  if (const json::Value *scaler = root.find("loss_scaler");
      scaler && scaler->kind == json::Value::Kind::object) {
    const json::Value *scale = scaler->find("scale");
    if (!scale || scale->kind != json::Value::Kind::number)
      return Status::error(path + ": loss_scaler has no numeric \"scale\"");
    LossScalerState s;
    s.scale = scale->number;
    if (!std::isfinite(s.scale) || s.scale <= 0)
      return Status::error(path + ": loss_scaler \"scale\" " + std::to_string(s.scale) +
                           " is not a positive finite number (a zero scale skips every step)");
    ASSIGN_OR_RETURN(s.growthTracker, intMember(*scaler, "growth_tracker", path));
    ASSIGN_OR_RETURN(s.hysteresisTracker, intMember(*scaler, "hysteresis_tracker", path));
    if (s.growthTracker < 0 || s.hysteresisTracker < 0)
      return Status::error(path + ": loss_scaler trackers must not be negative");
    meta.lossScaler = s;
  }
  const json::Value *files = root.find("files");
  if (!files || files->kind != json::Value::Kind::object)
    return Status::error(path + ": missing \"files\"");
  for (size_t i = 0; i < files->keys.size(); ++i) {
    const json::Value &entry = files->items[i];
    // Every file of a step lies in its folder: a name with a path in it ("../step-1/...") would
    // resume one step with another's weights.
    const std::string &name = files->keys[i];
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos)
      return Status::error(path + ": file name '" + name +
                           "' is not a plain name in the step folder");
    ASSIGN_OR_RETURN(int64_t size, intMember(entry, "bytes", path));
    if (size < 0)
      return Status::error(path + ": '" + name + "' has a negative size");
    ASSIGN_OR_RETURN(std::string crc, stringMember(entry, "crc32", path));
    char *end = nullptr;
    unsigned long value = std::strtoul(crc.c_str(), &end, 16);
    if (crc.empty() || *end != '\0' || value > 0xFFFFFFFFul)
      return Status::error(path + ": crc32 of '" + files->keys[i] + "' is not hex");
    index.files[files->keys[i]] = {static_cast<uint64_t>(size), static_cast<uint32_t>(value)};
  }
  if (index.formatVersion == 1) {
    for (const char *name : {kModelFile, kOptimizerFile})
      if (!index.files.count(name))
        return Status::error(path + ": the file table has no '" + name + "'");
    ASSIGN_OR_RETURN(index.parameters, wholeTable(stepDir, kModelFile));
    ASSIGN_OR_RETURN(index.optimizer, wholeTable(stepDir, kOptimizerFile));
    return index;
  }
  ASSIGN_OR_RETURN(index.parameters, readTable(root, "parameters", path));
  ASSIGN_OR_RETURN(index.optimizer, readTable(root, "optimizer", path));
  for (const TensorTable *table : {&index.parameters, &index.optimizer})
    for (const auto &[name, tensor] : *table)
      for (const ShardRecord &shard : tensor.shards)
        if (!index.files.count(shard.file))
          return Status::error(path + ": a shard of '" + name + "' lies in '" + shard.file +
                               "', which the file table does not list");
  return index;
}

StatusOr<Checkpoint> readCheckpoint(const std::string &stepDir, CheckpointParts parts) {
  ASSIGN_OR_RETURN(CheckpointIndex index, readCheckpointIndex(stepDir));
  Checkpoint ckpt;
  ckpt.meta = index.meta;
  ckpt.path = stepDir;
  ShardReader reader(index);
  // Every file when everything is read; otherwise each file as a read first opens it.
  if (parts == CheckpointParts::all)
    RETURN_IF_ERROR(reader.verifyAll());
  for (auto [table, out] :
       {std::pair{&index.parameters, &ckpt.model}, std::pair{&index.optimizer, &ckpt.optimizer}})
    for (const auto &[name, tensor] : *table) {
      if (parts == CheckpointParts::parametersOnly && table == &index.optimizer)
        break;
      Box whole{std::vector<int64_t>(tensor.shape.size(), 0), tensor.shape};
      ASSIGN_OR_RETURN(HostTensor value, reader.readBox(*table, name, whole));
      out->emplace(name, std::move(value));
    }
  return ckpt;
}

std::vector<int64_t> listCheckpointSteps(const std::string &dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = stepOfName(it->path().filename().string());
    if (step >= 0 && it->is_directory(ec) && fs::exists(it->path() / kMetaFile, ec))
      steps.push_back(step);
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

StatusOr<std::vector<int64_t>> checkpointCandidates(const std::string &dir,
                                                    std::vector<std::string> &problems) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error("checkpoint directory '" + dir + "' does not exist");
  std::vector<int64_t> candidates;
  std::string latestPath = dir + "/latest";
  StatusOr<std::vector<uint8_t>> latest = readFileBytes(latestPath, "checkpoint pointer");
  if (latest.isOk()) {
    std::string text(latest->begin(), latest->end());
    while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
      text.pop_back();
    int64_t step = stepOfName("step-" + text);
    if (step >= 0)
      candidates.push_back(step);
    else
      problems.push_back(latestPath + " does not name a step ('" + text.substr(0, 32) + "')");
  } else if (fs::exists(latestPath, ec)) {
    problems.push_back(latest.status().message());
  }
  for (int64_t step : listCheckpointSteps(dir))
    if (std::find(candidates.begin(), candidates.end(), step) == candidates.end())
      candidates.push_back(step);
  if (candidates.empty())
    return Status::error("no checkpoint in '" + dir + "' (no 'latest' file and no step-N " +
                         "directories with a meta.json)");
  return candidates;
}

StatusOr<int64_t> pickCheckpoint(
    const std::string &dir, const std::vector<int64_t> &candidates,
    const std::vector<std::string> &problems, std::vector<std::string> *refused,
    const std::function<StatusOr<CandidateOutcome>(const std::string &stepDir)> &attempt) {
  if (refused && !candidates.empty())
    for (const std::string &problem : problems)
      refused->push_back(problem + "; trying " + stepPath(dir, candidates.front()) +
                         " (the newest checkpoint) instead");
  std::vector<std::string> reasons = problems;
  for (size_t i = 0; i < candidates.size(); ++i) {
    ASSIGN_OR_RETURN(CandidateOutcome outcome, attempt(stepPath(dir, candidates[i])));
    if (outcome.kind == CandidateOutcome::loaded)
      return candidates[i];
    if (outcome.kind == CandidateOutcome::fatal)
      return Status::error(outcome.why);
    if (refused && i + 1 < candidates.size())
      refused->push_back("refusing checkpoint: " + outcome.why + "; trying " +
                         stepPath(dir, candidates[i + 1]) + " next");
    reasons.push_back(outcome.why);
  }
  std::string all;
  for (const std::string &r : reasons)
    all += (all.empty() ? "" : "; ") + r;
  return Status::error("no usable checkpoint in '" + dir + "': " + all);
}

StatusOr<Checkpoint> loadLatestCheckpoint(const std::string &dir, std::vector<std::string> *refused,
                                          CheckpointParts parts) {
  std::vector<std::string> problems;
  ASSIGN_OR_RETURN(std::vector<int64_t> candidates, checkpointCandidates(dir, problems));
  std::optional<Checkpoint> picked;
  auto read = [&](const std::string &stepDir) -> StatusOr<CandidateOutcome> {
    StatusOr<Checkpoint> checkpoint = readCheckpoint(stepDir, parts);
    if (!checkpoint.isOk())
      return CandidateOutcome{CandidateOutcome::refused, checkpoint.status().message()};
    picked = std::move(checkpoint).value();
    return CandidateOutcome{CandidateOutcome::loaded, ""};
  };
  RETURN_IF_ERROR(pickCheckpoint(dir, candidates, problems, refused, read).status());
  return std::move(*picked);
}

} // namespace megac::runtime::checkpoint
