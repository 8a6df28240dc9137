// Filling parameter buffers from weights, the plan's safetensors file, or seeded init.
#include "runtime/exec/Parameters.h"

#include "runtime/cpu/Kernels.h"
#include "runtime/init/ParamInit.h"
#include "runtime/io/Safetensors.h"
#include "runtime/plan/plan_generated.h"
#include "support/Checked.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <optional>

namespace megac::runtime {

namespace fb = megac::plan;

namespace {

std::span<const int64_t> spanOf(const flatbuffers::Vector<int64_t> *v) {
  if (!v)
    return {};
  return {v->data(), v->size()};
}

/// Copies the parameter's shard (at `offset`) out of a whole (global) tensor.
Status copyShard(const HostTensor &whole, const fb::Parameter &param,
                 std::span<const int64_t> offset, const cpu::TensorRef &dst,
                 const std::string &source) {
  std::string name = param.name()->str();
  if (whole.dtype != dst.dtype)
    return Status::error("parameter '" + name + "': " + source + " holds " +
                         dtypeName(whole.dtype) + ", but the parameter is " + dtypeName(dst.dtype));
  std::span<const int64_t> global = spanOf(param.global_shape());
  std::span<const int64_t> modelShape = spanOf(param.source_shape()); // as the model's files
  auto count = [](std::span<const int64_t> shape) {
    StatusOr<int64_t> n = checkedNumElements(shape);
    return n.isOk() ? *n : int64_t(-1);
  };
  bool inSourceShape = !modelShape.empty() && count(modelShape) >= 0 &&
                       count(modelShape) == count(global) &&
                       std::equal(whole.shape.begin(), whole.shape.end(), modelShape.begin(),
                                  modelShape.end());
  if (!inSourceShape &&
      !std::equal(whole.shape.begin(), whole.shape.end(), global.begin(), global.end()))
    return Status::error("parameter '" + name + "': " + source + " holds shape " +
                         shapeString(whole.shape) + ", but the parameter's global shape is " +
                         shapeString(global));
  if (whole.bytes.size() != static_cast<size_t>(whole.numElements()) * dtypeSize(whole.dtype))
    return Status::error("parameter '" + name + "': " + source + " has " +
                         std::to_string(whole.bytes.size()) + " bytes for shape " +
                         shapeString(whole.shape));
  std::vector<int64_t> ones(global.size(), 1);
  cpu::TensorRef wholeRef = cpu::refOf(whole);
  wholeRef.shape = global; // a tensor in the source shape holds the same elements in order
  RETURN_IF_ERROR(cpu::slice(wholeRef, offset, ones, dst))
      << " (while copying the shard of parameter '" << name << "' from " << source << ")";
  return Status::ok();
}

/// `searched` says where a weight was looked for, for the error when there is no init either.
Status initShard(const fb::Parameter &param, std::span<const int64_t> offset, uint64_t seed,
                 const cpu::TensorRef &dst, const std::string &searched) {
  std::string name = param.name()->str();
  init::InitSpec spec;
  switch (param.init()) {
  case fb::InitKind::normal:
    spec.kind = init::InitKind::normal;
    break;
  case fb::InitKind::zeros:
    spec.kind = init::InitKind::zeros;
    break;
  case fb::InitKind::ones:
    spec.kind = init::InitKind::ones;
    break;
  case fb::InitKind::none:
    return Status::error("parameter '" + name + "' has no value: " + searched +
                         ", and its init kind is none");
  }
  spec.stddev = param.init_std();
  bool integral = dst.dtype == DType::i64 || dst.dtype == DType::i32 || dst.dtype == DType::i1;
  if (integral && spec.kind == init::InitKind::normal)
    return Status::error("parameter '" + name + "' of " + dtypeName(dst.dtype) +
                         " cannot have a normal init");
  std::vector<float> values(static_cast<size_t>(dst.numElements()));
  if (!init::fillShard(spec, seed, name, spanOf(param.global_shape()), offset, dst.shape, values))
    return Status::error("parameter '" + name + "': the shard does not fit its global shape");
  cpu::TensorRef src{DType::f32, dst.shape, values.data()};
  return cpu::cast(src, dst);
}

} // namespace

comm::Mesh meshOf(const LoadedPlan &plan) {
  comm::Mesh mesh;
  if (const fb::Mesh *m = plan.plan().mesh()) {
    if (m->axis_names())
      for (const flatbuffers::String *name : *m->axis_names())
        mesh.axisNames.push_back(name->str());
    if (m->axis_sizes())
      mesh.axisSizes.assign(m->axis_sizes()->begin(), m->axis_sizes()->end());
  }
  return mesh;
}

std::vector<std::pair<uint32_t, std::vector<uint32_t>>>
shardingOf(const flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>> *sharding) {
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> out;
  if (sharding)
    for (const fb::DimSharding *ds : *sharding)
      out.emplace_back(ds->dim(),
                       ds->axes() ? std::vector<uint32_t>(ds->axes()->begin(), ds->axes()->end())
                                  : std::vector<uint32_t>());
  return out;
}

std::vector<int64_t>
shardOffset(const comm::Mesh &mesh, int64_t rank, std::span<const int64_t> localShape,
            std::span<const int64_t> base,
            const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> &dims) {
  std::vector<int64_t> offset(localShape.size(), 0);
  for (size_t d = 0; d < offset.size() && d < base.size(); ++d)
    offset[d] = base[d];
  for (const auto &[dim, axes] : dims)
    if (dim < offset.size())
      offset[dim] += mesh.indexInGroup(rank, axes) * localShape[dim];
  return offset;
}

ShardBox shardBox(const comm::Mesh &mesh, int64_t rank, std::span<const int64_t> localShape,
                  std::span<const int64_t> base, std::span<const int64_t> globalShape,
                  const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> &dims) {
  ShardBox box{shardOffset(mesh, rank, localShape, base, dims),
               std::vector<int64_t>(localShape.begin(), localShape.end())};
  for (const auto &[dim, axes] : dims)
    if (dim < box.shape.size() && dim < globalShape.size()) {
      box.offset[dim] = std::min(box.offset[dim], globalShape[dim]);
      box.shape[dim] = std::min(box.shape[dim], globalShape[dim] - box.offset[dim]);
    }
  return box;
}

ShardBox parameterShardBox(const LoadedPlan &plan, const fb::Parameter &param, int64_t rank) {
  const fb::Program &program =
      *plan.plan().programs()->Get(plan.plan().ranks()->Get(uint32_t(rank))->role());
  const fb::Buffer &buf = *program.buffers()->Get(param.buffer());
  return shardBox(meshOf(plan), rank, spanOf(buf.shape()), spanOf(param.shard_offset()),
                  spanOf(param.global_shape()), shardingOf(param.sharding()));
}

HostTensor boxOfBuffer(HostTensor buffer, std::span<const int64_t> box) {
  if (std::equal(box.begin(), box.end(), buffer.shape.begin(), buffer.shape.end()))
    return buffer;
  HostTensor out = HostTensor::zeros(buffer.dtype, {box.begin(), box.end()});
  if (out.numElements() == 0)
    return out;
  std::vector<int64_t> starts(box.size(), 0), strides(box.size(), 1);
  Status copied = cpu::slice(cpu::refOf(buffer), starts, strides, cpu::refOf(out));
  assert(copied.isOk() && "a box lies inside its buffer");
  (void)copied;
  return out;
}

HostTensor bufferOfBox(HostTensor box, std::span<const int64_t> bufferShape) {
  if (std::equal(box.shape.begin(), box.shape.end(), bufferShape.begin(), bufferShape.end()))
    return box;
  HostTensor out = HostTensor::zeros(box.dtype, {bufferShape.begin(), bufferShape.end()});
  if (box.numElements() == 0)
    return out;
  std::vector<int64_t> low(box.shape.size(), 0), high(box.shape.size(), 0),
      interior(box.shape.size(), 0);
  for (size_t d = 0; d < box.shape.size() && d < bufferShape.size(); ++d)
    high[d] = bufferShape[d] - box.shape[d];
  Status copied = cpu::pad(cpu::refOf(box), low, high, interior, cpu::refOf(out));
  assert(copied.isOk() && "a box lies inside its buffer");
  (void)copied;
  return out;
}

std::string weightsFilePath(const LoadedPlan &plan) {
  const flatbuffers::String *file = plan.plan().weights_file();
  if (!file || file->size() == 0)
    return {};
  std::string name = file->str();
  if (name.front() == '/')
    return name;
  size_t slash = plan.path().find_last_of('/');
  if (slash == std::string::npos)
    return name;
  return plan.path().substr(0, slash + 1) + name;
}

Status fillParameters(const LoadedPlan &plan, size_t programIndex, int64_t rank, uint8_t *arena,
                      const TensorMap *weights) {
  const fb::Plan &p = plan.plan();
  const fb::Program &program =
      *p.programs()->Get(static_cast<flatbuffers::uoffset_t>(programIndex));
  if (!program.parameters())
    return Status::ok();
  std::string filePath = weightsFilePath(plan);
  std::optional<TensorMap> fileWeights;
  for (const fb::Parameter *param : *program.parameters()) {
    const fb::Buffer &buf = *program.buffers()->Get(param->buffer());
    std::string name = param->name()->str();
    ShardBox box = parameterShardBox(plan, *param, rank);
    const std::vector<int64_t> &offset = box.offset;
    auto fill = [&](const cpu::TensorRef &dst) -> Status {
      if (weights) {
        auto it = weights->find(name);
        if (it != weights->end())
          return copyShard(it->second, *param, offset, dst, "the weights passed in");
      }
      if (!filePath.empty()) {
        if (!fileWeights) {
          StatusOr<TensorMap> read = readSafetensors(filePath);
          if (!read.isOk())
            return Status::error(read.status().message() + " (the plan's weights_file)");
          fileWeights = std::move(read).value();
        }
        auto it = fileWeights->find(name);
        if (it != fileWeights->end())
          return copyShard(it->second, *param, offset, dst, "weights file '" + filePath + "'");
      }
      std::string searched =
          weights ? "it is not in the weights passed in" : "no weights were passed in";
      if (filePath.empty())
        searched += " and the plan has no weights file";
      else
        searched += (weights ? " nor in" : " and it is not in") + std::string(" weights file '") +
                    filePath + "'";
      return initShard(*param, offset, p.seed(), dst, searched);
    };
    DType dtype = static_cast<DType>(buf.dtype());
    std::span<const int64_t> bufShape = spanOf(buf.shape());
    if (std::equal(box.shape.begin(), box.shape.end(), bufShape.begin(), bufShape.end())) {
      RETURN_IF_ERROR(fill(cpu::TensorRef{dtype, bufShape, arena + buf.offset()}));
      continue;
    }
    // A padded shard (ZeRO-3): the box's values, then zeros to the buffer's end (a late rank's
    // box is empty: zeros only).
    HostTensor part = HostTensor::zeros(dtype, box.shape);
    if (part.numElements() > 0)
      RETURN_IF_ERROR(fill(cpu::refOf(part)));
    HostTensor value = bufferOfBox(std::move(part), bufShape);
    std::memcpy(arena + buf.offset(), value.bytes.data(), value.bytes.size());
  }
  return Status::ok();
}

} // namespace megac::runtime
