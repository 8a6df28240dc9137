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
// Streams: each call runs on a communication stream, which first waits for an event recorded on
// the compute stream (so it sees the compute work issued before), and the compute stream then
// waits for an event recorded after the call (so later compute sees its result). The world's
// communicator (and every transfer) has one stream, each split group's communicator its own, so
// a blocking tensor-parallel all-reduce never queues behind a data-parallel reduction in flight
// (ranks issue the calls of every group in the same order, as NCCL needs for concurrent
// communicators). Nothing blocks the host: NCCL calls are asynchronous.
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
// Asynchronous operations (plan opcodes AllReduceStart, AllGatherStart, ReduceScatterStart and
// CollectiveDone; pipeline receives posted ahead): a start orders the communication stream after
// the compute work issued so far, enqueues the NCCL call, waits only until NCCL has taken it,
// records an event of its own after it and returns. finish() makes the compute stream wait for
// that event (no host wait) and polls every operation in flight once for an asynchronous error.
// drain() is where the host waits: for each operation in flight, against the deadline, so an
// expired one is named (rank, NCCL call, group) and aborts the rank as a blocking call's would;
// the CUDA executor drains at the end of every function, before it synchronizes the compute
// stream (which may wait on those events). The buffers stay live meanwhile: the plan keeps a
// start's input and output unwritten until its CollectiveDone.
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
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
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
  /// The stream of the world's calls and of every send and receive (split groups have their own).
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

  /// The asynchronous forms of allReduce, allGather and reduceScatter (see Asynchronous
  /// operations above): `key` names the operation for finish() (the CUDA executor passes the
  /// start's output buffer); a key already in flight is refused.
  Status startAllReduce(uint64_t key, std::span<const uint32_t> axes, const void *in, void *out,
                        size_t count, DType dtype, comm::ReduceKind kind);
  Status startAllGather(uint64_t key, std::span<const uint32_t> axes, const void *in, void *out,
                        size_t bytesPerRank);
  Status startReduceScatter(uint64_t key, std::span<const uint32_t> axes, const void *in, void *out,
                            size_t countPerRank, DType dtype, comm::ReduceKind kind);
  /// recv() posted now and completed in the background, device to device: with the staged sends
  /// to `peer` in one NCCL group on the communication stream (from itself: a device copy of the
  /// matching staged send); finish(key) orders the compute stream after it.
  Status startRecv(uint64_t key, int peer, int tag, void *data, size_t bytes);
  /// Work for finish(key) to enqueue on the compute stream once it waits for the operation
  /// (laying out a gathered result, freeing a packed buffer).
  Status afterFinish(uint64_t key, std::function<Status()> action);
  /// The compute stream waits for operation `key` (no host wait) and its afterFinish action
  /// runs; then every operation in flight is polled once, so an asynchronous NCCL error
  /// surfaces at the next finish.
  Status finish(uint64_t key);
  /// The host waits for every operation in flight to complete, each against `--comm-timeout`,
  /// naming the first that fails or expires (which aborts the rank). Finished operations are
  /// forgotten; unfinished ones stay for their finish(). Call it before the host synchronizes
  /// the compute stream while operations are in flight: that wait has no deadline.
  Status drain();
  /// Operations started and not both finished and completed.
  size_t inFlight() const { return inFlight_.size(); }
  /// Starts without a finish (a function that failed midway): drained, then forgotten.
  Status drainAndForget();

  /// All-to-all with a byte count per member (expert parallelism's token exchange): block j of
  /// `in` (sendBytes[j] bytes, blocks back to back in group order) goes to member j; block j of
  /// `out` (recvBytes[j]) comes from member j. The counts travel first (an NCCL all-to-all of one
  /// int64 per member) and must equal recvBytes, else an error names the member and both counts;
  /// then the blocks go as one group of ncclSend/ncclRecv. Blocking, as allToAll. `counts` is
  /// device memory for 2 * members int64: the caller has written sendBytes into the first half
  /// (in compute-stream order; the second half receives). The host never copies to the device
  /// here: a pageable copy could wait for collectives in flight on the communication stream.
  Status allToAllV(std::span<const uint32_t> axes, const void *in,
                   std::span<const size_t> sendBytes, void *out, std::span<const size_t> recvBytes,
                   void *counts);
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
  /// Orders communication stream `on` (null: the world's) after the compute work issued so far.
  Status beginCall(const char *what, cudaStream_t on = nullptr);
  /// Orders the compute stream after the communication issued so far on `on`.
  Status endCall(const char *what, cudaStream_t on = nullptr);
  /// The stream of `comm`'s calls: a split group's own, else the world's.
  cudaStream_t streamOf(ncclComm *comm) const;
  /// A collective over `axes` whose NCCL call is `call(comm, stream)`: blocking without `key`,
  /// else started and tracked under it; `op` orders the streams, `ncclName` names it in errors.
  template <typename Call>
  Status runCollective(std::span<const uint32_t> axes, const char *op, const char *ncclName,
                       std::optional<uint64_t> key, Call &&call);
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
  /// An operation started on the communication stream and not yet drained.
  struct InFlightOp {
    ncclComm *comm = nullptr;
    cudaEvent_t done = nullptr;     // recorded on the communication stream after it
    std::string what;               // "ncclAllReduce over [dp] (ranks 0, 1)"
    bool finished = false;          // the compute stream waits for it
    bool completed = false;         // the host saw it complete (drain)
    std::function<Status()> action; // run by finish()
  };
  /// Records an event after the call just enqueued on the communication stream and keeps it in
  /// flight under `key`.
  Status track(uint64_t key, ncclComm *comm, std::string what);
  Status checkKey(uint64_t key, const std::string &what) const;
  /// One non-blocking look at every operation in flight: drops the completed ones, fails (and
  /// aborts) on an asynchronous error.
  Status pollInFlight();
  /// Issues (in a group) the staged sends to `peer` and a receive into `data`, and waits until
  /// NCCL has taken them; the caller then waits or tracks.
  Status postRecv(int peer, void *data, size_t bytes, const std::string &what);
  /// The staged send to itself with `tag`, copied into `data` on the communication stream.
  Status recvFromSelf(int tag, void *data, size_t bytes);
  /// "rank R: ": errors name the rank.
  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }

  NcclApi *api_ = nullptr; // the NCCL and CUDA calls
  comm::Mesh mesh_;
  int rank_ = 0;
  int worldSize_ = 1; // ranks in the NCCL world (1 without a host communicator)
  ncclComm *world_ = nullptr;
  std::map<std::vector<uint32_t>, ncclComm *> groups_; // split communicators, by axes as given
  std::map<ncclComm *, cudaStream_t> groupStreams_;    // one stream per split communicator
  cudaStream_t compute_ = nullptr, stream_ = nullptr;
  cudaEvent_t computeDone_ = nullptr, commDone_ = nullptr;
  std::vector<Staged> pending_; // staged sends to other ranks, in issue order
  std::deque<Staged> toSelf_;   // sends to this rank, waiting for their recv
  int device_ = 0;
  comm::WatchdogOptions watch_;
  bool aborted_ = false;
  std::map<uint64_t, InFlightOp> inFlight_;
  std::vector<cudaEvent_t> spareEvents_; // of drained operations, for reuse
};

} // namespace megac::runtime::cuda
