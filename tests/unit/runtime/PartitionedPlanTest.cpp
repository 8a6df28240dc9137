// Partitioned plans (format version 3) in one process: each rank's executor over a one-rank view
// of the mesh [dp = 2, tp = 2] (rank = tp + 2 dp). Sharded parameters, ShardSlice and the
// vocab-parallel embedding need no communication, so every rank's result is checked against the
// unsharded tensor here; the loader's version-3 rules each have a rejected plan. Collectives
// across ranks are tested under mpirun (MpiExecutorTest.cpp).
#include "runtime/comm/Communicator.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/Executor.h"
#include "runtime/exec/Parameters.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

using O = fb::Opcode;

/// A plan over the mesh [dp = 2, tp = 2]: one program for every rank.
PlanSpec meshPlan() {
  PlanSpec spec;
  spec.axisNames = {"dp", "tp"};
  spec.axisSizes = {2, 2};
  spec.ranks.clear();
  for (int64_t r = 0; r < 4; ++r)
    spec.ranks.push_back({0, {r / 2, r % 2}});
  return spec;
}

LoadedPlan load(const PlanSpec &spec) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  return loaded.value();
}

std::unique_ptr<Executor> executorFor(const LoadedPlan &plan, int rank,
                                      const TensorMap *weights = nullptr) {
  ExecutorOptions options;
  options.rank = rank;
  options.weights = weights;
  auto ex = Executor::create(plan, options);
  EXPECT_TRUE(ex.isOk()) << ex.status().message();
  return ex.isOk() ? std::move(ex).value() : nullptr;
}

void expectRejected(const PlanSpec &plan, const std::string &expected) {
  auto loaded = loadPlanFromBytes(plan.build(), "test.mplan");
  ASSERT_FALSE(loaded.isOk()) << "accepted a plan that should fail with: " << expected;
  EXPECT_NE(loaded.status().message().find(expected), std::string::npos)
      << "message: " << loaded.status().message() << "\nmissing: " << expected;
}

/// x[rows, cols] with x[i][j] = 10 i + j, as f32.
HostTensor grid(int64_t rows, int64_t cols) {
  std::vector<float> v;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      v.push_back(float(10 * i + j));
  return f32({rows, cols}, v);
}

