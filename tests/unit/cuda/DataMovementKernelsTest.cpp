// The CUDA data-movement kernels (runtime/cuda/kernels/DataMovement.cu) against the CPU
// reference kernels, byte for byte: copy, transpose, slice, concat, broadcast, gather,
// embedding (+ shard), embeddingGrad (+ shard), pad; device error codes; determinism.
#include "tests/unit/cuda/ElementwiseTestUtil.h"

#include <algorithm>
#include <numeric>

namespace megac::runtime::cuda::test {
namespace {

using DataMovementKernels = CudaKernelTest;

const DType kAllDtypes[] = {DType::f64, DType::f32, DType::bf16, DType::f16,
                            DType::i64, DType::i32, DType::i1};

/// Random bytes of any dtype (values are only moved, never computed on).
void fillAny(Tensor &t, uint32_t seed) {
  if (t.dtype() == DType::i1)
    fillUniform(t, 0, 1, seed);
  else
    fillUniform(t, -1000, 1000, seed);
}

void setIndex(Tensor &t, int64_t i, int64_t v) {
  if (t.dtype() == DType::i64)
    reinterpret_cast<int64_t *>(t.host.data())[i] = v;
  else
    reinterpret_cast<int32_t *>(t.host.data())[i] = static_cast<int32_t>(v);
}

TEST_F(DataMovementKernels, CopyReshapes) {
  for (DType dtype : kAllDtypes) {
    Tensor x(dtype, {3, 7, 5}), out(dtype, {105}), ref(dtype, {105});
    fillAny(x, 1);
    x.upload();
    out.poison();
    ASSERT_OK(copy(ctx, x.devRef(), out.devRef()));
    ASSERT_OK(cpu::copy(x.hostRef(), ref.hostRef()));
    sync();
    expectExact(dtype, out.download(), ref.host, std::string("Copy ") + dtypeName(dtype));
  }
}

TEST_F(DataMovementKernels, TransposeEveryRank) {
  struct Case {
    std::vector<int64_t> shape, perm;
  };
  const Case cases[] = {{{}, {}},
                        {{7}, {0}},
                        {{33, 65}, {1, 0}},
                        {{2, 3, 4}, {2, 0, 1}},
                        {{2, 3, 4}, {0, 2, 1}},
                        {{3, 1, 5, 2}, {3, 1, 0, 2}},
                        {{2, 3, 1, 4, 3}, {4, 2, 0, 3, 1}},
                        {{1000, 1003}, {1, 0}},
                        {{3, 70, 45}, {0, 2, 1}},      // the tiled path: partial tiles
                        {{2, 2, 1, 33}, {0, 1, 3, 2}}, // a single row
                        {{2, 3, 5, 1}, {0, 1, 3, 2}}}; // a single column
  for (DType dtype : kAllDtypes)
    for (const Case &c : cases) {
      std::vector<int64_t> outShape(c.shape.size());
      for (size_t i = 0; i < c.perm.size(); ++i)
        outShape[i] = c.shape[c.perm[i]];
      Tensor x(dtype, c.shape), out(dtype, outShape), ref(dtype, outShape);
      fillAny(x, 2);
      x.upload();
      out.poison();
      ASSERT_OK(transpose(ctx, x.devRef(), c.perm, out.devRef()));
      ASSERT_OK(cpu::transpose(x.hostRef(), c.perm, ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host,
                  std::string("Transpose ") + dtypeName(dtype) + " " + shapeName(c.shape));
    }
}

TEST_F(DataMovementKernels, SliceWithNegativeStrides) {
  struct Case {
    std::vector<int64_t> shape, starts, strides, outShape;
  };
  const Case cases[] = {{{}, {}, {}, {}},
                        {{10}, {9}, {-1}, {10}},
                        {{10}, {1}, {3}, {3}},
                        {{6, 9}, {5, 2}, {-2, 3}, {3, 3}},
                        {{4, 5, 6}, {0, 4, 1}, {1, -1, 2}, {4, 5, 3}},
                        {{3, 4, 5, 2}, {2, 1, 4, 1}, {-1, 1, -2, -1}, {3, 2, 3, 2}},
                        {{2, 3, 4, 5, 3}, {1, 0, 3, 0, 2}, {-1, 2, -1, 4, -1}, {2, 2, 4, 2, 3}},
                        {{5, 4}, {0, 0}, {1, 1}, {0, 4}}};
  for (DType dtype : kAllDtypes)
    for (const Case &c : cases) {
      Tensor x(dtype, c.shape), out(dtype, c.outShape), ref(dtype, c.outShape);
      fillAny(x, 3);
      x.upload();
      out.poison();
      ASSERT_OK(slice(ctx, x.devRef(), c.starts, c.strides, out.devRef()));
      ASSERT_OK(cpu::slice(x.hostRef(), c.starts, c.strides, ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host,
                  std::string("Slice ") + dtypeName(dtype) + " " + shapeName(c.shape));
    }
}

TEST_F(DataMovementKernels, ConcatEveryAxis) {
  for (DType dtype : kAllDtypes)
    for (int64_t axis = 0; axis < 3; ++axis) {
      std::vector<int64_t> base = {3, 4, 5};
      std::vector<int64_t> sizes = {2, 0, 5, 1};
      std::vector<std::unique_ptr<Tensor>> inputs;
      std::vector<TensorRef> dev, host;
      int64_t total = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<int64_t> shape = base;
        shape[axis] = sizes[k];
        total += sizes[k];
        inputs.push_back(std::make_unique<Tensor>(dtype, shape));
        fillAny(*inputs.back(), 10 + static_cast<uint32_t>(k));
        inputs.back()->upload();
        dev.push_back(inputs.back()->devRef());
        host.push_back(inputs.back()->hostRef());
      }
      std::vector<int64_t> outShape = base;
      outShape[axis] = total;
      Tensor out(dtype, outShape), ref(dtype, outShape);
      out.poison();
      ASSERT_OK(concat(ctx, dev, axis, out.devRef()));
      ASSERT_OK(cpu::concat(host, axis, ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host,
                  std::string("Concat ") + dtypeName(dtype) + " axis " + std::to_string(axis));
    }
}

TEST_F(DataMovementKernels, BroadcastEveryRank) {
  struct Case {
    std::vector<int64_t> from, to;
  };
  const Case cases[] = {{{}, {}},
                        {{}, {7}},
                        {{1}, {5, 3}},
                        {{3}, {4, 3}},
                        {{4, 1}, {4, 6}},
                        {{2, 1, 3}, {5, 2, 4, 3}},
                        {{1, 3, 1, 2}, {2, 2, 3, 5, 2}},
                        {{1000}, {1003, 1000}}};
  for (DType dtype : kAllDtypes)
    for (const Case &c : cases) {
      Tensor x(dtype, c.from), out(dtype, c.to), ref(dtype, c.to);
      fillAny(x, 4);
      x.upload();
      out.poison();
      ASSERT_OK(broadcast(ctx, x.devRef(), out.devRef()));
      ASSERT_OK(cpu::broadcast(x.hostRef(), ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host,
                  std::string("Broadcast ") + dtypeName(dtype) + " " + shapeName(c.to));
    }
}

TEST_F(DataMovementKernels, GatherAndIndexErrors) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::i1})
    for (DType indexDtype : {DType::i64, DType::i32})
      for (int64_t axis = 0; axis < 3; ++axis) {
        std::vector<int64_t> dataShape = {4, 5, 6};
        std::vector<int64_t> indexShape = {2, 3};
        int64_t dim = dataShape[axis];
        Tensor data(dtype, dataShape), idx(indexDtype, indexShape);
        fillAny(data, 5);
        for (int64_t j = 0; j < idx.size(); ++j) // negative ones count from the end
          setIndex(idx, j, (j * 7) % (2 * dim) - dim);
        std::vector<int64_t> outShape(dataShape.begin(), dataShape.begin() + axis);
        outShape.insert(outShape.end(), indexShape.begin(), indexShape.end());
        outShape.insert(outShape.end(), dataShape.begin() + axis + 1, dataShape.end());
        Tensor out(dtype, outShape), ref(dtype, outShape);
        data.upload();
        idx.upload();
        out.poison();
        ASSERT_OK(gather(ctx, data.devRef(), idx.devRef(), axis, out.devRef()));
        ASSERT_OK(cpu::gather(data.hostRef(), idx.hostRef(), axis, ref.hostRef()));
        EXPECT_EQ(takeError(), 0);
        expectExact(dtype, out.download(), ref.host,
                    std::string("Gather ") + dtypeName(dtype) + " axis " + std::to_string(axis));
      }
  // An index outside [-n, n): the flag, a zero slice there, the rest gathered.
  Tensor data(DType::f32, {3, 4}), idx(DType::i64, {3}), out(DType::f32, {3, 4});
  fillUniform(data, 1.0, 2.0, 6);
  setIndex(idx, 0, 2);
  setIndex(idx, 1, 3); // out of range
  setIndex(idx, 2, -3);
  data.upload();
  idx.upload();
  out.poison();
  ASSERT_OK(gather(ctx, data.devRef(), idx.devRef(), 0, out.devRef()));
  EXPECT_EQ(takeError(), static_cast<int>(DeviceError::indexOutOfRange));
  std::vector<uint8_t> got = out.download();
  const float *g = reinterpret_cast<const float *>(got.data());
  const float *d = reinterpret_cast<const float *>(data.host.data());
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(g[e], d[2 * 4 + e]);
    EXPECT_EQ(g[4 + e], 0.0f);
    EXPECT_EQ(g[8 + e], d[0 * 4 + e]);
  }
}

TEST_F(DataMovementKernels, EmbeddingAndShardAndIdErrors) {
  const int64_t vocab = 50, hidden = 37;
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
    for (DType idDtype : {DType::i64, DType::i32}) {
      Tensor table(dtype, {vocab, hidden}), ids(idDtype, {3, 41});
      fillUniform(table, -1.0, 1.0, 7);
      fillUniform(ids, 0, vocab - 1, 8);
      table.upload();
      ids.upload();
      Tensor out(dtype, {3, 41, hidden}), ref(dtype, {3, 41, hidden});
      out.poison();
      ASSERT_OK(embedding(ctx, table.devRef(), ids.devRef(), out.devRef()));
      ASSERT_OK(cpu::embedding(table.hostRef(), ids.hostRef(), ref.hostRef()));
      EXPECT_EQ(takeError(), 0);
      expectExact(dtype, out.download(), ref.host, std::string("Embedding ") + dtypeName(dtype));

      // The shard [20, 35) of the table: rows of ids inside it, zeros elsewhere, no error.
      const int64_t start = 20, local = 15;
      Tensor shard(dtype, {local, hidden});
      size_t row = static_cast<size_t>(hidden) * dtypeSize(dtype);
      std::memcpy(shard.host.data(), table.host.data() + start * row, local * row);
      shard.upload();
      Tensor shardOut(dtype, {3, 41, hidden});
      std::vector<uint8_t> shardRef(ref.host.size(), 0);
      for (int64_t j = 0; j < ids.size(); ++j) {
        int64_t id = static_cast<int64_t>(valueAt(idDtype, ids.host.data(), j));
        if (id >= start && id < start + local)
          std::memcpy(shardRef.data() + j * row, ref.host.data() + j * row, row);
      }
      shardOut.poison();
      ASSERT_OK(embeddingShard(ctx, shard.devRef(), ids.devRef(), start, shardOut.devRef()));
      EXPECT_EQ(takeError(), 0);
      expectExact(dtype, shardOut.download(), shardRef,
                  std::string("EmbeddingShard ") + dtypeName(dtype));
    }
  // An id outside [0, V): the flag and a zero row; the other rows are looked up.
  Tensor table(DType::f32, {4, 3}), ids(DType::i32, {3}), out(DType::f32, {3, 3});
  fillUniform(table, 1.0, 2.0, 9);
  setIndex(ids, 0, 1);
  setIndex(ids, 1, -1);
  setIndex(ids, 2, 3);
  table.upload();
  ids.upload();
  out.poison();
  ASSERT_OK(embedding(ctx, table.devRef(), ids.devRef(), out.devRef()));
  EXPECT_EQ(takeError(), static_cast<int>(DeviceError::idOutOfRange));
  std::vector<uint8_t> got = out.download();
  const float *g = reinterpret_cast<const float *>(got.data());
  const float *t = reinterpret_cast<const float *>(table.host.data());
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(g[e], t[1 * 3 + e]);
    EXPECT_EQ(g[3 + e], 0.0f);
    EXPECT_EQ(g[6 + e], t[3 * 3 + e]);
  }
}

