// computeInF32: widens bf16/f16 operands to f32, runs an f32 kernel, rounds the results back.
#include "runtime/cpu/HalfCompute.h"

#include "support/Float16.h"

namespace megac::runtime::cpu {

namespace {

/// An f32 copy of a half ref (or the ref itself), owning its memory.
struct Widened {
  std::vector<float> values;
  TensorRef ref;
};

void widen(const TensorRef &t, std::vector<float> &out) {
  int64_t n = t.numElements();
  out.resize(static_cast<size_t>(n));
  const uint16_t *bits = t.as<const uint16_t>();
  if (t.dtype == DType::bf16)
    for (int64_t i = 0; i < n; ++i)
      out[i] = bf16ToFloat(bits[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      out[i] = halfToFloat(bits[i]);
}

void narrow(const std::vector<float> &values, const TensorRef &t) {
  uint16_t *bits = t.as<uint16_t>();
  int64_t n = t.numElements();
  if (t.dtype == DType::bf16)
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToBf16(values[i]);
  else
    for (int64_t i = 0; i < n; ++i)
      bits[i] = floatToHalf(values[i]);
}

} // namespace

Status computeInF32(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs,
                    const KernelCall &kernel) {
  std::vector<std::vector<float>> inValues(inputs.size()), outValues(outputs.size());
  std::vector<TensorRef> in(inputs.begin(), inputs.end()), out(outputs.begin(), outputs.end());
  for (size_t i = 0; i < in.size(); ++i)
    if (isHalf(in[i])) {
      widen(in[i], inValues[i]);
      in[i] = {DType::f32, in[i].shape, inValues[i].data()};
    }
  for (size_t i = 0; i < out.size(); ++i)
    if (isHalf(out[i])) {
      outValues[i].assign(static_cast<size_t>(out[i].numElements()), 0.0f);
      out[i] = {DType::f32, out[i].shape, outValues[i].data()};
    }
  RETURN_IF_ERROR(kernel(in, out));
  for (size_t i = 0; i < out.size(); ++i)
    if (isHalf(outputs[i]))
      narrow(outValues[i], outputs[i]);
  return Status::ok();
}

} // namespace megac::runtime::cpu
