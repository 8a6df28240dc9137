// The CUDA executor: one rank's program on one GPU with the CPU executor's semantics
// (runtime/exec/CpuExecutor.cpp): one device arena, constants and parameters copied in and state
// zeroed at creation, a function's instructions enqueued in order on one stream (the cuda::
// kernels, NVRTC-fused elementwise runs, multi-tensor AdamW, NCCL collectives), then one
// synchronization per function run that also reads the kernels' error flag. MEGAC_CUDA_SYNC_EACH=1
// synchronizes and reads the flag after every launch instead, so that a device fault (an illegal
// address, a kernel's error flag) names its instruction, opcode and location, not just the run.
//
// Hangs: NCCL calls are watched (NcclCommunicator.h, runtime/comm/CommWatchdog.h): a peer that
// never joins a collective, a receive or the communicators' creation fails after --comm-timeout
// with an error naming the rank, operation and group, and every communicator of the rank is
// aborted. Nothing times out a kernel of megac's own: one that never ends blocks the
// synchronization at the end of the run.
#include "runtime/cuda/CudaExecutor.h"

#include "runtime/cuda/CudaDispatch.h"

#include "runtime/cuda/CudaTry.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/ExecutorSupport.h"
#include "runtime/cuda/Fusion.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/exec/Parameters.h"
#include "runtime/exec/ProgramExecutor.h"
#include "runtime/exec/Trace.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/plan_generated.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>

namespace megac::runtime::cuda {

namespace fb = megac::plan;
using runtime::exec::BufferInfo;
using runtime::exec::Function;
using runtime::exec::InputSlot;
using runtime::exec::Port;
using runtime::exec::spanOf;

namespace {

constexpr size_t kWorkspaceBytes = size_t(64) << 20; // cuBLASLt workspace

/// How a function's instructions are launched: one at a time, a fused elementwise group, or a
/// run of AdamW instructions in one multi-tensor launch.
struct Step {
  enum class Kind { single, fused, adamw } kind = Kind::single;
  size_t first = 0, count = 1;
  size_t fused = 0; // index into fusedKernels_ (Kind::fused)
};

StepKind kindOf(const Step &step) {
  switch (step.kind) {
  case Step::Kind::fused:
    return StepKind::fused;
  case Step::Kind::adamw:
    return StepKind::adamw;
  case Step::Kind::single:
    break;
  }
  return StepKind::single;
}

/// How a function runs on the device: its launch steps and whether it has a Recv.
struct Launch {
  std::vector<Step> steps;
  bool receives = false; // has a Recv (which sends staged sends along)
};

struct Fused {
  FusedGroup group;
  std::unique_ptr<FusedKernel> kernel;
};

class CudaExecutor final : public runtime::exec::ProgramExecutor {
public:
  ~CudaExecutor() override;
  Status init(const LoadedPlan &plan, const ExecutorOptions &options);
  Status zeroState(std::string_view prefix) override;
  /// Forgets MEGAC_CUDA_PROFILE=1's sums so far (resetCudaProfile).
  void resetProfile() { profile_.reset(); }

private:
  TensorRef ref(uint32_t buffer) const {
    const BufferInfo &b = buffers_[buffer];
    return {b.dtype, b.shape, arena_ + b.offset};
  }
  Status bind() const;
  StatusOr<HostTensor> copyOut(uint32_t buffer) const override;
  Status copyIn(uint32_t buffer, const HostTensor &value) override;
  Status initDevice(const std::string &source);
  Status initNccl(const std::string &source);
  void planSteps(size_t function, bool fuse);
  bool joinsAdamW(const Function &f, size_t first, size_t candidate) const;
  Status runFunction(size_t index) override;
  Status runStep(const Function &f, const Step &step);
  StatusOr<int> takeErrorFlag();
  Status checkDeviceErrors(size_t function);
  Status checkStep(size_t function, const Step &step);
  Status execute(const fb::Instruction &inst);
  Status resetScratch();
  Status createProfileEvents();
  Status recordProfileEvent(size_t index);
  Status addToProfile(size_t function);

  std::vector<Launch> launches_; // per function
  std::vector<Fused> fused_;
  int device_ = 0;
  Trace *trace_ = nullptr;

