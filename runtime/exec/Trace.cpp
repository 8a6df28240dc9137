// The event recorder, the tracing communicator and the gathered Chrome trace (Trace.h).
#include "runtime/exec/Trace.h"

#include "runtime/comm/Communicator.h"
#include "support/Files.h"
#include "support/Json.h"

#include <cstdio>
#include <sys/resource.h>

namespace megac::runtime {

void Trace::start() {
  if (!started_) {
    origin_ = Clock::now();
    started_ = true;
  }
  recording_ = true;
}

void Trace::add(TraceLane lane, std::string name, std::string_view category,
                Clock::time_point start, Clock::time_point end, std::string args) {
  if (!recording_)
    return;
  auto ns = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - origin_).count();
  };
  events_.push_back(
      {lane, std::move(name), std::string(category), std::move(args), ns(start), ns(end)});
}

namespace {

/// Nanoseconds as microseconds with three decimals (Chrome's ts and dur unit).
std::string micros(int64_t ns) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.3f", double(ns) / 1e3);
  return buf;
}

std::string metadata(const char *name, int pid, int tid, const std::string &args) {
  return std::string("{\"name\": \"") + name +
         "\", \"ph\": \"M\", \"pid\": " + std::to_string(pid) +
         (tid >= 0 ? ", \"tid\": " + std::to_string(tid) : "") + ", \"args\": {" + args + "}}";
}

} // namespace

std::string Trace::chromeEvents(int pid, const std::string &processName) const {
  std::string out = metadata("process_name", pid, -1, "\"name\": " + json::quote(processName));
  out += ",\n" + metadata("process_sort_index", pid, -1, "\"sort_index\": " + std::to_string(pid));
  const char *lanes[] = {"kernels", "communication", "pipeline"};
  for (int tid = 0; tid < 3; ++tid) {
    out +=
        ",\n" + metadata("thread_name", pid, tid, std::string("\"name\": \"") + lanes[tid] + "\"");
    out += ",\n" + metadata("thread_sort_index", pid, tid,
                            "\"sort_index\": " + std::to_string(tid == 2 ? -1 : tid));
  }
  for (const Event &e : events_) {
    out += ",\n{\"name\": " + json::quote(e.name) + ", \"cat\": " + json::quote(e.category) +
           ", \"ph\": \"X\", \"pid\": " + std::to_string(pid) +
           ", \"tid\": " + std::to_string(int(e.lane)) + ", \"ts\": " + micros(e.startNs) +
           ", \"dur\": " + micros(e.endNs - e.startNs);
    if (!e.args.empty())
      out += ", \"args\": {" + e.args + "}";
    out += "}";
  }
  return out;
}

// ---- The tracing communicator ----

namespace {

class TracingCommunicator final : public comm::Communicator {
public:
  TracingCommunicator(comm::Communicator &inner, Trace &trace) : inner_(inner), trace_(trace) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const comm::Mesh &mesh() const override { return inner_.mesh(); }

