// The ONNX model a checkpoint records (CheckpointModel.h).
#include "driver/CheckpointModel.h"

#include "frontends/onnx/OnnxExport.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/exec/Executor.h"

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

namespace megac::driver {

namespace {

/// The size and CRC32 of the file at `path`.
StatusOr<std::pair<uint64_t, uint32_t>> sizeAndCrc(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::error("cannot open " + path);
  std::vector<char> chunk(1 << 20);
  uint64_t bytes = 0;
  uint32_t crc = 0;
  while (in) {
    in.read(chunk.data(), std::streamsize(chunk.size()));
    auto got = size_t(in.gcount());
    crc = runtime::checkpoint::crc32(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(chunk.data()), got), crc);
    bytes += got;
  }
  if (in.bad())
    return Status::error("cannot read " + path);
  return std::make_pair(bytes, crc);
}

std::string hex8(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "%08" PRIx32, v);
  return text;
}

std::optional<std::vector<int64_t>> parseDims(const std::string &text) {
  std::vector<int64_t> dims;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t x = text.find('x', pos);
    std::string d = text.substr(pos, x == std::string::npos ? std::string::npos : x - pos);
    if (d.empty() || d.size() > 12 || d.find_first_not_of("0123456789") != std::string::npos)
      return std::nullopt;
    dims.push_back(std::stoll(d));
    if (x == std::string::npos)
      break;
    pos = x + 1;
  }
  return dims;
}

} // namespace

std::string dimsString(const std::vector<int64_t> &dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

std::map<std::string, std::string> recordOnnxModel(const std::optional<std::string> &file,
                                                   const runtime::Executor &executor,
                                                   const std::string &logits) {
  std::map<std::string, std::string> entries;
  if (!file || std::filesystem::path(*file).extension() != ".onnx")
    return entries;
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::weakly_canonical(*file, ec);
  entries["onnx"] = ec ? std::filesystem::absolute(*file).string() : absolute.string();
  // The file was read moments ago by the import; an error here leaves the entries out and
  // generate/export then say the checkpoint does not record its model. Every --save-interval
  // save records it: the CRC of a big model is computed once while its mtime and size stay.
  static std::map<std::string, std::tuple<std::filesystem::file_time_type, uint64_t, uint32_t>>
      known;
  auto mtime = std::filesystem::last_write_time(*file, ec);
  auto it = known.find(*file);
  if (ec || it == known.end() || std::get<0>(it->second) != mtime ||
      std::get<1>(it->second) != std::filesystem::file_size(*file, ec)) {
    StatusOr<std::pair<uint64_t, uint32_t>> facts = sizeAndCrc(*file);
    if (!facts.isOk())
      return {};
    it = known.insert_or_assign(*file, std::make_tuple(mtime, facts->first, facts->second)).first;
  }
  entries["onnx_bytes"] = std::to_string(std::get<1>(it->second));
  entries["onnx_crc32"] = hex8(std::get<2>(it->second));
  if (auto info = executor.inputInfo("input_ids"); info.isOk())
    entries["onnx_input_ids"] = dimsString(info->shape);
  if (!logits.empty())
    entries["onnx_logits"] = logits;
  return entries;
}

StatusOr<std::optional<OnnxModelRecord>>
onnxRecordOf(const std::map<std::string, std::string> &config) {
  auto path = config.find("onnx");
  if (path == config.end())
    return std::optional<OnnxModelRecord>();
  OnnxModelRecord record;
  record.path = path->second;
  auto get = [&](const char *key) -> std::string {
    auto it = config.find(key);
    return it == config.end() ? std::string() : it->second;
  };
  std::string bytes = get("onnx_bytes"), crc = get("onnx_crc32"), ids = get("onnx_input_ids");
  if (bytes.empty() || bytes.find_first_not_of("0123456789") != std::string::npos ||
      crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos)
    return Status::error("meta.json's onnx_bytes '" + bytes + "' / onnx_crc32 '" + crc +
                         "' are not a size and 8 hex digits");
  record.bytes = std::stoull(bytes);
  record.crc32 = uint32_t(std::stoul(crc, nullptr, 16));
  if (!ids.empty()) {
    std::optional<std::vector<int64_t>> dims = parseDims(ids);
    if (!dims)
      return Status::error("meta.json's onnx_input_ids '" + ids + "' is not D0xD1x...");
    record.inputIds = *dims;
  }
  record.logits = get("onnx_logits");
  return std::optional<OnnxModelRecord>(std::move(record));
}

Status checkOnnxFile(const OnnxModelRecord &record, const std::string &path) {
  ASSIGN_OR_RETURN(auto facts, sizeAndCrc(path));
  if (facts.first == record.bytes && facts.second == record.crc32)
    return Status::ok();
  return Status::error(path + " is not the file the checkpoint was trained from: it has " +
                       std::to_string(facts.first) + " bytes, CRC32 " + hex8(facts.second) +
                       "; the checkpoint records " + std::to_string(record.bytes) +
                       " bytes, CRC32 " + hex8(record.crc32) + " (of " + record.path +
                       "); give the original model with --onnx");
}

StatusOr<InputShapes> bindTokenInput(const OnnxModelRecord &record, const std::string &path,
                                     int64_t rows) {
  ASSIGN_OR_RETURN(auto inputs, onnx_import::readOnnxInputDims(path));
  auto it = inputs.find("input_ids");
  if (it == inputs.end()) {
    std::string names;
    for (const auto &[name, dims] : inputs)
      names += (names.empty() ? "" : ", ") + name;
    return Status::error(path + " has no input 'input_ids' (its inputs: " + names +
                         "); megac trains and generates with causal LMs that take input_ids");
  }
  if (inputs.size() != 1) {
    std::string others;
    for (const auto &[name, dims] : inputs)
      if (name != "input_ids")
        others += (others.empty() ? "" : ", ") + name;
    return Status::error(path + " takes inputs besides input_ids (" + others +
                         "); generate feeds only the tokens");
  }
  std::vector<int64_t> dims = it->second;
  if (dims.empty())
    dims = record.inputIds;
  if (dims.size() != 2)
    return Status::error(path + ": input_ids has rank " + std::to_string(dims.size()) +
                         "; generate needs [batch, seq]");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] >= 0)
      continue;
    if (i == 0)
      dims[i] = rows;
    else if (record.inputIds.size() == dims.size())
      dims[i] = record.inputIds[i];
    else
      return Status::error(path + ": input_ids dim " + std::to_string(i) +
                           " is symbolic and the checkpoint records no bound shape for it");
  }
  return InputShapes{{"input_ids", dims}};
}

