// The backend-independent half of an executor (ProgramExecutor.h).
#include "runtime/exec/ProgramExecutor.h"

#include "runtime/exec/Parameters.h"
#include "runtime/plan/PlanSchedule.h"

#include <algorithm>

namespace megac::runtime::exec {

namespace fb = megac::plan;

std::span<const int64_t> spanOf(const flatbuffers::Vector<int64_t> *v) {
  return v ? std::span<const int64_t>(v->data(), v->size()) : std::span<const int64_t>();
}

std::span<const uint32_t> spanOf(const flatbuffers::Vector<uint32_t> *v) {
  return v ? std::span<const uint32_t>(v->data(), v->size()) : std::span<const uint32_t>();
}

std::vector<uint32_t> vectorOf(const flatbuffers::Vector<uint32_t> *v) {
  std::span<const uint32_t> s = spanOf(v);
  return {s.begin(), s.end()};
}

std::string joinNames(const std::vector<std::string> &names) {
  std::string out;
  for (const std::string &name : names)
    out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

Status ProgramExecutor::loadProgram(const LoadedPlan &plan, const ExecutorOptions &options) {
  plan_ = plan;
  const fb::Plan &p = plan_.plan();
  source_ = plan_.path().empty() ? "(from memory)" : "'" + plan_.path() + "'";
  size_t ranks = p.ranks()->size();
  comm::Mesh mesh = meshOf(plan_);
  rank_ = options.rank;
  if (options.comm) {
    if (options.rank != 0 && options.rank != options.comm->rank())
      return Status::error("plan " + source_ + ": ExecutorOptions.rank " +
                           std::to_string(options.rank) + " differs from the communicator's rank " +
                           std::to_string(options.comm->rank()));
    rank_ = options.comm->rank();
    if (options.comm->mesh().axisSizes != mesh.axisSizes)
      return Status::error("plan " + source_ + ": the communicator's mesh (" +
                           std::to_string(options.comm->mesh().size()) +
                           " ranks) is not the plan's (" + std::to_string(mesh.size()) +
                           " ranks); launch one process per rank of the plan");
    comm_ = options.comm;
  }
  if (rank_ < 0 || static_cast<size_t>(rank_) >= ranks)
    return Status::error("plan " + source_ + ": rank " + std::to_string(rank_) +
                         " is not in the rank table (" + std::to_string(ranks) + " ranks)");
  if (!comm_) {
    ownComm_ = comm::makeSelfCommunicator(mesh, rank_);
    comm_ = ownComm_.get();
  }
  programIndex_ = p.ranks()->Get(static_cast<flatbuffers::uoffset_t>(rank_))->role();
  program_ = p.programs()->Get(static_cast<flatbuffers::uoffset_t>(programIndex_));
  if (program_->buffers())
    for (const fb::Buffer *b : *program_->buffers())
      buffers_.push_back(
          {static_cast<DType>(b->dtype()), spanOf(b->shape()), b->offset(), b->bytes()});
  if (program_->parameters())
    for (const fb::Parameter *param : *program_->parameters())
      params_.push_back({param->name()->str(), param->buffer(), param});
  if (program_->state())
    for (const fb::StateBuffer *st : *program_->state())
      state_.push_back({st->name()->str(), st->buffer(), st});
  for (const fb::Function *fn : *program_->functions()) {
    Function f{fn->name()->str(), fn, {}, {}};
    if (fn->inputs())
      for (const fb::Port *port : *fn->inputs()) {
        f.inputs.push_back({port->name()->str(), port->buffer(), {}});
        inputs_.try_emplace(port->name()->str(), InputSlot{port->buffer(), std::nullopt});
      }
    if (fn->outputs())
      for (const fb::Port *port : *fn->outputs())
        f.outputs.push_back({port->name()->str(), port->buffer(), vectorOf(port->partial_axes())});
    functions_.push_back(std::move(f));
  }
  return Status::ok();
}

std::vector<std::string> ProgramExecutor::names(const std::vector<Named> &list) {
  std::vector<std::string> out;
  for (const Named &n : list)
    out.push_back(n.name);
  return out;
}

StatusOr<const HostTensor *> ProgramExecutor::inputValue(const Function &fn,
                                                         const Port &port) const {
  const InputSlot &slot = inputs_.at(port.name);
  if (!slot.value)
    return Status::error("input '" + port.name + "' was not set before running function '" +
                         fn.name + "'");
  return &*slot.value;
}

const Named *ProgramExecutor::find(const std::vector<Named> &list, std::string_view name) {
  for (const Named &n : list)
    if (n.name == name)
      return &n;
  return nullptr;
}

Status ProgramExecutor::checkFits(uint32_t buffer, const HostTensor &value,
                                  const std::string &what) const {
  const BufferInfo &b = buffers_[buffer];
  if (value.dtype != b.dtype ||
      !std::equal(value.shape.begin(), value.shape.end(), b.shape.begin(), b.shape.end()))
    return Status::error(what + " must be " + dtypeName(b.dtype) + " " + shapeString(b.shape) +
                         ", got " + dtypeName(value.dtype) + " " + shapeString(value.shape));
  if (value.bytes.size() != b.bytes)
    return Status::error(what + " has " + std::to_string(value.bytes.size()) + " bytes, expected " +
                         std::to_string(b.bytes));
  return Status::ok();
}

Status ProgramExecutor::setInput(std::string_view name, const HostTensor &value) {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    return Status::error("the program has no input '" + std::string(name) +
                         "' (inputs: " + joinNames(inputNames()) + ")");
  RETURN_IF_ERROR(checkFits(it->second.buffer, value, "input '" + std::string(name) + "'"));
  it->second.value = value;
  return Status::ok();
}

Status ProgramExecutor::setInput(std::string_view name, HostTensor &&value) {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    return Status::error("the program has no input '" + std::string(name) +
                         "' (inputs: " + joinNames(inputNames()) + ")");
  RETURN_IF_ERROR(checkFits(it->second.buffer, value, "input '" + std::string(name) + "'"));
  it->second.value = std::move(value);
  return Status::ok();
}

StatusOr<HostTensor> ProgramExecutor::takeInput(std::string_view name) {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    return Status::error("the program has no input '" + std::string(name) +
                         "' (inputs: " + joinNames(inputNames()) + ")");
  if (!it->second.value)
    return Status::error("input '" + std::string(name) + "' is not set: nothing to take back");
  HostTensor value = std::move(*it->second.value);
  it->second.value.reset();
  return value;
}

Status ProgramExecutor::run() {
  if (functions_.size() == 1)
    return runFunction(0);
  for (size_t f = 0; f < functions_.size(); ++f)
    if (functions_[f].name == "forward")
      return runFunction(f);
  return Status::error("run() without a function name needs a program with one function or a "
                       "'forward' function; this one has: " +
                       joinNames(functionNames()));
}

Status ProgramExecutor::run(std::string_view function) {
  for (size_t f = 0; f < functions_.size(); ++f)
    if (functions_[f].name == function)
      return runFunction(f);
  return Status::error("the program has no function '" + std::string(function) +
                       "' (functions: " + joinNames(functionNames()) + ")");
}

StatusOr<HostTensor> ProgramExecutor::output(std::string_view name) const {
  for (size_t f = 0; f < functions_.size(); ++f)
    for (const Port &p : functions_[f].outputs) {
      if (p.name != name)
        continue;
      if (lastRun_ != f)
        return Status::error(
            "output '" + std::string(name) + "' of function '" + functions_[f].name + "' is read " +
            (lastRun_ ? "after a run of function '" + functions_[*lastRun_].name + "'"
                      : std::string("before a successful run")) +
            "; read it right after running '" + functions_[f].name + "'");
      return copyOut(p.buffer);
    }
  return Status::error("the program has no output '" + std::string(name) +
                       "' (outputs: " + joinNames(outputNames()) + ")");
}

std::vector<std::string> ProgramExecutor::functionNames() const {
  std::vector<std::string> out;
  for (const Function &f : functions_)
    out.push_back(f.name);
  return out;
}

std::vector<std::string> ProgramExecutor::inputNames(std::string_view function) const {
  std::vector<std::string> out;
  for (const Function &f : functions_) {
    if (!function.empty() && f.name != function)
      continue;
    for (const Port &p : f.inputs)
      if (std::find(out.begin(), out.end(), p.name) == out.end())
        out.push_back(p.name);
  }
  return out;
}

std::vector<std::string> ProgramExecutor::outputNames(std::string_view function) const {
  std::vector<std::string> out;
  for (const Function &f : functions_)
    if (function.empty() || f.name == function)
      for (const Port &p : f.outputs)
        out.push_back(p.name);
  return out;
}

StatusOr<TensorInfo> ProgramExecutor::inputInfo(std::string_view name) const {
  auto it = inputs_.find(name);
  if (it == inputs_.end())
    return Status::error("the program has no input '" + std::string(name) +
                         "' (inputs: " + joinNames(inputNames()) + ")");
  const BufferInfo &b = buffers_[it->second.buffer];
  return TensorInfo{b.dtype, std::vector<int64_t>(b.shape.begin(), b.shape.end())};
}

StatusOr<HostTensor> ProgramExecutor::parameter(std::string_view name) const {
  if (const Named *p = find(params_, name))
    return copyOut(p->buffer);
  return Status::error("the program has no parameter '" + std::string(name) + "'");
}

StatusOr<HostTensor> ProgramExecutor::state(std::string_view name) const {
  if (const Named *s = find(state_, name))
    return copyOut(s->buffer);
  return Status::error("the program has no state buffer '" + std::string(name) + "'");
}

Status ProgramExecutor::setParameter(std::string_view name, const HostTensor &value) {
  const Named *p = find(params_, name);
  if (!p)
    return Status::error("the program has no parameter '" + std::string(name) + "'");
  RETURN_IF_ERROR(checkFits(p->buffer, value, "parameter '" + std::string(name) + "'"));
  return copyIn(p->buffer, value);
}

Status ProgramExecutor::setState(std::string_view name, const HostTensor &value) {
  const Named *s = find(state_, name);
  if (!s)
    return Status::error("the program has no state buffer '" + std::string(name) + "'");
  RETURN_IF_ERROR(checkFits(s->buffer, value, "state buffer '" + std::string(name) + "'"));
  return copyIn(s->buffer, value);
}

StatusOr<ShardInfo> ProgramExecutor::parameterShard(std::string_view name) const {
  const Named *p = find(params_, name);
  if (!p)
    return Status::error("the program has no parameter '" + std::string(name) + "'");
  const auto *param = static_cast<const fb::Parameter *>(p->plan);
  ShardInfo info;
  std::span<const int64_t> global = spanOf(param->global_shape());
  info.globalShape.assign(global.begin(), global.end());
  ShardBox box = parameterShardBox(plan_, *param, rank_);
  info.offset = std::move(box.offset);
  info.shape = std::move(box.shape);
  std::span<const int64_t> local = buffers_[p->buffer].shape;
  if (!std::equal(local.begin(), local.end(), info.shape.begin(), info.shape.end()))
    info.bufferShape.assign(local.begin(), local.end());
  return info;
}

StatusOr<ShardInfo> ProgramExecutor::stateShard(std::string_view name) const {
  const Named *s = find(state_, name);
  if (!s)
    return Status::error("the program has no state buffer '" + std::string(name) + "'");
  const auto *st = static_cast<const fb::StateBuffer *>(s->plan);
  std::span<const int64_t> local = buffers_[s->buffer].shape;
  if (st->global_shape()) {
    ShardInfo info;
    std::span<const int64_t> global = spanOf(st->global_shape());
    info.globalShape.assign(global.begin(), global.end());
    ShardBox box = shardBox(comm_->mesh(), rank_, local, {}, global, shardingOf(st->sharding()));
    info.offset = std::move(box.offset);
    info.shape = std::move(box.shape);
    if (!std::equal(local.begin(), local.end(), info.shape.begin(), info.shape.end()))
      info.bufferShape.assign(local.begin(), local.end());
    return info;
  }
  if (name.starts_with("grad.") && find(params_, name.substr(5))) {
    StatusOr<ShardInfo> param = parameterShard(name.substr(5));
    const std::vector<int64_t> *buffer =
        param.isOk() ? (param->bufferShape.empty() ? &param->shape : &param->bufferShape) : nullptr;
    if (buffer && std::equal(local.begin(), local.end(), buffer->begin(), buffer->end()))
      return param;
  }
  return ShardInfo{{local.begin(), local.end()},
                   std::vector<int64_t>(local.size(), 0),
                   {local.begin(), local.end()}};
}

StatusOr<std::vector<uint32_t>> ProgramExecutor::statePartialAxes(std::string_view name) const {
  const Named *s = find(state_, name);
  if (!s)
    return Status::error("the program has no state buffer '" + std::string(name) + "'");
  return vectorOf(static_cast<const fb::StateBuffer *>(s->plan)->partial_axes());
}

StatusOr<std::vector<uint32_t>> ProgramExecutor::outputPartialAxes(std::string_view name) const {
  for (const Function &f : functions_)
    for (const Port &p : f.outputs)
      if (p.name == name)
        return p.partialAxes;
  return Status::error("the program has no output '" + std::string(name) +
                       "' (outputs: " + joinNames(outputNames()) + ")");
}

std::vector<schedule::ScheduleStep> ProgramExecutor::schedule() const {
  return scheduleOf(*program_);
}

} // namespace megac::runtime::exec
