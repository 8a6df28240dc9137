// The plan report (PlanExplain.h).
#include "driver/PlanExplain.h"

#include "runtime/plan/plan_generated.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <vector>

namespace megac::driver {

namespace {

namespace pl = megac::plan;

struct ParamReport {
  std::string name;
  std::vector<int64_t> globalShape;
  std::string sharding; // "[tp], []" or "whole"
  uint64_t localBytes = 0;
  uint64_t globalBytes = 0;
};

struct CommReport {
  std::string function;
  std::string op;    // "AllReduce", "Send", ...
  std::string group; // "[tp]" or "pp shift +1"
  uint64_t bytes = 0;
  int64_t count = 0; // instructions with this (function, op, group, bytes)
  int64_t groupSize = 1, stride = 1;
};

/// Group size and rank stride of the group over `axes` (mesh axes are slowest first, so an
/// axis's stride is the product of the sizes after it; a multi-axis group strides by its
/// fastest axis).
std::pair<int64_t, int64_t> groupShape(const pl::Mesh &mesh,
                                       const flatbuffers::Vector<uint32_t> *axes) {
  int64_t size = 1, stride = 0;
  for (uint32_t a : *axes) {
    size *= mesh.axis_sizes()->Get(a);
    int64_t s = 1;
    for (size_t b = a + 1; b < mesh.axis_sizes()->size(); ++b)
      s *= mesh.axis_sizes()->Get(b);
    stride = stride ? std::min(stride, s) : s;
  }
  return {size, stride ? stride : 1};
}

struct RoleReport {
  size_t role = 0;
  std::vector<int64_t> ranks;
  std::vector<ParamReport> params;
  uint64_t paramBytes = 0, wholeParamBytes = 0, replicatedParamBytes = 0;
  uint64_t optimizerBytes = 0, gradientBytes = 0, arenaBytes = 0;
  std::vector<CommReport> comms;
  std::vector<std::string> functions;
  size_t scheduleSteps = 0;
};

std::string axesText(const pl::Mesh &mesh, const flatbuffers::Vector<uint32_t> *axes) {
  std::string out = "[";
  if (axes)
    for (size_t i = 0; i < axes->size(); ++i)
      out += (i ? "," : "") + mesh.axis_names()->Get(axes->Get(i))->str();
  return out + "]";
}

std::string shardingText(const pl::Mesh &mesh, size_t rank,
                         const flatbuffers::Vector<flatbuffers::Offset<pl::DimSharding>> *dims) {
  if (!dims || dims->size() == 0)
    return "whole";
  std::vector<std::string> perDim(rank, "[]");
  for (const pl::DimSharding *d : *dims)
    if (d->dim() < rank)
      perDim[d->dim()] = axesText(mesh, d->axes());
  std::string out;
  for (size_t i = 0; i < rank; ++i)
    out += (i ? ", " : "") + perDim[i];
  return out;
}

std::vector<RoleReport> analyze(const pl::Plan &plan) {
  const pl::Mesh &mesh = *plan.mesh();
  std::vector<RoleReport> roles(plan.programs()->size());
  for (size_t r = 0; r < plan.ranks()->size(); ++r)
    roles[plan.ranks()->Get(r)->role()].ranks.push_back(static_cast<int64_t>(r));
  for (size_t p = 0; p < roles.size(); ++p) {
    const pl::Program &program = *plan.programs()->Get(p);
    RoleReport &role = roles[p];
    role.role = p;
    role.arenaBytes = program.arena_bytes();
    auto buffer = [&](uint32_t index) { return program.buffers()->Get(index); };
    for (const pl::Parameter *param : *program.parameters()) {
      ParamReport report;
      report.name = param->name()->str();
      const pl::Buffer *b = buffer(param->buffer());
      report.localBytes = b->bytes();
      report.globalShape.assign(param->global_shape()->begin(), param->global_shape()->end());
      uint64_t global = 1, local = 1;
      for (int64_t d : report.globalShape)
        global *= static_cast<uint64_t>(d);
      for (int64_t d : *b->shape())
        local *= static_cast<uint64_t>(d);
      report.globalBytes = local ? report.localBytes / local * global : 0;
      report.sharding = shardingText(mesh, report.globalShape.size(), param->sharding());
      role.paramBytes += report.localBytes;
      role.wholeParamBytes += report.globalBytes;
      if (report.sharding == "whole")
        role.replicatedParamBytes += report.localBytes;
      role.params.push_back(std::move(report));
    }
    for (const pl::StateBuffer *state : *program.state()) {
      std::string name = state->name()->str();
      uint64_t bytes = buffer(state->buffer())->bytes();
      if (name.rfind("grad.", 0) == 0)
        role.gradientBytes += bytes;
      else
        role.optimizerBytes += bytes;
    }
    std::map<std::tuple<std::string, std::string, std::string, uint64_t>, int64_t> comms;
    std::map<std::string, std::pair<int64_t, int64_t>> shapes; // group -> (size, stride)
    for (const pl::Function *fn : *program.functions()) {
      role.functions.push_back(fn->name()->str());
      for (const pl::Instruction *inst : *fn->instructions()) {
        pl::Opcode op = inst->op();
        std::string group;
        uint64_t bytes = 0;
        if (auto c = inst->attrs_as_CollectiveAttrs()) {
          if (op == pl::Opcode::ShardSlice)
            continue; // no communication
          group = axesText(mesh, c->axes());
          bytes = buffer(inst->inputs()->Get(0))->bytes();
          shapes[group] = groupShape(mesh, c->axes());
        } else if (auto t = inst->attrs_as_P2PAttrs()) {
          group = mesh.axis_names()->Get(t->axis())->str() + " shift " +
                  (t->shift() > 0 ? "+" : "") + std::to_string(t->shift());
          bytes = op == pl::Opcode::Send ? buffer(inst->inputs()->Get(0))->bytes()
                                         : buffer(inst->outputs()->Get(0))->bytes();
          int64_t stride = 1;
          for (size_t b = t->axis() + 1; b < mesh.axis_sizes()->size(); ++b)
            stride *= mesh.axis_sizes()->Get(b);
          shapes[group] = {2, stride * std::abs(t->shift())};
        } else if (auto ce = inst->attrs_as_CrossEntropyAttrs();
                   ce && ce->vocab_axes() && ce->vocab_axes()->size() > 0) {
          // Vocab-parallel cross-entropy: three all-reduces of one value per token.
          group = axesText(mesh, ce->vocab_axes());
          bytes =
              3 * buffer(inst->inputs()->Get(op == pl::Opcode::CrossEntropy ? 1 : 2))->bytes() / 2;
          shapes[group] = groupShape(mesh, ce->vocab_axes());
        } else {
          continue;
        }
        ++comms[{fn->name()->str(), pl::EnumNameOpcode(op), group, bytes}];
      }
    }
    for (auto &[key, count] : comms) {
      auto [size, stride] = shapes[std::get<2>(key)];
      role.comms.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key),
                            count, size, stride});
    }
    if (program.schedule())
      role.scheduleSteps = program.schedule()->size();
  }
  return roles;
}

