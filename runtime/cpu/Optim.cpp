// CPU reference kernels for the optimizer ops: AdamW (torch.optim.AdamW), GlobalNorm and
// ClipByNorm (torch.nn.utils.clip_grad_norm_).
#include "runtime/cpu/AdamWElements.h"
#include "runtime/cpu/KernelChecks.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace megac::runtime::cpu {

using namespace detail;

namespace {

/// A 0-d f32/f64 tensor's value.
StatusOr<double> floatScalar(const char *op, const char *what, const TensorRef &t) {
  if (!t.shape.empty())
    return fail(op, std::string(what) + " must be a 0-d tensor, not shape " + shapeString(t.shape));
  if (t.dtype == DType::f32)
    return static_cast<double>(*t.as<const float>());
  if (t.dtype == DType::f64)
    return *t.as<const double>();
  return fail(op, std::string(what) + " must be f32 or f64, not " + dtypeName(t.dtype));
}

} // namespace

Status detail::checkAdamWStep(const TensorRef &step, const AdamWConfig &config) {
  const char *name = "AdamW";
  RETURN_IF_ERROR(expectIndexDtype(name, "step", step));
  if (!step.shape.empty())
    return fail(name, "step must be a 0-d tensor, not shape " + shapeString(step.shape));
  const double b1 = config.beta1, b2 = config.beta2, eps = config.eps, wd = config.weightDecay;
  if (!(b1 >= 0.0 && b1 < 1.0) || !(b2 >= 0.0 && b2 < 1.0) || !(eps >= 0.0) ||
      !std::isfinite(eps) || !std::isfinite(wd))
    return fail(name,
                "betas must be in [0, 1) and eps, weight decay finite (eps >= 0); got beta1 " +
                    std::to_string(b1) + ", beta2 " + std::to_string(b2) + ", eps " +
                    std::to_string(eps) + ", weight_decay " + std::to_string(wd));
  return Status::ok();
}

Status adamw(const TensorRef &p, const TensorRef &g, const TensorRef &m, const TensorRef &v,
             const TensorRef &lr, const TensorRef &step, const AdamWConfig &config,
             const TensorRef &pOut, const TensorRef &mOut, const TensorRef &vOut) {
  const char *name = "AdamW";
  struct Operand {
    const TensorRef &ref;
    const char *what;
  };
  for (Operand o : {Operand{g, "grad"}, Operand{m, "exp_avg"}, Operand{v, "exp_avg_sq"},
                    Operand{pOut, "new param"}, Operand{mOut, "new exp_avg"},
                    Operand{vOut, "new exp_avg_sq"}}) {
    RETURN_IF_ERROR(expectDtype(name, o.what, o.ref, p.dtype));
    RETURN_IF_ERROR(expectShape(name, o.what, o.ref, p.shape));
  }
  ASSIGN_OR_RETURN(double rate, floatScalar(name, "lr", lr));
  RETURN_IF_ERROR(checkAdamWStep(step, config));
  int64_t t = loadIndex(step, 0);
  if (t < 1)
    return fail(name, "step " + std::to_string(t) + " must be >= 1 (steps count from 1)");
  const double b1 = config.beta1, b2 = config.beta2, eps = config.eps, wd = config.weightDecay;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t));
  int64_t n = p.numElements();
  const AdamWStep s{rate, b1, b2, eps, wd, bias1, bias2};
  return dispatchFloat(name, p.dtype, [&](auto tag) {
    using T = decltype(tag);
    const AdamWArrays<T> arrays{p.as<const T>(), g.as<const T>(), m.as<const T>(), v.as<const T>(),
                                pOut.as<T>(),    mOut.as<T>(),    vOut.as<T>()};
    // Elements are independent: contiguous ranges of them run on the kernel threads.
    parallelFor(n, 1 << 13,
                [&](int64_t begin, int64_t end) { adamwElements(arrays, begin, end, s); });
    return Status::ok();
  });
}

