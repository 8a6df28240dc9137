// Loading a plan: FlatBuffers verification, then every index, size, attribute, in-place write
// and rank entry, so the executor can index buffers and read attributes without checking again.
#include "runtime/plan/PlanLoader.h"

#include "runtime/io/Files.h"
#include "runtime/io/HostTensor.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

namespace megac::runtime {

namespace fb = megac::plan;

const fb::Plan &LoadedPlan::plan() const { return *fb::GetPlan(bytes_.data()); }

std::string describeProgram(const fb::Program &program, size_t programIndex) {
  if (program.name() && program.name()->size())
    return "program '" + program.name()->str() + "'";
  return "program " + std::to_string(programIndex);
}

std::string describeFunction(const fb::Program &program, size_t programIndex,
                             size_t functionIndex) {
  std::string text = describeProgram(program, programIndex);
  const auto *functions = program.functions();
  if (functions && functionIndex < functions->size()) {
    const fb::Function *fn = functions->Get(static_cast<flatbuffers::uoffset_t>(functionIndex));
    if (fn->name() && fn->name()->size())
      return text + ", function '" + fn->name()->str() + "'";
  }
  return text + ", function " + std::to_string(functionIndex);
}

std::string describeInstruction(const fb::Program &program, size_t programIndex,
                                size_t functionIndex, size_t instructionIndex) {
  std::string text = describeFunction(program, programIndex, functionIndex) + ", instruction " +
                     std::to_string(instructionIndex);
  const auto *functions = program.functions();
  if (!functions || functionIndex >= functions->size())
    return text;
  const auto *instructions =
      functions->Get(static_cast<flatbuffers::uoffset_t>(functionIndex))->instructions();
  if (!instructions || instructionIndex >= instructions->size())
    return text;
  const fb::Instruction *inst =
      instructions->Get(static_cast<flatbuffers::uoffset_t>(instructionIndex));
  const char *op = fb::EnumNameOpcode(inst->op());
  text += " (";
  text += *op ? op : ("opcode " + std::to_string(static_cast<int>(inst->op()))).c_str();
  if (inst->location() && inst->location()->size())
    text += " at '" + inst->location()->str() + "'";
  return text + ")";
}

namespace {

/// What an opcode takes: its input count range and its attrs member (NONE: no attrs).
struct OpSignature {
  int minInputs;
  int maxInputs; // -1: any number
  fb::Attrs attrs;
};

OpSignature signatureOf(fb::Opcode op) {
  using O = fb::Opcode;
  using A = fb::Attrs;
  switch (op) {
  case O::Neg:
  case O::Abs:
  case O::Exp:
  case O::Log:
  case O::Tanh:
  case O::Erf:
  case O::Sigmoid:
  case O::Relu:
  case O::Sqrt:
  case O::Rsqrt:
  case O::Not:
  case O::Copy:
  case O::Broadcast:
  case O::Cast:
    return {1, 1, A::NONE};
  case O::Add:
  case O::Sub:
  case O::Mul:
  case O::Div:
  case O::Pow:
  case O::Min:
  case O::Max:
  case O::And:
  case O::Or:
  case O::MatMul:
    return {2, 2, A::NONE};
  case O::Embedding:
  case O::EmbeddingGrad: // EmbeddingAttrs (version 3) or no attrs
    return {2, 2, A::EmbeddingAttrs};
  case O::Compare:
    return {2, 2, A::CompareAttrs};
  case O::Where:
    return {3, 3, A::NONE};
  case O::Transpose:
    return {1, 1, A::TransposeAttrs};
  case O::Slice:
    return {1, 1, A::SliceAttrs};
  case O::Concat:
    return {1, -1, A::AxisAttrs};
  case O::Gather:
    return {2, 2, A::AxisAttrs};
  case O::Reduce:
    return {1, 1, A::ReduceAttrs};
  case O::Softmax:
    return {1, 1, A::AxisAttrs};
  case O::Linear:
    return {2, 3, A::NONE};
  case O::LayerNorm:
    return {2, 3, A::NormAttrs};
  case O::RmsNorm:
    return {2, 2, A::NormAttrs};
  case O::Attention:
    return {3, 4, A::AttentionAttrs};
  case O::Gelu:
    return {1, 1, A::GeluAttrs};
  case O::CrossEntropy:
    return {2, 2, A::CrossEntropyAttrs};
  case O::Dropout:
    return {2, 2, A::DropoutAttrs};
  case O::Pad:
    return {1, 1, A::PadAttrs};
  case O::LayerNormGrad:
  case O::RmsNormGrad:
    return {3, 3, A::NormAttrs};
  case O::AttentionGrad:
    return {4, 5, A::AttentionAttrs};
  case O::GeluGrad:
    return {2, 2, A::GeluAttrs};
  case O::SoftmaxGrad:
    return {2, 2, A::AxisAttrs};
  case O::CrossEntropyGrad:
    return {3, 3, A::CrossEntropyAttrs};
  case O::AdamW:
    return {6, 6, A::AdamWAttrs};
  case O::GlobalNorm:
    return {1, -1, A::NONE};
  case O::ClipByNorm:
    return {2, 2, A::ClipAttrs};
  case O::AllReduce:
  case O::AllGather:
  case O::ReduceScatter:
  case O::AllToAll:
  case O::ShardSlice:
    return {1, 1, A::CollectiveAttrs};
  case O::Send:
    return {1, 1, A::P2PAttrs};
  case O::Recv:
    return {0, 0, A::P2PAttrs};
  case O::Silu:
    return {1, 1, A::NONE};
  case O::Rope:
    return {3, 3, A::NONE};
  }
  return {-1, -1, A::NONE}; // unknown opcode
}

std::string attrsName(fb::Attrs a) {
  return a == fb::Attrs::NONE ? "no attrs" : std::string(fb::EnumNameAttrs(a));
}

template <typename T> size_t sizeOf(const flatbuffers::Vector<T> *v) { return v ? v->size() : 0; }

/// What a buffer holds for the whole program, or `temporary` (a function's value).
enum class Kind : uint8_t { temporary, parameter, state, constant };

class Validator {
public:
  Validator(const fb::Plan &plan, std::string source) : plan_(plan), source_(std::move(source)) {}

