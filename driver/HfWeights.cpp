// Hugging Face weights: lazy, sharded reading into each rank's parameter shards, and writing a
// folder transformers loads (HfWeights.h).
#include "driver/HfWeights.h"

#include "driver/Compile.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"
#include "support/Float16.h"
#include "support/Json.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <set>
#include <unistd.h>

namespace megac::driver {

namespace fs = std::filesystem;
namespace fb = megac::plan;

namespace {

constexpr const char *kIndexFile = "model.safetensors.index.json";
constexpr const char *kSingleFile = "model.safetensors";

/// "'a', 'b', 'c' (and 4 more)": names for a one-line error.
std::string someNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 4; ++i)
    out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 4)
    out += " (and " + std::to_string(names.size() - 4) + " more)";
  return out;
}

bool isFloat(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

double loadElement(const uint8_t *p, DType d) {
  switch (d) {
  case DType::f64: {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case DType::f32: {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::bf16:
  case DType::f16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return d == DType::bf16 ? bf16ToFloat(v) : halfToFloat(v);
  }
  default:
    return 0;
  }
}

void storeElement(uint8_t *p, DType d, double value) {
  switch (d) {
  case DType::f64:
    std::memcpy(p, &value, 8);
    break;
  case DType::f32: {
    float v = float(value);
    std::memcpy(p, &v, 4);
    break;
  }
  case DType::bf16:
  case DType::f16: {
    uint16_t v = d == DType::bf16 ? floatToBf16(float(value)) : floatToHalf(float(value));
    std::memcpy(p, &v, 2);
    break;
  }
  default:
    break;
  }
}

/// `n` elements of dtype `from` at `src` written as `to` at `dst` (exact for widening; fp32 ->
/// bf16/f16 rounds to nearest even).
void convertElements(const uint8_t *src, DType from, uint8_t *dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtypeSize(from));
    return;
  }
  size_t a = dtypeSize(from), b = dtypeSize(to);
  for (size_t i = 0; i < n; ++i)
    storeElement(dst + i * b, to, loadElement(src + i * a, from));
}

/// The open files of a checkpoint, closed at the end of a load.
class OpenFiles {
public:
  ~OpenFiles() {
    for (auto &[path, fd] : fds_)
      ::close(fd);
  }
  StatusOr<int> get(const std::string &path) {
    if (auto it = fds_.find(path); it != fds_.end())
      return it->second;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return Status::error("cannot open " + path + ": " + std::strerror(errno));
    fds_[path] = fd;
    return fd;
  }

private:
  std::map<std::string, int> fds_;
};

/// Reads the block at `offset` of shape `local` out of tensor `t`, seen in the row-major shape
/// `global` (the same element count as t.shape), into `out` (t's dtype): one pread per
/// contiguous run (the dims after the last split one are whole).
Status readSlice(OpenFiles &files, const HfTensor &t, std::span<const int64_t> global,
                 std::span<const int64_t> offset, std::span<const int64_t> local, uint8_t *out) {
  ASSIGN_OR_RETURN(int fd, files.get(t.file));
  size_t rank = global.size(), elem = dtypeSize(t.dtype);
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * global[d];
  // k: the last dim the block does not span whole; dims before it are walked, dims from it on
  // form one contiguous run per index of the walked dims.
  size_t k = 0;
  for (size_t d = 0; d < rank; ++d)
    if (local[d] != global[d])
      k = d;
  int64_t run = 1;
  for (size_t d = k; d < rank; ++d)
    run *= d == k ? local[d] : global[d];
  size_t runBytes = size_t(run) * elem;
  std::vector<int64_t> index(k, 0);
  for (uint8_t *dst = out;; dst += runBytes) {
    int64_t at = k < rank ? offset[k] * stride[k] : 0;
    for (size_t d = 0; d < k; ++d)
      at += (offset[d] + index[d]) * stride[d];
    if (runBytes > 0)
      if (Status s = runtime::preadExact(fd, dst, runBytes, t.begin + uint64_t(at) * elem);
          !s.isOk())
        return Status::error("cannot read " + t.file + ": " + s.message());
    size_t d = k;
    while (d > 0 && ++index[d - 1] == local[d - 1])
      index[--d] = 0;
    if (d == 0)
      break;
  }
  return Status::ok();
}

