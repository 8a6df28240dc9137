// Checkpoint directories: atomic save, verified load, fallback to older steps (Checkpoint.h).
#include "runtime/checkpoint/Checkpoint.h"

#include "runtime/io/Files.h"
#include "runtime/io/Json.h"
#include "runtime/io/Safetensors.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sstream>
#include <unistd.h>

namespace megac::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";
constexpr const char *kMetaFile = "meta.json";

std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

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

std::string
metaJson(const CheckpointMeta &meta,
         const std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> &files) {
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
  os << ",\n  \"files\": {";
  first = true;
  for (const auto &[name, info] : files) {
    os << (first ? "\n" : ",\n") << "    " << json::quote(name) << ": {\"bytes\": " << info.first
       << ", \"crc32\": \"" << hex32(info.second) << "\"}";
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

/// meta.json of `stepDir`: the meta and the file table (name -> bytes, crc32).
StatusOr<std::pair<CheckpointMeta, std::map<std::string, std::pair<uint64_t, uint32_t>>>>
readMeta(const std::string &stepDir) {
  std::string path = stepDir + "/" + kMetaFile;
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "checkpoint metadata"));
  StatusOr<json::Value> parsed =
      json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  if (!parsed.isOk())
    return Status::error(path + " is not valid JSON (" + parsed.status().message() + ")");
  const json::Value &root = *parsed;
  if (root.kind != json::Value::Kind::object)
    return Status::error(path + " is not a JSON object");
  ASSIGN_OR_RETURN(int64_t version, intMember(root, "format_version", path));
  if (version != kFormatVersion)
    return Status::error(path + ": format_version " + std::to_string(version) +
                         " is not supported (this megac reads version " +
                         std::to_string(kFormatVersion) + ")");
  CheckpointMeta meta;
  ASSIGN_OR_RETURN(meta.step, intMember(root, "step", path));
  ASSIGN_OR_RETURN(meta.dataPosition, intMember(root, "data_position", path));
  ASSIGN_OR_RETURN(int64_t seed, intMember(root, "seed", path));
  meta.seed = static_cast<uint64_t>(seed);
  ASSIGN_OR_RETURN(meta.model, stringMember(root, "model", path));
  ASSIGN_OR_RETURN(meta.layout, stringMember(root, "layout", path));
  if (const json::Value *config = root.find("config");
      config && config->kind == json::Value::Kind::object)
    for (size_t i = 0; i < config->keys.size(); ++i)
      if (config->items[i].kind == json::Value::Kind::string)
        meta.config[config->keys[i]] = config->items[i].string;
  if (const json::Value *scaler = root.find("loss_scaler");
      scaler && scaler->kind == json::Value::Kind::object) {
    const json::Value *scale = scaler->find("scale");
    if (!scale || scale->kind != json::Value::Kind::number)
      return Status::error(path + ": loss_scaler has no numeric \"scale\"");
    LossScalerState s;
    s.scale = scale->number;
    ASSIGN_OR_RETURN(s.growthTracker, intMember(*scaler, "growth_tracker", path));
    ASSIGN_OR_RETURN(s.hysteresisTracker, intMember(*scaler, "hysteresis_tracker", path));
    meta.lossScaler = s;
  }
  const json::Value *files = root.find("files");
  if (!files || files->kind != json::Value::Kind::object)
    return Status::error(path + ": missing \"files\"");
  std::map<std::string, std::pair<uint64_t, uint32_t>> table;
  for (size_t i = 0; i < files->keys.size(); ++i) {
    const json::Value &entry = files->items[i];
    ASSIGN_OR_RETURN(int64_t size, intMember(entry, "bytes", path));
    ASSIGN_OR_RETURN(std::string crc, stringMember(entry, "crc32", path));
    char *end = nullptr;
    unsigned long value = std::strtoul(crc.c_str(), &end, 16);
    if (crc.empty() || *end != '\0' || value > 0xFFFFFFFFul)
      return Status::error(path + ": crc32 of '" + files->keys[i] + "' is not hex");
    table[files->keys[i]] = {static_cast<uint64_t>(size), static_cast<uint32_t>(value)};
  }
  for (const char *name : {kModelFile, kOptimizerFile})
    if (!table.count(name))
      return Status::error(path + ": the file table has no '" + name + "'");
  return std::pair{std::move(meta), std::move(table)};
}

