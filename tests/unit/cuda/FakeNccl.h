// A fake NCCL and CUDA runtime behind NcclApi (runtime/cuda/NcclApi.h), for several ranks in one
// process (one thread per rank, one FakeNccl each, sharing a FakeNcclWorld). Memory is host
// memory. What it models:
// - Streams run their work in order: an event wait, a copy, a free, or an NCCL kernel (a
//   collective, one ncclSend/ncclRecv outside a group, or everything between ncclGroupStart and
//   ncclGroupEnd). A kernel posts its transfers only when it reaches the head of its stream, and
//   the stream moves on only when all of them are done, as NCCL kernels on a GPU stream.
// - Point to point: the n-th send from rank a to rank b on a communicator pairs with the n-th
//   receive at b from a; both complete once both are posted (the data is copied then).
// - Collectives complete when every rank of the communicator has posted its n-th one.
// - ncclCommInitRankConfig and ncclCommSplit are in progress until every rank has called them.
// - A deadlock: when every rank still running is waiting (polling ncclCommGetAsyncError or
//   cudaEventQuery, or in cudaStreamSynchronize) and nothing can progress, every communicator
//   reports ncclInternalError with a last error naming what each rank waits on, so a test fails
//   within milliseconds instead of hanging.
// - Injected failures: the next call of a given name returns an error, or every communicator of a
//   rank reports an asynchronous error.
// - A log of each rank's stream work in call order (FakeNccl::calls): event records and waits,
//   copies (with their direction), NCCL kernels and host synchronizations, each with its stream
//   ("compute" for computeStream(), "comm" for the others), so tests can pin the order of calls
//   on streams and that nothing waits on the host or stages through it.
#pragma once

#include "runtime/cuda/NcclApi.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace megac::runtime::cuda::fake {

struct Comm;
struct Stream;

/// One transfer of a kernel.
struct P2p {
  bool isSend = false;
  int self = 0, peer = 0; // ranks in the communicator
  void *data = nullptr;
  size_t bytes = 0;
  bool done = false;
};

struct Collective {
  enum Kind { allReduce, allGather, reduceScatter } kind = allReduce;
  const void *in = nullptr;
  void *out = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t op = ncclSum;
  bool done = false;
};

struct Kernel {
  Comm *comm = nullptr;
  std::vector<std::shared_ptr<P2p>> p2p;
  std::shared_ptr<Collective> collective;
  bool launched = false;
};

struct Item {
  enum Kind { wait, copy, free, kernel } kind = wait;
  Stream *waitStream = nullptr; // wait: until waitStream has completed waitPosition items
  uint64_t waitPosition = 0;
  void *dst = nullptr; // copy, free
  const void *src = nullptr;
  size_t bytes = 0;
  std::shared_ptr<Kernel> k;
};

struct Stream {
  int rank = 0;
  std::string name = "comm"; // for FakeNccl::calls
  std::deque<Item> items;
  uint64_t enqueued = 0, completed = 0;
};

struct Event {
  Stream *stream = nullptr;
  uint64_t position = 0;
};

/// A communicator as all its ranks share it.
struct Group {
  int nranks = 0;
  int joined = 0;
  std::vector<Comm *> members;
  // Posted, not yet paired transfers, by (from, to).
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<P2p>>> sends, recvs;
  // Collectives by sequence number: each rank's contribution.
  std::map<uint64_t, std::vector<std::shared_ptr<Collective>>> collectives;
  // Splits of this communicator by sequence number: (color, key, new comm) per rank.
  struct SplitCall {
    int color = 0, key = 0;
    Comm *out = nullptr;
  };
  std::map<uint64_t, std::vector<SplitCall>> splits;
};

/// One rank's handle on a communicator (what ncclComm_t points to).
struct Comm {
  int worldRank = 0; // the rank of the fake world (the thread)
  int rank = -1;     // in the communicator; -1 until a split completes
  std::shared_ptr<Group> group;
  uint64_t collectiveSeq = 0, splitSeq = 0;
  bool aborted = false, destroyed = false;
  std::string lastError;
};