  // Device state.
  uint8_t *arena_ = nullptr;
  Context ctx_;
  std::unique_ptr<exec::ScratchArena> scratch_;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::chrono::seconds commTimeout_{300};
  bool syncEach_ = false; // MEGAC_CUDA_SYNC_EACH=1
  bool bound_ = false;    // device_ is valid and was selected: the destructor has work to do
  // MEGAC_CUDA_PROFILE=1: two events per launch step (before, after) of the function with the
  // most steps, created once and reused by every run (each run synchronizes before reading them).
  bool profiling_ = false;
  std::vector<cudaEvent_t> profileEvents_;
  KernelProfile profile_;
};

CudaExecutor::~CudaExecutor() {
  // device_ is only set once validated (init), so this never selects a device that does not
  // exist; an executor whose init failed before binding has nothing on any device.
  if (!bound_)
    return;
  if (profiling_ && !profile_.empty())
    std::fputs(profile_.format(rank_).c_str(), stderr);
  cudaSetDevice(device_);
  if (ctx_.stream)
    cudaStreamSynchronize(ctx_.stream);
  nccl_.reset(); // before the compute stream it waits on
  fused_.clear();
  scratch_.reset();
  if (arena_)
    cudaFree(arena_);
  if (ctx_.workspace)
    cudaFree(ctx_.workspace);
  if (ctx_.errors)
    cudaFree(ctx_.errors);
  if (ctx_.lt)
    cublasLtDestroy(ctx_.lt);
  for (cudaEvent_t event : profileEvents_)
    cudaEventDestroy(event);
  if (ctx_.stream)
    cudaStreamDestroy(ctx_.stream);
  // A destructor cannot report the errors of these calls, and the CUDA runtime keeps the last one
  // per thread: left there, the next executor's first kernel launch (launchStatus reads
  // cudaGetLastError) would report it as its own.
  cudaGetLastError();
}

Status CudaExecutor::bind() const {
  CUDA_TRY(cudaSetDevice(device_), "cudaSetDevice");
  return Status::ok();
}

Status CudaExecutor::init(const LoadedPlan &plan, const ExecutorOptions &options) {
  RETURN_IF_ERROR(loadProgram(plan, options));
  trace_ = options.trace;
  commTimeout_ = options.commTimeout;
  ASSIGN_OR_RETURN(syncEach_, syncEachRequested(std::getenv("MEGAC_CUDA_SYNC_EACH")));
  if (syncEach_ && rank_ == 0)
    std::fprintf(stderr, "megac: MEGAC_CUDA_SYNC_EACH=1: synchronizing after every instruction "
                         "(slow; a device fault names its instruction)\n");
  ASSIGN_OR_RETURN(profiling_, profileRequested(std::getenv("MEGAC_CUDA_PROFILE")));
  StatusOr<int> usable = usableDevices();
  if (!usable.isOk())
    return Status::error("no usable CUDA device: " + usable.status().message());
  int devices = *usable;
  int device = options.device;
  if (device < 0) {
    ASSIGN_OR_RETURN(device, defaultDeviceFor(rank_));
  }
  // Checked before it becomes device_: the destructor selects device_, and cudaSetDevice of a
  // device that does not exist leaves cudaErrorInvalidDevice as the thread's last error.
  if (device >= devices)
    return Status::error("CUDA device " + std::to_string(device) + " does not exist (" +
                         std::to_string(devices) + " usable)");
  device_ = device;
  bound_ = true;
  RETURN_IF_ERROR(bind());
  ctx_.allowTf32 = options.allowTf32;
  RETURN_IF_ERROR(initDevice(source_));

  // Parameters are filled on the host, in an arena-shaped staging area (calloc: untouched pages
  // cost nothing), then each parameter buffer is copied to the device.
  {
    uint64_t bytes = std::max<uint64_t>(program_->arena_bytes(), 1);
    std::unique_ptr<uint8_t, decltype(&std::free)> staging(
        static_cast<uint8_t *>(std::calloc(static_cast<size_t>(bytes), 1)), &std::free);
    if (!staging)
      return Status::error("plan " + source_ + ": cannot allocate the " + std::to_string(bytes) +
                           "-byte host staging area for the parameters");
    RETURN_IF_ERROR(fillParameters(plan_, programIndex_, rank_, staging.get(), options.weights))
        << " (plan " << source_ << ", " << describeProgram(*program_, programIndex_) << ")";
    for (const runtime::exec::Named &param : params_) {
      const BufferInfo &b = buffers_[param.buffer];
      if (b.bytes)
        CUDA_TRY(cudaMemcpyAsync(arena_ + b.offset, staging.get() + b.offset, b.bytes,
                                 cudaMemcpyHostToDevice, ctx_.stream),
                 "cudaMemcpyAsync (parameter '" + param.name + "')");
    }
    CUDA_TRY(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize (parameters)");
  }
  RETURN_IF_ERROR(zeroState(""));

  launches_.resize(functions_.size());
  for (size_t f = 0; f < functions_.size(); ++f)
    if (const auto *instructions = functions_[f].plan->instructions())
      for (const fb::Instruction *inst : *instructions)
        launches_[f].receives = launches_[f].receives || inst->op() == fb::Opcode::Recv;
  const char *noFusion = std::getenv("MEGAC_NO_FUSION");
  bool fuse = !(noFusion && std::string(noFusion) == "1");
  for (size_t f = 0; f < functions_.size(); ++f)
    planSteps(f, fuse);
  if (profiling_)
    RETURN_IF_ERROR(createProfileEvents());
  RETURN_IF_ERROR(initNccl(source_));
  // Every CUDA call above was checked through its return value; one that failed and was handled
  // (a probe, NCCL's setup, which reports through ncclResult_t) may still have left the thread's
  // last error set, which the first kernel launch's check (launchStatus) would blame on itself.
  cudaGetLastError();
  return Status::ok();
}

// The stream, cuBLASLt, the error flag, scratch memory, the arena and the constants.
Status CudaExecutor::initDevice(const std::string &source) {
  CUDA_TRY(cudaStreamCreateWithFlags(&ctx_.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cublasStatus_t lt = cublasLtCreate(&ctx_.lt);
  if (lt != CUBLAS_STATUS_SUCCESS) {
    ctx_.lt = nullptr;
    return Status::error("cublasLtCreate on CUDA device " + std::to_string(device_) + ": status " +
                         std::to_string(int(lt)));
  }
  CUDA_TRY(cudaMalloc(&ctx_.workspace, kWorkspaceBytes), "cudaMalloc (cuBLASLt workspace)");
  ctx_.workspaceBytes = kWorkspaceBytes;
  CUDA_TRY(cudaMalloc(reinterpret_cast<void **>(&ctx_.errors), sizeof(int)),
           "cudaMalloc (error flag)");
  CUDA_TRY(cudaMemsetAsync(ctx_.errors, 0, sizeof(int), ctx_.stream),
           "cudaMemsetAsync (error flag)");
  scratch_ = std::make_unique<exec::ScratchArena>(device_, ctx_.stream);
  ctx_.scratch = [this](size_t bytes) { return scratch_->get(bytes); };
  // The pieces of collectives in flight and the staged sends come from the device's default
  // pool (cudaMallocAsync). Its default hands freed memory back to the driver at every stream
  // synchronization, once per function run here, so each step would map it again: keep it.
  cudaMemPool_t pool = nullptr;
  CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device_), "cudaDeviceGetDefaultMemPool");
  uint64_t keep = UINT64_MAX;
  CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
           "cudaMemPoolSetAttribute (release threshold)");

  uint64_t bytes = std::max<uint64_t>(program_->arena_bytes(), 1);
  void *arena = nullptr;
  cudaError_t error = cudaMalloc(&arena, static_cast<size_t>(bytes));
  if (error != cudaSuccess) {
    cudaGetLastError();
    StatusOr<std::string> name = describeDevice(device_);
    std::string device = "CUDA device " + std::to_string(device_) +
                         (name.isOk() ? " (" + *name + ")" : std::string());
    if (error == cudaErrorMemoryAllocation)
      return Status::error("plan " + source + ": cannot allocate the " +
                           std::to_string(program_->arena_bytes()) + "-byte arena on " + device +
                           ": out of memory; lower --micro-batch or use --recompute");
    return cudaFailure("plan " + source + ": cudaMalloc of the " +
                           std::to_string(program_->arena_bytes()) + "-byte arena",
                       error, device_);
  }
  arena_ = static_cast<uint8_t *>(arena);
  // Zeroed like the CPU's calloc'ed arena, so no run can read leftover device memory.
  CUDA_TRY(cudaMemsetAsync(arena_, 0, static_cast<size_t>(bytes), ctx_.stream),
           "cudaMemsetAsync (arena)");
  if (program_->constants())
    for (const fb::Constant *c : *program_->constants())
      if (c->data() && c->data()->size())
        CUDA_TRY(cudaMemcpyAsync(arena_ + buffers_[c->buffer()].offset, c->data()->data(),
                                 c->data()->size(), cudaMemcpyHostToDevice, ctx_.stream),
                 "cudaMemcpyAsync (constant)");
  return Status::ok();
}

// NCCL, when any program of the plan communicates: every rank must join (ncclCommInitRank and
// the group splits are collective), so the decision and the list of groups come from the whole
// plan, not this rank's program.
Status CudaExecutor::initNccl(const std::string &source) {
  bool any = false;
  std::vector<std::vector<uint32_t>> axisSets;
  for (const fb::Program *program : *plan_.plan().programs())
    for (const fb::Function *fn : *program->functions())
      if (fn->instructions())
        for (const fb::Instruction *inst : *fn->instructions()) {
          if (!exec::needsNccl(*inst))
            continue;
          any = true;
          std::optional<std::vector<uint32_t>> axes = exec::groupAxesOf(*inst);
          if (axes && std::find(axisSets.begin(), axisSets.end(), *axes) == axisSets.end())
            axisSets.push_back(*axes);
        }
  if (!any)
    return Status::ok();
  ASSIGN_OR_RETURN(nccl_, NcclCommunicator::create(comm_->mesh(), rank_, ownComm_ ? nullptr : comm_,
                                                   ctx_.stream, commTimeout_));
  // Groups this rank cannot form without a communicator fail when used, not here.
  if (!ownComm_)
    RETURN_IF_ERROR(nccl_->prepare(axisSets)) << " (plan " << source << ")";
  return Status::ok();
}

Status CudaExecutor::createProfileEvents() {
  size_t steps = 0;
  for (const Launch &launch : launches_)
    steps = std::max(steps, launch.steps.size());
  profileEvents_.reserve(2 * steps);
  for (size_t i = 0; i < 2 * steps; ++i) {
    cudaEvent_t event = nullptr;
    CUDA_TRY(cudaEventCreateWithFlags(&event, cudaEventDefault),
             "cudaEventCreate (MEGAC_CUDA_PROFILE=1)");
    profileEvents_.push_back(event);
  }
  return Status::ok();
}

Status CudaExecutor::recordProfileEvent(size_t index) {
  CUDA_TRY(cudaEventRecord(profileEvents_[index], ctx_.stream),
           "cudaEventRecord (MEGAC_CUDA_PROFILE=1)");
  return Status::ok();
}

// After the run's synchronization: each step's time between its two events. A step's time is
// the compute stream's: a collective started on the communication stream counts its ordering
// there, not its transfer, and a blocking one what the stream waited for it.
Status CudaExecutor::addToProfile(size_t index) {
  const Function &fn = functions_[index];
  const std::vector<Step> &steps = launches_[index].steps;
  for (size_t k = 0; k < steps.size(); ++k) {
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime(&ms, profileEvents_[2 * k], profileEvents_[2 * k + 1]),
             "cudaEventElapsedTime (MEGAC_CUDA_PROFILE=1)");
    profile_.add(profileKey(instruction(fn, steps[k].first).op(), kindOf(steps[k])), ms);
  }
  profile_.countRun();
  return Status::ok();
}

// Fused groups where NVRTC compiles them, runs of AdamW, else single instructions.
void CudaExecutor::planSteps(size_t index, bool fuse) {
  const Function &f = functions_[index];
  std::vector<Step> &steps = launches_[index].steps;
  std::map<size_t, size_t> fusedAt; // first instruction -> fused_ index
  if (fuse)
    for (FusedGroup &group : findFusionGroups(*program_, index)) {
      StatusOr<std::unique_ptr<FusedKernel>> kernel =
          compileFusedKernel(group, defaultKernelCacheDir());
      if (!kernel.isOk()) {
        // One line: NVRTC's log may have many.
        std::string why = kernel.status().message();
        why = why.substr(0, why.find('\n'));
        std::fprintf(stderr,
                     "megac: warning: not fusing %s and the %zu instructions after it: %s\n",
                     describeInstruction(*program_, programIndex_, index, group.first).c_str(),
                     group.count - 1, why.c_str());
        continue;
      }
      fusedAt[group.first] = fused_.size();
      fused_.push_back({std::move(group), std::move(*kernel)});
    }
  size_t count = f.plan->instructions() ? f.plan->instructions()->size() : 0;
  for (size_t i = 0; i < count;) {
    if (auto it = fusedAt.find(i); it != fusedAt.end()) {
      size_t n = fused_[it->second].group.count;
      steps.push_back({Step::Kind::fused, i, n, it->second});
      i += n;
      continue;
    }
    size_t n = 1;
    if (instruction(f, i).op() == fb::Opcode::AdamW && joinsAdamW(f, i, i))
      while (i + n < count && !fusedAt.count(i + n) && joinsAdamW(f, i, i + n))
        ++n;
    steps.push_back({n > 1 ? Step::Kind::adamw : Step::Kind::single, i, n, 0});
    i += n;
  }
}

// Whether AdamW instruction `candidate` can be launched with those of [first, candidate): equal
// config, lr, step and dtypes, in place (p, m, v written over themselves, nothing else
// overlapping), and no output overlapping another member's inputs (they run concurrently).
bool CudaExecutor::joinsAdamW(const Function &f, size_t first, size_t candidate) const {
  const fb::Instruction &c = instruction(f, candidate), &a = instruction(f, first);
  if (c.op() != fb::Opcode::AdamW || c.inputs()->size() != 6 || c.outputs()->size() != 3)
    return false;
  auto in = [](const fb::Instruction &x, int k) { return x.inputs()->Get(k); };
  auto out = [](const fb::Instruction &x, int k) { return x.outputs()->Get(k); };
  const fb::AdamWAttrs *ca = c.attrs_as_AdamWAttrs(), *aa = a.attrs_as_AdamWAttrs();
  if (!ca || !aa || ca->beta1() != aa->beta1() || ca->beta2() != aa->beta2() ||
      ca->eps() != aa->eps() || ca->weight_decay() != aa->weight_decay() ||
      !sameBytes(in(c, 4), in(a, 4)) || !sameBytes(in(c, 5), in(a, 5)))
    return false;
  // adamwMulti takes g, m and v of p's dtype.
  for (int k = 0; k < 4; ++k)
    if (buffers_[in(c, k)].dtype != buffers_[in(a, 0)].dtype)
      return false;
  const int inPlace[3] = {0, 2, 3};
  for (int k = 0; k < 3; ++k)
    if (!sameBytes(out(c, k), in(c, inPlace[k])))
      return false;
  for (size_t j = first; j <= candidate; ++j) {
    const fb::Instruction &other = instruction(f, j);
    for (int o = 0; o < 3; ++o)
      for (int k = 0; k < 6; ++k) {
        // c's outputs against every input of the members (its own in-place inputs excepted)...
        if (overlaps(out(c, o), in(other, k)) && !(j == candidate && k == inPlace[o]))
          return false;
        // ...and the members' outputs against c's inputs.
        if (j != candidate && overlaps(out(other, o), in(c, k)))
          return false;
      }
  }
  return true;
}

StatusOr<HostTensor> CudaExecutor::copyOut(uint32_t buffer) const {
  RETURN_IF_ERROR(bind());
  const BufferInfo &b = buffers_[buffer];
  HostTensor t;
  t.dtype = b.dtype;
  t.shape.assign(b.shape.begin(), b.shape.end());
  t.bytes.resize(b.bytes);
  if (b.bytes) {
    CUDA_TRY(cudaMemcpyAsync(t.bytes.data(), arena_ + b.offset, b.bytes, cudaMemcpyDeviceToHost,
                             ctx_.stream),
             "cudaMemcpyAsync (device to host)");
    CUDA_TRY(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize");
  }
  return t;
}

Status CudaExecutor::copyIn(uint32_t buffer, const HostTensor &value) {
  const BufferInfo &b = buffers_[buffer];
  RETURN_IF_ERROR(bind());
  if (b.bytes) {
    CUDA_TRY(cudaMemcpyAsync(arena_ + b.offset, value.bytes.data(), b.bytes, cudaMemcpyHostToDevice,
                             ctx_.stream),
             "cudaMemcpyAsync (host to device)");
    CUDA_TRY(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize");
  }
  return Status::ok();
}

// Tracing records each function run as one event, after its synchronization: kernels run
// asynchronously, so host times around single instructions would measure their enqueueing, not
// their execution. Per-step GPU times are MEGAC_CUDA_PROFILE=1's: CUDA events around each step,
// read after the synchronization (addToProfile).
Status CudaExecutor::runFunction(size_t index) {
  lastRun_.reset();
  const Function &fn = functions_[index];
  RETURN_IF_ERROR(bind());
  const bool tracing = trace_ && trace_->recording();
  Trace::Clock::time_point start = tracing ? Trace::Clock::now() : Trace::Clock::time_point();
  for (const Port &port : fn.inputs) {
    ASSIGN_OR_RETURN(const HostTensor *value, inputValue(fn, port));
    if (buffers_[port.buffer].bytes)
      CUDA_TRY(cudaMemcpyAsync(arena_ + buffers_[port.buffer].offset, value->bytes.data(),
                               buffers_[port.buffer].bytes, cudaMemcpyHostToDevice, ctx_.stream),
               "cudaMemcpyAsync (input '" + port.name + "')");
  }
  // Sends staged by an earlier run go out now, unless a Recv of this function carries them.
  if (nccl_ && !launches_[index].receives)
    RETURN_IF_ERROR(nccl_->flushSends());
  Status status = Status::ok();
  const std::vector<Step> &steps = launches_[index].steps;
  for (size_t k = 0; k < steps.size(); ++k) {
    const Step &step = steps[k];
    if (profiling_ && !(status = recordProfileEvent(2 * k)).isOk())
      break;
    status = runStep(fn, step);
    if (!status.isOk()) {
      status = Status::error(
          describeStep(*program_, programIndex_, index, step.first, step.count, kindOf(step)) +
          ": " + status.message());
      break;
    }
    if (profiling_ && !(status = recordProfileEvent(2 * k + 1)).isOk())
      break;
    if (syncEach_ && !(status = checkStep(index, step)).isOk())
      break;
  }
  // Collectives still in flight complete under the watchdog first: the stream synchronization
  // below would wait for them with no deadline.
  if (nccl_ && nccl_->inFlight()) {
    if (!status.isOk()) {
      (void)nccl_->drainAndForget();
    } else if (Status drained = nccl_->drain(); !drained.isOk()) {
      status = Status::error(describeFunction(*program_, programIndex_, index) + ": " +
                             drained.message());
    } else if (size_t open = nccl_->inFlight(); open) {
      (void)nccl_->drainAndForget();
      status = Status::error(describeFunction(*program_, programIndex_, index) + " ended with " +
                             std::to_string(open) +
                             " collective(s) in flight: every start needs its CollectiveDone in "
                             "the same function (plan " +
                             source_ + ")");
    }
  }
  cudaError_t synced = cudaStreamSynchronize(ctx_.stream);
  if (tracing)
    trace_->add(TraceLane::kernels, fn.name, "function", start, Trace::Clock::now());
  if (!status.isOk()) {
    // Work enqueued before the failing step may have raised the flag: clear it for the next run.
    cudaMemsetAsync(ctx_.errors, 0, sizeof(int), ctx_.stream);
    return status;
  }
  if (synced != cudaSuccess)
    return cudaFailure(describeFunction(*program_, programIndex_, index) +
                           ": cudaStreamSynchronize after the run",
                       synced, device_);
  RETURN_IF_ERROR(checkDeviceErrors(index));
  if (profiling_)
    RETURN_IF_ERROR(addToProfile(index));
  lastRun_ = index;
  return Status::ok();
}

// The kernels' error flag (0: none raised), read after the stream's work and cleared.
StatusOr<int> CudaExecutor::takeErrorFlag() {
  int code = 0;
  CUDA_TRY(cudaMemcpyAsync(&code, ctx_.errors, sizeof code, cudaMemcpyDeviceToHost, ctx_.stream),
           "cudaMemcpyAsync (error flag)");
  CUDA_TRY(cudaStreamSynchronize(ctx_.stream), "cudaStreamSynchronize");
  if (code != 0)
    CUDA_TRY(cudaMemsetAsync(ctx_.errors, 0, sizeof(int), ctx_.stream),
             "cudaMemsetAsync (error flag)");
  return code;
}

// MEGAC_CUDA_SYNC_EACH=1: after each launch, the stream's error (an illegal address is sticky:
// every later call fails too, so the first one found is the one to name) and the error flag.
Status CudaExecutor::checkStep(size_t function, const Step &step) {
  if (nccl_ && nccl_->inFlight()) // the stream may wait on them: under the watchdog first
    RETURN_IF_ERROR(nccl_->drain());
  cudaError_t error = cudaStreamSynchronize(ctx_.stream);
  if (error == cudaSuccess)
    error = cudaGetLastError();
  if (error != cudaSuccess)
    return Status::error(syncEachFailure(*program_, programIndex_, function, step.first, step.count,
                                         kindOf(step), cudaGetErrorName(error),
                                         cudaGetErrorString(error), device_));
  ASSIGN_OR_RETURN(int code, takeErrorFlag());
  if (code == 0)
    return Status::ok();
  return Status::error(
      describeStep(*program_, programIndex_, function, step.first, step.count, kindOf(step)) +
      ": " + deviceErrorMessage(static_cast<DeviceError>(code)) +
      " (MEGAC_CUDA_SYNC_EACH=1 read the kernels' error flag after every instruction before it)");
}

// Reads (and clears) the kernels' error flag after a run. The flag does not say which
// instruction raised it; when the function has one instruction of the raising kind, that one is
// named, else the function and the kinds.
Status CudaExecutor::checkDeviceErrors(size_t index) {
  ASSIGN_OR_RETURN(int code, takeErrorFlag());
  if (code == 0)
    return Status::ok();
  auto error = static_cast<DeviceError>(code);
  std::vector<fb::Opcode> ops;
  switch (error) {
  case DeviceError::indexOutOfRange:
    ops = {fb::Opcode::Gather, fb::Opcode::GatherElements, fb::Opcode::ScatterElements,
           fb::Opcode::ScatterND};
    break;
  case DeviceError::idOutOfRange:
    ops = {fb::Opcode::Embedding, fb::Opcode::EmbeddingGrad};
    break;
  case DeviceError::labelOutOfRange:
    ops = {fb::Opcode::CrossEntropy, fb::Opcode::CrossEntropyGrad};
    break;
  case DeviceError::divideByZero:
    ops = {fb::Opcode::Div};
    break;
  case DeviceError::none:
    break;
  }
  const Function &fn = functions_[index];
  std::vector<size_t> candidates;
  size_t count = fn.plan->instructions() ? fn.plan->instructions()->size() : 0;
  for (size_t i = 0; i < count; ++i)
    if (std::find(ops.begin(), ops.end(), instruction(fn, i).op()) != ops.end())
      candidates.push_back(i);
  if (candidates.size() == 1)
    return Status::error(describeInstruction(*program_, programIndex_, index, candidates[0]) +
                         ": " + deviceErrorMessage(error));
  std::string kinds;
  for (fb::Opcode op : ops)
    kinds += (kinds.empty() ? "" : " or ") + std::string(fb::EnumNameOpcode(op));
  return Status::error(
      describeFunction(*program_, programIndex_, index) + ": " +
      (kinds.empty() ? std::string("a kernel") : kinds) + " (one of " +
      std::to_string(candidates.size()) +
      " instructions; the device does not say which): " + deviceErrorMessage(error));
}

Status CudaExecutor::runStep(const Function &f, const Step &step) {
  if (step.kind == Step::Kind::single)
    return execute(instruction(f, step.first));
  RETURN_IF_ERROR(resetScratch());
  if (step.kind == Step::Kind::fused) {
    const Fused &fused = fused_[step.fused];
    std::vector<void *> pointers;
    for (uint32_t b : fused.group.inputs)
      pointers.push_back(arena_ + buffers_[b].offset);
    for (uint32_t b : fused.group.outputs)
      pointers.push_back(arena_ + buffers_[b].offset);
    return fused.kernel->launch(pointers, fused.group.elements, ctx_.stream);
  }
  std::vector<AdamWTensors> tensors;
  for (size_t i = step.first; i < step.first + step.count; ++i) {
    const fb::Instruction &inst = instruction(f, i);
    tensors.push_back({ref(inst.inputs()->Get(0)), ref(inst.inputs()->Get(1)),
                       ref(inst.inputs()->Get(2)), ref(inst.inputs()->Get(3))});
  }
  const fb::Instruction &first = instruction(f, step.first);
  const fb::AdamWAttrs *a = first.attrs_as_AdamWAttrs();
  AdamWConfig config{a->beta1(), a->beta2(), a->eps(), a->weight_decay()};
  return adamwMulti(ctx_, tensors, ref(first.inputs()->Get(4)), ref(first.inputs()->Get(5)),
                    config);
}

Status CudaExecutor::zeroState(std::string_view prefix) {
  RETURN_IF_ERROR(bind());
  for (const runtime::exec::Named &s : state_)
    if (std::string_view(s.name).starts_with(prefix) && buffers_[s.buffer].bytes)
      CUDA_TRY(cudaMemsetAsync(arena_ + buffers_[s.buffer].offset, 0, buffers_[s.buffer].bytes,
                               ctx_.stream),
               "cudaMemsetAsync (state '" + s.name + "')");
  return Status::ok();
}

Status CudaExecutor::resetScratch() {
  // Merging scratch chunks synchronizes the compute stream, which may wait on collectives in
  // flight: they complete under the watchdog first.
  if (scratch_->willSynchronize() && nccl_ && nccl_->inFlight())
    RETURN_IF_ERROR(nccl_->drain());
  return scratch_->reset();
}

Status CudaExecutor::execute(const fb::Instruction &inst) {
  RETURN_IF_ERROR(resetScratch());
  ASSIGN_OR_RETURN(InstructionTensors t, tensorsOf(
                                             inst, [this](uint32_t b) { return ref(b); },
                                             [this](size_t, uint64_t bytes) -> StatusOr<void *> {
                                               return scratch_->get(std::max<uint64_t>(bytes, 1));
                                             }));
  // A start's output is written while later instructions run: it cannot go through scratch.
  if (!t.viaScratch.empty() && fb::isCollectiveStart(inst.op()))
    return Status::error(std::string(fb::EnumNameOpcode(inst.op())) +
                         ": the output overlaps the input (a collective in flight cannot "
                         "write through scratch memory; the plan must give it its own buffer)");
  RETURN_IF_ERROR(exec::dispatch(inst, t.in, t.out, ctx_, nccl_.get(), comm_->mesh(), rank_));
  for (auto [position, o] : t.viaScratch)
    if (buffers_[o].bytes)
      CUDA_TRY(cudaMemcpyAsync(arena_ + buffers_[o].offset, t.out[position].data, buffers_[o].bytes,
                               cudaMemcpyDeviceToDevice, ctx_.stream),
               "cudaMemcpyAsync (output from scratch)");
  return Status::ok();
}

} // namespace

StatusOr<int> defaultDeviceFor(int rank) {
  StatusOr<int> devices = usableDevices();
  if (!devices.isOk())
    return Status::error("no usable CUDA device: " + devices.status().message());
  return deviceForLocalRank(launcherEnvironment(), rank, *devices);
}

StatusOr<std::unique_ptr<Executor>> createCudaExecutor(const LoadedPlan &plan,
                                                       const ExecutorOptions &options) {
  auto executor = std::make_unique<CudaExecutor>();
  RETURN_IF_ERROR(executor->init(plan, options));
  return std::unique_ptr<Executor>(std::move(executor));
}

Status resetCudaProfile(Executor &executor) {
  auto *cuda = dynamic_cast<CudaExecutor *>(&executor);
  if (!cuda)
    return Status::error("resetCudaProfile: not an executor of the CUDA backend");
  cuda->resetProfile();
  return Status::ok();
}

} // namespace megac::runtime::cuda
