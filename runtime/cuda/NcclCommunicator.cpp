// Device collectives and transfers through NCCL (NcclCommunicator.h).
#include "runtime/cuda/NcclCommunicator.h"

#include "runtime/cuda/NcclApi.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

namespace megac::runtime::cuda {

namespace {

Status cudaError(NcclApi &api, const std::string &what, cudaError_t error, int device) {
  return Status::error(what + " on CUDA device " + std::to_string(device) + ": " +
                       api.errorName(error) + ": " + api.errorString(error));
}

#define CUDA_OR_RETURN(call, what)                                                                 \
  do {                                                                                             \
    cudaError_t cuda_error_ = (call);                                                              \
    if (cuda_error_ != cudaSuccess)                                                                \
      return cudaError(*api_, what, cuda_error_, device_);                                         \
  } while (0)

Status ncclError(NcclApi &api, const std::string &what, ncclResult_t result, ncclComm_t comm) {
  std::string text = "NCCL " + what + ": " + api.getErrorString(result);
  const char *last = api.getLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return Status::error(text);
}

#define NCCL_OR_RETURN(call, what, comm)                                                           \
  do {                                                                                             \
    ncclResult_t nccl_result_ = (call);                                                            \
    if (nccl_result_ != ncclSuccess)                                                               \
      return ncclError(*api_, what, nccl_result_, comm);                                           \
  } while (0)

StatusOr<ncclDataType_t> ncclType(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return ncclFloat64;
  case DType::f32:
    return ncclFloat32;
  case DType::bf16:
    return ncclBfloat16;
  case DType::f16:
    return ncclFloat16;
  case DType::i64:
    return ncclInt64;
  case DType::i32:
    return ncclInt32;
  case DType::i1:
    return ncclUint8;
  }
  return Status::error("NCCL: dtype " + std::to_string(int(dtype)) + " has no NCCL type");
}

ncclRedOp_t ncclOp(comm::ReduceKind kind) {
  return kind == comm::ReduceKind::max ? ncclMax : ncclSum;
}

/// An NCCL call in flight on a non-blocking communicator, for the watchdog: NCCL's asynchronous
/// state (ncclInProgress while it takes the call), then the event recorded after it on the
/// communication stream (when it must have completed).
class NcclPending final : public comm::PendingOp {
public:
  NcclPending(NcclApi &api, ncclComm_t comm, cudaEvent_t event, std::function<void()> abort)
      : api_(api), comm_(comm), event_(event), abort_(std::move(abort)) {}
  State poll(std::string &why) override {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = api_.commGetAsyncError(comm_, &state); r != ncclSuccess) {
      why = std::string("ncclCommGetAsyncError: ") + api_.getErrorString(r);
      return State::failed;
    }
    if (state == ncclInProgress)
      return State::pending;
    if (state != ncclSuccess) {
      why = api_.getErrorString(state);
      if (const char *last = api_.getLastError(comm_); last && *last)
        why += std::string(" (") + last + ")";
      return State::failed;
    }
    if (!event_)
      return State::done;
    cudaError_t e = api_.eventQuery(event_);
    if (e == cudaSuccess)
      return State::done;
    if (e == cudaErrorNotReady)
      return State::pending;
    why = std::string(api_.errorName(e)) + ": " + api_.errorString(e);
    return State::failed;
  }
  void abort() override { abort_(); }

private:
  NcclApi &api_;
  ncclComm_t comm_;
  cudaEvent_t event_;
  std::function<void()> abort_;
};

/// Every communicator megac makes is non-blocking, so that the watchdog can poll it.
ncclConfig_t nonBlocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

constexpr const char *kAborted = " (the NCCL communicators of this rank were aborted)";

std::vector<uint32_t> allAxes(const comm::Mesh &mesh) {
  std::vector<uint32_t> axes(mesh.axisSizes.size());
  for (size_t a = 0; a < axes.size(); ++a)
    axes[a] = static_cast<uint32_t>(a);
  return axes;
}

} // namespace