TEST(PartitionedPlan, ShardedParametersAreSlicesOfTheWholeInit) {
  // The whole [4, 6] tensor from a one-rank plan with the same name, init and seed.
  PlanSpec whole;
  whole.seed = 7;
  whole.program().param("w", DType::f32, {4, 6}, fb::InitKind::normal, 0.5);
  auto single = executorFor(load(whole), 0);
  HostTensor all = single->parameter("w").value();

  PlanSpec sharded = meshPlan();
  sharded.seed = 7;
  ProgramSpec &p = sharded.program();
  p.shardedParam("w", DType::f32, {2, 3}, {4, 6}, {{0, {0}}, {1, {1}}}, fb::InitKind::normal, 0.5);
  LoadedPlan plan = load(sharded);
  TensorMap weights{{"w", grid(4, 6)}};
  for (int rank = 0; rank < 4; ++rank) {
    int64_t dp = rank / 2, tp = rank % 2;
    auto ex = executorFor(plan, rank);
    std::vector<float> got = valuesOf<float>(ex->parameter("w").value()), want;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        want.push_back(valuesOf<float>(all)[(2 * dp + i) * 6 + 3 * tp + j]);
    EXPECT_EQ(got, want) << "rank " << rank;
    ShardInfo info = ex->parameterShard("w").value();
    EXPECT_EQ(info.globalShape, (std::vector<int64_t>{4, 6}));
    EXPECT_EQ(info.offset, (std::vector<int64_t>{2 * dp, 3 * tp}));
    EXPECT_EQ(info.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(ex->coords(), (std::vector<int64_t>{dp, tp}));
    EXPECT_EQ(ex->rank(), rank);
    // Weights passed in are sliced the same way.
    auto given = executorFor(plan, rank, &weights);
    EXPECT_EQ(valuesOf<float>(given->parameter("w").value()),
              (std::vector<float>{float(20 * dp + 3 * tp), float(20 * dp + 3 * tp + 1),
                                  float(20 * dp + 3 * tp + 2), float(20 * dp + 10 + 3 * tp),
                                  float(20 * dp + 11 + 3 * tp), float(20 * dp + 12 + 3 * tp)}));
  }
}

TEST(PartitionedPlan, PaddedShardsHoldTheirBoxThenZeros) {
  // ZeRO-3's padded split: a [3, 4] parameter over dp = 2 padded to 4 rows, a buffer of 2 rows
  // per rank; dp rank 1 holds row 2 and a zero row. A [1, 4] one: dp rank 1 holds none.
  PlanSpec whole;
  whole.seed = 7;
  whole.program().param("w", DType::f32, {3, 4}, fb::InitKind::normal, 0.5);
  std::vector<float> all = valuesOf<float>(executorFor(load(whole), 0)->parameter("w").value());

  PlanSpec padded = meshPlan();
  padded.seed = 7;
  ProgramSpec &p = padded.program();
  p.shardedParam("w", DType::f32, {2, 4}, {3, 4}, {{0, {0}}}, fb::InitKind::normal, 0.5);
  p.params.back().paddedSizes = {4};
  p.shardedParam("b", DType::f32, {1, 4}, {1, 4}, {{0, {0}}}, fb::InitKind::ones);
  p.params.back().paddedSizes = {2};
  LoadedPlan plan = load(padded);
  TensorMap weights{{"w", grid(3, 4)}};
  for (int rank = 0; rank < 4; ++rank) {
    int64_t dp = rank / 2, rows = dp == 0 ? 2 : 1;
    auto ex = executorFor(plan, rank);
    std::vector<float> want(all.begin() + 8 * dp, all.begin() + 8 * dp + 4 * rows);
    want.resize(8, 0.0f);
    EXPECT_EQ(valuesOf<float>(ex->parameter("w").value()), want) << "rank " << rank;
    ShardInfo info = ex->parameterShard("w").value();
    EXPECT_EQ(info.offset, (std::vector<int64_t>{2 * dp, 0}));
    EXPECT_EQ(info.shape, (std::vector<int64_t>{rows, 4}));
    EXPECT_EQ(info.bufferShape, (dp == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{2, 4}));
    ShardInfo empty = ex->parameterShard("b").value();
    EXPECT_EQ(empty.offset, (std::vector<int64_t>{dp, 0})); // clamped to the dim's end
    EXPECT_EQ(empty.shape, (std::vector<int64_t>{1 - dp, 4}));
    EXPECT_EQ(valuesOf<float>(ex->parameter("b").value()),
              std::vector<float>(4, dp == 0 ? 1.0f : 0.0f));
    auto given = executorFor(plan, rank, &weights);
    std::vector<float> sliced = valuesOf<float>(grid(3, 4));
    want.assign(sliced.begin() + 8 * dp, sliced.begin() + 8 * dp + 4 * rows);
    want.resize(8, 0.0f);
    EXPECT_EQ(valuesOf<float>(given->parameter("w").value()), want) << "rank " << rank;
  }
  // A box and its buffer convert both ways, the padding zeros.
  HostTensor box = grid(1, 4), buffer = bufferOfBox(box, std::vector<int64_t>{2, 4});
  EXPECT_EQ(valuesOf<float>(buffer), (std::vector<float>{0, 1, 2, 3, 0, 0, 0, 0}));
  EXPECT_EQ(valuesOf<float>(boxOfBuffer(buffer, std::vector<int64_t>{1, 4})), valuesOf<float>(box));
}

TEST(PartitionedLoader, RejectsInconsistentPaddedSizes) {
  // padded_size must be ceil(global / parts) * parts and the buffer's dim padded_size / parts.
  PlanSpec plan = meshPlan();
  plan.program().shardedParam("w", DType::f32, {2, 4}, {3, 4}, {{0, {0}}});
  plan.program().params.back().paddedSizes = {6};
  expectRejected(plan, "parameter 0 ('w'): sharding 0: dim 0 of global size 3 has padded_size "
                       "6, but split over the group's 2 ranks it pads to 4");
  plan = meshPlan();
  plan.program().shardedParam("w", DType::f32, {3, 4}, {3, 4}, {{0, {0}}});
  plan.program().params.back().paddedSizes = {4};
  expectRejected(plan, "parameter 0 ('w'): sharding 0: dim 0 of global size 3 has padded_size "
                       "4, but the buffer's dim is 3, not 4 / 2 ranks");
}

TEST(PartitionedPlan, ShardSliceTakesTheGroupIndexBlock) {
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {2, 4});
  uint32_t y = p.buffer("y", DType::f32, {2, 2});
  p.inst(O::ShardSlice, {x}, y, "slice", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1));
  p.output("y", y);
  LoadedPlan plan = load(spec);
  for (int rank = 0; rank < 4; ++rank) {
    int tp = rank % 2;
    auto ex = executorFor(plan, rank);
    ASSERT_TRUE(ex->setInput("x", grid(2, 4)).isOk());
    ASSERT_TRUE(ex->run().isOk());
    EXPECT_EQ(valuesOf<float>(ex->output("y").value()),
              (std::vector<float>{float(2 * tp), float(2 * tp + 1), float(10 + 2 * tp),
                                  float(11 + 2 * tp)}));
  }
}