/// A parameter as the whole model has it: its global shape, the shape of the model's own
/// tensor (source_shape, else global) and, for a stacked one, its members.
struct ModelParam {
  std::vector<int64_t> global, fileShape;
  std::vector<std::string> members; // megac names of the stacked tensors
};

std::map<std::string, ModelParam> modelParams(const runtime::LoadedPlan &plan,
                                              const SourceShapes &source) {
  std::map<std::string, ModelParam> out;
  for (const fb::Program *program : *plan.plan().programs()) {
    if (!program->parameters())
      continue;
    for (const fb::Parameter *p : *program->parameters()) {
      ModelParam m;
      if (p->global_shape())
        m.global.assign(p->global_shape()->begin(), p->global_shape()->end());
      m.fileShape = m.global;
      if (p->source_shape() && p->source_shape()->size() > 0)
        m.fileShape.assign(p->source_shape()->begin(), p->source_shape()->end());
      if (auto it = source.stacks.find(p->name()->str()); it != source.stacks.end())
        m.members = it->second;
      out.emplace(p->name()->str(), std::move(m));
    }
  }
  return out;
}

/// `name` in the checkpoint; a GPT-2 tensor also without its `transformer.` prefix (the hub's
/// original GPT-2 files, saved from GPT2Model, name them so; from_pretrained reads both).
std::map<std::string, HfTensor>::const_iterator findHfTensor(const HfCheckpoint &checkpoint,
                                                             const std::string &name) {
  auto it = checkpoint.tensors.find(name);
  if (it == checkpoint.tensors.end() && name.starts_with("transformer."))
    it = checkpoint.tensors.find(name.substr(12));
  return it;
}

/// Reads into `out` (`to`, shape `local` of a megac parameter) the block at `offset` of the
/// parameter `name` (whole shape `global`) from its place in the checkpoint: transposed from a
/// Conv1D [in, out] tensor, from its part of a fused one. `staging` is reused between calls.
Status readParameter(OpenFiles &files, const HfTensor &t, const HfPlace &place,
                     std::span<const int64_t> global, std::span<const int64_t> offset,
                     std::span<const int64_t> local, uint8_t *out, DType to,
                     std::vector<uint8_t> &staging) {
  size_t n = 1;
  for (int64_t d : local)
    n *= size_t(d);
  staging.resize(n * dtypeSize(t.dtype));
  std::vector<int64_t> g(global.begin(), global.end()), o(offset.begin(), offset.end()),
      l(local.begin(), local.end());
  if (!g.empty()) {
    o[0] += place.part * g[0];
    g[0] *= place.parts;
  }
  bool transpose = place.conv1d && g.size() == 2;
  if (transpose) {
    std::swap(g[0], g[1]);
    std::swap(o[0], o[1]);
    std::swap(l[0], l[1]);
  }
  RETURN_IF_ERROR(readSlice(files, t, g, o, l, staging.data()));
  if (!transpose) {
    convertElements(staging.data(), t.dtype, out, to, n);
    return Status::ok();
  }
  // staging [l0, l1] (the file's [in, out] block) -> out [l1, l0].
  size_t a = dtypeSize(t.dtype), b = dtypeSize(to);
  for (int64_t i = 0; i < l[0]; ++i)
    for (int64_t j = 0; j < l[1]; ++j)
      storeElement(out + size_t(j * l[0] + i) * b, to,
                   loadElement(staging.data() + size_t(i * l[1] + j) * a, t.dtype));
  return Status::ok();
}

