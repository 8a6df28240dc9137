// Test doubles for the pipeline runner: ranks as threads exchanging messages through mailboxes
// (ThreadWorld / ThreadCommunicator), and an executor whose chunk functions do small, checkable
// arithmetic (FakeChunkExecutor), strict about the Executor contract like CpuExecutor.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "tests/unit/runtime/StubCommunicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace megac::runtime::train::testing {

/// The shared state of an in-process job: mailboxes keyed by (from, to, tag), FIFO per key as
/// MPI's non-overtaking rule.
class ThreadWorld {
public:
  explicit ThreadWorld(comm::Mesh mesh) : mesh_(std::move(mesh)) {}
  const comm::Mesh &mesh() const { return mesh_; }
  int size() const {
    int n = 1;
    for (int64_t s : mesh_.axisSizes)
      n *= static_cast<int>(s);
    return n;
  }

  void post(int from, int to, int tag, const void *data, size_t bytes) {
    const auto *p = static_cast<const uint8_t *>(data);
    std::lock_guard lock(mutex_);
    mail_[{from, to, tag}].emplace_back(p, p + bytes);
    ++sent_;
    arrived_.notify_all();
  }
  Status take(int from, int to, int tag, void *data, size_t bytes) {
    std::unique_lock lock(mutex_);
    auto key = std::tuple(from, to, tag);
    bool ok = arrived_.wait_for(lock, timeout_, [&] {
      auto it = mail_.find(key);
      return it != mail_.end() && !it->second.empty();
    });
    std::string what = "rank " + std::to_string(to) + ": recv from rank " + std::to_string(from) +
                       ", tag " + std::to_string(tag);
    if (!ok)
      return Status::error(what + " timed out");
    std::deque<std::vector<uint8_t>> &queue = mail_[key];
    if (queue.front().size() != bytes)
      return Status::error(what + ": the message has " + std::to_string(queue.front().size()) +
                           " bytes, the receiver expects " + std::to_string(bytes));
    std::memcpy(data, queue.front().data(), bytes);
    queue.pop_front();
    if (queue.empty())
      mail_.erase(key);
    return Status::ok();
  }
  /// Messages sent and not received.
  size_t pending() const {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto &[key, queue] : mail_)
      n += queue.size();
    return n;
  }
  int64_t sent() const {
    std::lock_guard lock(mutex_);
    return sent_;
  }
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

private:
  comm::Mesh mesh_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<std::tuple<int, int, int>, std::deque<std::vector<uint8_t>>> mail_;
  int64_t sent_ = 0;
  std::chrono::milliseconds timeout_{20000};
};

/// One rank of a ThreadWorld: point-to-point only (the runner needs nothing else).
class ThreadCommunicator : public megac::runtime::test::StubCommunicator {
public:
  ThreadCommunicator(ThreadWorld &world, int rank)
      : StubCommunicator(world.mesh(), rank, "ThreadCommunicator"), world_(world) {}
  Status send(int peer, int tag, const void *data, size_t bytes) override {
    if (peer < 0 || peer >= size())
      return Status::error("rank " + std::to_string(rank()) + ": send to rank " +
                           std::to_string(peer) + " outside the job");
    world_.post(rank(), peer, tag, data, bytes);
    return Status::ok();
  }
  Status recv(int peer, int tag, void *data, size_t bytes) override {
    if (peer < 0 || peer >= size())
      return Status::error("rank " + std::to_string(rank()) + ": recv from rank " +
                           std::to_string(peer) + " outside the job");
    return world_.take(peer, rank(), tag, data, bytes);
  }
  Status flushSends() override {
    ++flushes;
    return Status::ok();
  }

  int flushes = 0;

private:
  ThreadWorld &world_;
};

/// Chunk c's weight vector (shape [width]).
inline double fakeWeight(int64_t chunk, int64_t i) { return 0.5 + 0.1 * chunk + 0.05 * i; }