  Status run() {
    if (!plan_.programs() || plan_.programs()->size() == 0)
      return planError("it has no programs");
    // The mesh and rank table first: sharding and collective checks use them.
    RETURN_IF_ERROR(ranks());
    RETURN_IF_ERROR(pipeline());
    for (size_t p = 0; p < plan_.programs()->size(); ++p)
      RETURN_IF_ERROR(program(*plan_.programs()->Get(flatbuffers::uoffset_t(p)), p));
    return Status::ok();
  }

private:
  Status planError(const std::string &what) const {
    return Status::error("plan " + source_ + ": " + what);
  }

  Status ranks() {
    const fb::Mesh *mesh = plan_.mesh();
    size_t axes = mesh ? sizeOf(mesh->axis_sizes()) : 0;
    if (mesh && sizeOf(mesh->axis_names()) != axes)
      return planError("the mesh has " + std::to_string(sizeOf(mesh->axis_names())) +
                       " axis names but " + std::to_string(axes) + " axis sizes");
    int64_t positions = 1;
    for (size_t a = 0; a < axes; ++a) {
      int64_t size = mesh->axis_sizes()->Get(flatbuffers::uoffset_t(a));
      if (size < 1 || __builtin_mul_overflow(positions, size, &positions))
        return planError("mesh axis " + std::to_string(a) + " has size " + std::to_string(size));
    }
    size_t count = sizeOf(plan_.ranks());
    if (count == 0)
      return planError("the rank table is empty");
    if (static_cast<int64_t>(count) != positions)
      return planError("the mesh has " + std::to_string(positions) +
                       " positions but the rank "
                       "table has " +
                       std::to_string(count) + " entries");
    for (size_t r = 0; r < count; ++r) {
      const fb::RankEntry *entry = plan_.ranks()->Get(flatbuffers::uoffset_t(r));
      std::string which = "rank " + std::to_string(r);
      if (entry->role() >= plan_.programs()->size())
        return planError(which + " has role " + std::to_string(entry->role()) + ", but there are " +
                         std::to_string(plan_.programs()->size()) + " programs");
      if (sizeOf(entry->coords()) != axes)
        return planError(which + " has " + std::to_string(sizeOf(entry->coords())) +
                         " mesh coordinates, but the mesh has " + std::to_string(axes) + " axes");
      int64_t index = 0;
      for (size_t a = 0; a < axes; ++a) {
        int64_t c = entry->coords()->Get(flatbuffers::uoffset_t(a));
        int64_t size = mesh->axis_sizes()->Get(flatbuffers::uoffset_t(a));
        if (c < 0 || c >= size)
          return planError(which + " has coordinate " + std::to_string(c) + " on axis " +
                           std::to_string(a) + " of size " + std::to_string(size));
        index = index * size + c;
      }
      if (index != static_cast<int64_t>(r))
        return planError(which + " has the coordinates of rank " + std::to_string(index) +
                         " (a rank is the row-major index of its coordinates)");
    }
    return Status::ok();
  }

  Status program(const fb::Program &prog, size_t p) {
    prog_ = &prog;
    progIndex_ = p;
    RETURN_IF_ERROR(buffers());
    kind_.assign(numBuffers_, Kind::temporary);
    persistentNames_.clear();
    RETURN_IF_ERROR(parameters());
    RETURN_IF_ERROR(state());
    RETURN_IF_ERROR(constants());
    RETURN_IF_ERROR(persistentDisjoint());
    RETURN_IF_ERROR(functions());
    return schedule();
  }

  Status progError(const std::string &what) const {
    return planError(describeProgram(*prog_, progIndex_) + ": " + what);
  }

  std::string bufferName(size_t b) const {
    const fb::Buffer *buf = prog_->buffers()->Get(flatbuffers::uoffset_t(b));
    std::string name =
        buf->name() && buf->name()->size() ? buf->name()->str() : "%" + std::to_string(b);
    return "buffer " + std::to_string(b) + " ('" + name + "')";
  }

  /// Checks a buffer index, naming what refers to it.
  Status bufferIndex(uint32_t b, const std::string &who) const {
    if (b >= numBuffers_)
      return progError(who + " refers to buffer " + std::to_string(b) + ", but the program has " +
                       std::to_string(numBuffers_) + " buffers");
    return Status::ok();
  }

  const fb::Buffer &buffer(uint32_t b) const { return *prog_->buffers()->Get(b); }
  size_t rankOf(uint32_t b) const { return sizeOf(buffer(b).shape()); }

  Status buffers() {
    numBuffers_ = sizeOf(prog_->buffers());
    uint64_t arena = prog_->arena_bytes();
    for (size_t b = 0; b < numBuffers_; ++b) {
      const fb::Buffer &buf = *prog_->buffers()->Get(flatbuffers::uoffset_t(b));
      std::string which = bufferName(b);
      if (static_cast<uint8_t>(buf.dtype()) > static_cast<uint8_t>(fb::DType::i1))
        return progError(which + " has unknown dtype " + std::to_string(int(buf.dtype())));
      uint64_t elements = 1;
      for (size_t d = 0; d < sizeOf(buf.shape()); ++d) {
        int64_t dim = buf.shape()->Get(flatbuffers::uoffset_t(d));
        if (dim < 0 || __builtin_mul_overflow(elements, uint64_t(dim), &elements))
          return progError(which + " has a bad shape (dim " + std::to_string(d) + " is " +
                           std::to_string(dim) + ")");
      }
      uint64_t need;
      if (__builtin_mul_overflow(elements, dtypeSize(DType(buf.dtype())), &need) ||
          buf.bytes() != need)
        return progError(which + " has " + std::to_string(buf.bytes()) + " bytes, but " +
                         std::to_string(elements) + " elements of " +
                         dtypeName(DType(buf.dtype())) + " need " + std::to_string(need));
      if (buf.offset() % 64 != 0)
        return progError(which + " has offset " + std::to_string(buf.offset()) +
                         ", which is not 64-byte aligned");
      uint64_t end;
      if (__builtin_add_overflow(buf.offset(), buf.bytes(), &end) || end > arena)
        return progError(which + " spans bytes [" + std::to_string(buf.offset()) + ", " +
                         std::to_string(buf.offset() + buf.bytes()) + "), past the arena's " +
                         std::to_string(arena) + " bytes");
    }
    return Status::ok();
  }

