// MPI collectives and point-to-point transfers with deadlines (MpiCommunicator.h).
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/MpiProgress.h"

#include "support/Float16.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace megac::runtime::comm {

using namespace mpi; // MpiProgress.h: the session, in-flight records, the progress engine

namespace {

/// Elementwise reduction of `blocks` contiguous blocks of `count` elements into `out`, in block
/// order. Floats accumulate in double (half types in f32, as stated by Communicator.h) and
/// round once; max propagates NaN.
template <typename T, typename Acc>
void reduceBlocks(const T *in, T *out, size_t count, size_t blocks, ReduceKind kind) {
  for (size_t i = 0; i < count; ++i) {
    Acc acc = static_cast<Acc>(in[i]);
    for (size_t b = 1; b < blocks; ++b) {
      Acc x = static_cast<Acc>(in[b * count + i]);
      if (kind == ReduceKind::sum)
        acc += x;
      else if (x > acc || x != x)
        acc = acc != acc ? acc : x;
    }
    out[i] = static_cast<T>(acc);
  }
}

template <typename Half, typename ToF, typename FromF>
void reduceHalfBlocks(const uint16_t *in, uint16_t *out, size_t count, size_t blocks,
                      ReduceKind kind, ToF toFloat, FromF fromFloat) {
  for (size_t i = 0; i < count; ++i) {
    float acc = toFloat(in[i]);
    for (size_t b = 1; b < blocks; ++b) {
      float x = toFloat(in[b * count + i]);
      if (kind == ReduceKind::sum)
        acc += x;
      else if (x > acc || x != x)
        acc = acc != acc ? acc : x;
    }
    out[i] = fromFloat(acc);
  }
}

Status reduceInto(const void *in, void *out, size_t count, size_t blocks, DType dtype,
                  ReduceKind kind) {
  switch (dtype) {
  case DType::f64:
    reduceBlocks<double, double>(static_cast<const double *>(in), static_cast<double *>(out), count,
                                 blocks, kind);
    return Status::ok();
  case DType::f32:
    reduceBlocks<float, double>(static_cast<const float *>(in), static_cast<float *>(out), count,
                                blocks, kind);
    return Status::ok();
  case DType::i64:
    reduceBlocks<int64_t, int64_t>(static_cast<const int64_t *>(in), static_cast<int64_t *>(out),
                                   count, blocks, kind);
    return Status::ok();
  case DType::i32:
    reduceBlocks<int32_t, int64_t>(static_cast<const int32_t *>(in), static_cast<int32_t *>(out),
                                   count, blocks, kind);
    return Status::ok();
  case DType::bf16:
    reduceHalfBlocks<uint16_t>(static_cast<const uint16_t *>(in), static_cast<uint16_t *>(out),
                               count, blocks, kind, bf16ToFloat, floatToBf16);
    return Status::ok();
  case DType::f16:
    reduceHalfBlocks<uint16_t>(static_cast<const uint16_t *>(in), static_cast<uint16_t *>(out),
                               count, blocks, kind, halfToFloat, floatToHalf);
    return Status::ok();
  case DType::i1:
    break;
  }
  return Status::error(std::string("cannot reduce ") + dtypeName(dtype) + " values");
}

class MpiComm final : public Communicator {
public:
  MpiComm(Mesh mesh, int rank, std::chrono::seconds timeout, LinkEmulation link)
      : mesh_(std::move(mesh)), rank_(rank), timeout_(timeout), link_(link),
        threaded_(MpiSession::multiThreaded()) {}
  ~MpiComm() override {
    progress_.reset(); // joins the progress thread before the communicators go
    for (auto &[axes, comm] : groups_)
      if (comm != MPI_COMM_NULL && comm != MPI_COMM_WORLD)
        MPI_Comm_free(&comm);
    // Sends still in flight at destruction are abandoned (flushSends waits for them).
    for (Pending &p : sends_)
      if (p.request != MPI_REQUEST_NULL) {
        MPI_Cancel(&p.request);
        MPI_Request_free(&p.request);
      }
  }

