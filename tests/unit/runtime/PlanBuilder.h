// A test helper that builds small plans with flatbuffers::FlatBufferBuilder: buffers get
// 64-byte aligned offsets in order, functions are added one after another, and every field can
// be overridden to make a bad plan.
#pragma once

#include "runtime/plan/plan_generated.h"
#include "support/HostTensor.h"

#include <functional>
#include <string>
#include <vector>

namespace megac::runtime::testing {

namespace fb = megac::plan;

/// Builds the attrs table of one instruction (a union member) inside the plan's builder.
using AttrsFn = std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder &)>;

struct ProgramSpec {
  struct BufferSpec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t offset, bytes;
  };
  /// (dim, mesh axes): a DimSharding.
  using Sharding = std::vector<std::pair<uint32_t, std::vector<uint32_t>>>;
  struct ParamSpec {
    std::string name;
    uint32_t buffer;
    std::vector<int64_t> globalShape, shardOffset;
    fb::InitKind init;
    double initStd;
    Sharding sharding = {};
    std::vector<int64_t> paddedSizes = {}; // per sharding entry (DimSharding.padded_size); 0: even
  };
  struct PortSpec {
    std::string name;
    uint32_t buffer;
    std::vector<uint32_t> partialAxes = {};
  };
  struct ConstantSpec {
    uint32_t buffer;
    std::vector<uint8_t> data;
  };
  struct InstSpec {
    fb::Opcode op;
    std::vector<uint32_t> inputs, outputs;
    fb::Attrs attrsType = fb::Attrs::NONE;
    AttrsFn attrs;
    std::string location;
  };

  struct StateSpec {
    std::string name;
    uint32_t buffer;
    std::vector<uint32_t> partialAxes = {};
  };
  struct FunctionSpec {
    std::string name;
    std::vector<PortSpec> inputs, outputs;
    std::vector<InstSpec> instructions;
  };

  std::string name = "main";
  uint64_t arenaBytes = 0; // 0: computed from the buffers
  std::vector<BufferSpec> buffers;
  std::vector<ParamSpec> params;
  std::vector<StateSpec> state;
  std::vector<ConstantSpec> constants;
  std::vector<FunctionSpec> functions{FunctionSpec{"main", {}, {}, {}}};
  size_t current = 0; // the function input(), output() and inst() add to
  struct StepSpec {
    fb::StepKind kind;
    uint32_t chunk, microBatch;
  };
  std::vector<StepSpec> schedule; // version 3, pipelined programs

  FunctionSpec &fn() { return functions[current]; }
  /// Starts another function: input(), output() and inst() add to it from now on.
  FunctionSpec &function(const std::string &fnName) {
    functions.push_back({fnName, {}, {}, {}});
    current = functions.size() - 1;
    return functions.back();
  }

  /// A new buffer after the last one (or at `offset` to alias another).
  uint32_t buffer(const std::string &bufName, DType dtype, std::vector<int64_t> shape,
                  int64_t offset = -1) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    uint64_t bytes = static_cast<uint64_t>(n) * dtypeSize(dtype);
    uint64_t end = 0;
    for (const BufferSpec &b : buffers)
      end = std::max(end, (b.offset + b.bytes + 63) / 64 * 64);
    buffers.push_back(
        {bufName, dtype, std::move(shape), offset < 0 ? end : uint64_t(offset), bytes});
    return static_cast<uint32_t>(buffers.size() - 1);
  }
  uint32_t input(const std::string &portName, DType dtype, std::vector<int64_t> shape) {
    uint32_t b = buffer(portName, dtype, std::move(shape));
    fn().inputs.push_back({portName, b});
    return b;
  }
  void output(const std::string &portName, uint32_t b, std::vector<uint32_t> partialAxes = {}) {
    fn().outputs.push_back({portName, b, std::move(partialAxes)});
  }
  /// A state buffer (zero at load).
  uint32_t stateBuffer(const std::string &stateName, DType dtype, std::vector<int64_t> shape) {
    uint32_t b = buffer(stateName, dtype, std::move(shape));
    state.push_back({stateName, b});
    return b;
  }
  /// An unsharded parameter.
  uint32_t param(const std::string &paramName, DType dtype, std::vector<int64_t> shape,
                 fb::InitKind init = fb::InitKind::none, double initStd = 0.0) {
    uint32_t b = buffer(paramName, dtype, shape);
    params.push_back({paramName, b, shape, std::vector<int64_t>(shape.size(), 0), init, initStd});
    return b;
  }
  /// A parameter of a partitioned plan: the local buffer `shape`, split over the mesh per
  /// `sharding` (global dims = local * group size).
  uint32_t shardedParam(const std::string &paramName, DType dtype, std::vector<int64_t> shape,
                        std::vector<int64_t> globalShape, Sharding sharding,
                        fb::InitKind init = fb::InitKind::normal, double initStd = 1.0) {
    uint32_t b = buffer(paramName, dtype, shape);
    params.push_back({paramName, b, std::move(globalShape), std::vector<int64_t>(shape.size(), 0),
                      init, initStd, std::move(sharding)});
    return b;
  }
  template <typename T>
  uint32_t constant(const std::string &constName, DType dtype, std::vector<int64_t> shape,
                    const std::vector<T> &values) {
    uint32_t b = buffer(constName, dtype, std::move(shape));
    const auto *p = reinterpret_cast<const uint8_t *>(values.data());
    constants.push_back({b, std::vector<uint8_t>(p, p + values.size() * sizeof(T))});
    return b;
  }
  void inst(fb::Opcode op, std::vector<uint32_t> ins, uint32_t out, const std::string &loc = "",
            fb::Attrs attrsType = fb::Attrs::NONE, AttrsFn attrs = nullptr) {
    fn().instructions.push_back({op, std::move(ins), {out}, attrsType, std::move(attrs), loc});
  }
  /// An instruction with several outputs.
  void instN(fb::Opcode op, std::vector<uint32_t> ins, std::vector<uint32_t> outs,
             const std::string &loc = "", fb::Attrs attrsType = fb::Attrs::NONE,
             AttrsFn attrs = nullptr) {
    fn().instructions.push_back(
        {op, std::move(ins), std::move(outs), attrsType, std::move(attrs), loc});
  }
};

