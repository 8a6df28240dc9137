// The kernels' thread pool: kernelThreads() - 1 workers, started on first use, that sleep on a
// condition variable between loops (they never spin, so they leave the cores to OpenBLAS's
// threads between kernels). A loop is cut into a few chunks per thread that the caller and the
// workers claim in turn, so a worker the scheduler wakes late costs little: the caller claims
// the chunks it has not.
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

#ifdef MEGAC_HAVE_BLAS
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int threads);
#endif

namespace megac::runtime::cpu::detail {

int kernelThreads() {
#ifdef MEGAC_HAVE_BLAS
  return std::max(1, openblas_get_num_threads());
#else
  return 1;
#endif
}

namespace {

thread_local bool insideLoop = false;

class Pool {
public:
  /// Runs the `chunks` chunks of [0, n) on the caller and up to `threads` - 1 workers.
  void run(int64_t n, int64_t chunks, int threads, void (*body)(void *, int64_t, int64_t),
           void *context) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < threads - 1) {
        workers_.emplace_back([this, id = int(workers_.size())] { work(id); });
#ifdef __linux__
        handles_.push_back(workers_.back().native_handle());
#endif
        workers_.back().detach();
        placedFor_ = -1;
      }
      keepOffCallersCpu();
      n_ = n;
      chunks_ = chunks;
      body_ = body;
      context_ = context;
      next_.store(0);
      helpers_ = threads - 1;
      open_ = true;
      ++generation_;
    }
    wake_.notify_all();
    runChunks();
    // Every chunk is claimed now; wait for the workers still running theirs.
    std::unique_lock<std::mutex> lock(mutex_);
    open_ = false;
    finished_.wait(lock, [this] { return active_ == 0; });
  }

private:
  void runChunks() {
    insideLoop = true;
    for (int64_t c; (c = next_.fetch_add(1)) < chunks_;)
      body_(context_, n_ * c / chunks_, n_ * (c + 1) / chunks_);
    insideLoop = false;
  }

  void work(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (!open_ || id >= helpers_) // the caller already ran every chunk, or fewer threads
          continue;
        ++active_;
      }
      runChunks();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0)
        finished_.notify_one();
    }
  }

  /// Lets the workers run anywhere but on the caller's CPU. Right after a GEMM, OpenBLAS's
  /// threads spin (yielding) on the other CPUs for a while; a worker the scheduler woke onto the
  /// caller's busy CPU would wait there until the caller had run every chunk itself, while on a
  /// spinning thread's CPU it runs at the next yield. Re-pinned only when the caller has moved.
  void keepOffCallersCpu() {
#ifdef __linux__
    int cpu = sched_getcpu();
    if (cpu < 0 || cpu == placedFor_)
      return;
    placedFor_ = cpu;
    if (!haveAllowed_) {
      CPU_ZERO(&allowed_);
      haveAllowed_ = sched_getaffinity(0, sizeof(allowed_), &allowed_) == 0;
      if (!haveAllowed_)
        return;
    }
    cpu_set_t set;
    std::memcpy(&set, &allowed_, sizeof(set));
    CPU_CLR(cpu, &set);
    if (CPU_COUNT(&set) == 0) // one CPU: nowhere else to go
      std::memcpy(&set, &allowed_, sizeof(set));
    for (pthread_t handle : handles_)
      pthread_setaffinity_np(handle, sizeof(set), &set);
#endif
  }

  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  std::vector<std::thread> workers_;
#ifdef __linux__
  std::vector<pthread_t> handles_;
  cpu_set_t allowed_; // the process's CPUs when the pool started
  bool haveAllowed_ = false;
#endif
  int placedFor_ = -1; // the caller CPU the workers are pinned away from
  uint64_t generation_ = 0;
  bool open_ = false; // workers may join the current loop
  int active_ = 0;    // workers inside the current loop
  int helpers_ = 0;   // workers that may join it (kernelThreads() - 1 when it started)
  std::atomic<int64_t> next_{0};
  int64_t n_ = 0, chunks_ = 0;
  void (*body_)(void *, int64_t, int64_t) = nullptr;
  void *context_ = nullptr;
};

std::mutex busy; // one loop at a time; another thread's loop runs serially meanwhile

/// Sets OpenBLAS to one thread while any holder lives: the first holder saves the count, the
/// last one restores it, so overlapping holders on several threads never restore a 1. (OpenBLAS
/// 0.3.21's thread count is process-wide; a call on one thread runs on that thread alone, and
/// such calls may run concurrently.)
class SerialBlas {
public:
  SerialBlas() {
#ifdef MEGAC_HAVE_BLAS
    std::lock_guard<std::mutex> lock(mutex_);
    if (holders_++ == 0) {
      saved_ = openblas_get_num_threads();
      if (saved_ != 1)
        openblas_set_num_threads(1);
    }
#endif
  }
  ~SerialBlas() {
#ifdef MEGAC_HAVE_BLAS
    std::lock_guard<std::mutex> lock(mutex_);
    if (--holders_ == 0 && saved_ != 1)
      openblas_set_num_threads(saved_);
#endif
  }
  SerialBlas(const SerialBlas &) = delete;
  SerialBlas &operator=(const SerialBlas &) = delete;

private:
  static inline std::mutex mutex_;
  static inline int holders_ = 0, saved_ = 1;
};

/// parallelForRaw on `threads` threads.
void runLoop(int threads, int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
             void *context) {
  int64_t chunks = std::min<int64_t>(int64_t(4) * threads, n / std::max<int64_t>(grain, 1));
  if (threads <= 1 || chunks <= 1 || insideLoop) {
    body(context, 0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    body(context, 0, n);
    return;
  }
  static Pool *pool = new Pool; // never destroyed: detached workers outlive static destructors
  pool->run(n, chunks, threads, body, context);
}

} // namespace

void parallelForRaw(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                    void *context) {
  if (n > 0)
    runLoop(kernelThreads(), n, grain, body, context);
}

void parallelForSerialBlasRaw(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                              void *context) {
  if (n <= 0)
    return;
  int threads = kernelThreads(); // before SerialBlas makes it 1
  SerialBlas serial;
  runLoop(threads, n, grain, body, context);
}

} // namespace megac::runtime::cpu::detail
