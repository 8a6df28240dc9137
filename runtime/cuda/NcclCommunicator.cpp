// Device collectives and transfers through NCCL (NcclCommunicator.h).
#include "runtime/cuda/NcclCommunicator.h"

#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace megac::runtime::cuda {

namespace {

Status cudaError(const std::string &what, cudaError_t error, int device) {
  return Status::error(what + " on CUDA device " + std::to_string(device) + ": " +
                       cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

#define CUDA_OR_RETURN(call, what)                                                                 \
  do {                                                                                             \
    cudaError_t cuda_error_ = (call);                                                              \
    if (cuda_error_ != cudaSuccess)                                                                \
      return cudaError(what, cuda_error_, device_);                                                \
  } while (0)

Status ncclError(const std::string &what, ncclResult_t result, ncclComm_t comm) {
  std::string text = "NCCL " + what + ": " + ncclGetErrorString(result);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return Status::error(text);
}

#define NCCL_OR_RETURN(call, what, comm)                                                           \
  do {                                                                                             \
    ncclResult_t nccl_result_ = (call);                                                            \
    if (nccl_result_ != ncclSuccess)                                                               \
      return ncclError(what, nccl_result_, comm);                                                  \
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

std::vector<uint32_t> allAxes(const comm::Mesh &mesh) {
  std::vector<uint32_t> axes(mesh.axisSizes.size());
  for (size_t a = 0; a < axes.size(); ++a)
    axes[a] = static_cast<uint32_t>(a);
  return axes;
}

} // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(const comm::Mesh &mesh,
                                                                     int rank,
                                                                     comm::Communicator *host,
                                                                     cudaStream_t compute) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator());
  c->mesh_ = mesh;
  c->rank_ = rank;
  c->compute_ = compute;
  int &device_ = c->device_;
  CUDA_OR_RETURN(cudaGetDevice(&device_), "cudaGetDevice");
  CUDA_OR_RETURN(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate (NCCL stream)");
  CUDA_OR_RETURN(cudaEventCreateWithFlags(&c->computeDone_, cudaEventDisableTiming),
                 "cudaEventCreate");
  CUDA_OR_RETURN(cudaEventCreateWithFlags(&c->commDone_, cudaEventDisableTiming),
                 "cudaEventCreate");

  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  bool alone = !host || mesh.size() == 1;
  c->worldSize_ = alone ? 1 : static_cast<int>(mesh.size());
  if (alone || rank == 0)
    NCCL_OR_RETURN(ncclGetUniqueId(&id), "ncclGetUniqueId", nullptr);
  if (!alone) {
    // Rank 0's id reaches everyone: an all-gather over every axis (the group in rank order).
    std::vector<uint32_t> axes = allAxes(mesh);
    std::vector<char> ids(sizeof id * static_cast<size_t>(mesh.size()));
    RETURN_IF_ERROR(host->allGather(axes, &id, ids.data(), sizeof id))
        << " (while sharing the NCCL id)";
    std::memcpy(&id, ids.data(), sizeof id);
  }
  // Blocks until every rank of the world has joined.
  NCCL_OR_RETURN(ncclCommInitRank(&c->world_, c->worldSize_, id, alone ? 0 : rank),
                 "ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                     std::to_string(c->worldSize_) + ")",
                 nullptr);
  return c;
}

NcclCommunicator::~NcclCommunicator() {
  // Staged sends still waiting would leave their peers hanging; send them before tearing down.
  if (world_)
    (void)flushSends();
  for (Staged &s : toSelf_) // sends to itself never received
    if (s.data)
      cudaFreeAsync(s.data, stream_);
  if (stream_)
    cudaStreamSynchronize(stream_);
  for (auto &[axes, comm] : groups_)
    if (comm != world_)
      ncclCommDestroy(comm);
  if (world_)
    ncclCommDestroy(world_);
  if (computeDone_)
    cudaEventDestroy(computeDone_);
  if (commDone_)
    cudaEventDestroy(commDone_);
  if (stream_)
    cudaStreamDestroy(stream_);
}

