// Building and loading the microbenchmarks' plans (BenchPlan.h).
#include "runtime/calibrate/BenchPlan.h"

#include "support/Float16.h"

#include <algorithm>
#include <cstring>

namespace megac::runtime::calibrate {

uint32_t BenchProgram::add(DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  uint64_t end = 0;
  for (const Buffer &b : buffers_)
    end = std::max(end, (b.offset + b.bytes + 63) / 64 * 64);
  buffers_.push_back({"b" + std::to_string(buffers_.size()), dtype, std::move(shape), end,
                      uint64_t(n) * dtypeSize(dtype)});
  return uint32_t(buffers_.size() - 1);
}

uint32_t BenchProgram::param(DType dtype, std::vector<int64_t> shape, Fill fill) {
  uint32_t b = add(dtype, std::move(shape));
  buffers_[b].name = "p" + std::to_string(b);
  params_.push_back({b, fill});
  return b;
}

uint32_t BenchProgram::constant(DType dtype, std::vector<int64_t> shape,
                                std::vector<uint8_t> values) {
  uint32_t b = add(dtype, std::move(shape));
  constants_.push_back({b, std::move(values)});
  return b;
}

uint32_t BenchProgram::temp(DType dtype, std::vector<int64_t> shape) {
  return add(dtype, std::move(shape));
}

uint32_t BenchProgram::tempAt(DType dtype, std::vector<int64_t> shape, uint64_t offset) {
  uint32_t b = add(dtype, std::move(shape));
  buffers_[b].offset = offset;
  return b;
}

void BenchProgram::function(std::string name, std::vector<BenchInstruction> instructions) {
  functions_.push_back({std::move(name), std::move(instructions)});
}

double BenchProgram::bytesOf(const BenchInstruction &inst) const {
  double bytes = 0;
  for (uint32_t b : inst.inputs)
    bytes += double(buffers_[b].bytes);
  for (uint32_t b : inst.outputs)
    bytes += double(buffers_[b].bytes);
  return bytes;
}

TensorMap BenchProgram::weights(uint64_t seed) const {
  TensorMap out;
  for (const Param &p : params_) {
    if (p.fill == Fill::ones)
      continue;
    const Buffer &b = buffers_[p.buffer];
    HostTensor t;
    t.dtype = b.dtype;
    t.shape = b.shape;
    t.bytes.resize(b.bytes);
    // xorshift64*: fast enough for hundreds of MiB; the values only need to be ordinary floats.
    uint64_t state = seed * 0x9E3779B97F4A7C15ull + p.buffer + 1;
    const float low = p.fill == Fill::positive ? 0.01f : -1.0f;
    const float span = p.fill == Fill::positive ? 0.99f : 2.0f;
    // The first 4M elements are drawn; larger tensors repeat them (GPU-sized operands would
    // otherwise take seconds to fill).
    const int64_t n = t.numElements(), drawn = std::min<int64_t>(n, int64_t(1) << 22);
    for (int64_t i = 0; i < drawn; ++i) {
      state ^= state >> 12;
      state ^= state << 25;
      state ^= state >> 27;
      float unit = float((state * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f);
      float x = low + span * unit;
      switch (b.dtype) {
      case DType::f32:
        std::memcpy(t.bytes.data() + 4 * i, &x, 4);
        break;
      case DType::f64: {
        double d = x;
        std::memcpy(t.bytes.data() + 8 * i, &d, 8);
        break;
      }
      case DType::bf16: {
        uint16_t h = floatToBf16(x);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        break;
      }
      case DType::f16: {
        uint16_t h = floatToHalf(x);
        std::memcpy(t.bytes.data() + 2 * i, &h, 2);
        break;
      }
      default:
        break; // integer parameters are constants here
      }
    }
    const size_t period = size_t(drawn) * dtypeSize(b.dtype);
    for (size_t at = period; at < t.bytes.size(); at += period)
      std::memcpy(t.bytes.data() + at, t.bytes.data(), std::min(period, t.bytes.size() - at));
    out.emplace(b.name, std::move(t));
  }
  return out;
}

BenchPlan::BenchPlan(int64_t ranks, int roles)
    : ranks_(ranks), programs_(size_t(roles)), roleOfRank_(size_t(ranks), 0) {}

std::vector<uint8_t> BenchPlan::build() const {
  flatbuffers::FlatBufferBuilder b;
  std::vector<flatbuffers::Offset<fb::Program>> programs;
  for (size_t role = 0; role < programs_.size(); ++role) {
    const BenchProgram &p = programs_[role];
    std::vector<flatbuffers::Offset<fb::Buffer>> buffers;
    uint64_t arena = 64;
    for (const BenchProgram::Buffer &buf : p.buffers_) {
      buffers.push_back(fb::CreateBufferDirect(b, buf.name.c_str(), fb::DType(buf.dtype),
                                               &buf.shape, buf.offset, buf.bytes));
      arena = std::max(arena, buf.offset + buf.bytes);
    }
    std::vector<flatbuffers::Offset<fb::Parameter>> params;
    for (const BenchProgram::Param &param : p.params_) {
      const BenchProgram::Buffer &buf = p.buffers_[param.buffer];
      std::vector<int64_t> offset(buf.shape.size(), 0);
      params.push_back(fb::CreateParameterDirect(
          b, buf.name.c_str(), param.buffer, &buf.shape, &offset,
          param.fill == Fill::ones ? fb::InitKind::ones : fb::InitKind::zeros, 0.0));
    }
    std::vector<flatbuffers::Offset<fb::Constant>> constants;
    for (const BenchProgram::Constant &c : p.constants_)
      constants.push_back(fb::CreateConstantDirect(b, c.buffer, &c.data));
    std::vector<flatbuffers::Offset<fb::Function>> functions;
    for (const BenchProgram::Function &f : p.functions_) {
      std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
      for (const BenchInstruction &inst : f.instructions) {
        flatbuffers::Offset<void> attrs = inst.attrs ? inst.attrs(b) : 0;
        instructions.push_back(fb::CreateInstructionDirect(b, inst.op, &inst.inputs, &inst.outputs,
                                                           inst.attrsType, attrs, "calibrate"));
      }
      std::vector<flatbuffers::Offset<fb::Port>> none;
      functions.push_back(fb::CreateFunctionDirect(b, f.name.c_str(), &none, &none, &instructions));
    }
    std::string name = "role" + std::to_string(role);
    programs.push_back(fb::CreateProgramDirect(b, name.c_str(), arena, &buffers, &params,
                                               &constants, nullptr, &functions, nullptr));
  }
  std::vector<flatbuffers::Offset<flatbuffers::String>> axisNames;
  std::vector<int64_t> axisSizes;
  if (ranks_ > 1) {
    axisNames.push_back(b.CreateString("world"));
    axisSizes.push_back(ranks_);
  }
  auto mesh = fb::CreateMeshDirect(b, &axisNames, &axisSizes);
  std::vector<flatbuffers::Offset<fb::RankEntry>> ranks;
  for (int64_t r = 0; r < ranks_; ++r) {
    std::vector<int64_t> coords;
    if (ranks_ > 1)
      coords.push_back(r);
    ranks.push_back(fb::CreateRankEntryDirect(b, uint32_t(roleOfRank_[size_t(r)]), &coords));
  }
  auto plan = fb::CreatePlanDirect(b, uint32_t(fb::FormatVersion::Current), "megac calibrate", mesh,
                                   &programs, &ranks, "", 0, 0);
  b.Finish(plan, fb::PlanIdentifier());
  return {b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize()};
}

StatusOr<std::unique_ptr<Executor>> loadBench(const BenchPlan &plan, Backend backend,
                                              bool allowTf32, int rank, comm::Communicator *comm) {
  ASSIGN_OR_RETURN(LoadedPlan loaded, loadPlanFromBytes(plan.build(), "<calibrate>"));
  TensorMap weights = plan.program(plan.roleOf(rank)).weights(uint64_t(rank) + 1);
  ExecutorOptions options;
  options.backend = backend;
  options.allowTf32 = allowTf32;
  options.rank = rank;
  options.comm = comm;
  options.weights = &weights;
  return Executor::create(loaded, options);
}

std::vector<uint8_t> constantBytes(DType dtype, const std::vector<double> &values) {
  std::vector<uint8_t> out(values.size() * dtypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i64) {
      int64_t v = int64_t(values[i]);
      std::memcpy(out.data() + 8 * i, &v, 8);
    } else if (dtype == DType::i32) {
      int32_t v = int32_t(values[i]);
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else {
      float v = float(values[i]);
      std::memcpy(out.data() + 4 * i, &v, 4);
    }
  }
  return out;
}

} // namespace megac::runtime::calibrate