/// embeddingGrad against the CPU (which sums in position order, as the kernel does: bitwise
/// equal for f32/f64, and for the half types, where both sum in f32 and round once).
TEST_F(DataMovementKernels, EmbeddingGradMatchesCpuAndIsDeterministic) {
  struct Case {
    int64_t vocab, hidden;
    std::vector<int64_t> idShape;
  };
  const Case cases[] = {
      {50, 37, {3, 1000}}, {1, 5, {7}}, {7, 1, {1}}, {1000, 300, {100003}}, {3, 4, {0}}};
  for (DType dtype : {DType::f64, DType::f32, DType::bf16, DType::f16})
    for (DType idDtype : {DType::i64, DType::i32})
      for (const Case &c : cases) {
        if (c.vocab == 1000 && (idDtype == DType::i32 || dtype == DType::f64))
          continue; // the big case once per float width is enough
        std::vector<int64_t> dyShape = c.idShape;
        dyShape.push_back(c.hidden);
        Tensor dy(dtype, dyShape), ids(idDtype, c.idShape);
        Tensor dtable(dtype, {c.vocab, c.hidden}), ref(dtype, {c.vocab, c.hidden});
        fillUniform(dy, -1.0, 1.0, 13);
        // Skewed ids: many repeats of a few (a hot row), the rest spread.
        std::mt19937 rng(14);
        for (int64_t j = 0; j < ids.size(); ++j)
          setIndex(ids, j,
                   j % 3 == 0 ? 0 : static_cast<int64_t>(rng() % static_cast<uint32_t>(c.vocab)));
        dy.upload();
        ids.upload();
        dtable.poison();
        ASSERT_OK(embeddingGrad(ctx, dy.devRef(), ids.devRef(), dtable.devRef()));
        ASSERT_OK(
            cpuReference({dy.hostRef(), ids.hostRef()}, {ref.hostRef()}, [&](auto in, auto outs) {
              return cpu::embeddingGrad(in[0], in[1], outs[0]);
            }));
        EXPECT_EQ(takeError(), 0);
        std::vector<uint8_t> first = dtable.download();
        std::string what = std::string("EmbeddingGrad ") + dtypeName(dtype) + " V " +
                           std::to_string(c.vocab) + " ids " + shapeName(c.idShape);
        expectExact(dtype, first, ref.host, what);
        // Run again into poisoned memory: identical bytes.
        dtable.poison(0x11);
        ASSERT_OK(embeddingGrad(ctx, dy.devRef(), ids.devRef(), dtable.devRef()));
        sync();
        EXPECT_EQ(dtable.download(), first) << what << ": not deterministic";
      }
}

