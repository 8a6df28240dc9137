// Hugging Face folders written (HfSave.h): --save-hf and `megac export --hf`, one output shard at
// a time, atomically.
#include "driver/HfSave.h"

#include "driver/Compile.h"

#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

namespace megac::driver {

namespace fs = std::filesystem;
namespace fb = megac::plan;

bool parseByteSize(const std::string &text, uint64_t &bytes) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0 || digits > 15)
    return false;
  uint64_t n = std::stoull(text.substr(0, digits));
  std::string unit = text.substr(digits);
  static const std::map<std::string, uint64_t> units = {{"", 1},
                                                        {"B", 1},
                                                        {"KB", 1000},
                                                        {"MB", 1000'000},
                                                        {"GB", 1000'000'000},
                                                        {"KiB", 1ull << 10},
                                                        {"MiB", 1ull << 20},
                                                        {"GiB", 1ull << 30}};
  auto it = units.find(unit);
  if (it == units.end() || n == 0)
    return false;
  bytes = n * it->second;
  return true;
}

Status checkHfSaveDir(const std::string &dir, const std::string &what) {
  std::error_code ec;
  if (fs::exists(dir, ec))
    return Status::error(what + ": " + dir +
                         " exists; give a new folder (the save never overwrites one)");
  fs::path parent = fs::path(dir).parent_path();
  if (!parent.empty() && !fs::is_directory(parent, ec))
    return Status::error(what + ": no directory " + parent.string());
  return Status::ok();
}

StatusOr<DType> hfSaveDtype(const std::string &inputFolder) {
  std::string path = (fs::path(inputFolder) / "config.json").string();
  ASSIGN_OR_RETURN(json::Value config, readHfJson(path, "config.json"));
  const json::Value *dtype =
      config.kind == json::Value::Kind::object ? config.find("torch_dtype") : nullptr;
  if (dtype && dtype->kind == json::Value::Kind::string) {
    if (dtype->string == "bfloat16")
      return DType::bf16;
    if (dtype->string == "float16")
      return DType::f16;
  }
  return DType::f32;
}

