// Elementwise fusion: finds runs of fusible instructions in a plan function (with liveness and
// arena-overlap checks) and generates one CUDA C kernel per run (compiled by Nvrtc.cpp). Which
// opcodes fuse is the opcode table's Fusible flag (runtime/plan/Opcodes.def); how each one is
// written is its rule in the emitter table below: the Unary and Binary opcodes' formulas come
// from kernels/ElementwiseMath.def (the unfused kernels' own), the others are written here.
//
// Numerics: each op is written as the CPU reference kernel writes it (runtime/cpu/Elementwise.cpp,
// Grad.cpp), f32 math for f32/bf16/f16 and double for f64 (GeluGrad: double for all but the
// erf form in f32; the erf Gelu's f32 erf and exp are runtime/cpu/VectorMath.h's), and each
// op's result is rounded to its output dtype where the unfused kernel rounds it when storing.
// Between ops, megac_keep() hides a value from the optimizers (NVVM and ptxas), so one op's
// multiply is never contracted with the next op's add into an FMA (the unfused kernels round the
// product to memory in between); contraction inside one op is left as nvcc does it.
#include "runtime/cuda/Fusion.h"

#include "runtime/cpu/VectorMath.h"

#include "runtime/plan/Opcodes.h"
#include "runtime/plan/plan_generated.h"
#include "support/DTypeName.h"

#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numbers>
#include <optional>
#include <sstream>
#include <tuple>

namespace megac::runtime::cuda {

namespace {

namespace fb = megac::plan;
using fb::DType;
using fb::Opcode;

bool isFloat(DType d) {
  return d == DType::f64 || d == DType::f32 || d == DType::bf16 || d == DType::f16;
}
bool isHalf(DType d) { return d == DType::bf16 || d == DType::f16; }

/// A buffer's bytes as one thread sees them: element i of two buffers with the same location is
/// the same memory, so a value written to one can be read back from the other in registers.
struct Location {
  uint64_t offset = 0, bytes = 0;
  DType dtype = DType::f32;
  bool operator==(const Location &o) const {
    return offset == o.offset && bytes == o.bytes && dtype == o.dtype;
  }
  bool overlaps(const Location &o) const {
    return offset < o.offset + o.bytes && o.offset < offset + bytes;
  }
};

/// Element count of a buffer whose size is consistent, else nullopt (then nothing fuses).
std::optional<int64_t> elementsOf(const fb::Buffer &b) {
  int64_t n = 1;
  if (b.shape())
    for (int64_t d : *b.shape())
      n *= d;
  if (n <= 0 || b.bytes() != static_cast<uint64_t>(n) * dtypeSizeOr(b.dtype(), 1))
    return std::nullopt;
  return n;
}

bool isValueType(DType d) { return isFloat(d) || d == DType::i1; }

Location locationOf(const fb::Program &program, uint32_t buffer) {
  const fb::Buffer *b = program.buffers()->Get(buffer);
  return {b->offset(), b->bytes(), b->dtype()};
}

/// Whether the bytes of a location written by a group are observable after the group: read by a
/// later instruction of the function, or part of a function output or a persistent buffer.
/// Overlap, not identity, decides (a reshape alias or a reused range counts as a read).
class Liveness {
public:
  Liveness(const fb::Program &program, const fb::Function &function) {
    const auto *buffers = program.buffers();
    auto rangeOf = [&](uint32_t b) { return locationOf(program, b); };
    if (function.instructions())
      for (size_t i = 0; i < function.instructions()->size(); ++i) {
        const fb::Instruction *inst = function.instructions()->Get(i);
        if (inst->inputs())
          for (uint32_t b : *inst->inputs())
            if (b < buffers->size())
              reads_.push_back({rangeOf(b), i});
      }
    auto persist = [&](uint32_t b) {
      if (b < buffers->size())
        persistent_.push_back(rangeOf(b));
    };
    if (function.outputs())
      for (const fb::Port *port : *function.outputs())
        persist(port->buffer());
    if (program.parameters())
      for (const fb::Parameter *p : *program.parameters())
        persist(p->buffer());
    if (program.state())
      for (const fb::StateBuffer *s : *program.state())
        persist(s->buffer());
  }

