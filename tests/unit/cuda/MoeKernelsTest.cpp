// The CUDA mixture-of-experts kernels (runtime/cuda/kernels/Moe.cu) against the CPU reference
// kernels (runtime/cpu/Moe.cpp) on random inputs with fixed seeds, in f64, f32, bf16 and f16
// (half types against the CPU's f32 result on the same inputs, rounded once: computeInF32).
// Routing weights are sparse: each case has an expert with no active rows and a token routed to
// no expert, some inactive entries are -0, and tokens have one to three leading dims; row and
// feature counts cross the GEMM tiles (64 x 64 x 16) so partial tiles are exercised. Outputs are
// poisoned first, so an element the kernel does not write shows.
//
// Tolerances:
// - TopKMask, MoeDispatch: exact (a 0/1 mask; one product per element).
// - MoeCombine: the same rounded products summed in the same (expert) order, so equal where the
//   CPU build does not contract them into FMAs (x86-64); allowed one rounding of the <= 5 terms
//   elsewhere: f64 1e-14, f32 1e-6, and one rounding of the output for half types (below).
// - MoeMatmul, MoeMatmulWeightGrad, MoeRowDot: sums over <= 300 terms of size <= 1 in different
//   orders (BLAS blocking vs one FMA chain or a warp tree): f32 2e-4 absolute + 1e-4 relative,
//   f64 1e-10; half types add the output's one rounding (2^-8 bf16, 2^-11 f16 relative): 2e-2
//   bf16, 5e-3 f16.
#include "ElementwiseTestUtil.h"

#include <algorithm>
#include <random>

namespace megac::runtime::cuda::test {
namespace {

using MoeKernels = CudaKernelTest;

Tolerance sumTolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-10, 1e-10};
  case DType::f32:
    return {2e-4, 1e-4};
  case DType::bf16:
    return {2e-2, 2e-2};
  default:
    return {5e-3, 5e-3};
  }
}

Tolerance combineTolerance(DType dtype) {
  switch (dtype) {
  case DType::f64:
    return {1e-14, 1e-14};
  case DType::f32:
    return {1e-6, 1e-6};
  default:
    return sumTolerance(dtype);
  }
}

std::vector<DType> moeDtypes() { return {DType::f64, DType::f32, DType::bf16, DType::f16}; }

/// One routing case: tokens (leading dims), experts, and the routed feature sizes.
struct Case {
  std::vector<int64_t> tokens;
  int64_t experts, in, out;
};

std::vector<Case> cases() {
  return {
      {{6}, 4, 5, 3},       // small, one tile
      {{2, 3, 5}, 3, 7, 9}, // three leading token dims
      {{70}, 5, 33, 65},    // 2 row tiles, 3 k tiles, 2 column tiles
      {{1, 130}, 2, 17, 3}, // one expert's ~65 rows: 2 row tiles, ~5 k tiles in the grad
      {{4, 1}, 3, 64, 64},  // exact tiles
      {{300}, 3, 20, 70},   // more tokens than one routing pass (256)
  };
}

