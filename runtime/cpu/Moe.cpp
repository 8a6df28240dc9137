// CPU reference kernels of the mixture-of-experts opcodes (plan.fbs TopKMask ... 
// MoeMatmulWeightGrad): routing weights w [T, E] (leading token dims flattened), routed tensors
// [E, T, f]; (t, e) is active where w[t, e] != 0. Each expert's GEMM runs on its active rows
// only, packed in token order, so the work follows the real per-expert counts. Every sum runs in
// a fixed order (experts ascending, tokens ascending): results are bit-identical run to run.
#include "runtime/cpu/AttentionUtil.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/ShapeChecks.h"

#include <algorithm>
#include <climits>
#include <vector>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

/// The active tokens of expert e, ascending.
template <typename T> std::vector<int64_t> activeRows(const T *w, const MoeGeometry &g, int64_t e) {
  std::vector<int64_t> rows;
  for (int64_t t = 0; t < g.tokens; ++t)
    if (w[t * g.experts + e] != T(0))
      rows.push_back(t);
  return rows;
}

/// Copies rows[r] of `from` ([T, width]) to row r of `to`, the rows split over the threads.
template <typename T>
void packRows(T *to, const T *from, const std::vector<int64_t> &rows, int64_t width) {
  parallelFor(static_cast<int64_t>(rows.size()), grainFor(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      copyBytes(to + r * width, from + rows[r] * width, width * sizeof(T));
  });
}

/// The inverse over a whole [tokens, width] output: token rows[r] gets packed row r, every
/// other token zeros (an inactive (t, e) is exactly 0). The tokens are split over the threads;
/// a chunk finds its first active row by binary search (rows ascend).
template <typename T>
void unpackRows(T *to, const T *packed, const std::vector<int64_t> &rows, int64_t tokens,
                int64_t width) {
  parallelFor(tokens, grainFor(width), [&](int64_t begin, int64_t end) {
    auto r = std::lower_bound(rows.begin(), rows.end(), begin);
    for (int64_t t = begin; t < end; ++t) {
      T *dst = to + t * width;
      if (r != rows.end() && *r == t) {
        copyBytes(dst, packed + (r - rows.begin()) * width, width * sizeof(T));
        ++r;
      } else {
        std::fill(dst, dst + width, T(0));
      }
    }
  });
}

/// Runs body(e) for every expert e. With at least as many experts as kernel threads the experts
/// run on the threads, each expert's packing, product and scatter on one thread and its product
/// on that thread alone (parallelForSerialBlas): small per-expert products split over BLAS's
/// threads one after another scale poorly (256 rows x 256 x 512 on this project's 2-core VM:
/// 1.54x on 2 threads, where whole experts side by side reach the cores' single-thread rate),
/// and a product's bits then do not depend on the thread count. With fewer experts than threads
/// they run one after another, each product on BLAS's threads and the copies split over the
/// kernel threads. Bodies write disjoint memory (their expert's rows or matrix).
template <typename F> void forEachExpert(int64_t experts, F &&body) {
  int threads = kernelThreads();
  if (threads > 1 && experts >= threads) {
    parallelForSerialBlas(experts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t e = begin; e < end; ++e)
        body(e);
    });
    return;
  }
  for (int64_t e = 0; e < experts; ++e)
    body(e);
}

/// BLAS takes int dimensions.
Status checkBlasDims(const char *op, int64_t m, int64_t n, int64_t k) {
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return fail(op, "a matrix dimension exceeds the BLAS int range (m=" + std::to_string(m) +
                        ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ")");
  return Status::ok();
}

/// Whether x ranks above y in a top-k choice: larger first, NaN last.
template <typename T> bool ranksAbove(T x, T y) {
  if (x != x)
    return false;
  if (y != y)
    return true;
  return x > y;
}

} // namespace

Status topkMask(const TensorRef &x, int64_t k, const TensorRef &out) {
  ASSIGN_OR_RETURN(int64_t n, checkTopKMask(x, k, out));
  return dispatchFloat("TopKMask", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = x.as<const T>();
    T *o = out.as<T>();
    int64_t rows = n ? x.numElements() / n : 0;
    std::vector<int64_t> order(n);
    for (int64_t r = 0; r < rows; ++r) {
      const T *row = in + r * n;
      for (int64_t i = 0; i < n; ++i)
        order[i] = i;
      // Stable: among equal values the lower index stays first.
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return ranksAbove(row[a], row[b]); });
      T *dst = o + r * n;
      std::fill(dst, dst + n, T(0));
      for (int64_t i = 0; i < k; ++i)
        dst[order[i]] = T(1);
    }
    return Status::ok();
  });
}

Status moeDispatch(const TensorRef &x, const TensorRef &w, const TensorRef &out) {
  ASSIGN_OR_RETURN(MoeGeometry g, checkMoe(MoeKernel::dispatch, x, nullptr, w, false, out));
  return dispatchFloat("MoeDispatch", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = x.as<const T>(), *wt = w.as<const T>();
    T *o = out.as<T>();
    // Row (e, t) of the output is token t scaled by its gate for expert e, exactly 0 where the
    // gate is 0 (whatever the token holds); the rows are independent: split over the threads.
    parallelFor(g.experts * g.tokens, grainFor(g.in), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        int64_t e = row / g.tokens, t = row % g.tokens;
        T scale = wt[t * g.experts + e];
        T *dst = o + row * g.in;
        if (scale == T(0)) {
          std::fill(dst, dst + g.in, T(0));
          continue;
        }
        const T *src = in + t * g.in;
        for (int64_t i = 0; i < g.in; ++i)
          dst[i] = scale * src[i];
      }
    });
    return Status::ok();
  });
}