Status checkCheckpoint(const HfCheckpoint &checkpoint,
                       const std::map<std::string, ModelParam> &params,
                       const std::set<std::string> &allowed) {
  std::vector<std::string> missing, misShaped;
  std::set<std::string> taken;
  auto expect = [&](const std::string &megacName, const std::vector<int64_t> &megacShape,
                    bool allowedMissing) {
    HfPlace place = hfPlace(megacName);
    std::vector<int64_t> shape = hfFileShape(place, megacShape);
    std::string name = place.tensor;
    auto it = findHfTensor(checkpoint, name);
    if (it != checkpoint.tensors.end())
      name = it->first;
    taken.insert(name);
    if (it == checkpoint.tensors.end()) {
      if (!allowedMissing)
        missing.push_back(name);
    } else if (it->second.shape != shape) {
      misShaped.push_back("tensor '" + name + "' is " + shapeString(it->second.shape) +
                          " but the model's parameter is " + shapeString(shape));
    }
  };
  for (const auto &[name, p] : params) {
    bool ok = allowed.count(name) || allowed.count(hfTensorName(name));
    if (p.members.empty()) {
      expect(name, p.fileShape, ok);
      continue;
    }
    std::vector<int64_t> memberShape(p.global.begin() + 1, p.global.end());
    for (const std::string &member : p.members)
      expect(member, memberShape,
             ok || allowed.count(member) || allowed.count(hfTensorName(member)));
  }
  if (!missing.empty())
    return Status::error(checkpoint.path + ": no tensor for the model's " + someNames(missing) +
                         "; give --allow-missing NAME for a part to train from its initialisation");
  if (!misShaped.empty())
    return Status::error(checkpoint.path + ": " + misShaped.front() +
                         (misShaped.size() > 1 ? " (and " + std::to_string(misShaped.size() - 1) +
                                                     " more tensors of another shape)"
                                               : std::string()) +
                         "; is the config.json the one these weights were saved with?");
  std::vector<std::string> extra;
  for (const auto &[name, t] : checkpoint.tensors) {
    if (taken.count(name))
      continue;
    bool tiedHead = name == "lm_head.weight" && !params.count("lm_head.weight");
    bool rotaryBuffer = name.size() > 20 && name.ends_with(".rotary_emb.inv_freq");
    // Old GPT-2 files carry the causal mask buffers (non-persistent since transformers 4.x).
    bool maskBuffer = (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")) &&
                      taken.count(name.substr(0, name.rfind(".attn.")) + ".attn.c_attn.weight");
    if (!tiedHead && !rotaryBuffer && !maskBuffer)
      extra.push_back(name);
  }
  if (!extra.empty())
    return Status::error(checkpoint.path + ": " +
                         (extra.size() == 1
                              ? "tensor " + someNames(extra) + " is no parameter"
                              : "tensors " + someNames(extra) + " are no parameters") +
                         " of the model the config.json describes");
  return Status::ok();
}

} // namespace

HfPlace hfPlace(const std::string &megacName) {
  if (megacName.starts_with("lm_head."))
    return {megacName};
  if (!megacName.starts_with("transformer."))
    return {"model." + megacName};
  HfPlace place{megacName};
  const char *parts[] = {".attn.c_attn.q.", ".attn.c_attn.k.", ".attn.c_attn.v."};
  for (int64_t i = 0; i < 3; ++i)
    if (size_t at = megacName.find(parts[i]); at != std::string::npos) {
      place.tensor = megacName.substr(0, at) + ".attn.c_attn." + megacName.substr(at + 15);
      place.part = i;
      place.parts = 3;
    }
  place.conv1d = place.tensor.ends_with(".c_attn.weight") ||
                 place.tensor.ends_with(".c_proj.weight") || place.tensor.ends_with(".c_fc.weight");
  return place;
}

std::string hfTensorName(const std::string &megacName) { return hfPlace(megacName).tensor; }

std::vector<int64_t> hfFileShape(const HfPlace &place, std::vector<int64_t> shape) {
  if (shape.empty())
    return shape;
  shape[0] *= place.parts;
  if (place.conv1d && shape.size() == 2)
    std::swap(shape[0], shape[1]);
  return shape;
}

