// Plans for the fusion tests, shared by the unit test (grouping, NVRTC, the CPU reference runs)
// and the GPU test (the fused kernels against that reference), plus the reference itself: the
// CPU kernels run one instruction at a time on a host arena, as the CPU executor runs them.
#pragma once

#include "runtime/cpu/Kernels.h"
#include "runtime/exec/CpuHandlers.h"
#include "support/Float16.h"

#include "tests/unit/runtime/PlanBuilder.h"

#include <map>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime::testing {

using fb::Opcode;

// ---- The unfused reference: the CPU kernels, as the CPU executor calls them -----------------

inline cpu::TensorRef arenaRef(const fb::Program &program, uint32_t b, uint8_t *arena) {
  const fb::Buffer *buf = program.buffers()->Get(b);
  return {static_cast<DType>(buf->dtype()),
          std::span<const int64_t>(buf->shape()->data(), buf->shape()->size()),
          arena + buf->offset()};
}

inline Status runReference(const fb::Program &program, const fb::Instruction &inst,
                           uint8_t *arena) {
  std::vector<cpu::TensorRef> in, out;
  for (uint32_t b : *inst.inputs())
    in.push_back(arenaRef(program, b, arena));
  for (uint32_t b : *inst.outputs())
    out.push_back(arenaRef(program, b, arena));
  // The CPU executor's handler: math on bf16/f16 runs the f32 kernel on widened inputs and
  // rounds (cpu::computeInF32).
  return exec::runCpuInstruction({inst, in, out, nullptr, 0});
}

/// Fills `n` elements of `dtype` at `p` with seeded values in [lo, hi) (i1: 0 or 1).
inline void fillRandom(uint8_t *p, DType dtype, int64_t n, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i) {
    double v = dist(gen);
    switch (dtype) {
    case DType::f64:
      reinterpret_cast<double *>(p)[i] = v;
      break;
    case DType::f32:
      reinterpret_cast<float *>(p)[i] = static_cast<float>(v);
      break;
    case DType::bf16:
      reinterpret_cast<uint16_t *>(p)[i] = floatToBf16(static_cast<float>(v));
      break;
    case DType::f16:
      reinterpret_cast<uint16_t *>(p)[i] = floatToHalf(static_cast<float>(v));
      break;
    default:
      p[i] = gen() & 1u;
      break;
    }
  }
}

struct InputRange {
  double lo = -1, hi = 1;
};

inline constexpr int64_t kN = 100003; // not a multiple of the block size

/// Simple ops whose results both sides round correctly, on `dtype`: the fused kernel must give
/// the CPU's bits. Mul then Add (and Sub) checks no FMA is contracted across two ops.
inline PlanSpec simpleOps(DType dtype, int64_t n = kN) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<int64_t> shape{n};
  uint32_t x = p.input("x", dtype, shape), y = p.input("y", dtype, shape);
  uint32_t z = p.input("z", dtype, shape);
  int k = 0;
  auto fresh = [&](DType d) { return p.buffer("t" + std::to_string(k++), d, shape); };
  auto op = [&](Opcode o, std::vector<uint32_t> in, DType d) {
    uint32_t out = fresh(d);
    p.inst(o, std::move(in), out);
    return out;
  };
  uint32_t prod = op(Opcode::Mul, {x, y}, dtype);
  uint32_t fmaLike = op(Opcode::Add, {prod, z}, dtype); // (x*y) rounded, then + z
  uint32_t fmsLike = op(Opcode::Sub, {z, prod}, dtype); // z - (x*y) rounded
  uint32_t quot = op(Opcode::Div, {fmaLike, y}, dtype); // y in [0.5, 2): no division by 0
  uint32_t neg = op(Opcode::Neg, {quot}, dtype);
  uint32_t mx = op(Opcode::Max, {neg, fmsLike}, dtype);
  uint32_t mn = op(Opcode::Min, {mx, x}, dtype);
  uint32_t ab = op(Opcode::Abs, {mn}, dtype);
  uint32_t sq = op(Opcode::Sqrt, {ab}, dtype);
  uint32_t rs = op(Opcode::Rsqrt, {y}, dtype);
  uint32_t relu = op(Opcode::Relu, {op(Opcode::Sub, {sq, rs}, dtype)}, dtype);
  uint32_t lt = fresh(DType::i1);
  p.inst(Opcode::Compare, {x, z}, lt, "", fb::Attrs::CompareAttrs,
         compareAttrs(fb::ComparePredicate::lt));
  uint32_t picked = op(Opcode::Where, {lt, relu, prod}, dtype);
  uint32_t narrow = op(Opcode::Cast, {picked}, DType::bf16);
  uint32_t wide = op(Opcode::Cast, {narrow}, dtype);
  uint32_t last = op(Opcode::Add, {wide, op(Opcode::Mul, {picked, fmsLike}, dtype)}, dtype);
  p.output("prod", prod); // an intermediate that is also stored
  p.output("lt", lt);
  p.output("last", last);
  return spec;
}

inline std::map<std::string, InputRange> simpleRanges() {
  return {{"x", {-2, 2}}, {"y", {0.5, 2}}, {"z", {-2, 2}}};
}

