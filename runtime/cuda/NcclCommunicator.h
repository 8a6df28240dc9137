// Collectives and point-to-point transfers on device memory between the GPUs of a plan's mesh,
// through NCCL (runtime/cuda/NcclCommunicator.cpp). The CUDA executor owns one; the host
// communicator (comm::Communicator) only bootstraps it and stays the executor's communicator()
// for host tensors (pipeline runner, checkpoints).
//
// Groups are as comm::Mesh::groupOf: for a set of mesh axes, the ranks that differ from this one
// only on those axes, ordered by their row-major index on them. A group's NCCL communicator is
// split from the world one (ncclCommSplit, color = the group's first member, key = the index in
// the group, so NCCL rank = group index) the first time it is used and cached. The split is a
// collective over the whole world: every rank must ask for the groups of the same axis sets in
// the same order, so the executor asks for every axis set its plan uses at creation (prepare()).
//
// Streams: each call runs on the communicator's own stream, which first waits for an event
// recorded on the compute stream (so it sees the compute work issued before), and the compute
// stream then waits for an event recorded after the call (so later compute sees its result).
// Nothing blocks the host: NCCL calls are asynchronous.
//
// Timeouts (`--comm-timeout`, as the MPI communicator's): every NCCL communicator is
// non-blocking (ncclConfig_t blocking = 0). Each call, including the world's creation and the
// group splits, is polled until NCCL has taken it (ncclCommGetAsyncError no longer
// ncclInProgress) and, for collectives and receives, until it has completed on the
// communication stream (an event after it), against the deadline (runtime/comm/CommWatchdog.h).
// An asynchronous error or an expired deadline aborts every communicator of this rank
// (ncclCommAbort) and returns an error naming the rank, the operation and the group; later calls
// fail at once. The host thus waits for each collective (the compute stream waited for it
// anyway; what is lost is queueing later kernels while it runs).
//
// Sends: send() copies the data into a staging buffer and returns (like comm::Communicator's
// send, so 1F1B's crossing transfers cannot deadlock); the staged sends to a rank go out in one
// NCCL group with the next recv() from that rank (in issue order, as NCCL matches each pair's
// messages in order), or, with those to every rank, at the next collective, flushSends() or
// destruction. A recv() never carries sends to other ranks: its group completes only when all of
// its operations have, so a receive from rank A would wait for rank B to take a send, and B may
// itself be waiting for this rank (pipelines: tests/unit/cuda/NcclFakeTest.cpp).
// The other side of that choice: a send stays staged while this rank waits on a receive from
// another rank, so code that must let a send out before such a receive calls flushSends() first
// (the CUDA executor does at the start of every function without receives). A send to this very
// rank is kept until the recv() from itself with the same tag.
#pragma once

#include "runtime/comm/CommWatchdog.h"
#include "runtime/comm/Communicator.h"
#include "support/Status.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <vector>

struct ncclComm;

namespace megac::runtime::cuda {

class NcclApi;

class NcclCommunicator {
public:
  /// The communicator of `rank` in `mesh` on the current device; `compute` is the stream the
  /// callers' kernels run on. With `host` (whose mesh is `mesh`), every rank of the mesh must call
  /// this at the same time: rank 0's NCCL id travels over `host`. Without it (a one-rank view),
  /// NCCL gets a world of this rank alone and only groups of one rank work. A call that waits
  /// longer than `timeout` fails (see Timeouts above). `api` makes the NCCL and CUDA calls
  /// (NcclApi.h; a fake in tests); null: the real ones. It must outlive the communicator.
  static StatusOr<std::unique_ptr<NcclCommunicator>>
  create(const comm::Mesh &mesh, int rank, comm::Communicator *host, cudaStream_t compute,
         std::chrono::seconds timeout = std::chrono::seconds(300), NcclApi *api = nullptr);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator &) = delete;
  NcclCommunicator &operator=(const NcclCommunicator &) = delete;

