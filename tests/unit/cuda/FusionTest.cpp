// Elementwise fusion without a GPU: which instructions findFusionGroups groups (liveness, cuts at
// non-fusible ops, size changes and arena overlaps), the kernels' parameters, and NVRTC
// compiling every generated source for sm_80 and sm_90 (NVRTC needs no driver).
#include "runtime/cuda/Fusion.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/unit/cuda/FusionPlans.h"
#include "tests/unit/runtime/TestUtil.h"

#include <gtest/gtest.h>

#include <cstdlib>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::testing;

namespace {

using Buffers = std::vector<uint32_t>;

std::vector<FusedGroup> groupsOf(const PlanSpec &spec, size_t function = 0) {
  auto loaded = loadPlanFromBytes(spec.build());
  EXPECT_TRUE(loaded.isOk()) << loaded.status().message();
  if (!loaded.isOk())
    return {};
  return findFusionGroups(*loaded->plan().programs()->Get(0), function);
}

/// c = tanh((x + y) * y) over [4, 8] f32; a and b are intermediates.
struct Chain {
  PlanSpec spec;
  uint32_t x, y, a, b, c;
};
Chain addMulTanh() {
  Chain ch;
  ProgramSpec &p = ch.spec.program();
  ch.x = p.input("x", DType::f32, {4, 8});
  ch.y = p.input("y", DType::f32, {4, 8});
  ch.a = p.buffer("a", DType::f32, {4, 8});
  ch.b = p.buffer("b", DType::f32, {4, 8});
  ch.c = p.buffer("c", DType::f32, {4, 8});
  p.inst(fb::Opcode::Add, {ch.x, ch.y}, ch.a);
  p.inst(fb::Opcode::Mul, {ch.a, ch.y}, ch.b);
  p.inst(fb::Opcode::Tanh, {ch.b}, ch.c);
  p.output("c", ch.c);
  return ch;
}

bool contains(const std::string &text, const std::string &piece) {
  return text.find(piece) != std::string::npos;
}

} // namespace

TEST(Fusion, ChainIsOneGroupWithOnlyItsLiveOutputsStored) {
  Chain ch = addMulTanh();
  auto groups = groupsOf(ch.spec);
  ASSERT_EQ(groups.size(), 1u);
  const FusedGroup &g = groups[0];
  EXPECT_EQ(g.first, 0u);
  EXPECT_EQ(g.count, 3u);
  EXPECT_EQ(g.elements, 32);
  EXPECT_EQ(g.inputs, (Buffers{ch.x, ch.y}));
  EXPECT_EQ(g.outputs, (Buffers{ch.c})); // a and b stay in registers
  EXPECT_EQ(g.kernelName.rfind("megac_fused_", 0), 0u) << g.kernelName;
  EXPECT_TRUE(contains(g.source, "extern \"C\" __global__ void " + g.kernelName +
                                     "(const float* __restrict__ in0, const float* "
                                     "__restrict__ in1, float* out0, long long n)"))
      << g.source;
  EXPECT_TRUE(contains(g.source, "tanhf(")) << g.source;
  std::string kernel = g.source.substr(g.source.find("__global__"));
  EXPECT_FALSE(contains(kernel, "double")) << "f32 math only:\n" << kernel;
  // The name is a hash of the source: the same plan gives the same kernel.
  EXPECT_EQ(groupsOf(addMulTanh().spec)[0].kernelName, g.kernelName);
}

TEST(Fusion, IntermediateReadAfterTheGroupIsStored) {
  Chain ch = addMulTanh();
  ProgramSpec &p = ch.spec.program();
  uint32_t w = p.input("w", DType::f32, {8, 2});
  uint32_t m = p.buffer("m", DType::f32, {4, 2});
  p.inst(fb::Opcode::MatMul, {ch.a, w}, m);
  p.output("m", m);
  auto groups = groupsOf(ch.spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].count, 3u);
  EXPECT_EQ(groups[0].outputs, (Buffers{ch.a, ch.c}));
}

TEST(Fusion, ReadThroughAReshapeAliasCountsAsARead) {
  Chain ch = addMulTanh();
  ProgramSpec &p = ch.spec.program();
  // b viewed as [32] (same bytes), then broadcast: b is observable after the group.
  uint32_t flat = p.buffer("b.flat", DType::f32, {32}, int64_t(p.buffers[ch.b].offset));
  uint32_t wide = p.buffer("wide", DType::f32, {2, 32});
  p.inst(fb::Opcode::Broadcast, {flat}, wide);
  p.output("wide", wide);
  auto groups = groupsOf(ch.spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].outputs, (Buffers{ch.b, ch.c}));
}