/// One stage's chunks of a toy model, all f64 of shape [width] (input_ids i64):
///   forward.c<c>:  x = (c == 0 ? input_ids : act.c<c>)          (pieces == 1)
///                  x = act.c<c>.0 + act.c<c>.1[0]                (pieces == 2)
///                  y = w_c * x + c; stash.c<c>.0 = x; stash.c<c>.1 = y (never read)
///                  not last: act.c<c+1> = y, or act.c<c+1>.0 = y, act.c<c+1>.1 = [sum(y), 7]
///                  last: loss = loss_normalizer * sum(labels * y)
///   backward.c<c>: gy = last ? loss_normalizer * labels
///                            : grad.act.c<c+1> (or grad.act.c<c+1>.0 + grad.act.c<c+1>.1[0])
///                  grad.w<c> += gy * x; gx = w_c * gy
///                  c > 0: grad.act.c<c> = gx, or grad.act.c<c>.0 = gx, .1 = [sum(gx), 0]
/// With `split` (the zero-bubble schedules) the backward is two functions, as
/// mega-backward-weight-split makes them:
///   backward_input.c<c>:  gy as above; c > 0: grad.act.c<c> (gx); last: stash.c<c>.w0 = gy
///   backward_weight.c<c>: reads stash.c<c>.0 (x) and gy (last: stash.c<c>.w0, else the
///                         received grad.act.c<c+1> pieces again); grad.w<c> += gy * x
/// Multi-piece outputs are listed out of index order, so the runner must order them itself.
/// Chunks sit on stages as `shape` places them (schedule::stageOfChunk: c % p, or zbv's V).
class FakeChunkExecutor : public Executor {
public:
  FakeChunkExecutor(int64_t stage, int64_t stages, int64_t chunks, int pieces, int64_t width = 3,
                    bool split = false,
                    schedule::ChunkPlacement placement = schedule::ChunkPlacement::loop)
      : chunks_(chunks), pieces_(pieces), width_(width), split_(split) {
    schedule::PipelineShape shape{stages, chunks / stages, 1, placement};
    for (int64_t c = 0; c < chunks; ++c)
      if (schedule::stageOfChunk(shape, c) == stage)
        addChunk(c);
  }

  /// Makes the `call`-th run (1-based) of `function` fail.
  void failOn(std::string function, int call) {
    failFunction_ = std::move(function);
    failCall_ = call;
  }
  /// Function runs, in order.
  std::vector<std::string> log;
  /// Micro-batch data set through setInput("input_ids"/"labels"), for checks.
  int64_t dataSets = 0;

  using Executor::setInput; // the moving overload copies through the one below
  StatusOr<HostTensor> takeInput(std::string_view name) override {
    auto it = values_.find(std::string(name));
    if (it == values_.end())
      return Status::error("input '" + std::string(name) + "' is not set: nothing to take back");
    HostTensor value = std::move(it->second);
    values_.erase(it);
    return value;
  }
  Status setInput(std::string_view name, const HostTensor &value) override {
    auto it = infos_.find(std::string(name));
    if (it == infos_.end())
      return Status::error("the program has no input '" + std::string(name) + "'");
    if (value.dtype != it->second.dtype || value.shape != it->second.shape ||
        value.bytes.size() != static_cast<size_t>(value.numElements()) * dtypeSize(value.dtype))
      return Status::error("input '" + std::string(name) + "' must be " +
                           dtypeName(it->second.dtype) + " " + shapeString(it->second.shape) +
                           ", got " + dtypeName(value.dtype) + " " + shapeString(value.shape));
    if (name == "labels")
      ++dataSets;
    values_[std::string(name)] = value;
    return Status::ok();
  }

  Status run(std::string_view function) override {
    auto fn = functions_.find(std::string(function));
    if (fn == functions_.end())
      return Status::error("the program has no function '" + std::string(function) + "'");
    outputs_.clear(); // outputs live until another function runs
    for (const std::string &in : fn->second.inputs)
      if (!values_.count(in))
        return Status::error("function '" + std::string(function) + "': input '" + in +
                             "' was never set");
    log.push_back(fn->first);
    if (fn->first == failFunction_ && --failCall_ == 0)
      return Status::error("injected failure in '" + fn->first + "'");
    int64_t c = fn->second.chunk;
    switch (fn->second.kind) {
    case schedule::StepKind::forward:
      return forward(c);
    case schedule::StepKind::backward:
      return backward(c, true, true);
    case schedule::StepKind::backwardInput:
      return backward(c, true, false);
    case schedule::StepKind::backwardWeight:
      return backward(c, false, true);
    }
    return Status::error("unknown step kind");
  }
  Status run() override { return Status::error("no default function"); }

