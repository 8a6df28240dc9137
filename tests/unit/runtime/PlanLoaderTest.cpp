// The plan loader accepts a well-formed plan and rejects, with a message naming the program,
// instruction and location, every kind of malformed plan: identifier, truncation, version,
// indices, sizes, attrs, parameters, constants and the rank table.
#include "runtime/plan/PlanLoader.h"
#include "runtime/plan/PlanSeal.h"

#include "PlanBuilder.h"
#include "TestUtil.h"

#include <fstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

/// y = Gelu(Linear(x, fc.weight, fc.bias)): the plan most tests start from and then break.
PlanSpec linearGeluPlan() {
  PlanSpec plan;
  ProgramSpec &p = plan.program();
  uint32_t x = p.input("x", DType::f32, {2, 3});
  uint32_t w = p.param("fc.weight", DType::f32, {4, 3}, fb::InitKind::normal, 0.02);
  uint32_t b = p.param("fc.bias", DType::f32, {4}, fb::InitKind::zeros);
  uint32_t h = p.buffer("h", DType::f32, {2, 4});
  uint32_t y = p.buffer("y", DType::f32, {2, 4});
  p.inst(fb::Opcode::Linear, {x, w, b}, h, "model.py:10 fc");
  p.inst(fb::Opcode::Gelu, {h}, y, "model.py:11 gelu", fb::Attrs::GeluAttrs, geluAttrs(false));
  p.output("y", y);
  return plan;
}

/// Loads `plan` and expects an error containing every piece of `expected`.
void expectRejected(const PlanSpec &plan, std::vector<std::string> expected) {
  auto loaded = loadPlanFromBytes(plan.build(), "test.mplan");
  ASSERT_FALSE(loaded.isOk()) << "accepted a plan that should fail with: " << expected[0];
  for (const std::string &piece : expected)
    EXPECT_NE(loaded.status().message().find(piece), std::string::npos)
        << "message: " << loaded.status().message() << "\nmissing: " << piece;
}

} // namespace

TEST(PlanLoader, AcceptsAWellFormedPlan) {
  auto loaded = loadPlanFromBytes(linearGeluPlan().build());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  const fb::Plan &plan = loaded->plan();
  ASSERT_EQ(plan.programs()->size(), 1u);
  ASSERT_EQ(plan.programs()->Get(0)->functions()->size(), 1u);
  EXPECT_EQ(plan.programs()->Get(0)->functions()->Get(0)->instructions()->size(), 2u);
  EXPECT_EQ(plan.producer()->str(), "megac test");
  EXPECT_TRUE(loaded->path().empty());
}

TEST(PlanLoader, LoadsFromAFileAndNamesMissingFiles) {
  TempDir dir;
  std::vector<uint8_t> bytes = linearGeluPlan().build();
  std::string path = dir.file("model.mplan");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  auto loaded = loadPlanFile(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->path(), path);
  EXPECT_EQ(loaded->bytes(), bytes);
  auto missing = loadPlanFile(dir.file("absent.mplan"));
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("absent.mplan"), std::string::npos);
}

TEST(PlanLoader, RejectsAnotherFileIdentifier) {
  PlanSpec plan = linearGeluPlan();
  plan.identifier = "XXXX";
  expectRejected(plan, {"test.mplan", "no \"MPLN\" file identifier"});
  auto empty = loadPlanFromBytes({});
  EXPECT_FALSE(empty.isOk());
}

TEST(PlanLoader, RejectsEveryTruncation) {
  std::vector<uint8_t> bytes = linearGeluPlan().build();
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto loaded = loadPlanFromBytes(std::vector<uint8_t>(bytes.begin(), bytes.begin() + len));
    if (!loaded.isOk())
      continue;
    // Only alignment padding after the last object may go unnoticed.
    for (size_t i = len; i < bytes.size(); ++i)
      ASSERT_EQ(bytes[i], 0) << "a " << len << "-byte prefix was accepted";
    EXPECT_GE(len, bytes.size() - 7) << "more than alignment padding was cut";
  }
}

TEST(PlanLoader, SurvivesEveryFlippedByte) {
  // Not every flipped byte makes a plan invalid (names, values), but none may crash the loader.
  std::vector<uint8_t> bytes = linearGeluPlan().build();
  int rejected = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0xff;
    rejected += !loadPlanFromBytes(std::move(bad)).isOk();
  }
  EXPECT_GT(rejected, int(bytes.size() / 4)); // offsets, sizes and indices are everywhere
}

