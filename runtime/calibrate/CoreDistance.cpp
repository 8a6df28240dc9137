// The cache-line round trip between two pinned threads (runtime/calibrate/CoreDistance.h).
#include "runtime/calibrate/CoreDistance.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

namespace megac::runtime::calibrate {
namespace {

bool pin(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

/// The bounced counter, alone in its cache line (the other thread gets its arguments by value,
/// so no stack line of this one bounces too).
struct alignas(64) Line {
  std::atomic<int> value{0};
  char pad[64 - sizeof(std::atomic<int>)];
};

/// Nanoseconds per round trip over `trips` round trips between `a` and `b`, or a negative number
/// when either thread could not be pinned (the trips still run, so neither thread waits forever).
/// Both threads are new, so the caller's own affinity is left as it was.
double roundTrip(int a, int b, int trips) {
  Line shared;
  std::atomic<int> *line = &shared.value;
  double result = -1;
  std::thread first([&] {
    bool pinned = pin(a), otherPinned = false;
    std::thread other([line, b, trips, &otherPinned] {
      otherPinned = pin(b);
      line->store(-1, std::memory_order_release); // pinned and running: the clock may start
      for (int i = 0; i < trips; ++i) {
        while (line->load(std::memory_order_acquire) != 2 * i + 1) {
        }
        line->store(2 * i + 2, std::memory_order_release);
      }
    });
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
    if (pinned && otherPinned)
      result = std::chrono::duration<double, std::nano>(end - start).count() / trips;
  });
  first.join();
  return result;
}

} // namespace

std::optional<double> coreRoundTripNs(int a, int b, int trips, int batches) {
  if (a == b || std::thread::hardware_concurrency() < 2 || trips <= 0 || batches <= 0)
    return std::nullopt;
  std::vector<double> times;
  for (int i = 0; i < batches; ++i) {
    double t = roundTrip(a, b, trips);
    if (t < 0)
      return std::nullopt;
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

bool placementMoved(const std::vector<double> &roundTripsNs) {
  if (roundTripsNs.size() < 2)
    return false;
  auto [low, high] = std::minmax_element(roundTripsNs.begin(), roundTripsNs.end());
  return *high > 2 * *low;
}

std::optional<std::pair<int, int>> firstTwoAllowedCpus() {
  // A fresh thread tries each CPU in turn: the calling thread's own mask may be narrower than the
  // process's (OpenBLAS binds the thread that initialised it), and a CPU outside the cgroup's
  // cpuset refuses the pin.
  std::vector<int> cpus;
  std::thread probe([&cpus] {
    for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
      if (pin(cpu))
        cpus.push_back(cpu);
  });
  probe.join();
  if (cpus.size() < 2)
    return std::nullopt;
  return std::pair{cpus[0], cpus[1]};
}

std::string placementNote(std::pair<int, int> cpus, const std::vector<double> &roundTripsNs) {
  if (roundTripsNs.empty())
    return "";
  std::string note =
      "CPUs " + std::to_string(cpus.first) + " and " + std::to_string(cpus.second) + " ";
  char value[32];
  for (size_t i = 0; i < roundTripsNs.size(); ++i) {
    std::snprintf(value, sizeof value, "%s%.0f", i ? " / " : "", roundTripsNs[i]);
    note += value;
  }
  note += " ns apart (a cache line's round trip, before and after the multi-thread sweeps)";
  if (placementMoved(roundTripsNs))
    note += ": the host moved them between dies meanwhile, so this occupancy's rates mix two "
            "placements (a rank of several threads runs slower when its CPUs are far apart; "
            "calibrate again)";
  return note;
}

} // namespace megac::runtime::calibrate
