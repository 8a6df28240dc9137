// The executed timeline of `megac train --trace`: each rank records what it ran (instructions,
// chunk steps, collectives, transfers and waits) with a steady clock, and rank 0 gathers every
// rank's events into one Chrome trace-event JSON file (the format of `megac plan --trace`,
// planner/Timeline.h), which opens in Perfetto. MLIR-free, no MPI: the communicator is the
// interface.
//
// Lanes (Chrome trace threads of the rank's process, pid = rank): 0 "kernels" (functions and
// their instructions, nested), 1 "communication" (every Communicator call: collectives,
// send/recv, flushSends, barrier, with op, group and bytes), 2 "pipeline" (optimizer steps and
// the forward/backward chunk steps inside them, named "F3 c1" as in the planned timeline).
// Recording is off unless started, and the hooks cost one null-pointer check when no trace is
// attached.
#pragma once

#include "support/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megac::runtime {

namespace comm {
class Communicator;
} // namespace comm

enum class TraceLane : int { kernels = 0, communication = 1, pipeline = 2 };

/// One rank's recorder; single-threaded (the executor, the pipeline runner and the tracing
/// communicator all record from the rank's main thread).
class Trace {
public:
  using Clock = std::chrono::steady_clock;

  /// Starts recording; the first start sets the time origin (ts 0 of this rank). Ranks that
  /// start together after a barrier share the origin up to the barrier's skew.
  void start();
  void stop() { recording_ = false; }
  bool recording() const { return recording_; }

  /// Records [start, end) on `lane`. `args`: members of a JSON object without the braces
  /// (`"bytes": 64, "group": "[tp] (ranks 0, 1)"`), or empty. Ignored while not recording.
  void add(TraceLane lane, std::string name, std::string_view category, Clock::time_point start,
           Clock::time_point end, std::string args = {});

  /// The function the executor is running ("" between functions): communication events name it.
  void setFunction(std::string_view function) { function_ = function; }
  const std::string &function() const { return function_; }

  size_t size() const { return events_.size(); }

  /// This rank's events as Chrome trace events (comma separated, no brackets): the process
  /// (pid = `pid`) named `processName`, lane names, then "X" events with ts/dur in microseconds.
  std::string chromeEvents(int pid, const std::string &processName) const;

private:
  struct Event {
    TraceLane lane;
    std::string name, category, args;
    int64_t startNs, endNs; // since the origin
  };
  bool recording_ = false, started_ = false;
  Clock::time_point origin_;
  std::string function_;
  std::vector<Event> events_;
};

/// A Communicator that forwards every call to `inner` and, while `trace` records, records it on
/// the communication lane: its op, group (Mesh::describeGroup), bytes moved by this rank, peer
/// and tag for transfers, and the executor's function. `inner` and `trace` must outlive it.
std::unique_ptr<comm::Communicator> makeTracingCommunicator(comm::Communicator &inner,
                                                            Trace &trace);

/// What a rank reports besides its events.
struct TraceRankInfo {
  std::string processName; // "rank 1 (pp 1, dp 0, tp 0)"
  /// The executor's arena (Executor::arenaBytes): the memory plan's peak of live buffers, which
  /// the CPU executor allocates once; the file also records each process's peak RSS.
  uint64_t arenaBytes = 0;
};

/// Gathers every rank's events and info to rank 0 over `comm` (point to point, in rank order;
/// every rank must call it, with recording stopped) and there writes one Chrome trace to
/// `path`: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"source": "megac
/// train", "ranks": N, "arena_bytes": [per rank], "peak_rss_bytes": [per rank], <otherData>}}.
/// `otherData`: further JSON members without braces, or empty.
Status writeGatheredTrace(comm::Communicator &comm, const Trace &trace, const TraceRankInfo &info,
                          const std::string &path, const std::string &otherData);

} // namespace megac::runtime