StatusOr<ncclComm *> NcclCommunicator::groupComm(std::span<const uint32_t> axes) {
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
  else
    NCCL_OR_RETURN(ncclCommSplit(world_, static_cast<int>(members.front()),
                                 static_cast<int>(mesh_.indexInGroup(rank_, axes)), &comm, nullptr),
                   "ncclCommSplit for the group " + mesh_.describeGroup(rank_, axes), world_);
  groups_.emplace(std::move(key), comm);
  return comm;
}

Status NcclCommunicator::prepare(const std::vector<std::vector<uint32_t>> &axisSets) {
  for (const std::vector<uint32_t> &axes : axisSets)
    RETURN_IF_ERROR(groupComm(axes).status());
  return Status::ok();
}

Status NcclCommunicator::beginCall(const char *what) {
  CUDA_OR_RETURN(cudaEventRecord(computeDone_, compute_),
                 std::string("cudaEventRecord (") + what + ")");
  CUDA_OR_RETURN(cudaStreamWaitEvent(stream_, computeDone_, 0),
                 std::string("cudaStreamWaitEvent (") + what + ")");
  return Status::ok();
}

Status NcclCommunicator::endCall(const char *what) {
  CUDA_OR_RETURN(cudaEventRecord(commDone_, stream_),
                 std::string("cudaEventRecord (") + what + ")");
  CUDA_OR_RETURN(cudaStreamWaitEvent(compute_, commDone_, 0),
                 std::string("cudaStreamWaitEvent (") + what + ")");
  return Status::ok();
}

Status NcclCommunicator::allReduce(std::span<const uint32_t> axes, const void *in, void *out,
                                   size_t count, DType dtype, comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("AllReduce"));
  NCCL_OR_RETURN(ncclAllReduce(in, out, count, type, ncclOp(kind), comm, stream_),
                 "ncclAllReduce over " + mesh_.describeGroup(rank_, axes), comm);
  return endCall("AllReduce");
}

Status NcclCommunicator::allGather(std::span<const uint32_t> axes, const void *in, void *out,
                                   size_t bytesPerRank) {
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("AllGather"));
  NCCL_OR_RETURN(ncclAllGather(in, out, bytesPerRank, ncclUint8, comm, stream_),
                 "ncclAllGather over " + mesh_.describeGroup(rank_, axes), comm);
  return endCall("AllGather");
}

Status NcclCommunicator::reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                                       size_t countPerRank, DType dtype, comm::ReduceKind kind) {
  ASSIGN_OR_RETURN(ncclDataType_t type, ncclType(dtype));
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("ReduceScatter"));
  NCCL_OR_RETURN(ncclReduceScatter(in, out, countPerRank, type, ncclOp(kind), comm, stream_),
                 "ncclReduceScatter over " + mesh_.describeGroup(rank_, axes), comm);
  return endCall("ReduceScatter");
}

Status NcclCommunicator::allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                                  size_t bytesPerRank) {
  ASSIGN_OR_RETURN(ncclComm * comm, groupComm(axes));
  int members = static_cast<int>(mesh_.groupOf(rank_, axes).size());
  RETURN_IF_ERROR(flushSends());
  RETURN_IF_ERROR(beginCall("AllToAll"));
  // One send and one receive per member (NCCL rank = group index), progressing together.
  NCCL_OR_RETURN(ncclGroupStart(), "ncclGroupStart", comm);
  for (int i = 0; i < members; ++i) {
    ncclResult_t r = ncclSend(static_cast<const char *>(in) + size_t(i) * bytesPerRank,
                              bytesPerRank, ncclUint8, i, comm, stream_);
    if (r == ncclSuccess)
      r = ncclRecv(static_cast<char *>(out) + size_t(i) * bytesPerRank, bytesPerRank, ncclUint8, i,
                   comm, stream_);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      return ncclError("AllToAll over " + mesh_.describeGroup(rank_, axes), r, comm);
    }
  }
  NCCL_OR_RETURN(ncclGroupEnd(), "AllToAll over " + mesh_.describeGroup(rank_, axes), comm);
  return endCall("AllToAll");
}