  /// One communicator per subset of the mesh's axes, split collectively on every rank in the
  /// same order at creation (lazily splitting could deadlock against pipeline transfers).
  Status splitGroups() {
    size_t axes = mesh_.axisSizes.size();
    if (axes > 16)
      return Status::error("a mesh of " + std::to_string(axes) + " axes is not supported");
    for (uint32_t mask = 0; mask < (1u << axes); ++mask) {
      std::vector<uint32_t> subset, rest;
      for (uint32_t a = 0; a < axes; ++a)
        (mask & (1u << a) ? subset : rest).push_back(a);
      int color = static_cast<int>(mesh_.indexInGroup(rank_, rest));
      int key = static_cast<int>(mesh_.indexInGroup(rank_, subset));
      MPI_Comm comm = MPI_COMM_NULL;
      int rc = MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
      if (rc != MPI_SUCCESS)
        return Status::error("rank " + std::to_string(rank_) +
                             ": MPI_Comm_split failed: " + mpiError(rc));
      MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
      groups_.emplace(subset, comm);
    }
    return Status::ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(mesh_.size()); }
  const Mesh &mesh() const override { return mesh_; }

  Status allReduce(std::span<const uint32_t> axes, void *data, size_t count, DType dtype,
                   ReduceKind kind) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_reduce"));
    if (g.size == 1 || count == 0)
      return Status::ok();
    size_t bytes = count * dtypeSize(dtype);
    Clock::time_point readyAt = emulatedEnd(true, g, bytes);
    if (bytes >= kSplitAllReduceBytes && count >= g.size)
      return reduceScatterThenGather(g, axes, data, count, dtype, kind, readyAt);
    std::vector<uint8_t> all = take(bytes * g.size);
    if (Status s = gather(g, axes, data, all.data(), bytes, "all_reduce", readyAt); !s.isOk()) {
      abandoned_.push_back(std::move(all)); // MPI may still write it
      return s;
    }
    Status s = reduceInto(all.data(), data, count, g.size, dtype, kind);
    give(std::move(all));
    return s;
  }