// Attribute builders for inst().
inline AttrsFn axisAttrs(int64_t axis) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateAxisAttrs(b, axis).Union(); };
}
inline AttrsFn geluAttrs(bool tanh) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateGeluAttrs(b, tanh).Union(); };
}
inline AttrsFn normAttrs(double eps) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateNormAttrs(b, eps).Union(); };
}
inline AttrsFn attentionAttrs(bool causal, double scale) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateAttentionAttrs(b, causal, scale).Union();
  };
}
inline AttrsFn crossEntropyAttrs(bool hasIgnore, int64_t ignore) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateCrossEntropyAttrs(b, hasIgnore, ignore).Union();
  };
}
inline AttrsFn transposeAttrs(std::vector<int64_t> perm) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateTransposeAttrsDirect(b, &perm).Union();
  };
}
inline AttrsFn sliceAttrs(std::vector<int64_t> starts, std::vector<int64_t> strides) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateSliceAttrsDirect(b, &starts, &strides).Union();
  };
}
inline AttrsFn reduceAttrs(fb::ReduceKind kind, std::vector<int64_t> axes) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateReduceAttrsDirect(b, kind, &axes).Union();
  };
}
inline AttrsFn compareAttrs(fb::ComparePredicate p) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateCompareAttrs(b, p).Union(); };
}
inline AttrsFn dropoutAttrs(double ratio, int64_t stream) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateDropoutAttrs(b, ratio, stream).Union();
  };
}
inline AttrsFn dropoutShardAttrs(double ratio, int64_t stream, std::vector<int64_t> globalShape,
                                 std::vector<int64_t> shardOffset) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateDropoutAttrsDirect(b, ratio, stream, &globalShape, &shardOffset).Union();
  };
}
inline AttrsFn padAttrs(std::vector<int64_t> low, std::vector<int64_t> high,
                        std::vector<int64_t> interior) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreatePadAttrsDirect(b, &low, &high, &interior).Union();
  };
}
inline AttrsFn adamwAttrs(double beta1, double beta2, double eps, double weightDecay) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateAdamWAttrs(b, beta1, beta2, eps, weightDecay).Union();
  };
}
inline AttrsFn collectiveAttrs(std::vector<uint32_t> axes, fb::ReduceKind kind, int64_t dim = 0,
                               int64_t concatDim = 0) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateCollectiveAttrsDirect(b, &axes, kind, dim, concatDim).Union();
  };
}
inline AttrsFn p2pAttrs(uint32_t axis, int64_t shift, int64_t tag) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateP2PAttrs(b, axis, shift, tag).Union();
  };
}
inline AttrsFn embeddingAttrs(std::vector<uint32_t> vocabAxes) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateEmbeddingAttrsDirect(b, &vocabAxes).Union();
  };
}
inline AttrsFn vocabCrossEntropyAttrs(bool hasIgnore, int64_t ignore,
                                      std::vector<uint32_t> vocabAxes) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateCrossEntropyAttrsDirect(b, hasIgnore, ignore, &vocabAxes).Union();
  };
}
inline AttrsFn clipAttrs(double maxNorm) {
  return [=](flatbuffers::FlatBufferBuilder &b) { return fb::CreateClipAttrs(b, maxNorm).Union(); };
}

