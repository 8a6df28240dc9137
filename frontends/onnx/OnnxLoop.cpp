// ONNX Loop, unrolled at import: with a constant trip count (and constant conditions), the body
// is imported once per iteration, its values renamed per iteration, the carried values threaded
// through and the scan outputs stacked. torch.onnx emits such loops for repeat_interleave with a
// dynamic batch (GPT-J's rotary tables); a loop whose trip count or condition is computed at run
// time is an error at the node (mega IR has no control flow).
#include "frontends/onnx/OnnxGraph.h"

#include "ir/MegaOps.h"

using namespace mlir;

namespace megac::onnx_import {

namespace {

/// Loops longer than this are not unrolled (a model's loop over a few dims is far shorter).
constexpr int64_t kMaxUnroll = 4096;

/// The scalar boolean of a constant value, or nothing.
std::optional<bool> constantBool(GraphImporter &g, ValueInfo &info, Location loc,
                                 const std::string &name) {
  if (!info.isConstant())
    return std::nullopt;
  const ConstTensor *t = g.constantOf(info, loc, name);
  if (!t || t->numElements() != 1)
    return std::nullopt;
  return t->getDouble(0) != 0;
}

} // namespace

LogicalResult GraphImporter::importLoop(NodeContext &c, int64_t index) {
  const onnx::NodeProto &node = c.node();
  const onnx::AttributeProto *bodyAttr = c.attr("body");
  if (!bodyAttr || !bodyAttr->has_g())
    return c.fail("has no body graph");
  const onnx::GraphProto &body = bodyAttr->g();
  int carried = node.input_size() - 2;
  if (carried < 0)
    return c.fail("needs the trip count and condition inputs (either may be empty)");
  if (body.input_size() != carried + 2 || body.output_size() < carried + 1)
    return c.fail("body has " + Twine(body.input_size()) + " inputs and " +
                  Twine(body.output_size()) + " outputs for " + Twine(carried) + " carried values");
  int scans = body.output_size() - 1 - carried;
  if (body.initializer_size() > 0)
    return c.fail("a body graph with initializers is not supported");
  for (const auto &n : body.node())
    for (const auto &a : n.attribute())
      if (a.has_g() || a.graphs_size() > 0)
        return c.fail("nested subgraphs in a Loop body are not supported");

  // The trip count and the first condition must be known here.
  int64_t trips = kMaxUnroll + 1;
  if (c.hasInput(0)) {
    auto m = c.intsInput(0, "trip count");
    if (failed(m))
      return c.fail("only a Loop with a constant trip count can be imported (megac unrolls it; "
                    "export with static shapes)");
    if (m->size() != 1)
      return c.fail("trip count must be a scalar");
    trips = (*m)[0];
  }
  bool go = true;
  if (c.hasInput(1)) {
    std::optional<bool> cond = constantBool(*this, c.input(1), c.loc(), node.input(1));
    if (!cond)
      return c.fail("the loop condition is computed at run time; only constant conditions are "
                    "supported");
    go = *cond;
  }
  if (trips > kMaxUnroll)
    return c.fail("trip count " + Twine(trips) + " is above the " + Twine(kMaxUnroll) +
                  " iterations megac unrolls");

  std::vector<ValueInfo> state;
  for (int k = 0; k < carried; ++k)
    state.push_back(c.input(k + 2));
  std::vector<std::vector<ValueInfo>> scanned(scans);
  for (int64_t it = 0; go && it < trips; ++it) {
    std::string prefix = node.name() + "#" + std::to_string(index) + "/" + std::to_string(it) + "/";
    std::map<std::string, std::string> scope;
    auto bind = [&](const std::string &name, ValueInfo info) {
      scope[name] = prefix + name;
      values[prefix + name] = std::move(info);
    };
    ValueInfo iter;
    iter.type = ElemType::i64;
    iter.constant =
        std::make_shared<const ConstTensor>(ConstTensor::fromInts(ElemType::i64, {}, {it}));
    bind(body.input(0).name(), iter);
    ValueInfo cond;
    cond.type = ElemType::boolean;
    cond.constant =
        std::make_shared<const ConstTensor>(ConstTensor::fromInts(ElemType::boolean, {}, {1}));
    bind(body.input(1).name(), cond);
    for (int k = 0; k < carried; ++k)
      bind(body.input(k + 2).name(), state[k]);
    for (int64_t n = 0; n < body.node_size(); ++n) {
      onnx::NodeProto renamed = body.node(int(n));
      for (std::string &in : *renamed.mutable_input())
        if (auto found = scope.find(in); found != scope.end())
          in = found->second;
      for (std::string &out : *renamed.mutable_output())
        if (!out.empty()) {
          scope[out] = prefix + out;
          out = prefix + out;
        }
      renamed.set_name(prefix + renamed.name());
      if (failed(importNode(renamed, index)))
        return c.fail("in iteration " + Twine(it) + " of the body");
    }
    auto output = [&](int k) -> FailureOr<ValueInfo> {
      const std::string &name = body.output(k).name();
      auto found = scope.find(name);
      auto v = values.find(found != scope.end() ? found->second : name);
      if (v == values.end())
        return c.fail("body output '" + name + "' is not produced");
      return v->second;
    };
    auto condOut = output(0);
    if (failed(condOut))
      return failure();
    std::optional<bool> next = constantBool(*this, *condOut, c.loc(), body.output(0).name());
    if (!next)
      return c.fail("the body's condition is computed at run time; only constant conditions "
                    "are supported");
    go = *next;
    for (int k = 0; k < carried; ++k) {
      auto v = output(1 + k);
      if (failed(v))
        return failure();
      state[k] = *v;
    }
    for (int k = 0; k < scans; ++k) {
      auto v = output(1 + carried + k);
      if (failed(v))
        return failure();
      if (v->sequence)
        return c.fail("scan output " + Twine(k) + " is a sequence");
      scanned[k].push_back(*v);
    }
  }
  for (int k = 0; k < carried; ++k)
    c.setOutputInfo(k, state[k]);
  // Scan outputs: the iterations' values stacked along a new leading axis.
  for (int k = 0; k < scans; ++k) {
    if (!c.hasOutput(carried + k))
      continue;
    if (scanned[k].empty())
      return c.fail("scan output " + Twine(k) + " of a loop that ran no iteration has no shape");
    const ValueInfo &first = scanned[k][0];
    Shape one = first.shape, out = first.shape;
    one.insert(one.begin(), 1);
    out.insert(out.begin(), int64_t(scanned[k].size()));
    SmallVector<Value> parts;
    for (size_t i = 0; i < scanned[k].size(); ++i) {
      ValueInfo &item = scanned[k][i];
      if (item.shape != first.shape || item.type != first.type)
        return c.fail("scan output " + Twine(k) + " changes shape between iterations");
      auto v = materializeValue(item, c.loc(), node.output(carried + k));
      if (failed(v))
        return failure();
      parts.push_back(c.reshape(*v, one));
    }
    c.setOutput(carried + k, mega::ConcatOp::create(builder, c.loc(), c.tensorType(out, first.type),
                                                    parts, builder.getI64IntegerAttr(0))
                                 .getResult());
  }
  return success();
}

} // namespace megac::onnx_import