TEST(PartitionedPlan, VocabParallelEmbeddingSumsToTheWholeTable) {
  // table [6, 2] split over tp into [3, 2] shards; ids reach both shards.
  std::vector<int64_t> ids = {0, 5, 3, 2, 3};
  std::vector<float> dyValues = randomValues(10, 3);
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t table = p.shardedParam("table", DType::f32, {3, 2}, {6, 2}, {{0, {1}}});
  uint32_t idsB = p.input("ids", DType::i64, {5});
  uint32_t dy = p.input("dy", DType::f32, {5, 2});
  uint32_t rows = p.buffer("rows", DType::f32, {5, 2});
  uint32_t dtable = p.buffer("dtable", DType::f32, {3, 2});
  p.inst(O::Embedding, {table, idsB}, rows, "wte", fb::Attrs::EmbeddingAttrs, embeddingAttrs({1}));
  p.inst(O::EmbeddingGrad, {dy, idsB}, dtable, "wte grad", fb::Attrs::EmbeddingAttrs,
         embeddingAttrs({1}));
  p.output("rows", rows, {1});
  p.output("dtable", dtable);
  LoadedPlan plan = load(spec);
  TensorMap weights{{"table", grid(6, 2)}};
  HostTensor wholeTable = grid(6, 2), idsT = i64({5}, ids), dyT = f32({5, 2}, dyValues);
  HostTensor wantRows = HostTensor::zeros(DType::f32, {5, 2});
  HostTensor wantGrad = HostTensor::zeros(DType::f32, {6, 2});
  ASSERT_TRUE(
      cpu::embedding(cpu::refOf(wholeTable), cpu::refOf(idsT), cpu::refOf(wantRows)).isOk());
  ASSERT_TRUE(cpu::embeddingGrad(cpu::refOf(dyT), cpu::refOf(idsT), cpu::refOf(wantGrad)).isOk());
  std::vector<float> sum(10, 0.0f), grads;
  for (int rank = 0; rank < 2; ++rank) { // the tp group of dp 0
    auto ex = executorFor(plan, rank, &weights);
    ASSERT_TRUE(ex->setInput("ids", idsT).isOk());
    ASSERT_TRUE(ex->setInput("dy", dyT).isOk());
    ASSERT_TRUE(ex->run().isOk());
    std::vector<float> part = valuesOf<float>(ex->output("rows").value());
    for (size_t i = 0; i < part.size(); ++i) {
      // Each id's row is on exactly one shard; the other gives zeros.
      bool here = ids[i / 2] / 3 == rank;
      EXPECT_EQ(part[i], here ? valuesOf<float>(wantRows)[i] : 0.0f) << "rank " << rank;
      sum[i] += part[i];
    }
    std::vector<float> g = valuesOf<float>(ex->output("dtable").value());
    grads.insert(grads.end(), g.begin(), g.end());
    EXPECT_EQ(ex->outputPartialAxes("rows").value(), (std::vector<uint32_t>{1}));
    EXPECT_TRUE(ex->outputPartialAxes("dtable").value().empty());
  }
  EXPECT_EQ(sum, valuesOf<float>(wantRows));
  EXPECT_EQ(grads, valuesOf<float>(wantGrad)); // same summation order, so exactly equal
}