  Status allGather(std::span<const uint32_t> axes, const void *in, void *out,
                   size_t bytesPerRank) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_gather"));
    if (g.size == 1) {
      copy(out, in, bytesPerRank);
      return Status::ok();
    }
    return gather(g, axes, in, out, bytesPerRank, "all_gather",
                  emulatedEnd(false, g, bytesPerRank));
  }

  Status reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                       size_t countPerRank, DType dtype, ReduceKind kind) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "reduce_scatter"));
    size_t bytes = countPerRank * dtypeSize(dtype);
    if (g.size == 1) {
      copy(out, in, bytes);
      return Status::ok();
    }
    // Block j of member i goes to member j; each member then reduces its blocks in order.
    std::vector<uint8_t> mine = take(bytes * g.size);
    if (Status s = exchange(g, axes, in, mine.data(), bytes, "reduce_scatter",
                            emulatedEnd(false, g, bytes));
        !s.isOk()) {
      abandoned_.push_back(std::move(mine)); // MPI may still write it
      return s;
    }
    Status s = reduceInto(mine.data(), out, countPerRank, g.size, dtype, kind);
    give(std::move(mine));
    return s;
  }

  Status allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                  size_t bytesPerRank) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_to_all"));
    if (g.size == 1) {
      copy(out, in, bytesPerRank);
      return Status::ok();
    }
    return exchange(g, axes, in, out, bytesPerRank, "all_to_all",
                    emulatedEnd(false, g, bytesPerRank));
  }

  Status allToAllV(std::span<const uint32_t> axes, const void *in,
                   std::span<const size_t> sendBytes, void *out,
                   std::span<const size_t> recvBytes) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_to_all_v"));
    if (sendBytes.size() != g.size || recvBytes.size() != g.size)
      return Status::error(prefix() + "all_to_all_v over a group of " + std::to_string(g.size) +
                           " with " + std::to_string(sendBytes.size()) + " send and " +
                           std::to_string(recvBytes.size()) + " receive sizes");
    std::vector<int> sendCounts(g.size), sendOffsets(g.size), recvCounts(g.size),
        recvOffsets(g.size);
    size_t sendTotal = 0, recvTotal = 0;
    for (size_t i = 0; i < g.size; ++i) {
      sendOffsets[i] = static_cast<int>(sendTotal);
      recvOffsets[i] = static_cast<int>(recvTotal);
      sendCounts[i] = static_cast<int>(sendBytes[i]);
      recvCounts[i] = static_cast<int>(recvBytes[i]);
      sendTotal += sendBytes[i];
      recvTotal += recvBytes[i];
    }
    std::string what = describe(axes, "all_to_all_v", std::max(sendTotal, recvTotal));
    if (sendTotal > size_t(INT32_MAX) || recvTotal > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": more than 2 GiB per rank is not supported");
    MPI_Request request;
    int rc = MPI_Ialltoallv(in, sendCounts.data(), sendOffsets.data(), MPI_BYTE, out,
                            recvCounts.data(), recvOffsets.data(), MPI_BYTE, g.comm, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    return wait(request, what, nullptr);
  }

  StatusOr<std::unique_ptr<CommHandle>> startAllReduce(std::span<const uint32_t> axes,
                                                       const void *in, void *out, size_t count,
                                                       DType dtype, ReduceKind kind) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_reduce"));
    size_t bytes = count * dtypeSize(dtype);
    if (g.size == 1 || count == 0)
      return Communicator::startAllReduce(axes, in, out, count, dtype, kind);
    // The blocking all_reduce's algorithm, split: gather now, reduce in group order at wait.
    auto op = post(g, axes, in, bytes, bytes * g.size, "all_reduce", true);
    ASSIGN_OR_RETURN(std::shared_ptr<InFlight> posted, std::move(op));
    return handle(std::move(posted), describe(axes, "all_reduce", bytes), [=](InFlight &f) {
      return reduceInto(f.received.data(), out, count, g.size, dtype, kind);
    });
  }

  StatusOr<std::unique_ptr<CommHandle>> startAllGather(std::span<const uint32_t> axes,
                                                       const void *in, void *out,
                                                       size_t bytesPerRank) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "all_gather"));
    if (g.size == 1)
      return Communicator::startAllGather(axes, in, out, bytesPerRank);
    ASSIGN_OR_RETURN(std::shared_ptr<InFlight> posted,
                     post(g, axes, in, bytesPerRank, bytesPerRank * g.size, "all_gather", false));
    return handle(std::move(posted), describe(axes, "all_gather", bytesPerRank), [=](InFlight &f) {
      copy(out, f.received.data(), f.received.size());
      return Status::ok();
    });
  }

  StatusOr<std::unique_ptr<CommHandle>> startReduceScatter(std::span<const uint32_t> axes,
                                                           const void *in, void *out,
                                                           size_t countPerRank, DType dtype,
                                                           ReduceKind kind) override {
    ASSIGN_OR_RETURN(Group g, group(axes, "reduce_scatter"));
    size_t bytes = countPerRank * dtypeSize(dtype);
    if (g.size == 1)
      return Communicator::startReduceScatter(axes, in, out, countPerRank, dtype, kind);
    ASSIGN_OR_RETURN(std::shared_ptr<InFlight> posted,
                     post(g, axes, in, bytes * g.size, bytes * g.size, "reduce_scatter", false));
    return handle(std::move(posted), describe(axes, "reduce_scatter", bytes), [=](InFlight &f) {
      return reduceInto(f.received.data(), out, countPerRank, g.size, dtype, kind);
    });
  }

  Status send(int peer, int tag, const void *data, size_t bytes) override {
    std::string what = "send to rank " + std::to_string(peer) + " (tag " + std::to_string(tag) +
                       ", " + std::to_string(bytes) + " bytes)";
    RETURN_IF_ERROR(checkPeer(peer, tag, bytes, what));
    reapSends();
    sends_.emplace_back();
    Pending &p = sends_.back();
    const auto *bytesIn = static_cast<const uint8_t *>(data);
    p.data.assign(bytesIn, bytesIn + bytes);
    p.what = what;
    if (link_.enabled()) { // the post time travels with the message; the data is on the wire
      Clock::time_point now = Clock::now(); // at least one transfer time
      int64_t stamp = stampOf(now);
      p.data.resize(bytes + kStampBytes);
      std::memcpy(p.data.data() + bytes, &stamp, kStampBytes);
      p.readyAt = now + seconds(link_.transferSeconds(bytes));
    }
    int rc = MPI_Isend(p.data.data(), static_cast<int>(p.data.size()), MPI_BYTE, peer, tag,
                       MPI_COMM_WORLD, &p.request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    return Status::ok();
  }

  Status recv(int peer, int tag, void *data, size_t bytes) override {
    if (link_.enabled() || threaded_) { // the emulated link's timing lives in the handle
      ASSIGN_OR_RETURN(std::unique_ptr<CommHandle> h, startRecv(peer, tag, data, bytes));
      return h->wait();
    }
    std::string what = describeRecv(peer, tag, bytes);
    RETURN_IF_ERROR(checkPeer(peer, tag, bytes, what));
    MPI_Request request;
    int rc =
        MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    MPI_Status status;
    RETURN_IF_ERROR(wait(request, what, &status));
    return checkCount(status, bytes, what);
  }

  /// Posts MPI_Irecv into a staging buffer (with an emulated link, one stamp longer) that the
  /// progress thread tests; wait() checks the size and copies it to `data`.
  StatusOr<std::unique_ptr<CommHandle>> startRecv(int peer, int tag, void *data,
                                                  size_t bytes) override {
    std::string what = describeRecv(peer, tag, bytes);
    RETURN_IF_ERROR(checkPeer(peer, tag, bytes, what));
    auto f = std::make_shared<InFlight>();
    f->stamped = link_.enabled();
    f->received = take(bytes + (f->stamped ? kStampBytes : 0));
    f->postedAt = Clock::now();
    f->transfer = seconds(link_.transferSeconds(bytes));
    int rc = MPI_Irecv(f->received.data(), static_cast<int>(f->received.size()), MPI_BYTE, peer,
                       tag, MPI_COMM_WORLD, &f->request);
    if (rc != MPI_SUCCESS) {
      abandoned_.push_back(std::move(f->received));
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    }
    if (threaded_) {
      if (!progress_)
        progress_ = std::make_unique<ProgressEngine>();
      progress_->post(f);
    }
    bool stamped = f->stamped;
    return handle(std::move(f), what, [this, data, bytes, stamped, what](InFlight &f) -> Status {
      RETURN_IF_ERROR(checkCount(f.status, bytes, what, stamped ? kStampBytes : 0));
      copy(data, f.received.data(), bytes);
      return Status::ok();
    });
  }

  Status flushSends() override {
    for (Pending &p : sends_) {
      if (p.request != MPI_REQUEST_NULL)
        RETURN_IF_ERROR(wait(p.request, p.what + " (waiting for it to complete)", nullptr));
      if (p.readyAt > Clock::now())
        std::this_thread::sleep_until(p.readyAt);
    }
    sends_.clear();
    return Status::ok();
  }

  Status barrier() override {
    MPI_Request request;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + "barrier failed: " + mpiError(rc));
    return wait(request, "barrier of all " + std::to_string(size()) + " ranks", nullptr);
  }

