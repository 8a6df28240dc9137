// Layout-independent parameter initialization with a counter-based generator.
#include "runtime/init/ParamInit.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <system_error>
#include <thread>
#include <vector>

namespace megac::init {

void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57;
  constexpr uint32_t kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kW0;
    k1 += kW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

namespace {

/// FNV-1a, 64-bit: a stable hash of the parameter name across platforms and runs.
uint64_t hashName(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

/// splitmix64 finalizer, to mix the seed into the name hash.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A standard normal from the Philox block at `index`, by Box-Muller on two 32-bit uniforms.
double standardNormal(uint64_t key64, uint64_t index) {
  uint32_t counter[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0};
  uint32_t key[2] = {static_cast<uint32_t>(key64), static_cast<uint32_t>(key64 >> 32)};
  uint32_t r[4];
  philox4x32(counter, key, r);
  // u1 in (0, 1], so the log is finite; u2 in [0, 1).
  double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;
  double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

} // namespace

double initialValue(const InitSpec &spec, uint64_t seed, std::string_view name, uint64_t index) {
  switch (spec.kind) {
  case InitKind::zeros:
    return 0.0;
  case InitKind::ones:
    return 1.0;
  case InitKind::normal:
    return spec.stddev * standardNormal(mix(seed) ^ hashName(name), index);
  }
  return 0.0;
}

namespace {

/// The shard box and its generator key: what every thread of fillShard reads.
struct ShardFill {
  const InitSpec &spec;
  uint64_t seed, key;
  std::string_view name;
  std::span<const int64_t> globalShape, offset, localShape;
  std::span<float> out;

  /// Elements [begin, end) of `out` (row-major in the box; begin < end <= out.size()).
  void range(int64_t begin, int64_t end) const {
    size_t rank = globalShape.size();
    // The box coordinates of `begin`: every extent is positive, since the box is not empty.
    std::vector<int64_t> local(rank, 0);
    for (size_t d = rank, rest = size_t(begin); d-- > 0;) {
      local[d] = int64_t(rest % size_t(localShape[d]));
      rest /= size_t(localShape[d]);
    }
    for (int64_t i = begin; i < end; ++i) {
      uint64_t global = 0;
      for (size_t d = 0; d < rank; ++d)
        global = global * globalShape[d] + offset[d] + local[d];
      double v = spec.kind == InitKind::normal ? spec.stddev * standardNormal(key, global)
                                               : initialValue(spec, seed, name, global);
      out[i] = static_cast<float>(v);
      for (size_t d = rank; d-- > 0;) {
        if (++local[d] < localShape[d])
          break;
        local[d] = 0;
      }
    }
  }
};

/// Below this many elements per thread a thread costs more than it saves (~1 ms of draws).
constexpr int64_t kMinElementsPerThread = int64_t(1) << 16;

} // namespace

bool fillShard(const InitSpec &spec, uint64_t seed, std::string_view name,
               std::span<const int64_t> globalShape, std::span<const int64_t> offset,
               std::span<const int64_t> localShape, std::span<float> out, int threads) {
  size_t rank = globalShape.size();
  if (offset.size() != rank || localShape.size() != rank)
    return false;
  int64_t count = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (offset[d] < 0 || localShape[d] < 0 || offset[d] + localShape[d] > globalShape[d])
      return false;
    count *= localShape[d];
  }
  if (static_cast<int64_t>(out.size()) != count)
    return false;
  if (count == 0)
    return true;
  ShardFill fill{spec,       seed, mix(seed) ^ hashName(name), name, globalShape, offset,
                 localShape, out};
  if (threads <= 0)
    threads = std::max(1, int(std::thread::hardware_concurrency()));
  int64_t chunks = std::clamp<int64_t>(count / kMinElementsPerThread, 1, threads);
  // Chunk c is [count * c / chunks, count * (c + 1) / chunks): contiguous, disjoint, covering
  // (computed without forming count * c, which could overflow).
  auto bound = [&](int64_t c) { return count / chunks * c + count % chunks * c / chunks; };
  std::vector<std::thread> workers;
  int64_t next = 1; // chunk 0 is the caller's
  for (; next < chunks; ++next) {
    try {
      workers.emplace_back([&fill, b = bound(next), e = bound(next + 1)] { fill.range(b, e); });
    } catch (const std::system_error &) {
      break; // no more threads: the caller fills the rest
    }
  }
  fill.range(bound(0), bound(1));
  for (int64_t c = next; c < chunks; ++c)
    fill.range(bound(c), bound(c + 1));
  for (std::thread &worker : workers)
    worker.join();
  return true;
}

} // namespace megac::init