TEST(PartitionedPlan, DropoutShardDimsDrawTheGlobalMask) {
  // x [2, 4] is rank tp's column block of a [2, 8] tensor: its mask is that block's.
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {2, 4});
  uint32_t seed = p.input("seed", DType::i64, {});
  uint32_t y = p.buffer("y", DType::f32, {2, 4});
  p.inst(O::Dropout, {x, seed}, y, "drop", fb::Attrs::DropoutAttrs,
         [](flatbuffers::FlatBufferBuilder &b) {
           std::vector<int64_t> global = {2, 8}, offset = {0, 0};
           std::vector<uint32_t> tp = {1};
           std::vector<flatbuffers::Offset<fb::DimSharding>> dims = {
               fb::CreateDimShardingDirect(b, 1, &tp)};
           return fb::CreateDropoutAttrsDirect(b, 0.5, 3, &global, &offset, &dims).Union();
         });
  p.output("y", y);
  LoadedPlan plan = load(spec);
  HostTensor xs = f32({2, 4}, randomValues(8, 5, 0.5, 1.5)), seedT = i64({}, {42});
  for (int rank = 0; rank < 4; ++rank) {
    auto ex = executorFor(plan, rank);
    ASSERT_TRUE(ex->setInput("x", xs).isOk());
    ASSERT_TRUE(ex->setInput("seed", seedT).isOk());
    ASSERT_TRUE(ex->run().isOk());
    HostTensor want = HostTensor::zeros(DType::f32, {2, 4});
    std::vector<int64_t> global = {2, 8}, offset = {0, 4 * (rank % 2)};
    ASSERT_TRUE(cpu::dropoutShard(cpu::refOf(xs), cpu::refOf(seedT), 0.5, 3, global, offset,
                                  cpu::refOf(want))
                    .isOk());
    EXPECT_EQ(valuesOf<float>(ex->output("y").value()), valuesOf<float>(want)) << "rank " << rank;
  }
  // The two tp ranks draw different masks (different global columns).
  auto a = executorFor(plan, 0), b = executorFor(plan, 1);
  for (auto *ex : {a.get(), b.get()}) {
    ASSERT_TRUE(ex->setInput("x", xs).isOk());
    ASSERT_TRUE(ex->setInput("seed", seedT).isOk());
    ASSERT_TRUE(ex->run().isOk());
  }
  EXPECT_NE(valuesOf<float>(a->output("y").value()), valuesOf<float>(b->output("y").value()));
}

TEST(PartitionedPlan, CollectivesOverLargerGroupsNeedACommunicator) {
  PlanSpec spec = meshPlan();
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {2});
  uint32_t y = p.buffer("y", DType::f32, {2});
  p.inst(O::AllReduce, {x}, y, "h0.attn.out", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum));
  p.output("y", y);
  LoadedPlan plan = load(spec);
  auto ex = executorFor(plan, 3);
  ASSERT_TRUE(ex->setInput("x", f32({2}, {1, 2})).isOk());
  Status s = ex->run();
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.message(), "program 'main', function 'main', instruction 0 (AllReduce at "
                         "'h0.attn.out'): rank 3: all_reduce over [tp] (ranks 2, 3) needs a "
                         "multi-rank communicator (run under mpirun)");
  // A communicator over another mesh is refused.
  auto other = megac::runtime::comm::makeSelfCommunicator({{"dp"}, {4}}, 1);
  ExecutorOptions options;
  options.comm = other.get();
  auto refused = Executor::create(plan, options);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("the communicator's mesh (4 ranks) is not the plan's"),
            std::string::npos)
      << refused.status().message();
}

