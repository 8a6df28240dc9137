// The NCCL communicator and the device collectives on one GPU: a one-rank world, where every
// collective is the identity (NCCL itself runs them), sends to itself matched by tag, groups this
// rank cannot reach without a host communicator, the shard slice of a two-rank mesh (no
// communication), and the vocab-parallel embedding and cross-entropy over a group of one against
// the CPU kernels.
#include "runtime/cpu/Kernels.h"
#include "support/Float16.h"
#include "tests/unit/cuda/NcclDeviceTest.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::cuda::test;

namespace {

std::vector<uint8_t> bytesOf(const std::vector<float> &v) {
  std::vector<uint8_t> out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

using NcclComm = NcclDeviceTest;

} // namespace

TEST_F(NcclComm, OneRankCollectivesAreTheIdentity) {
  comm::Mesh mesh; // no axes: one rank
  auto nccl = make(mesh, 0);
  ASSERT_TRUE(nccl);
  const size_t n = 1000;
  std::vector<float> x = randomFloats(n, 1);
  DeviceBuffer in(n * 4), out(n * 4);
  upload(in.data, x.data(), n * 4);
  std::vector<uint32_t> none;
  for (comm::ReduceKind kind : {comm::ReduceKind::sum, comm::ReduceKind::max}) {
    CUDA_OK(cudaMemset(out.data, 0, n * 4));
    ASSERT_TRUE(nccl->allReduce(none, in.data, out.data, n, DType::f32, kind).isOk());
    EXPECT_EQ(download<float>(out.data, n), x) << "out of place, kind " << int(kind);
  }
  ASSERT_TRUE(nccl->allReduce(none, in.data, in.data, n, DType::f32, comm::ReduceKind::sum).isOk());
  EXPECT_EQ(download<float>(in.data, n), x) << "in place";
  CUDA_OK(cudaMemset(out.data, 0, n * 4));
  ASSERT_TRUE(nccl->allGather(none, in.data, out.data, n * 4).isOk());
  EXPECT_EQ(download<float>(out.data, n), x);
  CUDA_OK(cudaMemset(out.data, 0, n * 4));
  ASSERT_TRUE(
      nccl->reduceScatter(none, in.data, out.data, n, DType::f32, comm::ReduceKind::sum).isOk());
  EXPECT_EQ(download<float>(out.data, n), x);
  CUDA_OK(cudaMemset(out.data, 0, n * 4));
  ASSERT_TRUE(nccl->allToAll(none, in.data, out.data, n * 4).isOk());
  EXPECT_EQ(download<float>(out.data, n), x);
}

TEST_F(NcclComm, Bf16AllReduceOverAOneRankAxisKeepsTheBits) {
  comm::Mesh mesh{{"dp"}, {1}};
  auto nccl = make(mesh, 0);
  ASSERT_TRUE(nccl);
  const size_t n = 257;
  std::vector<uint16_t> x(n);
  std::vector<float> values = randomFloats(n, 2);
  for (size_t i = 0; i < n; ++i)
    x[i] = floatToBf16(values[i]);
  DeviceBuffer in(n * 2), out(n * 2);
  upload(in.data, x.data(), n * 2);
  std::vector<uint32_t> dp{0};
  ASSERT_TRUE(nccl->allReduce(dp, in.data, out.data, n, DType::bf16, comm::ReduceKind::sum).isOk());
  EXPECT_EQ(download<uint16_t>(out.data, n), x);
  ASSERT_TRUE(nccl->allReduce(dp, in.data, out.data, n, DType::f16, comm::ReduceKind::max).isOk());
  EXPECT_EQ(download<uint16_t>(out.data, n), x) << "f16 max of one rank";
}

TEST_F(NcclComm, SendsToItselfAreMatchedByTag) {
  // NCCL's own self send needs the receive in the same group; the communicator keeps a send to
  // this rank until its recv instead (like the CPU's self communicator), in any tag order.
  comm::Mesh mesh{{"pp"}, {1}};
  auto nccl = make(mesh, 0);
  ASSERT_TRUE(nccl);
  std::vector<float> a = randomFloats(64, 3), b = randomFloats(64, 4);
  DeviceBuffer da(256), db(256), out(256);
  upload(da.data, a.data(), 256);
  upload(db.data, b.data(), 256);
  ASSERT_TRUE(nccl->send(0, 1, da.data, 256).isOk());
  ASSERT_TRUE(nccl->send(0, 2, db.data, 256).isOk());
  CUDA_OK(cudaMemsetAsync(da.data, 0, 256, stream_)); // the send copied it
  ASSERT_TRUE(nccl->recv(0, 2, out.data, 256).isOk());
  EXPECT_EQ(download<float>(out.data, 64), b);
  ASSERT_TRUE(nccl->recv(0, 1, out.data, 256).isOk());
  EXPECT_EQ(download<float>(out.data, 64), a);
  Status missing = nccl->recv(0, 1, out.data, 256);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.message().find("with no matching send"), std::string::npos)
      << missing.message();
  ASSERT_TRUE(nccl->send(0, 3, db.data, 256).isOk());
  Status size = nccl->recv(0, 3, out.data, 128);
  ASSERT_FALSE(size.isOk());
  EXPECT_NE(size.message().find("expects 128 bytes"), std::string::npos) << size.message();
}