StatusOr<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(const comm::Mesh &mesh, int rank, comm::Communicator *host,
                         cudaStream_t compute, std::chrono::seconds timeout, NcclApi *api) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->api_ = api ? api : &NcclApi::real();
  NcclApi *api_ = c->api_; // for CUDA_OR_RETURN and NCCL_OR_RETURN
  c->mesh_ = mesh;
  c->rank_ = rank;
  c->compute_ = compute;
  c->watch_.timeout = timeout;
  int &device_ = c->device_;
  CUDA_OR_RETURN(api_->getDevice(&device_), "cudaGetDevice");
  CUDA_OR_RETURN(api_->streamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate (NCCL stream)");
  CUDA_OR_RETURN(api_->eventCreateWithFlags(&c->computeDone_, cudaEventDisableTiming),
                 "cudaEventCreate");
  CUDA_OR_RETURN(api_->eventCreateWithFlags(&c->commDone_, cudaEventDisableTiming),
                 "cudaEventCreate");

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  bool alone = !host || mesh.size() == 1;
  c->worldSize_ = alone ? 1 : static_cast<int>(mesh.size());
  if (alone || rank == 0)
    NCCL_OR_RETURN(api_->getUniqueId(&id), "ncclGetUniqueId", nullptr);
  if (!alone) {
    // Rank 0's id reaches everyone: an all-gather over every axis (the group in rank order).
    std::vector<uint32_t> axes = allAxes(mesh);
    std::vector<char> ids(sizeof id * static_cast<size_t>(mesh.size()));
    RETURN_IF_ERROR(host->allGather(axes, &id, ids.data(), sizeof id))
        << " (while sharing the NCCL id)";
    std::memcpy(&id, ids.data(), sizeof id);
  }
  // Completes when every rank of the world has joined (or the deadline passes).
  ncclConfig_t config = nonBlocking();
  ncclResult_t r =
      api_->commInitRankConfig(&c->world_, c->worldSize_, id, alone ? 0 : rank, &config);
  RETURN_IF_ERROR(c->await(
      r, c->world_,
      "ncclCommInitRankConfig of the world (" + std::to_string(c->worldSize_) + " ranks)", false));
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  // Operations in flight complete (or time out) before their events and streams go.
  if (world_ && !aborted_ && !inFlight_.empty())
    (void)drainAndForget();
  // Staged sends still waiting would leave their peers hanging; send them before tearing down.
  if (world_ && !aborted_)
    (void)flushSends();
  for (Staged &s : toSelf_) // sends to itself never received
    if (s.data)
      api_->freeAsync(s.data, stream_);
  if (stream_ && world_ && !aborted_)
    (void)synchronize(); // aborts on the deadline: a send no peer receives
  else if (stream_)
    (void)synchronize(); // aborted: the streams drain
  // Non-blocking communicators are finalized (flushed) before they are destroyed.
  std::vector<ncclComm *> comms;
  for (auto &[axes, comm] : groups_)
    if (comm != world_)
      comms.push_back(comm);
  if (world_)
    comms.push_back(world_);
  for (ncclComm *comm : comms)
    if (!aborted_)
      (void)await(api_->commFinalize(comm), comm, "ncclCommFinalize", false);
  if (!aborted_)
    for (ncclComm *comm : comms)
      api_->commDestroy(comm);
  for (auto &[key, op] : inFlight_)
    spareEvents_.push_back(op.done);
  for (cudaEvent_t event : spareEvents_)
    api_->eventDestroy(event);
  if (computeDone_)
    api_->eventDestroy(computeDone_);
  if (commDone_)
    api_->eventDestroy(commDone_);
  for (auto &[comm, stream] : groupStreams_)
    api_->streamDestroy(stream);
  if (stream_)
    api_->streamDestroy(stream_);
}

