// computeInF32: widens bf16/f16 operands to f32, runs an f32 kernel, rounds the results back.
#include "runtime/cpu/HalfCompute.h"

#include "runtime/cpu/Parallel.h"
#include "support/Float16.h"

#include <algorithm>
#include <memory>

namespace megac::runtime::cpu {

namespace {

// Conversions are elementwise: split over the kernel threads (detail::parallelFor), the bits do
// not depend on the split. Measured on gpt:layers=2,hidden=512 in bf16 (1 rank, 2 threads, the
// 2-core AMD EPYC VM): 243 ms a step with serial conversions into fresh buffers, 220 ms split
// over the threads, 163-169 ms with the buffers pooled (fresh multi-MB buffers fault every page
// in on every instruction); the losses are the same bits.
constexpr int64_t kConvertGrain = 1 << 14;

/// f32 scratch for one operand: written before it is read (never value-initialised), taken from
/// and given back to a per-thread pool, so that a training step's repeated conversions reuse
/// memory the process already touched instead of faulting in fresh pages on every instruction.
struct Floats {
  std::unique_ptr<float[]> data;
  size_t capacity = 0;
  float *get() const { return data.get(); }
};

/// Per executor thread (computeInF32 is not re-entered by its kernels' worker threads). Keeps at
/// most kPoolBytes of buffers; larger ones are freed.
class FloatPool {
public:
  static constexpr size_t kPoolBytes = size_t(256) << 20;
  Floats take(size_t n) {
    auto best = pool_.end();
    for (auto it = pool_.begin(); it != pool_.end(); ++it)
      if (it->capacity >= n && (best == pool_.end() || it->capacity < best->capacity))
        best = it;
    if (best == pool_.end())
      return {std::make_unique_for_overwrite<float[]>(n), n};
    Floats out = std::move(*best);
    pool_.erase(best);
    bytes_ -= out.capacity * sizeof(float);
    return out;
  }
  void give(Floats f) {
    if (!f.data || bytes_ + f.capacity * sizeof(float) > kPoolBytes)
      return;
    bytes_ += f.capacity * sizeof(float);
    pool_.push_back(std::move(f));
  }

private:
  std::vector<Floats> pool_;
  size_t bytes_ = 0;
};

FloatPool &pool() {
  thread_local FloatPool p;
  return p;
}

void widen(const TensorRef &t, Floats &out) {
  int64_t n = t.numElements();
  out = pool().take(static_cast<size_t>(n));
  const uint16_t *bits = t.as<const uint16_t>();
  float *values = out.get();
  bool bf16 = t.dtype == DType::bf16;
  detail::parallelFor(n, kConvertGrain, [&](int64_t begin, int64_t end) {
    if (bf16)
      for (int64_t i = begin; i < end; ++i)
        values[i] = bf16ToFloat(bits[i]);
    else
      for (int64_t i = begin; i < end; ++i)
        values[i] = halfToFloat(bits[i]);
  });
}

void narrow(const Floats &values, const TensorRef &t) {
  uint16_t *bits = t.as<uint16_t>();
  const float *from = values.get();
  bool bf16 = t.dtype == DType::bf16;
  detail::parallelFor(t.numElements(), kConvertGrain, [&](int64_t begin, int64_t end) {
    if (bf16)
      for (int64_t i = begin; i < end; ++i)
        bits[i] = floatToBf16(from[i]);
    else
      for (int64_t i = begin; i < end; ++i)
        bits[i] = floatToHalf(from[i]);
  });
}

/// A zeroed f32 buffer of n elements, zeroed over the kernel threads.
void zeroed(int64_t n, Floats &out) {
  out = pool().take(static_cast<size_t>(n));
  float *values = out.get();
  detail::parallelFor(n, kConvertGrain, [&](int64_t begin, int64_t end) {
    std::fill(values + begin, values + end, 0.0f);
  });
}

} // namespace

Status computeInF32(std::span<const TensorRef> inputs, std::span<const TensorRef> outputs,
                    const KernelCall &kernel) {
  std::vector<Floats> inValues(inputs.size()), outValues(outputs.size());
  std::vector<TensorRef> in(inputs.begin(), inputs.end()), out(outputs.begin(), outputs.end());
  for (size_t i = 0; i < in.size(); ++i)
    if (isHalf(in[i])) {
      widen(in[i], inValues[i]);
      in[i] = {DType::f32, in[i].shape, inValues[i].get()};
    }
  for (size_t i = 0; i < out.size(); ++i)
    if (isHalf(out[i])) {
      zeroed(out[i].numElements(), outValues[i]);
      out[i] = {DType::f32, out[i].shape, outValues[i].get()};
    }
  RETURN_IF_ERROR(kernel(in, out));
  for (size_t i = 0; i < out.size(); ++i)
    if (isHalf(outputs[i]))
      narrow(outValues[i], outputs[i]);
  for (Floats &f : inValues)
    pool().give(std::move(f));
  for (Floats &f : outValues)
    pool().give(std::move(f));
  return Status::ok();
}

} // namespace megac::runtime::cpu
