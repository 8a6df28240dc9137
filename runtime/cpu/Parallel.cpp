// The kernels' thread pool: kernelThreads() - 1 workers, started on first use, that sleep on a
// condition variable between loops (they never spin, so they leave the cores to OpenBLAS's
// threads between kernels). A loop is cut into a few chunks per thread that the caller and the
// workers claim in turn, so a worker the scheduler wakes late costs little: the caller claims
// the chunks it has not. setKernelThreads places the caller and every other thread of the process
// (OpenBLAS's workers, the pool's) on CPUs of their own; without it the pool keeps its workers
// off the caller's CPU loop by loop.
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

#ifdef __linux__
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>
#endif

#ifdef MEGAC_HAVE_BLAS
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int threads);
#endif

namespace megac::runtime::cpu {
namespace {

#ifdef __linux__
/// Where setKernelThreads put the kernel threads (the pool pins the workers it starts later).
struct Placement {
  std::mutex mutex;
  bool captured = false;
  cpu_set_t process; // the process's CPUs before any placement
  bool active = false;
  cpu_set_t workers; // while active: every thread but the kernels' caller
};

Placement &placement() {
  static Placement *p = new Placement; // never destroyed: pool workers may read it at exit
  return *p;
}

int64_t envInt(const char *name, int64_t fallback) {
  const char *value = std::getenv(name);
  return value && *value ? std::max<int64_t>(0, std::atoll(value)) : fallback;
}

/// Pins every thread of the process but the caller to `set`.
void pinOtherThreads(const cpu_set_t &set) {
  DIR *dir = opendir("/proc/self/task");
  if (!dir)
    return;
  pid_t self = static_cast<pid_t>(gettid());
  while (dirent *entry = readdir(dir)) {
    pid_t tid = static_cast<pid_t>(std::atoll(entry->d_name));
    if (tid > 0 && tid != self)
      sched_setaffinity(tid, sizeof set, &set); // a thread that just exited: nothing to do
  }
  closedir(dir);
}
#endif

} // namespace

void setKernelThreads(int threads) {
  threads = std::max(1, threads);
  setenv("OMP_NUM_THREADS", std::to_string(threads).c_str(), 1);
#ifdef MEGAC_HAVE_BLAS
  openblas_set_num_threads(threads); // starts OpenBLAS's extra workers first: they are placed too
#endif
#ifdef __linux__
  Placement &p = placement();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (!p.captured) {
    CPU_ZERO(&p.process);
    if (sched_getaffinity(0, sizeof p.process, &p.process) != 0)
      return;
    p.captured = true;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &p.process))
      cpus.push_back(c);
  auto t = static_cast<size_t>(threads);
  size_t localRank = size_t(envInt("OMPI_COMM_WORLD_LOCAL_RANK", 0)),
         localSize = size_t(std::max<int64_t>(1, envInt("OMPI_COMM_WORLD_LOCAL_SIZE", 1)));
  // Every local rank's block in the set (one process, or an unbound MPI job): this rank's. A
  // smaller set under several local ranks (oversubscribed, or bound by the launcher): no
  // placement, since ranks that all pinned their callers to the set's first CPU would share it.
  bool blocks = cpus.size() >= localSize * t;
  size_t first = blocks ? localRank * t : 0;
  cpu_set_t caller = p.process, workers = p.process;
  const char *pin = std::getenv("MEGAC_PIN_THREADS"); // "0": leave placement to the scheduler
  p.active = t > 1 && blocks && first + t <= cpus.size() && !(pin && std::string(pin) == "0");
  if (p.active) {
    CPU_ZERO(&caller);
    CPU_ZERO(&workers);
    CPU_SET(cpus[first], &caller);
    for (size_t i = first + 1; i < first + t; ++i)
      CPU_SET(cpus[i], &workers);
  }
  p.workers = workers;
  sched_setaffinity(0, sizeof caller, &caller);
  pinOtherThreads(workers);
#endif
}

} // namespace megac::runtime::cpu

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
      placeWorkers();
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
  void placeWorkers() {
#ifdef __linux__
    {
      Placement &p = placement();
      std::lock_guard<std::mutex> lock(p.mutex);
      if (p.active) { // setKernelThreads pinned the caller: the workers go where it said
        if (placedFor_ != kPlacedBySetKernelThreads)
          for (pthread_t handle : handles_)
            pthread_setaffinity_np(handle, sizeof p.workers, &p.workers);
        placedFor_ = kPlacedBySetKernelThreads;
        return;
      }
      if (placedFor_ == kPlacedBySetKernelThreads)
        placedFor_ = -1;
      if (p.captured && !haveAllowed_) {
        allowed_ = p.process;
        haveAllowed_ = true;
      }
    }
    keepOffCallersCpu();
#endif
  }

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
  static constexpr int kPlacedBySetKernelThreads = -2;
  int placedFor_ = -1; // the caller CPU the workers are pinned away from, or the above
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