Status NcclCommunicator::stage(int peer, int tag, const void *data, size_t bytes, Staged &out) {
  out = {peer, tag, nullptr, bytes};
  RETURN_IF_ERROR(beginCall("Send"));
  if (bytes) {
    CUDA_OR_RETURN(cudaMallocAsync(&out.data, bytes, stream_),
                   "cudaMallocAsync of a " + std::to_string(bytes) + "-byte send buffer");
    CUDA_OR_RETURN(cudaMemcpyAsync(out.data, data, bytes, cudaMemcpyDeviceToDevice, stream_),
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
  Staged s;
  RETURN_IF_ERROR(stage(peer, tag, data, bytes, s));
  if (peer == rank_)
    toSelf_.push_back(s);
  else
    pending_.push_back(s);
  return Status::ok();
}

Status NcclCommunicator::issueStagedSends() {
  for (const Staged &s : pending_)
    NCCL_OR_RETURN(ncclSend(s.data, s.bytes, ncclUint8, s.peer, world_, stream_),
                   "ncclSend to rank " + std::to_string(s.peer), world_);
  return Status::ok();
}

Status NcclCommunicator::recv(int peer, int tag, void *data, size_t bytes) {
  if (peer == rank_) {
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
      CUDA_OR_RETURN(cudaMemcpyAsync(data, s.data, bytes, cudaMemcpyDeviceToDevice, stream_),
                     "cudaMemcpyAsync (Recv from itself)");
    if (s.data)
      CUDA_OR_RETURN(cudaFreeAsync(s.data, stream_), "cudaFreeAsync (send buffer)");
    return endCall("Recv");
  }
  if (peer < 0 || peer >= mesh_.size() || worldSize_ == 1)
    return Status::error("NCCL recv: rank " + std::to_string(rank_) + " cannot receive from rank " +
                         std::to_string(peer) +
                         (worldSize_ == 1 ? " without a communicator (pass ExecutorOptions::comm)"
                                          : " (not in the mesh)"));
  RETURN_IF_ERROR(beginCall("Recv"));
  // The staged sends and this receive in one group: crossing transfers progress together.
  NCCL_OR_RETURN(ncclGroupStart(), "ncclGroupStart", world_);
  Status issued = issueStagedSends();
  ncclResult_t r = ncclSuccess;
  if (issued.isOk())
    r = ncclRecv(data, bytes, ncclUint8, peer, world_, stream_);
  ncclResult_t end = ncclGroupEnd();
  RETURN_IF_ERROR(issued);
  if (r != ncclSuccess)
    return ncclError("ncclRecv from rank " + std::to_string(peer), r, world_);
  if (end != ncclSuccess)
    return ncclError("ncclRecv from rank " + std::to_string(peer), end, world_);
  for (const Staged &s : pending_)
    if (s.data)
      CUDA_OR_RETURN(cudaFreeAsync(s.data, stream_), "cudaFreeAsync (send buffer)");
  pending_.clear();
  return endCall("Recv");
}

Status NcclCommunicator::flushSends() {
  if (pending_.empty())
    return Status::ok();
  NCCL_OR_RETURN(ncclGroupStart(), "ncclGroupStart", world_);
  Status issued = issueStagedSends();
  ncclResult_t end = ncclGroupEnd();
  RETURN_IF_ERROR(issued);
  if (end != ncclSuccess)
    return ncclError("ncclSend", end, world_);
  for (const Staged &s : pending_)
    if (s.data)
      CUDA_OR_RETURN(cudaFreeAsync(s.data, stream_), "cudaFreeAsync (send buffer)");
  pending_.clear();
  // No event back to the compute stream: the sends read only their own buffers.
  return Status::ok();
}

Status NcclCommunicator::synchronize() {
  CUDA_OR_RETURN(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (NCCL stream)");
  return Status::ok();
}

} // namespace megac::runtime::cuda