StatusOr<ExportSource> openExportSource(const std::string &loadDir,
                                        const std::function<void(const std::string &)> &warn) {
  namespace ckpt = runtime::checkpoint;
  std::vector<std::string> refused;
  StatusOr<ckpt::Checkpoint> loaded =
      ckpt::loadLatestCheckpoint(loadDir, &refused, ckpt::CheckpointParts::parametersOnly);
  for (const std::string &line : refused)
    if (warn)
      warn(line);
  ASSIGN_OR_RETURN(ckpt::Checkpoint checkpoint, std::move(loaded));
  StatusOr<std::optional<OnnxModelRecord>> record = onnxRecordOf(checkpoint.meta.config);
  if (!record.isOk())
    return Status::error(checkpoint.path + ": " + record.status().message());
  if (!record->has_value())
    return Status::error(checkpoint.path + " is a checkpoint of '" + checkpoint.meta.model +
                         "', not of an ONNX model trained by this megac; export writes weights "
                         "back into the ONNX file they were trained from");
  return ExportSource{checkpoint.path, checkpoint.meta.step, **record, std::move(checkpoint.model)};
}

StatusOr<ExportSummary> exportCheckpoint(const ExportSource &source, const std::string &onnx,
                                         const std::string &output) {
  RETURN_IF_ERROR(checkOnnxFile(source.model, onnx));
  ASSIGN_OR_RETURN(InputShapes shapes, bindTokenInput(source.model, onnx, 1));
  onnx_import::OnnxImportOptions options;
  options.inputShapes = shapes;
  auto summary = onnx_import::exportOnnxWeights(onnx, options, source.parameters, output);
  if (!summary.isOk())
    return Status::error(summary.status().message() + " (" + source.checkpointPath +
                         "; nothing was written)");
  return ExportSummary{summary->replaced, summary->kept, summary->outputBytes};
}

} // namespace megac::driver
