// The executor's collective, pipeline and vocab-parallel opcodes on 4 real ranks (ctest label
// mpi, `mpirun -np 4`): hand-built plans over the mesh [dp = 2, tp = 2] (rank = tp + 2 dp), each
// rank checking its own closed-form result, and the vocab-parallel cross-entropy against the
// unsharded CPU kernels.
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/ShardGather.h"
#include "support/Float16.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

#include <cmath>
#include <type_traits>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

using O = fb::Opcode;

comm::Communicator &world() {
  static std::unique_ptr<comm::Communicator> c = [] {
    auto made = comm::MpiCommunicator::create({{"dp", "tp"}, {2, 2}}, std::chrono::seconds(60));
    if (!made.isOk()) {
      std::fprintf(stderr, "%s\n", made.status().message().c_str());
      std::abort();
    }
    return std::move(made).value();
  }();
  return *c;
}

int rank() { return world().rank(); }
int dpOf(int r) { return r / 2; }
int tpOf(int r) { return r % 2; }

PlanSpec meshPlan() {
  PlanSpec spec;
  spec.axisNames = {"dp", "tp"};
  spec.axisSizes = {2, 2};
  spec.ranks.clear();
  for (int64_t r = 0; r < 4; ++r)
    spec.ranks.push_back({0, {r / 2, r % 2}});
  return spec;
}

std::unique_ptr<Executor> executorFor(const PlanSpec &spec) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  ExecutorOptions options;
  options.comm = &world();
  auto ex = Executor::create(loaded.value(), options);
  EXPECT_TRUE(ex.isOk()) << ex.status().message();
  return std::move(ex).value();
}

/// Rank r's x[rows, cols]: 100 r + 10 i + j.
std::vector<float> valuesOfRank(int r, int rows, int cols) {
  std::vector<float> v;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j)
      v.push_back(float(100 * r + 10 * i + j));
  return v;
}

TEST(MpiExecutor, CollectivesAlongDims) {
  ASSERT_EQ(world().size(), 4) << "run under mpirun -np 4";
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {2, 3});
  uint32_t z = p.input("z", DType::f32, {2, 4});
  uint32_t ar = p.buffer("ar", DType::f32, {2, 3});
  uint32_t ag = p.buffer("ag", DType::f32, {2, 6});
  uint32_t agAll = p.buffer("ag_all", DType::f32, {8, 3});
  uint32_t rs = p.buffer("rs", DType::f32, {2, 2});
  uint32_t a2a = p.buffer("a2a", DType::f32, {4, 2});
  p.inst(O::AllReduce, {x}, ar, "ar", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum));
  p.inst(O::AllGather, {x}, ag, "ag", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1));
  p.inst(O::AllGather, {x}, agAll, "ag_all", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({0, 1}, fb::ReduceKind::sum, 0));
  p.inst(O::ReduceScatter, {z}, rs, "rs", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({0}, fb::ReduceKind::sum, 1));
  p.inst(O::AllToAll, {z}, a2a, "a2a", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1, 0));
  for (auto [name, b] :
       {std::pair{"ar", ar}, {"ag", ag}, {"ag_all", agAll}, {"rs", rs}, {"a2a", a2a}})
    p.output(name, b);
  auto ex = executorFor(spec);
  int r = rank(), dp = dpOf(r), tp = tpOf(r);
  ASSERT_TRUE(ex->setInput("x", f32({2, 3}, valuesOfRank(r, 2, 3))).isOk());
  ASSERT_TRUE(ex->setInput("z", f32({2, 4}, valuesOfRank(r, 2, 4))).isOk());
  ASSERT_TRUE(ex->run().isOk());

  auto xOf = [](int m, int i, int j) { return float(100 * m + 10 * i + j); };
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      want.push_back(xOf(2 * dp, i, j) + xOf(2 * dp + 1, i, j));
  EXPECT_EQ(valuesOf<float>(ex->output("ar").value()), want);
  want.clear();
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 2; ++k)
      for (int j = 0; j < 3; ++j)
        want.push_back(xOf(2 * dp + k, i, j));
  EXPECT_EQ(valuesOf<float>(ex->output("ag").value()), want);
  want.clear();
  for (int m = 0; m < 4; ++m)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        want.push_back(xOf(m, i, j));
  EXPECT_EQ(valuesOf<float>(ex->output("ag_all").value()), want);
  want.clear(); // dp group {tp, 2 + tp}; this rank keeps columns [2 dp, 2 dp + 2)
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      want.push_back(xOf(tp, i, 2 * dp + j) + xOf(2 + tp, i, 2 * dp + j));
  EXPECT_EQ(valuesOf<float>(ex->output("rs").value()), want);
  want.clear(); // rows 2m..2m+1 come from member m: its columns [2 tp, 2 tp + 2)
  for (int m = 0; m < 2; ++m)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j)
        want.push_back(xOf(2 * dp + m, i, 2 * tp + j));
  EXPECT_EQ(valuesOf<float>(ex->output("a2a").value()), want);
}