  StatusOr<HostTensor> output(std::string_view name) const override {
    auto it = outputs_.find(std::string(name));
    if (it == outputs_.end())
      return Status::error("output '" + std::string(name) + "' is not available");
    return it->second;
  }
  std::vector<std::string> functionNames() const override {
    std::vector<std::string> out;
    for (const auto &[name, fn] : functions_)
      out.push_back(name);
    return out;
  }
  std::vector<std::string> inputNames(std::string_view function = {}) const override {
    std::vector<std::string> out;
    for (const auto &[name, fn] : functions_)
      if (function.empty() || name == function)
        for (const std::string &in : fn.inputs)
          if (std::find(out.begin(), out.end(), in) == out.end())
            out.push_back(in);
    return out;
  }
  std::vector<std::string> outputNames(std::string_view function = {}) const override {
    std::vector<std::string> out;
    for (const auto &[name, fn] : functions_)
      if (function.empty() || name == function)
        out.insert(out.end(), fn.outputs.begin(), fn.outputs.end());
    return out;
  }
  StatusOr<TensorInfo> inputInfo(std::string_view name) const override {
    auto it = infos_.find(std::string(name));
    if (it == infos_.end())
      return Status::error("the program has no input '" + std::string(name) + "'");
    return it->second;
  }
  std::vector<std::string> parameterNames() const override { return {}; }
  std::vector<std::string> stateNames() const override {
    std::vector<std::string> out;
    for (const auto &[name, t] : state_)
      out.push_back(name);
    return out;
  }
  StatusOr<HostTensor> parameter(std::string_view name) const override {
    return Status::error("no parameters");
  }
  StatusOr<HostTensor> state(std::string_view name) const override {
    auto it = state_.find(std::string(name));
    if (it == state_.end())
      return Status::error("no state '" + std::string(name) + "'");
    return it->second;
  }
  Status setParameter(std::string_view, const HostTensor &) override {
    return Status::error("no parameters");
  }
  Status setState(std::string_view, const HostTensor &) override {
    return Status::error("read-only state");
  }
  Status zeroState(std::string_view prefix) override {
    for (auto &[name, t] : state_)
      if (name.starts_with(prefix))
        std::fill(t.bytes.begin(), t.bytes.end(), 0);
    return Status::ok();
  }
  uint64_t arenaBytes() const override { return 0; }
  // Partitioned-plan queries: the runner uses none of them.
  int rank() const override { return 0; }
  std::vector<int64_t> coords() const override { return {}; }
  comm::Communicator &communicator() const override {
    if (!comm)
      std::abort(); // a test double: set `comm` first
    return *comm;
  }
  StatusOr<ShardInfo> parameterShard(std::string_view) const override {
    return Status::error("no parameters");
  }
  StatusOr<ShardInfo> stateShard(std::string_view) const override {
    return Status::error("no shards");
  }
  StatusOr<std::vector<uint32_t>> statePartialAxes(std::string_view) const override {
    return std::vector<uint32_t>{};
  }
  StatusOr<std::vector<uint32_t>> outputPartialAxes(std::string_view) const override {
    return std::vector<uint32_t>{};
  }
  std::vector<schedule::ScheduleStep> schedule() const override { return {}; }

  /// What communicator() returns.
  comm::Communicator *comm = nullptr;

private:
  struct Fn {
    int64_t chunk;
    schedule::StepKind kind;
    std::vector<std::string> inputs, outputs;
  };

  std::vector<int64_t> vec() const { return {width_}; }
  void input(Fn &fn, const std::string &name, DType dtype, std::vector<int64_t> shape) {
    fn.inputs.push_back(name);
    infos_[name] = TensorInfo{dtype, std::move(shape)};
  }
  // Ports of the cut named `base` ("act.c<c>" or "grad.act.c<c>"): outputs list the pieces out
  // of index order, inputs in order, so only the runner's own ordering makes them match.
  std::vector<std::pair<std::string, std::vector<int64_t>>> cut(const std::string &base,
                                                                bool asOutputs) const {
    if (pieces_ == 1)
      return {{base, vec()}};
    if (asOutputs)
      return {{base + ".1", {2}}, {base + ".0", vec()}};
    return {{base + ".0", vec()}, {base + ".1", {2}}};
  }