Status saveHfFolder(const std::string &dir,
                    const std::map<std::string, std::vector<int64_t>> &params,
                    const SourceShapes &source, const HfShardFetch &fetch,
                    const HfSaveOptions &options, bool writer) {
  // Every rank plans the same shards from the same config.json and plan, so the fetches (the
  // gathers) match up; an error here is every rank's alike, before any gather.
  StatusOr<DType> savedDtype = hfSaveDtype(options.inputFolder);
  if (!savedDtype.isOk())
    return Status::error(options.what + ": " + savedDtype.status().message());
  DType dtype = *savedDtype;
  // One unit per transformers tensor (GPT-2's c_attn joins three parameters), in name order.
  struct Unit {
    std::vector<std::string> params;
    uint64_t bytes = 0;
  };
  std::map<std::string, Unit> units;
  for (const auto &[name, shape] : params) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    auto stack = source.stacks.find(name);
    Unit &u = units[hfTensorName(
        stack != source.stacks.end() && !stack->second.empty() ? stack->second.front() : name)];
    u.params.push_back(name);
    u.bytes += uint64_t(n) * dtypeSize(dtype);
  }
  std::vector<std::vector<std::string>> shards(1);
  uint64_t inShard = 0, total = 0;
  for (const auto &[hfName, u] : units) {
    if (inShard > 0 && inShard + u.bytes > options.shardBytes) {
      shards.emplace_back();
      inShard = 0;
    }
    shards.back().insert(shards.back().end(), u.params.begin(), u.params.end());
    inShard += u.bytes;
    total += u.bytes;
  }

  Status failed = Status::ok();
  fs::path tmp;
  auto fail = [&](const std::string &why) {
    if (failed.isOk())
      failed = Status::error(options.what + " " + dir + ": " + why);
  };
  if (writer) {
    failed = checkHfSaveDir(dir, options.what);
    if (failed.isOk()) {
      std::string name = fs::path(dir).filename().string();
      if (name.empty())
        name = fs::path(dir).parent_path().filename().string();
      fs::path parent = fs::path(dir).parent_path();
      std::string pattern = ((parent.empty() ? fs::path(".") : parent) / (name + ".tmp-XXXXXX"));
      std::vector<char> buffer(pattern.begin(), pattern.end());
      buffer.push_back('\0');
      if (::mkdtemp(buffer.data()))
        tmp = buffer.data();
      else
        fail("cannot create " + pattern + ": " + std::strerror(errno));
    }
  }
  std::map<std::string, std::string> metadata = options.metadata;
  metadata["format"] = "pt";
  std::map<std::string, std::string> weightMap; // transformers' name -> file
  for (size_t i = 0; i < shards.size(); ++i) {
    StatusOr<TensorMap> fetched = fetch(shards[i]);
    if (!fetched.isOk()) {
      fail(fetched.status().message());
      continue;
    }
    if (!writer || !failed.isOk())
      continue;
    char file[64];
    if (shards.size() == 1)
      std::snprintf(file, sizeof file, "%s", kHfSingleFile);
    else
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    // This shard in the saved dtype, each fetched tensor dropped once converted: what is
    // resident is one output shard (and one tensor's fetched copy).
    TensorMap shard;
    for (auto it = fetched->begin(); it != fetched->end(); it = fetched->erase(it)) {
      HfPlace place = hfPlace(it->first);
      std::string hfName = place.tensor;
      HostTensor &t = it->second;
      if (!isHfFloat(t.dtype)) {
        fail("parameter '" + hfName + "' is " + dtypeName(t.dtype) + ", not a float");
        break;
      }
      if (place.parts > 1 || (place.conv1d && t.shape.size() == 2)) {
        // GPT-2: into its block of the fused tensor, Conv1D's [in, out] transposed.
        auto [at, fresh] = shard.try_emplace(hfName);
        if (fresh)
          at->second = HostTensor::zeros(dtype, hfFileShape(place, t.shape));
        HostTensor &out = at->second;
        int64_t rows = t.shape[0], cols = t.shape.size() == 2 ? t.shape[1] : 1;
        int64_t width = out.shape.size() == 2 ? out.shape[1] : 1;
        size_t a = dtypeSize(t.dtype), b = dtypeSize(dtype);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            int64_t row = place.part * rows + i; // in the fused out dim
            int64_t to = place.conv1d && t.shape.size() == 2 ? j * width + row : row * cols + j;
            storeHfElement(out.bytes.data() + size_t(to) * b, dtype,
                           loadHfElement(t.bytes.data() + size_t(i * cols + j) * a, t.dtype));
          }
        weightMap[hfName] = file;
        continue;
      }
      if (t.dtype == dtype) {
        shard.emplace(hfName, std::move(t));
      } else {
        HostTensor out = HostTensor::zeros(dtype, t.shape);
        convertHfElements(t.bytes.data(), t.dtype, out.bytes.data(), dtype,
                          size_t(t.numElements()));
        shard.emplace(hfName, std::move(out));
      }
      weightMap[hfName] = file;
    }
    if (failed.isOk())
      if (Status s = runtime::writeSafetensors((tmp / file).string(), shard, metadata); !s.isOk())
        fail(s.message());
  }
  if (writer && failed.isOk() && shards.size() > 1) {
    std::string index =
        "{\n  \"metadata\": {\"total_size\": " + std::to_string(total) + "},\n  \"weight_map\": {";
    bool first = true;
    for (const auto &[hfName, file] : weightMap) {
      index += std::string(first ? "\n    " : ",\n    ") + json::quote(hfName) + ": " +
               json::quote(file);
      first = false;
    }
    index += "\n  }\n}\n";
    std::span<const uint8_t> text(reinterpret_cast<const uint8_t *>(index.data()), index.size());
    if (Status s = writeFileAtomically((tmp / kHfIndexFile).string(), {&text, 1}); !s.isOk())
      fail(s.message());
  }
  if (writer && failed.isOk())
    for (const char *file : {"config.json", "generation_config.json", "tokenizer.json",
                             "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                             "vocab.json", "merges.txt", "added_tokens.json"}) {
      fs::path from = fs::path(options.inputFolder) / file;
      std::error_code ec;
      if (!fs::exists(from, ec)) {
        if (std::string(file) == "config.json") {
          fail("the input folder " + options.inputFolder + " has no config.json");
          break;
        }
        continue;
      }
      fs::copy_file(from, tmp / file, ec);
      if (ec) {
        fail("cannot copy " + from.string() + ": " + ec.message());
        break;
      }
    }
  if (writer && failed.isOk()) {
    std::error_code ec;
    fs::rename(tmp, dir, ec);
    if (ec)
      fail("cannot rename " + tmp.string() + " to " + dir + ": " + ec.message());
  }
  if (!failed.isOk() && !tmp.empty()) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
  }
  return failed;
}

StatusOr<runtime::checkpoint::Checkpoint>
loadNewestParameters(const std::string &loadDir,
                     const std::function<void(const std::string &)> &warn) {
  std::vector<std::string> refused;
  StatusOr<runtime::checkpoint::Checkpoint> loaded = runtime::checkpoint::loadLatestCheckpoint(
      loadDir, &refused, runtime::checkpoint::CheckpointParts::parametersOnly);
  for (const std::string &line : refused)
    if (warn)
      warn(line);
  return loaded;
}