TEST(Fusion, StateAndParameterWritesAreStoredAndInPlaceInputsAreNotRestrict) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t acc = p.stateBuffer("grad.w", DType::f32, {16});
  uint32_t w = p.param("w", DType::f32, {16}, fb::InitKind::ones);
  uint32_t d = p.input("d", DType::f32, {16});
  uint32_t e = p.buffer("e", DType::f32, {16});
  p.inst(fb::Opcode::Add, {acc, d}, acc); // accumulate in place: nobody reads acc later
  p.inst(fb::Opcode::Sub, {w, acc}, w);   // in-place parameter update
  p.inst(fb::Opcode::Exp, {d}, e);
  p.output("e", e);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].count, 3u);
  EXPECT_EQ(groups[0].inputs, (Buffers{acc, d, w}));
  EXPECT_EQ(groups[0].outputs, (Buffers{acc, w, e}));
  EXPECT_TRUE(contains(groups[0].source, "(const float* in0, const float* __restrict__ in1, "
                                         "const float* in2, float* out0, float* out1, "
                                         "float* out2, long long n)"))
      << groups[0].source;
}

TEST(Fusion, RewritingALocationInTheGroupStoresOnlyTheLastValue) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {8});
  uint32_t t = p.buffer("t", DType::f32, {8});
  p.inst(fb::Opcode::Exp, {x}, t);
  p.inst(fb::Opcode::Neg, {t}, t);
  p.inst(fb::Opcode::Abs, {t}, t);
  p.output("t", t);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].count, 3u);
  EXPECT_EQ(groups[0].inputs, (Buffers{x}));
  EXPECT_EQ(groups[0].outputs, (Buffers{t}));
  // One store, of the last value.
  const std::string &src = groups[0].source;
  size_t first = src.find("out0[i] =");
  ASSERT_NE(first, std::string::npos) << src;
  EXPECT_EQ(src.find("out0[i] =", first + 1), std::string::npos) << src;
}

TEST(Fusion, NonFusibleOpsCut) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {4, 4});
  uint32_t y = p.input("y", DType::f32, {4, 4});
  uint32_t a = p.buffer("a", DType::f32, {4, 4});
  uint32_t b = p.buffer("b", DType::f32, {4, 4});
  uint32_t m = p.buffer("m", DType::f32, {4, 4});
  uint32_t e = p.buffer("e", DType::f32, {4, 4});
  uint32_t n = p.buffer("n", DType::f32, {4, 4});
  uint32_t wide = p.buffer("wide", DType::f32, {2, 4, 4});
  uint32_t z = p.input("z", DType::f32, {2, 4, 4});
  uint32_t s = p.buffer("s", DType::f32, {2, 4, 4});
  uint32_t r = p.buffer("r", DType::f32, {2, 4, 4});
  p.inst(fb::Opcode::Add, {x, y}, a);
  p.inst(fb::Opcode::Mul, {a, x}, b);
  p.inst(fb::Opcode::MatMul, {b, y}, m);
  p.inst(fb::Opcode::Exp, {m}, e);
  p.inst(fb::Opcode::Neg, {e}, n);
  p.inst(fb::Opcode::Broadcast, {n}, wide);
  p.inst(fb::Opcode::Mul, {wide, z}, s);
  p.inst(fb::Opcode::Sqrt, {s}, r);
  p.output("r", r);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].first, 0u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(groups[0].outputs, (Buffers{b}));
  EXPECT_EQ(groups[1].first, 3u);
  EXPECT_EQ(groups[1].count, 2u);
  EXPECT_EQ(groups[1].inputs, (Buffers{m}));
  EXPECT_EQ(groups[1].outputs, (Buffers{n}));
  EXPECT_EQ(groups[2].first, 6u);
  EXPECT_EQ(groups[2].elements, 32);
  EXPECT_EQ(groups[2].inputs, (Buffers{wide, z}));
  EXPECT_EQ(groups[2].outputs, (Buffers{r}));
}

TEST(Fusion, SingleInstructionsAndIntegerOpsGiveNoGroup) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {4, 4});
  uint32_t e = p.buffer("e", DType::f32, {4, 4});
  uint32_t m = p.buffer("m", DType::f32, {4, 4});
  uint32_t n = p.buffer("n", DType::f32, {4, 4});
  uint32_t i = p.input("i", DType::i64, {4, 4});
  uint32_t j = p.buffer("j", DType::i64, {4, 4});
  uint32_t k = p.buffer("k", DType::i64, {4, 4});
  p.inst(fb::Opcode::Exp, {x}, e);
  p.inst(fb::Opcode::MatMul, {e, x}, m);
  p.inst(fb::Opcode::Neg, {m}, n);
  p.inst(fb::Opcode::Add, {i, i}, j); // integer math is not fused
  p.inst(fb::Opcode::Mul, {j, i}, k);
  p.output("n", n);
  p.output("k", k);
  EXPECT_TRUE(groupsOf(spec).empty());
}