class FakeNcclWorld {
public:
  explicit FakeNcclWorld(int ranks) : waiting_(ranks), exited_(ranks, false) {}

  /// Rank `rank` makes no more calls (its thread ended).
  void exit(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    exited_[rank] = true;
    checkDeadlock();
  }
  bool deadlocked() {
    std::lock_guard<std::mutex> lock(mu_);
    return deadlock_;
  }
  std::string deadlockReport() {
    std::lock_guard<std::mutex> lock(mu_);
    return deadlockReport_;
  }
  /// The next call named `call` ("send", "groupEnd", "allReduce", ...) by `rank` returns
  /// `result`, with `lastError` as ncclGetLastError's answer.
  void failNext(int rank, const std::string &call, ncclResult_t result,
                const std::string &lastError) {
    std::lock_guard<std::mutex> lock(mu_);
    failures_[{rank, call}] = {result, lastError};
  }
  /// Every communicator of `rank` reports `result` from ncclCommGetAsyncError from now on.
  void asyncError(int rank, ncclResult_t result, const std::string &lastError) {
    std::lock_guard<std::mutex> lock(mu_);
    asyncErrors_[rank] = {result, lastError};
  }
  /// How many kernels `rank` has launched, and the peers of the transfers in each (for tests of
  /// grouping): one string per kernel, e.g. "send>2 recv<1".
  std::vector<std::string> kernels(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    return log_[rank];
  }
  /// Communicators aborted by `rank`.
  int aborts(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    return aborts_[rank];
  }

private:
  friend class FakeNccl;
  struct Failure {
    ncclResult_t result;
    std::string lastError;
  };

  // Everything below runs with mu_ held.
  bool injected(int rank, const std::string &call, ncclResult_t &result, Comm *comm) {
    auto it = failures_.find({rank, call});
    if (it == failures_.end())
      return false;
    result = it->second.result;
    lastError_ = it->second.lastError;
    if (comm)
      comm->lastError = it->second.lastError;
    failures_.erase(it);
    return true;
  }

  void enqueue(Stream *s, Item item) {
    s->items.push_back(std::move(item));
    ++s->enqueued;
  }

  bool eventDone(Stream *s, uint64_t position) const { return !s || s->completed >= position; }

  void match(Group &g) {
    for (auto &[pair, sends] : g.sends) {
      auto &recvs = g.recvs[pair];
      while (!sends.empty() && !recvs.empty()) {
        std::shared_ptr<P2p> s = sends.front(), r = recvs.front();
        sends.pop_front();
        recvs.pop_front();
        std::memcpy(r->data, s->data, std::min(s->bytes, r->bytes));
        s->done = r->done = true;
      }
    }
  }

  template <typename T> static void reduce(T *acc, const T *x, size_t n, ncclRedOp_t op) {
    for (size_t i = 0; i < n; ++i)
      acc[i] = op == ncclMax ? std::max(acc[i], x[i]) : acc[i] + x[i];
  }

  static size_t sizeOf(ncclDataType_t t) {
    switch (t) {
    case ncclFloat64:
    case ncclInt64:
      return 8;
    case ncclFloat32:
    case ncclInt32:
      return 4;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    default:
      return 1;
    }
  }

  static void reduceAll(void *acc, const void *x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
    if (t == ncclFloat32)
      reduce(static_cast<float *>(acc), static_cast<const float *>(x), n, op);
    else if (t == ncclFloat64)
      reduce(static_cast<double *>(acc), static_cast<const double *>(x), n, op);
    else if (t == ncclInt64)
      reduce(static_cast<int64_t *>(acc), static_cast<const int64_t *>(x), n, op);
    else if (t == ncclInt32)
      reduce(static_cast<int32_t *>(acc), static_cast<const int32_t *>(x), n, op);
    else
      std::abort(); // not modelled
  }