std::string meshText(const pl::Mesh &mesh) {
  std::string out;
  for (size_t a = 0; a < mesh.axis_names()->size(); ++a)
    out += (a ? " " : "") + mesh.axis_names()->Get(a)->str() + "=" +
           std::to_string(mesh.axis_sizes()->Get(a));
  return out;
}

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

} // namespace

std::string explainPlan(const runtime::LoadedPlan &loaded, const CommPredictor &predict) {
  const pl::Plan &plan = loaded.plan();
  std::ostringstream out;
  out << "mesh: " << meshText(*plan.mesh()) << " (" << plan.ranks()->size() << " ranks, "
      << plan.programs()->size() << " role" << (plan.programs()->size() == 1 ? "" : "s") << ")\n";
  if (const pl::Pipeline *p = plan.pipeline())
    out << "pipeline: " << p->stages() << " stages x " << p->virtual_stages()
        << " chunks per stage, " << p->micro_batches() << " micro-batches, "
        << (p->schedule() ? p->schedule()->str() : "") << "\n";
  for (const RoleReport &role : analyze(plan)) {
    out << "\nrole " << role.role << " (ranks";
    for (size_t i = 0; i < role.ranks.size() && i < 8; ++i)
      out << " " << role.ranks[i];
    if (role.ranks.size() > 8)
      out << " ...";
    out << "): functions";
    for (const std::string &f : role.functions)
      out << " " << f;
    out << "\n  parameters per rank: " << mib(role.paramBytes) << " of "
        << mib(role.wholeParamBytes) << " whole (" << mib(role.replicatedParamBytes)
        << " replicated)\n"
        << "  gradient accumulators: " << mib(role.gradientBytes)
        << ", optimizer state: " << mib(role.optimizerBytes) << ", arena: " << mib(role.arenaBytes)
        << "\n";
    for (const ParamReport &p : role.params) {
      out << "    " << p.name << " [";
      for (size_t d = 0; d < p.globalShape.size(); ++d)
        out << (d ? "x" : "") << p.globalShape[d];
      out << "] " << p.sharding << "  " << p.localBytes << " B/rank\n";
    }
    out << "  communication per call (function: op group bytes x count):\n";
    if (role.comms.empty())
      out << "    none\n";
    for (const CommReport &c : role.comms) {
      out << "    " << c.function << ": " << c.op << " " << c.group << " " << c.bytes << " B x "
          << c.count;
      if (predict) {
        char text[64];
        std::snprintf(text, sizeof text, "  (predicted %.3g ms each)",
                      1e3 * predict(c.op, c.groupSize, c.stride, c.bytes));
        out << text;
      }
      out << "\n";
    }
    if (role.scheduleSteps)
      out << "  schedule: " << role.scheduleSteps << " steps per optimizer step\n";
  }
  return out.str();
}

