// Expert parallelism's token exchange (runtime/exec/MoeRoutes.h, the routes both backends copy
// rows by, and the CPU backend's commops::moeAllToAll) against its definition: every member of a
// group runs the exchange with a consistent routing (each rank's token mask and the group's
// expert mask are two views of one routing), the all-to-all-v delivering what the other members
// sent; each output row is its routed source row or 0, both directions, f32 and bf16 masks (a -0
// entry routes nothing). Shape errors name the op and the numbers. No GPU needed.
#include "runtime/exec/MoeRoutes.h"
#include "runtime/exec/CommOps.h"
#include "support/Float16.h"
#include "tests/unit/runtime/StubCommunicator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

using namespace megac;
using namespace megac::runtime;
using megac::runtime::cpu::refOf;

namespace {

/// What each member sent in the first pass: its packed rows and bytes per member.
struct Sends {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<size_t>> perMember;
};

/// One member of a group run one rank after another, twice: the first pass records what the
/// member sends (and delivers zeros), the second delivers what the others sent in the first,
/// after checking that each agrees with it on the byte counts.
class TwoPassComm final : public test::StubCommunicator {
public:
  TwoPassComm(comm::Mesh mesh, int rank, Sends &sends, bool deliver)
      : StubCommunicator(std::move(mesh), rank, "TwoPassComm"), sends_(sends), deliver_(deliver) {}
  Status allToAllV(std::span<const uint32_t>, const void *in, std::span<const size_t> sendBytes,
                   void *out, std::span<const size_t> recvBytes) override {
    size_t total = 0, at = 0;
    for (size_t b : sendBytes)
      total += b;
    const auto *src = static_cast<const uint8_t *>(in);
    sends_.bytes[size_t(rank())].assign(src, src + total);
    sends_.perMember[size_t(rank())].assign(sendBytes.begin(), sendBytes.end());
    auto *dst = static_cast<uint8_t *>(out);
    for (size_t j = 0; j < recvBytes.size(); ++j) {
      if (deliver_) {
        const std::vector<size_t> &theirs = sends_.perMember[j];
        size_t offset = 0;
        for (size_t i = 0; i < size_t(rank()); ++i)
          offset += theirs[i];
        if (theirs[size_t(rank())] != recvBytes[j])
          return Status::error("rank " + std::to_string(rank()) + " expects " +
                               std::to_string(recvBytes[j]) + " bytes from member " +
                               std::to_string(j) + ", which sends " +
                               std::to_string(theirs[size_t(rank())]));
        std::memcpy(dst + at, sends_.bytes[j].data() + offset, recvBytes[j]);
      } else {
        std::memset(dst + at, 0, recvBytes[j]);
      }
      at += recvBytes[j];
    }
    return Status::ok();
  }

private:
  Sends &sends_;
  bool deliver_;
};

comm::Mesh groupMesh(int64_t members) {
  comm::Mesh mesh;
  mesh.axisSizes = {members};
  mesh.axisNames = {"ep"};
  return mesh;
}

/// A routing mask, about half routed; unrouted entries are -0 one time in three (which routes
/// nothing, as +0). Entry values are in [0.25, 3.25], exact in bf16.
std::vector<float> routing(int64_t n, std::mt19937 &rng) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float &e : v)
    e = rng() % 2 == 0 ? 0.25f + float(rng() % 4) : (rng() % 3 == 0 ? -0.0f : 0.0f);
  return v;
}