TEST(PlanLoader, RejectsAnotherFormatVersion) {
  PlanSpec plan = linearGeluPlan();
  plan.formatVersion = 1;
  auto loaded = loadPlanFromBytes(plan.build(), "v1.mplan");
  ASSERT_FALSE(loaded.isOk());
  EXPECT_EQ(loaded.status().message(),
            "plan 'v1.mplan': plan format version 1 is not supported (this runtime reads "
            "versions 2 to 4); recompile the model");
}

TEST(PlanLoader, AcceptsFormatVersion2) {
  PlanSpec plan = linearGeluPlan();
  plan.formatVersion = 2;
  auto loaded = loadPlanFromBytes(plan.build(), "v2.mplan");
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
}

TEST(PlanLoader, RejectsOutOfRangeBufferIndices) {
  PlanSpec plan = linearGeluPlan();
  plan.program().fn().instructions[0].inputs[2] = 99;
  expectRejected(plan,
                 {"program 'main', function 'main', instruction 0 (Linear at 'model.py:10 fc')",
                  "input 2 is buffer 99, but the program has 5 buffers"});
  plan = linearGeluPlan();
  plan.program().fn().instructions[1].outputs[0] = 5;
  expectRejected(plan, {"instruction 1 (Gelu at 'model.py:11 gelu')", "output 0 is buffer 5"});
  plan = linearGeluPlan();
  plan.program().fn().outputs[0].buffer = 7;
  expectRejected(plan, {"output 0 ('y')", "buffer 7"});
  plan = linearGeluPlan();
  plan.program().params[1].buffer = 5;
  expectRejected(plan, {"parameter 1 ('fc.bias')", "buffer 5"});
}

TEST(PlanLoader, RejectsBuffersOutsideTheArenaOrMisSized) {
  PlanSpec plan = linearGeluPlan();
  plan.program().arenaBytes = 100;
  expectRejected(plan, {"program 'main'", "past the arena's 100 bytes"});
  plan = linearGeluPlan();
  plan.program().buffers[3].bytes = 12;
  expectRejected(plan, {"buffer 3 ('h') has 12 bytes, but 8 elements of f32 need 32"});
  plan = linearGeluPlan();
  plan.program().buffers[1].offset = 72;
  expectRejected(plan, {"not 64-byte aligned"});
  plan = linearGeluPlan();
  plan.program().buffers[0].shape = {2, -3};
  expectRejected(plan, {"bad shape"});
  plan = linearGeluPlan();
  plan.program().arenaBytes = 4096;
  plan.program().buffers[0].offset = ~uint64_t(0) - 63; // far past the arena, no overflow
  expectRejected(plan, {"buffer 0 ('x')", "past the arena's 4096 bytes"});
}

TEST(PlanLoader, RejectsMissingOrWrongAttrs) {
  PlanSpec plan = linearGeluPlan();
  plan.program().fn().instructions[1].attrsType = fb::Attrs::NONE;
  plan.program().fn().instructions[1].attrs = nullptr;
  expectRejected(plan, {"instruction 1 (Gelu at 'model.py:11 gelu')",
                        "has no attrs, but Gelu takes GeluAttrs"});
  plan = linearGeluPlan();
  plan.program().fn().instructions[1].attrsType = fb::Attrs::AxisAttrs;
  plan.program().fn().instructions[1].attrs = axisAttrs(0);
  expectRejected(plan, {"has AxisAttrs, but Gelu takes GeluAttrs"});
  plan = linearGeluPlan();
  plan.program().fn().instructions[0].attrsType = fb::Attrs::GeluAttrs;
  plan.program().fn().instructions[0].attrs = geluAttrs(true);
  expectRejected(plan, {"has GeluAttrs, but Linear takes no attrs"});
  plan = linearGeluPlan();
  plan.program().fn().instructions[1].attrs =
      nullptr; // the type says GeluAttrs, the table is absent
  expectRejected(plan, {"GeluAttrs table is missing"});
}

