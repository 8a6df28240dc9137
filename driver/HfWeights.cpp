// Hugging Face weights read lazily into each rank's parameter shards (HfWeights.h); writing a
// folder transformers loads is HfSave.cpp.
#include "driver/HfWeights.h"

#include "runtime/exec/Parameters.h"
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

/// "'a', 'b', 'c' (and 4 more)": names for a one-line error.
std::string someNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 4; ++i)
    out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > 4)
    out += " (and " + std::to_string(names.size() - 4) + " more)";
  return out;
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
    convertHfElements(staging.data(), t.dtype, out, to, n);
    return Status::ok();
  }
  // staging [l0, l1] (the file's [in, out] block) -> out [l1, l0].
  size_t a = dtypeSize(t.dtype), b = dtypeSize(to);
  for (int64_t i = 0; i < l[0]; ++i)
    for (int64_t j = 0; j < l[1]; ++j)
      storeHfElement(out + size_t(j * l[0] + i) * b, to,
                     loadHfElement(staging.data() + size_t(i * l[1] + j) * a, t.dtype));
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

bool isHfFloat(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

double loadHfElement(const uint8_t *p, DType d) {
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

void storeHfElement(uint8_t *p, DType d, double value) {
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

void convertHfElements(const uint8_t *src, DType from, uint8_t *dst, DType to, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * dtypeSize(from));
    return;
  }
  size_t a = dtypeSize(from), b = dtypeSize(to);
  for (size_t i = 0; i < n; ++i)
    storeHfElement(dst + i * b, to, loadHfElement(src + i * a, from));
}

StatusOr<json::Value> readHfJson(const std::string &path, const char *what) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, what));
  StatusOr<json::Value> value =
      json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  if (!value.isOk())
    return Status::error(path + ": " + value.status().message());
  return value;
}

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
  for (const char *name : {kHfIndexFile, kHfSingleFile}) {
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
    ASSIGN_OR_RETURN(json::Value index, readHfJson(weightsFile, "index file"));
    const json::Value *map =
        index.kind == json::Value::Kind::object ? index.find("weight_map") : nullptr;
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
      if (!isHfFloat(t.dtype))
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
        convertHfElements(staging.data(), t.dtype,
                          value.bytes.data() + size_t(e) * perMember * dtypeSize(value.dtype),
                          value.dtype, perMember);
      }
      if (!any)
        continue;
    }
    // A padded shard (ZeRO-3) holds the box, then zeros to its buffer's end.
    RETURN_IF_ERROR(executor.setParameter(
        name, runtime::bufferOfBox(std::move(value),
                                   shard.bufferShape.empty() ? shard.shape : shard.bufferShape)))
        << " (from " << checkpoint.path << ")";
  }
  return Status::ok();
}

} // namespace megac::driver
