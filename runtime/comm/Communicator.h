// Communication between the ranks of a plan's mesh: collectives over sub-groups named by mesh
// axes, and point-to-point transfers between pipeline stages. Implementations: MPI (CPU ranks,
// runtime/comm/MpiCommunicator) and a single-rank one (every group is just this rank).
//
// Groups: for a set of mesh axes (indices into the plan's mesh, major first), this rank's group
// is the ranks whose coordinates equal its own except on those axes; a member's index in the
// group is the row-major index of its coordinates on those axes. Every member must make the same
// calls on the group in the same order.
//
// Errors: a call that waits longer than the timeout returns an error naming this rank, the
// operation and the group (its mesh axes and member ranks); the caller then aborts the job.
#pragma once

#include "support/HostTensor.h"
#include "support/Status.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::comm {

/// The longest a collective may wait for its peers (a week): a deadline past it would overflow
/// the clock's arithmetic.
constexpr int64_t kMaxCommTimeoutSeconds = 7 * 24 * 3600;

/// The mesh of a plan: axis names and sizes, slowest-varying first; rank = row-major index.
struct Mesh {
  std::vector<std::string> axisNames;
  std::vector<int64_t> axisSizes;

  int64_t size() const;
  std::vector<int64_t> coordsOf(int64_t rank) const;
  int64_t rankOf(std::span<const int64_t> coords) const;
  /// The members of `rank`'s group over `axes`, in group order.
  std::vector<int64_t> groupOf(int64_t rank, std::span<const uint32_t> axes) const;
  /// `rank`'s index in its group over `axes`.
  int64_t indexInGroup(int64_t rank, std::span<const uint32_t> axes) const;
  /// "[tp] (ranks 2, 3)": for errors.
  std::string describeGroup(int64_t rank, std::span<const uint32_t> axes) const;
};

enum class ReduceKind { sum, max };

/// A collective in flight (Communicator::start*): wait() completes it and writes its output.
/// The output is written only by wait() and must stay valid until then; a handle must be waited
/// before it is destroyed (the executor waits every handle before a function ends).
class CommHandle {
public:
  virtual ~CommHandle() = default;
  /// Blocks until the collective is complete (or the communicator's timeout: an error naming
  /// the rank, the operation and the group) and writes its output.
  virtual Status wait() = 0;
};

