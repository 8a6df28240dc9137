// Fixtures shared by the context-parallel attention tests (AttentionPositionsTest.cpp,
// RingAttentionTest.cpp): seeded q/k/v-like tensors and mega-context-parallel's load-balanced
// sequence order.
#pragma once

#include "TestUtil.h"

#include <cstdint>
#include <vector>

namespace megac::runtime::testing {

/// A tensor of `shape` with values uniform in [-1.5, 1.5] from `seed`, f32 or f64.
inline HostTensor randomTensor(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  if (dtype == DType::f32)
    return f32(std::move(shape), randomValues<float>(size_t(n), seed, -1.5, 1.5));
  return f64(std::move(shape), randomValues<double>(size_t(n), seed, -1.5, 1.5));
}

/// The load-balanced permutation of mega-context-parallel: 2·cp chunks, rank i holding chunks i
/// and 2·cp − 1 − i (rank i's positions are entries [i·seq/cp, (i+1)·seq/cp)).
inline std::vector<int64_t> loadBalanced(int64_t seq, int64_t cp) {
  std::vector<int64_t> order;
  int64_t chunk = seq / (2 * cp);
  for (int64_t i = 0; i < cp; ++i)
    for (int64_t c : {i, 2 * cp - 1 - i})
      for (int64_t p = 0; p < chunk; ++p)
        order.push_back(c * chunk + p);
  return order;
}

} // namespace megac::runtime::testing
