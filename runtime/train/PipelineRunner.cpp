// The pipeline runtime protocol of docs/pipeline.md: one rank's scheduled chunk steps.
#include "runtime/train/PipelineRunner.h"

#include "runtime/exec/Trace.h"
#include "runtime/plan/PlanSchedule.h"
#include "runtime/plan/plan_generated.h"
#include "support/Float16.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace megac::runtime::train {

using schedule::ScheduleStep;
using schedule::StepKind;

/// How many steps past the current one have their receives posted (postReceivesEarly): the
/// schedule library's, which the planner's simulation uses too.
constexpr size_t kReceiveLookahead = static_cast<size_t>(schedule::kReceiveLookahead);

StatusOr<PipelineRun> pipelineRunForRank(const LoadedPlan &loaded, int rank) {
  const megac::plan::Plan &plan = loaded.plan();
  const megac::plan::Pipeline *pipeline = plan.pipeline();
  if (!pipeline)
    return Status::error("the plan has no pipeline (Plan.pipeline is absent)");
  if (!plan.ranks() || rank < 0 || static_cast<size_t>(rank) >= plan.ranks()->size())
    return Status::error("rank " + std::to_string(rank) + " is not in the plan's rank table (" +
                         std::to_string(plan.ranks() ? plan.ranks()->size() : 0) + " ranks)");
  uint32_t role = plan.ranks()->Get(rank)->role();
  const megac::plan::Program *program = plan.programs()->Get(role);
  if (!program->schedule() || program->schedule()->size() == 0)
    return Status::error(describeProgram(*program, role) + " (rank " + std::to_string(rank) +
                         ") has no pipeline schedule");

  PipelineRun run;
  run.stages = pipeline->stages();
  run.chunks = int64_t(pipeline->stages()) * pipeline->virtual_stages();
  run.microBatches = pipeline->micro_batches();
  run.steps = scheduleOf(*program);
  if (pipeline->schedule())
    if (auto kind = schedule::parseScheduleKind(pipeline->schedule()->string_view()))
      run.placement = schedule::placementOf(*kind);
  bool found = false;
  if (plan.mesh() && plan.mesh()->axis_names())
    for (uint32_t a = 0; a < plan.mesh()->axis_names()->size(); ++a)
      if (plan.mesh()->axis_names()->Get(a)->string_view() == "pp") {
        run.ppAxis = a;
        found = true;
      }
  if (!found && run.stages > 1)
    return Status::error("the plan's pipeline has " + std::to_string(run.stages) +
                         " stages but its mesh has no axis named 'pp'");
  return run;
}