/// The alpha-beta model of one emulated link (`megac train --emulate-link BYTES_PER_S,LATENCY_S`,
/// a measurement tool): a collective completes no earlier than latency x steps + wire bytes /
/// bytesPerSecond after it starts (ring algorithm's steps and bytes, emulatedSeconds), and it
/// starts when it is posted or, if its group's link still carries an earlier collective, when
/// that one completes: one link per group, collectives in posting order (as NCCL runs a
/// communicator's), so concurrent buckets share the link instead of each having its own.
struct LinkEmulation {
  double bytesPerSecond = 0; // 0: no emulation
  double latencySeconds = 0;
  bool enabled() const { return bytesPerSecond > 0; }
  /// The link time of a collective over `group` ranks moving `bytes` per rank (an all_reduce's
  /// whole tensor, an all_gather's or reduce_scatter's block): ring all-reduce 2(g-1) steps and
  /// 2(g-1)/g x bytes; all-gather and reduce-scatter (g-1) steps and (g-1) x bytes.
  double emulatedSeconds(bool allReduce, size_t group, size_t bytes) const;
  /// The link time of one point-to-point message of `bytes`: one latency + bytes / bandwidth. It
  /// starts when both sides have posted (the sender's send, the receiver's receive: a rendezvous,
  /// as NCCL's send/recv and MPI's large messages), so a receive posted late delays it.
  double transferSeconds(size_t bytes) const;
};

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const Mesh &mesh() const = 0;

  /// In place over `count` elements of `dtype` (f64, f32, bf16, f16; half types reduce in f32
  /// and round once).
  virtual Status allReduce(std::span<const uint32_t> axes, void *data, size_t count, DType dtype,
                           ReduceKind kind) = 0;
  /// `out` holds group-size blocks of `bytesPerRank`, in group order.
  virtual Status allGather(std::span<const uint32_t> axes, const void *in, void *out,
                           size_t bytesPerRank) = 0;
  /// `in` holds group-size blocks of `countPerRank` elements; this rank gets the reduction of
  /// block (its group index).
  virtual Status reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                               size_t countPerRank, DType dtype, ReduceKind kind) = 0;
  /// Block i of `in` (bytesPerRank each) goes to member i; block j of `out` comes from member j.
  virtual Status allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                          size_t bytesPerRank) = 0;
  /// Variable blocks: `sendBytes[i]` bytes of `in` (blocks back to back in member order) go to
  /// member i; `recvBytes[j]` bytes from member j land in `out`, back to back. Both sides must
  /// agree on every size (the MoE token exchange derives them from the routing both hold).
  virtual Status allToAllV(std::span<const uint32_t> axes, const void *in,
                           std::span<const size_t> sendBytes, void *out,
                           std::span<const size_t> recvBytes) {
    (void)axes, (void)in, (void)sendBytes, (void)out, (void)recvBytes;
    return Status::error("this communicator has no variable-split all-to-all");
  }

  /// Asynchronous collectives (plan opcodes AllReduceStart, AllGatherStart, ReduceScatterStart;
  /// docs/training-step.md "Overlap"): the same contracts and results, bit for bit, as
  /// allReduce (out-of-place: `in` to `out`), allGather and reduceScatter, but the call returns
  /// once the operation is posted; `in` may be reused at once, `out` is written by the handle's
  /// wait(). Members start the group's collectives in the same order. The default runs the
  /// blocking operation now into a private buffer (correct, no overlap); the MPI communicator
  /// progresses them on a thread while the caller computes.
  virtual StatusOr<std::unique_ptr<CommHandle>> startAllReduce(std::span<const uint32_t> axes,
                                                               const void *in, void *out,
                                                               size_t count, DType dtype,
                                                               ReduceKind kind);
  virtual StatusOr<std::unique_ptr<CommHandle>>
  startAllGather(std::span<const uint32_t> axes, const void *in, void *out, size_t bytesPerRank);
  virtual StatusOr<std::unique_ptr<CommHandle>> startReduceScatter(std::span<const uint32_t> axes,
                                                                   const void *in, void *out,
                                                                   size_t countPerRank, DType dtype,
                                                                   ReduceKind kind);

  /// Point to point (pipeline stages), matched by (peer, tag). send copies `data` and returns at
  /// once (the transfer completes in the background, so 1F1B's crossing sends cannot deadlock);
  /// recv blocks until the message is here (or the timeout).
  virtual Status send(int peer, int tag, const void *data, size_t bytes) = 0;
  virtual Status recv(int peer, int tag, void *data, size_t bytes) = 0;
  /// A receive posted now and completed by the handle's wait(), which writes `data` (valid until
  /// then); the same checks and errors as recv. Receives from one peer with one tag match that
  /// peer's sends in the order they were posted. The default posts nothing: wait() runs recv
  /// (correct, no overlap); the MPI communicator posts the receive at once and progresses it on
  /// its thread, so an emulated link's transfer starts at the post.
  virtual StatusOr<std::unique_ptr<CommHandle>> startRecv(int peer, int tag, void *data,
                                                          size_t bytes);
  /// Waits until every send of this rank has completed.
  virtual Status flushSends() = 0;

  /// Every rank of the job.
  virtual Status barrier() = 0;
};

/// The communicator of a one-rank job (mesh of size 1).
std::unique_ptr<Communicator> makeSelfCommunicator(Mesh mesh);
/// Rank `rank`'s view of `mesh` without other processes: collectives over groups of one rank,
/// sends to itself; anything reaching another rank is an error (tests, single-process tools).
std::unique_ptr<Communicator> makeSelfCommunicator(Mesh mesh, int rank);

} // namespace megac::runtime::comm