  Status parameters() {
    for (size_t i = 0; i < sizeOf(prog_->parameters()); ++i) {
      const fb::Parameter &param = *prog_->parameters()->Get(flatbuffers::uoffset_t(i));
      std::string which = "parameter " + std::to_string(i);
      if (!param.name() || param.name()->size() == 0)
        return progError(which + " has no name");
      which += " ('" + param.name()->str() + "')";
      if (!persistentNames_.insert(param.name()->str()).second)
        return progError(which + " appears twice");
      RETURN_IF_ERROR(bufferIndex(param.buffer(), which));
      RETURN_IF_ERROR(claimPersistent(param.buffer(), Kind::parameter, which));
      const fb::Buffer &buf = buffer(param.buffer());
      size_t rank = sizeOf(buf.shape());
      if (sizeOf(param.global_shape()) != rank || sizeOf(param.shard_offset()) != rank)
        return progError(which + ": global_shape and shard_offset must have the rank of " +
                         bufferName(param.buffer()) + " (" + std::to_string(rank) + ")");
      RETURN_IF_ERROR(shardings(param.sharding(), param.global_shape(), buf, which));
      for (size_t d = 0; d < rank; ++d) {
        int64_t global = param.global_shape()->Get(flatbuffers::uoffset_t(d));
        int64_t offset = param.shard_offset()->Get(flatbuffers::uoffset_t(d));
        int64_t local = buf.shape()->Get(flatbuffers::uoffset_t(d));
        if (offset < 0 || global < 0 || offset > global || local > global - offset)
          return progError(which + ": the shard of " + std::to_string(local) + " at offset " +
                           std::to_string(offset) + " does not fit global dim " +
                           std::to_string(d) + " of size " + std::to_string(global));
      }
      if (static_cast<uint8_t>(param.init()) > static_cast<uint8_t>(fb::InitKind::ones))
        return progError(which + " has unknown init kind " + std::to_string(int(param.init())));
      if (!std::isfinite(param.init_std()) || param.init_std() < 0)
        return progError(which + " has init_std " + std::to_string(param.init_std()));
    }
    return Status::ok();
  }

  /// Marks buffer b as persistent storage of `kind`; each buffer holds one persistent value.
  Status claimPersistent(uint32_t b, Kind kind, const std::string &who) {
    if (kind_[b] != Kind::temporary)
      return progError(who + " uses " + bufferName(b) + ", which already holds a " +
                       kindName(kind_[b]));
    kind_[b] = kind;
    return Status::ok();
  }

  static const char *kindName(Kind kind) {
    switch (kind) {
    case Kind::parameter:
      return "parameter";
    case Kind::state:
      return "state buffer";
    case Kind::constant:
      return "constant";
    case Kind::temporary:
      break;
    }
    return "temporary";
  }

  bool overlap(uint32_t a, uint32_t b) const {
    const fb::Buffer &x = buffer(a), &y = buffer(b);
    return x.bytes() && y.bytes() && x.offset() < y.offset() + y.bytes() &&
           y.offset() < x.offset() + x.bytes();
  }
  bool sameBytes(uint32_t a, uint32_t b) const {
    return buffer(a).offset() == buffer(b).offset() && buffer(a).bytes() == buffer(b).bytes();
  }

  Status state() {
    for (size_t i = 0; i < sizeOf(prog_->state()); ++i) {
      const fb::StateBuffer &st = *prog_->state()->Get(flatbuffers::uoffset_t(i));
      std::string which = "state buffer " + std::to_string(i);
      if (!st.name() || st.name()->size() == 0)
        return progError(which + " has no name");
      which += " ('" + st.name()->str() + "')";
      if (!persistentNames_.insert(st.name()->str()).second)
        return progError(which + " has the name of another parameter or state buffer");
      RETURN_IF_ERROR(bufferIndex(st.buffer(), which));
      RETURN_IF_ERROR(claimPersistent(st.buffer(), Kind::state, which));
      const fb::Buffer &buf = buffer(st.buffer());
      if (st.global_shape() && sizeOf(st.global_shape()) != sizeOf(buf.shape()))
        return progError(which + ": global_shape must have the rank of " + bufferName(st.buffer()) +
                         " (" + std::to_string(sizeOf(buf.shape())) + ")");
      if (sizeOf(st.sharding()) && !st.global_shape())
        return progError(which + " has a sharding but no global_shape");
      if (st.global_shape())
        RETURN_IF_ERROR(shardings(st.sharding(), st.global_shape(), buf, which));
      RETURN_IF_ERROR(meshAxes(st.partial_axes(), which + ": partial_axes", false,
                               [&](const std::string &m) { return progError(m); }));
    }
    return Status::ok();
  }

  size_t meshRank() const { return plan_.mesh() ? sizeOf(plan_.mesh()->axis_sizes()) : 0; }
  int64_t axisSize(uint32_t a) const { return plan_.mesh()->axis_sizes()->Get(a); }

  /// Mesh axis indices: each < the mesh's rank, distinct and, unless `anyOrder` (a dim's
  /// split, whose list order is its major-first order: a ZeRO-1 moment is the dp slice of a tp
  /// shard, [tp, dp]), in mesh order.
  template <typename Error>
  Status meshAxes(const flatbuffers::Vector<uint32_t> *axes, const std::string &which,
                  bool required, Error error, bool anyOrder = false) const {
    if (required && sizeOf(axes) == 0)
      return error(which + " is empty (give the mesh axes of the group)");
    uint32_t previous = 0;
    for (size_t k = 0; k < sizeOf(axes); ++k) {
      uint32_t a = axes->Get(flatbuffers::uoffset_t(k));
      if (a >= meshRank())
        return error(which + " names mesh axis " + std::to_string(a) + ", but the mesh has " +
                     std::to_string(meshRank()) + " axes");
      if (anyOrder) {
        for (size_t j = 0; j < k; ++j)
          if (axes->Get(flatbuffers::uoffset_t(j)) == a)
            return error(which + " must list distinct mesh axes");
      } else if (k > 0 && a <= previous) {
        return error(which + " must list distinct mesh axes in mesh order (major first)");
      }
      previous = a;
    }
    return Status::ok();
  }