TEST_F(DataMovementKernels, EmbeddingGradIdErrorAndShardGrad) {
  const int64_t vocab = 40, hidden = 9;
  Tensor dy(DType::f32, {500, hidden}), ids(DType::i64, {500});
  fillUniform(dy, -1.0, 1.0, 15);
  fillUniform(ids, 0, vocab - 1, 16);
  dy.upload();
  // The full-vocab reference: the shard's rows are its rows [start, start + local).
  Tensor full(DType::f32, {vocab, hidden});
  ids.upload();
  ASSERT_OK(cpu::embeddingGrad(dy.hostRef(), ids.hostRef(), full.hostRef()));
  const int64_t start = 12, local = 17;
  Tensor shard(DType::f32, {local, hidden});
  shard.poison();
  ASSERT_OK(embeddingShardGrad(ctx, dy.devRef(), ids.devRef(), start, shard.devRef()));
  EXPECT_EQ(takeError(), 0); // ids outside the shard are skipped, not errors
  std::vector<uint8_t> shardRef(full.host.begin() + start * hidden * 4,
                                full.host.begin() + (start + local) * hidden * 4);
  expectExact(DType::f32, shard.download(), shardRef, "EmbeddingShardGrad");

  // Out-of-range ids: the flag; their rows contribute nothing, the others sum as usual.
  setIndex(ids, 3, vocab);
  setIndex(ids, 10, -2);
  ids.upload();
  Tensor dtable(DType::f32, {vocab, hidden});
  dtable.poison();
  ASSERT_OK(embeddingGrad(ctx, dy.devRef(), ids.devRef(), dtable.devRef()));
  EXPECT_EQ(takeError(), static_cast<int>(DeviceError::idOutOfRange));
  setIndex(ids, 3, 0); // the reference: the same ids with those two rows' dy zeroed
  setIndex(ids, 10, 0);
  for (int64_t e = 0; e < hidden; ++e) {
    reinterpret_cast<float *>(dy.host.data())[3 * hidden + e] = 0.0f;
    reinterpret_cast<float *>(dy.host.data())[10 * hidden + e] = 0.0f;
  }
  Tensor ref(DType::f32, {vocab, hidden});
  ASSERT_OK(cpu::embeddingGrad(dy.hostRef(), ids.hostRef(), ref.hostRef()));
  // Adding +0.0 at positions 3 and 10 of row 0 leaves the sums' values unchanged.
  expectClose(DType::f32, dtable.download(), ref.host, {0, 0}, "EmbeddingGrad bad ids");
}