std::string hfFolder(const ModelSource &source) {
  const auto *hf = std::get_if<HfSpec>(&source.value());
  if (!hf)
    return {};
  std::string folder = fs::path(hf->model.file).parent_path().string();
  return folder.empty() ? "." : folder;
}

std::string hfWeightsFile(const ModelSource &source) {
  std::string folder = hfFolder(source);
  if (folder.empty())
    return {};
  for (const char *name : {kIndexFile, kSingleFile}) {
    std::error_code ec;
    fs::path path = fs::path(folder) / name;
    if (fs::exists(path, ec))
      return path.string();
  }
  return {};
}

StatusOr<HfCheckpoint> HfCheckpoint::open(const std::string &weightsFile) {
  HfCheckpoint out;
  out.path = weightsFile;
  // file -> the tensors the index says it holds (empty: all its tensors)
  std::map<std::string, std::vector<std::string>> files;
  if (weightsFile.ends_with(".index.json")) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(weightsFile, "index file"));
    StatusOr<json::Value> index =
        json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
    if (!index.isOk())
      return Status::error(weightsFile + ": " + index.status().message());
    const json::Value *map =
        index->kind == json::Value::Kind::object ? index->find("weight_map") : nullptr;
    if (!map || map->kind != json::Value::Kind::object)
      return Status::error(weightsFile + ": no \"weight_map\" object (name -> file)");
    fs::path dir = fs::path(weightsFile).parent_path();
    for (size_t i = 0; i < map->keys.size(); ++i) {
      const json::Value &file = map->items[i];
      if (file.kind != json::Value::Kind::string || file.string.empty() ||
          file.string.find('/') != std::string::npos)
        return Status::error(weightsFile + ": tensor '" + map->keys[i] + "' maps to no file name");
      std::string path = (dir / file.string).string();
      std::error_code ec;
      if (!fs::is_regular_file(path, ec))
        return Status::error(weightsFile + ": tensor '" + map->keys[i] + "' is in '" + file.string +
                             "', which is not in " + dir.string());
      files[path].push_back(map->keys[i]);
    }
  } else {
    files[weightsFile] = {};
  }
  for (const auto &[path, names] : files) {
    ASSIGN_OR_RETURN(runtime::SafetensorsHeader header, runtime::readSafetensorsHeader(path));
    std::map<std::string, const runtime::SafetensorsTensorInfo *> byName;
    for (const runtime::SafetensorsTensorInfo &t : header.tensors)
      byName[t.name] = &t;
    std::vector<std::string> wanted = names;
    if (wanted.empty())
      for (const runtime::SafetensorsTensorInfo &t : header.tensors)
        wanted.push_back(t.name);
    for (const std::string &name : wanted) {
      auto it = byName.find(name);
      if (it == byName.end())
        return Status::error(out.path + " puts tensor '" + name + "' in " + path +
                             ", which does not hold it");
      const runtime::SafetensorsTensorInfo &t = *it->second;
      if (!isFloat(t.dtype))
        return Status::error(path + ": tensor '" + name + "' is " +
                             runtime::safetensorsDtype(t.dtype) +
                             "; megac reads F32, BF16, F16 and F64 weights");
      out.tensors[name] = HfTensor{path, t.dtype, t.shape, t.begin};
    }
  }
  return out;
}