StatusOr<ncclComm *> NcclCommunicator::groupComm(std::span<const uint32_t> axes) {
  if (aborted_)
    return Status::error(prefix() + "NCCL cannot run more calls: an earlier failure or timeout" +
                         kAborted);
  std::vector<uint32_t> key(axes.begin(), axes.end());
  auto it = groups_.find(key);
  if (it != groups_.end())
    return it->second;
  for (uint32_t a : axes)
    if (a >= mesh_.axisSizes.size())
      return Status::error("NCCL: mesh axis " + std::to_string(a) +
                           " does not exist (the mesh has " +
                           std::to_string(mesh_.axisSizes.size()) + " axes)");
  std::vector<int64_t> members = mesh_.groupOf(rank_, axes);
  // The world's communicator serves when the group is the world in rank order (NCCL rank =
  // group index); every rank decides alike, as the split below is collective.
  bool inRankOrder = static_cast<int>(members.size()) == worldSize_;
  for (size_t i = 0; inRankOrder && worldSize_ > 1 && i < members.size(); ++i)
    inRankOrder = members[i] == static_cast<int64_t>(i);
  ncclComm *comm = nullptr;
  if (inRankOrder)
    comm = world_;
  else if (worldSize_ == 1)
    return Status::error("NCCL: the group " + mesh_.describeGroup(rank_, axes) + " has " +
                         std::to_string(members.size()) +
                         " ranks, but this executor has no communicator to reach them (pass "
                         "ExecutorOptions::comm)");
  if (comm)
    return groups_.emplace(std::move(key), comm).first->second;
  ncclConfig_t config = nonBlocking();
  ncclResult_t r =
      api_->commSplit(world_, static_cast<int>(members.front()),
                      static_cast<int>(mesh_.indexInGroup(rank_, axes)), &comm, &config);
  if (comm)
    groups_.emplace(std::move(key), comm); // aborted with the others should the split time out
  std::string what = "ncclCommSplit for the group " + mesh_.describeGroup(rank_, axes);
  RETURN_IF_ERROR(await(r, comm ? comm : world_, what, false));
  RETURN_IF_ERROR(await(ncclSuccess, world_, what, false));
  // Its own stream: its collectives never queue behind another group's in flight.
  if (!groupStreams_.count(comm)) {
    cudaStream_t s = nullptr;
    CUDA_OR_RETURN(api_->streamCreateWithFlags(&s, cudaStreamNonBlocking),
                   "cudaStreamCreate (the stream of " + what + ")");
    groupStreams_.emplace(comm, s);
  }
  return comm;
}

cudaStream_t NcclCommunicator::streamOf(ncclComm *comm) const {
  auto it = groupStreams_.find(comm);
  return it == groupStreams_.end() ? stream_ : it->second;
}

Status NcclCommunicator::prepare(const std::vector<std::vector<uint32_t>> &axisSets) {
  for (const std::vector<uint32_t> &axes : axisSets)
    RETURN_IF_ERROR(groupComm(axes).status());
  return Status::ok();
}

Status NcclCommunicator::beginCall(const char *what, cudaStream_t on) {
  CUDA_OR_RETURN(api_->eventRecord(computeDone_, compute_),
                 std::string("cudaEventRecord (") + what + ")");
  CUDA_OR_RETURN(api_->streamWaitEvent(on ? on : stream_, computeDone_, 0),
                 std::string("cudaStreamWaitEvent (") + what + ")");
  return Status::ok();
}

Status NcclCommunicator::endCall(const char *what, cudaStream_t on) {
  CUDA_OR_RETURN(api_->eventRecord(commDone_, on ? on : stream_),
                 std::string("cudaEventRecord (") + what + ")");
  CUDA_OR_RETURN(api_->streamWaitEvent(compute_, commDone_, 0),
                 std::string("cudaStreamWaitEvent (") + what + ")");
  return Status::ok();
}

Status NcclCommunicator::await(int result, ncclComm *comm, const std::string &what,
                               bool completion) {
  auto r = static_cast<ncclResult_t>(result);
  if (r != ncclSuccess && r != ncclInProgress)
    return Status::error(prefix() + ncclError(*api_, what, r, comm).message());
  NcclPending op(*api_, comm, completion ? commDone_ : nullptr, [this] { abortAll(); });
  return comm::waitWithDeadline(op, prefix() + "NCCL " + what, watch_, kAborted);
}

void NcclCommunicator::abortAll() {
  if (aborted_)
    return;
  aborted_ = true;
  // Aborting stops this rank's NCCL kernels, so the streams waiting on them drain.
  for (auto &[axes, comm] : groups_)
    if (comm != world_)
      api_->commAbort(comm);
  if (world_)
    api_->commAbort(world_);
  groups_.clear();
  world_ = nullptr;
  pending_.clear(); // their buffers are freed in stream order by whatever runs next, or leak
}