HostTensor maskTensor(DType dtype, std::vector<int64_t> shape, const std::vector<float> &v) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(v.size() * dtypeSize(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::f32) {
      std::memcpy(t.bytes.data() + 4 * i, &v[i], 4);
    } else {
      uint16_t h = floatToBf16(v[i]);
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  return t;
}

HostTensor floats(std::vector<int64_t> shape, float base) {
  HostTensor t;
  t.dtype = DType::f32;
  t.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : t.shape)
    n *= d;
  t.bytes.resize(size_t(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = base + float(i);
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

const float *data(const HostTensor &t) { return reinterpret_cast<const float *>(t.bytes.data()); }

struct Case {
  int64_t members, experts, tokens, h;
};

/// Runs the exchange in direction `dim` on every member and checks each output row against its
/// definition.
void checkExchange(const Case &k, int64_t dim, DType maskType, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t G = k.members, E = k.experts, T = k.tokens, H = k.h, El = E / G;
  // routes[r][t * E + e]: rank r's token t goes to expert e.
  std::vector<std::vector<float>> routes;
  for (int64_t r = 0; r < G; ++r)
    routes.push_back(routing(T * E, rng));
  auto routed = [&](int64_t r, int64_t t, int64_t e) { return routes[size_t(r)][t * E + e] != 0; };
  std::vector<HostTensor> tokenMasks, expertMasks, xs, outs;
  for (int64_t r = 0; r < G; ++r) {
    tokenMasks.push_back(maskTensor(maskType, {T, E}, routes[size_t(r)]));
    std::vector<float> expert(size_t(G * T * El)); // [G*T, El]: the group's tokens to r's experts
    for (int64_t j = 0; j < G; ++j)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t el = 0; el < El; ++el)
          expert[size_t((j * T + t) * El + el)] = routes[size_t(j)][t * E + r * El + el];
    expertMasks.push_back(maskTensor(maskType, {G * T, El}, expert));
    std::vector<int64_t> every = {E, T, H}, local = {El, G * T, H};
    xs.push_back(floats(dim == 0 ? every : local, 1.0f + 10000.0f * float(r)));
    outs.push_back(floats(dim == 0 ? local : every, -7.0f)); // overwritten: rows and zeros
  }
  Sends sends{std::vector<std::vector<uint8_t>>(size_t(G)),
              std::vector<std::vector<size_t>>(size_t(G))};
  std::vector<uint32_t> axes = {0};
  for (bool deliver : {false, true})
    for (int64_t r = 0; r < G; ++r) {
      TwoPassComm comm(groupMesh(G), int(r), sends, deliver);
      Status s =
          commops::moeAllToAll(comm, axes, dim, refOf(xs[size_t(r)]), refOf(tokenMasks[size_t(r)]),
                               refOf(expertMasks[size_t(r)]), refOf(outs[size_t(r)]));
      ASSERT_TRUE(s.isOk()) << "rank " << r << ": " << s.message();
    }
  int64_t routedRows = 0;
  for (int64_t r = 0; r < G; ++r) {
    std::vector<float> want(outs[size_t(r)].bytes.size() / 4, 0.0f);
    if (dim == 0) { // out_r[el, j*T + t] = x_j[r*El + el, t] where routed
      for (int64_t j = 0; j < G; ++j)
        for (int64_t el = 0; el < El; ++el)
          for (int64_t t = 0; t < T; ++t)
            if (routed(j, t, r * El + el)) {
              ++routedRows;
              for (int64_t c = 0; c < H; ++c)
                want[size_t((el * G * T + j * T + t) * H + c)] =
                    data(xs[size_t(j)])[((r * El + el) * T + t) * H + c];
            }
    } else { // out_r[e, t] = x_{e / El}[e % El, r*T + t] where routed
      for (int64_t e = 0; e < E; ++e)
        for (int64_t t = 0; t < T; ++t)
          if (routed(r, t, e)) {
            ++routedRows;
            for (int64_t c = 0; c < H; ++c)
              want[size_t((e * T + t) * H + c)] =
                  data(xs[size_t(e / El)])[((e % El) * G * T + r * T + t) * H + c];
          }
    }
    const float *got = data(outs[size_t(r)]);
    EXPECT_EQ(std::vector<float>(got, got + want.size()), want) << "rank " << r;
  }
  EXPECT_GT(routedRows, 0); // the random masks route something
}

TEST(MoeRoutes, EveryMemberGetsItsRoutedRowsAndZerosElsewhere) {
  uint32_t seed = 1;
  for (DType maskType : {DType::f32, DType::bf16})
    for (int64_t dim : {0, 1})
      for (Case k : {Case{2, 4, 5, 3}, Case{3, 6, 4, 2}, Case{1, 3, 6, 4}}) {
        SCOPED_TRACE("members " + std::to_string(k.members) + ", dim " + std::to_string(dim) +
                     ", " + dtypeName(maskType) + " masks");
        checkExchange(k, dim, maskType, seed++);
      }
}

// The counts the routes send are the rows routed, member by member (what the CUDA backend
// exchanges and checks before its grouped sends).
TEST(MoeRoutes, CountsAreTheRoutedRowsPerMember) {
  // 2 members, 4 experts (2 each), 3 tokens; rank 0's routing: token t to experts {t, t + 1}.
  std::vector<float> tokens(12, 0.0f), experts(12, 0.0f);
  for (int64_t t = 0; t < 3; ++t)
    tokens[size_t(t * 4 + t)] = tokens[size_t(t * 4 + t + 1)] = 1.0f;
  experts[0] = experts[3] = experts[9] = 1.0f; // [6, 2]: group tokens 0, 1 and 4
  HostTensor tokenMask = maskTensor(DType::f32, {3, 4}, tokens);
  HostTensor expertMask = maskTensor(DType::f32, {6, 2}, experts);
  HostTensor x = floats({4, 3, 8}, 0.0f), out = floats({2, 6, 8}, 0.0f);
  StatusOr<collective::MoeShape> shape =
      collective::moeShape(0, 2, refOf(x), refOf(tokenMask), refOf(expertMask), refOf(out));
  ASSERT_TRUE(shape.isOk()) << shape.status().message();
  EXPECT_EQ(shape->rowBytes, 8u * 4u);
  collective::MoeRoutes r = collective::moeRoutes(*shape, refOf(tokenMask), refOf(expertMask));
  // To member 0 (experts 0, 1): (e 0, t 0), (e 1, t 0), (e 1, t 1); member 1: (2, 1), (2, 2),
  // (3, 2). Rows are e * 3 + t.
  EXPECT_EQ(r.sendRows, (std::vector<std::vector<int64_t>>{{0, 3, 4}, {7, 8, 11}}));
  // From member 0's tokens 0, 1 (local expert 0 then 1: rows el * 6 + t); member 1's token 1.
  EXPECT_EQ(r.recvRows, (std::vector<std::vector<int64_t>>{{0, 7}, {10}}));
  EXPECT_EQ(r.sendCounts(), (std::vector<size_t>{3, 3}));
  EXPECT_EQ(r.recvCounts(), (std::vector<size_t>{2, 1}));
}

TEST(MoeRoutes, ShapeErrorsNameTheOpAndTheShapes) {
  std::mt19937 rng(7);
  HostTensor x = floats({4, 5, 3}, 0.0f), out = floats({2, 10, 3}, 0.0f);
  HostTensor badOut = floats({2, 9, 3}, 0.0f);
  HostTensor tokenMask = maskTensor(DType::f32, {5, 4}, routing(20, rng));
  HostTensor expertMask = maskTensor(DType::f32, {10, 2}, routing(20, rng));
  HostTensor shortMask = maskTensor(DType::f32, {5, 3}, routing(15, rng));
  HostTensor intMask = tokenMask;
  intMask.dtype = DType::i32;
  HostTensor f64Out = out;
  f64Out.dtype = DType::f64;
  f64Out.bytes.resize(f64Out.bytes.size() * 2);
  struct Bad {
    const HostTensor &out, &tokens;
    int64_t dim;
    std::string message;
  };
  for (const Bad &b : {
           Bad{f64Out, tokenMask, 0, "MoeAllToAll: the output is f64, the input f32"},
           Bad{out, intMask, 0, "MoeAllToAll: routing masks must be floating point, not i32"},
           Bad{out, tokenMask, 2, "MoeAllToAll: dim must be 0 (to the experts) or 1 (back), not 2"},
           Bad{badOut, tokenMask, 0,
               "MoeAllToAll: for a group of 2, [4, 5, 3] (every expert) and [2, 9, 3] (this "
               "rank's experts) do not match"},
           Bad{out, shortMask, 0,
               "MoeAllToAll: token mask [5, 3] and expert mask [10, 2] do not fit 5 tokens per "
               "rank and 4 experts"},
       }) {
    StatusOr<collective::MoeShape> shape =
        collective::moeShape(b.dim, 2, refOf(x), refOf(b.tokens), refOf(expertMask), refOf(b.out));
    ASSERT_FALSE(shape.isOk()) << b.message;
    EXPECT_EQ(shape.status().message(), b.message);
  }
}

} // namespace