TEST(Fusion, DifferentElementCountsCut) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {4, 8});
  uint32_t y = p.input("y", DType::f32, {4, 8});
  uint32_t z = p.input("z", DType::f32, {2, 2});
  uint32_t a = p.buffer("a", DType::f32, {4, 8});
  uint32_t b = p.buffer("b", DType::f32, {4, 8});
  uint32_t c = p.buffer("c", DType::f32, {2, 2});
  uint32_t d = p.buffer("d", DType::f32, {2, 2});
  p.inst(fb::Opcode::Add, {x, y}, a);
  p.inst(fb::Opcode::Mul, {a, y}, b);
  p.inst(fb::Opcode::Neg, {z}, c);
  p.inst(fb::Opcode::Exp, {c}, d);
  p.output("b", b);
  p.output("d", d);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(groups[0].elements, 32);
  EXPECT_EQ(groups[1].first, 2u);
  EXPECT_EQ(groups[1].elements, 4);
  EXPECT_EQ(groups[1].outputs, (Buffers{d}));
}

TEST(Fusion, LongRunsAreSplitAt64Instructions) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t v = p.input("x", DType::f32, {8});
  for (int k = 0; k < 70; ++k) {
    uint32_t out = p.buffer("t" + std::to_string(k), DType::f32, {8});
    p.inst(k % 2 ? fb::Opcode::Neg : fb::Opcode::Abs, {v}, out);
    v = out;
  }
  p.output("y", v);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].count, 64u);
  EXPECT_EQ(groups[1].first, 64u);
  EXPECT_EQ(groups[1].count, 6u);
  EXPECT_EQ(groups[0].outputs, (Buffers{groups[1].inputs[0]})); // t63 crosses the cut
}

TEST(Fusion, AStoreOverlappingAnInputAtAnotherOffsetCuts) {
  // t = tanh(exp(-x)) where t's bytes start halfway into x's: thread i's store of t[i] is
  // x[i + 16], which thread i + 16 may not have loaded yet.
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {32});
  p.buffer("pad", DType::f32, {16}); // t's tail: t overlaps x and nothing else
  uint32_t a = p.buffer("a", DType::f32, {32});
  uint32_t b = p.buffer("b", DType::f32, {32});
  uint32_t t = p.buffer("t", DType::f32, {32}, int64_t(p.buffers[x].offset + 64));
  p.inst(fb::Opcode::Neg, {x}, a);
  p.inst(fb::Opcode::Exp, {a}, b);
  p.inst(fb::Opcode::Tanh, {b}, t);
  p.output("t", t);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(groups[0].outputs, (Buffers{b}));

  // At the very same offset (in place) each thread reads and writes only its element: fused.
  PlanSpec same;
  ProgramSpec &q = same.program();
  x = q.input("x", DType::f32, {32});
  a = q.buffer("a", DType::f32, {32});
  b = q.buffer("b", DType::f32, {32});
  t = q.buffer("t", DType::f32, {32}, int64_t(q.buffers[x].offset));
  q.inst(fb::Opcode::Neg, {x}, a);
  q.inst(fb::Opcode::Exp, {a}, b);
  q.inst(fb::Opcode::Tanh, {b}, t);
  q.output("t", t);
  groups = groupsOf(same);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].count, 3u);
  EXPECT_EQ(groups[0].inputs, (Buffers{x}));
  EXPECT_EQ(groups[0].outputs, (Buffers{t}));
}

TEST(Fusion, ALoadOfBytesTheGroupAlreadyWroteCuts) {
  // m overlaps a at another offset: reading m after a's write needs a's stored bytes.
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {32});
  uint32_t a = p.buffer("a", DType::f32, {32});
  uint32_t m = p.buffer("m", DType::f32, {32}, int64_t(p.buffers[a].offset + 64));
  uint32_t b = p.buffer("b", DType::f32, {32});
  uint32_t c = p.buffer("c", DType::f32, {32});
  p.inst(fb::Opcode::Neg, {x}, a);
  p.inst(fb::Opcode::Exp, {m}, b);
  p.inst(fb::Opcode::Tanh, {b}, c);
  p.output("c", c);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].first, 1u);
  EXPECT_EQ(groups[0].count, 2u);
  EXPECT_EQ(groups[0].inputs, (Buffers{m}));
}