StatusOr<HfExportSummary> exportHfCheckpoint(const std::string &loadDir,
                                             const std::optional<std::string> &spec,
                                             const std::string &dir, uint64_t shardBytes,
                                             const std::function<void(const std::string &)> &warn) {
  namespace ckpt = runtime::checkpoint;
  const std::string what = "megac export --hf";
  RETURN_IF_ERROR(checkHfSaveDir(dir, "--hf"));
  // The newest usable checkpoint's index and a reader of its files, picked as loadNewestParameters
  // picks one, but without reading its tensors: each parameter file is verified (size, CRC32,
  // header) by reading one element of each of its shards, and the parameters are read whole one
  // output shard at a time below, so the export never holds the model.
  std::vector<std::string> problems, refused;
  ASSIGN_OR_RETURN(std::vector<int64_t> candidates, ckpt::checkpointCandidates(loadDir, problems));
  std::unique_ptr<ckpt::CheckpointIndex> index;
  std::unique_ptr<ckpt::ShardReader> reader;
  auto attempt = [&](const std::string &stepDir) -> StatusOr<ckpt::CandidateOutcome> {
    StatusOr<ckpt::CheckpointIndex> read = ckpt::readCheckpointIndex(stepDir);
    if (!read.isOk())
      return ckpt::CandidateOutcome{ckpt::CandidateOutcome::refused, read.status().message()};
    auto candidate = std::make_unique<ckpt::CheckpointIndex>(std::move(read).value());
    auto files = std::make_unique<ckpt::ShardReader>(*candidate);
    for (const auto &[name, tensor] : candidate->parameters)
      for (const ckpt::ShardRecord &shard : tensor.shards) {
        if (std::find(shard.shape.begin(), shard.shape.end(), 0) != shard.shape.end())
          continue;
        StatusOr<HostTensor> one =
            files->readBox(candidate->parameters, name,
                           ckpt::Box{shard.offset, std::vector<int64_t>(shard.shape.size(), 1)});
        if (!one.isOk())
          return ckpt::CandidateOutcome{ckpt::CandidateOutcome::refused, one.status().message()};
      }
    index = std::move(candidate);
    reader = std::move(files);
    return ckpt::CandidateOutcome{ckpt::CandidateOutcome::loaded, ""};
  };
  RETURN_IF_ERROR(ckpt::pickCheckpoint(loadDir, candidates, problems, &refused, attempt).status());
  for (const std::string &line : refused)
    if (warn)
      warn(line);
  const ckpt::CheckpointIndex &checkpoint = *index;
  std::string text = spec.value_or(checkpoint.meta.model);
  StatusOr<ModelSource> parsed = ModelSource::fromSpec(text);
  if (!parsed.isOk() || !parsed->isHf())
    return Status::error(
        checkpoint.path + " is a checkpoint of '" + checkpoint.meta.model + "'" +
        (spec ? ", and --model '" + *spec + "' is not an hf: model" : std::string()) +
        "; --hf exports checkpoints of hf: models (give --model hf:FOLDER, the folder it was "
        "trained from)");
  // Built at a short sequence: the parameters' shapes do not depend on it (a window-limited
  // family accepts it).
  models::ModelConfig config = *parsed->config();
  config.seq = std::get<HfSpec>(parsed->value()).seq.value_or(8);
  config.batch = 1;
  ASSIGN_OR_RETURN(ModelSource source, parsed->bound(config));
  ASSIGN_OR_RETURN(CompiledModel compiled, compileModel(source, {}, codegen::CodegenOptions()));
  ASSIGN_OR_RETURN(runtime::LoadedPlan plan, runtime::loadPlanFromBytes(std::move(compiled.plan)));
  std::map<std::string, std::vector<int64_t>> params;
  for (const fb::Program *program : *plan.plan().programs())
    if (program->parameters())
      for (const fb::Parameter *p : *program->parameters())
        params.emplace(p->name()->str(),
                       std::vector<int64_t>(p->global_shape()->begin(), p->global_shape()->end()));
  for (const auto &[name, shape] : params) {
    auto it = checkpoint.parameters.find(name);
    if (it == checkpoint.parameters.end())
      return Status::error(checkpoint.path + " has no tensor for parameter '" + name + "' of " +
                           text + " (a checkpoint of another model?)");
    if (it->second.shape != shape)
      return Status::error(checkpoint.path + ": tensor '" + name + "' is " +
                           shapeString(it->second.shape) + " but " + text + " has " +
                           shapeString(shape) + " (a checkpoint of another model?)");
  }
  for (const auto &[name, tensor] : checkpoint.parameters)
    if (!params.count(name))
      return Status::error(checkpoint.path + ": tensor '" + name + "' is no parameter of " + text +
                           " (a checkpoint of another model?)");
  auto fetch = [&](const std::vector<std::string> &names) -> StatusOr<TensorMap> {
    TensorMap out; // this output shard's parameters only, read whole from their shards
    for (const std::string &name : names) {
      const std::vector<int64_t> &shape = checkpoint.parameters.at(name).shape;
      ASSIGN_OR_RETURN(HostTensor value,
                       reader->readBox(checkpoint.parameters, name,
                                       ckpt::Box{std::vector<int64_t>(shape.size(), 0), shape}));
      out.emplace(name, std::move(value));
    }
    toSourceShapes(out, compiled.sourceShapes);
    return out;
  };
  HfExportSummary summary{checkpoint.path, checkpoint.meta.step, params.size()};
  ASSIGN_OR_RETURN(summary.dtype, hfSaveDtype(hfFolder(source)));
  HfSaveOptions options{
      hfFolder(source),
      shardBytes,
      {{"producer", "megac export"}, {"step", std::to_string(checkpoint.meta.step)}},
      what};
  RETURN_IF_ERROR(saveHfFolder(dir, params, compiled.sourceShapes, fetch, options));
  return summary;
}

} // namespace megac::driver