private:
  struct Group {
    MPI_Comm comm;
    size_t size;
  };
  struct Pending {
    std::vector<uint8_t> data;
    MPI_Request request = MPI_REQUEST_NULL;
    std::string what;
    Clock::time_point readyAt; // an emulated link's earliest completion
  };

  static Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  }

  static std::string describeRecv(int peer, int tag, size_t bytes) {
    return "recv from rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ", " +
           std::to_string(bytes) + " bytes)";
  }

  /// A message's size against the receiver's; `stamp`: the bytes an emulated link appended.
  Status checkCount(const MPI_Status &status, size_t bytes, const std::string &what,
                    size_t stamp = 0) const {
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    if (static_cast<size_t>(received) != bytes + stamp)
      return Status::error(prefix() + what + ": the message has " +
                           std::to_string(int64_t(received) - int64_t(stamp)) + " bytes");
    return Status::ok();
  }

  std::string prefix() const { return "rank " + std::to_string(rank_) + ": "; }

  static void copy(void *dst, const void *src, size_t n) {
    if (n && dst != src)
      std::memmove(dst, src, n);
  }

  StatusOr<Group> group(std::span<const uint32_t> axes, const char *op) const {
    std::vector<uint32_t> key(axes.begin(), axes.end());
    for (uint32_t a : key)
      if (a >= mesh_.axisSizes.size())
        return Status::error(prefix() + op + " over mesh axis " + std::to_string(a) +
                             ", but the mesh has " + std::to_string(mesh_.axisSizes.size()) +
                             " axes");
    std::vector<uint32_t> sorted = key;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted != key)
      return Status::error(prefix() + op + ": the group's mesh axes must be distinct and in " +
                           "mesh order (major first)");
    auto it = groups_.find(key);
    size_t count = mesh_.groupOf(rank_, axes).size();
    return Group{it->second, count};
  }

  Status checkPeer(int peer, int tag, size_t bytes, const std::string &what) const {
    int *tagUb = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tagUb, &flag);
    if (peer < 0 || peer >= size())
      return Status::error(prefix() + what + ": no such rank (the job has " +
                           std::to_string(size()) + ")");
    if (tag < 0 || (flag && tag > *tagUb))
      return Status::error(prefix() + what + ": the tag is outside MPI's [0, " +
                           std::to_string(flag ? *tagUb : 32767) + "]");
    if (bytes > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": messages over 2 GiB are not supported");
    return Status::ok();
  }

  /// When a collective posted now over group `g` moving `bytes` per rank completes on the
  /// emulated link (the clock's epoch without emulation): the group's link carries one
  /// collective at a time, in posting order (as NCCL runs a communicator's collectives), so it
  /// starts at the later of now and the end of the group's previous one.
  Clock::time_point emulatedEnd(bool allReduce, const Group &g, size_t bytes) {
    if (!link_.enabled())
      return {};
    Clock::time_point &free = linkFreeAt_[g.comm];
    free = std::max(Clock::now(), free) + seconds(link_.emulatedSeconds(allReduce, g.size, bytes));
    return free;
  }

  /// Posts a nonblocking collective over a copy of `in` (`sentBytes`): an all-gather for
  /// all_reduce and all_gather, an all-to-all for reduce_scatter, into `receivedBytes`.
  StatusOr<std::shared_ptr<InFlight>> post(const Group &g, std::span<const uint32_t> axes,
                                           const void *in, size_t sentBytes, size_t receivedBytes,
                                           const char *op, bool allReduce) {
    auto f = std::make_shared<InFlight>();
    f->sent = take(sentBytes);
    copy(f->sent.data(), in, sentBytes);
    f->received = take(receivedBytes);
    size_t block = receivedBytes / g.size;
    std::string what = describe(axes, op, block);
    if (block > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": blocks over 2 GiB are not supported");
    bool gathers = std::string_view(op) != "reduce_scatter";
    f->readyAt = emulatedEnd(allReduce, g, gathers ? sentBytes : block);
    int count = static_cast<int>(gathers ? sentBytes : block);
    int rc = gathers ? MPI_Iallgather(f->sent.data(), count, MPI_BYTE, f->received.data(), count,
                                      MPI_BYTE, g.comm, &f->request)
                     : MPI_Ialltoall(f->sent.data(), count, MPI_BYTE, f->received.data(), count,
                                     MPI_BYTE, g.comm, &f->request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    if (threaded_) {
      if (!progress_)
        progress_ = std::make_unique<ProgressEngine>();
      progress_->post(f);
    }
    return f;
  }

  /// The handle of a posted collective: waits for the progress engine (or, without one, polls
  /// here), then `finish` writes the output.
  template <typename Finish>
  std::unique_ptr<CommHandle> handle(std::shared_ptr<InFlight> f, std::string what, Finish finish) {
    class Handle final : public CommHandle {
    public:
      Handle(MpiComm &comm, std::shared_ptr<InFlight> f, std::string what, Finish finish)
          : comm_(comm), f_(std::move(f)), what_(std::move(what)), finish_(std::move(finish)) {}
      Status wait() override {
        if (!f_)
          return Status::error(comm_.prefix() + what_ + " was already waited for");
        std::shared_ptr<InFlight> f = std::move(f_);
        if (comm_.progress_) {
          if (!comm_.progress_->waitFor(*f, Clock::now() + comm_.timeout_))
            return Status::error(comm_.prefix() + what_ + " (started asynchronously) did not " +
                                 "complete within " + std::to_string(comm_.timeout_.count()) +
                                 " s (a peer did not make the matching call)");
          if (!f->error.empty())
            return Status::error(comm_.prefix() + what_ + " failed: " + f->error);
        } else {
          RETURN_IF_ERROR(comm_.wait(f->request, what_ + " (started asynchronously)", &f->status));
          f->arrived();
          if (f->readyAt > Clock::now())
            std::this_thread::sleep_until(f->readyAt);
        }
        Status s = finish_(*f);
        comm_.give(std::move(f->sent));
        comm_.give(std::move(f->received));
        return s;
      }

    private:
      MpiComm &comm_;
      std::shared_ptr<InFlight> f_;
      std::string what_;
      Finish finish_;
    };
    return std::make_unique<Handle>(*this, std::move(f), std::move(what), std::move(finish));
  }

  /// Polls `request` until it completes or the timeout passes (then: an error naming `what`);
  /// then sleeps until `readyAt` (an emulated link's completion).
  Status wait(MPI_Request &request, const std::string &what, MPI_Status *status,
              Clock::time_point readyAt = {}) {
    auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::chrono::microseconds pause(0);
    for (int polls = 0;; ++polls) {
      int done = 0;
      MPI_Status local;
      int rc = MPI_Test(&request, &done, status ? status : &local);
      if (rc != MPI_SUCCESS)
        return Status::error(prefix() + what + " failed: " + mpiError(rc));
      if (done) {
        if (readyAt > Clock::now())
          std::this_thread::sleep_until(readyAt);
        return Status::ok();
      }
      if (std::chrono::steady_clock::now() > deadline)
        return Status::error(prefix() + what + " did not complete within " +
                             std::to_string(timeout_.count()) +
                             " s (a peer did not make the matching call)");
      // Spin briefly, then back off to at most 1 ms: ranks may share few cores.
      if (polls > 64) {
        pause = std::min(std::chrono::microseconds(1000),
                         std::max(std::chrono::microseconds(10), pause * 2));
        std::this_thread::sleep_for(pause);
      }
    }
  }

  std::string describe(std::span<const uint32_t> axes, const char *op, size_t bytes) const {
    return std::string(op) + " over " + mesh_.describeGroup(rank_, axes) + " (" +
           std::to_string(bytes) + " bytes per rank)";
  }

  /// A blocking all_reduce from this size on runs as a reduce-scatter and an all-gather: each
  /// member receives (n - 1)/n of the message twice and reduces 1/n of it, where gathering every
  /// member's whole message moves n - 1 messages to each and has each reduce all of it (1 MiB
  /// f32 over 2 ranks on this project's 2-core VM: see docs/cpu-performance.md). Below,
  /// a message costs about a phase's latency, which the split would double.
  static constexpr size_t kSplitAllReduceBytes = size_t(64) << 10;

  /// The all_reduce as a reduce-scatter of element blocks [count·j/n, count·(j+1)/n) (member j
  /// sums block j of every member in group order, accumulating as reduceInto does) and an
  /// all-gather of the sums: the same bits on every member as the whole-message gather.
  Status reduceScatterThenGather(const Group &g, std::span<const uint32_t> axes, void *data,
                                 size_t count, DType dtype, ReduceKind kind,
                                 Clock::time_point readyAt) {
    const size_t n = g.size, size = dtypeSize(dtype);
    int member = 0;
    MPI_Comm_rank(g.comm, &member);
    const size_t me = static_cast<size_t>(member);
    std::string what = describe(axes, "all_reduce", count * size);
    if (count * size > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": more than 2 GiB per rank is not supported");
    auto start = [&](size_t j) { return count * j / n; };
    std::vector<int> blockBytes(n), blockAt(n), mineBytes(n), mineAt(n);
    const size_t mine = start(me + 1) - start(me);
    for (size_t j = 0; j < n; ++j) {
      blockBytes[j] = static_cast<int>((start(j + 1) - start(j)) * size);
      blockAt[j] = static_cast<int>(start(j) * size);
      mineBytes[j] = static_cast<int>(mine * size);
      mineAt[j] = static_cast<int>(j * mine * size);
    }
    std::vector<uint8_t> blocks = take(n * mine * size);
    MPI_Request request;
    int rc = MPI_Ialltoallv(data, blockBytes.data(), blockAt.data(), MPI_BYTE, blocks.data(),
                            mineBytes.data(), mineAt.data(), MPI_BYTE, g.comm, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    if (Status s = wait(request, what, nullptr); !s.isOk()) {
      abandoned_.push_back(std::move(blocks)); // MPI may still write it
      return s;
    }
    auto *bytes = static_cast<uint8_t *>(data);
    Status reduced = reduceInto(blocks.data(), bytes + start(me) * size, mine, n, dtype, kind);
    give(std::move(blocks));
    RETURN_IF_ERROR(reduced);
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, data, blockBytes.data(), blockAt.data(),
                         MPI_BYTE, g.comm, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    return wait(request, what, nullptr, readyAt);
  }

  Status gather(const Group &g, std::span<const uint32_t> axes, const void *in, void *out,
                size_t bytes, const char *op, Clock::time_point readyAt) {
    std::string what = describe(axes, op, bytes);
    if (bytes > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": blocks over 2 GiB are not supported");
    MPI_Request request;
    int rc = MPI_Iallgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                            MPI_BYTE, g.comm, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    return wait(request, what, nullptr, readyAt);
  }

  Status exchange(const Group &g, std::span<const uint32_t> axes, const void *in, void *out,
                  size_t bytes, const char *op, Clock::time_point readyAt) {
    std::string what = describe(axes, op, bytes);
    if (bytes > size_t(INT32_MAX))
      return Status::error(prefix() + what + ": blocks over 2 GiB are not supported");
    MPI_Request request;
    int rc = MPI_Ialltoall(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                           MPI_BYTE, g.comm, &request);
    if (rc != MPI_SUCCESS)
      return Status::error(prefix() + what + " failed: " + mpiError(rc));
    return wait(request, what, nullptr, readyAt);
  }

  /// A buffer of `bytes` bytes, from the pool when one of that size is there (contents stale).
  std::vector<uint8_t> take(size_t bytes) {
    if (auto it = pool_.find(bytes); it != pool_.end()) {
      std::vector<uint8_t> v = std::move(it->second);
      pool_.erase(it);
      pooledBytes_ -= bytes;
      return v;
    }
    return std::vector<uint8_t>(bytes);
  }

  /// Returns a buffer to the pool, which keeps at most kMaxPooledBytes.
  void give(std::vector<uint8_t> &&v) {
    static constexpr size_t kMaxPooledBytes = size_t(1) << 30;
    if (v.empty() || pooledBytes_ + v.size() > kMaxPooledBytes)
      return;
    pooledBytes_ += v.size();
    size_t bytes = v.size();
    pool_.emplace(bytes, std::move(v));
  }

  /// Frees the buffers of sends that have completed (on an emulated link: and whose transfer
  /// time has passed, which flushSends waits for).
  void reapSends() {
    Clock::time_point now = Clock::now();
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done && it->readyAt <= now ? sends_.erase(it) : std::next(it);
    }
  }

  Mesh mesh_;
  int rank_;
  std::chrono::seconds timeout_;
  LinkEmulation link_;
  bool threaded_;                            // MPI_THREAD_MULTIPLE: a progress thread may run
  std::unique_ptr<ProgressEngine> progress_; // started by the first asynchronous collective
  std::map<std::vector<uint32_t>, MPI_Comm> groups_;
  // An emulated link per group's communicator: when its last posted collective completes.
  std::map<MPI_Comm, Clock::time_point> linkFreeAt_;
  std::list<Pending> sends_; // stable addresses: MPI reads each buffer until its send completes
  // Buffers of finished collectives, by size, reused by the next of the same size: a step posts
  // the same buckets every time, and fresh multi-megabyte vectors cost a zero fill and a page
  // fault per page on every post. Only the calling thread (posts, waits) touches it.
  std::multimap<size_t, std::vector<uint8_t>> pool_;
  size_t pooledBytes_ = 0;
  // Receive buffers of collectives that timed out: kept until destruction, since the operation
  // is still posted (the job is normally aborted right after).
  std::list<std::vector<uint8_t>> abandoned_;
};

} // namespace