TEST(Fusion, TwoOverlappingStoresCut) {
  // b and c are both function outputs and share half their bytes: their stores would race.
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t x = p.input("x", DType::f32, {32});
  uint32_t b = p.buffer("b", DType::f32, {32});
  uint32_t c = p.buffer("c", DType::f32, {32}, int64_t(p.buffers[b].offset + 64));
  uint32_t d = p.buffer("d", DType::f32, {32});
  p.inst(fb::Opcode::Exp, {x}, b);
  p.inst(fb::Opcode::Neg, {x}, c);
  p.inst(fb::Opcode::Abs, {c}, d);
  p.output("b", b);
  p.output("d", d);
  auto groups = groupsOf(spec);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].first, 1u);
  EXPECT_EQ(groups[0].outputs, (Buffers{c, d}));
}

namespace {

std::vector<std::string> allSources() {
  std::vector<std::string> sources;
  auto add = [&](const PlanSpec &spec) {
    for (const FusedGroup &g : groupsOf(spec))
      sources.push_back(g.source);
  };
  add(addMulTanh().spec);
  size_t count = 0;
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16})
    add(everyOp(d, &count));
  return sources;
}

} // namespace

TEST(Fusion, EveryFusibleOpOnEveryFloatTypeIsOneGroup) {
  for (DType d : {DType::f64, DType::f32, DType::bf16, DType::f16}) {
    size_t count = 0;
    PlanSpec spec = everyOp(d, &count);
    auto groups = groupsOf(spec);
    ASSERT_EQ(groups.size(), 1u) << dtypeName(d);
    EXPECT_EQ(groups[0].count, count) << dtypeName(d);
    EXPECT_EQ(groups[0].inputs.size(), 3u) << dtypeName(d);
    EXPECT_EQ(groups[0].outputs.size(), 2u) << dtypeName(d);
    const std::string &src = groups[0].source;
    if (d == DType::bf16) {
      EXPECT_TRUE(contains(src, "const unsigned short h0 = in0[i];")) << src;
    } else if (d == DType::f64) { // f64 math in double: exp, not expf
      EXPECT_TRUE(contains(src, "exp(v") && !contains(src, "expf(")) << src;
    } else if (d == DType::f32) {
      EXPECT_TRUE(contains(src, "expf(")) << src;
    }
  }
}

TEST(Fusion, NvrtcCompilesEveryGeneratedSourceForSm80AndSm90) {
  std::vector<std::string> sources = allSources();
  ASSERT_EQ(sources.size(), 5u);
  for (const std::string &arch : {std::string("sm_80"), std::string("sm_90")})
    for (const std::string &src : sources) {
      auto cubin = nvrtcCompile(src, "fused", arch);
      ASSERT_TRUE(cubin.isOk()) << cubin.status().message() << "\n" << src;
      ASSERT_GT(cubin->size(), 4u);
      EXPECT_EQ(std::string(cubin->data(), 4), "\x7f"
                                               "ELF")
          << arch;
    }
}

TEST(Fusion, SwigluSiluTimesUpIsOneKernelThatNvrtcCompiles) {
  // SwiGLU's silu(gate) * up: one kernel reading gate and up and storing only the product.
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtypeName(d));
    auto loaded = loadPlanFromBytes(swiglu(d, 4096).build());
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    const fb::Program &program = *loaded->plan().programs()->Get(0);
    auto groups = findFusionGroups(program, 0);
    ASSERT_EQ(groups.size(), 1u);
    const FusedGroup &g = groups[0];
    EXPECT_EQ(g.first, 0u);
    EXPECT_EQ(g.count, 2u);
    EXPECT_EQ(g.elements, 4096);
    auto names = [&](const Buffers &buffers) {
      std::vector<std::string> out;
      for (uint32_t b : buffers)
        out.push_back(program.buffers()->Get(b)->name()->str());
      return out;
    };
    EXPECT_EQ(names(g.inputs), (std::vector<std::string>{"gate", "up"}));
    EXPECT_EQ(names(g.outputs), (std::vector<std::string>{"h"})); // silu(gate) stays in a register
    EXPECT_TRUE(contains(g.source, "// Silu\n") && contains(g.source, "// Mul\n")) << g.source;
    EXPECT_TRUE(contains(g.source, d == DType::f64 ? "exp(-v" : "expf(-v")) << g.source;
    for (const char *arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtcCompile(g.source, g.kernelName, arch);
      ASSERT_TRUE(cubin.isOk()) << arch << ": " << cubin.status().message() << "\n" << g.source;
      EXPECT_EQ(std::string(cubin->data(), 4), "\x7f"
                                               "ELF");
    }
  }
}

