// GEMMs (the executor's Linear and MatMul), attention (Attention, AttentionGrad) and the fixed
// cost of one instruction, and the timing of single instructions they share with the other
// groups.
#include "runtime/calibrate/Benches.h"

#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace megac::runtime::calibrate {
namespace {

struct GemmShape {
  int64_t m, n, k;
  DType dtype;
};

/// The CPU sweep: squares, then the shapes of a transformer's linears at 2048 tokens (hidden
/// 64, 256, 1024): forward and input gradient (m = tokens) and weight gradient (k = tokens),
/// a vocabulary projection, short (128-token) and narrow (k = 128) products at hidden 512, and
/// bf16 on a subset (the CPU runtime widens it to f32).
std::vector<GemmShape> cpuShapes(bool quick) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  if (quick)
    return {{128, 128, 128, f32}, {512, 512, 512, f32},  {2048, 256, 64, f32},
            {64, 64, 2048, f32},  {256, 256, 256, bf16}, {2048, 64, 256, bf16}};
  std::vector<GemmShape> shapes = {
      // Linear at 2048 tokens: forward and input gradient of hidden 64, 256 and 1024 layers
      {2048, 64, 64, f32},
      {2048, 256, 64, f32},
      {2048, 64, 256, f32},
      {2048, 256, 256, f32},
      {2048, 1024, 256, f32},
      {2048, 256, 1024, f32},
      // MatMul: weight gradients (k = tokens)
      {64, 64, 2048, f32},
      {256, 256, 2048, f32},
      {256, 1024, 2048, f32},
      {1024, 256, 2048, f32},
      // a vocabulary projection and a skinny one
      {2048, 4096, 256, f32},
      {4096, 64, 256, f32},
      // short micro-batches (128 tokens) and narrow products (k = 128: a GQA key/value or a
      // tensor-parallel slice's input gradient, 128-token weight gradients) at hidden 512, which
      // OpenBLAS splits over threads differently from the 2048-token shapes (on the 2-core VM,
      // with the threads placed as megac places them: 1.8-1.9x one thread)
      {128, 512, 512, f32},
      {128, 2048, 512, f32},
      {128, 512, 2048, f32},
      {512, 512, 128, f32},
      {512, 2048, 128, f32},
      {2048, 512, 128, f32},
      // bf16 (widened to f32 by the CPU executor)
      {256, 256, 256, bf16},
      {1024, 1024, 1024, bf16},
      {2048, 64, 64, bf16},
      {2048, 256, 256, bf16},
      {2048, 1024, 256, bf16},
      {256, 1024, 2048, bf16}};
  for (int64_t s : {2048, 1024, 512, 256, 128, 64})
    shapes.insert(shapes.begin(), {s, s, s, f32});
  return shapes;
}

/// The GPU sweep: squares, and the linears of GPT-3-like layers (hidden 1024 to 8192) at 8192
/// tokens in bf16, a few in fp16 (for its peak) and fp32.
std::vector<GemmShape> cudaShapes(bool quick) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  if (quick)
    return {{1024, 1024, 1024, bf16}, {4096, 4096, 4096, bf16}, {4096, 4096, 4096, f32}};
  std::vector<GemmShape> shapes;
  for (int64_t s : {256, 512, 1024, 2048, 4096, 8192})
    shapes.push_back({s, s, s, bf16});
  const int64_t t = 8192;
  for (int64_t h : {1024, 2048, 4096, 8192}) {
    shapes.push_back({t, 3 * h, h, bf16}); // qkv
    shapes.push_back({t, h, h, bf16});     // attention output
    shapes.push_back({t, 4 * h, h, bf16}); // mlp up
    shapes.push_back({t, h, 4 * h, bf16}); // mlp down
    shapes.push_back({4 * h, h, t, bf16}); // a weight gradient
  }
  const std::vector<GemmShape> more = {
      {8192, 64, 4096, bf16},  {8192, 50304, 2048, bf16}, // skinny; a vocabulary projection
      {4096, 4096, 4096, f16}, {8192, 8192, 8192, f16},   {1024, 1024, 1024, f32},
      {4096, 4096, 4096, f32}, {8192, 8192, 8192, f32},   {t, 4 * 4096, 4096, f32}};
  shapes.insert(shapes.end(), more.begin(), more.end());
  return shapes;
}

} // namespace