/// One collective over the group of `axes`, `call(comm, stream)` its NCCL call: ordered after the
/// compute work and taken by NCCL; then, without `key`, ordered before later compute work and
/// waited for against the deadline, or, with `key`, tracked in flight (nothing waits for it).
template <typename Call>
Status NcclCommunicator::runCollective(std::span<const uint32_t> axes, const char *op,
                                       const char *ncclName, std::optional<uint64_t> key,
                                       Call &&call) {
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  cudaStream_t on = streamOf(comm);
  const std::string what = std::string(ncclName) + " over " + mesh_.describeGroup(rank_, axes);
  if (key) {
    RETURN_IF_ERROR(checkKey(*key, what));
  }
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall(op, on));
  RETURN_IF_ERROR(await(call(comm, on), comm, what, false));
  if (key)
    return track(*key, comm, what);
  RETURN_IF_ERROR(endCall(op, on));
  return await(ncclSuccess, comm, what, true);
}

Status NcclCommunicator::allReduce(std::span<const uint32_t> axes, const void *in, void *out,
                                   size_t count, DType dtype, comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  return runCollective(axes, "AllReduce", "ncclAllReduce", std::nullopt,
                       [&](ncclComm *comm, cudaStream_t on) {
                         return api_->allReduce(in, out, count, type, ncclOp(kind), comm, on);
                       });
}

Status NcclCommunicator::allGather(std::span<const uint32_t> axes, const void *in, void *out,
                                   size_t bytesPerRank) {
  return runCollective(axes, "AllGather", "ncclAllGather", std::nullopt,
                       [&](ncclComm *comm, cudaStream_t on) {
                         return api_->allGather(in, out, bytesPerRank, ncclUint8, comm, on);
                       });
}

Status NcclCommunicator::reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                                       size_t countPerRank, DType dtype, comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  return runCollective(axes, "ReduceScatter", "ncclReduceScatter", std::nullopt,
                       [&](ncclComm *comm, cudaStream_t on) {
                         return api_->reduceScatter(in, out, countPerRank, type, ncclOp(kind), comm,
                                                    on);
                       });
}

// ---- Asynchronous operations -----------------------------------------------------------------

Status NcclCommunicator::checkKey(uint64_t key, const std::string &what) const {
  if (aborted_)
    return Status::error(prefix() + "NCCL " + what + ": an earlier failure or timeout" + kAborted);
  if (inFlight_.count(key))
    return Status::error(prefix() + "NCCL " + what + ": operation " + std::to_string(key) +
                         " is already in flight (every start needs its finish before the key is "
                         "used again)");
  return Status::ok();
}

Status NcclCommunicator::track(uint64_t key, ncclComm *comm, std::string what) {
  cudaEvent_t done = nullptr;
  if (!spareEvents_.empty()) {
    done = spareEvents_.back();
    spareEvents_.pop_back();
  } else {
    CUDA_OR_RETURN(api_->eventCreateWithFlags(&done, cudaEventDisableTiming),
                   "cudaEventCreate (" + what + ")");
  }
  if (cudaError_t e = api_->eventRecord(done, streamOf(comm)); e != cudaSuccess) {
    spareEvents_.push_back(done);
    return cudaError(*api_, "cudaEventRecord (" + what + ")", e, device_);
  }
  InFlightOp op;
  op.comm = comm;
  op.done = done;
  op.what = std::move(what);
  inFlight_.emplace(key, std::move(op));
  return Status::ok();
}

Status NcclCommunicator::startAllReduce(uint64_t key, std::span<const uint32_t> axes,
                                        const void *in, void *out, size_t count, DType dtype,
                                        comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  return runCollective(axes, "AllReduceStart", "ncclAllReduce", key,
                       [&](ncclComm *comm, cudaStream_t on) {
                         return api_->allReduce(in, out, count, type, ncclOp(kind), comm, on);
                       });
}

Status NcclCommunicator::startAllGather(uint64_t key, std::span<const uint32_t> axes,
                                        const void *in, void *out, size_t bytesPerRank) {
  return runCollective(axes, "AllGatherStart", "ncclAllGather", key,
                       [&](ncclComm *comm, cudaStream_t on) {
                         return api_->allGather(in, out, bytesPerRank, ncclUint8, comm, on);
                       });
}

