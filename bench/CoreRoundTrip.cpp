// How far apart two cores are: the round trip of one cache line between them
// (runtime/calibrate/CoreDistance.h, which `megac calibrate` records around its multi-thread
// sweeps too), in nanoseconds, the median of several batches. bench/cpu_cost_model.py runs it
// after each measured run: on a VM whose host moves the vCPUs between dies a rank of 2 threads
// runs ~30% slower whenever they are two dies apart (docs/cpu-performance.md).
//
//   bench-core-round-trip [CPU_A CPU_B]    (default 0 1) -> "round_trip_ns 54.2"
#include "runtime/calibrate/CoreDistance.h"

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

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
  std::optional<double> ns = megac::runtime::calibrate::coreRoundTripNs(a, b);
  if (!ns) {
    std::fprintf(stderr, "cannot pin threads to CPUs %d and %d\n", a, b);
    return 2;
  }
  std::printf("round_trip_ns %.1f\n", *ns);
  return 0;
}