  bool observableAfter(const Location &loc, size_t end) {
    auto key = std::make_pair(loc.offset, loc.bytes);
    auto it = lastUse_.find(key);
    if (it == lastUse_.end()) {
      // The last instruction reading any of these bytes; "infinitely late" when persistent.
      int64_t last = -1;
      for (const Location &p : persistent_)
        if (p.overlaps(loc))
          last = INT64_MAX;
      for (const auto &[range, index] : reads_)
        if (range.overlaps(loc))
          last = std::max(last, static_cast<int64_t>(index));
      it = lastUse_.emplace(key, last).first;
    }
    return it->second >= static_cast<int64_t>(end);
  }

private:
  std::vector<std::pair<Location, size_t>> reads_;
  std::vector<Location> persistent_;
  std::map<std::pair<uint64_t, uint64_t>, int64_t> lastUse_;
};

/// What a candidate group reads from and stores to memory, or nullopt when it is unsafe.
struct GroupMemory {
  std::vector<uint32_t> inputs, outputs;
};

std::optional<GroupMemory> analyzeGroup(const fb::Program &program, const fb::Function &function,
                                        size_t first, size_t end, Liveness &liveness) {
  std::vector<Location> loaded, written;
  std::vector<uint32_t> loadedBuffer, writtenBuffer;
  auto find = [](const std::vector<Location> &v, const Location &l) {
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == l)
        return static_cast<int64_t>(i);
    return int64_t{-1};
  };
  for (size_t k = first; k < end; ++k) {
    const fb::Instruction *inst = function.instructions()->Get(k);
    for (uint32_t b : *inst->inputs()) {
      Location loc = locationOf(program, b);
      if (find(written, loc) >= 0 || find(loaded, loc) >= 0)
        continue; // in a register already
      // A load sees memory as it was before the kernel, so no earlier op of the group may have
      // written any of these bytes (at another location: the same one is in a register).
      for (const Location &w : written)
        if (w.overlaps(loc))
          return std::nullopt;
      loaded.push_back(loc);
      loadedBuffer.push_back(b);
    }
    uint32_t out = inst->outputs()->Get(0);
    Location loc = locationOf(program, out);
    int64_t at = find(written, loc);
    if (at >= 0) { // rewritten: the last write is what gets stored
      written.erase(written.begin() + at);
      writtenBuffer.erase(writtenBuffer.begin() + at);
    }
    written.push_back(loc);
    writtenBuffer.push_back(out);
  }
  GroupMemory memory;
  memory.inputs = loadedBuffer;
  std::vector<Location> stored;
  for (size_t w = 0; w < written.size(); ++w)
    if (liveness.observableAfter(written[w], end)) {
      stored.push_back(written[w]);
      memory.outputs.push_back(writtenBuffer[w]);
    }
  // Thread i touches element i of every location; a store into bytes that another location
  // maps to another thread's element would race with that thread's load or store.
  for (size_t s = 0; s < stored.size(); ++s) {
    for (const Location &l : loaded)
      if (!(l == stored[s]) && l.overlaps(stored[s]))
        return std::nullopt;
    for (size_t t = 0; t < s; ++t)
      if (stored[t].overlaps(stored[s])) // distinct: written keeps one entry per location
        return std::nullopt;
  }
  return memory;
}

// ---- CUDA C generation -----------------------------------------------------------------------

uint64_t fnv1a64(const std::string &text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

const char *storageType(DType d) {
  switch (d) {
  case DType::f64:
    return "double";
  case DType::f32:
    return "float";
  case DType::bf16:
  case DType::f16:
    return "unsigned short";
  default:
    return "unsigned char";
  }
}

/// An exact literal: hex floats round-trip every bit.
std::string literal(double v, bool dbl) {
  char text[64];
  if (dbl)
    std::snprintf(text, sizeof text, "%a", v);
  else
    std::snprintf(text, sizeof text, "%af", static_cast<double>(static_cast<float>(v)));
  return text;
}

const char *kHelpers =
    R"(// Generated by megac (runtime/cuda/Fusion.cpp): fused elementwise instructions.
// megac_keep(x, z): x with its bits xor-ed with z, which is 0 at run time (n >> 62) but unknown
// to NVVM and ptxas, so no FMA is contracted across two ops: the unfused kernels round each op's
// result to memory. bf16/f16 conversions are the PTX cvt that cuda_bf16.h and cuda_fp16.h use
// (round to nearest even), written out so no header is needed. Without __CUDA_ARCH__ (a host
// build of this source, which the fusion tests run against the CPU kernels) they are software.
static __device__ __forceinline__ float megac_keep(float x, unsigned z) {
  return __uint_as_float(__float_as_uint(x) ^ z);
}
static __device__ __forceinline__ double megac_keep(double x, unsigned z) {
  return __longlong_as_double(__double_as_longlong(x) ^ static_cast<long long>(z));
}
static __device__ __forceinline__ float megac_bf2f(unsigned short h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}
static __device__ __forceinline__ unsigned short megac_f2bf(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return 0x7fffu;
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
}
static __device__ __forceinline__ float megac_h2f(unsigned short h) {
#ifdef __CUDA_ARCH__
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return megac_host_h2f(h); // a host build of this source (the fusion tests) supplies it
#endif
}
static __device__ __forceinline__ unsigned short megac_f2h(float f) {
#ifdef __CUDA_ARCH__
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  return megac_host_f2h(f);
#endif
}
)";

/// megac_exp_f32 and megac_erf_f32: runtime/cpu/VectorMath.h's expF32 and erfF32, which the CPU
/// kernels' f32 Gelu and GeluGrad use, written from the same constants (F32MathConstants) as the
/// same operations in the same order (the host build gives their bits; on a device ptxas may
/// contract them into FMAs).
std::string f32MathSource() {
  using C = cpu::vmath::F32MathConstants;
  auto f = [](float v) { return literal(v, false); };
  auto horner = [&](const char *acc, const char *var, const float *c, size_t n) {
    std::string text = "  float " + std::string(acc) + " = " + f(c[0]) + ";\n";
    for (size_t i = 1; i < n; ++i)
      text += "  " + std::string(acc) + " = " + acc + " * " + var + " + " + f(c[i]) + ";\n";
    return text;
  };
  std::string s;
  s += "static __device__ __forceinline__ float megac_exp_f32(float x) {\n";
  s += "  float xc = x < " + f(C::expLow) + " ? " + f(C::expLow) + " : (x > " + f(C::expHigh) +
       " ? " + f(C::expHigh) + " : x);\n";
  s += "  float t = xc * " + f(C::log2e) + " + " + f(C::shifter) + ";\n";
  s += "  float n = t - " + f(C::shifter) + ";\n";
  s += "  float r = (xc - n * " + f(C::ln2Hi) + ") - n * " + f(C::ln2Lo) + ";\n";
  s += horner("q", "r", C::expQ, std::size(C::expQ));
  s += "  float p = 1.0f + (r + r * r * q);\n";
  s += "  int ni = static_cast<int>(__float_as_uint(t) - __float_as_uint(" + f(C::shifter) +
       "));\n";
  s += "  int n1 = ni >> 1, n2 = ni - n1;\n";
  s += "  float s1 = __uint_as_float(static_cast<unsigned>(n1 + 127) << 23);\n";
  s += "  float s2 = __uint_as_float(static_cast<unsigned>(n2 + 127) << 23);\n";
  s += "  float y = p * s1 * s2;\n";
  s += "  return x != x ? x : y;\n}\n";
  s += "static __device__ __forceinline__ float megac_erf_f32(float x) {\n";
  s += "  float ax = __uint_as_float(__float_as_uint(x) & 0x7fffffffu);\n";
  s += "  ax = ax > " + f(C::erfHigh) + " ? " + f(C::erfHigh) + " : ax;\n";
  s += "  float z = ax * ax;\n";
  s += horner("a", "z", C::erfSmall, std::size(C::erfSmall));
  s += "  float small = ax + ax * a;\n";
  s += horner("b", "ax", C::erfLarge, std::size(C::erfLarge));
  s += "  float large = 1.0f - megac_exp_f32(b - z);\n";
  s += "  float y = ax < 1.0f ? small : large;\n";
  s += "  y = __uint_as_float(__float_as_uint(y) | (__float_as_uint(x) & 0x80000000u));\n";
  s += "  return x != x ? x : y;\n}\n";
  return s;
}

class Generator;

/// Which operand dtypes a fusible opcode admits.
enum class Operands : uint8_t {
  floatMath, // float inputs and output, all of one dtype
  logic,     // i1 inputs and output
  compare,   // float inputs of one dtype, an i1 output
  select,    // Where: an i1 condition, branches of the output's value type
  copy,      // a value type, the input's and output's
  cast,      // value types (float or i1)
};

/// One entry of the emitter table: how a fusible opcode is admitted and written.
struct FusionRule {
  const char *name = nullptr; // the opcode's; null: no rule
  Operands operands = Operands::floatMath;
  size_t arity = 0;
  fb::Attrs attrs = fb::Attrs::NONE; // the attrs member it reads
  /// A formula of x (arity 1) or a, b (arity 2) in the compute type T, or null for `emit`.
  const char *formula = nullptr;
  int (Generator::*emit)(const fb::Instruction &inst, const std::vector<int> &in,
                         DType d) = nullptr;
};

/// The rule of `op` when the opcode table flags it Fusible, else null.
const FusionRule *ruleOf(Opcode op);

/// Emits the body of one fused kernel: SSA values v<k> (f32/f64 compute value or i1 byte) and,
/// for bf16/f16 values, h<k> (the storage bits; v<k> is their exact widening).
class Generator {
public:
  explicit Generator(const fb::Program &program) : program_(program) {}