  /// Runs collective `seq` of `g` once every rank has posted it.
  void runCollective(Group &g, uint64_t seq) {
    auto &parts = g.collectives[seq];
    if (static_cast<int>(parts.size()) < g.nranks ||
        std::any_of(parts.begin(), parts.end(), [](auto &p) { return !p; }))
      return;
    const Collective &c0 = *parts[0];
    size_t elem = sizeOf(c0.type);
    std::vector<std::vector<char>> results(parts.size());
    if (c0.kind == Collective::allReduce || c0.kind == Collective::reduceScatter) {
      size_t n = c0.kind == Collective::allReduce ? c0.count : c0.count * g.nranks;
      std::vector<char> acc(static_cast<const char *>(c0.in),
                            static_cast<const char *>(c0.in) + n * elem);
      for (size_t r = 1; r < parts.size(); ++r)
        reduceAll(acc.data(), parts[r]->in, n, c0.type, c0.op);
      for (size_t r = 0; r < parts.size(); ++r)
        if (c0.kind == Collective::allReduce)
          results[r] = acc;
        else
          results[r].assign(acc.begin() + r * c0.count * elem,
                            acc.begin() + (r + 1) * c0.count * elem);
    } else {
      std::vector<char> all;
      for (auto &p : parts)
        all.insert(all.end(), static_cast<const char *>(p->in),
                   static_cast<const char *>(p->in) + p->count * elem);
      for (auto &r : results)
        r = all;
    }
    for (size_t r = 0; r < parts.size(); ++r) {
      std::memcpy(parts[r]->out, results[r].data(), results[r].size());
      parts[r]->done = true;
    }
    g.collectives.erase(seq);
  }

  void launch(Kernel &k) {
    k.launched = true;
    Group &g = *k.comm->group;
    std::string log;
    for (auto &p : k.p2p) {
      int from = p->isSend ? p->self : p->peer, to = p->isSend ? p->peer : p->self;
      (p->isSend ? g.sends : g.recvs)[{from, to}].push_back(p);
      log += std::string(log.empty() ? "" : " ") + (p->isSend ? "send>" : "recv<") +
             std::to_string(p->peer);
    }
    if (k.collective) {
      uint64_t seq = k.comm->collectiveSeq++;
      auto &parts = g.collectives[seq];
      parts.resize(g.nranks);
      parts[k.comm->rank] = k.collective;
      log = "collective";
      runCollective(g, seq);
    }
    log_[k.comm->worldRank].push_back(log);
    match(g);
  }

  bool kernelDone(const Kernel &k) const {
    if (k.comm->aborted)
      return true; // ncclCommAbort ends the rank's kernels
    for (auto &p : k.p2p)
      if (!p->done)
        return false;
    return !k.collective || k.collective->done;
  }

  /// Runs every stream as far as it can go; whether anything moved.
  bool progress() {
    bool any = false;
    for (bool changed = true; changed;) {
      changed = false;
      for (auto &s : streams_) {
        while (!s->items.empty()) {
          Item &item = s->items.front();
          if (item.kind == Item::wait && !eventDone(item.waitStream, item.waitPosition))
            break;
          if (item.kind == Item::copy && item.bytes)
            std::memcpy(item.dst, item.src, item.bytes);
          if (item.kind == Item::free)
            std::free(item.dst);
          if (item.kind == Item::kernel) {
            if (!item.k->launched) {
              launch(*item.k);
              changed = true;
            }
            if (!kernelDone(*item.k))
              break;
          }
          s->items.pop_front();
          ++s->completed;
          changed = true;
        }
      }
      any |= changed;
    }
    return any;
  }