TEST(Fusion, NvrtcErrorsCarryTheLog) {
  auto bad = nvrtcCompile("extern \"C\" __global__ void k(float* p) { p[0] = undeclared; }",
                          "broken_kernel", "sm_90");
  ASSERT_FALSE(bad.isOk());
  const std::string &message = bad.status().message();
  EXPECT_TRUE(contains(message, "broken_kernel")) << message;
  EXPECT_TRUE(contains(message, "undeclared")) << message; // from NVRTC's log
  EXPECT_TRUE(contains(message, "error")) << message;
  auto ptx = nvrtcCompile("extern \"C\" __global__ void k() {}", "k", "compute_90");
  ASSERT_FALSE(ptx.isOk());
  EXPECT_TRUE(contains(ptx.status().message(), "sm_XX")) << ptx.status().message();
}

TEST(Fusion, DefaultCacheDirFollowsTheEnvironment) {
  auto saved = [](const char *name) {
    const char *v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  std::optional<std::string> megac = saved("MEGAC_CACHE_DIR"), xdg = saved("XDG_CACHE_HOME"),
                             home = saved("HOME");
  setenv("MEGAC_CACHE_DIR", "/tmp/megac-kernels", 1);
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(defaultKernelCacheDir(), "/tmp/megac-kernels");
  unsetenv("MEGAC_CACHE_DIR");
  EXPECT_EQ(defaultKernelCacheDir(), "/tmp/xdg/megac/nvrtc");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(defaultKernelCacheDir(), "/home/someone/.cache/megac/nvrtc");
  auto restore = [](const char *name, const std::optional<std::string> &v) {
    if (v)
      setenv(name, v->c_str(), 1);
    else
      unsetenv(name);
  };
  restore("MEGAC_CACHE_DIR", megac);
  restore("XDG_CACHE_HOME", xdg);
  restore("HOME", home);
}

TEST(Fusion, TheGpuTestPlansFuseWholeAndTheirReferenceRuns) {
  // cuda_fusion_gpu_test runs these on a device; here: each is one group of all its
  // instructions, the CPU reference accepts every instruction, and NVRTC compiles the kernel.
  struct Case {
    std::string name;
    PlanSpec spec;
    std::map<std::string, InputRange> ranges;
  };
  std::vector<Case> cases;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16})
    cases.push_back({std::string("simple ") + dtypeName(d), simpleOps(d, 1000), simpleRanges()});
  for (DType d : {DType::f32, DType::f64, DType::bf16})
    cases.push_back({std::string("transcendental ") + dtypeName(d), transcendentals(d, 1000), {}});
  cases.push_back({"logical", logicalOpsAndCasts(1000), {{"d", {-3, 3}}}});
  cases.push_back({"in place", accumulateInPlace(1000), {}});
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    auto loaded = loadPlanFromBytes(c.spec.build());
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    const fb::Program &program = *loaded->plan().programs()->Get(0);
    const fb::Function &fn = *program.functions()->Get(0);
    auto groups = findFusionGroups(program, 0);
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].count, fn.instructions()->size());
    EXPECT_EQ(groups[0].outputs.size(), fn.outputs()->size()); // exactly the function outputs
    std::vector<uint8_t> arena(program.arena_bytes());
    fillInputs(program, arena, c.ranges);
    for (const fb::Instruction *inst : *fn.instructions()) {
      Status s = runReference(program, *inst, arena.data());
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    // The inputs' ranges keep every value finite (no log or sqrt of a negative).
    for (const fb::Port *port : *fn.outputs()) {
      const fb::Buffer *buf = program.buffers()->Get(port->buffer());
      DType dtype = static_cast<DType>(buf->dtype());
      int64_t n = int64_t(buf->bytes() / dtypeSize(dtype));
      const uint8_t *p = arena.data() + buf->offset();
      for (int64_t i = 0; i < n; ++i) {
        double v = dtype == DType::f64    ? reinterpret_cast<const double *>(p)[i]
                   : dtype == DType::f32  ? reinterpret_cast<const float *>(p)[i]
                   : dtype == DType::bf16 ? bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[i])
                   : dtype == DType::f16  ? halfToFloat(reinterpret_cast<const uint16_t *>(p)[i])
                                          : p[i];
        ASSERT_TRUE(std::isfinite(v)) << port->name()->str() << " element " << i;
      }
    }
    auto cubin = nvrtcCompile(groups[0].source, groups[0].kernelName, "sm_90");
    EXPECT_TRUE(cubin.isOk()) << cubin.status().message();
  }
}
