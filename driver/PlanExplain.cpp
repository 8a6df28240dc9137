// The plan report (PlanExplain.h).
#include "driver/PlanExplain.h"

#include "runtime/plan/plan_generated.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace megac::driver {

namespace {

namespace pl = megac::plan;

struct ParamReport {
  std::string name;
  std::vector<int64_t> globalShape;
  std::string sharding; // "[tp], []", "[dp] padded to 68" (ZeRO-3's padded shards) or "whole"
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

/// One buffer live at a function's arena peak.
struct LiveBuffer {
  std::string name, op; // the buffer's name and the opcode that writes it ("input": a port)
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

/// What one function holds above the persistent region at its peak: the instruction where the
/// live buffers (its pinned ports throughout, every other buffer from its first write to its
/// last read) cover the most bytes, those bytes (aliases counted once: they share an offset),
/// the top of its placement (above the peak by the best-fit packing's gaps) and its largest
/// live buffers.
struct FunctionArena {
  std::string name;
  size_t instructions = 0, peakInstruction = 0;
  uint64_t peakLiveBytes = 0, topBytes = 0;
  std::map<std::string, uint64_t> peakByOp;
  std::vector<LiveBuffer> largest;
};

struct RoleReport {
  size_t role = 0;
  std::vector<int64_t> ranks;
  std::vector<ParamReport> params;
  uint64_t paramBytes = 0, wholeParamBytes = 0, replicatedParamBytes = 0;
  uint64_t optimizerBytes = 0, gradientBytes = 0, arenaBytes = 0;
  std::vector<CommReport> comms;
  std::vector<std::string> functions;
  size_t scheduleSteps = 0;
  // The arena (arena_bytes) holds the persistent region (parameters, gradient accumulators,
  // optimizer state, constants) and above it each function's transient buffers. A pipelined
  // plan's stashed values live outside it, in the pipeline runner, per micro-batch in flight.
  uint64_t persistentBytes = 0, constantBytes = 0, stashPeakBytes = 0;
  std::vector<FunctionArena> arena;
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
      perDim[d->dim()] = axesText(mesh, d->axes()) +
                         (d->padded_size() ? " padded to " + std::to_string(d->padded_size()) : "");
  std::string out;
  for (size_t i = 0; i < rank; ++i)
    out += (i ? ", " : "") + perDim[i];
  return out;
}

std::vector<int64_t> shapeOf(const pl::Buffer &b) {
  return b.shape() ? std::vector<int64_t>(b.shape()->begin(), b.shape()->end())
                   : std::vector<int64_t>{};
}

/// One function's peak live set (FunctionArena's definition), by a sweep over its instructions.
/// A reshape is a view with no instruction (codegen's lowerReshape): a buffer that nothing in
/// the function writes shares the bytes of the buffer last written at its offset, whose live
/// range it extends, as the memory planner's alias storages do.
FunctionArena functionArena(const pl::Program &program, const pl::Function &fn,
                            uint64_t persistentBytes) {
  FunctionArena out;
  out.name = fn.name()->str();
  size_t n = fn.instructions() ? fn.instructions()->size() : 0;
  out.instructions = n;
  auto buffer = [&](uint32_t b) { return program.buffers()->Get(b); };
  auto transient = [&](uint32_t b) {
    return b < program.buffers()->size() && buffer(b)->offset() >= persistentBytes;
  };
  struct Span {
    size_t first = 0, last = 0;
    std::string writer; // empty: a view
  };
  std::map<uint32_t, Span> span;
  auto touch = [&](uint32_t b, size_t i) {
    if (!transient(b))
      return;
    auto [it, inserted] = span.try_emplace(b, Span{i, i, ""});
    it->second.last = std::max(it->second.last, i);
  };
  for (auto *ports : {fn.inputs(), fn.outputs()})
    if (ports)
      for (const pl::Port *port : *ports)
        if (transient(port->buffer()))
          span[port->buffer()] = {0, n ? n - 1 : 0, "input"};
  for (size_t i = 0; i < n; ++i) {
    const pl::Instruction *inst = fn.instructions()->Get(i);
    if (inst->inputs())
      for (uint32_t b : *inst->inputs())
        touch(b, i);
    if (inst->outputs())
      for (uint32_t b : *inst->outputs()) {
        touch(b, i);
        if (transient(b) && span[b].writer.empty())
          span[b].writer = pl::EnumNameOpcode(inst->op());
      }
  }
  // Views join the storage written last at their offset before their first use.
  std::map<uint64_t, std::vector<uint32_t>> written; // offset -> written buffers by first write
  for (auto &[b, sp] : span)
    if (!sp.writer.empty())
      written[buffer(b)->offset()].push_back(b);
  for (auto &[offset, list] : written)
    std::stable_sort(list.begin(), list.end(),
                     [&](uint32_t a, uint32_t b) { return span[a].first < span[b].first; });
  std::map<uint32_t, uint64_t> bytesOf; // storage root -> bytes
  for (auto &[b, sp] : span)
    if (!sp.writer.empty())
      bytesOf[b] = std::max(bytesOf[b], buffer(b)->bytes());
  for (auto &[b, sp] : span) {
    if (!sp.writer.empty())
      continue;
    auto list = written.find(buffer(b)->offset());
    uint32_t root = b;
    if (list != written.end())
      for (uint32_t w : list->second)
        if (span[w].first <= sp.first)
          root = w;
    if (root == b) { // read before anything writes it: live from the function's start
      sp.first = 0;
      sp.writer = "unwritten";
      bytesOf[b] = buffer(b)->bytes();
      continue;
    }
    span[root].last = std::max(span[root].last, sp.last);
    bytesOf[root] = std::max(bytesOf[root], buffer(b)->bytes());
  }
  // A span ends at last + 1 <= n; a function without instructions (chunk 0's empty
  // input-gradient backward) still has its ports' spans at [0, 0], so size n + 2.
  std::vector<std::vector<uint32_t>> starts(n + 2), ends(n + 2);
  for (auto &[b, bytes] : bytesOf) {
    starts[span[b].first].push_back(b);
    ends[span[b].last + 1].push_back(b);
    out.topBytes = std::max(out.topBytes, buffer(b)->offset() + bytes - persistentBytes);
  }
  uint64_t live = 0;
  for (size_t i = 0; i < n; ++i) {
    for (uint32_t b : ends[i])
      live -= bytesOf[b];
    for (uint32_t b : starts[i])
      live += bytesOf[b];
    if (live > out.peakLiveBytes) {
      out.peakLiveBytes = live;
      out.peakInstruction = i;
    }
  }
  for (auto &[b, bytes] : bytesOf) {
    const Span &sp = span[b];
    if (sp.first > out.peakInstruction || sp.last < out.peakInstruction)
      continue;
    const pl::Buffer *buf = buffer(b);
    LiveBuffer entry{buf->name() ? buf->name()->str() : "%" + std::to_string(b), sp.writer,
                     pl::EnumNameDType(buf->dtype()), shapeOf(*buf), bytes};
    out.peakByOp[entry.op] += entry.bytes;
    out.largest.push_back(std::move(entry));
  }
  std::stable_sort(out.largest.begin(), out.largest.end(),
                   [](const LiveBuffer &a, const LiveBuffer &b) { return a.bytes > b.bytes; });
  if (out.largest.size() > 12)
    out.largest.resize(12);
  return out;
}

/// The arena's persistent region, each function's peak, and a pipelined plan's stash.
void analyzeArena(const pl::Program &program, RoleReport &role) {
  auto mark = [&](uint32_t b, uint64_t *sum) {
    if (b >= program.buffers()->size())
      return;
    const pl::Buffer *buf = program.buffers()->Get(b);
    role.persistentBytes = std::max(role.persistentBytes, buf->offset() + buf->bytes());
    if (sum)
      *sum += buf->bytes();
  };
  for (const pl::Parameter *param : *program.parameters())
    mark(param->buffer(), nullptr);
  for (const pl::StateBuffer *state : *program.state())
    mark(state->buffer(), nullptr);
  if (program.constants())
    for (const pl::Constant *constant : *program.constants())
      mark(constant->buffer(), &role.constantBytes);
  std::map<std::string, const pl::Function *> byName;
  for (const pl::Function *fn : *program.functions()) {
    byName[fn->name()->str()] = fn;
    role.arena.push_back(functionArena(program, *fn, role.persistentBytes));
  }
  if (!program.schedule())
    return;
  // The pipeline runner (runtime/train/PipelineRunner.cpp) keeps forward.c<c>'s "stash.c<c>.*"
  // outputs that the chunk's backward functions read from a micro-batch's forward to its
  // backward; under a split schedule (zb-*) it keeps what backward_weight.c<c> reads of them
  // and of backward_input's "stash.c<c>.w*" values from the input- to the weight-gradient step.
  struct ChunkStash {
    uint64_t forward = 0; // held from F to B (or to the input-gradient step)
    uint64_t weight = 0;  // held from the input- to the weight-gradient step
  };
  std::map<uint32_t, ChunkStash> stashOf;
  auto chunkStash = [&](uint32_t c) {
    auto [it, inserted] = stashOf.try_emplace(c);
    if (!inserted)
      return it->second;
    std::string chunk = std::to_string(c), prefix = "stash.c" + chunk + ".";
    auto fwd = byName.find("forward.c" + chunk);
    if (fwd == byName.end() || !fwd->second->outputs())
      return it->second;
    std::set<std::string> read;
    for (const char *kind : {"backward.c", "backward_input.c", "backward_weight.c"}) {
      auto bwd = byName.find(kind + chunk);
      if (bwd != byName.end() && bwd->second->inputs())
        for (const pl::Port *in : *bwd->second->inputs())
          if (in->name()->str().rfind(prefix, 0) == 0) {
            read.insert(in->name()->str());
            if (std::string(kind) == "backward_weight.c")
              it->second.weight += program.buffers()->Get(in->buffer())->bytes();
          }
    }
    for (const pl::Port *out : *fwd->second->outputs())
      if (read.count(out->name()->str()))
        it->second.forward += program.buffers()->Get(out->buffer())->bytes();
    return it->second;
  };
  uint64_t held = 0;
  for (const pl::ScheduleStep *step : *program.schedule()) {
    ChunkStash bytes = chunkStash(step->chunk());
    auto release = [&](uint64_t b) { held -= std::min(held, b); };
    switch (step->kind()) {
    case pl::StepKind::Forward:
      held += bytes.forward;
      break;
    case pl::StepKind::BackwardInput:
      held += bytes.weight;
      release(bytes.forward);
      break;
    case pl::StepKind::BackwardWeight:
      release(bytes.weight);
      break;
    default:
      release(bytes.forward);
      break;
    }
    role.stashPeakBytes = std::max(role.stashPeakBytes, held);
  }
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
    analyzeArena(program, role);
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
    out << "], \"persistent_bytes\": " << role.persistentBytes
        << ", \"constant_bytes\": " << role.constantBytes
        << ", \"stash_peak_bytes\": " << role.stashPeakBytes << ", \"arena\": [";
    for (size_t f = 0; f < role.arena.size(); ++f) {
      const FunctionArena &a = role.arena[f];
      out << (f ? ", " : "") << "{\"function\": \"" << a.name
          << "\", \"instructions\": " << a.instructions
          << ", \"peak_instruction\": " << a.peakInstruction
          << ", \"peak_live_bytes\": " << a.peakLiveBytes << ", \"top_bytes\": " << a.topBytes
          << ", \"peak_by_op\": {";
      size_t k = 0;
      for (const auto &[op, bytes] : a.peakByOp)
        out << (k++ ? ", " : "") << "\"" << op << "\": " << bytes;
      out << "}, \"largest\": [";
      for (size_t i = 0; i < a.largest.size(); ++i) {
        const LiveBuffer &b = a.largest[i];
        out << (i ? ", " : "") << "{\"name\": \"" << b.name << "\", \"op\": \"" << b.op
            << "\", \"dtype\": \"" << b.dtype << "\", \"shape\": [";
        for (size_t d = 0; d < b.shape.size(); ++d)
          out << (d ? ", " : "") << b.shape[d];
        out << "], \"bytes\": " << b.bytes << "}";
      }
      out << "]}";
    }
    out << "]}";
  }
  out << "]}\n";
  return out.str();
}

} // namespace megac::driver