TEST(PlanLoader, RejectsAttrContentsThatDoNotFitTheOperands) {
  auto single = [](fb::Opcode op, fb::Attrs type, AttrsFn attrs) {
    PlanSpec plan;
    ProgramSpec &p = plan.program();
    uint32_t x = p.input("x", DType::f32, {2, 3});
    uint32_t y = p.buffer("y", DType::f32, {3, 2});
    p.inst(op, {x}, y, "here", type, std::move(attrs));
    return plan;
  };
  expectRejected(
      single(fb::Opcode::Transpose, fb::Attrs::TransposeAttrs, transposeAttrs({1, 0, 2})),
      {"perm has 3 entries for an input of rank 2"});
  expectRejected(single(fb::Opcode::Softmax, fb::Attrs::AxisAttrs, axisAttrs(2)),
                 {"instruction 0 (Softmax at 'here')", "axis 2 is out of range"});
  expectRejected(single(fb::Opcode::Softmax, fb::Attrs::AxisAttrs, axisAttrs(-1)),
                 {"axis -1 is out of range"});
  expectRejected(single(fb::Opcode::Slice, fb::Attrs::SliceAttrs, sliceAttrs({0}, {1})),
                 {"starts and strides must have the input's rank 2"});
  expectRejected(single(fb::Opcode::Reduce, fb::Attrs::ReduceAttrs,
                        [](flatbuffers::FlatBufferBuilder &b) {
                          return fb::CreateReduceAttrs(b, fb::ReduceKind::sum, 0).Union();
                        }),
                 {"ReduceAttrs has no axes"});
  expectRejected(
      single(fb::Opcode::Reduce, fb::Attrs::ReduceAttrs, reduceAttrs(fb::ReduceKind::max, {0, 5})),
      {"axis 5 is out of range"});
  expectRejected(single(fb::Opcode::LayerNorm, fb::Attrs::NormAttrs, normAttrs(1e-5)),
                 {"has 1 inputs, expected 2 to 3"});
  // Rope takes x, cos and sin; neither it nor Silu takes attrs.
  expectRejected(single(fb::Opcode::Rope, fb::Attrs::NONE, nullptr),
                 {"instruction 0 (Rope at 'here')", "has 1 inputs, expected 3"});
  expectRejected(single(fb::Opcode::Silu, fb::Attrs::AxisAttrs, axisAttrs(0)),
                 {"has AxisAttrs, but Silu takes no attrs"});
}

TEST(PlanLoader, RejectsBadScalarsInAttrs) {
  PlanSpec plan;
  ProgramSpec &p = plan.program();
  uint32_t x = p.input("x", DType::f32, {4});
  uint32_t seed = p.input("seed", DType::i64, {});
  uint32_t y = p.buffer("y", DType::f32, {4});
  p.inst(fb::Opcode::Dropout, {x, seed}, y, "drop", fb::Attrs::DropoutAttrs, dropoutAttrs(1.5, 0));
  expectRejected(plan, {"dropout ratio 1.5"});
  p.fn().instructions[0] = {fb::Opcode::Gelu, {x}, {y}, fb::Attrs::GeluAttrs,
                            geluAttrs(false), "g"};
  p.fn().instructions[0].outputs = {y, y};
  expectRejected(plan, {"has 2 outputs, expected 1"});
  p.fn().instructions[0] = {fb::Opcode::Gelu,     {x, x},           {y},
                            fb::Attrs::GeluAttrs, geluAttrs(false), "g"};
  expectRejected(plan, {"has 2 inputs, expected 1"});
  p.fn().instructions[0] = {
      static_cast<fb::Opcode>(200), {x}, {y}, fb::Attrs::NONE, nullptr, "future"};
  expectRejected(plan, {"unknown opcode 200"});
}

TEST(PlanLoader, RejectsBadParametersPortsAndConstants) {
  PlanSpec plan = linearGeluPlan();
  plan.program().params[0].globalShape = {4, 3, 1};
  expectRejected(plan, {"parameter 0 ('fc.weight')", "must have the rank"});
  plan = linearGeluPlan();
  plan.program().params[0].globalShape = {4, 6};
  plan.program().params[0].shardOffset = {0, 4};
  expectRejected(plan, {"shard of 3 at offset 4 does not fit global dim 1 of size 6"});
  plan = linearGeluPlan();
  plan.program().params[1].name = "fc.weight";
  expectRejected(plan, {"appears twice"});
  plan = linearGeluPlan();
  plan.program().params[0].initStd = -1;
  expectRejected(plan, {"init_std"});
  plan = linearGeluPlan();
  plan.program().fn().inputs.push_back({"x", 0});
  expectRejected(plan, {"input 1 ('x') appears twice"});
  plan = linearGeluPlan();
  plan.program().fn().inputs[0].name = "";
  expectRejected(plan, {"input 0 has no name"});
  plan = linearGeluPlan();
  plan.program().constant("c", DType::f32, {2}, std::vector<float>{1, 2});
  plan.program().constants[0].data.pop_back();
  expectRejected(plan, {"constant 0 has 7 bytes of data, but buffer 5 ('c') has 8"});
}