std::vector<int64_t> concat(std::initializer_list<std::vector<int64_t>> parts) {
  std::vector<int64_t> out;
  for (const std::vector<int64_t> &p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::string describe(const char *op, DType dtype, const Case &c) {
  return std::string(op) + " " + dtypeName(dtype) + " tokens " + shapeString(c.tokens) + " E " +
         std::to_string(c.experts) + " in " + std::to_string(c.in) + " out " +
         std::to_string(c.out);
}

/// w [tokens..., E]: each (t, e) active with probability 1/2, its weight of magnitude in
/// [0.1, 0.6) and either sign; expert max(E-2, 0) never active; token 0 routed to nothing; some
/// inactive entries -0 (inactive too). Uploaded.
std::unique_ptr<Tensor> routing(DType dtype, const Case &c, uint32_t seed) {
  auto w = std::make_unique<Tensor>(dtype, concat({c.tokens, {c.experts}}));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int64_t tokens = elementsOf(c.tokens), idle = std::max<int64_t>(c.experts - 2, 0);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t e = 0; e < c.experts; ++e) {
      double r = u(rng), v = u(rng);
      double active = v < 0.5 ? -(0.1 + v) : v - 0.4; // +-[0.1, 0.6)
      double value = (r < 0.5 && e != idle && t != 0) ? active : r > 0.9 ? -0.0 : 0.0;
      setAt(dtype, w->host.data(), t * c.experts + e, value);
    }
  w->upload();
  return w;
}

std::unique_ptr<Tensor> random(DType dtype, std::vector<int64_t> shape, uint32_t seed) {
  auto t = std::make_unique<Tensor>(dtype, std::move(shape));
  fillUniform(*t, -1.0, 1.0, seed);
  t->upload();
  return t;
}

/// The CPU reference of one kernel, computed into a fresh host tensor shaped like `output`.
std::vector<uint8_t> reference(std::vector<Tensor *> inputs, Tensor &output,
                               const cpu::KernelCall &kernel, const std::string &what) {
  Tensor ref(output.dtype(), output.shape());
  std::vector<TensorRef> in;
  for (Tensor *t : inputs)
    in.push_back(t->hostRef());
  Status status = cpuReference(in, {ref.hostRef()}, kernel);
  EXPECT_TRUE(status.isOk()) << what << ": CPU reference: " << status.message();
  return ref.host;
}

TEST_F(MoeKernels, TopKMaskMatchesTheCpuWithTiesAndNaN) {
  struct MaskCase {
    std::vector<int64_t> shape;
    int64_t k;
  };
  std::vector<MaskCase> maskCases = {{{5, 8}, 2}, {{3, 4, 6}, 1}, {{3, 4, 6}, 6},
                                     {{7, 1}, 1}, {{2, 64}, 5},   {{9, 5}, 3}};
  for (DType dtype : moeDtypes())
    for (const MaskCase &m : maskCases) {
      Tensor x(dtype, m.shape), out(dtype, m.shape);
      std::mt19937_64 rng(11);
      int64_t n = m.shape.back();
      for (int64_t i = 0; i < x.size(); ++i) { // values in {-1, -0.5, ..., 1}: many ties
        int64_t level = static_cast<int64_t>(rng() % 5);
        double v = level * 0.5 - 1.0;
        if (i % 13 == 4)
          v = std::nan("");
        if (i % 11 == 3)
          v = (i % 2) ? -0.0 : 0.0; // -0 and +0 tie
        setAt(dtype, x.host.data(), i, v);
      }
      if (n >= 3) { // a whole row of one value: the k lowest indices win
        for (int64_t j = 0; j < n; ++j)
          setAt(dtype, x.host.data(), j, 0.5);
      }
      x.upload();
      out.poison();
      std::string what = std::string("TopKMask ") + dtypeName(dtype) + " " + shapeString(m.shape) +
                         " k " + std::to_string(m.k);
      ASSERT_OK(topkMask(ctx, x.devRef(), m.k, out.devRef()));
      std::vector<uint8_t> want = reference(
          {&x}, out,
          [&](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::topkMask(in[0], m.k, o[0]);
          },
          what);
      sync();
      expectExact(dtype, out.download(), want, what);
    }
}

TEST_F(MoeKernels, DispatchAndCombineMatchTheCpu) {
  for (DType dtype : moeDtypes())
    for (const Case &c : cases()) {
      auto w = routing(dtype, c, 3);
      auto x = random(dtype, concat({c.tokens, {c.in}}), 5);
      Tensor routed(dtype, concat({{c.experts}, c.tokens, {c.in}}));
      routed.poison();
      std::string what = describe("MoeDispatch", dtype, c);
      ASSERT_OK(moeDispatch(ctx, x->devRef(), w->devRef(), routed.devRef()));
      std::vector<uint8_t> want = reference(
          {x.get(), w.get()}, routed,
          [](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::moeDispatch(in[0], in[1], o[0]);
          },
          what);
      sync();
      expectExact(dtype, routed.download(), want, what);

      auto y = random(dtype, concat({{c.experts}, c.tokens, {c.in}}), 7);
      Tensor combined(dtype, concat({c.tokens, {c.in}}));
      combined.poison();
      what = describe("MoeCombine", dtype, c);
      ASSERT_OK(moeCombine(ctx, y->devRef(), w->devRef(), combined.devRef()));
      want = reference(
          {y.get(), w.get()}, combined,
          [](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::moeCombine(in[0], in[1], o[0]);
          },
          what);
      sync();
      expectClose(dtype, combined.download(), want, combineTolerance(dtype), what);
    }
}

TEST_F(MoeKernels, MatmulMatchesTheCpuWithBothWeightLayouts) {
  for (DType dtype : moeDtypes())
    for (const Case &c : cases())
      for (bool transposeWeight : {false, true}) {
        auto w = routing(dtype, c, 13);
        auto x = random(dtype, concat({{c.experts}, c.tokens, {c.in}}), 17);
        std::vector<int64_t> weightShape = transposeWeight
                                               ? std::vector<int64_t>{c.experts, c.in, c.out}
                                               : std::vector<int64_t>{c.experts, c.out, c.in};
        auto weight = random(dtype, weightShape, 19);
        Tensor out(dtype, concat({{c.experts}, c.tokens, {c.out}}));
        out.poison();
        std::string what = describe("MoeMatmul", dtype, c) + (transposeWeight ? " [E,in,out]" : "");
        ASSERT_OK(moeMatmul(ctx, x->devRef(), weight->devRef(), w->devRef(), transposeWeight,
                            out.devRef()));
        std::vector<uint8_t> want = reference(
            {x.get(), weight.get(), w.get()}, out,
            [&](std::span<const TensorRef> in, std::span<const TensorRef> o) {
              return cpu::moeMatmul(in[0], in[1], in[2], transposeWeight, o[0]);
            },
            what);
        sync();
        std::vector<uint8_t> got = out.download();
        expectClose(dtype, got, want, sumTolerance(dtype), what);
        // Run to run: the same bits.
        out.poison();
        ASSERT_OK(moeMatmul(ctx, x->devRef(), weight->devRef(), w->devRef(), transposeWeight,
                            out.devRef()));
        sync();
        expectExact(dtype, out.download(), got, what + " (second run)");
      }
}

TEST_F(MoeKernels, RowDotAndWeightGradMatchTheCpu) {
  for (DType dtype : moeDtypes())
    for (const Case &c : cases()) {
      auto w = routing(dtype, c, 23);
      auto y = random(dtype, concat({{c.experts}, c.tokens, {c.in}}), 29);
      auto z = random(dtype, concat({c.tokens, {c.in}}), 31);
      Tensor dots(dtype, concat({c.tokens, {c.experts}}));
      dots.poison();
      std::string what = describe("MoeRowDot", dtype, c);
      ASSERT_OK(moeRowDot(ctx, y->devRef(), z->devRef(), w->devRef(), dots.devRef()));
      std::vector<uint8_t> want = reference(
          {y.get(), z.get(), w.get()}, dots,
          [](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::moeRowDot(in[0], in[1], in[2], o[0]);
          },
          what);
      sync();
      expectClose(dtype, dots.download(), want, sumTolerance(dtype), what);

      auto b = random(dtype, concat({{c.experts}, c.tokens, {c.out}}), 37);
      Tensor grad(dtype, {c.experts, c.in, c.out});
      grad.poison();
      what = describe("MoeMatmulWeightGrad", dtype, c);
      ASSERT_OK(moeMatmulWeightGrad(ctx, y->devRef(), b->devRef(), w->devRef(), grad.devRef()));
      want = reference(
          {y.get(), b.get(), w.get()}, grad,
          [](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::moeMatmulWeightGrad(in[0], in[1], in[2], o[0]);
          },
          what);
      sync();
      std::vector<uint8_t> got = grad.download();
      expectClose(dtype, got, want, sumTolerance(dtype), what);
      grad.poison();
      ASSERT_OK(moeMatmulWeightGrad(ctx, y->devRef(), b->devRef(), w->devRef(), grad.devRef()));
      sync();
      expectExact(dtype, grad.download(), got, what + " (second run)");

      // Accumulating (beta = 1) into a separate output and in place over the accumulator: the
      // CPU's acc + sums (one more rounding of the same size: the tolerance above holds).
      auto acc = random(dtype, {c.experts, c.in, c.out}, 39);
      grad.poison();
      what = describe("MoeMatmulWeightGrad accumulate", dtype, c);
      TensorRef accRef = acc->devRef();
      ASSERT_OK(moeMatmulWeightGrad(ctx, y->devRef(), b->devRef(), w->devRef(), grad.devRef(),
                                    &accRef));
      want = reference(
          {y.get(), b.get(), w.get(), acc.get()}, grad,
          [](std::span<const TensorRef> in, std::span<const TensorRef> o) {
            return cpu::moeMatmulWeightGrad(in[0], in[1], in[2], o[0], &in[3]);
          },
          what);
      sync();
      got = grad.download();
      expectClose(dtype, got, want, sumTolerance(dtype), what);
      TensorRef inPlace = acc->devRef();
      ASSERT_OK(
          moeMatmulWeightGrad(ctx, y->devRef(), b->devRef(), w->devRef(), inPlace, &inPlace));
      sync();
      expectExact(dtype, acc->download(), got, what + " (in place)");
    }
}

TEST_F(MoeKernels, BadArgumentsGiveTheCpuMessages) {
  Case c{{4}, 3, 5, 6};
  auto w = routing(DType::f32, c, 41);
  auto x = random(DType::f32, {3, 4, 5}, 43);
  auto weight = random(DType::f32, {3, 5, 6}, 47); // [E, in, out]: wrong without the flag
  Tensor out(DType::f32, {3, 4, 6});
  Status onGpu = moeMatmul(ctx, x->devRef(), weight->devRef(), w->devRef(), false, out.devRef());
  Status onCpu =
      cpu::moeMatmul(x->hostRef(), weight->hostRef(), w->hostRef(), false, out.hostRef());
  ASSERT_FALSE(onGpu.isOk());
  EXPECT_EQ(onGpu.message(), onCpu.message());

  auto idsLike = random(DType::f64, {4, 5}, 53); // a dtype other than the routing weights'
  Tensor routed(DType::f32, {3, 4, 5});
  onGpu = moeDispatch(ctx, idsLike->devRef(), w->devRef(), routed.devRef());
  onCpu = cpu::moeDispatch(idsLike->hostRef(), w->hostRef(), routed.hostRef());
  ASSERT_FALSE(onGpu.isOk());
  EXPECT_EQ(onGpu.message(), onCpu.message());

  Tensor mask(DType::f32, {4, 3});
  onGpu = topkMask(ctx, w->devRef(), 4, mask.devRef());
  onCpu = cpu::topkMask(w->hostRef(), 4, mask.hostRef());
  ASSERT_FALSE(onGpu.isOk());
  EXPECT_EQ(onGpu.message(), onCpu.message());
}

} // namespace
} // namespace megac::runtime::cuda::test
