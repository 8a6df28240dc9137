// The block kernels of ring attention (RingAttention.h): online-softmax forward blocks and the
// backward block, on the strided [b, s, h, d] layouts through gemm, as Attention's kernels.
#include "runtime/cpu/RingAttention.h"

#include "runtime/cpu/AttentionUtil.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// Half-open row ranges: the two halves of n rows (the load-balanced chunks), or all of them.
std::vector<std::pair<int64_t, int64_t>> halves(int64_t n) {
  if (n >= 2 && n % 2 == 0)
    return {{0, n / 2}, {n / 2, n}};
  return {{0, n}};
}

/// How a (query half, key half) pair is masked: skipped (every key after every query), whole
/// (every key at or before every query) or per element.
enum class Visibility { none, whole, masked };

Visibility visibility(const int64_t *qp, std::pair<int64_t, int64_t> rows, const int64_t *kp,
                      std::pair<int64_t, int64_t> keys) {
  if (rows.first == rows.second || keys.first == keys.second)
    return Visibility::none;
  auto [qMin, qMax] = std::minmax_element(qp + rows.first, qp + rows.second);
  auto [kMin, kMax] = std::minmax_element(kp + keys.first, kp + keys.second);
  if (*kMin > *qMax)
    return Visibility::none;
  return *kMax <= *qMin ? Visibility::whole : Visibility::masked;
}

struct Checked {
  AttentionShape shape;
  const int64_t *qp, *kp;
  const void *mask = nullptr; // the key padding mask [b or 1, 1, 1, t], of q's dtype
  int64_t maskBatchStride = 0;
};

/// The shapes of one block call: q, k, v as Attention's, positions i64 [s] and [t], the key
/// mask (if any) [b or 1, 1, 1, t] of q's dtype.
StatusOr<Checked> check(const char *name, const TensorRef &q, const TensorRef &k,
                        const TensorRef &v, const TensorRef &queryPositions,
                        const TensorRef &keyPositions, double scale, const TensorRef *keyMask) {
  for (auto [t, what] : {std::pair{&k, "k"}, std::pair{&v, "v"}})
    if (t->dtype != q.dtype)
      return fail(name, std::string(what) + " is " + dtypeName(t->dtype) + ", expected " +
                            dtypeName(q.dtype));
  ASSIGN_OR_RETURN(AttentionDims dims, attentionDims(name, q, k, v));
  RETURN_IF_ERROR(
      checkAttentionPositions(name, dims, &queryPositions, &keyPositions, false, false));
  if (!std::isfinite(scale))
    return fail(name, "scale " + std::to_string(scale) + " is not finite");
  auto [b, s, h, d, t, hk, dv] = dims;
  AttentionShape shape{b, s, h, d, t, hk, dv, nullptr, {}, false, scale};
  if (!shape.fitsBlas())
    return fail(name, "a dimension exceeds the BLAS int range");
  Checked c{shape, queryPositions.as<const int64_t>(), keyPositions.as<const int64_t>()};
  if (keyMask) {
    std::span<const int64_t> m = keyMask->shape;
    if (keyMask->dtype != q.dtype || m.size() != 4 || (m[0] != b && m[0] != 1) || m[1] != 1 ||
        m[2] != 1 || m[3] != t)
      return fail(name, "key mask " + shapeString(m) + " " + dtypeName(keyMask->dtype) +
                            " must be [" + std::to_string(b) + " or 1, 1, 1, " + std::to_string(t) +
                            "] " + dtypeName(q.dtype));
    c.mask = keyMask->data;
    c.maskBatchStride = m[0] == 1 ? 0 : t;
  }
  return c;
}

/// Calls f(bi, hi, rows, keys, seen) for each (batch, head, query half, key half) pair of the
/// block with a key visible to a query (the forward's and the backward's shared loop nest).
template <typename F> void forEachVisibleBlock(const Checked &c, F &&f) {
  const AttentionShape &a = c.shape;
  auto rowHalves = halves(a.s), keyHalves = halves(a.t);
  for (int64_t bi = 0; bi < a.b; ++bi)
    for (int64_t hi = 0; hi < a.h; ++hi)
      for (auto rows : rowHalves)
        for (auto keys : keyHalves)
          if (Visibility seen = visibility(c.qp, rows, c.kp, keys); seen != Visibility::none)
            f(bi, hi, rows, keys, seen);
}

