// The plan validator's checks of one program: its buffers (dtype, shape, size, alignment, arena),
// parameters, state and constants (persistent and disjoint), schedule, functions and their ports.
#include "runtime/plan/PlanValidator.h"

#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/PlanSchedule.h"
#include "support/HostTensor.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace megac::runtime {

namespace fb = megac::plan;

Status PlanValidator::program(const fb::Program &prog, size_t p) {
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

Status PlanValidator::progError(const std::string &what) const {
  return planError(describeProgram(*prog_, progIndex_) + ": " + what);
}

std::string PlanValidator::bufferName(size_t b) const {
  const fb::Buffer *buf = prog_->buffers()->Get(flatbuffers::uoffset_t(b));
  std::string name =
      buf->name() && buf->name()->size() ? buf->name()->str() : "%" + std::to_string(b);
  return "buffer " + std::to_string(b) + " ('" + name + "')";
}

Status PlanValidator::bufferIndex(uint32_t b, const std::string &who) const {
  if (b >= numBuffers_)
    return progError(who + " refers to buffer " + std::to_string(b) + ", but the program has " +
                     std::to_string(numBuffers_) + " buffers");
  return Status::ok();
}

Status PlanValidator::buffers() {
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
                       std::to_string(elements) + " elements of " + dtypeName(DType(buf.dtype())) +
                       " need " + std::to_string(need));
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

Status PlanValidator::parameters() {
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
                         std::to_string(offset) + " does not fit global dim " + std::to_string(d) +
                         " of size " + std::to_string(global));
    }
    if (static_cast<uint8_t>(param.init()) > static_cast<uint8_t>(fb::InitKind::ones))
      return progError(which + " has unknown init kind " + std::to_string(int(param.init())));
    if (!std::isfinite(param.init_std()) || param.init_std() < 0)
      return progError(which + " has init_std " + std::to_string(param.init_std()));
  }
  return Status::ok();
}

Status PlanValidator::claimPersistent(uint32_t b, Kind kind, const std::string &who) {
  if (kind_[b] != Kind::temporary)
    return progError(who + " uses " + bufferName(b) + ", which already holds a " +
                     kindName(kind_[b]));
  kind_[b] = kind;
  return Status::ok();
}