Status moeCombine(const TensorRef &y, const TensorRef &w, const TensorRef &out) {
  ASSIGN_OR_RETURN(MoeGeometry g, checkMoe(MoeKernel::combine, y, nullptr, w, false, out));
  return dispatchFloat("MoeCombine", y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = y.as<const T>(), *wt = w.as<const T>();
    T *o = out.as<T>();
    // Each token's row sums its experts in ascending order; the tokens run on the threads.
    parallelFor(g.tokens, grainFor(g.in * g.experts), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        T *dst = o + t * g.in;
        std::fill(dst, dst + g.in, T(0));
        for (int64_t e = 0; e < g.experts; ++e) {
          T scale = wt[t * g.experts + e];
          if (scale == T(0))
            continue;
          const T *src = in + (e * g.tokens + t) * g.in;
          for (int64_t i = 0; i < g.in; ++i)
            dst[i] += scale * src[i];
        }
      }
    });
    return Status::ok();
  });
}

Status moeMatmul(const TensorRef &x, const TensorRef &weight, const TensorRef &w,
                 bool transposeWeight, const TensorRef &out) {
  const char *name = "MoeMatmul";
  ASSIGN_OR_RETURN(MoeGeometry g, checkMoe(MoeKernel::matmul, x, &weight, w, transposeWeight, out));
  RETURN_IF_ERROR(checkBlasDims(name, g.tokens, g.out, g.in));
  return dispatchFloat(name, x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *in = x.as<const T>(), *wt = w.as<const T>(), *W = weight.as<const T>();
    T *o = out.as<T>();
    forEachExpert(g.experts, [&](int64_t e) {
      std::vector<int64_t> rows = activeRows(wt, g, e);
      int64_t n = static_cast<int64_t>(rows.size());
      T *dst = o + e * g.tokens * g.out;
      if (n == 0) {
        parallelFor(g.tokens, grainFor(g.out), [&](int64_t begin, int64_t end) {
          std::fill(dst + begin * g.out, dst + end * g.out, T(0));
        });
        return;
      }
      std::vector<T> packedIn(n * g.in), packedOut(n * g.out);
      packRows(packedIn.data(), in + e * g.tokens * g.in, rows, g.in);
      const T *We = W + e * g.in * g.out;
      // [n, in] x W[e]^T (W[e] [out, in]) or x W[e] (W[e] [in, out]).
      gemmStrided<T>(false, !transposeWeight, n, g.out, g.in, T(1), packedIn.data(), g.in, We,
                     transposeWeight ? g.out : g.in, T(0), packedOut.data(), g.out);
      unpackRows(dst, packedOut.data(), rows, g.tokens, g.out);
    });
    return Status::ok();
  });
}

Status moeRowDot(const TensorRef &y, const TensorRef &z, const TensorRef &w, const TensorRef &out) {
  ASSIGN_OR_RETURN(MoeGeometry g, checkMoe(MoeKernel::rowDot, y, &z, w, false, out));
  return dispatchFloat("MoeRowDot", y.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *a = y.as<const T>(), *b = z.as<const T>(), *wt = w.as<const T>();
    T *o = out.as<T>();
    // Each (t, e) dot runs in element order on one thread; the tokens run on the threads.
    parallelFor(g.tokens, grainFor(g.in * g.experts), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t)
        for (int64_t e = 0; e < g.experts; ++e) {
          T sum = T(0);
          if (wt[t * g.experts + e] != T(0)) {
            const T *ra = a + (e * g.tokens + t) * g.in, *rb = b + t * g.in;
            for (int64_t i = 0; i < g.in; ++i)
              sum += ra[i] * rb[i];
          }
          o[t * g.experts + e] = sum;
        }
    });
    return Status::ok();
  });
}

Status moeMatmulWeightGrad(const TensorRef &a, const TensorRef &b, const TensorRef &w,
                           const TensorRef &out, const TensorRef *acc) {
  const char *name = "MoeMatmulWeightGrad";
  ASSIGN_OR_RETURN(MoeGeometry g, checkMoe(MoeKernel::weightGrad, a, &b, w, false, out));
  RETURN_IF_ERROR(checkBlasDims(name, g.in, g.out, g.tokens));
  if (acc) {
    RETURN_IF_ERROR(expectShape(name, "accumulator", *acc, out.shape));
    RETURN_IF_ERROR(expectDtype(name, "accumulator", *acc, out.dtype));
  }
  return dispatchFloat(name, a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T *pa = a.as<const T>(), *pb = b.as<const T>(), *wt = w.as<const T>();
    T *o = out.as<T>();
    int64_t total = g.experts * g.in * g.out;
    // Accumulating: out starts as acc (nothing to copy when out is acc's memory) and each
    // expert's GEMM adds with beta = 1, as cuBLAS does on the GPU.
    if (!acc)
      std::fill(o, o + total, T(0));
    else if (acc->as<const T>() != o)
      copyBytes(o, acc->as<const T>(), total * sizeof(T));
    forEachExpert(g.experts, [&](int64_t e) {
      std::vector<int64_t> rows = activeRows(wt, g, e);
      int64_t n = static_cast<int64_t>(rows.size());
      if (n == 0)
        return;
      std::vector<T> packedA(n * g.in), packedB(n * g.out);
      packRows(packedA.data(), pa + e * g.tokens * g.in, rows, g.in);
      packRows(packedB.data(), pb + e * g.tokens * g.out, rows, g.out);
      // [p, n] x [n, q]: A^T B over the active rows.
      gemmStrided<T>(true, false, g.in, g.out, n, T(1), packedA.data(), g.in, packedB.data(), g.out,
                     acc ? T(1) : T(0), o + e * g.in * g.out, g.out);
    });
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