  /// What a rank polls for: a communicator to be ready, an event, or a stream to drain.
  struct Wait {
    bool waiting = false;
    Comm *comm = nullptr;
    Stream *stream = nullptr;
    uint64_t position = 0;
    bool drain = false;
  };
  bool satisfied(const Wait &w) const {
    if (w.comm)
      return w.comm->group && w.comm->group->joined >= w.comm->group->nranks;
    if (w.drain)
      return w.stream->items.empty();
    return eventDone(w.stream, w.position);
  }
  /// Every call marks its rank active; a poll that found its work pending marks it waiting.
  void active(int rank) { waiting_[rank] = Wait(); }
  void waitingOn(int rank, Wait w) {
    w.waiting = true;
    waiting_[rank] = w;
    checkDeadlock();
  }

  void checkDeadlock() {
    if (deadlock_ || progress())
      return;
    bool anyWaiting = false;
    for (size_t r = 0; r < waiting_.size(); ++r) {
      if (exited_[r])
        continue;
      if (!waiting_[r].waiting || satisfied(waiting_[r]))
        return;
      anyWaiting = true;
    }
    if (!anyWaiting)
      return;
    deadlock_ = true;
    std::string report = "fake NCCL: deadlock: every rank waits and nothing can progress:";
    for (auto &s : streams_) {
      if (s->items.empty() || s->items.front().kind != Item::kernel)
        continue;
      const Kernel &k = *s->items.front().k;
      report += " rank " + std::to_string(s->rank) + " is stuck in a kernel of";
      for (auto &p : k.p2p)
        report += std::string(" [") + (p->isSend ? "send to " : "recv from ") +
                  std::to_string(p->peer) + (p->done ? " done]" : " unmatched]");
      if (k.collective)
        report += k.collective->done ? " [collective done]" : " [collective waiting]";
      report += ";";
    }
    deadlockReport_ = report;
  }

  std::mutex mu_;
  std::vector<Wait> waiting_;
  std::vector<bool> exited_;
  bool deadlock_ = false;
  std::string deadlockReport_, lastError_;
  std::map<std::vector<char>, std::shared_ptr<Group>> worlds_; // by unique id
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<std::unique_ptr<Comm>> comms_;
  std::map<std::pair<int, std::string>, Failure> failures_;
  std::map<int, Failure> asyncErrors_;
  std::map<int, std::vector<std::string>> log_;
  std::map<int, int> aborts_;
  uint64_t nextId_ = 1;
};

/// Rank `rank`'s NCCL and CUDA runtime in a FakeNcclWorld.
class FakeNccl final : public NcclApi {
public:
  FakeNccl(FakeNcclWorld &world, int rank) : w_(world), rank_(rank) {}

  /// A stream for the caller's compute work (named "compute" in calls()).
  cudaStream_t computeStream() {
    cudaStream_t st = nullptr;
    streamCreateWithFlags(&st, 0);
    s(st)->name = "compute";
    return st;
  }
  /// This rank's stream work so far, in call order: "record@S" (cudaEventRecord on S),
  /// "S waits T" (cudaStreamWaitEvent of S on an event of T), "copy D2D@S" (or H2D, D2H, H2H),
  /// "allReduce@S" (and the other collectives), "send>P@S" / "recv<P@S" (each transfer; in a
  /// group too), "host waits S" (cudaStreamSynchronize).
  std::vector<std::string> calls() {
    std::lock_guard<std::mutex> lock(w_.mu_);
    return calls_;
  }
  void clearCalls() {
    std::lock_guard<std::mutex> lock(w_.mu_);
    calls_.clear();
  }