TEST_F(DataMovementKernels, PadEveryRank) {
  struct Case {
    std::vector<int64_t> shape, low, high, interior;
  };
  const Case cases[] = {{{}, {}, {}, {}},
                        {{5}, {2}, {3}, {0}},
                        {{5}, {0}, {0}, {2}},
                        {{3, 4}, {1, 0}, {0, 2}, {1, 3}},
                        {{2, 3, 2}, {1, 1, 0}, {2, 0, 1}, {0, 1, 2}},
                        {{2, 1, 3, 2}, {0, 2, 1, 0}, {1, 0, 0, 1}, {1, 0, 0, 1}},
                        {{2, 0, 3}, {1, 1, 1}, {0, 1, 0}, {1, 1, 1}}};
  for (DType dtype : kAllDtypes)
    for (const Case &c : cases) {
      std::vector<int64_t> outShape(c.shape.size());
      for (size_t d = 0; d < c.shape.size(); ++d) {
        int64_t n = c.shape[d];
        outShape[d] = c.low[d] + c.high[d] + n + (n > 0 ? (n - 1) * c.interior[d] : 0);
      }
      Tensor x(dtype, c.shape), out(dtype, outShape), ref(dtype, outShape);
      fillAny(x, 17);
      x.upload();
      out.poison();
      ASSERT_OK(pad(ctx, x.devRef(), c.low, c.high, c.interior, out.devRef()));
      ASSERT_OK(cpu::pad(x.hostRef(), c.low, c.high, c.interior, ref.hostRef()));
      sync();
      expectExact(dtype, out.download(), ref.host,
                  std::string("Pad ") + dtypeName(dtype) + " " + shapeName(c.shape));
    }
}