StatusOr<std::unique_ptr<Communicator>>
MpiCommunicator::create(Mesh mesh, std::chrono::seconds timeout, LinkEmulation link) {
  RETURN_IF_ERROR(MpiSession::ensure());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (mesh.size() != size)
    return Status::error("rank " + std::to_string(rank) + ": the job has " + std::to_string(size) +
                         " MPI ranks but the mesh has " + std::to_string(mesh.size()));
  if (timeout.count() <= 0 || timeout.count() > kMaxCommTimeoutSeconds)
    return Status::error("the communication timeout " + std::to_string(timeout.count()) +
                         " s is not in 1.." + std::to_string(kMaxCommTimeoutSeconds) + " s");
  if (link.bytesPerSecond < 0 || link.latencySeconds < 0 || !std::isfinite(link.bytesPerSecond) ||
      !std::isfinite(link.latencySeconds))
    return Status::error("the emulated link needs a positive bandwidth and latency (--emulate-link "
                         "BYTES_PER_S,LATENCY_S)");
  auto comm = std::make_unique<MpiComm>(std::move(mesh), rank, timeout, link);
  RETURN_IF_ERROR(comm->splitGroups());
  return std::unique_ptr<Communicator>(std::move(comm));
}

bool MpiCommunicator::launchedWithMoreThanOneRank() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name); value && std::atoi(value) > 1)
      return true;
  return false;
}

void MpiCommunicator::abortJob(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

} // namespace megac::runtime::comm
