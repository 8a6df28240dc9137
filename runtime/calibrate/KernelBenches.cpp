// Memory-bound kernels one class at a time, and streaming-copy bandwidth by working set, through
// the executor's own opcodes.
#include "runtime/calibrate/Benches.h"

#include <cmath>
#include <cstdio>

namespace megac::runtime::calibrate {
namespace {

constexpr int64_t kCols = 1024;               // the hidden size of the 2-d operands [rows, kCols]
constexpr int64_t kHeads = 16, kHeadDim = 64; // rope: kHeads * kHeadDim == kCols

BenchInstruction inst(fb::Opcode op, std::vector<uint32_t> in, std::vector<uint32_t> out,
                      fb::Attrs type = fb::Attrs::NONE, AttrsFn attrs = nullptr) {
  return {op, std::move(in), std::move(out), type, std::move(attrs)};
}

AttrsFn axis(int64_t a) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateAxisAttrs(b, a).Union(); };
}
AttrsFn norm() {
  return [](flatbuffers::FlatBufferBuilder &b) { return fb::CreateNormAttrs(b, 1e-5).Union(); };
}
AttrsFn gelu() { // exact (erf) GELU: the zoo models' default
  return [](flatbuffers::FlatBufferBuilder &b) { return fb::CreateGeluAttrs(b, false).Union(); };
}
AttrsFn crossEntropy() {
  return [](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateCrossEntropyAttrs(b, false, 0).Union();
  };
}

/// `rows` token ids in [0, vocab), spread over the table.
uint32_t ids(BenchProgram &p, int64_t rows, int64_t vocab) {
  std::vector<double> values(size_t(rows), 0.0);
  for (int64_t i = 0; i < rows; ++i)
    values[size_t(i)] = double((i * 7919) % vocab);
  return p.constant(DType::i64, {rows}, constantBytes(DType::i64, values));
}

