// MoeRoutes (runtime/cuda/MoeRoutes.h) against the CPU backend's MoeAllToAll
// (runtime/exec/CommOps.cpp) on the host: for random routing masks, both directions, f32 and
// bf16 masks (a -0 entry routes nothing), the rows the CPU packs for each member are the rows
// MoeRoutes sends, in the same order; the rows it fills from each member's block are the rows
// MoeRoutes receives into, in the same order; the byte counts agree; the shape errors are the
// CPU's, word for word. The CUDA backend packs and unpacks by these routes, so the same rows
// travel in the same order on both backends. No GPU needed.
#include "runtime/cuda/MoeRoutes.h"
#include "runtime/exec/CommOps.h"
#include "support/Float16.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace megac;
using namespace megac::runtime;
using megac::runtime::cpu::refOf;
using megac::runtime::cpu::TensorRef;

namespace {

/// A member of a group of `size` ranks whose all-to-all-v records what it is given to send and
/// delivers rows of known values: received row i (over all members, in order) is all 1000 + i.
class CaptureComm final : public comm::Communicator {
public:
  CaptureComm(int64_t size, int rank) : rank_(rank) {
    mesh_.axisSizes = {size};
    mesh_.axisNames = {"ep"};
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(mesh_.size()); }
  const comm::Mesh &mesh() const override { return mesh_; }
  Status allToAllV(std::span<const uint32_t>, const void *in, std::span<const size_t> sendBytes,
                   void *out, std::span<const size_t> recvBytes) override {
    size_t total = 0;
    for (size_t b : sendBytes)
      total += b;
    sent.assign(static_cast<const uint8_t *>(in), static_cast<const uint8_t *>(in) + total);
    this->sendBytes.assign(sendBytes.begin(), sendBytes.end());
    this->recvBytes.assign(recvBytes.begin(), recvBytes.end());
    size_t rows = 0;
    for (size_t b : recvBytes)
      rows += b / rowBytes;
    auto *o = static_cast<float *>(out);
    for (size_t i = 0; i < rows * (rowBytes / sizeof(float)); ++i)
      o[i] = 1000.0f + float(i / (rowBytes / sizeof(float)));
    return Status::ok();
  }
  Status allReduce(std::span<const uint32_t>, void *, size_t, DType, comm::ReduceKind) override {
    return unused();
  }
  Status allGather(std::span<const uint32_t>, const void *, void *, size_t) override {
    return unused();
  }
  Status reduceScatter(std::span<const uint32_t>, const void *, void *, size_t, DType,
                       comm::ReduceKind) override {
    return unused();
  }
  Status allToAll(std::span<const uint32_t>, const void *, void *, size_t) override {
    return unused();
  }
  Status send(int, int, const void *, size_t) override { return unused(); }
  Status recv(int, int, void *, size_t) override { return unused(); }
  Status flushSends() override { return unused(); }
  Status barrier() override { return unused(); }