std::string explainPlanJson(const runtime::LoadedPlan &loaded) {
  const pl::Plan &plan = loaded.plan();
  std::ostringstream out;
  out << "{\"mesh\": {";
  const pl::Mesh &mesh = *plan.mesh();
  for (size_t a = 0; a < mesh.axis_names()->size(); ++a)
    out << (a ? ", " : "") << "\"" << mesh.axis_names()->Get(a)->str()
        << "\": " << mesh.axis_sizes()->Get(a);
  out << "}, \"roles\": [";
  std::vector<RoleReport> roles = analyze(plan);
  for (size_t r = 0; r < roles.size(); ++r) {
    const RoleReport &role = roles[r];
    out << (r ? ", " : "") << "{\"role\": " << role.role << ", \"ranks\": " << role.ranks.size()
        << ", \"parameter_bytes\": " << role.paramBytes
        << ", \"whole_parameter_bytes\": " << role.wholeParamBytes
        << ", \"replicated_parameter_bytes\": " << role.replicatedParamBytes
        << ", \"gradient_bytes\": " << role.gradientBytes
        << ", \"optimizer_state_bytes\": " << role.optimizerBytes
        << ", \"arena_bytes\": " << role.arenaBytes << ", \"parameters\": [";
    for (size_t i = 0; i < role.params.size(); ++i) {
      const ParamReport &p = role.params[i];
      out << (i ? ", " : "") << "{\"name\": \"" << p.name << "\", \"sharding\": \"" << p.sharding
          << "\", \"bytes\": " << p.localBytes << ", \"whole_bytes\": " << p.globalBytes << "}";
    }
    out << "], \"communication\": [";
    for (size_t i = 0; i < role.comms.size(); ++i) {
      const CommReport &c = role.comms[i];
      out << (i ? ", " : "") << "{\"function\": \"" << c.function << "\", \"op\": \"" << c.op
          << "\", \"group\": \"" << c.group << "\", \"bytes\": " << c.bytes
          << ", \"count\": " << c.count << "}";
    }
    out << "]}";
  }
  out << "]}\n";
  return out.str();
}

} // namespace megac::driver