  /// The product of the mesh axis sizes listed (the group size over those axes).
  int64_t groupSize(const flatbuffers::Vector<uint32_t> *axes) const {
    int64_t n = 1;
    for (size_t k = 0; k < sizeOf(axes); ++k)
      n *= axisSize(axes->Get(flatbuffers::uoffset_t(k)));
    return n;
  }

  /// A parameter's or state buffer's DimShardings: dims in range and distinct, axes valid and
  /// unused by other dims, and each sharded dim's global size = local size * group size.
  Status shardings(const flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>> *list,
                   const flatbuffers::Vector<int64_t> *global, const fb::Buffer &buf,
                   const std::string &which) const {
    size_t rank = sizeOf(buf.shape());
    std::set<uint32_t> dims, usedAxes;
    for (size_t k = 0; k < sizeOf(list); ++k) {
      const fb::DimSharding *ds = list->Get(flatbuffers::uoffset_t(k));
      std::string what = which + ": sharding " + std::to_string(k);
      if (ds->dim() >= rank)
        return progError(what + " splits dim " + std::to_string(ds->dim()) + " of a rank-" +
                         std::to_string(rank) + " tensor");
      if (!dims.insert(ds->dim()).second)
        return progError(what + " splits dim " + std::to_string(ds->dim()) + " twice");
      RETURN_IF_ERROR(meshAxes(
          ds->axes(), what + " axes", true, [&](const std::string &m) { return progError(m); },
          /*anyOrder=*/true));
      for (uint32_t a : *ds->axes())
        if (!usedAxes.insert(a).second)
          return progError(what + " reuses mesh axis " + std::to_string(a));
      int64_t local = buf.shape()->Get(ds->dim());
      int64_t whole = sizeOf(global) == rank ? global->Get(ds->dim()) : -1;
      if (local * groupSize(ds->axes()) != whole)
        return progError(what + ": dim " + std::to_string(ds->dim()) + " has global size " +
                         std::to_string(whole) + ", not the local " + std::to_string(local) +
                         " times the group's " + std::to_string(groupSize(ds->axes())) + " ranks");
    }
    return Status::ok();
  }

  /// Plan.pipeline: positive sizes, and stages matching the mesh's "pp" axis when it has one.
  Status pipeline() const {
    const fb::Pipeline *pl = plan_.pipeline();
    if (!pl)
      return Status::ok();
    if (pl->stages() < 1 || pl->virtual_stages() < 1 || pl->micro_batches() < 1)
      return planError("pipeline has stages " + std::to_string(pl->stages()) + ", virtual_stages " +
                       std::to_string(pl->virtual_stages()) + " and micro_batches " +
                       std::to_string(pl->micro_batches()) + " (each must be >= 1)");
    for (size_t a = 0; a < meshRank(); ++a)
      if (plan_.mesh()->axis_names()->Get(flatbuffers::uoffset_t(a))->str() == "pp" &&
          axisSize(uint32_t(a)) != int64_t(pl->stages()))
        return planError("pipeline has " + std::to_string(pl->stages()) +
                         " stages, but the mesh's pp axis has size " +
                         std::to_string(axisSize(uint32_t(a))));
    return Status::ok();
  }

  /// Program.schedule: every step's function exists; chunks and micro-batches are in range.
  Status schedule() const {
    size_t steps = sizeOf(prog_->schedule());
    if (steps == 0)
      return Status::ok();
    const fb::Pipeline *pl = plan_.pipeline();
    if (!pl)
      return progError("it has a schedule, but the plan has no pipeline table");
    std::set<std::string> names;
    for (const fb::Function *fn : *prog_->functions())
      names.insert(fn->name()->str());
    for (size_t i = 0; i < steps; ++i) {
      const fb::ScheduleStep *step = prog_->schedule()->Get(flatbuffers::uoffset_t(i));
      std::string which = "schedule step " + std::to_string(i);
      if (step->kind() != fb::StepKind::Forward && step->kind() != fb::StepKind::Backward)
        return progError(which + " has unknown kind " + std::to_string(int(step->kind())));
      uint32_t chunks = pl->stages() * pl->virtual_stages();
      if (step->chunk() >= chunks)
        return progError(which + " runs chunk " + std::to_string(step->chunk()) + " of " +
                         std::to_string(chunks));
      if (step->micro_batch() >= pl->micro_batches())
        return progError(which + " runs micro-batch " + std::to_string(step->micro_batch()) +
                         " of " + std::to_string(pl->micro_batches()));
      std::string fn = (step->kind() == fb::StepKind::Forward ? "forward.c" : "backward.c") +
                       std::to_string(step->chunk());
      if (!names.count(fn))
        return progError(which + " runs function '" + fn + "', which the program lacks");
    }
    return Status::ok();
  }

  Status constants() {
    for (size_t i = 0; i < sizeOf(prog_->constants()); ++i) {
      const fb::Constant &c = *prog_->constants()->Get(flatbuffers::uoffset_t(i));
      std::string which = "constant " + std::to_string(i);
      RETURN_IF_ERROR(bufferIndex(c.buffer(), which));
      if (sizeOf(c.data()) != buffer(c.buffer()).bytes())
        return progError(which + " has " + std::to_string(sizeOf(c.data())) +
                         " bytes of data, but " + bufferName(c.buffer()) + " has " +
                         std::to_string(buffer(c.buffer()).bytes()));
      RETURN_IF_ERROR(claimPersistent(c.buffer(), Kind::constant, which));
    }
    return Status::ok();
  }