Status NcclCommunicator::startReduceScatter(uint64_t key, std::span<const uint32_t> axes,
                                            const void *in, void *out, size_t countPerRank,
                                            DType dtype, comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  return runCollective(
      axes, "ReduceScatterStart", "ncclReduceScatter", key, [&](ncclComm *comm, cudaStream_t on) {
        return api_->reduceScatter(in, out, countPerRank, type, ncclOp(kind), comm, on);
      });
}

Status NcclCommunicator::afterFinish(uint64_t key, std::function<Status()> action) {
  auto it = inFlight_.find(key);
  if (it == inFlight_.end() || it->second.finished)
    return Status::error(prefix() + "NCCL: operation " + std::to_string(key) +
                         " is not in flight (internal: afterFinish after its finish)");
  it->second.action = std::move(action);
  return Status::ok();
}

Status NcclCommunicator::finish(uint64_t key) {
  auto it = inFlight_.find(key);
  if (it == inFlight_.end() || it->second.finished)
    return Status::error(prefix() + "NCCL: finish of operation " + std::to_string(key) +
                         ", which is not in flight (no start of it, or finished already)");
  InFlightOp &op = it->second;
  CUDA_OR_RETURN(api_->streamWaitEvent(compute_, op.done, 0),
                 "cudaStreamWaitEvent (finishing " + op.what + ")");
  op.finished = true;
  if (op.action) {
    std::function<Status()> action = std::move(op.action);
    op.action = nullptr;
    RETURN_IF_ERROR(action()) << " (after " << op.what << ")";
  }
  return pollInFlight();
}

Status NcclCommunicator::pollInFlight() {
  for (auto it = inFlight_.begin(); it != inFlight_.end();) {
    InFlightOp &op = it->second;
    std::string why;
    comm::PendingOp::State state = comm::PendingOp::State::done;
    NcclPending pending(*api_, op.comm, op.done, [this] { abortAll(); });
    if (!op.completed)
      state = pending.poll(why);
    if (state == comm::PendingOp::State::failed) {
      std::string what = op.what;
      pending.abort();
      inFlight_.clear(); // their events and communicators are gone with the abort
      return Status::error(prefix() + "NCCL " + what + " failed: " + why + kAborted);
    }
    if (state == comm::PendingOp::State::done)
      op.completed = true;
    // Completed and finished: the compute stream's wait on its event is enqueued, so the event
    // may be recorded again.
    if (op.completed && op.finished) {
      spareEvents_.push_back(op.done);
      it = inFlight_.erase(it);
    } else {
      ++it;
    }
  }
  return Status::ok();
}

Status NcclCommunicator::drain() {
  for (auto &[key, op] : inFlight_) {
    if (op.completed)
      continue;
    NcclPending pending(*api_, op.comm, op.done, [this] { abortAll(); });
    Status s = comm::waitWithDeadline(pending, prefix() + "NCCL " + op.what, watch_, kAborted);
    if (!s.isOk()) {
      inFlight_.clear(); // aborted: nothing left to wait for
      return s;
    }
    op.completed = true;
  }
  return pollInFlight(); // forgets the finished ones
}

Status NcclCommunicator::drainAndForget() {
  Status s = drain();
  for (auto &[key, op] : inFlight_)
    spareEvents_.push_back(op.done);
  inFlight_.clear();
  return s;
}

Status NcclCommunicator::allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                                  size_t bytesPerRank) {
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  cudaStream_t on = streamOf(comm);
  int members = static_cast<int>(mesh_.groupOf(rank_, axes).size());
  std::string what = "AllToAll over " + mesh_.describeGroup(rank_, axes);
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("AllToAll", on));
  // One send and one receive per member (NCCL rank = group index), progressing together.
  NCCL_OR_RETURN(api_->groupStart(), "ncclGroupStart", comm);
  for (int i = 0; i < members; ++i) {
    ncclResult_t r = api_->send(static_cast<const char *>(in) + size_t(i) * bytesPerRank,
                                bytesPerRank, ncclUint8, i, comm, on);
    if (r == ncclSuccess || r == ncclInProgress)
      r = api_->recv(static_cast<char *>(out) + size_t(i) * bytesPerRank, bytesPerRank, ncclUint8,
                     i, comm, on);
    if (r != ncclSuccess && r != ncclInProgress) {
      api_->groupEnd();
      return Status::error(prefix() + ncclError(*api_, what, r, comm).message());
    }
  }
  RETURN_IF_ERROR(await(api_->groupEnd(), comm, what, false));
  RETURN_IF_ERROR(endCall("AllToAll", on));
  return await(ncclSuccess, comm, what, true);
}