TEST(PlanLoader, RejectsABadRankTable) {
  PlanSpec plan = linearGeluPlan();
  plan.ranks = {{1, {}}};
  expectRejected(plan, {"rank 0 has role 1, but there are 1 programs"});
  plan = linearGeluPlan();
  plan.ranks = {};
  expectRejected(plan, {"rank table is empty"});
  plan = linearGeluPlan();
  plan.axisNames = {"dp", "tp"};
  plan.axisSizes = {2, 2};
  plan.ranks = {{0, {0, 0}}, {0, {0, 1}}, {0, {1, 0}}, {0, {1}}};
  expectRejected(plan, {"rank 3 has 1 mesh coordinates, but the mesh has 2 axes"});
  plan.ranks = {{0, {0, 0}}, {0, {0, 1}}, {0, {1, 0}}};
  expectRejected(plan, {"the mesh has 4 positions but the rank table has 3 entries"});
  plan.ranks = {{0, {0, 0}}, {0, {1, 0}}, {0, {0, 1}}, {0, {1, 1}}};
  expectRejected(plan, {"rank 1 has the coordinates of rank 2"});
  plan.ranks = {{0, {0, 0}}, {0, {0, 1}}, {0, {1, 0}}, {0, {1, 2}}};
  expectRejected(plan, {"rank 3 has coordinate 2 on axis 1 of size 2"});
  plan.ranks = {{0, {0, 0}}, {0, {0, 1}}, {0, {1, 0}}, {0, {1, 1}}};
  EXPECT_TRUE(loadPlanFromBytes(plan.build()).isOk());
  plan.axisNames = {"dp"};
  expectRejected(plan, {"1 axis names but 2 axis sizes"});
}

// Issue 19, finding 4: plans had no integrity check; 3 of 54 single-bit flips (in f64 attribute
// bytes) ran with different logits and exit 0. A sealed plan file refuses every flipped bit.
TEST(PlanLoader, Issue19SealedPlanFileRefusesEveryFlippedBit) {
  TempDir dir;
  std::vector<uint8_t> body = linearGeluPlan().build();
  std::vector<uint8_t> sealed = sealPlan(body);
  ASSERT_EQ(sealed.size(), body.size() + kPlanSealBytes);
  EXPECT_TRUE(isSealedPlan(sealed));
  std::string path = dir.file("sealed.mplan");
  auto write = [&](const std::vector<uint8_t> &bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char *>(bytes.data()), std::streamsize(bytes.size()));
  };
  write(sealed);
  auto loaded = loadPlanFile(path);
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  EXPECT_EQ(loaded->bytes(), body);
  int accepted = 0;
  for (size_t i = 0; i < sealed.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = sealed;
      bad[i] ^= uint8_t(1 << bit);
      write(bad);
      accepted += loadPlanFile(path).isOk();
    }
  EXPECT_EQ(accepted, 0) << "of " << sealed.size() * 8 << " single-bit flips";
  std::vector<uint8_t> flipped = sealed;
  flipped[kPlanSealBytes + body.size() / 2] ^= 1;
  write(flipped);
  auto refused = loadPlanFile(path);
  ASSERT_FALSE(refused.isOk());
  EXPECT_NE(refused.status().message().find("sealed.mplan': the body has CRC32"), std::string::npos)
      << refused.status().message();
  // Truncated in the header, and a header of a later version.
  write(std::vector<uint8_t>(sealed.begin(), sealed.begin() + 12));
  EXPECT_FALSE(loadPlanFile(path).isOk());
  std::vector<uint8_t> later = sealed;
  later[12] = 2;
  write(later);
  EXPECT_NE(loadPlanFile(path).status().message().find("header version 2"), std::string::npos);
}