  void addChunk(int64_t c) {
    bool last = c + 1 == chunks_;
    std::string cs = std::to_string(c), next = std::to_string(c + 1);
    Fn f{c, schedule::StepKind::forward, {}, {}};
    if (c == 0)
      input(f, "input_ids", DType::i64, vec());
    else
      for (auto &[name, shape] : cut("act.c" + cs, false))
        input(f, name, DType::f64, shape);
    if (last) {
      input(f, "labels", DType::f64, vec());
      input(f, "loss_normalizer", DType::f64, {});
    }
    f.outputs.push_back("stash.c" + cs + ".1");
    if (!last)
      for (auto &[name, shape] : cut("act.c" + next, true))
        f.outputs.push_back(name);
    f.outputs.push_back("stash.c" + cs + ".0");
    if (last)
      f.outputs.push_back("loss");
    functions_["forward.c" + cs] = f;

    Fn b{c, split_ ? schedule::StepKind::backwardInput : schedule::StepKind::backward, {}, {}};
    if (!split_)
      input(b, "stash.c" + cs + ".0", DType::f64, vec());
    if (last) {
      input(b, "labels", DType::f64, vec());
      input(b, "loss_normalizer", DType::f64, {});
    } else {
      for (auto &[name, shape] : cut("grad.act.c" + next, false))
        input(b, name, DType::f64, shape);
    }
    if (c > 0)
      for (auto &[name, shape] : cut("grad.act.c" + cs, true))
        b.outputs.push_back(name);
    if (split_ && last)
      b.outputs.push_back("stash.c" + cs + ".w0");
    functions_[schedule::stepFunction({b.kind, c, 0})] = b;
    if (split_) {
      Fn w{c, schedule::StepKind::backwardWeight, {}, {}};
      input(w, "stash.c" + cs + ".0", DType::f64, vec());
      if (last)
        input(w, "stash.c" + cs + ".w0", DType::f64, vec());
      else
        for (auto &[name, shape] : cut("grad.act.c" + next, false))
          input(w, name, DType::f64, shape);
      functions_["backward_weight.c" + cs] = w;
    }
    state_["grad.w" + cs] = HostTensor::zeros(DType::f64, vec());
  }

  const double *in(const std::string &name) const { return values_.at(name).data<double>(); }
  // The chunk input x (or its gradient) from the one or two pieces of a cut.
  std::vector<double> join(const std::string &base) const {
    std::vector<double> x(width_);
    for (int64_t i = 0; i < width_; ++i)
      x[i] = pieces_ == 1 ? in(base)[i] : in(base + ".0")[i] + in(base + ".1")[0];
    return x;
  }
  void put(const std::string &name, std::vector<int64_t> shape, const std::vector<double> &v) {
    HostTensor t = HostTensor::zeros(DType::f64, std::move(shape));
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    outputs_[name] = std::move(t);
  }
  // Sends y across the cut named `base`.
  void split(const std::string &base, const std::vector<double> &y, double second) {
    if (pieces_ == 1)
      return put(base, vec(), y);
    double sum = 0;
    for (double v : y)
      sum += v;
    put(base + ".0", vec(), y);
    put(base + ".1", {2}, {sum, second});
  }

  Status forward(int64_t c) {
    std::string cs = std::to_string(c);
    std::vector<double> x(width_), y(width_);
    if (c == 0)
      for (int64_t i = 0; i < width_; ++i)
        x[i] = static_cast<double>(values_.at("input_ids").data<int64_t>()[i]);
    else
      x = join("act.c" + cs);
    for (int64_t i = 0; i < width_; ++i)
      y[i] = fakeWeight(c, i) * x[i] + c;
    put("stash.c" + cs + ".0", vec(), x);
    put("stash.c" + cs + ".1", vec(), y);
    if (c + 1 < chunks_) {
      split("act.c" + std::to_string(c + 1), y, 7);
      return Status::ok();
    }
    double loss = 0;
    for (int64_t i = 0; i < width_; ++i)
      loss += in("labels")[i] * y[i];
    put("loss", {}, {loss * in("loss_normalizer")[0]});
    return Status::ok();
  }

  // The whole backward (input and weight), or one of its halves.
  Status backward(int64_t c, bool input, bool weight) {
    std::string cs = std::to_string(c);
    std::vector<double> gy(width_), gx(width_);
    if (c + 1 == chunks_ && split_ && !input)
      for (int64_t i = 0; i < width_; ++i)
        gy[i] = in("stash.c" + cs + ".w0")[i];
    else if (c + 1 == chunks_)
      for (int64_t i = 0; i < width_; ++i)
        gy[i] = in("loss_normalizer")[0] * in("labels")[i];
    else
      gy = join("grad.act.c" + std::to_string(c + 1));
    if (weight) {
      double *grad = state_.at("grad.w" + cs).data<double>();
      const double *x = in("stash.c" + cs + ".0");
      for (int64_t i = 0; i < width_; ++i)
        grad[i] += gy[i] * x[i];
    }
    if (!input)
      return Status::ok();
    for (int64_t i = 0; i < width_; ++i)
      gx[i] = fakeWeight(c, i) * gy[i];
    if (c > 0)
      split("grad.act.c" + cs, gx, 0);
    if (split_ && c + 1 == chunks_)
      put("stash.c" + cs + ".w0", vec(), gy);
    return Status::ok();
  }