/// The instruction of `kernel` on [rows, kCols] operands of `act` (adamw and global_norm: f32,
/// as the optimizer keeps fp32 master weights; cast: f32 to bf16).
std::optional<BenchInstruction> build(BenchProgram &p, const std::string &kernel, int64_t rows,
                                      DType act) {
  using O = fb::Opcode;
  using A = fb::Attrs;
  const std::vector<int64_t> x = {rows, kCols};
  if (kernel == "elementwise")
    return inst(O::Add, {p.param(act, x), p.param(act, x)}, {p.temp(act, x)});
  if (kernel == "copy")
    return inst(O::Copy, {p.param(act, x)}, {p.temp(act, x)});
  if (kernel == "transpose")
    return inst(O::Transpose, {p.param(act, x)}, {p.temp(act, {kCols, rows})}, A::TransposeAttrs,
                [](flatbuffers::FlatBufferBuilder &b) {
                  std::vector<int64_t> perm = {1, 0};
                  return fb::CreateTransposeAttrsDirect(b, &perm).Union();
                });
  if (kernel == "broadcast") // a bias over the tokens
    return inst(O::Broadcast, {p.param(act, {kCols})}, {p.temp(act, x)});
  if (kernel == "cast")
    return inst(O::Cast, {p.param(DType::f32, x)}, {p.temp(DType::bf16, x)});
  if (kernel == "softmax")
    return inst(O::Softmax, {p.param(act, x)}, {p.temp(act, x)}, A::AxisAttrs, axis(1));
  if (kernel == "softmax_grad")
    return inst(O::SoftmaxGrad, {p.param(act, x), p.param(act, x)}, {p.temp(act, x)}, A::AxisAttrs,
                axis(1));
  if (kernel == "gelu")
    return inst(O::Gelu, {p.param(act, x)}, {p.temp(act, x)}, A::GeluAttrs, gelu());
  if (kernel == "gelu_grad")
    return inst(O::GeluGrad, {p.param(act, x), p.param(act, x)}, {p.temp(act, x)}, A::GeluAttrs,
                gelu());
  if (kernel == "silu")
    return inst(O::Silu, {p.param(act, x)}, {p.temp(act, x)});
  if (kernel == "layer_norm")
    return inst(O::LayerNorm, {p.param(act, x), p.param(act, {kCols}), p.param(act, {kCols})},
                {p.temp(act, x)}, A::NormAttrs, norm());
  if (kernel == "layer_norm_grad")
    return inst(O::LayerNormGrad, {p.param(act, x), p.param(act, x), p.param(act, {kCols})},
                {p.temp(act, x), p.temp(act, {kCols}), p.temp(act, {kCols})}, A::NormAttrs, norm());
  if (kernel == "rms_norm")
    return inst(O::RmsNorm, {p.param(act, x), p.param(act, {kCols})}, {p.temp(act, x)},
                A::NormAttrs, norm());
  if (kernel == "rms_norm_grad")
    return inst(O::RmsNormGrad, {p.param(act, x), p.param(act, x), p.param(act, {kCols})},
                {p.temp(act, x), p.temp(act, {kCols})}, A::NormAttrs, norm());
  if (kernel == "reduce") // a bias gradient: the sum over the tokens
    return inst(O::Reduce, {p.param(act, x)}, {p.temp(act, {kCols})}, A::ReduceAttrs,
                [](flatbuffers::FlatBufferBuilder &b) {
                  std::vector<int64_t> axes = {0};
                  return fb::CreateReduceAttrsDirect(b, fb::ReduceKind::sum, &axes).Union();
                });
  if (kernel == "embedding") // a table of as many rows as tokens looked up
    return inst(O::Embedding, {p.param(act, x), ids(p, rows, rows)}, {p.temp(act, x)});
  if (kernel == "embedding_grad")
    return inst(O::EmbeddingGrad, {p.param(act, x), ids(p, rows, rows)}, {p.temp(act, x)});
  if (kernel == "cross_entropy")
    return inst(O::CrossEntropy, {p.param(act, x), ids(p, rows, kCols)}, {p.temp(act, {rows})},
                A::CrossEntropyAttrs, crossEntropy());
  if (kernel == "cross_entropy_grad")
    return inst(O::CrossEntropyGrad, {p.param(act, {rows}), p.param(act, x), ids(p, rows, kCols)},
                {p.temp(act, x)}, A::CrossEntropyAttrs, crossEntropy());
  if (kernel == "adamw") { // in place, as the optimizer step runs
    uint32_t param = p.param(DType::f32, x), grad = p.param(DType::f32, x);
    uint32_t m = p.param(DType::f32, x), v = p.param(DType::f32, x, Fill::positive);
    uint32_t lr = p.constant(DType::f32, {}, constantBytes(DType::f32, {1e-3}));
    uint32_t step = p.constant(DType::i64, {}, constantBytes(DType::i64, {1}));
    return inst(O::AdamW, {param, grad, m, v, lr, step}, {param, m, v}, A::AdamWAttrs,
                [](flatbuffers::FlatBufferBuilder &b) {
                  return fb::CreateAdamWAttrs(b, 0.9, 0.999, 1e-8, 0.01).Union();
                });
  }
  if (kernel == "global_norm") { // over four gradients, as one instruction
    std::vector<uint32_t> in;
    for (int i = 0; i < 4; ++i)
      in.push_back(p.param(DType::f32, {rows, kCols / 4}));
    return inst(O::GlobalNorm, in, {p.temp(DType::f32, {})});
  }
  if (kernel == "dropout") {
    uint32_t seed = p.constant(DType::i64, {}, constantBytes(DType::i64, {1234}));
    return inst(O::Dropout, {p.param(act, x), seed}, {p.temp(act, x)}, A::DropoutAttrs,
                [](flatbuffers::FlatBufferBuilder &b) {
                  return fb::CreateDropoutAttrs(b, 0.1, 0).Union();
                });
  }
  if (kernel == "rope") {
    std::vector<int64_t> shape = {1, rows, kHeads, kHeadDim}, table = {rows, 1, kHeadDim};
    return inst(O::Rope, {p.param(act, shape), p.param(act, table), p.param(act, table)},
                {p.temp(act, shape)});
  }
  return std::nullopt;
}