  /// Persistent buffers keep their bytes across runs, so no two may share any.
  Status persistentDisjoint() {
    persistent_.clear();
    for (uint32_t b = 0; b < numBuffers_; ++b)
      if (kind_[b] != Kind::temporary && buffer(b).bytes())
        persistent_.push_back(b);
    std::stable_sort(persistent_.begin(), persistent_.end(), [&](uint32_t a, uint32_t b) {
      return buffer(a).offset() < buffer(b).offset();
    });
    for (size_t i = 1; i < persistent_.size(); ++i)
      if (overlap(persistent_[i - 1], persistent_[i]))
        return progError("the " + std::string(kindName(kind_[persistent_[i - 1]])) + " in " +
                         bufferName(persistent_[i - 1]) + " and the " +
                         kindName(kind_[persistent_[i]]) + " in " + bufferName(persistent_[i]) +
                         " share bytes");
    return Status::ok();
  }

  /// The persistent buffer whose bytes b overlaps, if any (b itself when it is persistent).
  std::optional<uint32_t> persistentOverlap(uint32_t b) const {
    if (kind_[b] != Kind::temporary)
      return b;
    if (buffer(b).bytes() == 0)
      return std::nullopt;
    // persistent_ is sorted by offset and disjoint: the candidate starts before b ends.
    uint64_t end = buffer(b).offset() + buffer(b).bytes();
    auto it = std::lower_bound(persistent_.begin(), persistent_.end(), end,
                               [&](uint32_t p, uint64_t at) { return buffer(p).offset() < at; });
    if (it == persistent_.begin())
      return std::nullopt;
    uint32_t candidate = *std::prev(it);
    if (overlap(candidate, b))
      return candidate;
    return std::nullopt;
  }

  Status functions() {
    size_t count = sizeOf(prog_->functions());
    if (count == 0)
      return progError("it has no functions");
    std::set<std::string> names, outputNames;
    inputs_.clear();
    for (size_t f = 0; f < count; ++f) {
      const fb::Function &fn = *prog_->functions()->Get(flatbuffers::uoffset_t(f));
      fnIndex_ = f;
      if (!fn.name() || fn.name()->size() == 0)
        return progError("function " + std::to_string(f) + " has no name");
      if (!names.insert(fn.name()->str()).second)
        return fnError("appears twice");
      RETURN_IF_ERROR(inputPorts(fn));
      RETURN_IF_ERROR(outputPorts(fn, outputNames));
      for (size_t i = 0; i < sizeOf(fn.instructions()); ++i)
        RETURN_IF_ERROR(instruction(*fn.instructions()->Get(flatbuffers::uoffset_t(i)), i));
    }
    return Status::ok();
  }

  Status fnError(const std::string &what) const {
    return planError(describeFunction(*prog_, progIndex_, fnIndex_) + ": " + what);
  }

  /// Input names are unique in a function; one name in several functions is one input, so it
  /// has one dtype and shape. Inputs are copied in on each run: never into persistent bytes.
  Status inputPorts(const fb::Function &fn) {
    std::set<std::string> names;
    for (size_t i = 0; i < sizeOf(fn.inputs()); ++i) {
      const fb::Port &port = *fn.inputs()->Get(flatbuffers::uoffset_t(i));
      std::string which = "input " + std::to_string(i);
      if (!port.name() || port.name()->size() == 0)
        return fnError(which + " has no name");
      std::string name = port.name()->str();
      which += " ('" + name + "')";
      if (!names.insert(name).second)
        return fnError(which + " appears twice");
      RETURN_IF_ERROR(bufferIndex(port.buffer(), which));
      if (sizeOf(port.partial_axes()))
        return fnError(which + " has partial_axes; only outputs are partial sums");
      if (auto p = persistentOverlap(port.buffer()))
        return fnError(which + " is " + bufferName(port.buffer()) +
                       ", which shares bytes with the " + kindName(kind_[*p]) + " in " +
                       bufferName(*p));
      auto [it, inserted] = inputs_.emplace(name, port.buffer());
      if (!inserted) {
        const fb::Buffer &a = buffer(it->second), &b = buffer(port.buffer());
        bool same = a.dtype() == b.dtype() && sizeOf(a.shape()) == sizeOf(b.shape()) &&
                    (sizeOf(a.shape()) == 0 ||
                     std::equal(a.shape()->begin(), a.shape()->end(), b.shape()->begin()));
        if (!same)
          return fnError(which + " is " + bufferName(port.buffer()) +
                         ", whose dtype or shape differs from the input of that name in an "
                         "earlier function (" +
                         bufferName(it->second) + ")");
      }
    }
    return Status::ok();
  }

  Status outputPorts(const fb::Function &fn, std::set<std::string> &programNames) {
    for (size_t i = 0; i < sizeOf(fn.outputs()); ++i) {
      const fb::Port &port = *fn.outputs()->Get(flatbuffers::uoffset_t(i));
      std::string which = "output " + std::to_string(i);
      if (!port.name() || port.name()->size() == 0)
        return fnError(which + " has no name");
      which += " ('" + port.name()->str() + "')";
      if (!programNames.insert(port.name()->str()).second)
        return fnError(which + " appears twice in the program");
      RETURN_IF_ERROR(bufferIndex(port.buffer(), which));
      RETURN_IF_ERROR(meshAxes(port.partial_axes(), which + ": partial_axes", false,
                               [&](const std::string &m) { return fnError(m); }));
    }
    return Status::ok();
  }

  Status instError(size_t i, const std::string &what) const {
    return planError(describeInstruction(*prog_, progIndex_, fnIndex_, i) + ": " + what);
  }

