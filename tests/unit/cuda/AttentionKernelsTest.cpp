// The CUDA attention kernels (fused flash path and the masked / f64 / wide-head fallback),
// forward and backward, against the CPU reference on random inputs with fixed seeds.
//
// Tolerances: f32 computes scores, probabilities and sums in f32 on both sides in different
// orders (online softmax here, BLAS there) over up to 300 keys: 1e-4 absolute and relative on
// O(1) values. f64 runs the fallback in double: 1e-10. bf16/f16 inputs are exact in f32 and the
// kernels compute in f32, so the difference is one rounding of the output plus f32 noise: 2e-2
// for bf16, 5e-3 for f16.
#include "NnTestUtil.h"

#include <cmath>

namespace megac::runtime::cuda::test {
namespace {

Tolerance attentionTolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-10, 1e-10};
  case DType::f32:
    return {1e-4, 1e-4};
  case DType::bf16:
    return {2e-2, 2e-2};
  default:
    return {5e-3, 5e-3};
  }
}

struct Case {
  int64_t b, s, t, h, hk, d, dv;
  bool causal;
  std::string label() const {
    return "b" + std::to_string(b) + " s" + std::to_string(s) + " t" + std::to_string(t) + " h" +
           std::to_string(h) + " hk" + std::to_string(hk) + " d" + std::to_string(d) + " dv" +
           std::to_string(dv) + (causal ? " causal" : "");
  }
};

/// Shapes that cover the fused path's head-dim buckets (32, 64, 80 -> 128 padded, 128), s != t
/// both ways (with s > t some causal rows see no key), GQA (8 heads, 2 kv heads), rows and keys
/// beyond one tile, single-query decoding, and the fallback for a head dim above 128.
const std::vector<Case> &cases() {
  static const std::vector<Case> kCases = {
      {2, 17, 17, 4, 4, 32, 32, false}, {1, 33, 50, 8, 2, 64, 64, true},
      {2, 50, 33, 8, 2, 64, 64, true},  {1, 300, 300, 2, 1, 128, 128, true},
      {1, 65, 65, 2, 2, 80, 80, false}, {1, 1, 40, 4, 2, 64, 64, true},
      {1, 20, 30, 4, 2, 48, 40, false}, {1, 19, 23, 2, 1, 160, 96, true},
  };
  return kCases;
}

class Attention : public NnKernelTest {
protected:
  /// Runs attention and attentionGrad on one case (optionally with a mask) and compares with
  /// the CPU; the gradients are run twice and must agree bit for bit.
  void check(DType dtype, const Case &c, Tensor *mask, uint32_t seed) {
    double scale = 1.0 / std::sqrt(double(c.d));
    auto q = random(dtype, {c.b, c.s, c.h, c.d}, seed);
    auto k = random(dtype, {c.b, c.t, c.hk, c.d}, seed + 1);
    auto v = random(dtype, {c.b, c.t, c.hk, c.dv}, seed + 2);
    auto out = output(dtype, {c.b, c.s, c.h, c.dv});
    std::string what = std::string("Attention ") + dtypeName(dtype) + " " + c.label() +
                       (mask ? " mask " + shapeString(mask->shape()) : "");
    TensorRef maskRef = mask ? mask->devRef() : TensorRef{};
    ASSERT_OK(attention(ctx, q->devRef(), k->devRef(), v->devRef(), mask ? &maskRef : nullptr,
                        c.causal, scale, out->devRef()));
    sync();
    std::vector<Tensor *> inputs{q.get(), k.get(), v.get()};
    if (mask)
      inputs.push_back(mask);
    bool causal = c.causal, hasMask = mask != nullptr;
    expectMatchesCpu(
        inputs, {out.get()},
        [=](auto in, auto outs) {
          return cpu::attention(in[0], in[1], in[2], hasMask ? &in[3] : nullptr, causal, scale,
                                outs[0]);
        },
        attentionTolerance(dtype), what);
    if (mask && mask->dtype() == DType::i1)
      return; // a boolean mask has no gradient

    auto dout = random(dtype, {c.b, c.s, c.h, c.dv}, seed + 3);
    std::unique_ptr<Tensor> grads[2][4];
    for (int run = 0; run < 2; ++run) {
      grads[run][0] = output(dtype, q->shape());
      grads[run][1] = output(dtype, k->shape());
      grads[run][2] = output(dtype, v->shape());
      grads[run][3] = output(dtype, mask ? mask->shape() : std::vector<int64_t>{1});
      TensorRef dmask = grads[run][3]->devRef();
      ASSERT_OK(attentionGrad(ctx, dout->devRef(), q->devRef(), k->devRef(), v->devRef(),
                              mask ? &maskRef : nullptr, c.causal, scale, grads[run][0]->devRef(),
                              grads[run][1]->devRef(), grads[run][2]->devRef(),
                              mask ? &dmask : nullptr));
      sync();
    }
    std::vector<Tensor *> gradInputs{dout.get(), q.get(), k.get(), v.get()};
    std::vector<Tensor *> gradOutputs{grads[0][0].get(), grads[0][1].get(), grads[0][2].get()};
    if (mask) {
      gradInputs.push_back(mask);
      gradOutputs.push_back(grads[0][3].get());
    }
    // dk, dv sum over s queries and the GQA group: scale the absolute bound with that count.
    Tolerance tol = attentionTolerance(dtype);
    if (dtype == DType::f32)
      tol.atol *= 1.0 + double(c.s * (c.h / c.hk)) / 64.0;
    expectMatchesCpu(
        gradInputs, gradOutputs,
        [=](auto in, auto outs) {
          return cpu::attentionGrad(in[0], in[1], in[2], in[3], hasMask ? &in[4] : nullptr, causal,
                                    scale, outs[0], outs[1], outs[2], hasMask ? &outs[3] : nullptr);
        },
        tol, what + " grad");
    for (int g = 0; g < (mask ? 4 : 3); ++g)
      expectExact(dtype, grads[1][g]->download(), grads[0][g]->download(),
                  what + " grad " + std::to_string(g) + " run twice");
  }
};