  int64_t chunks_;
  int pieces_;
  int64_t width_;
  bool split_;
  std::map<std::string, Fn> functions_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, HostTensor> values_;
  std::map<std::string, HostTensor> outputs_;
  std::map<std::string, HostTensor> state_;
  std::string failFunction_;
  int failCall_ = 0;
};

constexpr int64_t kWidth = 3;

inline HostTensor f64(std::vector<int64_t> shape, const std::vector<double> &v) {
  HostTensor t = HostTensor::zeros(DType::f64, std::move(shape));
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

/// Micro-batch m of data-parallel replica dp (FakeChunkExecutor's data inputs).
inline std::vector<int64_t> inputIds(int64_t m, int64_t dp) {
  std::vector<int64_t> ids(kWidth);
  for (int64_t i = 0; i < kWidth; ++i)
    ids[i] = (m * 7 + i * 3 + dp * 5) % 11 + 1;
  return ids;
}
inline std::vector<double> labels(int64_t m, int64_t dp) {
  std::vector<double> l(kWidth);
  for (int64_t i = 0; i < kWidth; ++i)
    l[i] = 0.25 * (i + 1) - 0.1 * m + 0.3 * dp;
  return l;
}

/// The toy model of FakeChunkExecutor evaluated micro-batch after micro-batch on one "rank":
/// the oracle of every pipelined run (loss_normalizer = 1 / microBatches).
struct Sequential {
  double loss = 0;
  std::vector<std::vector<double>> grads; // by chunk
};
inline Sequential sequential(int64_t chunks, int pieces, int64_t microBatches, int64_t dp) {
  Sequential out;
  out.grads.assign(chunks, std::vector<double>(kWidth, 0));
  double norm = 1.0 / microBatches;
  for (int64_t m = 0; m < microBatches; ++m) {
    std::vector<std::vector<double>> xs;
    std::vector<double> x(kWidth), y(kWidth);
    for (int64_t i = 0; i < kWidth; ++i)
      x[i] = static_cast<double>(inputIds(m, dp)[i]);
    for (int64_t c = 0; c < chunks; ++c) {
      xs.push_back(x);
      double sum = 0;
      for (int64_t i = 0; i < kWidth; ++i) {
        y[i] = fakeWeight(c, i) * x[i] + c;
        sum += y[i];
      }
      for (int64_t i = 0; i < kWidth; ++i)
        x[i] = pieces == 1 ? y[i] : y[i] + sum;
    }
    std::vector<double> g(kWidth);
    for (int64_t i = 0; i < kWidth; ++i) {
      out.loss += norm * labels(m, dp)[i] * y[i];
      g[i] = norm * labels(m, dp)[i];
    }
    for (int64_t c = chunks - 1; c >= 0; --c) {
      double sum = 0;
      for (int64_t i = 0; i < kWidth; ++i) {
        out.grads[c][i] += g[i] * xs[c][i];
        g[i] *= fakeWeight(c, i);
        sum += g[i];
      }
      if (pieces == 2)
        for (double &v : g)
          v += sum;
    }
  }
  return out;
}

/// A data setter for PipelineRun::setDataInputs: micro-batch m of replica `dp`, only the inputs
/// the executor has.
inline std::function<Status(int64_t)> dataSetter(Executor &ex, int64_t dp, int64_t microBatches) {
  return [&ex, dp, microBatches](int64_t m) -> Status {
    std::vector<std::string> inputs = ex.inputNames();
    auto reads = [&](const char *n) { return std::count(inputs.begin(), inputs.end(), n) > 0; };
    if (reads("input_ids")) {
      HostTensor ids = HostTensor::zeros(DType::i64, {kWidth});
      std::memcpy(ids.bytes.data(), inputIds(m, dp).data(), ids.bytes.size());
      RETURN_IF_ERROR(ex.setInput("input_ids", ids));
    }
    if (reads("labels"))
      RETURN_IF_ERROR(ex.setInput("labels", f64({kWidth}, labels(m, dp))));
    if (reads("loss_normalizer"))
      RETURN_IF_ERROR(ex.setInput("loss_normalizer", f64({}, {1.0 / microBatches})));
    return Status::ok();
  };
}

} // namespace megac::runtime::train::testing