TEST(MpiExecutor, Bf16AllReduceRoundsOnce) {
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::bf16, {3});
  uint32_t y = p.buffer("y", DType::bf16, {3});
  p.inst(O::AllReduce, {x}, y, "ar", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({0, 1}, fb::ReduceKind::sum));
  p.output("y", y);
  auto ex = executorFor(spec);
  // 1 + 2^-8 on every rank: bf16 holds 1 + 2^-7 steps, so rounding each partial sum would
  // differ from one f32 sum (4 + 2^-6, exact in bf16).
  uint16_t v = floatToBf16(1.0f + 1.0f / 128), w = floatToBf16(3.0f);
  std::vector<uint16_t> in = {v, w, floatToBf16(float(rank()))};
  ASSERT_TRUE(ex->setInput("x", makeTensor(DType::bf16, {3}, in)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  std::vector<uint16_t> got = valuesOf<uint16_t>(ex->output("y").value());
  EXPECT_EQ(bf16ToFloat(got[0]), 4.0f + 4.0f / 128);
  EXPECT_EQ(bf16ToFloat(got[1]), 12.0f);
  EXPECT_EQ(bf16ToFloat(got[2]), 6.0f);
}

TEST(MpiExecutor, SendAndRecvAlongDp) {
  // Role 0 (dp 0) sends x to dp + 1; role 1 (dp 1) receives it.
  PlanSpec spec = meshPlan();
  spec.programs.push_back(ProgramSpec{});
  for (auto &[role, coords] : spec.ranks)
    role = uint32_t(coords[0]);
  ProgramSpec &sender = spec.programs[0];
  sender.name = "stage0";
  uint32_t x = sender.input("x", DType::f32, {2, 3});
  sender.instN(O::Send, {x}, {}, "act.c1", fb::Attrs::P2PAttrs, p2pAttrs(0, 1, 5));
  ProgramSpec &receiver = spec.programs[1];
  receiver.name = "stage1";
  uint32_t got = receiver.buffer("got", DType::f32, {2, 3});
  receiver.instN(O::Recv, {}, {got}, "act.c1", fb::Attrs::P2PAttrs, p2pAttrs(0, -1, 5));
  receiver.output("got", got);
  auto ex = executorFor(spec);
  int r = rank();
  if (dpOf(r) == 0) {
    ASSERT_TRUE(ex->setInput("x", f32({2, 3}, valuesOfRank(r, 2, 3))).isOk());
  }
  ASSERT_TRUE(ex->run().isOk());
  if (dpOf(r) == 1) {
    EXPECT_EQ(valuesOf<float>(ex->output("got").value()), valuesOfRank(r - 2, 2, 3));
  }
  ASSERT_TRUE(world().flushSends().isOk());
}

/// The vocab-parallel CrossEntropy and CrossEntropyGrad on logits [rows, vocab] split over tp
/// against the whole-vocabulary kernels, within rtol and atol.
template <typename T>
void expectVocabParallelLossMatchesTheWholeVocab(int rows, int vocab, std::vector<int64_t> labels,
                                                 uint32_t seed, double rtol, double atol) {
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const int local = vocab / 2;
  std::vector<T> logits = randomValues<T>(size_t(rows * vocab), seed, -6.0, 6.0);
  std::vector<T> dloss = randomValues<T>(size_t(rows), seed + 1, 0.1, 1.0);
  HostTensor whole = makeTensor(dtype, {rows, vocab}, logits), labelsT = i64({rows}, labels),
             dlossT = makeTensor(dtype, {rows}, dloss);
  HostTensor wantLoss = HostTensor::zeros(dtype, {rows});
  HostTensor wantGrad = HostTensor::zeros(dtype, {rows, vocab});
  ASSERT_TRUE(
      cpu::crossEntropy(cpu::refOf(whole), cpu::refOf(labelsT), -100, cpu::refOf(wantLoss)).isOk());
  ASSERT_TRUE(cpu::crossEntropyGrad(cpu::refOf(dlossT), cpu::refOf(whole), cpu::refOf(labelsT),
                                    -100, cpu::refOf(wantGrad))
                  .isOk());

  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t lg = p.input("logits", dtype, {rows, local});
  uint32_t lb = p.input("labels", DType::i64, {rows});
  uint32_t dl = p.input("dloss", dtype, {rows});
  uint32_t loss = p.buffer("loss", dtype, {rows});
  uint32_t dlogits = p.buffer("dlogits", dtype, {rows, local});
  p.inst(O::CrossEntropy, {lg, lb}, loss, "loss", fb::Attrs::CrossEntropyAttrs,
         vocabCrossEntropyAttrs(true, -100, {1}));
  p.inst(O::CrossEntropyGrad, {dl, lg, lb}, dlogits, "dloss", fb::Attrs::CrossEntropyAttrs,
         vocabCrossEntropyAttrs(true, -100, {1}));
  p.output("loss", loss);
  p.output("dlogits", dlogits);
  auto ex = executorFor(spec);
  int tp = tpOf(rank());
  std::vector<T> shard, wantShard;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < local; ++j) {
      shard.push_back(logits[size_t(i * vocab + tp * local + j)]);
      wantShard.push_back(valuesOf<T>(wantGrad)[size_t(i * vocab + tp * local + j)]);
    }
  ASSERT_TRUE(ex->setInput("logits", makeTensor(dtype, {rows, local}, shard)).isOk());
  ASSERT_TRUE(ex->setInput("labels", labelsT).isOk());
  ASSERT_TRUE(ex->setInput("dloss", dlossT).isOk());
  ASSERT_TRUE(ex->run().isOk());
  expectClose(valuesOf<T>(ex->output("loss").value()), valuesOf<T>(wantLoss), rtol, atol, "loss");
  expectClose(valuesOf<T>(ex->output("dlogits").value()), wantShard, rtol, atol, "dlogits");
}