Status NcclCommunicator::allToAllV(std::span<const uint32_t> axes, const void *in,
                                   std::span<const size_t> sendBytes, void *out,
                                   std::span<const size_t> recvBytes, void *counts) {
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  cudaStream_t on = streamOf(comm);
  std::string group = mesh_.describeGroup(rank_, axes);
  std::vector<int64_t> ranks = mesh_.groupOf(rank_, axes);
  size_t members = ranks.size();
  if (sendBytes.size() != members || recvBytes.size() != members)
    return Status::error("NCCL all-to-all-v over " + group + ": " +
                         std::to_string(sendBytes.size()) + " send and " +
                         std::to_string(recvBytes.size()) + " receive counts for " +
                         std::to_string(members) + " members");
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("AllToAllV", on));
  // 1. The counts: member j's count for this rank arrives in slot j of the second half.
  const size_t half = members * sizeof(int64_t);
  auto *sentCounts = static_cast<char *>(counts), *gotCounts = sentCounts + half;
  std::string what = "ncclSend/ncclRecv of the all-to-all-v counts over " + group;
  NCCL_OR_RETURN(api_->groupStart(), "ncclGroupStart", comm);
  for (int i = 0; i < static_cast<int>(members); ++i) {
    ncclResult_t r = api_->send(sentCounts + size_t(i) * sizeof(int64_t), sizeof(int64_t),
                                ncclUint8, i, comm, on);
    if (r == ncclSuccess || r == ncclInProgress)
      r = api_->recv(gotCounts + size_t(i) * sizeof(int64_t), sizeof(int64_t), ncclUint8, i, comm,
                     on);
    if (r != ncclSuccess && r != ncclInProgress) {
      api_->groupEnd();
      return Status::error(prefix() + ncclError(*api_, what, r, comm).message());
    }
  }
  RETURN_IF_ERROR(await(api_->groupEnd(), comm, what, false));
  CUDA_OR_RETURN(api_->eventRecord(commDone_, on), "cudaEventRecord (AllToAllV counts)");
  // Waited for against the deadline before the host reads them: a copy to pageable host memory
  // blocks the host until the stream reaches it, with no watchdog.
  RETURN_IF_ERROR(await(ncclSuccess, comm, what, true));
  std::vector<int64_t> got(members);
  CUDA_OR_RETURN(api_->memcpyAsync(got.data(), gotCounts, half, cudaMemcpyDeviceToHost, on),
                 "cudaMemcpyAsync (all-to-all-v counts)");
  CUDA_OR_RETURN(api_->eventRecord(commDone_, on), "cudaEventRecord (AllToAllV counts)");
  RETURN_IF_ERROR(await(ncclSuccess, comm, what, true));
  for (size_t j = 0; j < members; ++j)
    if (got[j] != static_cast<int64_t>(recvBytes[j]))
      return Status::error(
          prefix() + "NCCL all-to-all-v over " + group + ": rank " + std::to_string(ranks[j]) +
          " sends " + std::to_string(got[j]) + " bytes, this rank expects " +
          std::to_string(recvBytes[j]) +
          " (the ranks' routing disagrees: the token and expert masks must come from the same "
          "routing)");
  // 2. The blocks, in one group; members exchanging nothing both skip the pair.
  what = "all-to-all-v over " + group;
  NCCL_OR_RETURN(api_->groupStart(), "ncclGroupStart", comm);
  size_t sendAt = 0, recvAt = 0;
  for (size_t j = 0; j < members; ++j) {
    ncclResult_t r = ncclSuccess;
    if (sendBytes[j])
      r = api_->send(static_cast<const char *>(in) + sendAt, sendBytes[j], ncclUint8,
                     static_cast<int>(j), comm, on);
    if (recvBytes[j] && (r == ncclSuccess || r == ncclInProgress))
      r = api_->recv(static_cast<char *>(out) + recvAt, recvBytes[j], ncclUint8,
                     static_cast<int>(j), comm, on);
    if (r != ncclSuccess && r != ncclInProgress) {
      api_->groupEnd();
      return Status::error(prefix() + ncclError(*api_, what, r, comm).message());
    }
    sendAt += sendBytes[j];
    recvAt += recvBytes[j];
  }
  RETURN_IF_ERROR(await(api_->groupEnd(), comm, what, false));
  RETURN_IF_ERROR(endCall("AllToAllV", on));
  return await(ncclSuccess, comm, what, true);
}