/// Transcendental ops on `dtype`: exp, log, tanh, erf, sigmoid, pow, sin, cos, gelu and its
/// gradient in both forms. Every result is stored (a function output).
inline PlanSpec transcendentals(DType dtype, int64_t n = kN) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<int64_t> shape{n};
  uint32_t x = p.input("x", dtype, shape), y = p.input("y", dtype, shape);
  int k = 0;
  auto op = [&](Opcode o, std::vector<uint32_t> in, bool output = true,
                std::optional<bool> geluTanh = std::nullopt) {
    uint32_t out = p.buffer("t" + std::to_string(k++), dtype, shape);
    if (geluTanh)
      p.inst(o, std::move(in), out, "", fb::Attrs::GeluAttrs, geluAttrs(*geluTanh));
    else
      p.inst(o, std::move(in), out);
    if (output)
      p.output(p.buffers[out].name, out);
    return out;
  };
  uint32_t e = op(Opcode::Exp, {x}); // [0.37, 2.7]
  uint32_t l = op(Opcode::Log, {e}); // back to x, up to rounding
  uint32_t t = op(Opcode::Tanh, {op(Opcode::Mul, {e, y}, false)});
  op(Opcode::Erf, {t});
  op(Opcode::Sigmoid, {l});
  op(Opcode::Pow, {e, y});
  op(Opcode::Sin, {op(Opcode::Mul, {x, y}, false)});
  op(Opcode::Cos, {x});
  uint32_t g = op(Opcode::Gelu, {t}, true, false);
  uint32_t gt = op(Opcode::Gelu, {y}, true, true);
  op(Opcode::GeluGrad, {g, x}, true, false);
  op(Opcode::GeluGrad, {gt, y}, true, true);
  return spec;
}

/// i1 logic and casts between every value type; input d is f64 in [-3, 3).
inline PlanSpec logicalOpsAndCasts(int64_t n = kN) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<int64_t> shape{n};
  uint32_t a = p.input("a", DType::i1, shape), b = p.input("b", DType::i1, shape);
  uint32_t d = p.input("d", DType::f64, shape);
  int k = 0;
  auto op = [&](Opcode o, std::vector<uint32_t> in, DType dt) {
    uint32_t out = p.buffer("t" + std::to_string(k++), dt, shape);
    p.inst(o, std::move(in), out);
    return out;
  };
  uint32_t na = op(Opcode::Not, {a}, DType::i1);
  uint32_t both = op(Opcode::And, {na, b}, DType::i1);
  uint32_t either = op(Opcode::Or, {both, a}, DType::i1);
  uint32_t asFloat = op(Opcode::Cast, {either}, DType::f32); // 1 or 0
  uint32_t asBf16 = op(Opcode::Cast, {d}, DType::bf16);      // f64 -> float -> bf16
  uint32_t asHalf = op(Opcode::Cast, {asBf16}, DType::f16);
  uint32_t asF32 = op(Opcode::Cast, {d}, DType::f32);
  uint32_t sum = op(Opcode::Add, {asFloat, asF32}, DType::f32);
  uint32_t nonzero = op(Opcode::Cast, {sum}, DType::i1); // != 0
  uint32_t mask = op(Opcode::Where, {b, nonzero, na}, DType::i1);
  uint32_t copied = op(Opcode::Copy, {asHalf}, DType::f16);
  uint32_t back = op(Opcode::Cast, {copied}, DType::f64);
  p.output("mask", mask);
  p.output("back", back);
  p.output("sum", sum);
  return spec;
}

/// acc += g in place (acc a function input), then out = acc * g.
inline PlanSpec accumulateInPlace(int64_t n) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  uint32_t acc = p.input("acc", DType::f32, {n});
  uint32_t g = p.input("g", DType::f32, {n});
  uint32_t out = p.buffer("out", DType::f32, {n});
  p.inst(Opcode::Add, {acc, g}, acc);
  p.inst(Opcode::Mul, {acc, g}, out);
  p.output("acc", acc);
  p.output("out", out);
  return spec;
}