  size_t rowBytes = 0;
  std::vector<uint8_t> sent;
  std::vector<size_t> sendBytes, recvBytes;

private:
  static Status unused() { return Status::error("CaptureComm: not used by MoeAllToAll"); }
  comm::Mesh mesh_;
  int rank_;
};

/// A routing mask of `n` entries, about half routed; unrouted entries of a bf16 mask are -0 one
/// time in three (which routes nothing, as +0).
HostTensor mask(DType dtype, std::vector<int64_t> shape, std::mt19937 &rng) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  t.bytes.resize(size_t(n) * dtypeSize(dtype));
  for (int64_t i = 0; i < n; ++i) {
    bool on = rng() % 2 == 0;
    float v = on ? 0.25f + float(rng() % 4) : (rng() % 3 == 0 ? -0.0f : 0.0f);
    if (dtype == DType::f32)
      std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    else {
      uint16_t h = floatToBf16(v);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

HostTensor floats(std::vector<int64_t> shape, float base) {
  HostTensor t;
  t.dtype = DType::f32;
  t.shape = shape;
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  t.bytes.resize(size_t(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = base + float(i);
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

struct Case {
  int64_t members, experts, tokens, h;
  int rank;
  int64_t dim;
  DType maskType;
};

void checkAgainstCpu(const Case &k, uint32_t seed) {
  std::mt19937 rng(seed);
  int64_t El = k.experts / k.members;
  std::vector<int64_t> every = {k.experts, k.tokens, k.h}, local = {El, k.members * k.tokens, k.h};
  bool toExperts = k.dim == 0;
  HostTensor x = floats(toExperts ? every : local, 1.0f);
  HostTensor out = floats(toExperts ? local : every, -7.0f); // overwritten: zeros and rows
  HostTensor tokenMask = mask(k.maskType, {k.tokens, k.experts}, rng);
  HostTensor expertMask = mask(k.maskType, {k.members * k.tokens, El}, rng);
  CaptureComm comm(k.members, k.rank);
  comm.rowBytes = size_t(k.h) * sizeof(float);
  std::vector<uint32_t> axes = {0};
  Status cpu = commops::moeAllToAll(comm, axes, k.dim, refOf(x), refOf(tokenMask),
                                    refOf(expertMask), refOf(out));
  ASSERT_TRUE(cpu.isOk()) << cpu.message();

  StatusOr<cuda::MoeShape> shape =
      cuda::moeShape(k.dim, k.members, refOf(x), refOf(tokenMask), refOf(expertMask), refOf(out));
  ASSERT_TRUE(shape.isOk()) << shape.status().message();
  EXPECT_EQ(shape->rowBytes, comm.rowBytes);
  cuda::MoeRoutes routes = cuda::moeRoutes(*shape, refOf(tokenMask), refOf(expertMask));

  // Sent: the rows of x in the routes' order, member by member.
  std::vector<uint8_t> packed;
  for (int64_t j = 0; j < k.members; ++j) {
    EXPECT_EQ(comm.sendBytes[size_t(j)], routes.sendCounts()[size_t(j)] * comm.rowBytes);
    EXPECT_EQ(comm.recvBytes[size_t(j)], routes.recvCounts()[size_t(j)] * comm.rowBytes);
    for (int64_t row : routes.sendRows[size_t(j)])
      packed.insert(packed.end(), x.bytes.begin() + row * comm.rowBytes,
                    x.bytes.begin() + (row + 1) * comm.rowBytes);
  }
  EXPECT_EQ(packed, comm.sent);
  // Received: row i of the blocks lands on the routes' i-th receive row; the rest are 0.
  const auto *o = reinterpret_cast<const float *>(out.bytes.data());
  std::vector<float> want(out.bytes.size() / sizeof(float), 0.0f);
  size_t i = 0;
  for (const std::vector<int64_t> &rows : routes.recvRows)
    for (int64_t row : rows) {
      for (int64_t e = 0; e < k.h; ++e)
        want[size_t(row * k.h + e)] = 1000.0f + float(i);
      ++i;
    }
  EXPECT_EQ(std::vector<float>(o, o + want.size()), want);
  EXPECT_GT(i, 0u); // the random masks route something
}

TEST(MoeRoutes, SameRowsInTheSameOrderAsTheCpuBackend) {
  uint32_t seed = 1;
  for (DType maskType : {DType::f32, DType::bf16})
    for (int64_t dim : {0, 1})
      for (Case k : {Case{2, 4, 5, 3, 0, 0, maskType}, Case{2, 4, 5, 3, 1, 0, maskType},
                     Case{3, 6, 4, 2, 2, 0, maskType}, Case{1, 3, 6, 4, 0, 0, maskType}}) {
        k.dim = dim;
        SCOPED_TRACE("members " + std::to_string(k.members) + ", rank " + std::to_string(k.rank) +
                     ", dim " + std::to_string(dim) + ", " + dtypeName(maskType) + " masks");
        checkAgainstCpu(k, seed++);
      }
}

// The shape errors are the CPU backend's, word for word.
TEST(MoeRoutes, ShapeErrorsAreTheCpuBackends) {
  std::mt19937 rng(7);
  HostTensor x = floats({4, 5, 3}, 0.0f), badOut = floats({2, 9, 3}, 0.0f);
  HostTensor tokenMask = mask(DType::f32, {5, 4}, rng), expertMask = mask(DType::f32, {10, 2}, rng);
  HostTensor intMask;
  intMask.dtype = DType::i32;
  intMask.shape = {5, 4};
  intMask.bytes.resize(80);
  CaptureComm comm(2, 0);
  std::vector<uint32_t> axes = {0};
  struct Bad {
    const HostTensor &out, &tokens;
    int64_t dim;
  };
  for (const Bad &b :
       {Bad{badOut, tokenMask, 0}, Bad{badOut, intMask, 0}, Bad{badOut, tokenMask, 2}}) {
    HostTensor out = b.out;
    Status cpu = commops::moeAllToAll(comm, axes, b.dim, refOf(x), refOf(b.tokens),
                                      refOf(expertMask), refOf(out));
    StatusOr<cuda::MoeShape> routes =
        cuda::moeShape(b.dim, 2, refOf(x), refOf(b.tokens), refOf(expertMask), refOf(out));
    ASSERT_FALSE(cpu.isOk());
    ASSERT_FALSE(routes.isOk());
    EXPECT_EQ(routes.status().message(), cpu.message());
  }
}

} // namespace