Status NcclCommunicator::stage(int peer, int tag, const void *data, size_t bytes, Staged &out) {
  out = {peer, tag, nullptr, bytes};
  RETURN_IF_ERROR(beginCall("Send"));
  if (bytes) {
    CUDA_OR_RETURN(api_->mallocAsync(&out.data, bytes, stream_),
                   "cudaMallocAsync of a " + std::to_string(bytes) + "-byte send buffer");
    CUDA_OR_RETURN(api_->memcpyAsync(out.data, data, bytes, cudaMemcpyDeviceToDevice, stream_),
                   "cudaMemcpyAsync (Send staging)");
  }
  // The compute stream may overwrite `data` once the copy is done.
  return endCall("Send");
}

Status NcclCommunicator::send(int peer, int tag, const void *data, size_t bytes) {
  if (peer < 0 || peer >= mesh_.size())
    return Status::error("NCCL send: rank " + std::to_string(peer) + " is not in the mesh");
  if (peer != rank_ && worldSize_ == 1)
    return Status::error("NCCL send: rank " + std::to_string(rank_) + " cannot reach rank " +
                         std::to_string(peer) +
                         " without a communicator (pass ExecutorOptions::comm)");
  if (aborted_)
    return Status::error(prefix() + "NCCL send: an earlier failure or timeout" + kAborted);
  Staged s;
  RETURN_IF_ERROR(stage(peer, tag, data, bytes, s));
  if (peer == rank_)
    toSelf_.push_back(s);
  else
    pending_.push_back(s);
  return Status::ok();
}

Status NcclCommunicator::issueStagedSends(int peer) {
  for (const Staged &s : pending_) {
    if (peer >= 0 && s.peer != peer)
      continue;
    ncclResult_t r = api_->send(s.data, s.bytes, ncclUint8, s.peer, world_, stream_);
    if (r != ncclSuccess && r != ncclInProgress)
      return ncclError(*api_, "ncclSend to rank " + std::to_string(s.peer), r, world_);
  }
  return Status::ok();
}

Status NcclCommunicator::recvFromSelf(int tag, void *data, size_t bytes) {
  auto it =
      std::find_if(toSelf_.begin(), toSelf_.end(), [&](const Staged &s) { return s.tag == tag; });
  if (it == toSelf_.end())
    return Status::error("NCCL recv: rank " + std::to_string(rank_) +
                         " receives from itself (tag " + std::to_string(tag) +
                         ") with no matching send before it");
  if (it->bytes != bytes)
    return Status::error("NCCL recv: rank " + std::to_string(rank_) + " expects " +
                         std::to_string(bytes) + " bytes from itself, the send had " +
                         std::to_string(it->bytes));
  Staged s = *it;
  toSelf_.erase(it);
  RETURN_IF_ERROR(beginCall("Recv"));
  if (bytes)
    CUDA_OR_RETURN(api_->memcpyAsync(data, s.data, bytes, cudaMemcpyDeviceToDevice, stream_),
                   "cudaMemcpyAsync (Recv from itself)");
  if (s.data)
    CUDA_OR_RETURN(api_->freeAsync(s.data, stream_), "cudaFreeAsync (send buffer)");
  return Status::ok();
}