TEST(PartitionedPlan, GroupsOfOneRankRunWithoutMpi) {
  // Mesh [dp = 1, tp = 1]: every collective is a copy, so a one-rank run of a partitioned plan
  // works with the default communicator.
  PlanSpec spec;
  spec.axisNames = {"dp", "tp"};
  spec.axisSizes = {1, 1};
  spec.ranks = {{0, {0, 0}}};
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {2, 3});
  uint32_t sum = p.buffer("sum", DType::f32, {2, 3});
  uint32_t gathered = p.buffer("gathered", DType::f32, {2, 3});
  uint32_t scattered = p.buffer("scattered", DType::f32, {2, 3});
  uint32_t swapped = p.buffer("swapped", DType::f32, {2, 3});
  p.inst(O::AllReduce, {x}, sum, "", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({0, 1}, fb::ReduceKind::sum));
  p.inst(O::AllGather, {x}, gathered, "", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1));
  p.inst(O::ReduceScatter, {x}, scattered, "", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({0}, fb::ReduceKind::max, 0));
  p.inst(O::AllToAll, {x}, swapped, "", fb::Attrs::CollectiveAttrs,
         collectiveAttrs({1}, fb::ReduceKind::sum, 1, 0));
  for (auto [name, b] : {std::pair{"sum", sum},
                         {"gathered", gathered},
                         {"scattered", scattered},
                         {"swapped", swapped}})
    p.output(name, b);
  auto ex = executorFor(load(spec), 0);
  ASSERT_TRUE(ex->setInput("x", grid(2, 3)).isOk());
  ASSERT_TRUE(ex->run().isOk());
  for (const char *name : {"sum", "gathered", "scattered", "swapped"})
    EXPECT_EQ(valuesOf<float>(ex->output(name).value()), valuesOf<float>(grid(2, 3))) << name;
}

TEST(PartitionedLoader, RejectsBadShardings) {
  PlanSpec plan = meshPlan();
  plan.program().shardedParam("w", DType::f32, {2, 3}, {4, 6}, {{0, {2}}});
  expectRejected(plan, "parameter 0 ('w'): sharding 0 axes names mesh axis 2, but the mesh has "
                       "2 axes");
  plan = meshPlan();
  plan.program().shardedParam("w", DType::f32, {2, 3}, {4, 6}, {{1, {0, 1}}});
  expectRejected(plan, "parameter 0 ('w'): sharding 0: dim 1 has global size 6, not the local 3 "
                       "times the group's 4 ranks");
  plan = meshPlan();
  plan.program().shardedParam("w", DType::f32, {2, 3}, {4, 6}, {{2, {1}}});
  expectRejected(plan, "sharding 0 splits dim 2 of a rank-2 tensor");
}