  std::string generate(const fb::Function &function, size_t first, size_t end,
                       const GroupMemory &memory) {
    std::ostringstream params;
    for (size_t k = 0; k < memory.inputs.size(); ++k) {
      uint32_t b = memory.inputs[k];
      Location loc = locationOf(program_, b);
      bool aliased = false; // an in-place input shares memory with an output: no __restrict__
      for (uint32_t o : memory.outputs)
        aliased = aliased || locationOf(program_, o) == loc;
      params << "const " << storageType(loc.dtype) << "* " << (aliased ? "" : "__restrict__ ")
             << "in" << k << ", ";
      int id = load(loc, "in" + std::to_string(k));
      values_[key(loc)] = id;
    }
    for (size_t k = 0; k < memory.outputs.size(); ++k)
      params << storageType(locationOf(program_, memory.outputs[k]).dtype) << "* out" << k << ", ";
    for (size_t k = first; k < end; ++k)
      emit(*function.instructions()->Get(k));
    for (size_t k = 0; k < memory.outputs.size(); ++k) {
      Location loc = locationOf(program_, memory.outputs[k]);
      int id = values_.at(key(loc));
      body_ << "    out" << k << "[i] = " << (isHalf(loc.dtype) ? "h" : "v") << id << ";\n";
    }
    std::ostringstream src;
    src << kHelpers << f32MathSource() << "\nextern \"C\" __global__ void @KERNEL@(" << params.str()
        << "long long n) {\n"
        << "  const unsigned z = static_cast<unsigned>(n >> 62); // 0: n < 2^62\n"
        << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;"
        << " i < n;\n       i += static_cast<long long>(gridDim.x) * blockDim.x) {\n"
        << body_.str() << "  }\n}\n";
    return src.str();
  }

private:
  using Key = std::tuple<uint64_t, uint64_t, int>;
  static Key key(const Location &l) { return {l.offset, l.bytes, static_cast<int>(l.dtype)}; }