TEST(MpiExecutor, VocabParallelCrossEntropyMatchesTheWholeVocab) {
  // f64: logits [5, 8] split over tp into [5, 4]; one label ignored, labels on both shards.
  // Shards sum exp in a different order than the whole row: double roundoff only.
  expectVocabParallelLossMatchesTheWholeVocab<double>(5, 8, {1, 6, -100, 4, 3}, 11, 1e-13,
                                                      1e-15);
}

TEST(MpiExecutor, VocabParallelCrossEntropyF32MatchesTheWholeVocab) {
  // The f32 path (the whole-vocabulary kernel's vectorised exp): logits [6, 80] split over tp
  // into [6, 40] (two 16-lane blocks and a tail per shard), labels on both shards, one ignored.
  // Error model: the global max is the whole row's max exactly, so every shard computes the same
  // f32 exps as the whole row; only the double sum's order differs (relative ~1e-16), which can
  // move the f32 results (loss, dl / sum, the label's dl (p - 1)) across a rounding boundary: at
  // most 2 ulp of f32 (2^-22 relative) after the scaling's own rounding.
  expectVocabParallelLossMatchesTheWholeVocab<float>(6, 80, {3, 47, -100, 79, 40, 39}, 21,
                                                     std::ldexp(1.0, -22), 1e-30);
}