TEST(PartitionedLoader, RejectsBadCollectives) {
  auto withInst = [](O op, std::vector<int64_t> in, std::vector<int64_t> out, fb::Attrs type,
                     AttrsFn attrs) {
    PlanSpec plan = meshPlan();
    ProgramSpec &p = plan.program();
    uint32_t x = p.input("x", DType::f32, std::move(in));
    uint32_t y = p.buffer("y", DType::f32, std::move(out));
    p.inst(op, {x}, y, "c", type, std::move(attrs));
    p.output("y", y);
    return plan;
  };
  expectRejected(withInst(O::AllGather, {2, 3}, {4, 3}, fb::Attrs::NONE, nullptr),
                 "has no attrs, but AllGather takes CollectiveAttrs");
  expectRejected(withInst(O::ReduceScatter, {3, 2}, {1, 2}, fb::Attrs::CollectiveAttrs,
                          collectiveAttrs({1}, fb::ReduceKind::sum, 0)),
                 "instruction 0 (ReduceScatter at 'c'): dim 0 of size 3 does not divide over the "
                 "group's 2 ranks");
  expectRejected(withInst(O::AllGather, {2, 3}, {2, 3}, fb::Attrs::CollectiveAttrs,
                          collectiveAttrs({0, 1}, fb::ReduceKind::sum, 0)),
                 "the output's shape [2, 3] should be [8, 3] for a group of 4 ranks");
  expectRejected(withInst(O::AllReduce, {2}, {2}, fb::Attrs::CollectiveAttrs,
                          collectiveAttrs({1, 0}, fb::ReduceKind::sum)),
                 "axes must list distinct mesh axes in mesh order (major first)");
  expectRejected(withInst(O::AllReduce, {2}, {2}, fb::Attrs::CollectiveAttrs,
                          collectiveAttrs({1}, fb::ReduceKind::mean)),
                 "reduce kind mean is not supported by collectives (sum or max)");
  expectRejected(withInst(O::AllToAll, {2, 3}, {1, 6}, fb::Attrs::CollectiveAttrs,
                          collectiveAttrs({1}, fb::ReduceKind::sum, 0, 2)),
                 "concat_dim 2 is out of range for the input of rank 2");
  PlanSpec v2 = withInst(O::AllReduce, {2}, {2}, fb::Attrs::CollectiveAttrs,
                         collectiveAttrs({1}, fb::ReduceKind::sum));
  v2.formatVersion = 2;
  expectRejected(v2, "AllReduce needs plan format version 3; recompile the model");
}

TEST(PartitionedLoader, RejectsSendsOutsideTheMeshAndBadPartialAxes) {
  PlanSpec plan = meshPlan();
  ProgramSpec &p = plan.program();
  uint32_t x = p.input("x", DType::f32, {2});
  p.instN(O::Send, {x}, {}, "act.c1", fb::Attrs::P2PAttrs, p2pAttrs(0, 1, 3));
  expectRejected(plan, "instruction 0 (Send at 'act.c1'): rank 2's peer is outside the mesh "
                       "(coordinate 2 on axis 0 of size 2)");
  plan = meshPlan();
  uint32_t y = plan.program().input("y", DType::f32, {2});
  plan.program().output("loss", y, {3});
  expectRejected(plan, "output 0 ('loss'): partial_axes names mesh axis 3, but the mesh has 2 "
                       "axes");
  plan = meshPlan();
  uint32_t ids = plan.program().input("ids", DType::i64, {2});
  uint32_t table = plan.program().input("table", DType::f32, {3, 2});
  uint32_t rows = plan.program().buffer("rows", DType::f32, {2, 2});
  plan.program().inst(O::Embedding, {table, ids}, rows, "wte", fb::Attrs::EmbeddingAttrs,
                      embeddingAttrs({4}));
  expectRejected(plan, "vocab_axes names mesh axis 4, but the mesh has 2 axes");
}

