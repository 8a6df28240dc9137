// The MPI communicator's machinery below its collectives (MpiCommunicator.cpp): MPI's lifetime
// in the process, the in-flight record of a nonblocking collective or receive, and the progress
// engine that completes them while the caller computes. Internal to runtime/comm.
#pragma once

#include "support/Status.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace megac::runtime::comm::mpi {

using Clock = std::chrono::steady_clock;

/// MPI_Init_thread once per process; MPI_Finalize when the process exits. The thread level is
/// MPI_THREAD_MULTIPLE where the library provides it: the communicator's progress thread tests
/// in-flight collectives while the main thread computes and makes its own calls.
class MpiSession {
public:
  static Status ensure();
  /// Whether MPI may be called from two threads at once.
  static bool multiThreaded();

private:
  MpiSession();
  ~MpiSession();
  Status status_;
  bool owned_ = false;
};

/// MPI's text for an error code.
std::string mpiError(int code);

/// Bytes of the stamp an emulated link appends to each point-to-point message: the sender's
/// post time (steady_clock nanoseconds; one machine's monotonic clock, which every process of
/// the job reads alike: emulation is a one-machine measurement tool).
constexpr size_t kStampBytes = sizeof(int64_t);

int64_t stampOf(Clock::time_point t);

/// One posted nonblocking collective or receive: the buffers MPI reads and writes (owned here,
/// so they outlive a handle abandoned after a timeout) and where it stands.
struct InFlight {
  std::vector<uint8_t> sent, received;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Status status{};       // a receive's (its byte count)
  Clock::time_point readyAt; // the emulated link's completion (Clock's epoch: none)
  bool mpiDone = false, done = false;
  std::string error;
  // An emulated link's receive: the transfer starts when both sides have posted (the stamp at
  // the end of `received`, and postedAt) and takes `transfer`.
  bool stamped = false;
  Clock::time_point postedAt;
  Clock::duration transfer{};

  /// Called once MPI has completed the request: a stamped receive's readyAt.
  void arrived();
};

/// The progress engine of asynchronous collectives: a thread that tests every posted request
/// (MPI progresses nonblocking collectives only inside MPI calls) and marks it done once MPI has
/// completed it and its emulated link time has passed; waiters sleep on a condition variable.
/// While requests are pending in MPI and a waiter sleeps (its core is free) it polls every
/// 50 us. While none waits, the main thread computes: a 50 us poll there took a slice of the
/// compute cores (ranks share few), so the interval doubles after each poll that completes
/// nothing, up to 1 ms, and starts again at 50 us on a new post, a completion or a waiter. A
/// 1 ms poll delays a completion by at most 1 ms; a large message needs only a few polls (shared
/// memory single-copy). While only emulated time remains it sleeps until the earliest deadline
/// (no CPU).
class ProgressEngine {
public:
  ~ProgressEngine();
  void post(std::shared_ptr<InFlight> op);
  /// Waits until `op` is done or `deadline` passes (false).
  bool waitFor(const InFlight &op, Clock::time_point deadline);

private:
  static constexpr std::chrono::microseconds kFastPoll{50}, kSlowestPoll{1000};

  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::list<std::shared_ptr<InFlight>> ops_;
  size_t waiters_ = 0;  // threads inside waitFor
  bool posted_ = false; // a post since the last poll
  bool stop_ = false;
  std::thread thread_;
};

} // namespace megac::runtime::comm::mpi