TEST(MpiExecutor, VocabParallelEmbeddingThenAllReduce) {
  // Megatron's VocabParallelEmbedding: partial rows, then an all-reduce over tp.
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t table = p.shardedParam("wte", DType::f32, {3, 2}, {6, 2}, {{0, {1}}});
  uint32_t ids = p.input("ids", DType::i32, {4});
  uint32_t part = p.buffer("part", DType::f32, {4, 2});
  uint32_t rows = p.buffer("rows", DType::f32, {4, 2});
  p.inst(O::Embedding, {table, ids}, part, "wte", fb::Attrs::EmbeddingAttrs, embeddingAttrs({1}));
  p.inst(O::AllReduce, {part}, rows, "reduce_from_tp", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum));
  p.output("rows", rows);
  auto ex = executorFor(spec); // init: the layout-independent normal draw
  HostTensor idsT = i32({4}, {5, 0, 2, 3});
  ASSERT_TRUE(ex->setInput("ids", idsT).isOk());
  ASSERT_TRUE(ex->run().isOk());
  // The whole table from a one-rank plan with the same parameter.
  PlanSpec single;
  single.program().param("wte", DType::f32, {6, 2}, fb::InitKind::normal, 1.0);
  auto loaded = loadPlanFromBytes(single.build());
  ASSERT_TRUE(loaded.isOk());
  auto one = Executor::create(loaded.value(), {});
  ASSERT_TRUE(one.isOk()) << one.status().message();
  HostTensor whole = (*one)->parameter("wte").value();
  HostTensor want = HostTensor::zeros(DType::f32, {4, 2});
  ASSERT_TRUE(cpu::embedding(cpu::refOf(whole), cpu::refOf(idsT), cpu::refOf(want)).isOk());
  EXPECT_EQ(valuesOf<float>(ex->output("rows").value()), valuesOf<float>(want));
}

TEST(MpiExecutor, GathersWholeParametersAndGradientsOnRankZero) {
  // w [2, 6] split over tp on dim 1 (replicated over dp); its accumulator is partial over dp.
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  p.shardedParam("w", DType::f32, {2, 3}, {2, 6}, {{1, {1}}});
  p.param("b", DType::f32, {3}, fb::InitKind::ones);
  p.stateBuffer("grad.w", DType::f32, {2, 3});
  p.state.back().partialAxes = {0};
  p.stateBuffer("grad.b", DType::f32, {3});
  uint32_t x = p.input("x", DType::f32, {1});
  p.output("x", x);
  auto loaded = loadPlanFromBytes(spec.build());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  std::vector<float> whole;
  for (int i = 0; i < 12; ++i)
    whole.push_back(float(i));
  TensorMap weights{{"w", f32({2, 6}, whole)}};
  ExecutorOptions options;
  options.comm = &world();
  options.weights = &weights;
  auto ex = Executor::create(loaded.value(), options);
  ASSERT_TRUE(ex.isOk()) << ex.status().message();
  int r = rank();
  ASSERT_TRUE((*ex)->setState("grad.w", f32({2, 3}, valuesOfRank(r, 2, 3))).isOk());
  ASSERT_TRUE((*ex)->setState("grad.b", f32({3}, {1, 2, 3})).isOk());

  auto params = gatherParameters(loaded.value(), **ex, world());
  ASSERT_TRUE(params.isOk()) << params.status().message();
  auto grads = gatherGradients(loaded.value(), **ex, world());
  ASSERT_TRUE(grads.isOk()) << grads.status().message();
  if (r != 0) {
    EXPECT_TRUE(params->empty());
    return;
  }
  EXPECT_EQ(valuesOf<float>(params->at("w")), whole);
  EXPECT_EQ(params->at("w").shape, (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(valuesOf<float>(params->at("b")), (std::vector<float>{1, 1, 1}));
  std::vector<float> want; // columns 3 tp + j: the sum over dp of rank (2 dp + tp)'s values
  for (int i = 0; i < 2; ++i)
    for (int tp = 0; tp < 2; ++tp)
      for (int j = 0; j < 3; ++j)
        want.push_back(float(100 * tp + 10 * i + j) + float(100 * (2 + tp) + 10 * i + j));
  EXPECT_EQ(valuesOf<float>(grads->at("w")), want);
  EXPECT_EQ(valuesOf<float>(grads->at("b")), (std::vector<float>{1, 2, 3}));
}

} // namespace