  Status allReduce(std::span<const uint32_t> axes, void *data, size_t count, DType dtype,
                   comm::ReduceKind kind) override {
    return traced("AllReduce", group(axes, count * dtypeSize(dtype)),
                  [&] { return inner_.allReduce(axes, data, count, dtype, kind); });
  }
  Status allGather(std::span<const uint32_t> axes, const void *in, void *out,
                   size_t bytesPerRank) override {
    return traced("AllGather", group(axes, bytesPerRank * groupSize(axes)),
                  [&] { return inner_.allGather(axes, in, out, bytesPerRank); });
  }
  Status reduceScatter(std::span<const uint32_t> axes, const void *in, void *out,
                       size_t countPerRank, DType dtype, comm::ReduceKind kind) override {
    return traced("ReduceScatter", group(axes, countPerRank * dtypeSize(dtype) * groupSize(axes)),
                  [&] { return inner_.reduceScatter(axes, in, out, countPerRank, dtype, kind); });
  }
  Status allToAll(std::span<const uint32_t> axes, const void *in, void *out,
                  size_t bytesPerRank) override {
    return traced("AllToAll", group(axes, bytesPerRank * groupSize(axes)),
                  [&] { return inner_.allToAll(axes, in, out, bytesPerRank); });
  }
  Status allToAllV(std::span<const uint32_t> axes, const void *in,
                   std::span<const size_t> sendBytes, void *out,
                   std::span<const size_t> recvBytes) override {
    size_t total = 0;
    for (size_t b : sendBytes)
      total += b;
    return traced("AllToAllV", group(axes, total),
                  [&] { return inner_.allToAllV(axes, in, sendBytes, out, recvBytes); });
  }
  // Asynchronous collectives: one event per collective from its start to its wait's return
  // (the time it was in flight, overlapping the kernels lane).
  StatusOr<std::unique_ptr<comm::CommHandle>> startAllReduce(std::span<const uint32_t> axes,
                                                             const void *in, void *out,
                                                             size_t count, DType dtype,
                                                             comm::ReduceKind kind) override {
    return tracedStart("AllReduceAsync", group(axes, count * dtypeSize(dtype)),
                       inner_.startAllReduce(axes, in, out, count, dtype, kind));
  }
  StatusOr<std::unique_ptr<comm::CommHandle>> startAllGather(std::span<const uint32_t> axes,
                                                             const void *in, void *out,
                                                             size_t bytesPerRank) override {
    return tracedStart("AllGatherAsync", group(axes, bytesPerRank * groupSize(axes)),
                       inner_.startAllGather(axes, in, out, bytesPerRank));
  }
  StatusOr<std::unique_ptr<comm::CommHandle>> startReduceScatter(std::span<const uint32_t> axes,
                                                                 const void *in, void *out,
                                                                 size_t countPerRank, DType dtype,
                                                                 comm::ReduceKind kind) override {
    return tracedStart("ReduceScatterAsync",
                       group(axes, countPerRank * dtypeSize(dtype) * groupSize(axes)),
                       inner_.startReduceScatter(axes, in, out, countPerRank, dtype, kind));
  }
  Status send(int peer, int tag, const void *data, size_t bytes) override {
    return traced("Send", transfer(peer, tag, bytes),
                  [&] { return inner_.send(peer, tag, data, bytes); });
  }
  Status recv(int peer, int tag, void *data, size_t bytes) override {
    return traced("Recv", transfer(peer, tag, bytes),
                  [&] { return inner_.recv(peer, tag, data, bytes); });
  }
  // A receive posted ahead of its step: one event from its post to its wait's return.
  StatusOr<std::unique_ptr<comm::CommHandle>> startRecv(int peer, int tag, void *data,
                                                        size_t bytes) override {
    return tracedStart("RecvAsync", transfer(peer, tag, bytes),
                       inner_.startRecv(peer, tag, data, bytes));
  }
  Status flushSends() override {
    return traced("FlushSends", {}, [&] { return inner_.flushSends(); });
  }
  Status barrier() override {
    return traced("Barrier", {}, [&] { return inner_.barrier(); });
  }

private:
  StatusOr<std::unique_ptr<comm::CommHandle>>
  tracedStart(const char *op, std::string args, StatusOr<std::unique_ptr<comm::CommHandle>> inner) {
    if (!inner.isOk() || !trace_.recording())
      return inner;
    class Handle final : public comm::CommHandle {
    public:
      Handle(Trace &trace, const char *op, std::string args, std::unique_ptr<comm::CommHandle> h)
          : trace_(trace), op_(op), args_(std::move(args)), inner_(std::move(h)),
            start_(Trace::Clock::now()) {}
      Status wait() override {
        Status status = inner_->wait();
        trace_.add(TraceLane::communication, op_, "comm", start_, Trace::Clock::now(), args_);
        return status;
      }

    private:
      Trace &trace_;
      const char *op_;
      std::string args_;
      std::unique_ptr<comm::CommHandle> inner_;
      Trace::Clock::time_point start_;
    };
    if (!trace_.function().empty())
      args +=
          std::string(args.empty() ? "" : ", ") + "\"function\": " + json::quote(trace_.function());
    return std::unique_ptr<comm::CommHandle>(
        new Handle(trace_, op, std::move(args), std::move(inner).value()));
  }

private:
  template <typename Call> Status traced(const char *op, std::string args, Call call) {
    if (!trace_.recording())
      return call();
    auto start = Trace::Clock::now();
    Status status = call();
    if (!trace_.function().empty())
      args +=
          std::string(args.empty() ? "" : ", ") + "\"function\": " + json::quote(trace_.function());
    trace_.add(TraceLane::communication, op, "comm", start, Trace::Clock::now(), std::move(args));
    return status;
  }
  size_t groupSize(std::span<const uint32_t> axes) const {
    size_t n = 1;
    for (uint32_t a : axes)
      if (a < inner_.mesh().axisSizes.size())
        n *= static_cast<size_t>(inner_.mesh().axisSizes[a]);
    return n;
  }
  std::string group(std::span<const uint32_t> axes, size_t bytes) const {
    if (!trace_.recording())
      return {};
    return "\"group\": " + json::quote(inner_.mesh().describeGroup(inner_.rank(), axes)) +
           ", \"bytes\": " + std::to_string(bytes);
  }
  std::string transfer(int peer, int tag, size_t bytes) const {
    if (!trace_.recording())
      return {};
    return "\"peer\": " + std::to_string(peer) + ", \"tag\": " + std::to_string(tag) +
           ", \"bytes\": " + std::to_string(bytes);
  }