TEST_F(NcclComm, GroupsOfOtherRanksNeedAHostCommunicator) {
  comm::Mesh mesh{{"tp"}, {2}};
  auto nccl = make(mesh, 1);
  ASSERT_TRUE(nccl);
  DeviceBuffer buf(16);
  std::vector<uint32_t> tp{0};
  Status s = nccl->allReduce(tp, buf.data, buf.data, 4, DType::f32, comm::ReduceKind::sum);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("has 2 ranks, but this executor has no communicator"),
            std::string::npos)
      << s.message();
  Status p2p = nccl->send(0, 0, buf.data, 16);
  ASSERT_FALSE(p2p.isOk());
  EXPECT_NE(p2p.message().find("cannot reach rank 0"), std::string::npos) << p2p.message();
}

TEST_F(NcclComm, ShardSliceTakesThisRanksBlockAlongAnyDim) {
  // Rank 1 of tp=2: block 1 along dim 1 of x [3, 4, 2] is x[:, 2:4, :] (no communication).
  comm::Mesh mesh{{"tp"}, {2}};
  auto nccl = make(mesh, 1);
  ASSERT_TRUE(nccl);
  std::vector<int64_t> xs{3, 4, 2}, os{3, 2, 2};
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = float(i);
  DeviceBuffer dx(96), dout(48);
  upload(dx.data, x.data(), 96);
  std::vector<uint32_t> tp{0};
  Status s = devcomm::shardSlice(*nccl, ctx_, tp, 1, {DType::f32, xs, dx.data},
                                 {DType::f32, os, dout.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<float> want;
  for (int a = 0; a < 3; ++a)
    for (int b = 2; b < 4; ++b)
      for (int c = 0; c < 2; ++c)
        want.push_back(x[(a * 4 + b) * 2 + c]);
  EXPECT_EQ(download<float>(dout.data, 12), want);
  // Dim 0 and a bf16 (2-byte) element: rows 2..3 of [4, 3].
  std::vector<int64_t> ys{4, 3}, ps{2, 3};
  std::vector<uint16_t> y(12);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] = uint16_t(i + 100);
  DeviceBuffer dy(24), dp(12);
  upload(dy.data, y.data(), 24);
  s = devcomm::shardSlice(*nccl, ctx_, tp, 0, {DType::bf16, ys, dy.data},
                          {DType::bf16, ps, dp.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(download<uint16_t>(dp.data, 6), (std::vector<uint16_t>{106, 107, 108, 109, 110, 111}));
  Status bad = devcomm::shardSlice(*nccl, ctx_, tp, 1, {DType::f32, xs, dx.data},
                                   {DType::f32, xs, dout.data});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.message().find("ShardSlice: the input [3, 4, 2] is not the output"),
            std::string::npos)
      << bad.message();
}

TEST_F(NcclComm, DimCollectivesOfOneRankMatchTheInput) {
  comm::Mesh mesh{{"dp", "tp"}, {1, 1}};
  auto nccl = make(mesh, 0);
  ASSERT_TRUE(nccl);
  std::vector<int64_t> shape{2, 3, 4};
  std::vector<float> x = randomFloats(24, 5);
  DeviceBuffer dx(96), dout(96);
  upload(dx.data, x.data(), 96);
  std::vector<uint32_t> both{0, 1};
  TensorRef in{DType::f32, shape, dx.data}, out{DType::f32, shape, dout.data};
  for (int64_t dim = 0; dim < 3; ++dim) {
    CUDA_OK(cudaMemset(dout.data, 0, 96));
    ASSERT_TRUE(devcomm::allGather(*nccl, ctx_, both, dim, in, out).isOk());
    EXPECT_EQ(download<float>(dout.data, 24), x) << "allGather dim " << dim;
    CUDA_OK(cudaMemset(dout.data, 0, 96));
    ASSERT_TRUE(
        devcomm::reduceScatter(*nccl, ctx_, both, comm::ReduceKind::sum, dim, in, out).isOk());
    EXPECT_EQ(download<float>(dout.data, 24), x) << "reduceScatter dim " << dim;
    CUDA_OK(cudaMemset(dout.data, 0, 96));
    ASSERT_TRUE(devcomm::allToAll(*nccl, ctx_, both, dim, 2 - dim, in, out).isOk());
    EXPECT_EQ(download<float>(dout.data, 24), x) << "allToAll dim " << dim;
  }
  CUDA_OK(cudaMemset(dout.data, 0, 96));
  ASSERT_TRUE(devcomm::allReduce(*nccl, ctx_, both, comm::ReduceKind::max, in, out).isOk());
  EXPECT_EQ(download<float>(dout.data, 24), x);
}

TEST_F(NcclComm, VocabParallelOpsOfOneRankMatchTheCpuKernels) {
  comm::Mesh mesh{{"tp"}, {1}};
  auto nccl = make(mesh, 0);
  ASSERT_TRUE(nccl);
  std::vector<uint32_t> tp{0};
  const int64_t rows = 6, vocab = 10, hidden = 4;
  std::vector<int64_t> rowShape{rows}, logitShape{rows, vocab}, tableShape{vocab, hidden},
      embShape{rows, hidden};
  std::vector<float> logits = randomFloats(rows * vocab, 6),
                     table = randomFloats(vocab * hidden, 7);
  std::vector<int64_t> labels{0, 9, 3, -100, 5, 5};
  DeviceBuffer dLogits(logits.size() * 4), dLabels(rows * 8), dLoss(rows * 4), dDloss(rows * 4),
      dGrad(logits.size() * 4), dTable(table.size() * 4), dEmb(rows * hidden * 4);
  upload(dLogits.data, logits.data(), logits.size() * 4);
  upload(dLabels.data, labels.data(), rows * 8);
  upload(dTable.data, table.data(), table.size() * 4);
  std::vector<float> dloss(rows, 0.5f);
  upload(dDloss.data, dloss.data(), rows * 4);
  TensorRef logitsRef{DType::f32, logitShape, dLogits.data},
      labelsRef{DType::i64, rowShape, dLabels.data};
  std::optional<int64_t> ignore = -100;

  std::vector<float> wantLoss(rows), wantGrad(logits.size());
  std::vector<uint8_t> hl = bytesOf(logits);
  TensorRef hLogits{DType::f32, logitShape, hl.data()},
      hLabels{DType::i64, rowShape, labels.data()};
  ASSERT_TRUE(
      cpu::crossEntropy(hLogits, hLabels, ignore, {DType::f32, rowShape, wantLoss.data()}).isOk());
  ASSERT_TRUE(cpu::crossEntropyGrad({DType::f32, rowShape, dloss.data()}, hLogits, hLabels, ignore,
                                    {DType::f32, logitShape, wantGrad.data()})
                  .isOk());
  Status s = devcomm::vocabCrossEntropy(*nccl, ctx_, tp, logitsRef, labelsRef, ignore,
                                        {DType::f32, rowShape, dLoss.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<float> gotLoss = download<float>(dLoss.data, rows);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_NEAR(gotLoss[r], wantLoss[r], 1e-5 + 1e-5 * std::fabs(wantLoss[r])) << "row " << r;
  s = devcomm::vocabCrossEntropyGrad(*nccl, ctx_, tp, {DType::f32, rowShape, dDloss.data},
                                     logitsRef, labelsRef, ignore,
                                     {DType::f32, logitShape, dGrad.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<float> gotGrad = download<float>(dGrad.data, logits.size());
  for (size_t i = 0; i < gotGrad.size(); ++i)
    EXPECT_NEAR(gotGrad[i], wantGrad[i], 1e-6 + 1e-5 * std::fabs(wantGrad[i])) << "element " << i;
  EXPECT_EQ(errorFlag(), 0);

  std::vector<int64_t> ids{3, 0, 9, 3, 1, 2};
  upload(dLabels.data, ids.data(), rows * 8);
  s = devcomm::vocabEmbedding(*nccl, ctx_, tp, {DType::f32, tableShape, dTable.data},
                              {DType::i64, rowShape, dLabels.data},
                              {DType::f32, embShape, dEmb.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  std::vector<float> emb = download<float>(dEmb.data, rows * hidden);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < hidden; ++h)
      EXPECT_EQ(emb[r * hidden + h], table[ids[r] * hidden + h]);
  EXPECT_EQ(errorFlag(), 0);
  // An id outside [0, V) raises the flag (the CPU returns an error; the device cannot).
  ids[4] = vocab;
  upload(dLabels.data, ids.data(), rows * 8);
  s = devcomm::vocabEmbedding(*nccl, ctx_, tp, {DType::f32, tableShape, dTable.data},
                              {DType::i64, rowShape, dLabels.data},
                              {DType::f32, embShape, dEmb.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(errorFlag(), int(DeviceError::idOutOfRange));
  CUDA_OK(cudaMemset(errors_, 0, sizeof(int)));
  // A label outside [0, V) that is not the ignore index too.
  labels[1] = vocab;
  upload(dLabels.data, labels.data(), rows * 8);
  s = devcomm::vocabCrossEntropy(*nccl, ctx_, tp, logitsRef, labelsRef, ignore,
                                 {DType::f32, rowShape, dLoss.data});
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(errorFlag(), int(DeviceError::labelOutOfRange));
}