std::string bytesText(double bytes) {
  char text[32];
  if (bytes >= 1 << 20)
    std::snprintf(text, sizeof text, "%.0f MiB", bytes / (1 << 20));
  else
    std::snprintf(text, sizeof text, "%.0f KiB", bytes / 1024);
  return text;
}

} // namespace

const std::vector<std::string> &kernelClassNames() {
  // clang-format off
  static const std::vector<std::string> names = {
      "elementwise", "copy", "transpose", "broadcast", "cast", "softmax", "softmax_grad", "gelu",
      "gelu_grad", "silu", "layer_norm", "layer_norm_grad", "rms_norm", "rms_norm_grad", "reduce",
      "embedding", "embedding_grad", "cross_entropy", "cross_entropy_grad", "adamw", "global_norm",
      "dropout", "rope"};
  // clang-format on
  return names;
}

StatusOr<BenchInstruction> kernelInstruction(BenchProgram &program, const std::string &kernel,
                                             double targetBytes, DType activation) {
  // Bytes are affine in the rows: measure one and two rows on a scratch program, then solve.
  BenchProgram one, two;
  std::optional<BenchInstruction> a = build(one, kernel, 1, activation);
  std::optional<BenchInstruction> b = build(two, kernel, 2, activation);
  if (!a || !b)
    return Status::error("calibrate: unknown kernel class '" + kernel + "'");
  double perRow = two.bytesOf(*b) - one.bytesOf(*a), fixed = one.bytesOf(*a) - perRow;
  int64_t rows = std::max<int64_t>(1, std::llround((targetBytes - fixed) / perRow));
  return *build(program, kernel, rows, activation);
}

Status benchKernels(const BenchContext &ctx, Results &out) {
  // In the last-level cache, and well beyond it (DRAM / HBM); the CPU also midway (L3).
  std::vector<double> sizes;
  if (ctx.backend == Backend::cuda)
    sizes = ctx.quick ? std::vector<double>{1 << 20, 64 << 20}
                      : std::vector<double>{1 << 20, 16 << 20, 256 << 20};
  else
    sizes = ctx.quick ? std::vector<double>{256 << 10, 16 << 20}
                      : std::vector<double>{256 << 10, 4 << 20, 64 << 20};
  for (const std::string &kernel : kernelClassNames())
    for (double target : sizes) {
      BenchPlan plan;
      ASSIGN_OR_RETURN(BenchInstruction i,
                       kernelInstruction(plan.program(), kernel, target, ctx.activation));
      double bytes = plan.program().bytesOf(i);
      StatusOr<std::vector<double>> seconds = timeInstructions(ctx, plan, {i});
      if (!seconds.isOk())
        return Status::error("calibrate: kernel " + kernel + " at " + bytesText(target) + ": " +
                             seconds.status().message());
      out.kernels.push_back({kernel, bytes, (*seconds)[0]});
    }
  return Status::ok();
}

Status benchBandwidth(const BenchContext &ctx, Results &out) {
  // Working sets (bytes read + written) from the first cache level to far past the last.
  double first = ctx.backend == Backend::cuda ? 64 << 10 : 16 << 10;
  double last =
      ctx.backend == Backend::cuda ? double(int64_t(2) << 30) : (ctx.quick ? 64 << 20 : 256 << 20);
  double step = ctx.backend == Backend::cuda || ctx.quick ? 4 : 2;
  for (double set = first; set <= last; set *= step) {
    BenchPlan plan;
    BenchProgram &p = plan.program();
    int64_t n = std::max<int64_t>(1, int64_t(set / 2) / 4);
    BenchInstruction copy =
        inst(fb::Opcode::Copy, {p.param(DType::f32, {n}, Fill::ones)}, {p.temp(DType::f32, {n})});
    StatusOr<std::vector<double>> seconds = timeInstructions(ctx, plan, {copy});
    if (!seconds.isOk())
      return Status::error("calibrate: streaming copy of " + bytesText(set) + ": " +
                           seconds.status().message());
    double bytes = p.bytesOf(copy);
    out.bandwidth.push_back({bytes, bytes / (*seconds)[0]});
  }
  return Status::ok();
}

} // namespace megac::runtime::calibrate
