// Layout-independent parameter initialization: values depend only on (seed, name, global index).
//
// Element i (row-major index into the parameter's global shape) of parameter `name` is drawn
// from a counter-based generator (Philox4x32-10) keyed by the seed and a hash of the name, with
// i as the counter. Any shard can therefore be filled on its own and equals the same slice of
// the whole tensor: a model split over any layout starts from the same weights as one rank.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace megac::init {

enum class InitKind { normal, zeros, ones };

struct InitSpec {
  InitKind kind = InitKind::zeros;
  double stddev = 0.0; // normal only; mean is 0
};

/// The value of element `index` of parameter `name` (before rounding to its storage type).
double initialValue(const InitSpec &spec, uint64_t seed, std::string_view name, uint64_t index);

/// Fills a shard: the box of `localShape` at `offset` in a tensor of `globalShape`, row-major
/// into `out` (localShape's element count). Returns false if the box does not fit.
///
/// Contiguous ranges of `out` are filled on up to `threads` threads (0: one per hardware thread;
/// a small shard stays on the caller). Every element is a pure function of (seed, name, global
/// index), so the values do not depend on the thread count.
bool fillShard(const InitSpec &spec, uint64_t seed, std::string_view name,
               std::span<const int64_t> globalShape, std::span<const int64_t> offset,
               std::span<const int64_t> localShape, std::span<float> out, int threads = 0);

/// Philox4x32-10 (Salmon et al., SC11): four 32-bit outputs for a 128-bit counter and a
/// 64-bit key.
void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

} // namespace megac::init
