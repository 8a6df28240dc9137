// MPI's lifetime, the in-flight records and the progress engine (MpiProgress.h).
#include "runtime/comm/MpiProgress.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace megac::runtime::comm::mpi {

Status MpiSession::ensure() {
  static MpiSession session;
  return session.status_;
}

bool MpiSession::multiThreaded() {
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  return provided >= MPI_THREAD_MULTIPLE;
}

MpiSession::MpiSession() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return; // someone else owns MPI's lifetime
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    status_ = Status::error("MPI_Init_thread failed");
    return;
  }
  owned_ = true;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized)
    MPI_Finalize();
}

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, static_cast<size_t>(length));
}

int64_t stampOf(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

void InFlight::arrived() {
  int count = 0;
  if (!stamped || MPI_Get_count(&status, MPI_BYTE, &count) != MPI_SUCCESS ||
      count < static_cast<int>(kStampBytes))
    return;
  int64_t ns = 0;
  std::memcpy(&ns, received.data() + count - kStampBytes, kStampBytes);
  Clock::time_point sentAt(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
  readyAt = std::max(sentAt, postedAt) + transfer;
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void ProgressEngine::post(std::shared_ptr<InFlight> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ops_.push_back(std::move(op));
    posted_ = true;
    if (!thread_.joinable())
      thread_ = std::thread([this] { loop(); });
  }
  wake_.notify_all();
}

bool ProgressEngine::waitFor(const InFlight &op, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (op.done)
    return true;
  ++waiters_;
  wake_.notify_all(); // back to fast polling
  bool done = done_.wait_until(lock, deadline, [&] { return op.done; });
  --waiters_;
  return done;
}

void ProgressEngine::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::chrono::microseconds interval = kFastPoll;
  while (!stop_) {
    if (ops_.empty()) {
      wake_.wait(lock);
      interval = kFastPoll;
      continue;
    }
    if (posted_)
      interval = kFastPoll;
    posted_ = false;
    // MPI_Test runs without the lock: inside it MPI may copy a large message or, on an
    // oversubscribed machine, yield the core (mpi_yield_when_idle), and a post or a wait of
    // the main thread must not queue behind that. Only this thread touches a posted request.
    std::vector<std::shared_ptr<InFlight>> testing;
    for (const auto &op : ops_)
      if (!op->mpiDone)
        testing.push_back(op);
    std::vector<std::pair<int, int>> results(testing.size()); // (rc, flag)
    lock.unlock();
    for (size_t i = 0; i < testing.size(); ++i)
      results[i].first = MPI_Test(&testing[i]->request, &results[i].second, &testing[i]->status);
    lock.lock();
    bool polling = false, finished = false, progressed = false;
    for (size_t i = 0; i < testing.size(); ++i) {
      InFlight &op = *testing[i];
      auto [rc, flag] = results[i];
      if (rc != MPI_SUCCESS) {
        op.error = mpiError(rc);
        op.mpiDone = true;
        op.readyAt = {};
      } else {
        op.mpiDone = flag != 0;
        if (op.mpiDone)
          op.arrived();
        polling = polling || !flag;
        progressed = progressed || flag;
      }
    }
    Clock::time_point now = Clock::now(), next = Clock::time_point::max();
    for (auto it = ops_.begin(); it != ops_.end();) {
      InFlight &op = **it;
      if (op.mpiDone && op.readyAt <= now) {
        op.done = finished = true;
        it = ops_.erase(it);
        continue;
      }
      if (op.mpiDone)
        next = std::min(next, op.readyAt);
      ++it;
    }
    if (finished)
      done_.notify_all();
    if (polling) {
      if (waiters_ > 0 || progressed)
        interval = kFastPoll;
      wake_.wait_for(lock, interval);
      interval = std::min(kSlowestPoll, interval * 2);
    } else if (next != Clock::time_point::max()) {
      wake_.wait_until(lock, next);
    }
  }
}

} // namespace megac::runtime::comm::mpi
