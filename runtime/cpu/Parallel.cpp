// The kernels' thread pool: kernelThreads() - 1 workers, started on first use, that sleep on a
// condition variable between loops (they never spin, so they leave the cores to OpenBLAS's
// threads between kernels).
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#ifdef MEGAC_HAVE_BLAS
extern "C" int openblas_get_num_threads(void);
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
  /// Runs chunks 1..chunks-1 of the current loop on workers and chunk 0 here.
  void run(int64_t n, int chunks, void (*body)(void *, int64_t, int64_t), void *context) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      while (static_cast<int>(workers_.size()) < chunks - 1) {
        int id = static_cast<int>(workers_.size()) + 1;
        workers_.emplace_back([this, id] { work(id); });
        workers_.back().detach();
      }
      n_ = n;
      chunks_ = chunks;
      body_ = body;
      context_ = context;
      pending_ = chunks - 1;
      ++generation_;
    }
    wake_.notify_all();
    runChunk(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
  }

private:
  void runChunk(int chunk) {
    int64_t begin = n_ * chunk / chunks_, end = n_ * (chunk + 1) / chunks_;
    insideLoop = true;
    body_(context_, begin, end);
    insideLoop = false;
  }

  void work(int id) {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (id >= chunks_)
          continue;
      }
      runChunk(id);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0)
        done_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;
  int64_t n_ = 0;
  int chunks_ = 0;
  int pending_ = 0;
  void (*body_)(void *, int64_t, int64_t) = nullptr;
  void *context_ = nullptr;
};

std::mutex busy; // one loop at a time; another thread's loop runs serially meanwhile

} // namespace

void parallelForRaw(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                    void *context) {
  if (n <= 0)
    return;
  int64_t chunks = std::min<int64_t>(kernelThreads(), n / std::max<int64_t>(grain, 1));
  if (chunks <= 1 || insideLoop) {
    body(context, 0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(busy, std::try_to_lock);
  if (!lock.owns_lock()) {
    body(context, 0, n);
    return;
  }
  static Pool *pool = new Pool; // never destroyed: detached workers outlive static destructors
  pool->run(n, static_cast<int>(chunks), body, context);
}

} // namespace megac::runtime::cpu::detail