namespace {

/// Elements per block of the global norm: each block's sum of squares is one task.
constexpr int64_t kNormBlock = 1 << 13;
/// Independent accumulators per block (element i of a block goes to lane i % kNormLanes): the
/// additions no longer wait on one another.
constexpr int kNormLanes = 8;

template <typename T> double blockSumOfSquares(const T *x, int64_t n) {
  double lane[kNormLanes] = {};
  int64_t i = 0;
  for (; i + kNormLanes <= n; i += kNormLanes)
    for (int l = 0; l < kNormLanes; ++l) {
      double v = static_cast<double>(x[i + l]);
      lane[l] += v * v;
    }
  for (int l = 0; i < n; ++i, ++l) {
    double v = static_cast<double>(x[i]);
    lane[l] += v * v;
  }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

} // namespace

Status globalNorm(std::span<const TensorRef> inputs, const TensorRef &out) {
  const char *name = "GlobalNorm";
  if (!out.shape.empty())
    return fail(name, "the output must be a 0-d tensor, not shape " + shapeString(out.shape));
  // One fixed summation order whatever the thread count: every input cut into blocks of
  // kNormBlock elements, each block summed in kNormLanes lanes combined pairwise, the blocks'
  // sums added in input and block order, all in double.
  std::vector<int64_t> firstBlock(inputs.size() + 1, 0);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorRef &x = inputs[k];
    RETURN_IF_ERROR(dispatchFloat(name, x.dtype, [](auto) { return Status::ok(); }))
        << " (input " << k << ")";
    firstBlock[k + 1] = firstBlock[k] + (x.numElements() + kNormBlock - 1) / kNormBlock;
  }
  std::vector<double> partial(static_cast<size_t>(firstBlock.back()), 0.0);
  parallelFor(firstBlock.back(), 4, [&](int64_t begin, int64_t end) {
    size_t k =
        std::upper_bound(firstBlock.begin(), firstBlock.end(), begin) - firstBlock.begin() - 1;
    for (int64_t b = begin; b < end; ++b) {
      while (firstBlock[k + 1] <= b)
        ++k;
      const TensorRef &x = inputs[k];
      int64_t first = (b - firstBlock[k]) * kNormBlock;
      int64_t n = std::min(kNormBlock, x.numElements() - first);
      partial[static_cast<size_t>(b)] = x.dtype == DType::f64
                                            ? blockSumOfSquares(x.as<const double>() + first, n)
                                            : blockSumOfSquares(x.as<const float>() + first, n);
    }
  });
  double sumSq = 0.0;
  for (double p : partial)
    sumSq += p;
  return dispatchFloat(name, out.dtype, [&](auto tag) {
    using T = decltype(tag);
    *out.as<T>() = static_cast<T>(std::sqrt(sumSq));
    return Status::ok();
  });
}

Status detail::checkClipByNorm(const TensorRef &x, const TensorRef &norm, double maxNorm,
                               const TensorRef &out) {
  const char *name = "ClipByNorm";
  RETURN_IF_ERROR(expectDtype(name, "output", out, x.dtype));
  RETURN_IF_ERROR(expectShape(name, "output", out, x.shape));
  RETURN_IF_ERROR(expectDtype(name, "norm", norm, x.dtype));
  if (!norm.shape.empty())
    return fail(name, "norm must be a 0-d tensor, not shape " + shapeString(norm.shape));
  if (!(maxNorm > 0.0) || !std::isfinite(maxNorm))
    return fail(name, "max_norm " + std::to_string(maxNorm) + " must be finite and > 0");
  return Status::ok();
}

Status clipByNorm(const TensorRef &x, const TensorRef &norm, double maxNorm, const TensorRef &out) {
  RETURN_IF_ERROR(checkClipByNorm(x, norm, maxNorm, out));
  int64_t n = x.numElements();
  return dispatchFloat("ClipByNorm", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    // The coefficient in x's dtype, as torch computes it; read before any write (in place).
    T coef = static_cast<T>(maxNorm) / (*norm.as<const T>() + static_cast<T>(1e-6));
    coef = std::min(coef, T(1)); // NaN stays NaN, as torch.clamp
    const T *xs = x.as<const T>();
    T *ys = out.as<T>();
    parallelFor(n, 1 << 14, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        ys[i] = xs[i] * coef;
    });
    return Status::ok();
  });
}

} // namespace megac::runtime::cpu