  Status instruction(const fb::Instruction &inst, size_t i) {
    OpSignature sig = signatureOf(inst.op());
    if (sig.minInputs < 0)
      return instError(i, "unknown opcode " + std::to_string(static_cast<int>(inst.op())));
    int inputs = static_cast<int>(sizeOf(inst.inputs()));
    if (inputs < sig.minInputs || (sig.maxInputs >= 0 && inputs > sig.maxInputs))
      return instError(
          i, "has " + std::to_string(inputs) + " inputs, expected " +
                 std::to_string(sig.minInputs) +
                 (sig.maxInputs == sig.minInputs
                      ? std::string()
                      : (sig.maxInputs < 0 ? " or more" : " to " + std::to_string(sig.maxInputs))));
    int outputs = static_cast<int>(sizeOf(inst.outputs()));
    int expectedOutputs = fb::outputCount(inst.op(), inputs);
    if (outputs != expectedOutputs)
      return instError(i, "has " + std::to_string(outputs) + " outputs, expected " +
                              std::to_string(expectedOutputs));
    for (int k = 0; k < inputs; ++k) {
      uint32_t b = inst.inputs()->Get(k);
      if (b >= numBuffers_)
        return instError(i, "input " + std::to_string(k) + " is buffer " + std::to_string(b) +
                                ", but the program has " + std::to_string(numBuffers_) +
                                " buffers");
    }
    for (int k = 0; k < outputs; ++k) {
      uint32_t out = inst.outputs()->Get(k);
      if (out >= numBuffers_)
        return instError(i, "output " + std::to_string(k) + " is buffer " + std::to_string(out) +
                                ", but the program has " + std::to_string(numBuffers_) +
                                " buffers");
    }
    RETURN_IF_ERROR(writes(inst, i));
    bool optionalAttrs =
        inst.op() == fb::Opcode::Embedding || inst.op() == fb::Opcode::EmbeddingGrad;
    if (optionalAttrs && inst.attrs_type() == fb::Attrs::NONE)
      return Status::ok();
    if (isVersion3(inst.op()) && plan_.format_version() < 3)
      return instError(i,
                       std::string(fb::EnumNameOpcode(inst.op())) + " needs plan format version 3");
    if (inst.attrs_type() != sig.attrs)
      return instError(i, "has " + attrsName(inst.attrs_type()) + ", but " +
                              fb::EnumNameOpcode(inst.op()) + " takes " + attrsName(sig.attrs));
    if (sig.attrs != fb::Attrs::NONE && !inst.attrs())
      return instError(i, "its " + attrsName(sig.attrs) + " table is missing");
    return attrs(inst, i);
  }

  /// What an instruction may write: never a constant; a parameter, state buffer or an input's
  /// own buffer only in place (writesInPlace); no persistent bytes through another buffer; and
  /// its outputs are disjoint.
  Status writes(const fb::Instruction &inst, size_t i) {
    bool inPlace = fb::writesInPlace(inst.op());
    const std::string why =
        std::string(": only the elementwise opcodes, AdamW, ClipByNorm and AllReduce ") +
        "write in place, not " + fb::EnumNameOpcode(inst.op());
    for (size_t k = 0; k < sizeOf(inst.outputs()); ++k) {
      uint32_t out = inst.outputs()->Get(flatbuffers::uoffset_t(k));
      std::string which = "output " + std::to_string(k) + " (" + bufferName(out) + ")";
      if (kind_[out] == Kind::constant)
        return instError(i, which + " is a constant; constants are never written");
      if (kind_[out] != Kind::temporary && !inPlace)
        return instError(i, which + " is a " + kindName(kind_[out]) + why);
      if (auto p = persistentOverlap(out); p && *p != out)
        return instError(i, which + " shares bytes with the " + kindName(kind_[*p]) + " in " +
                                bufferName(*p));
      for (size_t j = 0; j < sizeOf(inst.inputs()); ++j)
        if (inst.inputs()->Get(flatbuffers::uoffset_t(j)) == out && !inPlace)
          return instError(i, which + " is also input " + std::to_string(j) + why);
      for (size_t j = 0; j < k; ++j)
        if (overlap(out, inst.outputs()->Get(flatbuffers::uoffset_t(j))))
          return instError(i, which + " shares bytes with output " + std::to_string(j));
    }
    return Status::ok();
  }

  /// Attribute contents that need only the buffers' ranks; kernels check the rest.
  static bool isVersion3(fb::Opcode op) {
    return op >= fb::Opcode::AllReduce && op <= fb::Opcode::Recv;
  }

  Status attrs(const fb::Instruction &inst, size_t i) {
    if (sizeOf(inst.inputs()) == 0) // Recv
      return p2pAttrs(inst, i);
    size_t inRank = rankOf(inst.inputs()->Get(0));
    auto axisCheck = [&](int64_t axis, size_t rank, const char *of) -> Status {
      if (axis < 0 || axis >= static_cast<int64_t>(rank))
        return instError(i, "axis " + std::to_string(axis) + " is out of range for " + of +
                                " of rank " + std::to_string(rank));
      return Status::ok();
    };
    switch (inst.attrs_type()) {
    case fb::Attrs::CompareAttrs:
      if (fb::EnumNameComparePredicate(inst.attrs_as_CompareAttrs()->predicate())[0] == 0)
        return instError(i, "unknown compare predicate");
      return Status::ok();
    case fb::Attrs::TransposeAttrs:
      if (sizeOf(inst.attrs_as_TransposeAttrs()->perm()) != inRank)
        return instError(i, "perm has " +
                                std::to_string(sizeOf(inst.attrs_as_TransposeAttrs()->perm())) +
                                " entries for an input of rank " + std::to_string(inRank));
      return Status::ok();
    case fb::Attrs::SliceAttrs: {
      const fb::SliceAttrs *a = inst.attrs_as_SliceAttrs();
      if (sizeOf(a->starts()) != inRank || sizeOf(a->strides()) != inRank)
        return instError(i,
                         "starts and strides must have the input's rank " + std::to_string(inRank));
      return Status::ok();
    }
    case fb::Attrs::AxisAttrs: {
      int64_t axis = inst.attrs_as_AxisAttrs()->axis();
      if (inst.op() == fb::Opcode::Concat)
        return axisCheck(axis, rankOf(inst.outputs()->Get(0)), "the output");
      return axisCheck(axis, inRank, "the input");
    }
    case fb::Attrs::ReduceAttrs: {
      const fb::ReduceAttrs *a = inst.attrs_as_ReduceAttrs();
      if (!a->axes())
        return instError(i, "ReduceAttrs has no axes");
      if (fb::EnumNameReduceKind(a->kind())[0] == 0)
        return instError(i, "unknown reduce kind " + std::to_string(int(a->kind())));
      for (int64_t axis : *a->axes())
        RETURN_IF_ERROR(axisCheck(axis, inRank, "the input"));
      return Status::ok();
    }
    case fb::Attrs::NormAttrs: {
      double eps = inst.attrs_as_NormAttrs()->epsilon();
      if (!std::isfinite(eps) || eps < 0)
        return instError(i, "epsilon " + std::to_string(eps) + " must be finite and >= 0");
      return Status::ok();
    }
    case fb::Attrs::AttentionAttrs:
      if (!std::isfinite(inst.attrs_as_AttentionAttrs()->scale()))
        return instError(i, "scale is not finite");
      return Status::ok();
    case fb::Attrs::DropoutAttrs:
    case fb::Attrs::PadAttrs:
    case fb::Attrs::AdamWAttrs:
    case fb::Attrs::ClipAttrs:
      return trainingAttrs(inst, i, inRank);
    case fb::Attrs::CrossEntropyAttrs:
      return meshAxes(inst.attrs_as_CrossEntropyAttrs()->vocab_axes(), "vocab_axes", false,
                      [&](const std::string &m) { return instError(i, m); });
    case fb::Attrs::EmbeddingAttrs:
      return meshAxes(inst.attrs_as_EmbeddingAttrs()->vocab_axes(), "vocab_axes", false,
                      [&](const std::string &m) { return instError(i, m); });
    case fb::Attrs::CollectiveAttrs:
      return collectiveAttrs(inst, i);
    case fb::Attrs::P2PAttrs:
      return p2pAttrs(inst, i);
    default:
      return Status::ok();
    }
  }