Status checkStats(const char *name, const AttentionShape &a, const RingRowStats &stats) {
  auto rows = static_cast<size_t>(a.b * a.h * a.s);
  if (stats.max.size() != rows || stats.sum.size() != rows)
    return fail(name, "row statistics hold " + std::to_string(stats.max.size()) +
                          " rows, the "
                          "queries " +
                          std::to_string(rows) + " (run ringAttentionBegin first)");
  return Status::ok();
}

/// The key mask's entries for batch bi's keys [keys.first, ...), or nullptr without one.
template <typename T>
const T *maskRow(const Checked &c, int64_t bi, std::pair<int64_t, int64_t> keys) {
  return c.mask ? static_cast<const T *>(c.mask) + bi * c.maskBatchStride + keys.first : nullptr;
}

/// scores [qn, kn] = scale * Q[rows] K[keys]^T of head (bi, hi) (+ the key mask), -inf where
/// masked.
template <typename T>
void blockScores(const AttentionShape &a, const T *q, const T *k, const int64_t *qp,
                 const int64_t *kp, int64_t bi, int64_t hi, std::pair<int64_t, int64_t> rows,
                 std::pair<int64_t, int64_t> keys, Visibility seen, const T *mask, T *scores) {
  int64_t qn = rows.second - rows.first, kn = keys.second - keys.first;
  gemmStrided<T>(false, true, qn, kn, a.d, static_cast<T>(a.scale),
                 q + a.qOffset(bi, hi) + rows.first * a.h * a.d, a.h * a.d,
                 k + a.kOffset(bi, hi) + keys.first * a.hk * a.d, a.hk * a.d, T(0), scores, kn);
  if (seen == Visibility::masked)
    for (int64_t i = 0; i < qn; ++i)
      for (int64_t j = 0; j < kn; ++j)
        if (kp[keys.first + j] > qp[rows.first + i])
          scores[i * kn + j] = -std::numeric_limits<T>::infinity();
  if (mask)
    for (int64_t i = 0; i < qn; ++i)
      for (int64_t j = 0; j < kn; ++j)
        scores[i * kn + j] += mask[j];
}

} // namespace

Status ringAttentionBegin(const TensorRef &q, const TensorRef &out, RingRowStats &stats) {
  const char *name = "RingAttention";
  if (q.shape.size() != 4 || out.shape.size() != 4 || out.shape[0] != q.shape[0] ||
      out.shape[1] != q.shape[1] || out.shape[2] != q.shape[2] || out.dtype != q.dtype)
    return fail(name, "output " + shapeString(out.shape) + " " + dtypeName(out.dtype) +
                          " does not fit q " + shapeString(q.shape) + " " + dtypeName(q.dtype));
  auto rows = static_cast<size_t>(q.shape[0] * q.shape[1] * q.shape[2]);
  if (stats.max.empty() && stats.sum.empty())
    stats.own(rows);
  if (stats.max.size() != rows || stats.sum.size() != rows)
    return fail(name, "row statistics hold " + std::to_string(stats.max.size()) + " rows, q " +
                          shapeString(q.shape) + " has " + std::to_string(rows));
  std::fill(stats.max.begin(), stats.max.end(), kNegInf);
  std::fill(stats.sum.begin(), stats.sum.end(), 0.0);
  std::memset(out.data, 0, out.byteSize());
  return Status::ok();
}

