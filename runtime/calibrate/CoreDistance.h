// How far apart two CPUs are: the round trip of one cache line between two threads pinned to
// them. Threads of one rank that share data (OpenBLAS's packed panels and barriers, the kernel
// pool's split elementwise kernels) pay it on every transfer; on a VM whose host moves its vCPUs
// between dies it jumps from ~55 ns (one die) to ~350 ns (two), and a rank of 2 threads runs ~30%
// slower while ranks of 1 thread do not (docs/cpu-performance.md). `megac calibrate` records it
// around its multi-thread sweeps; bench-core-round-trip prints it for bench/cpu_cost_model.py.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace megac::runtime::calibrate {

/// Nanoseconds per round trip between CPUs `a` and `b`: the median of `batches` batches of
/// `trips` round trips; nullopt where the threads cannot be pinned there (fewer CPUs, a
/// restricted affinity mask).
std::optional<double> coreRoundTripNs(int a, int b, int trips = 40000, int batches = 5);

/// The first two CPUs a thread of this process may be pinned to (lowest numbers first): where a
/// rank's threads run on a machine of two, and what calibrate probes; nullopt with fewer.
std::optional<std::pair<int, int>> firstTwoAllowedCpus();

/// What a calibration says about the placement its multi-thread sweeps ran in, from round trips
/// between `cpus` taken before and after them: "CPUs 0 and 1 54 / 57 ns apart ..." and, when the
/// largest is over twice the smallest (the host moved the vCPUs between dies meanwhile), that
/// the rates mix two placements. Empty without samples.
std::string placementNote(std::pair<int, int> cpus, const std::vector<double> &roundTripsNs);

/// Whether the samples span two placements (the largest over twice the smallest).
bool placementMoved(const std::vector<double> &roundTripsNs);

} // namespace megac::runtime::calibrate