  ncclResult_t getUniqueId(ncclUniqueId *id) override {
    Lock l(*this);
    std::memset(id, 0, sizeof *id);
    uint64_t n = w_.nextId_++;
    std::memcpy(id->internal, &n, sizeof n);
    return ncclSuccess;
  }
  ncclResult_t commInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t *) override {
    Lock l(*this);
    ncclResult_t r;
    if (w_.injected(rank_, "commInitRankConfig", r, nullptr))
      return r;
    std::vector<char> key(id.internal, id.internal + sizeof id.internal);
    std::shared_ptr<Group> &g = w_.worlds_[key];
    if (!g) {
      g = std::make_shared<Group>();
      g->nranks = nranks;
      g->members.resize(nranks);
    }
    Comm *c = newComm();
    c->rank = rank;
    c->group = g;
    g->members[rank] = c;
    ++g->joined;
    *comm = handle(c);
    return ncclInProgress;
  }
  ncclResult_t commSplit(ncclComm_t parent, int color, int key, ncclComm_t *newcomm,
                         ncclConfig_t *) override {
    Lock l(*this);
    ncclResult_t r;
    Comm *p = comm(parent);
    if (w_.injected(rank_, "commSplit", r, p))
      return r;
    Comm *c = newComm();
    *newcomm = handle(c);
    uint64_t seq = p->splitSeq++;
    auto &calls = p->group->splits[seq];
    calls.resize(p->group->nranks);
    calls[p->rank] = {color, key, c};
    if (std::all_of(calls.begin(), calls.end(), [](auto &s) { return s.out != nullptr; })) {
      std::map<int, std::vector<Group::SplitCall>> byColor;
      for (auto &s : calls)
        byColor[s.color].push_back(s);
      for (auto &[color, members] : byColor) {
        std::stable_sort(members.begin(), members.end(),
                         [](auto &a, auto &b) { return a.key < b.key; });
        auto g = std::make_shared<Group>();
        g->nranks = g->joined = static_cast<int>(members.size());
        for (size_t i = 0; i < members.size(); ++i) {
          members[i].out->rank = static_cast<int>(i);
          members[i].out->group = g;
          g->members.push_back(members[i].out);
        }
      }
      p->group->splits.erase(seq);
    }
    return ncclInProgress;
  }
  ncclResult_t commGetAsyncError(ncclComm_t handle, ncclResult_t *state) override {
    Lock l(*this);
    Comm *c = comm(handle);
    w_.progress();
    if (w_.deadlock_) {
      c->lastError = w_.deadlockReport_;
      *state = ncclInternalError;
    } else if (auto it = w_.asyncErrors_.find(rank_); it != w_.asyncErrors_.end()) {
      c->lastError = it->second.lastError;
      *state = it->second.result;
    } else if (!c->group || c->group->joined < c->group->nranks) {
      *state = ncclInProgress;
      w_.waitingOn(rank_, {true, c});
    } else {
      *state = ncclSuccess;
    }
    return ncclSuccess;
  }
  ncclResult_t commFinalize(ncclComm_t) override {
    Lock l(*this);
    return ncclSuccess;
  }
  ncclResult_t commDestroy(ncclComm_t handle) override {
    Lock l(*this);
    comm(handle)->destroyed = true;
    return ncclSuccess;
  }
  ncclResult_t commAbort(ncclComm_t handle) override {
    Lock l(*this);
    Comm *c = comm(handle);
    c->aborted = true;
    ++w_.aborts_[rank_];
    return ncclSuccess;
  }
  const char *getErrorString(ncclResult_t result) override {
    switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
    }
  }
  const char *getLastError(ncclComm_t handle) override {
    std::lock_guard<std::mutex> lock(w_.mu_);
    return handle ? comm(handle)->lastError.c_str() : w_.lastError_.c_str();
  }
  ncclResult_t groupStart() override {
    Lock l(*this);
    ++groupDepth_;
    return ncclSuccess;
  }
  ncclResult_t groupEnd() override {
    Lock l(*this);
    if (groupDepth_ == 0)
      return ncclInvalidUsage;
    ncclResult_t r;
    bool failed = w_.injected(rank_, "groupEnd", r, group_ ? group_->comm : nullptr);
    if (--groupDepth_ == 0 && group_) {
      if (!failed)
        w_.enqueue(groupStream_, kernelItem(group_));
      group_.reset();
    }
    return failed ? r : ncclSuccess;
  }
  ncclResult_t allReduce(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return collective("allReduce", {Collective::allReduce, in, out, count, type, op}, comm, stream);
  }
  ncclResult_t allGather(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclComm_t comm, cudaStream_t stream) override {
    return collective("allGather", {Collective::allGather, in, out, count, type, ncclSum}, comm,
                      stream);
  }
  ncclResult_t reduceScatter(const void *in, void *out, size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return collective("reduceScatter", {Collective::reduceScatter, in, out, count, type, op}, comm,
                      stream);
  }
  ncclResult_t send(const void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return p2p("send", true, const_cast<void *>(data), count * FakeNcclWorld::sizeOf(type), peer,
               comm, stream);
  }
  ncclResult_t recv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return p2p("recv", false, data, count * FakeNcclWorld::sizeOf(type), peer, comm, stream);
  }

  cudaError_t getDevice(int *device) override {
    *device = 0;
    return cudaSuccess;
  }
  cudaError_t streamCreateWithFlags(cudaStream_t *stream, unsigned) override {
    Lock l(*this);
    w_.streams_.push_back(std::make_unique<Stream>());
    w_.streams_.back()->rank = rank_;
    *stream = reinterpret_cast<cudaStream_t>(w_.streams_.back().get());
    return cudaSuccess;
  }
  cudaError_t streamDestroy(cudaStream_t) override { return cudaSuccess; }
  cudaError_t streamSynchronize(cudaStream_t stream) override {
    {
      std::lock_guard<std::mutex> lock(w_.mu_);
      calls_.push_back("host waits " + s(stream)->name);
    }
    for (;;) {
      {
        Lock l(*this);
        w_.progress();
        if (s(stream)->items.empty())
          return cudaSuccess;
        if (w_.deadlock_)
          return cudaErrorLaunchTimeout;
        w_.waitingOn(rank_, {true, nullptr, s(stream), 0, true});
      }
      std::this_thread::yield();
    }
  }
  cudaError_t streamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) override {
    Lock l(*this);
    Item item;
    item.kind = Item::wait;
    item.waitStream = e(event)->stream;
    item.waitPosition = e(event)->position;
    calls_.push_back(s(stream)->name + " waits " +
                     (e(event)->stream ? e(event)->stream->name : std::string("nothing")));
    w_.enqueue(s(stream), item);
    return cudaSuccess;
  }
  cudaError_t eventCreateWithFlags(cudaEvent_t *event, unsigned) override {
    Lock l(*this);
    w_.events_.push_back(std::make_unique<Event>());
    *event = reinterpret_cast<cudaEvent_t>(w_.events_.back().get());
    return cudaSuccess;
  }
  cudaError_t eventDestroy(cudaEvent_t) override { return cudaSuccess; }
  cudaError_t eventRecord(cudaEvent_t event, cudaStream_t stream) override {
    Lock l(*this);
    e(event)->stream = s(stream);
    e(event)->position = s(stream)->enqueued;
    calls_.push_back("record@" + s(stream)->name);
    return cudaSuccess;
  }
  cudaError_t eventQuery(cudaEvent_t event) override {
    Lock l(*this);
    w_.progress();
    if (w_.eventDone(e(event)->stream, e(event)->position))
      return cudaSuccess;
    w_.waitingOn(rank_, {true, nullptr, e(event)->stream, e(event)->position});
    return cudaErrorNotReady;
  }
  cudaError_t mallocAsync(void **data, size_t bytes, cudaStream_t) override {
    Lock l(*this);
    *data = std::malloc(bytes);
    return cudaSuccess;
  }
  cudaError_t freeAsync(void *data, cudaStream_t stream) override {
    Lock l(*this);
    Item item;
    item.kind = Item::free;
    item.dst = data;
    w_.enqueue(s(stream), item);
    return cudaSuccess;
  }
  cudaError_t memcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                          cudaStream_t stream) override {
    Lock l(*this);
    calls_.push_back(std::string("copy ") +
                     (kind == cudaMemcpyDeviceToDevice ? "D2D"
                      : kind == cudaMemcpyHostToDevice ? "H2D"
                      : kind == cudaMemcpyDeviceToHost ? "D2H"
                                                       : "H2H") +
                     "@" + s(stream)->name);
    Item item;
    item.kind = Item::copy;
    item.dst = dst;
    item.src = src;
    item.bytes = bytes;
    w_.enqueue(s(stream), item);
    return cudaSuccess;
  }
  const char *errorName(cudaError_t error) override {
    return error == cudaErrorNotReady        ? "cudaErrorNotReady"
           : error == cudaErrorLaunchTimeout ? "cudaErrorLaunchTimeout"
                                             : "cudaErrorUnknown";
  }
  const char *errorString(cudaError_t) override { return "fake CUDA error"; }