  comm::Communicator &inner_;
  Trace &trace_;
};

// Tags of the gather: after the traced steps every pipeline transfer has been received, so
// these cannot match one (and they sit below MPI's guaranteed tag bound, 32767).
constexpr int kSizeTag = 32000, kBytesTag = 32001;
// MPI counts are ints: long payloads travel in pieces.
constexpr size_t kPiece = size_t(1) << 30;

uint64_t peakRssBytes() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0)
    return 0;
  return uint64_t(usage.ru_maxrss) * 1024; // Linux: kilobytes
}

Status sendString(comm::Communicator &comm, const std::string &text) {
  uint64_t size = text.size();
  RETURN_IF_ERROR(comm.send(0, kSizeTag, &size, sizeof(size)));
  for (size_t at = 0; at < text.size(); at += kPiece)
    RETURN_IF_ERROR(comm.send(0, kBytesTag, text.data() + at, std::min(kPiece, text.size() - at)));
  return comm.flushSends();
}

StatusOr<std::string> recvString(comm::Communicator &comm, int peer) {
  uint64_t size = 0;
  RETURN_IF_ERROR(comm.recv(peer, kSizeTag, &size, sizeof(size)));
  std::string text(size, '\0');
  for (size_t at = 0; at < text.size(); at += kPiece)
    RETURN_IF_ERROR(
        comm.recv(peer, kBytesTag, text.data() + at, std::min(kPiece, text.size() - at)));
  return text;
}

} // namespace

std::unique_ptr<comm::Communicator> makeTracingCommunicator(comm::Communicator &inner,
                                                            Trace &trace) {
  return std::make_unique<TracingCommunicator>(inner, trace);
}

Status writeGatheredTrace(comm::Communicator &comm, const Trace &trace, const TraceRankInfo &info,
                          const std::string &path, const std::string &otherData) {
  if (trace.recording())
    return Status::error("the trace is gathered while it still records");
  // A rank's part: "<arena bytes> <peak RSS bytes>\n" and its events.
  std::string mine = std::to_string(info.arenaBytes) + " " + std::to_string(peakRssBytes()) + "\n" +
                     trace.chromeEvents(comm.rank(), info.processName);
  if (comm.rank() != 0) {
    RETURN_IF_ERROR(sendString(comm, mine))
        << " (sending the trace of rank " << comm.rank() << " to rank 0)";
    return Status::ok();
  }

  std::string events, arena, rss;
  for (int r = 0; r < comm.size(); ++r) {
    std::string part;
    if (r == 0) {
      part = std::move(mine);
    } else {
      ASSIGN_OR_RETURN(part, recvString(comm, r));
    }
    size_t newline = part.find('\n');
    unsigned long long arenaBytes = 0, rssBytes = 0;
    if (newline == std::string::npos ||
        std::sscanf(part.c_str(), "%llu %llu", &arenaBytes, &rssBytes) != 2)
      return Status::error("the trace of rank " + std::to_string(r) + " is malformed");
    events += (r ? ",\n" : "") + part.substr(newline + 1);
    arena += (r ? ", " : "") + std::to_string(arenaBytes);
    rss += (r ? ", " : "") + std::to_string(rssBytes);
  }
  std::string document = "{\"traceEvents\": [\n" + events +
                         "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"source\": \"megac "
                         "train\", \"ranks\": " +
                         std::to_string(comm.size()) + ", \"arena_bytes\": [" + arena +
                         "], \"peak_rss_bytes\": [" + rss + "]" +
                         (otherData.empty() ? "" : ", " + otherData) + "}\n}\n";
  std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t *>(document.data()),
                                 document.size());
  std::span<const uint8_t> pieces[] = {bytes};
  return writeFileAtomically(path, pieces);
}

} // namespace megac::runtime