struct PlanSpec {
  std::vector<ProgramSpec> programs{ProgramSpec{}};
  std::vector<std::string> axisNames; // empty: a mesh with no axes (one rank)
  std::vector<int64_t> axisSizes;
  std::vector<std::pair<uint32_t, std::vector<int64_t>>> ranks{{0, {}}}; // (role, coords)
  uint32_t formatVersion = static_cast<uint32_t>(fb::FormatVersion::Current);
  std::string weightsFile;
  uint64_t seed = 0;
  /// Plan.pipeline (stages, virtual stages, micro-batches); all 0: none.
  uint32_t pipelineStages = 0, pipelineVirtualStages = 0, pipelineMicroBatches = 0;
  std::string pipelineSchedule = "1f1b";
  const char *identifier = "MPLN";

  ProgramSpec &program() { return programs[0]; }

  std::vector<uint8_t> build() const {
    flatbuffers::FlatBufferBuilder b;
    std::vector<flatbuffers::Offset<fb::Program>> progs;
    for (const ProgramSpec &p : programs) {
      std::vector<flatbuffers::Offset<fb::Buffer>> bufs;
      uint64_t arena = 0;
      for (const auto &buf : p.buffers) {
        bufs.push_back(fb::CreateBufferDirect(b, buf.name.c_str(),
                                              static_cast<fb::DType>(buf.dtype), &buf.shape,
                                              buf.offset, buf.bytes));
        arena = std::max(arena, buf.offset + buf.bytes);
      }
      std::vector<flatbuffers::Offset<fb::Parameter>> params;
      for (const auto &pr : p.params) {
        std::vector<flatbuffers::Offset<fb::DimSharding>> sharding;
        for (size_t k = 0; k < pr.sharding.size(); ++k)
          sharding.push_back(
              fb::CreateDimShardingDirect(b, pr.sharding[k].first, &pr.sharding[k].second,
                                          k < pr.paddedSizes.size() ? pr.paddedSizes[k] : 0));
        params.push_back(fb::CreateParameterDirect(b, pr.name.c_str(), pr.buffer, &pr.globalShape,
                                                   &pr.shardOffset, pr.init, pr.initStd,
                                                   pr.sharding.empty() ? nullptr : &sharding));
      }
      auto ports = [&](const std::vector<ProgramSpec::PortSpec> &list) {
        std::vector<flatbuffers::Offset<fb::Port>> out;
        for (const auto &port : list)
          out.push_back(
              fb::CreatePortDirect(b, port.name.c_str(), port.buffer,
                                   port.partialAxes.empty() ? nullptr : &port.partialAxes));
        return out;
      };
      std::vector<flatbuffers::Offset<fb::Constant>> consts;
      for (const auto &c : p.constants)
        consts.push_back(fb::CreateConstantDirect(b, c.buffer, &c.data));
      std::vector<flatbuffers::Offset<fb::StateBuffer>> state;
      for (const auto &st : p.state)
        state.push_back(
            fb::CreateStateBufferDirect(b, st.name.c_str(), st.buffer, nullptr, nullptr,
                                        st.partialAxes.empty() ? nullptr : &st.partialAxes));
      std::vector<flatbuffers::Offset<fb::Function>> fns;
      for (const auto &f : p.functions) {
        auto ins = ports(f.inputs), outs = ports(f.outputs);
        std::vector<flatbuffers::Offset<fb::Instruction>> insts;
        for (const auto &in : f.instructions) {
          flatbuffers::Offset<void> attrs = in.attrs ? in.attrs(b) : 0;
          insts.push_back(fb::CreateInstructionDirect(b, in.op, &in.inputs, &in.outputs,
                                                      in.attrsType, attrs, in.location.c_str()));
        }
        fns.push_back(fb::CreateFunctionDirect(b, f.name.c_str(), &ins, &outs, &insts));
      }
      std::vector<flatbuffers::Offset<fb::ScheduleStep>> steps;
      for (const auto &step : p.schedule)
        steps.push_back(fb::CreateScheduleStep(b, step.kind, step.chunk, step.microBatch));
      progs.push_back(fb::CreateProgramDirect(
          b, p.name.c_str(), p.arenaBytes ? p.arenaBytes : arena, &bufs, &params, &consts, &state,
          &fns, steps.empty() ? nullptr : &steps));
    }
    std::vector<flatbuffers::Offset<flatbuffers::String>> names;
    for (const std::string &n : axisNames)
      names.push_back(b.CreateString(n));
    auto mesh = fb::CreateMeshDirect(b, &names, &axisSizes);
    std::vector<flatbuffers::Offset<fb::RankEntry>> rankEntries;
    for (const auto &[role, coords] : ranks)
      rankEntries.push_back(fb::CreateRankEntryDirect(b, role, &coords));
    flatbuffers::Offset<fb::Pipeline> pipeline = 0;
    if (pipelineStages)
      pipeline = fb::CreatePipelineDirect(b, pipelineStages, pipelineVirtualStages,
                                          pipelineMicroBatches, pipelineSchedule.c_str());
    auto plan = fb::CreatePlanDirect(b, formatVersion, "megac test", mesh, &progs, &rankEntries,
                                     weightsFile.c_str(), seed, pipeline);
    b.Finish(plan, identifier);
    return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  }
};

} // namespace megac::runtime::testing