  int rank() const { return rank_; }
  const comm::Mesh &mesh() const { return mesh_; }
  /// The stream the NCCL calls run on.
  cudaStream_t stream() const { return stream_; }

  /// Makes the group communicators of every axis set in `axisSets`, in that order (a collective
  /// over the world: every rank must pass the same list).
  Status prepare(const std::vector<std::vector<uint32_t>> &axisSets);

  /// out = the group's sum or max of `in` (count elements; out may be in). Half types reduce in
  /// NCCL's bf16/f16 arithmetic (the CPU reduces in f32 and rounds once: results agree to the
  /// half type's rounding for groups up to 2 ranks and closely beyond).
  Status allReduce(std::span<const uint32_t> axes, const void *in, void *out, size_t count,
                   DType dtype, comm::ReduceKind kind);
  /// out holds group-size blocks of bytesPerRank, in group order.
  Status allGather(std::span<const uint32_t> axes, const void *in, void *out, size_t bytesPerRank);
  /// in holds group-size blocks of countPerRank elements; out gets the reduction of block
  /// (this rank's group index).
  Status reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                       size_t countPerRank, DType dtype, comm::ReduceKind kind);
  /// Block i of in goes to member i; block j of out comes from member j (out must not be in).
  Status allToAll(std::span<const uint32_t> axes, const void *in, void *out, size_t bytesPerRank);
  /// To / from world rank `peer` (see the sends note above); messages between two ranks are
  /// matched in order, `tag` only matters for a rank sending to itself.
  Status send(int peer, int tag, const void *data, size_t bytes);
  Status recv(int peer, int tag, void *data, size_t bytes);
  /// Starts every staged send (it completes in the background).
  Status flushSends();
  /// Waits for everything issued on the communication stream.
  Status synchronize();
  /// Whether a failure or timeout aborted the communicators (every later call fails).
  bool aborted() const { return aborted_; }

private:
  NcclCommunicator() = default;
  struct Staged {
    int peer = 0, tag = 0;
    void *data = nullptr;
    size_t bytes = 0;
  };
  /// The NCCL communicator of this rank's group over `axes` (the world's when it is the whole
  /// world), made on first use.
  StatusOr<ncclComm *> groupComm(std::span<const uint32_t> axes);
  /// Orders the communication stream after the compute work issued so far.
  Status beginCall(const char *what);
  /// Orders the compute stream after the communication issued so far.
  Status endCall(const char *what);
  Status stage(int peer, int tag, const void *data, size_t bytes, Staged &out);
  /// ncclSend of every staged send to `peer` (every one with -1), in issue order, inside the
  /// caller's group.
  Status issueStagedSends(int peer);
  /// Frees (in stream order) and forgets the staged sends to `peer` (every one with -1), once
  /// issued.
  Status releaseStagedSends(int peer);
  /// After an NCCL call on `comm` returned `result`: waits until NCCL has taken it (non-blocking
  /// communicators answer ncclInProgress) and, with `completion`, until the communication stream
  /// has run it; `what` names the operation and group for errors.
  Status await(int result, ncclComm *comm, const std::string &what, bool completion);
  /// ncclCommAbort on every communicator of this rank.
  void abortAll();
  /// "rank R: ": errors name the rank.
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }

  NcclApi *api_ = nullptr; // the NCCL and CUDA calls
  comm::Mesh mesh_;
  int rank_ = 0;
  int worldSize_ = 1; // ranks in the NCCL world (1 without a host communicator)
  ncclComm *world_ = nullptr;
  std::map<std::vector<uint32_t>, ncclComm *> groups_; // split communicators, by axes as given
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t computeDone_ = nullptr, commDone_ = nullptr;
  std::vector<Staged> pending_; // staged sends to other ranks, in issue order
  std::deque<Staged> toSelf_;   // sends to this rank, waiting for their recv
  int device_ = 0;
  comm::WatchdogOptions watch_;
  bool aborted_ = false;
};

} // namespace megac::runtime::cuda
