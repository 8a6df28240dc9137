// CPU reference kernel of the multi-tensor AdamW (plan opcode AdamWMulti): many tensors' AdamW
// steps in one instruction, one parallel loop over all their elements, each element computed
// by AdamW's own element loop (AdamWElements.h), so the bits are cpu::adamw's.
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

template <typename T> AdamWArrays<T> arraysOf(const AdamWTensor &t) {
  return {t.p.as<const T>(), t.g.as<const T>(), t.m.as<const T>(), t.v.as<const T>(),
          t.pOut.as<T>(),    t.mOut.as<T>(),    t.vOut.as<T>()};
}

} // namespace

Status adamwMulti(std::span<const AdamWTensor> tensors, const TensorRef &lr, const TensorRef &step,
                  const AdamWConfig &config, const TensorRef *norm, double maxNorm) {
  const char *name = "AdamWMulti";
  struct Operand {
    const TensorRef &ref;
    const char *what;
  };
  for (size_t k = 0; k < tensors.size(); ++k) {
    const AdamWTensor &t = tensors[k];
    for (Operand o : {Operand{t.g, "grad"}, Operand{t.m, "exp_avg"}, Operand{t.v, "exp_avg_sq"},
                      Operand{t.pOut, "new param"}, Operand{t.mOut, "new exp_avg"},
                      Operand{t.vOut, "new exp_avg_sq"}}) {
      RETURN_IF_ERROR(expectDtype(name, o.what, o.ref, t.p.dtype)) << " (tensor " << k << ")";
      RETURN_IF_ERROR(expectShape(name, o.what, o.ref, t.p.shape)) << " (tensor " << k << ")";
    }
    if (t.p.dtype != DType::f32 && t.p.dtype != DType::f64)
      return fail(name, "tensor " + std::to_string(k) + " is " + dtypeName(t.p.dtype) +
                            "; AdamW runs on f32 or f64 (master weights)");
    if (!std::isfinite(t.weightDecay))
      return fail(name, "tensor " + std::to_string(k) + "'s weight decay " +
                            std::to_string(t.weightDecay) + " must be finite");
  }
  if (!lr.shape.empty())
    return fail(name, "lr must be a 0-d tensor, not shape " + shapeString(lr.shape));
  double rate = 0;
  if (lr.dtype == DType::f32)
    rate = static_cast<double>(*lr.as<const float>());
  else if (lr.dtype == DType::f64)
    rate = *lr.as<const double>();
  else
    return fail(name, std::string("lr must be f32 or f64, not ") + dtypeName(lr.dtype));
  RETURN_IF_ERROR(checkAdamWStep(step, config));
  int64_t t = loadIndex(step, 0);
  if (t < 1)
    return fail(name, "step " + std::to_string(t) + " must be >= 1 (steps count from 1)");
  const double b1 = config.beta1, b2 = config.beta2;
  const double bias1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bias2 = 1.0 - std::pow(b2, static_cast<double>(t));
  // The clip coefficient per dtype, ClipByNorm's: computed in the gradient's dtype (as torch),
  // min(max_norm / (norm + 1e-6), 1), NaN staying NaN.
  float clip32 = 1.0f;
  double clip64 = 1.0;
  if (norm) {
    for (size_t k = 0; k < tensors.size(); ++k)
      RETURN_IF_ERROR(checkClipByNorm(tensors[k].g, *norm, maxNorm, tensors[k].g))
          << " (AdamWMulti's clip, tensor " << k << ")";
    if (norm->dtype == DType::f32)
      clip32 = std::min(static_cast<float>(maxNorm) /
                            (*norm->as<const float>() + static_cast<float>(1e-6)),
                        1.0f);
    else
      clip64 = std::min(maxNorm / (*norm->as<const double>() + 1e-6), 1.0);
  }
  // Tensor k owns elements [first[k], first[k + 1]) of one index space over all of them.
  std::vector<int64_t> first(tensors.size() + 1, 0);
  for (size_t k = 0; k < tensors.size(); ++k)
    first[k + 1] = first[k] + tensors[k].p.numElements();
  // Elements are independent: contiguous ranges of the joint index space run on the kernel
  // threads, each range cut at tensor boundaries (AdamW's grain: small tensors share a chunk).
  parallelFor(first.back(), 1 << 13, [&](int64_t begin, int64_t end) {
    size_t k = std::upper_bound(first.begin(), first.end(), begin) - first.begin() - 1;
    for (; k < tensors.size() && first[k] < end; ++k) {
      const AdamWTensor &x = tensors[k];
      int64_t lo = std::max(begin, first[k]) - first[k];
      int64_t hi = std::min(end, first[k + 1]) - first[k];
      if (lo >= hi)
        continue;
      const AdamWStep s{rate, b1, b2, config.eps, x.weightDecay, bias1, bias2};
      if (x.p.dtype == DType::f32)
        adamwElements(arraysOf<float>(x), lo, hi, s, clip32);
      else
        adamwElements(arraysOf<double>(x), lo, hi, s, clip64);
    }
  });
  return Status::ok();
}

} // namespace megac::runtime::cpu