private:
  /// The world's lock for one call; the call marks the rank active and runs the streams after.
  struct Lock {
    FakeNccl &f;
    std::lock_guard<std::mutex> guard;
    explicit Lock(FakeNccl &fake) : f(fake), guard(fake.w_.mu_) { f.w_.active(f.rank_); }
    ~Lock() { f.w_.progress(); }
  };

  Comm *newComm() {
    w_.comms_.push_back(std::make_unique<Comm>());
    w_.comms_.back()->worldRank = rank_;
    return w_.comms_.back().get();
  }
  static ncclComm_t handle(Comm *c) { return reinterpret_cast<ncclComm_t>(c); }
  static Comm *comm(ncclComm_t c) { return reinterpret_cast<Comm *>(c); }
  static Stream *s(cudaStream_t st) { return reinterpret_cast<Stream *>(st); }
  static Event *e(cudaEvent_t ev) { return reinterpret_cast<Event *>(ev); }

  static Item kernelItem(std::shared_ptr<Kernel> k) {
    Item item;
    item.kind = Item::kernel;
    item.k = std::move(k);
    return item;
  }

  ncclResult_t collective(const char *name, Collective c, ncclComm_t handle, cudaStream_t stream) {
    Lock l(*this);
    ncclResult_t r;
    if (w_.injected(rank_, name, r, comm(handle)))
      return r;
    if (groupDepth_)
      return ncclInvalidUsage; // not modelled: collectives inside a group
    calls_.push_back(std::string(name) + "@" + s(stream)->name);
    auto k = std::make_shared<Kernel>();
    k->comm = comm(handle);
    k->collective = std::make_shared<Collective>(c);
    w_.enqueue(s(stream), kernelItem(k));
    return ncclSuccess;
  }

  ncclResult_t p2p(const char *name, bool isSend, void *data, size_t bytes, int peer,
                   ncclComm_t handle, cudaStream_t stream) {
    Lock l(*this);
    ncclResult_t r;
    Comm *c = comm(handle);
    if (w_.injected(rank_, name, r, c))
      return r;
    if (peer < 0 || peer >= c->group->nranks)
      return ncclInvalidArgument;
    auto op = std::make_shared<P2p>();
    *op = {isSend, c->rank, peer, data, bytes, false};
    calls_.push_back((isSend ? "send>" : "recv<") + std::to_string(peer) + "@" + s(stream)->name);
    if (groupDepth_) {
      if (!group_) {
        group_ = std::make_shared<Kernel>();
        group_->comm = c;
        groupStream_ = s(stream);
      }
      if (group_->comm != c || groupStream_ != s(stream))
        return ncclInvalidUsage; // not modelled: several communicators or streams in a group
      group_->p2p.push_back(op);
      return ncclSuccess;
    }
    auto k = std::make_shared<Kernel>();
    k->comm = c;
    k->p2p.push_back(op);
    w_.enqueue(s(stream), kernelItem(k));
    return ncclSuccess;
  }

  FakeNcclWorld &w_;
  int rank_;
  int groupDepth_ = 0;
  std::shared_ptr<Kernel> group_;
  Stream *groupStream_ = nullptr;
  std::vector<std::string> calls_; // see calls(); under the world's lock
};

} // namespace megac::runtime::cuda::fake