const char *PlanValidator::kindName(Kind kind) {
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

bool PlanValidator::overlap(uint32_t a, uint32_t b) const {
  const fb::Buffer &x = buffer(a), &y = buffer(b);
  return x.bytes() && y.bytes() && x.offset() < y.offset() + y.bytes() &&
         y.offset() < x.offset() + x.bytes();
}

Status PlanValidator::state() {
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

Status PlanValidator::schedule() const {
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
    std::optional<schedule::StepKind> kind = stepKindOf(step->kind());
    if (!kind)
      return progError(which + " has unknown kind " + std::to_string(int(step->kind())));
    bool split = *kind == schedule::StepKind::backwardInput ||
                 *kind == schedule::StepKind::backwardWeight;
    if (split && plan_.format_version() < 4)
      return progError(which + " splits the backward (a zero-bubble schedule), which needs plan "
                               "format version 4; recompile the model");
    uint32_t chunks = pl->stages() * pl->virtual_stages();
    if (step->chunk() >= chunks)
      return progError(which + " runs chunk " + std::to_string(step->chunk()) + " of " +
                       std::to_string(chunks));
    if (step->micro_batch() >= pl->micro_batches())
      return progError(which + " runs micro-batch " + std::to_string(step->micro_batch()) + " of " +
                       std::to_string(pl->micro_batches()));
    std::string fn = schedule::stepFunction({*kind, int64_t(step->chunk()), 0});
    if (!names.count(fn))
      return progError(which + " runs function '" + fn + "', which the program lacks");
  }
  // The whole schedule (parallel/PipelineSchedule.h): every chunk of the stage the first step
  // names (placed as the plan's schedule places chunks: zbv's V, else c % pp) runs forward and
  // the whole backward, or forward, input-gradient and weight-gradient backward, once per
  // micro-batch, in that order. The runtime runs the schedule as stored and checks it no further.
  std::vector<schedule::ScheduleStep> all = scheduleOf(*prog_);
  schedule::PipelineShape shape{pl->stages(), pl->virtual_stages(), pl->micro_batches()};
  if (pl->schedule())
    if (auto named = schedule::parseScheduleKind(pl->schedule()->string_view()))
      shape.placement = schedule::placementOf(*named);
  std::string error;
  if (!schedule::checkStageSchedule(shape, schedule::stageOfChunk(shape, all.front().chunk), all,
                                    &error))
    return progError(error);
  return Status::ok();
}

Status PlanValidator::constants() {
  for (size_t i = 0; i < sizeOf(prog_->constants()); ++i) {
    const fb::Constant &c = *prog_->constants()->Get(flatbuffers::uoffset_t(i));
    std::string which = "constant " + std::to_string(i);
    RETURN_IF_ERROR(bufferIndex(c.buffer(), which));
    if (sizeOf(c.data()) != buffer(c.buffer()).bytes())
      return progError(which + " has " + std::to_string(sizeOf(c.data())) + " bytes of data, but " +
                       bufferName(c.buffer()) + " has " +
                       std::to_string(buffer(c.buffer()).bytes()));
    RETURN_IF_ERROR(claimPersistent(c.buffer(), Kind::constant, which));
  }
  return Status::ok();
}

Status PlanValidator::persistentDisjoint() {
  persistent_.clear();
  for (uint32_t b = 0; b < numBuffers_; ++b)
    if (kind_[b] != Kind::temporary && buffer(b).bytes())
      persistent_.push_back(b);
  std::stable_sort(persistent_.begin(), persistent_.end(),
                   [&](uint32_t a, uint32_t b) { return buffer(a).offset() < buffer(b).offset(); });
  for (size_t i = 1; i < persistent_.size(); ++i)
    if (overlap(persistent_[i - 1], persistent_[i]))
      return progError("the " + std::string(kindName(kind_[persistent_[i - 1]])) + " in " +
                       bufferName(persistent_[i - 1]) + " and the " +
                       kindName(kind_[persistent_[i]]) + " in " + bufferName(persistent_[i]) +
                       " share bytes");
  return Status::ok();
}

std::optional<uint32_t> PlanValidator::persistentOverlap(uint32_t b) const {
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

Status PlanValidator::functions() {
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
    RETURN_IF_ERROR(inFlight(fn));
  }
  return Status::ok();
}

// Asynchronous collectives: each start's output is read by exactly one CollectiveDone later in
// the same function and by nothing before it (its bytes are in flight), so nothing is in
// flight when a function ends (docs/training-step.md "Overlap").
Status PlanValidator::inFlight(const fb::Function &fn) const {
  std::map<uint32_t, size_t> started; // buffer -> its start's instruction
  for (size_t i = 0; i < sizeOf(fn.instructions()); ++i) {
    const fb::Instruction &inst = *fn.instructions()->Get(flatbuffers::uoffset_t(i));
    fb::Opcode op = inst.op();
    bool done = op == fb::Opcode::CollectiveDone;
    for (size_t k = 0; k < sizeOf(inst.inputs()); ++k) {
      auto it = started.find(inst.inputs()->Get(flatbuffers::uoffset_t(k)));
      if (it == started.end())
        continue;
      if (!done)
        return instError(i, "reads buffer " + std::to_string(it->first) + " while instruction " +
                                std::to_string(it->second) +
                                "'s collective is in flight (read it after its CollectiveDone)");
      started.erase(it);
    }
    if (done) { // its input must be an earlier start's output
      uint32_t in = inst.inputs()->Get(0);
      bool wasStarted = false;
      for (size_t j = 0; j < i && !wasStarted; ++j) {
        const fb::Instruction &prev = *fn.instructions()->Get(flatbuffers::uoffset_t(j));
        wasStarted = fb::isCollectiveStart(prev.op()) && prev.outputs()->Get(0) == in;
      }
      if (!wasStarted)
        return instError(i, "CollectiveDone reads buffer " + std::to_string(in) +
                                ", which no earlier AllReduceStart, AllGatherStart or "
                                "ReduceScatterStart of this function writes");
    }
    if (fb::isCollectiveStart(op)) {
      uint32_t out = inst.outputs()->Get(0);
      if (!started.emplace(out, i).second)
        return instError(i, "starts a collective into buffer " + std::to_string(out) +
                                ", which is already in flight");
    }
  }
  if (!started.empty())
    return instError(started.begin()->second,
                     "starts a collective that no CollectiveDone of the function completes (a "
                     "function must complete every collective it starts)");
  return Status::ok();
}

Status PlanValidator::fnError(const std::string &what) const {
  return planError(describeFunction(*prog_, progIndex_, fnIndex_) + ": " + what);
}

Status PlanValidator::inputPorts(const fb::Function &fn) {
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
      return fnError(which + " is " + bufferName(port.buffer()) + ", which shares bytes with the " +
                     kindName(kind_[*p]) + " in " + bufferName(*p));
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

Status PlanValidator::outputPorts(const fb::Function &fn, std::set<std::string> &programNames) {
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

} // namespace megac::runtime