TEST(PartitionedLoader, ChecksPipelineSchedules) {
  // Mesh [pp = 2]: one program per stage; stage 0 runs chunk 0 of micro-batches 0 and 1.
  auto pipelined = [] {
    PlanSpec plan;
    plan.axisNames = {"pp"};
    plan.axisSizes = {2};
    plan.ranks = {{0, {0}}, {1, {1}}};
    plan.programs.push_back(ProgramSpec{});
    plan.pipelineStages = 2;
    plan.pipelineVirtualStages = 1;
    plan.pipelineMicroBatches = 2;
    for (size_t s = 0; s < 2; ++s) {
      ProgramSpec &p = plan.programs[s];
      p.name = "stage" + std::to_string(s);
      p.functions[0].name = "forward.c" + std::to_string(s);
      p.function("backward.c" + std::to_string(s));
      for (uint32_t m = 0; m < 2; ++m)
        p.schedule.push_back({fb::StepKind::Forward, uint32_t(s), m});
      for (uint32_t m = 0; m < 2; ++m)
        p.schedule.push_back({fb::StepKind::Backward, uint32_t(s), m});
    }
    return plan;
  };
  EXPECT_TRUE(loadPlanFromBytes(pipelined().build()).isOk());
  PlanSpec plan = pipelined();
  plan.programs[1].schedule[1].microBatch = 2;
  expectRejected(plan, "program 'stage1': schedule step 1 runs micro-batch 2 of 2");
  plan = pipelined();
  plan.programs[0].schedule[0].chunk = 1;
  expectRejected(plan, "program 'stage0': schedule step 0 runs function 'forward.c1', which the "
                       "program lacks");
  plan = pipelined();
  plan.pipelineStages = 0;
  expectRejected(plan, "it has a schedule, but the plan has no pipeline table");
  plan = pipelined();
  plan.pipelineStages = 3;
  expectRejected(plan, "pipeline has 3 stages, but the mesh's pp axis has size 2");
  // A zero-bubble schedule's split backward (issue 35): F, then B (backward_input.c<c>), then W
  // (backward_weight.c<c>) per micro-batch.
  auto split = [&] {
    PlanSpec plan = pipelined();
    plan.pipelineSchedule = "zb-h1";
    for (size_t s = 0; s < 2; ++s) {
      ProgramSpec &p = plan.programs[s];
      p.function("backward_input.c" + std::to_string(s));
      p.function("backward_weight.c" + std::to_string(s));
      p.schedule.clear();
      for (uint32_t m = 0; m < 2; ++m)
        p.schedule.push_back({fb::StepKind::Forward, uint32_t(s), m});
      for (uint32_t m = 0; m < 2; ++m) {
        p.schedule.push_back({fb::StepKind::BackwardInput, uint32_t(s), m});
        p.schedule.push_back({fb::StepKind::BackwardWeight, uint32_t(s), m});
      }
    }
    return plan;
  };
  EXPECT_TRUE(loadPlanFromBytes(split().build()).isOk());
  plan = split();
  std::swap(plan.programs[1].schedule[2], plan.programs[1].schedule[3]); // W0 before B0
  expectRejected(plan, "program 'stage1': stage 1 schedule, step 2 (weight-gradient backward of "
                       "chunk 1, micro-batch 0): runs before its input-gradient backward");
  plan = split();
  plan.programs[0].functions.pop_back(); // no backward_weight.c0
  expectRejected(plan, "program 'stage0': schedule step 3 runs function 'backward_weight.c0', "
                       "which the program lacks");
  plan = split();
  plan.programs[0].schedule[2].kind = fb::StepKind(7);
  expectRejected(plan, "program 'stage0': schedule step 2 has unknown kind 7");
  // zbv's V placement: a 2-stage plan's stage 0 runs chunks 0 and 3.
  plan = pipelined();
  plan.pipelineSchedule = "zbv";
  plan.pipelineVirtualStages = 2;
  for (size_t s = 0; s < 2; ++s) {
    ProgramSpec &p = plan.programs[s];
    uint32_t other = uint32_t(3 - s);
    p.function("forward.c" + std::to_string(other));
    p.function("backward.c" + std::to_string(other));
    for (uint32_t m = 0; m < 2; ++m)
      p.schedule.push_back({fb::StepKind::Forward, other, m});
    for (uint32_t m = 0; m < 2; ++m)
      p.schedule.push_back({fb::StepKind::Backward, other, m});
  }
  EXPECT_TRUE(loadPlanFromBytes(plan.build()).isOk());
  plan.pipelineSchedule = "1f1b"; // the same steps placed c % pp: chunk 3 is not stage 0's
  expectRejected(plan, "program 'stage0': stage 0 schedule, step 4 (forward of chunk 3, "
                       "micro-batch 0): chunk 3 runs on stage 1");
}

} // namespace