StatusOr<std::vector<double>> timeInstructions(const BenchContext &ctx, BenchPlan &plan,
                                               const std::vector<BenchInstruction> &instructions) {
  BenchProgram &p = plan.program();
  for (size_t i = 0; i < instructions.size(); ++i) {
    p.function("one." + std::to_string(i), {instructions[i]});
    if (ctx.repeat > 1)
      p.function("many." + std::to_string(i),
                 std::vector<BenchInstruction>(size_t(ctx.repeat), instructions[i]));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                   loadBench(plan, ctx.backend, ctx.allowTf32, 0, nullptr));
  std::vector<double> seconds;
  for (size_t i = 0; i < instructions.size(); ++i) {
    std::string one = "one." + std::to_string(i), many = "many." + std::to_string(i);
    ASSIGN_OR_RETURN(double t1, timeCall(
                                    *ctx.sync, [&] { return executor->run(one); }, ctx.policy));
    if (ctx.repeat <= 1) {
      seconds.push_back(t1);
      continue;
    }
    ASSIGN_OR_RETURN(double tn, timeCall(
                                    *ctx.sync, [&] { return executor->run(many); }, ctx.policy));
    double per = (tn - t1) / (ctx.repeat - 1);
    seconds.push_back(per > 0 ? per : tn / ctx.repeat); // noise larger than the difference
  }
  return seconds;
}

Status benchInstructionOverhead(const BenchContext &ctx, Results &out, std::string &detail) {
  // A chain of 1-element multiplications of ones (no overflow, no denormals).
  constexpr int kChain = 256;
  BenchPlan plan;
  BenchProgram &p = plan.program();
  uint32_t prev = p.param(DType::f32, {1}, Fill::ones);
  std::vector<BenchInstruction> chain;
  for (int i = 0; i < kChain; ++i) {
    uint32_t next = p.temp(DType::f32, {1});
    chain.push_back({fb::Opcode::Mul, {prev, prev}, {next}, fb::Attrs::NONE, nullptr});
    prev = next;
  }
  p.function("one", {chain[0]});
  p.function("chain", chain);
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                   loadBench(plan, ctx.backend, ctx.allowTf32, 0, nullptr));
  ASSIGN_OR_RETURN(double tChain,
                   timeCall(
                       *ctx.sync, [&] { return executor->run("chain"); }, ctx.policy));
  char text[160];
  if (ctx.backend == Backend::cuda) {
    // Each run synchronizes the stream: the difference to a run of one is per launch.
    ASSIGN_OR_RETURN(double tOne, timeCall(
                                      *ctx.sync, [&] { return executor->run("one"); }, ctx.policy));
    out.instructionSeconds = std::max((tChain - tOne) / (kChain - 1), 1e-9);
    std::snprintf(text, sizeof text,
                  "%.2f us per instruction (a 1-element Mul, back to back on the stream; a "
                  "synchronized run of one: %.1f us)",
                  out.instructionSeconds * 1e6, tOne * 1e6);
  } else {
    out.instructionSeconds = tChain / kChain;
    // The kernel alone, called directly, for comparison.
    float a = 1, b = 1, c = 0;
    const int64_t shape[] = {1};
    cpu::TensorRef x{DType::f32, shape, &a}, y{DType::f32, shape, &b}, z{DType::f32, shape, &c};
    ASSIGN_OR_RETURN(
        double kernel,
        timeCall(
            *ctx.sync, [&] { return cpu::binary(cpu::BinaryOp::Mul, x, y, z); }, ctx.policy));
    std::snprintf(text, sizeof text,
                  "%.3f us per instruction through the executor (a 1-element Mul; %.3f us of it "
                  "the kernel called directly)",
                  out.instructionSeconds * 1e6, kernel * 1e6);
  }
  detail = text;
  return Status::ok();
}