  int load(const Location &loc, const std::string &pointer) {
    int id = next_++;
    dtypes_[id] = loc.dtype;
    if (loc.dtype == DType::bf16 || loc.dtype == DType::f16)
      body_ << "    const unsigned short h" << id << " = " << pointer << "[i];\n"
            << "    const float v" << id << " = " << widen(loc.dtype) << "(h" << id << ");\n";
    else
      body_ << "    const " << storageType(loc.dtype) << " v" << id << " = " << pointer << "[i];\n";
    return id;
  }

  static const char *widen(DType d) { return d == DType::bf16 ? "megac_bf2f" : "megac_h2f"; }
  static const char *narrow(DType d) { return d == DType::bf16 ? "megac_f2bf" : "megac_f2h"; }

  /// A new value of dtype `d` from `expr` in its compute type (float, or double for f64; the
  /// 0/1 byte for i1), rounded to `d`.
  int define(DType d, const std::string &expr) {
    int id = next_++;
    dtypes_[id] = d;
    if (isHalf(d))
      body_ << "    const unsigned short h" << id << " = " << narrow(d) << "(" << expr << ");\n"
            << "    const float v" << id << " = " << widen(d) << "(h" << id << ");\n";
    else if (d == DType::i1)
      body_ << "    const unsigned char v" << id << " = static_cast<unsigned char>(" << expr
            << ");\n";
    else
      body_ << "    const " << storageType(d) << " v" << id << " = megac_keep(" << expr
            << ", z);\n";
    return id;
  }