  /// A collective's group, dims and the shapes they imply (input and output of one dtype).
  Status collectiveAttrs(const fb::Instruction &inst, size_t i) {
    const fb::CollectiveAttrs *a = inst.attrs_as_CollectiveAttrs();
    auto error = [&](const std::string &m) { return instError(i, m); };
    RETURN_IF_ERROR(meshAxes(a->axes(), "axes", true, error));
    const fb::Buffer &in = buffer(inst.inputs()->Get(0)), &out = buffer(inst.outputs()->Get(0));
    if (in.dtype() != out.dtype())
      return error(std::string("the output is ") + fb::EnumNameDType(out.dtype()) + ", the input " +
                   fb::EnumNameDType(in.dtype()));
    size_t rank = sizeOf(in.shape());
    if (sizeOf(out.shape()) != rank)
      return error("the output's rank " + std::to_string(sizeOf(out.shape())) +
                   " differs from the input's " + std::to_string(rank));
    std::vector<int64_t> want(in.shape()->begin(), in.shape()->end());
    int64_t g = groupSize(a->axes());
    fb::Opcode op = inst.op();
    if (op == fb::Opcode::AllReduce || op == fb::Opcode::ReduceScatter) {
      if (a->kind() != fb::ReduceKind::sum && a->kind() != fb::ReduceKind::max)
        return error(std::string("reduce kind ") + fb::EnumNameReduceKind(a->kind()) +
                     " is not supported by collectives (sum or max)");
      bool isFloat = in.dtype() <= fb::DType::f16;
      if (!isFloat && in.dtype() != fb::DType::i64 && in.dtype() != fb::DType::i32)
        return error(std::string("cannot reduce ") + fb::EnumNameDType(in.dtype()) + " values");
    }
    if (op != fb::Opcode::AllReduce) {
      if (a->dim() < 0 || a->dim() >= int64_t(rank))
        return error("dim " + std::to_string(a->dim()) + " is out of range for the input of rank " +
                     std::to_string(rank));
      int64_t &d = want[size_t(a->dim())];
      if (op == fb::Opcode::AllGather) {
        d *= g;
      } else {
        if (d % g != 0)
          return error("dim " + std::to_string(a->dim()) + " of size " + std::to_string(d) +
                       " does not divide over the group's " + std::to_string(g) + " ranks");
        d /= g;
      }
      if (op == fb::Opcode::AllToAll) {
        if (a->concat_dim() < 0 || a->concat_dim() >= int64_t(rank))
          return error("concat_dim " + std::to_string(a->concat_dim()) +
                       " is out of range for the input of rank " + std::to_string(rank));
        want[size_t(a->concat_dim())] *= g;
      }
    }
    if (!std::equal(want.begin(), want.end(), out.shape()->begin()))
      return error("the output's shape " + shapeString({out.shape()->data(), rank}) +
                   " should be " + shapeString(want) + " for a group of " + std::to_string(g) +
                   " ranks");
    return Status::ok();
  }

  /// Send/Recv: the axis exists, and every rank running this program has its peer in the mesh.
  Status p2pAttrs(const fb::Instruction &inst, size_t i) {
    const fb::P2PAttrs *a = inst.attrs_as_P2PAttrs();
    if (a->axis() >= meshRank())
      return instError(i, "axis " + std::to_string(a->axis()) +
                              " is not a mesh axis (the mesh has " + std::to_string(meshRank()) +
                              ")");
    if (a->shift() == 0)
      return instError(i, "shift is 0 (a rank does not send to itself)");
    if (a->tag() < 0 || a->tag() > INT32_MAX)
      return instError(i, "tag " + std::to_string(a->tag()) + " is outside [0, 2^31)");
    for (size_t r = 0; r < sizeOf(plan_.ranks()); ++r) {
      const fb::RankEntry *entry = plan_.ranks()->Get(flatbuffers::uoffset_t(r));
      if (entry->role() != progIndex_)
        continue;
      int64_t c = entry->coords()->Get(a->axis()) + a->shift();
      if (c < 0 || c >= axisSize(a->axis()))
        return instError(i, "rank " + std::to_string(r) +
                                "'s peer is outside the mesh (coordinate " + std::to_string(c) +
                                " on axis " + std::to_string(a->axis()) + " of size " +
                                std::to_string(axisSize(a->axis())) + ")");
    }
    return Status::ok();
  }