/// Every fusible op on `dtype` in one chain: unary (Sin and Cos too), binary, Compare, Where,
/// Not/And/Or, Cast to every value type and back, Copy, Gelu and GeluGrad in both forms. Outputs:
/// y5 and the i1 mask.
inline PlanSpec everyOp(DType dtype, size_t *instructions) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<int64_t> shape{64};
  uint32_t x = p.input("x", dtype, shape);
  uint32_t y = p.input("y", dtype, shape);
  uint32_t cond = p.input("cond", DType::i1, shape);
  int counter = 0;
  auto fresh = [&](DType d) { return p.buffer("t" + std::to_string(counter++), d, shape); };
  uint32_t v = x;
  for (int op = int(fb::Opcode::Neg); op <= int(fb::Opcode::Rsqrt); ++op) {
    uint32_t out = fresh(dtype);
    p.inst(fb::Opcode(op), {v}, out);
    v = out;
  }
  for (fb::Opcode op : {fb::Opcode::Sin, fb::Opcode::Cos}) {
    uint32_t out = fresh(dtype);
    p.inst(op, {v}, out);
    v = out;
  }
  for (int op = int(fb::Opcode::Add); op <= int(fb::Opcode::Max); ++op) {
    uint32_t out = fresh(dtype);
    p.inst(fb::Opcode(op), {v, y}, out);
    v = out;
  }
  uint32_t mask = cond;
  for (int pred = 0; pred <= int(fb::ComparePredicate::ge); ++pred) {
    uint32_t c = fresh(DType::i1), joined = fresh(DType::i1);
    p.inst(fb::Opcode::Compare, {v, y}, c, "", fb::Attrs::CompareAttrs,
           compareAttrs(fb::ComparePredicate(pred)));
    p.inst(pred % 2 ? fb::Opcode::And : fb::Opcode::Or, {mask, c}, joined);
    mask = joined;
  }
  uint32_t notMask = fresh(DType::i1);
  p.inst(fb::Opcode::Not, {mask}, notMask);
  uint32_t w = fresh(dtype);
  p.inst(fb::Opcode::Where, {notMask, v, y}, w);
  v = w;
  for (DType to : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i1}) {
    uint32_t there = fresh(to), back = fresh(dtype);
    p.inst(fb::Opcode::Cast, {v}, there);
    p.inst(fb::Opcode::Cast, {there}, back);
    uint32_t sum = fresh(dtype);
    p.inst(fb::Opcode::Add, {back, v}, sum);
    v = sum;
  }
  uint32_t copied = fresh(dtype);
  p.inst(fb::Opcode::Copy, {v}, copied);
  v = copied;
  for (bool tanh : {false, true}) {
    uint32_t g = fresh(dtype), gg = fresh(dtype);
    p.inst(fb::Opcode::Gelu, {v}, g, "", fb::Attrs::GeluAttrs, geluAttrs(tanh));
    p.inst(fb::Opcode::GeluGrad, {g, v}, gg, "", fb::Attrs::GeluAttrs, geluAttrs(tanh));
    v = gg;
  }
  uint32_t maskedMask = fresh(DType::i1);
  p.inst(fb::Opcode::Where, {cond, mask, notMask}, maskedMask); // Where on i1 values
  p.output("y", v);
  p.output("mask", maskedMask);
  *instructions = p.fn().instructions.size();
  return spec;
}

/// SwiGLU's gate product silu(gate) * up on `dtype` (a Llama MLP's input to its down linear):
/// only the product is stored.
inline PlanSpec swiglu(DType dtype, int64_t n = kN) {
  PlanSpec spec;
  ProgramSpec &p = spec.program();
  std::vector<int64_t> shape{n};
  uint32_t gate = p.input("gate", dtype, shape), up = p.input("up", dtype, shape);
  uint32_t act = p.buffer("act", dtype, shape), h = p.buffer("h", dtype, shape);
  p.inst(Opcode::Silu, {gate}, act);
  p.inst(Opcode::Mul, {act, up}, h);
  p.output("h", h);
  return spec;
}

inline std::map<std::string, InputRange> swigluRanges() {
  return {{"gate", {-8, 8}}, {"up", {-2, 2}}};
}

/// Fills every input of function 0 (seeded per input, in `ranges` or [-1, 1)) in `arena`.
inline void fillInputs(const fb::Program &program, std::vector<uint8_t> &arena,
                       const std::map<std::string, InputRange> &ranges) {
  const fb::Function &fn = *program.functions()->Get(0);
  uint32_t seed = 1;
  for (const fb::Port *port : *fn.inputs()) {
    const fb::Buffer *buf = program.buffers()->Get(port->buffer());
    auto it = ranges.find(port->name()->str());
    InputRange r = it != ranges.end() ? it->second : InputRange{};
    DType dtype = static_cast<DType>(buf->dtype());
    fillRandom(arena.data() + buf->offset(), dtype, int64_t(buf->bytes() / dtypeSize(dtype)),
               seed++, r.lo, r.hi);
  }
}

/// A plan of the fusion tests, with the ranges its inputs are drawn from.
struct NamedPlan {
  std::string name;
  PlanSpec spec;
  std::map<std::string, InputRange> ranges;
};

/// Every plan the GPU test runs (with `n` elements) plus everyOp on each float type: the plans
/// whose kernels the unit test also builds for the host (cuda_fusion_emit) and runs.
inline std::vector<NamedPlan> fusionTestPlans(int64_t n) {
  std::vector<NamedPlan> plans;
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    plans.push_back({std::string("simple ") + dtypeName(d), simpleOps(d, n), simpleRanges()});
    plans.push_back({std::string("transcendental ") + dtypeName(d), transcendentals(d, n), {}});
    size_t count = 0;
    plans.push_back({std::string("every op ") + dtypeName(d), everyOp(d, &count), {}});
    plans.push_back({std::string("swiglu ") + dtypeName(d), swiglu(d, n), swigluRanges()});
  }
  plans.push_back({"logical", logicalOpsAndCasts(n), {{"d", {-3, 3}}}});
  plans.push_back({"in place", accumulateInPlace(n), {}});
  return plans;
}

} // namespace megac::runtime::testing