Status loadHfWeights(const HfCheckpoint &checkpoint, const runtime::LoadedPlan &plan,
                     runtime::Executor &executor, const SourceShapes &source,
                     const std::vector<std::string> &allowMissing) {
  std::map<std::string, ModelParam> params = modelParams(plan, source);
  std::set<std::string> allowed(allowMissing.begin(), allowMissing.end());
  for (const std::string &name : allowMissing) {
    bool known = params.count(name) > 0;
    for (const auto &[p, m] : params) {
      known = known || hfTensorName(p) == name;
      for (const std::string &member : m.members)
        known = known || member == name || hfTensorName(member) == name;
    }
    if (!known)
      return Status::error("--allow-missing '" + name + "' names no parameter of the model");
  }
  RETURN_IF_ERROR(checkCheckpoint(checkpoint, params, allowed));

  const fb::Program &program =
      *plan.plan().programs()->Get(plan.plan().ranks() && plan.plan().ranks()->size() > 0
                                       ? plan.plan().ranks()->Get(uint32_t(executor.rank()))->role()
                                       : 0);
  std::map<std::string, DType> dtypes;
  if (program.parameters())
    for (const fb::Parameter *p : *program.parameters())
      dtypes[p->name()->str()] = static_cast<DType>(program.buffers()->Get(p->buffer())->dtype());
  OpenFiles files;
  std::vector<uint8_t> staging;
  for (const std::string &name : executor.parameterNames()) {
    const ModelParam &p = params.at(name);
    ASSIGN_OR_RETURN(runtime::ShardInfo shard, executor.parameterShard(name));
    HostTensor value = HostTensor::zeros(dtypes.at(name), shard.shape);
    if (p.members.empty()) {
      HfPlace place = hfPlace(name);
      auto it = findHfTensor(checkpoint, place.tensor);
      if (it == checkpoint.tensors.end())
        continue; // --allow-missing: it keeps its initialisation
      RETURN_IF_ERROR(readParameter(files, it->second, place, shard.globalShape, shard.offset,
                                    shard.shape, value.bytes.data(), value.dtype, staging))
          << " (tensor '" << it->first << "')";
    } else {
      // Stacked experts: rows offset[0] .. offset[0] + shape[0] are members' slices.
      std::span<const int64_t> global(shard.globalShape), offset(shard.offset), local(shard.shape);
      size_t perMember = size_t(value.numElements() / std::max<int64_t>(local[0], 1));
      bool any = false;
      for (int64_t e = 0; e < local[0]; ++e) {
        auto it = checkpoint.tensors.find(hfTensorName(p.members[size_t(offset[0] + e)]));
        if (it == checkpoint.tensors.end())
          continue;
        any = true;
        const HfTensor &t = it->second;
        staging.resize(perMember * dtypeSize(t.dtype));
        RETURN_IF_ERROR(readSlice(files, t, global.subspan(1), offset.subspan(1), local.subspan(1),
                                  staging.data()))
            << " (tensor '" << it->first << "')";
        convertElements(staging.data(), t.dtype,
                        value.bytes.data() + size_t(e) * perMember * dtypeSize(value.dtype),
                        value.dtype, perMember);
      }
      if (!any)
        continue;
    }
    RETURN_IF_ERROR(executor.setParameter(name, value)) << " (from " << checkpoint.path << ")";
  }
  return Status::ok();
}

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
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "config.json"));
  StatusOr<json::Value> config =
      json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  if (!config.isOk())
    return Status::error(path + ": " + config.status().message());
  const json::Value *dtype =
      config->kind == json::Value::Kind::object ? config->find("torch_dtype") : nullptr;
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
      std::snprintf(file, sizeof file, "%s", kSingleFile);
    else
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    // This shard in the saved dtype, each fetched tensor dropped once converted: what is
    // resident is one output shard (and one tensor's fetched copy).
    TensorMap shard;
    for (auto it = fetched->begin(); it != fetched->end(); it = fetched->erase(it)) {
      HfPlace place = hfPlace(it->first);
      std::string hfName = place.tensor;
      HostTensor &t = it->second;
      if (!isFloat(t.dtype)) {
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
            storeElement(out.bytes.data() + size_t(to) * b, dtype,
                         loadElement(t.bytes.data() + size_t(i * cols + j) * a, t.dtype));
          }
        weightMap[hfName] = file;
        continue;
      }
      if (t.dtype == dtype) {
        shard.emplace(hfName, std::move(t));
      } else {
        HostTensor out = HostTensor::zeros(dtype, t.shape);
        convertElements(t.bytes.data(), t.dtype, out.bytes.data(), dtype, size_t(t.numElements()));
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
    if (Status s = writeFileAtomically((tmp / kIndexFile).string(), {&text, 1}); !s.isOk())
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