namespace {

std::string chunkFunction(StepKind kind, int64_t chunk) {
  return schedule::stepFunction({kind, chunk, 0});
}

// The ports carrying the tensors that cross the cut before `chunk`, named `base` ("act.c<c>" or
// "grad.act.c<c>") or `base`.<i>, in the order they travel: `base` alone, then by i.
std::vector<std::string> crossingPorts(const std::vector<std::string> &ports,
                                       const std::string &base) {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string &name : ports) {
    if (name == base) {
      found.emplace_back(-1, name);
      continue;
    }
    if (name.size() <= base.size() + 1 || !name.starts_with(base) || name[base.size()] != '.')
      continue;
    std::string_view index = std::string_view(name).substr(base.size() + 1);
    if (index.size() > 9 || !std::all_of(index.begin(), index.end(),
                                         [](unsigned char ch) { return std::isdigit(ch) != 0; }))
      continue;
    found.emplace_back(std::stoll(std::string(index)), name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto &[index, name] : found)
    out.push_back(std::move(name));
  return out;
}

std::vector<std::string> withPrefix(const std::vector<std::string> &names,
                                    const std::string &prefix) {
  std::vector<std::string> out;
  for (const std::string &name : names)
    if (name.starts_with(prefix))
      out.push_back(name);
  return out;
}

StatusOr<double> sumAsDouble(const HostTensor &t) {
  double sum = 0;
  for (int64_t i = 0; i < t.numElements(); ++i) {
    switch (t.dtype) {
    case DType::f64:
      sum += t.data<double>()[i];
      break;
    case DType::f32:
      sum += t.data<float>()[i];
      break;
    case DType::bf16:
      sum += bf16ToFloat(t.data<uint16_t>()[i]);
      break;
    case DType::f16:
      sum += halfToFloat(t.data<uint16_t>()[i]);
      break;
    default:
      return Status::error(std::string("output 'loss' must be a float tensor, got ") +
                           dtypeName(t.dtype));
    }
  }
  return sum;
}

// The ports of one chunk's functions (forward and the whole backward, or forward, input- and
// weight-gradient backward), looked up once.
struct ChunkPorts {
  bool split = false;                       // backward_input.c<c> + backward_weight.c<c>
  std::vector<std::string> actIn, actOut;   // forward: received, sent (or empty)
  std::vector<std::string> gradIn, gradOut; // (input-gradient) backward: received, sent
  std::vector<std::string> stashOut;        // forward's stash outputs
  std::vector<std::string> stashIn;         // what the backward functions read of them
  std::vector<std::string> backwardIn;      // the (input-gradient) backward's kept inputs
  std::vector<std::string> weightIn;        // split: the weight-gradient backward's kept inputs
  // Split: where each of weightIn comes from after the input-gradient step ran. Inputs that
  // step read (its stash, the received gradients) are taken back from the executor, its
  // outputs copied out; the rest (stash only W reads) stay in the stash untouched.
  std::vector<std::string> weightTakenBack, weightFromOutputs;
  bool forwardReadsData = false, backwardReadsData = false, weightReadsData = false;
};

bool readsData(const std::vector<std::string> &inputs) {
  return std::any_of(inputs.begin(), inputs.end(), [](const std::string &n) {
    return !n.starts_with("act.c") && !n.starts_with("grad.act.c") && !n.starts_with("stash.c");
  });
}

// One rank's state through one optimizer step.
class Runner {
public:
  Runner(Executor &executor, comm::Communicator &comm, const PipelineRun &run)
      : executor_(executor), comm_(comm), run_(run) {}

  StatusOr<double> runAll();

private:
  Status prepare();
  Status locate();
  StatusOr<ChunkPorts> chunkPorts(int64_t c) const;
  Status runStep(const ScheduleStep &step);
  Status forward(int64_t c, int64_t m);
  Status backward(int64_t c, int64_t m); // whole or input-gradient
  Status backwardWeight(int64_t c, int64_t m);
  Status setData(int64_t m, bool reads);
  /// Posts the receives of the steps before `end` not yet posted (run_.postReceivesEarly): each
  /// port into its own buffer, through the communicator's asynchronous receive.
  Status postReceives(size_t end);
  /// Sets micro-batch m's data inputs (when the step reads them) and takes what was kept for
  /// (c, m) out of the stash: the forward's stash for a backward, B's values for a W.
  StatusOr<TensorMap> takeKept(int64_t c, int64_t m, bool readsData, const char *missing);
  int tag(int64_t c, int64_t m, StepKind dir) const {
    return static_cast<int>((m * run_.chunks + c) * 2 + (dir == StepKind::forward ? 0 : 1));
  }
  schedule::PipelineShape shape() const {
    return {run_.stages, run_.chunks / run_.stages, run_.microBatches, run_.placement};
  }
  int peerOfChunk(int64_t chunk) const { return peers_[schedule::stageOfChunk(shape(), chunk)]; }
  Status sendPorts(const std::vector<std::string> &ports, int64_t toChunk, int tag);
  /// Receives `ports` and hands them to the executor as inputs (no copy).
  Status recvPorts(const std::vector<std::string> &ports, int64_t fromChunk, int tag);