Status benchGemm(const BenchContext &ctx, Results &out) {
  std::vector<GemmShape> shapes =
      ctx.backend == Backend::cuda ? cudaShapes(ctx.quick) : cpuShapes(ctx.quick);
  for (const GemmShape &g : shapes) {
    // A weight gradient (k the tokens) is the MatMul of a transposed activation gradient with
    // the activations; the forward and the input gradient are Linear (x·Wᵀ).
    bool matmul = g.k > std::max(g.m, g.n);
    BenchPlan plan;
    BenchProgram &p = plan.program();
    BenchInstruction i;
    if (matmul)
      i = {fb::Opcode::MatMul,
           {p.param(g.dtype, {g.m, g.k}), p.param(g.dtype, {g.k, g.n})},
           {p.temp(g.dtype, {g.m, g.n})},
           fb::Attrs::NONE,
           nullptr};
    else
      i = {fb::Opcode::Linear,
           {p.param(g.dtype, {g.m, g.k}), p.param(g.dtype, {g.n, g.k})},
           {p.temp(g.dtype, {g.m, g.n})},
           fb::Attrs::NONE,
           nullptr};
    StatusOr<std::vector<double>> seconds = timeInstructions(ctx, plan, {i});
    if (!seconds.isOk())
      return Status::error("calibrate: gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) +
                           "x" + std::to_string(g.k) + " " + dtypeName(g.dtype) + ": " +
                           seconds.status().message());
    double flops = 2.0 * double(g.m) * double(g.n) * double(g.k);
    out.gemm.push_back({g.m, g.n, g.k, int64_t(dtypeSize(g.dtype)), dtypeName(g.dtype),
                        matmul ? "matmul" : "linear", flops / (*seconds)[0]});
  }
  return Status::ok();
}

Status benchAttention(const BenchContext &ctx, Results &out) {
  struct Shape {
    int64_t batchHeads, seq, headDim;
  };
  std::vector<Shape> shapes;
  if (ctx.backend == Backend::cuda)
    shapes = ctx.quick ? std::vector<Shape>{{32, 1024, 128}, {64, 1024, 64}}
                       : std::vector<Shape>{{64, 1024, 64},  {32, 1024, 128}, {48, 2048, 64},
                                            {16, 2048, 128}, {8, 4096, 128},  {4, 8192, 128}};
  else
    shapes = ctx.quick
                 ? std::vector<Shape>{{4, 128, 32}, {4, 256, 64}}
                 : std::vector<Shape>{{8, 128, 64},  {8, 256, 64}, {16, 512, 64}, {4, 1024, 64},
                                      {16, 128, 32}, {8, 512, 32}, {8, 256, 128}};
  for (const Shape &s : shapes) {
    BenchPlan plan;
    BenchProgram &p = plan.program();
    std::vector<int64_t> shape = {1, s.seq, s.batchHeads, s.headDim};
    DType t = ctx.activation;
    uint32_t q = p.param(t, shape), k = p.param(t, shape), v = p.param(t, shape);
    uint32_t dout = p.param(t, shape);
    double scale = 1.0 / std::sqrt(double(s.headDim));
    AttrsFn attrs = [=](flatbuffers::FlatBufferBuilder &b) {
      return fb::CreateAttentionAttrs(b, true, scale).Union();
    };
    BenchInstruction forward = {
        fb::Opcode::Attention, {q, k, v}, {p.temp(t, shape)}, fb::Attrs::AttentionAttrs, attrs};
    BenchInstruction backward = {fb::Opcode::AttentionGrad,
                                 {dout, q, k, v},
                                 {p.temp(t, shape), p.temp(t, shape), p.temp(t, shape)},
                                 fb::Attrs::AttentionAttrs,
                                 attrs};
    StatusOr<std::vector<double>> seconds = timeInstructions(ctx, plan, {forward, backward});
    if (!seconds.isOk())
      return Status::error("calibrate: attention (batch x heads " + std::to_string(s.batchHeads) +
                           ", seq " + std::to_string(s.seq) + ", head dim " +
                           std::to_string(s.headDim) + "): " + seconds.status().message());
    out.attention.push_back({s.batchHeads, s.seq, s.headDim, true, (*seconds)[0], (*seconds)[1]});
  }
  return Status::ok();
}

} // namespace megac::runtime::calibrate