Status NcclCommunicator::postRecv(int peer, void *data, size_t bytes, const std::string &what) {
  if (peer < 0 || peer >= mesh_.size() || worldSize_ == 1)
    return Status::error("NCCL recv: rank " + std::to_string(rank_) + " cannot receive from rank " +
                         std::to_string(peer) +
                         (worldSize_ == 1 ? " without a communicator (pass ExecutorOptions::comm)"
                                          : " (not in the mesh)"));
  if (aborted_)
    return Status::error(prefix() + "NCCL recv: an earlier failure or timeout" + kAborted);
  RETURN_IF_ERROR(beginCall("Recv"));
  // The staged sends to `peer` and this receive in one group: crossing transfers progress
  // together. Sends to other ranks stay staged: in the group, this receive would wait for them,
  // and so for ranks that may themselves wait for this one (see the sends note in the header).
  NCCL_OR_RETURN(api_->groupStart(), "ncclGroupStart", world_);
  Status issued = issueStagedSends(peer);
  ncclResult_t r = ncclSuccess;
  if (issued.isOk())
    r = api_->recv(data, bytes, ncclUint8, peer, world_, stream_);
  ncclResult_t end = api_->groupEnd();
  RETURN_IF_ERROR(issued);
  if (r != ncclSuccess && r != ncclInProgress)
    return Status::error(prefix() + ncclError(*api_, what, r, world_).message());
  RETURN_IF_ERROR(await(end, world_, what, false));
  return releaseStagedSends(peer);
}

Status NcclCommunicator::recv(int peer, int tag, void *data, size_t bytes) {
  if (peer == rank_) {
    RETURN_IF_ERROR(recvFromSelf(tag, data, bytes));
    return endCall("Recv");
  }
  std::string what = "ncclRecv from rank " + std::to_string(peer);
  RETURN_IF_ERROR(postRecv(peer, data, bytes, what));
  RETURN_IF_ERROR(endCall("Recv"));
  return await(ncclSuccess, world_, what, true);
}

Status NcclCommunicator::startRecv(uint64_t key, int peer, int tag, void *data, size_t bytes) {
  std::string what = peer == rank_ ? "Recv from itself (tag " + std::to_string(tag) + ")"
                                   : "ncclRecv from rank " + std::to_string(peer);
  RETURN_IF_ERROR(checkKey(key, what));
  if (peer == rank_)
    RETURN_IF_ERROR(recvFromSelf(tag, data, bytes));
  else
    RETURN_IF_ERROR(postRecv(peer, data, bytes, what));
  return track(key, world_, what);
}

Status NcclCommunicator::releaseStagedSends(int peer) {
  // Freed in stream order, after the sends that read them.
  Status status = Status::ok();
  std::erase_if(pending_, [&](const Staged &s) {
    if (peer >= 0 && s.peer != peer)
      return false;
    if (s.data && status.isOk())
      if (cudaError_t e = api_->freeAsync(s.data, stream_); e != cudaSuccess)
        status = cudaError(*api_, "cudaFreeAsync (send buffer)", e, device_);
    return true;
  });
  return status;
}

Status NcclCommunicator::flushSends() {
  if (pending_.empty())
    return Status::ok();
  if (aborted_)
    return Status::error(prefix() + "NCCL send: an earlier failure or timeout" + kAborted);
  NCCL_OR_RETURN(api_->groupStart(), "ncclGroupStart", world_);
  Status issued = issueStagedSends(-1);
  ncclResult_t end = api_->groupEnd();
  RETURN_IF_ERROR(issued);
  std::string what = "ncclSend to rank " + std::to_string(pending_.front().peer);
  RETURN_IF_ERROR(await(end, world_, what, false)); // taken; it completes in the background
  RETURN_IF_ERROR(releaseStagedSends(-1));
  // No event back to the compute stream: the sends read only their own buffers.
  return Status::ok();
}

Status NcclCommunicator::synchronize() {
  if (aborted_ || !world_) {
    for (auto &[comm, stream] : groupStreams_)
      CUDA_OR_RETURN(api_->streamSynchronize(stream), "cudaStreamSynchronize (NCCL stream)");
    CUDA_OR_RETURN(api_->streamSynchronize(stream_), "cudaStreamSynchronize (NCCL stream)");
    return Status::ok();
  }
  // Everything issued, sends included, against the deadline: each group's stream, then the
  // world's.
  for (auto &[comm, stream] : groupStreams_) {
    CUDA_OR_RETURN(api_->eventRecord(commDone_, stream), "cudaEventRecord (synchronize)");
    RETURN_IF_ERROR(await(ncclSuccess, comm, "synchronize (the collectives issued)", true));
  }
  CUDA_OR_RETURN(api_->eventRecord(commDone_, stream_), "cudaEventRecord (synchronize)");
  return await(ncclSuccess, world_, "synchronize (the sends and receives issued)", true);
}

} // namespace megac::runtime::cuda