Status ringAttentionBlock(const TensorRef &q, const TensorRef &k, const TensorRef &v,
                          const TensorRef &queryPositions, const TensorRef &keyPositions,
                          double scale, const TensorRef &out, RingRowStats &stats,
                          const TensorRef *keyMask) {
  const char *name = "RingAttention";
  ASSIGN_OR_RETURN(Checked c, check(name, q, k, v, queryPositions, keyPositions, scale, keyMask));
  const AttentionShape &a = c.shape;
  RETURN_IF_ERROR(expectShape(name, "output", out, std::vector<int64_t>{a.b, a.s, a.h, a.dv}));
  RETURN_IF_ERROR(checkStats(name, a, stats));
  return dispatchFloat(name, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> p(static_cast<size_t>(a.s * a.t));
    forEachVisibleBlock(c, [&](int64_t bi, int64_t hi, std::pair<int64_t, int64_t> rows,
                               std::pair<int64_t, int64_t> keys, Visibility seen) {
      int64_t qn = rows.second - rows.first, kn = keys.second - keys.first;
      blockScores<T>(a, q.as<const T>(), k.as<const T>(), c.qp, c.kp, bi, hi, rows, keys, seen,
                     maskRow<T>(c, bi, keys), p.data());
      T *o = out.as<T>() + a.oOffset(bi, hi) + rows.first * a.h * a.dv;
      for (int64_t i = 0; i < qn; ++i) {
        T *row = p.data() + i * kn;
        size_t r = static_cast<size_t>((bi * a.h + hi) * a.s + rows.first + i);
        double best = kNegInf;
        for (int64_t j = 0; j < kn; ++j)
          best = std::max(best, static_cast<double>(row[j]));
        if (best == kNegInf) { // no key of this half visible: nothing changes
          std::fill(row, row + kn, T(0));
          continue;
        }
        double next = std::max(stats.max[r], best);
        // The old terms rescaled to the new max (0 when the row had none).
        auto rescale = static_cast<T>(std::exp(stats.max[r] - next));
        double sum = 0.0;
        for (int64_t j = 0; j < kn; ++j) {
          row[j] = static_cast<T>(std::exp(static_cast<double>(row[j]) - next));
          sum += static_cast<double>(row[j]);
        }
        stats.sum[r] = stats.sum[r] * static_cast<double>(rescale) + sum;
        stats.max[r] = next;
        T *orow = o + i * a.h * a.dv;
        for (int64_t e = 0; e < a.dv; ++e)
          orow[e] *= rescale;
      }
      // out[rows] += P V[keys].
      gemmStrided<T>(false, false, qn, a.dv, kn, T(1), p.data(), kn,
                     v.as<const T>() + a.vOffset(bi, hi) + keys.first * a.hk * a.dv, a.hk * a.dv,
                     T(1), o, a.h * a.dv);
    });
    return Status::ok();
  });
}

Status ringAttentionEnd(const TensorRef &out, const RingRowStats &stats) {
  const char *name = "RingAttention";
  if (out.shape.size() != 4)
    return fail(name, "output " + shapeString(out.shape) + " must be [b,s,h,dv]");
  int64_t b = out.shape[0], s = out.shape[1], h = out.shape[2], dv = out.shape[3];
  if (stats.sum.size() != static_cast<size_t>(b * h * s))
    return fail(name, "row statistics do not fit the output " + shapeString(out.shape));
  return dispatchFloat(name, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t hi = 0; hi < h; ++hi) {
          double sum = stats.sum[static_cast<size_t>((bi * h + hi) * s + i)];
          T *row = out.as<T>() + ((bi * s + i) * h + hi) * dv;
          auto inv = static_cast<T>(sum > 0 ? 1.0 / sum : 0.0);
          for (int64_t e = 0; e < dv; ++e)
            row[e] = sum > 0 ? row[e] * inv : T(0);
        }
    return Status::ok();
  });
}

Status ringAttentionDelta(const TensorRef &dout, const TensorRef &out, std::span<double> delta) {
  const char *name = "RingAttentionGrad";
  if (out.shape.size() != 4 || !sameShape(dout.shape, out.shape) || dout.dtype != out.dtype)
    return fail(name, "dout " + shapeString(dout.shape) + " and out " + shapeString(out.shape) +
                          " must be one [b,s,h,dv] shape and dtype");
  int64_t b = out.shape[0], s = out.shape[1], h = out.shape[2], dv = out.shape[3];
  if (delta.size() != static_cast<size_t>(b * h * s))
    return fail(name, "delta holds " + std::to_string(delta.size()) + " rows, the output " +
                          shapeString(out.shape) + " " + std::to_string(b * h * s));
  return dispatchFloat(name, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t hi = 0; hi < h; ++hi) {
          int64_t at = ((bi * s + i) * h + hi) * dv;
          double sum = 0.0;
          for (int64_t e = 0; e < dv; ++e)
            sum += static_cast<double>(dout.as<const T>()[at + e]) *
                   static_cast<double>(out.as<const T>()[at + e]);
          delta[static_cast<size_t>((bi * h + hi) * s + i)] = sum;
        }
    return Status::ok();
  });
}