TEST_F(Attention, FusedAndWideHeadsMatchCpu) {
  uint32_t seed = 1000;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16})
    for (const Case &c : cases()) {
      check(dtype, c, nullptr, seed);
      seed += 10;
    }
}

TEST_F(Attention, F64UsesTheFallbackAndMatchesCpu) {
  uint32_t seed = 2000;
  for (const Case &c : {Case{1, 19, 23, 4, 2, 16, 16, true}, Case{2, 5, 7, 2, 2, 8, 12, false},
                        Case{1, 30, 20, 2, 1, 32, 32, true}}) {
    check(DType::f64, c, nullptr, seed);
    seed += 10;
  }
}

TEST_F(Attention, AdditiveMasksMatchCpuIncludingTheirGradient) {
  uint32_t seed = 3000;
  const Case c{2, 21, 27, 4, 2, 32, 32, false};
  const std::vector<std::vector<int64_t>> maskShapes = {
      {1, 1, 21, 27}, {2, 4, 21, 27}, {27}, {2, 1, 1, 27}, {4, 21, 1}};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (const auto &shape : maskShapes)
      for (bool causal : {false, true}) {
        Tensor mask(dtype, shape);
        fillUniform(mask, -3, 1, seed++);
        mask.upload();
        Case cc = c;
        cc.causal = causal;
        check(dtype, cc, &mask, seed);
        seed += 10;
      }
}

TEST_F(Attention, BooleanMaskKeepsWhereTrue) {
  uint32_t seed = 4000;
  const Case c{2, 13, 19, 4, 2, 64, 64, true};
  for (DType dtype : {DType::f32, DType::bf16})
    for (const std::vector<int64_t> &shape :
         {std::vector<int64_t>{2, 1, 1, 19}, std::vector<int64_t>{13, 19}}) {
      Tensor mask(DType::i1, shape);
      fillUniform(mask, 0, 1, seed++);
      // Some rows fully masked: every key of query 0 hidden in the [s, t] mask.
      if (shape.size() == 2)
        for (int64_t j = 0; j < 19; ++j)
          mask.host[j] = 0;
      mask.upload();
      check(dtype, c, &mask, seed);
      seed += 10;
    }
}

TEST_F(Attention, ErrorsNameTheOp) {
  Tensor q(DType::f32, {1, 4, 6, 8}), k(DType::f32, {1, 4, 4, 8}), v(DType::f32, {1, 4, 4, 8});
  Tensor out(DType::f32, {1, 4, 6, 8});
  Status s = attention(ctx, q.devRef(), k.devRef(), v.devRef(), nullptr, false, 0.5, out.devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "Attention: 4 kv heads do not divide 6 query heads");
  Tensor q2(DType::f32, {1, 4, 4, 8}), out2(DType::f32, {1, 4, 4, 8});
  Tensor mask(DType::i64, {4, 4});
  TensorRef m = mask.devRef();
  s = attention(ctx, q2.devRef(), k.devRef(), v.devRef(), &m, false, 0.5, out2.devRef());
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message().rfind("Attention: mask is i64", 0), 0u) << s.message();
}

} // namespace
} // namespace megac::runtime::cuda::test