  /// A new value with the bits of `a` or `b` (Where): bf16/f16 select their storage bits.
  int select(DType d, int cond, int a, int b) {
    if (!isHalf(d))
      return define(d, "v" + std::to_string(cond) + " != 0 ? v" + std::to_string(a) + " : v" +
                           std::to_string(b));
    int id = next_++;
    dtypes_[id] = d;
    body_ << "    const unsigned short h" << id << " = v" << cond << " != 0 ? h" << a << " : h" << b
          << ";\n"
          << "    const float v" << id << " = " << widen(d) << "(h" << id << ");\n";
    return id;
  }

  void emit(const fb::Instruction &inst);

  /// The formula of a rule (an ElementwiseMath.def line, or Silu's) on the operands, written out
  /// in the op's compute type: x (a, b) become the operands' values, T the compute type, and for
  /// float each call gets libm's float name (exp -> expf: the function CUDA's float overload of
  /// exp calls, so the unfused kernel's code), as cpu and the emulated host build read it too.
  int formula(const FusionRule &rule, DType d, const std::vector<int> &in) {
    bool dbl = d == DType::f64;
    const std::string text = rule.formula;
    std::string out;
    for (size_t k = 0; k < text.size();) {
      char c = text[k];
      if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') { // a literal, as written
        size_t e = k;
        while (e < text.size() &&
               (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '.'))
          ++e;
        out += text.substr(k, e - k);
        k = e;
        continue;
      }
      if (!std::isalpha(static_cast<unsigned char>(c)) && c != '_') {
        out += c;
        ++k;
        continue;
      }
      size_t e = k;
      while (e < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_'))
        ++e;
      std::string word = text.substr(k, e - k);
      k = e;
      if (word == "T")
        out += dbl ? "double" : "float";
      else if (word == "x" || word == "a")
        out += "v" + std::to_string(in[0]);
      else if (word == "b")
        out += "v" + std::to_string(in[1]);
      else if (k < text.size() && text[k] == '(') // a libm call
        out += dbl ? word : word + "f";
      else
        out += word;
    }
    return define(d, out);
  }

public:
  // The hand-written emitters of the emitter table.
  int notOp(const fb::Instruction &, const std::vector<int> &in, DType d) {
    return define(d, arg(in, 0) + " == 0");
  }
  int andOp(const fb::Instruction &, const std::vector<int> &in, DType d) {
    return define(d, "(" + arg(in, 0) + " != 0) & (" + arg(in, 1) + " != 0)");
  }
  int orOp(const fb::Instruction &, const std::vector<int> &in, DType d) {
    return define(d, "(" + arg(in, 0) + " != 0) | (" + arg(in, 1) + " != 0)");
  }
  int compareOp(const fb::Instruction &inst, const std::vector<int> &in, DType d) {
    static const char *const kOps[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
    auto p = static_cast<size_t>(inst.attrs_as_CompareAttrs()->predicate());
    return define(d, arg(in, 0) + kOps[p] + arg(in, 1));
  }
  int whereOp(const fb::Instruction &, const std::vector<int> &in, DType d) {
    return select(d, in[0], in[1], in[2]);
  }
  int copyOp(const fb::Instruction &, const std::vector<int> &in, DType) {
    return in[0]; // same bits
  }
  int castOp(const fb::Instruction &, const std::vector<int> &in, DType d) {
    return cast(in[0], d);
  }
  int geluOp(const fb::Instruction &inst, const std::vector<int> &in, DType d) {
    return define(d, gelu(arg(in, 0), inst.attrs_as_GeluAttrs()->tanh(), d == DType::f64));
  }
  int geluGradOp(const fb::Instruction &inst, const std::vector<int> &in, DType d) {
    return geluGrad(in[0], in[1], inst.attrs_as_GeluAttrs()->tanh(), d);
  }

private:
  static std::string arg(const std::vector<int> &in, size_t k) {
    return "v" + std::to_string(in[k]);
  }

  /// The CPU's cast: via float for bf16/f16 (f64 -> float first), != 0 to i1, i1 -> 1 or 0.
  int cast(int x, DType to) {
    DType from = dtypes_.at(x);
    std::string v = "v" + std::to_string(x);
    if (from == to)
      return x; // the CPU copies the bytes
    if (from == DType::i1) {
      bool dbl = to == DType::f64;
      return define(to, v + " != 0 ? " + (dbl ? "1.0 : 0.0" : "1.0f : 0.0f"));
    }
    if (to == DType::i1)
      return define(to, v + " != 0");
    if (to == DType::f64)
      return define(to, "static_cast<double>(" + v + ")");
    return define(to, from == DType::f64 ? "static_cast<float>(" + v + ")" : v);
  }

  /// Gelu as cpu::gelu writes it, in the compute type.
  static std::string gelu(const std::string &x, bool tanh, bool dbl) {
    std::string half = dbl ? "0.5" : "0.5f", one = dbl ? "1.0" : "1.0f";
    if (tanh) {
      std::string beta = literal(std::sqrt(2.0 / std::numbers::pi), dbl);
      std::string kappa = literal(0.044715, dbl);
      return half + " * " + x + " * (" + one + " + " + (dbl ? "tanh" : "tanhf") + "(" + beta +
             " * (" + x + " + " + kappa + " * " + x + " * " + x + " * " + x + ")))";
    }
    std::string rsqrt2 = literal(std::numbers::sqrt2 / 2, dbl);
    return x + " * " + half + " * (" + one + " + " + (dbl ? "erf" : "megac_erf_f32") + "(" + x +
           " * " + rsqrt2 + "))";
  }

  /// GeluGrad as cpu::geluGrad writes it: the slope in double for every dtype, except the erf
  /// form in f32 (f32, bf16, f16), which VectorMath.h's f32 functions compute.
  int geluGrad(int dy, int x, bool tanh, DType d) {
    int t = next_++;
    if (!tanh && d != DType::f64) {
      std::string g = "g" + std::to_string(t), s = "s" + std::to_string(t);
      std::string rsqrt2 = literal(std::numbers::sqrt2 / 2, false);
      std::string invSqrt2Pi = literal(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2, false);
      body_ << "    const float " << g << " = static_cast<float>(v" << x << ");\n"
            << "    const float " << s << " = 0.5f * (1.0f + megac_erf_f32(" << g << " * " << rsqrt2
            << ")) + " << g << " * " << invSqrt2Pi << " * megac_exp_f32(-0.5f * " << g << " * " << g
            << ");\n";
      return define(d, "static_cast<float>(v" + std::to_string(dy) + ") * " + s);
    }
    std::string g = "g" + std::to_string(t), s = "s" + std::to_string(t);
    body_ << "    const double " << g << " = static_cast<double>(v" << x << ");\n";
    if (tanh) {
      std::string beta = literal(std::sqrt(2.0 / std::numbers::pi), true);
      std::string kappa = literal(0.044715, true);
      body_ << "    const double t" << t << " = tanh(" << beta << " * (" << g << " + " << kappa
            << " * " << g << " * " << g << " * " << g << "));\n"
            << "    const double " << s << " = 0.5 * (1.0 + t" << t << ") + 0.5 * " << g
            << " * (1.0 - t" << t << " * t" << t << ") * " << beta << " * (1.0 + 3.0 * " << kappa
            << " * " << g << " * " << g << ");\n";
    } else {
      std::string sqrt2 = literal(std::numbers::sqrt2, true);
      std::string invSqrt2Pi = literal(1.0 / std::sqrt(2.0 * std::numbers::pi), true);
      body_ << "    const double " << s << " = 0.5 * (1.0 + erf(" << g << " / " << sqrt2 << ")) + "
            << g << " * " << invSqrt2Pi << " * exp(-0.5 * " << g << " * " << g << ");\n";
    }
    std::string product = "static_cast<double>(v" + std::to_string(dy) + ") * " + s;
    return define(d, d == DType::f64 ? product : "static_cast<float>(" + product + ")");
  }

  const fb::Program &program_;
  std::ostringstream body_;
  std::map<Key, int> values_;   // the value each location holds now
  std::map<int, DType> dtypes_; // each value's dtype
  int next_ = 0;
};

using Rules = std::array<FusionRule, fb::kOpcodeCount>;

Rules buildRules() {
  Rules rules{};
  auto set = [&](Opcode op, FusionRule rule) {
    rule.name = fb::opcodeInfo(op)->name;
    rules[*fb::opcodeIndex(op)] = rule;
  };
  // The Unary and Binary opcodes' formulas, as the unfused kernels compute them.
#define MEGAC_CUDA_UNARY(Name, ...)                                                                \
  set(Opcode::Name, {nullptr, Operands::floatMath, 1, fb::Attrs::NONE, #__VA_ARGS__, nullptr});
#define MEGAC_CUDA_BINARY(Name, ...)                                                               \
  set(Opcode::Name, {nullptr, Operands::floatMath, 2, fb::Attrs::NONE, #__VA_ARGS__, nullptr});
#include "runtime/cuda/kernels/ElementwiseMath.def"
#undef MEGAC_CUDA_BINARY
#undef MEGAC_CUDA_UNARY
  using A = fb::Attrs;
  set(Opcode::Not, {nullptr, Operands::logic, 1, A::NONE, nullptr, &Generator::notOp});
  set(Opcode::And, {nullptr, Operands::logic, 2, A::NONE, nullptr, &Generator::andOp});
  set(Opcode::Or, {nullptr, Operands::logic, 2, A::NONE, nullptr, &Generator::orOp});
  set(Opcode::Compare,
      {nullptr, Operands::compare, 2, A::CompareAttrs, nullptr, &Generator::compareOp});
  set(Opcode::Where, {nullptr, Operands::select, 3, A::NONE, nullptr, &Generator::whereOp});
  set(Opcode::Copy, {nullptr, Operands::copy, 1, A::NONE, nullptr, &Generator::copyOp});
  set(Opcode::Cast, {nullptr, Operands::cast, 1, A::NONE, nullptr, &Generator::castOp});
  set(Opcode::Gelu, {nullptr, Operands::floatMath, 1, A::GeluAttrs, nullptr, &Generator::geluOp});
  set(Opcode::GeluGrad,
      {nullptr, Operands::floatMath, 2, A::GeluAttrs, nullptr, &Generator::geluGradOp});
  // cpu::silu's and kernels/Llama.cu's formula: SwiGLU's silu(gate) * up fuses into one kernel.
  set(Opcode::Silu, {nullptr, Operands::floatMath, 1, A::NONE, "x / (T(1) + exp(-x))", nullptr});
  return rules;
}

const Rules &rules() {
  static const Rules r = buildRules();
  return r;
}

const FusionRule *ruleOf(Opcode op) {
  std::optional<size_t> index = fb::opcodeIndex(op);
  if (!index || !rules()[*index].name || !fb::opcodeHas(op, fb::opflag::Fusible))
    return nullptr;
  return &rules()[*index];
}

void Generator::emit(const fb::Instruction &inst) {
  std::vector<int> in;
  for (uint32_t b : *inst.inputs())
    in.push_back(values_.at(key(locationOf(program_, b))));
  Location outLoc = locationOf(program_, inst.outputs()->Get(0));
  body_ << "    // " << fb::EnumNameOpcode(inst.op()) << "\n";
  const FusionRule &rule = *ruleOf(inst.op()); // fusibleElements admitted it
  values_[key(outLoc)] =
      rule.formula ? formula(rule, outLoc.dtype, in) : (this->*rule.emit)(inst, in, outLoc.dtype);
}

/// The element count shared by every operand when instruction `inst` is fusible, else nullopt.
std::optional<int64_t> fusibleElements(const fb::Program &program, const fb::Instruction &inst) {
  const FusionRule *rule = ruleOf(inst.op());
  const auto *buffers = program.buffers();
  if (!rule || !buffers || !inst.inputs() || !inst.outputs() || inst.outputs()->size() != 1)
    return std::nullopt;
  std::vector<const fb::Buffer *> ins;
  for (uint32_t b : *inst.inputs()) {
    if (b >= buffers->size())
      return std::nullopt;
    ins.push_back(buffers->Get(b));
  }
  uint32_t outIndex = inst.outputs()->Get(0);
  if (outIndex >= buffers->size())
    return std::nullopt;
  const fb::Buffer *out = buffers->Get(outIndex);
  std::optional<int64_t> n = elementsOf(*out);
  if (!n)
    return std::nullopt;
  for (const fb::Buffer *b : ins)
    if (elementsOf(*b) != n)
      return std::nullopt;
  if (ins.size() != rule->arity)
    return std::nullopt;
  if (rule->attrs != fb::Attrs::NONE && (inst.attrs_type() != rule->attrs || !inst.attrs()))
    return std::nullopt;
  auto all = [&](DType d) {
    for (const fb::Buffer *b : ins)
      if (b->dtype() != d)
        return false;
    return out->dtype() == d;
  };
  bool ok = false;
  switch (rule->operands) {
  case Operands::floatMath:
    ok = isFloat(out->dtype()) && all(out->dtype());
    break;
  case Operands::logic:
    ok = all(DType::i1);
    break;
  case Operands::compare:
    ok = fb::EnumNameComparePredicate(inst.attrs_as_CompareAttrs()->predicate())[0] != 0 &&
         isFloat(ins[0]->dtype()) && ins[1]->dtype() == ins[0]->dtype() &&
         out->dtype() == DType::i1;
    break;
  case Operands::select:
    ok = ins[0]->dtype() == DType::i1 && isValueType(out->dtype()) &&
         ins[1]->dtype() == out->dtype() && ins[2]->dtype() == out->dtype();
    break;
  case Operands::copy:
    ok = isValueType(out->dtype()) && all(out->dtype());
    break;
  case Operands::cast:
    ok = isValueType(ins[0]->dtype()) && isValueType(out->dtype());
    break;
  }
  return ok ? n : std::nullopt;
}

} // namespace

bool hasFusionRule(megac::plan::Opcode op) {
  std::optional<size_t> index = fb::opcodeIndex(op);
  return index && rules()[*index].name != nullptr;
}

/// Longer runs are split: it bounds the kernel's size and parameter list (<= 3 per instruction,
/// far below CUDA's 4 KiB of parameters) and the quadratic checks of analyzeGroup.
constexpr size_t kMaxGroupInstructions = 64;

std::vector<FusedGroup> findFusionGroups(const megac::plan::Program &program, size_t function) {
  std::vector<FusedGroup> groups;
  if (!program.functions() || function >= program.functions()->size())
    return groups;
  const fb::Function &fn = *program.functions()->Get(function);
  if (!fn.instructions())
    return groups;
  size_t count = fn.instructions()->size();
  std::vector<std::optional<int64_t>> elements(count);
  for (size_t i = 0; i < count; ++i)
    elements[i] = fusibleElements(program, *fn.instructions()->Get(i));
  Liveness liveness(program, fn);
  size_t i = 0;
  while (i < count) {
    if (!elements[i]) {
      ++i;
      continue;
    }
    // Grow [i, end) while the next instruction is fusible, of the same size and keeps the
    // group race-free; every prefix is checked, as liveness changes with the end.
    size_t end = i + 1;
    std::optional<GroupMemory> memory;
    while (end < count && end - i < kMaxGroupInstructions && elements[end] == elements[i]) {
      std::optional<GroupMemory> grown = analyzeGroup(program, fn, i, end + 1, liveness);
      if (!grown)
        break;
      memory = std::move(grown);
      ++end;
    }
    if (end - i >= 2) {
      FusedGroup group;
      group.first = i;
      group.count = end - i;
      group.elements = *elements[i];
      group.inputs = memory->inputs;
      group.outputs = memory->outputs;
      std::string source = Generator(program).generate(fn, i, end, *memory);
      char name[40];
      std::snprintf(name, sizeof name, "megac_fused_%016llx",
                    static_cast<unsigned long long>(fnv1a64(source)));
      group.kernelName = name;
      size_t at = source.find("@KERNEL@");
      group.source = source.replace(at, 8, group.kernelName);
      groups.push_back(std::move(group));
    }
    i = end;
  }
  return groups;
}

} // namespace megac::runtime::cuda