Status ringAttentionGradBlock(const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                              const TensorRef &v, const TensorRef &queryPositions,
                              const TensorRef &keyPositions, double scale,
                              const RingRowStats &stats, std::span<const double> delta,
                              const TensorRef &dq, const TensorRef &dk, const TensorRef &dv,
                              const TensorRef *keyMask, const TensorRef *dKeyMask) {
  const char *name = "RingAttentionGrad";
  ASSIGN_OR_RETURN(Checked c, check(name, q, k, v, queryPositions, keyPositions, scale, keyMask));
  if (bool(keyMask) != bool(dKeyMask))
    return fail(name, "there is a key mask gradient exactly when there is a key mask");
  if (dKeyMask)
    RETURN_IF_ERROR(expectLike(name, *keyMask, *dKeyMask, "dmask"));
  const AttentionShape &a = c.shape;
  RETURN_IF_ERROR(expectShape(name, "dout", dout, std::vector<int64_t>{a.b, a.s, a.h, a.dv}));
  RETURN_IF_ERROR(expectShape(name, "dq", dq, q.shape));
  RETURN_IF_ERROR(expectShape(name, "dk", dk, k.shape));
  RETURN_IF_ERROR(expectShape(name, "dv", dv, v.shape));
  for (const TensorRef *t : {&dout, &dq, &dk, &dv})
    if (t->dtype != q.dtype)
      return fail(name, std::string("gradients must be ") + dtypeName(q.dtype) + ", not " +
                            dtypeName(t->dtype));
  RETURN_IF_ERROR(checkStats(name, a, stats));
  if (delta.size() != stats.max.size())
    return fail(name, "delta does not fit the queries (run ringAttentionDelta first)");
  return dispatchFloat(name, q.dtype, [&](auto tag) {
    using T = decltype(tag);
    std::vector<T> p(static_cast<size_t>(a.s * a.t)), dp(p.size());
    const T *qd = q.as<const T>(), *kd = k.as<const T>(), *vd = v.as<const T>();
    const T *dod = dout.as<const T>();
    forEachVisibleBlock(c, [&](int64_t bi, int64_t hi, std::pair<int64_t, int64_t> rows,
                               std::pair<int64_t, int64_t> keys, Visibility seen) {
      int64_t qn = rows.second - rows.first, kn = keys.second - keys.first;
      blockScores<T>(a, qd, kd, c.qp, c.kp, bi, hi, rows, keys, seen, maskRow<T>(c, bi, keys),
                     p.data());
      // P = exp(scores - max) / sum with the whole row's statistics.
      for (int64_t i = 0; i < qn; ++i) {
        size_t r = static_cast<size_t>((bi * a.h + hi) * a.s + rows.first + i);
        double m = stats.max[r], inv = stats.sum[r] > 0 ? 1.0 / stats.sum[r] : 0.0;
        T *row = p.data() + i * kn;
        for (int64_t j = 0; j < kn; ++j)
          row[j] =
              m == kNegInf ? T(0) : static_cast<T>(std::exp(static_cast<double>(row[j]) - m) * inv);
      }
      const T *doRows = dod + a.oOffset(bi, hi) + rows.first * a.h * a.dv;
      const T *qRows = qd + a.qOffset(bi, hi) + rows.first * a.h * a.d;
      const T *kRows = kd + a.kOffset(bi, hi) + keys.first * a.hk * a.d;
      const T *vRows = vd + a.vOffset(bi, hi) + keys.first * a.hk * a.dv;
      // dv[keys] += P^T dO[rows].
      gemmStrided<T>(true, false, kn, a.dv, qn, T(1), p.data(), kn, doRows, a.h * a.dv, T(1),
                     dv.as<T>() + a.vOffset(bi, hi) + keys.first * a.hk * a.dv, a.hk * a.dv);
      // dP = dO V^T; dS = P (dP - delta).
      gemmStrided<T>(false, true, qn, kn, a.dv, T(1), doRows, a.h * a.dv, vRows, a.hk * a.dv, T(0),
                     dp.data(), kn);
      for (int64_t i = 0; i < qn; ++i) {
        auto rowDelta =
            static_cast<T>(delta[static_cast<size_t>((bi * a.h + hi) * a.s + rows.first + i)]);
        for (int64_t j = 0; j < kn; ++j)
          dp[i * kn + j] = p[i * kn + j] * (dp[i * kn + j] - rowDelta);
      }
      if (dKeyMask) { // the added scores' gradient, summed over this head's query rows
        T *gm = dKeyMask->as<T>() + bi * c.maskBatchStride + keys.first;
        for (int64_t i = 0; i < qn; ++i)
          for (int64_t j = 0; j < kn; ++j)
            gm[j] += dp[i * kn + j];
      }
      auto sc = static_cast<T>(a.scale);
      // dq[rows] += scale dS K[keys]; dk[keys] += scale dS^T Q[rows].
      gemmStrided<T>(false, false, qn, a.d, kn, sc, dp.data(), kn, kRows, a.hk * a.d, T(1),
                     dq.as<T>() + a.qOffset(bi, hi) + rows.first * a.h * a.d, a.h * a.d);
      gemmStrided<T>(true, false, kn, a.d, qn, sc, dp.data(), kn, qRows, a.h * a.d, T(1),
                     dk.as<T>() + a.kOffset(bi, hi) + keys.first * a.hk * a.d, a.hk * a.d);
    });
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