TEST_F(DataMovementKernels, ShapeErrorsMatchCpuWithoutLaunching) {
  std::vector<int64_t> s23 = {2, 3}, s32 = {3, 2}, s3 = {3}, s4 = {4}, s33 = {3, 3};
  TensorRef f23{DType::f32, s23, nullptr}, f32x{DType::f32, s32, nullptr};
  TensorRef f3{DType::f32, s3, nullptr}, f4{DType::f32, s4, nullptr};
  TensorRef d23{DType::f64, s23, nullptr}, i3{DType::i64, s3, nullptr};
  TensorRef f33{DType::f32, s33, nullptr}, fi3{DType::f32, s3, nullptr};
  auto same = [](const Status &gpu, const Status &cpu, const char *op) {
    EXPECT_FALSE(gpu.isOk()) << op;
    EXPECT_FALSE(cpu.isOk()) << op;
    EXPECT_EQ(gpu.message(), cpu.message());
    EXPECT_EQ(gpu.message().rfind(op, 0), 0u) << gpu.message();
  };
  same(copy(ctx, f23, f4), cpu::copy(f23, f4), "Copy");
  same(copy(ctx, f23, d23), cpu::copy(f23, d23), "Copy");
  std::vector<int64_t> perm = {0, 1}, badPerm = {0, 0}, perm3 = {0, 1, 2};
  same(transpose(ctx, f23, perm, f32x), cpu::transpose(f23, perm, f32x), "Transpose");
  same(transpose(ctx, f23, badPerm, f23), cpu::transpose(f23, badPerm, f23), "Transpose");
  same(transpose(ctx, f23, perm3, f23), cpu::transpose(f23, perm3, f23), "Transpose");
  std::vector<int64_t> st = {0, 0}, str = {1, 0}, strBig = {1, 2};
  same(slice(ctx, f23, st, str, f23), cpu::slice(f23, st, str, f23), "Slice");
  same(slice(ctx, f23, st, strBig, f23), cpu::slice(f23, st, strBig, f23), "Slice");
  std::vector<TensorRef> ins = {f23, f33};
  same(concat(ctx, ins, 0, f23), cpu::concat(ins, 0, f23), "Concat");
  same(concat(ctx, {}, 0, f23), cpu::concat({}, 0, f23), "Concat");
  same(broadcast(ctx, f4, f23), cpu::broadcast(f4, f23), "Broadcast");
  same(broadcast(ctx, f23, f3), cpu::broadcast(f23, f3), "Broadcast");
  same(gather(ctx, f23, fi3, 0, f33), cpu::gather(f23, fi3, 0, f33), "Gather");
  same(gather(ctx, f23, i3, 2, f33), cpu::gather(f23, i3, 2, f33), "Gather");
  same(gather(ctx, f23, i3, 0, f23), cpu::gather(f23, i3, 0, f23), "Gather");
  same(embedding(ctx, f3, i3, f33), cpu::embedding(f3, i3, f33), "Embedding");
  same(embedding(ctx, f23, i3, f23), cpu::embedding(f23, i3, f23), "Embedding");
  same(embeddingGrad(ctx, f23, i3, f23), cpu::embeddingGrad(f23, i3, f23), "EmbeddingGrad");
  same(embeddingGrad(ctx, f33, fi3, f23), cpu::embeddingGrad(f33, fi3, f23), "EmbeddingGrad");
  std::vector<int64_t> lo = {0, 0}, hi = {1, 0}, in = {0, -1}, lo1 = {0};
  same(pad(ctx, f23, lo, hi, lo, f23), cpu::pad(f23, lo, hi, lo, f23), "Pad");
  same(pad(ctx, f23, lo, hi, in, f33), cpu::pad(f23, lo, hi, in, f33), "Pad");
  same(pad(ctx, f23, lo1, hi, lo, f33), cpu::pad(f23, lo1, hi, lo, f33), "Pad");
  size_t before = scratchCount();
  EXPECT_FALSE(embeddingShardGrad(ctx, f23, i3, 0, f23).isOk());
  EXPECT_EQ(scratchCount(), before); // checked before any scratch is taken
  sync();
  EXPECT_EQ(takeError(), 0);
}

} // namespace
} // namespace megac::runtime::cuda::test
