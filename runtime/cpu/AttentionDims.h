// The shape check of the Attention and AttentionGrad kernels, CPU (AttentionUtil.h) and CUDA
// (runtime/cuda/kernels/Attention.cu) alike: the same checks, the same messages.
#pragma once

#include "runtime/cpu/KernelUtil.h"

#include <string>
#include <tuple>
#include <vector>

namespace megac::runtime::cpu::detail {

/// The sizes of q [b,s,h,d], k [b,t,hk,d] and v [b,t,hk,dv].
struct AttentionDims {
  int64_t b, s, h, d, t, hk, dv;
};

/// Checks that q, k and v have attention's shapes (hk dividing h) and returns their sizes.
inline StatusOr<AttentionDims> attentionDims(const char *name, const TensorRef &q,
                                             const TensorRef &k, const TensorRef &v) {
  if (q.shape.size() != 4 || k.shape.size() != 4 || v.shape.size() != 4)
    return fail(name, "q, k, v must be [b,s,h,d], [b,t,hk,d], [b,t,hk,dv]; got " +
                          shapeString(q.shape) + ", " + shapeString(k.shape) + ", " +
                          shapeString(v.shape));
  AttentionDims a{q.shape[0], q.shape[1], q.shape[2], q.shape[3],
                  k.shape[1], k.shape[2], v.shape[3]};
  if (k.shape[0] != a.b || k.shape[3] != a.d || v.shape[0] != a.b || v.shape[1] != a.t ||
      v.shape[2] != a.hk)
    return fail(name, "q " + shapeString(q.shape) + ", k " + shapeString(k.shape) + ", v " +
                          shapeString(v.shape) + " do not agree on b, t, hk or d");
  if (a.hk < 1 || a.h % a.hk != 0)
    return fail(name, std::to_string(a.hk) + " kv heads do not divide " + std::to_string(a.h) +
                          " query heads");
  return a;
}

/// Checks attention's optional query and key positions (causal by global position): both or
/// neither, i64 [s] and [t], never with `causal`. A mask may come with them (context
/// parallelism's padding mask: the key mask, permuted like the keys).
inline Status checkAttentionPositions(const char *name, const AttentionDims &a,
                                      const TensorRef *queryPositions,
                                      const TensorRef *keyPositions, bool causal, bool mask) {
  if (!queryPositions && !keyPositions)
    return Status::ok();
  if (!queryPositions || !keyPositions)
    return fail(name, "query and key positions come together (both or neither)");
  if (causal)
    return fail(name, "positions are causal masking by global position: not with causal");
  for (auto [what, p, n] : {std::tuple{"query positions", queryPositions, a.s},
                            std::tuple{"key positions", keyPositions, a.t}}) {
    if (p->dtype != DType::i64)
      return fail(name, std::string(what) + " are " + dtypeName(p->dtype) + ", expected i64");
    if (p->shape.size() != 1 || p->shape[0] != n)
      return fail(name, std::string(what) + " " + shapeString(p->shape) + " must be [" +
                            std::to_string(n) + "]");
  }
  return Status::ok();
}

} // namespace megac::runtime::cpu::detail
