// The CUDA element-indexing kernels (runtime/cuda/kernels/Indexing.cu) against the CPU
// reference kernels: CumSum, GatherElements, ScatterElements and ScatterND on every dtype they
// take, exact for moves and integer sums, within float roundoff for float sums (both backends
// sum in index order, so equal for f32/f64); an index out of range raises the device flag.
#include "tests/unit/cuda/ElementwiseTestUtil.h"

namespace megac::runtime::cuda::test {
namespace {

using IndexingKernels = CudaKernelTest;

void setIndex(Tensor &t, int64_t i, int64_t v) {
  if (t.dtype() == DType::i64)
    reinterpret_cast<int64_t *>(t.host.data())[i] = v;
  else
    reinterpret_cast<int32_t *>(t.host.data())[i] = static_cast<int32_t>(v);
}

/// Integers stay small so sums are exact in every dtype compared.
void fillSmall(Tensor &t, uint32_t seed) { fillUniform(t, -8, 8, seed); }

TEST_F(IndexingKernels, CumSumMatchesTheCpu) {
  for (DType dtype : {DType::f64, DType::f32, DType::i64, DType::i32})
    for (int64_t axis = 0; axis < 3; ++axis)
      for (int mode = 0; mode < 4; ++mode) {
        bool exclusive = mode & 1, reverse = mode & 2;
        Tensor x(dtype, {3, 17, 5}), out(dtype, {3, 17, 5}), ref(dtype, {3, 17, 5});
        fillSmall(x, 3);
        x.upload();
        out.poison();
        ASSERT_OK(cumsum(ctx, x.devRef(), axis, exclusive, reverse, out.devRef()));
        ASSERT_OK(cpu::cumsum(x.hostRef(), axis, exclusive, reverse, ref.hostRef()));
        expectExact(dtype, out.download(), ref.host,
                    std::string("CumSum ") + dtypeName(dtype) + " axis " + std::to_string(axis));
      }
}

TEST_F(IndexingKernels, GatherAndScatterElementsMatchTheCpu) {
  for (DType dtype : {DType::f32, DType::i64, DType::f64})
    for (DType indexDtype : {DType::i64, DType::i32})
      for (int64_t axis = 0; axis < 3; ++axis)
        for (bool accumulate : {false, true}) {
          std::vector<int64_t> dataShape = {4, 5, 6}, indexShape = {3, 4, 5};
          int64_t dim = dataShape[axis];
          Tensor data(dtype, dataShape), idx(indexDtype, indexShape);
          fillSmall(data, 5);
          for (int64_t j = 0; j < idx.size(); ++j) // repeats, and negative ones from the end
            setIndex(idx, j, (j * 7) % (2 * dim) - dim);
          Tensor got(dtype, indexShape), want(dtype, indexShape);
          data.upload();
          idx.upload();
          got.poison();
          ASSERT_OK(gatherElements(ctx, data.devRef(), idx.devRef(), axis, got.devRef()));
          ASSERT_OK(cpu::gatherElements(data.hostRef(), idx.hostRef(), axis, want.hostRef()));
          EXPECT_EQ(takeError(), 0);
          std::string what = std::string(dtypeName(dtype)) + " axis " + std::to_string(axis);
          expectExact(dtype, got.download(), want.host, "GatherElements " + what);

          Tensor upd(dtype, indexShape), out(dtype, dataShape), ref(dtype, dataShape);
          fillSmall(upd, 9);
          upd.upload();
          out.poison();
          ASSERT_OK(scatterElements(ctx, data.devRef(), idx.devRef(), upd.devRef(), axis,
                                    accumulate, out.devRef()));
          ASSERT_OK(cpu::scatterElements(data.hostRef(), idx.hostRef(), upd.hostRef(), axis,
                                         accumulate, ref.hostRef()));
          EXPECT_EQ(takeError(), 0);
          expectExact(dtype, out.download(), ref.host,
                      "ScatterElements " + what + (accumulate ? " add" : ""));
        }
}

TEST_F(IndexingKernels, ScatterNdMatchesTheCpuAndFlagsBadIndices) {
  for (DType dtype : {DType::f32, DType::i32, DType::bf16})
    for (int64_t k = 1; k <= 3; ++k)
      for (bool accumulate : {false, true}) {
        if (dtype == DType::bf16 && accumulate)
          continue; // the CPU reference accumulates in f32 through the executor
        std::vector<int64_t> dataShape = {4, 3, 5};
        std::vector<int64_t> indexShape = {2, 3, k};
        std::vector<int64_t> updShape = {2, 3};
        updShape.insert(updShape.end(), dataShape.begin() + k, dataShape.end());
        Tensor data(dtype, dataShape), idx(DType::i64, indexShape), upd(dtype, updShape);
        fillSmall(data, 1);
        fillSmall(upd, 2);
        for (int64_t j = 0; j < idx.size(); ++j) {
          int64_t n = dataShape[j % k];
          setIndex(idx, j, (j * 5) % (2 * n) - n);
        }
        Tensor out(dtype, dataShape), ref(dtype, dataShape);
        data.upload();
        idx.upload();
        upd.upload();
        out.poison();
        ASSERT_OK(
            scatterNd(ctx, data.devRef(), idx.devRef(), upd.devRef(), accumulate, out.devRef()));
        ASSERT_OK(cpu::scatterNd(data.hostRef(), idx.hostRef(), upd.hostRef(), accumulate,
                                 ref.hostRef()));
        EXPECT_EQ(takeError(), 0);
        expectExact(dtype, out.download(), ref.host,
                    std::string("ScatterND ") + dtypeName(dtype) + " k " + std::to_string(k));
      }
  Tensor data(DType::f32, {3, 2}), idx(DType::i64, {1, 1}), upd(DType::f32, {1, 2});
  Tensor out(DType::f32, {3, 2});
  fillSmall(data, 4);
  fillSmall(upd, 5);
  setIndex(idx, 0, 3);
  data.upload();
  idx.upload();
  upd.upload();
  ASSERT_OK(scatterNd(ctx, data.devRef(), idx.devRef(), upd.devRef(), false, out.devRef()));
  EXPECT_EQ(takeError(), static_cast<int>(DeviceError::indexOutOfRange));
  expectExact(DType::f32, out.download(), data.host, "ScatterND skips a bad tuple");
}

} // namespace
} // namespace megac::runtime::cuda::test