  /// The attribute tables of the training opcodes (and Dropout's shard fields).
  Status trainingAttrs(const fb::Instruction &inst, size_t i, size_t inRank) {
    switch (inst.attrs_type()) {
    case fb::Attrs::DropoutAttrs: {
      const fb::DropoutAttrs *a = inst.attrs_as_DropoutAttrs();
      double ratio = a->ratio();
      if (!(ratio >= 0 && ratio <= 1))
        return instError(i, "dropout ratio " + std::to_string(ratio) + " is outside [0, 1]");
      if (bool(a->global_shape()) != bool(a->shard_offset()))
        return instError(i, "DropoutAttrs has global_shape without shard_offset or the reverse");
      if (a->global_shape() &&
          (sizeOf(a->global_shape()) != inRank || sizeOf(a->shard_offset()) != inRank))
        return instError(i, "global_shape and shard_offset must have the input's rank " +
                                std::to_string(inRank));
      if (sizeOf(a->shard_dims()) && !a->global_shape())
        return instError(i, "DropoutAttrs has shard_dims without global_shape");
      for (size_t k = 0; k < sizeOf(a->shard_dims()); ++k) {
        const fb::DimSharding *ds = a->shard_dims()->Get(flatbuffers::uoffset_t(k));
        if (ds->dim() >= inRank)
          return instError(i, "shard_dims " + std::to_string(k) + " names dim " +
                                  std::to_string(ds->dim()) + " of a rank-" +
                                  std::to_string(inRank) + " input");
        RETURN_IF_ERROR(meshAxes(ds->axes(), "shard_dims " + std::to_string(k) + " axes", true,
                                 [&](const std::string &m) { return instError(i, m); }));
      }
      return Status::ok();
    }
    case fb::Attrs::PadAttrs: {
      const fb::PadAttrs *a = inst.attrs_as_PadAttrs();
      if (sizeOf(a->low()) != inRank || sizeOf(a->high()) != inRank ||
          sizeOf(a->interior()) != inRank)
        return instError(i, "low, high and interior must have the input's rank " +
                                std::to_string(inRank));
      for (const auto *amounts : {a->low(), a->high(), a->interior()})
        for (int64_t amount : *amounts)
          if (amount < 0)
            return instError(i, "pad amount " + std::to_string(amount) + " is negative");
      return Status::ok();
    }
    case fb::Attrs::AdamWAttrs: {
      const fb::AdamWAttrs *a = inst.attrs_as_AdamWAttrs();
      if (!(a->beta1() >= 0 && a->beta1() < 1) || !(a->beta2() >= 0 && a->beta2() < 1))
        return instError(i, "betas (" + std::to_string(a->beta1()) + ", " +
                                std::to_string(a->beta2()) + ") must be in [0, 1)");
      if (!(a->eps() >= 0) || !std::isfinite(a->eps()) || !std::isfinite(a->weight_decay()))
        return instError(i, "eps " + std::to_string(a->eps()) + " and weight_decay " +
                                std::to_string(a->weight_decay()) + " must be finite (eps >= 0)");
      return Status::ok();
    }
    case fb::Attrs::ClipAttrs: {
      double maxNorm = inst.attrs_as_ClipAttrs()->max_norm();
      if (!(maxNorm > 0) || !std::isfinite(maxNorm))
        return instError(i, "max_norm " + std::to_string(maxNorm) + " must be finite and > 0");
      return Status::ok();
    }
    default:
      return Status::ok();
    }
  }

  const fb::Plan &plan_;
  std::string source_;
  const fb::Program *prog_ = nullptr;
  size_t progIndex_ = 0;
  size_t fnIndex_ = 0;
  size_t numBuffers_ = 0;
  std::vector<Kind> kind_;                 // per buffer
  std::vector<uint32_t> persistent_;       // non-empty persistent buffers, by offset
  std::set<std::string> persistentNames_;  // parameters and state
  std::map<std::string, uint32_t> inputs_; // input name -> its first port's buffer
};

/// Version 2 plans (one rank, no collectives) are read as they are; 3 is the current one.
bool supportedVersion(uint32_t version) {
  return version == 2 || version == static_cast<uint32_t>(fb::FormatVersion::Current);
}

std::string versionError(uint32_t version) {
  return "plan format version " + std::to_string(version) +
         " is not supported (this runtime reads versions 2 and " +
         std::to_string(static_cast<uint32_t>(fb::FormatVersion::Current)) +
         "); recompile the model";
}

} // namespace

StatusOr<LoadedPlan> loadPlanFromBytes(std::vector<uint8_t> bytes, std::string path) {
  std::string source = path.empty() ? "(from memory)" : "'" + path + "'";
  auto error = [&](const std::string &what) {
    return Status::error("plan " + source + ": " + what);
  };
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(bytes.data(), fb::PlanIdentifier()))
    return error("not a megac plan (no \"MPLN\" file identifier)");
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), /*max_depth=*/64,
                                 /*max_tables=*/10'000'000);
  if (!fb::VerifyPlanBuffer(verifier)) {
    // A plan of another version may not verify against this schema: say "version" rather
    // than "corrupt" when the root table and its version field alone are in bounds.
    flatbuffers::Verifier shallow(bytes.data(), bytes.size());
    const fb::Plan *root = fb::GetPlan(bytes.data());
    const auto *table = reinterpret_cast<const flatbuffers::Table *>(root);
    if (table->VerifyTableStart(shallow) &&
        table->VerifyField<uint32_t>(shallow, fb::Plan::VT_FORMAT_VERSION, 4) &&
        !supportedVersion(root->format_version()))
      return error(versionError(root->format_version()));
    return error("the FlatBuffer is corrupt or truncated (verification failed)");
  }
  const fb::Plan *root = fb::GetPlan(bytes.data());
  if (!supportedVersion(root->format_version()))
    return error(versionError(root->format_version()));
  RETURN_IF_ERROR(Validator(*root, source).run());
  LoadedPlan plan;
  plan.bytes_ = std::move(bytes);
  plan.path_ = std::move(path);
  return plan;
}

StatusOr<LoadedPlan> loadPlanFile(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "plan file"));
  return loadPlanFromBytes(std::move(bytes), path);
}

} // namespace megac::runtime