  Executor &executor_;
  comm::Communicator &comm_;
  const PipelineRun &run_;
  int64_t stage_ = 0;
  std::vector<int> peers_;              // rank of each stage, this rank's other coords
  std::map<int64_t, ChunkPorts> ports_; // by chunk (this stage's)
  // By (chunk, micro-batch): the forward's stash until the backward, then (split) what the
  // weight-gradient backward reads until it runs.
  std::map<std::pair<int64_t, int64_t>, TensorMap> stash_;
  std::map<int, std::deque<HostTensor>> loopback_; // by tag, when the peer is this rank
  /// A receive posted ahead of its step: the port, its buffer (which the handle writes) and the
  /// handle. By tag, in port order.
  struct Posted {
    std::string name;
    HostTensor value;
    std::unique_ptr<comm::CommHandle> handle;
  };
  std::map<int, std::vector<Posted>> posted_;
  size_t postedUpTo_ = 0; // steps before it have their receives posted
  int64_t dataMicroBatch_ = -1;
  double loss_ = 0;
};

// This rank's stage and the rank of every stage with this rank's other mesh coordinates.
Status Runner::locate() {
  const comm::Mesh &mesh = comm_.mesh();
  const int64_t rank = comm_.rank();
  if (run_.stages == 1) {
    peers_ = {comm_.rank()};
  } else {
    if (run_.ppAxis >= mesh.axisSizes.size() || mesh.axisNames.size() != mesh.axisSizes.size())
      return Status::error("the pp axis index " + std::to_string(run_.ppAxis) +
                           " is outside the communicator's mesh (" +
                           std::to_string(mesh.axisSizes.size()) + " axes)");
    if (mesh.axisSizes[run_.ppAxis] != run_.stages)
      return Status::error("mesh axis '" + mesh.axisNames[run_.ppAxis] + "' has size " +
                           std::to_string(mesh.axisSizes[run_.ppAxis]) + ", the pipeline " +
                           std::to_string(run_.stages) + " stages");
    // Row-major coordinates, axes slowest first (Communicator.h's Mesh).
    int64_t size = 1;
    for (int64_t s : mesh.axisSizes)
      size *= s;
    if (rank < 0 || rank >= size || comm_.size() != size)
      return Status::error("rank " + std::to_string(rank) + " of " + std::to_string(comm_.size()) +
                           " does not fit the mesh of " + std::to_string(size) + " ranks");
    int64_t stride = 1;
    for (size_t a = mesh.axisSizes.size(); a-- > run_.ppAxis + 1;)
      stride *= mesh.axisSizes[a];
    stage_ = (rank / stride) % run_.stages;
    for (int64_t s = 0; s < run_.stages; ++s)
      peers_.push_back(static_cast<int>(rank + (s - stage_) * stride));
  }
  return Status::ok();
}

// The ports of chunk c's two functions, checked against the chunk's place in the model.
StatusOr<ChunkPorts> Runner::chunkPorts(int64_t c) const {
  const int64_t rank = comm_.rank();
  std::vector<std::string> functions = executor_.functionNames();
  auto has = [&](const std::string &f) {
    return std::find(functions.begin(), functions.end(), f) != functions.end();
  };
  ChunkPorts p;
  p.split = has(chunkFunction(StepKind::backwardInput, c));
  std::string fwd = chunkFunction(StepKind::forward, c);
  std::string bwd = chunkFunction(p.split ? StepKind::backwardInput : StepKind::backward, c);
  std::string wgt = chunkFunction(StepKind::backwardWeight, c);
  std::vector<std::string> needed{fwd, bwd};
  if (p.split)
    needed.push_back(wgt);
  for (const std::string &f : needed)
    if (!has(f))
      return Status::error("rank " + std::to_string(rank) + " (stage " + std::to_string(stage_) +
                           ") has no function '" + f + "'");
  std::vector<std::string> fwdIn = executor_.inputNames(fwd), fwdOut = executor_.outputNames(fwd),
                           bwdIn = executor_.inputNames(bwd), bwdOut = executor_.outputNames(bwd);
  std::vector<std::string> wgtIn = p.split ? executor_.inputNames(wgt) : std::vector<std::string>{};
  std::string act = "act.c" + std::to_string(c), next = "act.c" + std::to_string(c + 1);
  p.actIn = crossingPorts(fwdIn, act);
  p.actOut = crossingPorts(fwdOut, next);
  // Split: the gradients received for the input-gradient step, which the weight-gradient step
  // may read too (all of them when the input-gradient step is empty: chunk 0).
  std::vector<std::string> gradReaders = bwdIn;
  for (const std::string &in : wgtIn)
    if (!std::count(gradReaders.begin(), gradReaders.end(), in))
      gradReaders.push_back(in);
  p.gradIn = crossingPorts(gradReaders, "grad." + next);
  p.gradOut = crossingPorts(bwdOut, "grad." + act);
  std::string stash = "stash.c" + std::to_string(c) + ".";
  p.stashOut = withPrefix(fwdOut, stash);
  p.backwardIn = withPrefix(bwdIn, stash);
  p.stashIn = p.backwardIn;
  p.forwardReadsData = readsData(fwdIn);
  p.backwardReadsData = readsData(bwdIn);
  p.weightReadsData = readsData(wgtIn);
  std::string where0 = "rank " + std::to_string(rank) + ": ";
  for (const std::string &in : wgtIn) {
    bool fromForward = std::count(p.stashOut.begin(), p.stashOut.end(), in) > 0;
    bool fromInput = std::count(bwdOut.begin(), bwdOut.end(), in) > 0;
    bool received = std::count(p.gradIn.begin(), p.gradIn.end(), in) > 0;
    if (in.starts_with("act.c") || (in.starts_with("grad.act.c") && !received) ||
        (in.starts_with("stash.c") && !fromForward && !(fromInput && in.starts_with(stash))))
      return Status::error(where0 + "'" + wgt + "' reads '" + in + "', which neither '" + fwd +
                           "' nor '" + bwd + "' provides for chunk " + std::to_string(c));
    if (fromForward && !std::count(p.stashIn.begin(), p.stashIn.end(), in))
      p.stashIn.push_back(in);
    if (readsData({in}))
      continue;
    p.weightIn.push_back(in);
    if (fromInput)
      p.weightFromOutputs.push_back(in);
    else if (received || std::count(p.backwardIn.begin(), p.backwardIn.end(), in))
      p.weightTakenBack.push_back(in);
  }
  // Each cut must carry something both ways, except at the ends of the model.
  std::string where = "rank " + std::to_string(rank) + ": ";
  if ((c > 0) != !p.actIn.empty())
    return Status::error(where + "'" + fwd + "' must " + (c > 0 ? "" : "not ") + "have input '" +
                         act + "' (or '" + act + ".<i>')");
  if ((c + 1 < run_.chunks) != !p.actOut.empty())
    return Status::error(where + "'" + fwd + "' must " + (c + 1 < run_.chunks ? "" : "not ") +
                         "have output '" + next + "' (or '" + next + ".<i>')");
  if ((c + 1 < run_.chunks) != !p.gradIn.empty())
    return Status::error(where + "'" + bwd + "' must " + (c + 1 < run_.chunks ? "" : "not ") +
                         "have input 'grad." + next + "' (or 'grad." + next + ".<i>')");
  if ((c > 0) != !p.gradOut.empty())
    return Status::error(where + "'" + bwd + "' must " + (c > 0 ? "" : "not ") +
                         "have output 'grad." + act + "' (or 'grad." + act + ".<i>')");
  if (c + 1 == run_.chunks && !std::count(fwdOut.begin(), fwdOut.end(), "loss"))
    return Status::error(where + "'" + fwd + "', the last chunk, has no output 'loss'");
  for (const std::string &in : p.backwardIn)
    if (!std::count(p.stashOut.begin(), p.stashOut.end(), in))
      return Status::error(where + "'" + bwd + "' reads '" + in + "', which '" + fwd +
                           "' does not output");
  return p;
}

Status Runner::prepare() {
  if (run_.stages <= 0 || run_.chunks <= 0 || run_.chunks % run_.stages != 0)
    return Status::error("pipeline chunks (" + std::to_string(run_.chunks) +
                         ") must be a positive multiple of the stages (" +
                         std::to_string(run_.stages) + ")");
  if (run_.microBatches <= 0 ||
      (run_.microBatches * run_.chunks + run_.chunks) * 2 > static_cast<int64_t>(INT_MAX))
    return Status::error("pipeline micro-batches (" + std::to_string(run_.microBatches) +
                         ") must be positive and give tags below 2^31");
  if (run_.placement == schedule::ChunkPlacement::vee && run_.chunks != 2 * run_.stages)
    return Status::error("V placement needs 2 chunks per stage; the pipeline has " +
                         std::to_string(run_.chunks) + " chunks on " + std::to_string(run_.stages) +
                         " stages");

  RETURN_IF_ERROR(locate());
  for (int64_t c = 0; c < run_.chunks; ++c)
    if (schedule::stageOfChunk(shape(), c) == stage_) {
      ASSIGN_OR_RETURN(ports_[c], chunkPorts(c));
    }
  // A step kind must match the chunk's functions: whole backward steps for an unsplit backward,
  // input- and weight-gradient steps for a split one.
  for (const ScheduleStep &step : run_.steps) {
    auto it = ports_.find(step.chunk);
    if (it == ports_.end())
      return Status::error(schedule::describeStep(step) + ": chunk " + std::to_string(step.chunk) +
                           " does not run on stage " + std::to_string(stage_));
    bool splitStep = step.kind == StepKind::backwardInput || step.kind == StepKind::backwardWeight;
    if (step.kind != StepKind::forward && splitStep != it->second.split)
      return Status::error(
          schedule::describeStep(step) + ": the program has '" +
          chunkFunction(it->second.split ? StepKind::backwardInput : StepKind::backward,
                        step.chunk) +
          "', not '" + chunkFunction(step.kind, step.chunk) + "'");
  }
  return Status::ok();
}

Status Runner::setData(int64_t m, bool reads) {
  if (!reads || !run_.setDataInputs || m == dataMicroBatch_)
    return Status::ok();
  RETURN_IF_ERROR(run_.setDataInputs(m)) << " (setting the micro-batch's data inputs)";
  dataMicroBatch_ = m;
  return Status::ok();
}

Status Runner::postReceives(size_t end) {
  for (end = std::min(end, run_.steps.size()); postedUpTo_ < end; ++postedUpTo_) {
    const ScheduleStep &step = run_.steps[postedUpTo_];
    const ChunkPorts &p = ports_.at(step.chunk);
    int64_t from = -1;
    int t = 0;
    const std::vector<std::string> *names = nullptr;
    if (step.kind == StepKind::forward && step.chunk > 0) {
      from = step.chunk - 1, t = tag(step.chunk, step.microBatch, StepKind::forward);
      names = &p.actIn;
    } else if (step.kind != StepKind::forward && step.kind != StepKind::backwardWeight &&
               step.chunk + 1 < run_.chunks) {
      from = step.chunk + 1, t = tag(step.chunk + 1, step.microBatch, StepKind::backward);
      names = &p.gradIn;
    }
    int peer = from < 0 ? comm_.rank() : peerOfChunk(from);
    if (peer == comm_.rank()) // nothing to receive, or a transfer within this rank (loopback)
      continue;
    std::vector<Posted> &ports = posted_[t];
    for (const std::string &name : *names) {
      ASSIGN_OR_RETURN(TensorInfo info, executor_.inputInfo(name));
      Posted post{name, HostTensor::zeros(info.dtype, info.shape), nullptr};
      StatusOr<std::unique_ptr<comm::CommHandle>> handle =
          comm_.startRecv(peer, t, post.value.bytes.data(), post.value.bytes.size());
      RETURN_IF_ERROR(handle.status())
          << " (posting the receive of '" << name << "' from rank " << peer << ", tag " << t
          << ", for " << schedule::describeStep(step) << ")";
      post.handle = std::move(handle).value();
      ports.push_back(std::move(post));
    }
  }
  return Status::ok();
}

Status Runner::sendPorts(const std::vector<std::string> &ports, int64_t toChunk, int tag) {
  int peer = peerOfChunk(toChunk);
  for (const std::string &name : ports) {
    ASSIGN_OR_RETURN(HostTensor value, executor_.output(name));
    if (peer == comm_.rank()) {
      loopback_[tag].push_back(std::move(value));
      continue;
    }
    RETURN_IF_ERROR(comm_.send(peer, tag, value.bytes.data(), value.bytes.size()))
        << " (sending '" << name << "' to rank " << peer << ", tag " << tag << ")";
  }
  return Status::ok();
}

Status Runner::recvPorts(const std::vector<std::string> &ports, int64_t fromChunk, int tag) {
  int peer = peerOfChunk(fromChunk);
  if (auto early = posted_.find(tag); early != posted_.end()) {
    // Posted ahead (postReceives): complete them in port order.
    std::vector<Posted> posts = std::move(early->second);
    posted_.erase(early);
    for (Posted &post : posts) {
      RETURN_IF_ERROR(post.handle->wait())
          << " (receiving '" << post.name << "' from rank " << peer << ", tag " << tag << ")";
      RETURN_IF_ERROR(executor_.setInput(post.name, std::move(post.value)));
    }
    return Status::ok();
  }
  for (const std::string &name : ports) {
    ASSIGN_OR_RETURN(TensorInfo info, executor_.inputInfo(name));
    HostTensor value = HostTensor::zeros(info.dtype, info.shape);
    if (peer == comm_.rank()) {
      auto it = loopback_.find(tag);
      if (it == loopback_.end() || it->second.empty())
        return Status::error("'" + name + "' was not produced by chunk " +
                             std::to_string(fromChunk) + " before it is needed");
      if (it->second.front().bytes.size() != value.bytes.size())
        return Status::error("'" + name + "' has " +
                             std::to_string(it->second.front().bytes.size()) +
                             " bytes from chunk " + std::to_string(fromChunk) + ", expected " +
                             std::to_string(value.bytes.size()));
      value.bytes = std::move(it->second.front().bytes);
      it->second.pop_front();
      if (it->second.empty())
        loopback_.erase(it);
    } else {
      RETURN_IF_ERROR(comm_.recv(peer, tag, value.bytes.data(), value.bytes.size()))
          << " (receiving '" << name << "' from rank " << peer << ", tag " << tag << ")";
    }
    RETURN_IF_ERROR(executor_.setInput(name, std::move(value)));
  }
  return Status::ok();
}

Status Runner::forward(int64_t c, int64_t m) {
  const ChunkPorts &p = ports_.at(c);
  RETURN_IF_ERROR(setData(m, p.forwardReadsData));
  if (c > 0)
    RETURN_IF_ERROR(recvPorts(p.actIn, c - 1, tag(c, m, StepKind::forward)));
  RETURN_IF_ERROR(executor_.run(chunkFunction(StepKind::forward, c)));
  TensorMap &kept = stash_[{c, m}];
  for (const std::string &name : p.stashIn) { // stashes the backward does not read are dropped
    ASSIGN_OR_RETURN(HostTensor value, executor_.output(name));
    kept[name] = std::move(value);
  }
  if (c + 1 < run_.chunks)
    return sendPorts(p.actOut, c + 1, tag(c + 1, m, StepKind::forward));
  ASSIGN_OR_RETURN(HostTensor loss, executor_.output("loss"));
  ASSIGN_OR_RETURN(double value, sumAsDouble(loss));
  loss_ += value;
  if (run_.afterLastForward)
    RETURN_IF_ERROR(run_.afterLastForward());
  return Status::ok();
}

StatusOr<TensorMap> Runner::takeKept(int64_t c, int64_t m, bool readsData, const char *missing) {
  RETURN_IF_ERROR(setData(m, readsData));
  auto kept = stash_.find({c, m});
  if (kept == stash_.end()) // the plan validator checked the order of every chunk's steps
    return Status::error(std::string(missing) + " (internal error)");
  TensorMap values = std::move(kept->second);
  stash_.erase(kept);
  return values;
}

Status Runner::backward(int64_t c, int64_t m) {
  const ChunkPorts &p = ports_.at(c);
  ASSIGN_OR_RETURN(TensorMap kept, takeKept(c, m, p.backwardReadsData, "no stashed values"));
  for (const std::string &name : p.backwardIn)
    RETURN_IF_ERROR(executor_.setInput(name, std::move(kept.at(name))));
  if (c + 1 < run_.chunks)
    RETURN_IF_ERROR(recvPorts(p.gradIn, c + 1, tag(c + 1, m, StepKind::backward)));
  StepKind kind = p.split ? StepKind::backwardInput : StepKind::backward;
  RETURN_IF_ERROR(executor_.run(chunkFunction(kind, c)));
  // Split: what the weight-gradient step reads, kept until it runs: the stash only it reads
  // (still in `kept`), what this step read (handed back by the executor, not copied) and this
  // step's outputs (copied out of the arena, which the next function reuses).
  TensorMap forWeight;
  if (p.split) {
    for (const std::string &name : p.weightIn)
      if (auto it = kept.find(name); it != kept.end() &&
                                     !std::count(p.backwardIn.begin(), p.backwardIn.end(), name))
        forWeight[name] = std::move(it->second);
    for (const std::string &name : p.weightTakenBack) {
      ASSIGN_OR_RETURN(forWeight[name], executor_.takeInput(name));
    }
    for (const std::string &name : p.weightFromOutputs) {
      ASSIGN_OR_RETURN(forWeight[name], executor_.output(name));
    }
  }
  if (c > 0)
    RETURN_IF_ERROR(sendPorts(p.gradOut, c - 1, tag(c, m, StepKind::backward)));
  if (p.split)
    stash_[{c, m}] = std::move(forWeight);
  return Status::ok();
}

Status Runner::backwardWeight(int64_t c, int64_t m) {
  const ChunkPorts &p = ports_.at(c);
  ASSIGN_OR_RETURN(TensorMap kept, takeKept(c, m, p.weightReadsData,
                                            "no values kept from the input-gradient step"));
  for (auto &[name, value] : kept)
    RETURN_IF_ERROR(executor_.setInput(name, std::move(value)));
  return executor_.run(chunkFunction(StepKind::backwardWeight, c));
}

Status Runner::runStep(const ScheduleStep &step) {
  Trace *trace = run_.trace && run_.trace->recording() ? run_.trace : nullptr;
  Trace::Clock::time_point start = trace ? Trace::Clock::now() : Trace::Clock::time_point();
  Status status = step.kind == StepKind::forward ? forward(step.chunk, step.microBatch)
                  : step.kind == StepKind::backwardWeight
                      ? backwardWeight(step.chunk, step.microBatch)
                      : backward(step.chunk, step.microBatch);
  if (trace) {
    // The bytes stashed and kept for later steps once this one ended (forward stashes, what W
    // reads): bench/zero_bubble_bench.py's measured activation peak per rank (issue 35).
    size_t stashed = 0;
    for (const auto &[key, values] : stash_)
      for (const auto &[name, value] : values)
        stashed += value.bytes.size();
    const char *kind = step.kind == StepKind::forward          ? "forward"
                       : step.kind == StepKind::backwardInput  ? "backward_input"
                       : step.kind == StepKind::backwardWeight ? "backward_weight"
                                                               : "backward";
    trace->add(TraceLane::pipeline, schedule::stepLabel(step), kind, start, Trace::Clock::now(),
               std::string("\"kind\": \"") + kind + "\", \"chunk\": " + std::to_string(step.chunk) +
                   ", \"micro_batch\": " + std::to_string(step.microBatch) +
                   ", \"stash_bytes\": " + std::to_string(stashed));
  }
  if (status.isOk())
    return status;
  return Status::error(schedule::describeStep(step) + ": " + status.message());
}

StatusOr<double> Runner::runAll() {
  RETURN_IF_ERROR(prepare());
  RETURN_IF_ERROR(executor_.zeroState("grad."));
  for (size_t i = 0; i < run_.steps.size(); ++i) {
    // Before step i computes, the receives of steps i .. i + kReceiveLookahead are posted, so a
    // transfer proceeds (and an emulated link's time passes) while this step computes.
    if (run_.postReceivesEarly)
      RETURN_IF_ERROR(postReceives(i + 1 + kReceiveLookahead))
          << " (" << schedule::describeStep(run_.steps[i]) << ")";
    RETURN_IF_ERROR(runStep(run_.steps[i]));
  }
  if (!posted_.empty()) // every step waits for its own: none is left (internal error)
    return Status::error("a pipeline receive of tag " + std::to_string(posted_.begin()->first) +
                         " was posted but no step completed it");
  // Nothing stays in flight past the step: a save, an evaluation or a stop follows.
  RETURN_IF_ERROR(comm_.flushSends()) << " (at the end of the pipeline schedule)";
  return loss_;
}

} // namespace

StatusOr<double> runPipelinedMicroBatches(Executor &executor, comm::Communicator &comm,
                                          const PipelineRun &run) {
  Runner runner(executor, comm, run);
  return runner.runAll();
}

} // namespace megac::runtime::train
