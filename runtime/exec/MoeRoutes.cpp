// MoeAllToAll's shapes and rows per member from the routing masks (MoeRoutes.h).
#include "runtime/exec/MoeRoutes.h"

#include "runtime/cpu/KernelUtil.h"
#include "runtime/exec/CollectiveLayout.h"

#include <string>

namespace megac::runtime::collective {

namespace {

constexpr const char *kOp = "MoeAllToAll";

Status fail(const std::string &what) { return opError(kOp, what); }

/// Whether routing entry i of `mask` (a float tensor) is non-zero.
bool routed(const TensorRef &mask, int64_t i) {
  switch (mask.dtype) {
  case DType::f64:
    return mask.as<const double>()[i] != 0;
  case DType::f32:
    return mask.as<const float>()[i] != 0;
  default: // bf16, f16: any bit but the sign's
    return (mask.as<const uint16_t>()[i] & 0x7fff) != 0;
  }
}

std::vector<size_t> sizes(const std::vector<std::vector<int64_t>> &rows) {
  std::vector<size_t> n;
  for (const std::vector<int64_t> &r : rows)
    n.push_back(r.size());
  return n;
}

} // namespace

StatusOr<MoeShape> moeShape(int64_t dim, int64_t members, const TensorRef &x,
                            const TensorRef &tokenMask, const TensorRef &expertMask,
                            const TensorRef &out) {
  RETURN_IF_ERROR(expectSameDtype(kOp, x, out));
  for (const TensorRef *m : {&tokenMask, &expertMask})
    if (m->dtype != DType::f64 && m->dtype != DType::f32 && m->dtype != DType::bf16 &&
        m->dtype != DType::f16)
      return fail(std::string("routing masks must be floating point, not ") + dtypeName(m->dtype));
  if (dim != 0 && dim != 1)
    return fail("dim must be 0 (to the experts) or 1 (back), not " + std::to_string(dim));
  MoeShape s;
  s.toExperts = dim == 0;
  s.members = members;
  const TensorRef &routedIn = s.toExperts ? x : out, &routedOut = s.toExperts ? out : x;
  if (routedIn.shape.size() < 3 || routedIn.shape.size() != routedOut.shape.size())
    return fail("x " + shapeString(x.shape) + " and out " + shapeString(out.shape) +
                " must be routed tensors [E, tokens.., h] of one rank");
  s.experts = routedIn.shape[0];
  int64_t h = routedIn.shape.back();
  s.localTokens = cpu::detail::product(routedIn.shape.subspan(1, routedIn.shape.size() - 2));
  s.localExperts = s.experts / members;
  std::vector<int64_t> wantOut(routedIn.shape.begin(), routedIn.shape.end());
  wantOut[0] = s.localExperts;
  wantOut[1] *= members;
  if (s.experts % members != 0 || !cpu::detail::sameShape(wantOut, routedOut.shape))
    return fail("for a group of " + std::to_string(members) + ", " + shapeString(routedIn.shape) +
                " (every expert) and " + shapeString(routedOut.shape) +
                " (this rank's experts) do not match");
  if (tokenMask.numElements() != s.localTokens * s.experts ||
      expertMask.numElements() != members * s.localTokens * s.localExperts)
    return fail("token mask " + shapeString(tokenMask.shape) + " and expert mask " +
                shapeString(expertMask.shape) + " do not fit " + std::to_string(s.localTokens) +
                " tokens per rank and " + std::to_string(s.experts) + " experts");
  s.rowBytes = static_cast<size_t>(h) * dtypeSize(x.dtype);
  return s;
}

MoeRoutes moeRoutes(const MoeShape &s, const TensorRef &tokenMask, const TensorRef &expertMask) {
  const int64_t g = s.members, T = s.localTokens, E = s.experts, El = s.localExperts;
  MoeRoutes r;
  r.sendRows.resize(size_t(g));
  r.recvRows.resize(size_t(g));
  for (int64_t j = 0; j < g; ++j) {
    // Rows of the every-expert side (this rank's tokens) that member j's experts hold: (e, t).
    std::vector<int64_t> every;
    for (int64_t e = j * El; e < (j + 1) * El; ++e)
      for (int64_t t = 0; t < T; ++t)
        if (routed(tokenMask, t * E + e))
          every.push_back(e * T + t);
    // Rows of this rank's experts' side from member j's tokens: (e_local, t).
    std::vector<int64_t> local;
    for (int64_t el = 0; el < El; ++el)
      for (int64_t t = 0; t < T; ++t)
        if (routed(expertMask, (j * T + t) * El + el))
          local.push_back(el * g * T + j * T + t);
    r.sendRows[size_t(j)] = std::move(s.toExperts ? every : local);
    r.recvRows[size_t(j)] = std::move(s.toExperts ? local : every);
  }
  return r;
}

std::vector<size_t> MoeRoutes::sendCounts() const { return sizes(sendRows); }
std::vector<size_t> MoeRoutes::recvCounts() const { return sizes(recvRows); }

} // namespace megac::runtime::collective
