// How far apart two cores are: the round trip of one cache line between them (two threads pinned
// to the cores bounce an atomic counter), in nanoseconds, the median of several batches. Threads
// of one process that share data (OpenBLAS's packed panels and barriers, the runtime's
// pool-split elementwise kernels) pay this on every transfer: on a VM whose host moves the vCPUs
// between dies it jumps from ~55 ns (one die) to ~350 ns (two dies), and a rank of 2 threads runs
// ~30% slower in every step while ranks of 1 thread (no shared data) do not
// (docs/cpu-performance.md). bench/cpu_cost_model.py runs it after each measured run.
//
//   bench-core-round-trip [CPU_A CPU_B]    (default 0 1) -> "round_trip_ns 54.2"
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

bool pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/// The bounced counter, alone in its cache line (and nothing else the two threads touch: the
/// other thread gets its arguments by value, so no stack line of this one bounces too).
struct alignas(64) Line {
  std::atomic<int> value{0};
  char pad[64 - sizeof(std::atomic<int>)];
};
Line shared;

/// Nanoseconds per round trip over `trips` round trips between `a` (this thread) and `b`, or a
/// negative number when either thread could not be pinned.
double roundTrip(int a, int b, int trips) {
  std::atomic<int> *line = &shared.value;
  line->store(0);
  bool otherPinned = false;
  std::thread other([line, b, trips, pinned = &otherPinned] {
    *pinned = pin(b);
    line->store(-1, std::memory_order_release); // pinned and running: the clock may start
    for (int i = 0; i < trips; ++i) {
      while (line->load(std::memory_order_acquire) != 2 * i + 1) {
      }
      line->store(2 * i + 2, std::memory_order_release);
    }
  });
  bool pinned = pin(a);
  while (line->load(std::memory_order_acquire) != -1) {
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < trips; ++i) {
    line->store(2 * i + 1, std::memory_order_release);
    while (line->load(std::memory_order_acquire) != 2 * i + 2) {
    }
  }
  auto end = std::chrono::steady_clock::now();
  other.join();
  if (!pinned || !otherPinned)
    return -1;
  return std::chrono::duration<double, std::nano>(end - start).count() / trips;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 1 && argc != 3) {
    std::fprintf(stderr, "usage: %s [CPU_A CPU_B]\n", argv[0]);
    return 2;
  }
  int a = argc == 3 ? std::atoi(argv[1]) : 0, b = argc == 3 ? std::atoi(argv[2]) : 1;
  if (std::thread::hardware_concurrency() < 2) {
    std::fprintf(stderr, "one CPU: no round trip to measure\n");
    return 2;
  }
  std::vector<double> batches;
  for (int i = 0; i < 5; ++i) {
    batches.push_back(roundTrip(a, b, 40000));
    if (batches.back() < 0) {
      std::fprintf(stderr, "cannot pin threads to CPUs %d and %d\n", a, b);
      return 2;
    }
  }
  std::sort(batches.begin(), batches.end());
  std::printf("round_trip_ns %.1f\n", batches[batches.size() / 2]);
  return 0;
}