/// The safetensors file `name` of `stepDir`, after checking its size and CRC32.
StatusOr<TensorMap> readVerified(const std::string &stepDir, const std::string &name,
                                 std::pair<uint64_t, uint32_t> expected) {
  std::string path = stepDir + "/" + name;
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "checkpoint file"));
  if (bytes.size() != expected.first)
    return Status::error(path + " is " + std::to_string(bytes.size()) + " bytes, but " + kMetaFile +
                         " records " + std::to_string(expected.first) + " (truncated or damaged)");
  uint32_t crc = crc32(bytes);
  if (crc != expected.second)
    return Status::error(path + " has CRC32 " + hex32(crc) + ", but " + kMetaFile + " records " +
                         hex32(expected.second) + " (corrupt)");
  StatusOr<TensorMap> tensors = readSafetensors(path);
  if (!tensors.isOk())
    return Status::error(path + ": " + tensors.status().message());
  return tensors;
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
  static const std::array<uint32_t, 256> table = makeCrcTable();
  crc = ~crc;
  for (uint8_t b : bytes)
    crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string stepPath(const std::string &dir, int64_t step) {
  return dir + "/step-" + std::to_string(step);
}

Status saveCheckpoint(const std::string &dir, const CheckpointMeta &meta, const TensorMap &model,
                      const TensorMap &optimizer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create checkpoint directory '" + dir + "': " + ec.message());
  std::string target = stepPath(dir, meta.step);
  std::string tmp = target + ".tmp";
  fs::remove_all(tmp, ec); // a save that crashed earlier
  if (!fs::create_directory(tmp, ec) || ec)
    return Status::error("cannot create '" + tmp + "': " + ec.message());
  std::map<std::string, std::string> info = {{"producer", "megac train"},
                                             {"step", std::to_string(meta.step)}};
  std::vector<std::pair<std::string, std::pair<uint64_t, uint32_t>>> files;
  for (auto [name, tensors] : {std::pair{kModelFile, &model}, {kOptimizerFile, &optimizer}}) {
    std::string path = tmp + "/" + name;
    RETURN_IF_ERROR(writeSafetensors(path, *tensors, info))
        << " (writing checkpoint " << target << ")";
    // The checksum of the bytes on disk, read back: a write that went wrong is caught here.
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "checkpoint file"));
    files.push_back({name, {bytes.size(), crc32(bytes)}});
  }
  std::string text = metaJson(meta, files);
  std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(text.data()), text.size());
  RETURN_IF_ERROR(writeFileAtomically(tmp + "/" + kMetaFile, {&piece, 1}));
  RETURN_IF_ERROR(syncDirectory(tmp));
  // Replace an older save of the same step: move it aside first, so a crash leaves one of them.
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
  RETURN_IF_ERROR(writeFileAtomically(dir + "/latest", {&latestPiece, 1}));
  fs::remove_all(old, ec);
  return Status::ok();
}

StatusOr<Checkpoint> readCheckpoint(const std::string &stepDir) {
  ASSIGN_OR_RETURN(auto metaAndFiles, readMeta(stepDir));
  Checkpoint ckpt;
  ckpt.meta = std::move(metaAndFiles.first);
  ckpt.path = stepDir;
  const auto &files = metaAndFiles.second;
  ASSIGN_OR_RETURN(ckpt.model, readVerified(stepDir, kModelFile, files.at(kModelFile)));
  ASSIGN_OR_RETURN(ckpt.optimizer, readVerified(stepDir, kOptimizerFile, files.at(kOptimizerFile)));
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

StatusOr<Checkpoint> loadLatestCheckpoint(const std::string &dir,
                                          std::vector<std::string> *refused) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::error("checkpoint directory '" + dir + "' does not exist");
  std::vector<int64_t> candidates;
  std::vector<std::string> reasons;
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
      reasons.push_back(latestPath + " does not name a step ('" + text.substr(0, 32) + "')");
  } else if (fs::exists(latestPath, ec)) {
    reasons.push_back(latest.status().message());
  }
  for (int64_t step : listCheckpointSteps(dir))
    if (std::find(candidates.begin(), candidates.end(), step) == candidates.end())
      candidates.push_back(step);
  if (candidates.empty())
    return Status::error("no checkpoint in '" + dir + "' (no 'latest' file and no step-N " +
                         "directories with a meta.json)");
  for (size_t i = 0; i < candidates.size(); ++i) {
    StatusOr<Checkpoint> ckpt = readCheckpoint(stepPath(dir, candidates[i]));
    if (ckpt.isOk())
      return ckpt;
    std::string why = ckpt.status().message();
    if (refused && i + 1 < candidates.size())
      refused->push_back("refusing checkpoint: " + why + "; trying " +
                         stepPath(dir, candidates[i + 1]) + " next");
    reasons.push_back(why);
  }
  std::string all;
  for (const std::string &r : reasons)
    all += (all.empty() ? "" : "; ") + r;
  return Status::error("no usable checkpoint in '" + dir + "': " + all);
}

} // namespace megac::runtime::checkpoint
