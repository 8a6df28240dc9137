// The ONNX graph importer: classifies initializers (weights vs constants), walks the nodes
// folding constant subgraphs and converting the rest, and builds the mega function (values and
// the per-node context are in OnnxValues.cpp).
#include "frontends/onnx/OnnxGraph.h"

#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

using namespace mlir;

namespace megac::onnx_import {

namespace {

/// Constant results with more elements than this are computed at run time when they can be.
constexpr int64_t kRuntimeAbove = int64_t(1) << 20;

bool isDefaultDomain(const std::string &domain) { return domain.empty() || domain == "ai.onnx"; }

/// Ops whose output carries none of the float data of its inputs (for finding weights).
bool dropsFloatData(const onnx::NodeProto &node) {
  static const std::set<std::string> kOps = {
      "Shape", "Size", "Equal", "Less",   "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
      "And",   "Or",   "Xor",   "ArgMax", "ArgMin",  "IsNaN",       "IsInf",          "NonZero"};
  if (kOps.count(node.op_type()))
    return true;
  // Cos/Sin of an initializer make rotary-embedding tables (Llama's inv_freq buffer): a table,
  // not a trainable weight, so the initializer stays a constant and the tables fold.
  if (node.op_type() == "Cos" || node.op_type() == "Sin")
    return true;
  if (node.op_type() == "Cast")
    for (const auto &a : node.attribute())
      if (a.name() == "to")
        return !isFloatType(ElemType(a.i()));
  return false;
}

/// The inputs whose float data flows into the node's outputs.
std::vector<int> dataInputs(const onnx::NodeProto &node) {
  static const std::set<std::string> kFirstOnly = {"Gather",    "Reshape", "Expand",    "Tile",
                                                   "Slice",     "Squeeze", "Unsqueeze", "Split",
                                                   "Transpose", "Flatten", "Trilu",     "Dropout"};
  if (node.op_type() == "Where")
    return {1, 2};
  if (kFirstOnly.count(node.op_type()))
    return {0};
  std::vector<int> all(node.input_size());
  for (int i = 0; i < node.input_size(); ++i)
    all[i] = i;
  return all;
}

std::string sanitizeSymbol(const std::string &name) {
  std::string s;
  for (char c : name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    s = "main";
  return s;
}

} // namespace

Location nodeLocation(MLIRContext &ctx, const onnx::NodeProto &node, int64_t index) {
  std::string name =
      node.name().empty() ? node.op_type() + "#" + std::to_string(index) : node.name();
  return NameLoc::get(StringAttr::get(&ctx, name),
                      NameLoc::get(StringAttr::get(&ctx, node.op_type())));
}

//===----------------------------------------------------------------------===//
// GraphImporter
//===----------------------------------------------------------------------===//

GraphImporter::GraphImporter(MLIRContext &ctx, onnx::ModelProto &model, int64_t opset)
    : ctx(ctx), builder(&ctx), graph_(*model.mutable_graph()), opset_(opset) {}

LogicalResult GraphImporter::declareValues() {
  std::set<std::string> initializerNames;
  for (const auto &init : graph_.initializer()) {
    Location loc = NameLoc::get(StringAttr::get(&ctx, init.name()));
    if (!initializerNames.insert(init.name()).second)
      return emitError(loc) << "initializer '" << init.name() << "' is defined twice";
    if (!isKnownElemType(init.data_type()) || init.data_type() == 0)
      return emitError(loc) << "initializer '" << init.name() << "' has unknown element type "
                            << init.data_type();
    // Every initializer is checked, used or not: a size that does not match the dims is a
    // broken export.
    if (failed(checkTensor(init, loc, "initializer '" + init.name() + "'")))
      return failure();
    ValueInfo info;
    info.initializer = &init;
    info.type = ElemType(init.data_type());
    for (int64_t d : init.dims()) {
      if (d < 0)
        return emitError(loc) << "initializer '" << init.name() << "' has a negative dim " << d;
      info.shape.push_back(d);
    }
    if (checkedNumElements(info.shape) < 0)
      return emitError(loc) << "initializer '" << init.name() << "' has too many elements";
    values[init.name()] = std::move(info);
  }
  for (const auto &input : graph_.input()) {
    if (initializerNames.count(input.name()))
      continue; // an input with a default value: a constant here (IR version < 4 style)
    Location loc = NameLoc::get(StringAttr::get(&ctx, input.name()));
    if (!input.type().has_tensor_type())
      return emitError(loc) << "graph input '" << input.name()
                            << "' is not a tensor (sequence, map and optional inputs are not "
                               "supported)";
    const auto &tt = input.type().tensor_type();
    ElemType type = ElemType(tt.elem_type());
    if (!isKnownElemType(tt.elem_type()) || !isMegaElemType(type))
      return emitError(loc) << "graph input '" << input.name() << "' has element type "
                            << elemTypeName(tt.elem_type())
                            << ", which mega IR does not have (it has FLOAT, DOUBLE, FLOAT16, "
                               "BFLOAT16, INT64, INT32, BOOL)";
    ValueInfo info;
    info.type = type;
    for (const auto &dim : tt.shape().dim()) {
      if (!dim.has_dim_value() || dim.dim_value() < 0)
        return emitError(loc) << "graph input '" << input.name() << "' has an unbound dim";
      info.shape.push_back(dim.dim_value());
    }
    Type argType = RankedTensorType::get(info.shape, elementTypeOf(ctx, type));
    info.value = func_.getBody().front().addArgument(argType, loc);
    argTypes_.push_back(argType);
    argAttrs_.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr(mega::kInputAttr, builder.getStringAttr(input.name()))}));
    values[input.name()] = std::move(info);
  }
  return success();
}

bool GraphImporter::nodeFolds(const onnx::NodeProto &node,
                              const std::set<std::string> &constants) const {
  if (!isDefaultDomain(node.domain()) || !foldHandlers().count(node.op_type()))
    return false;
  if (foldsOnShapes(node.op_type()))
    return true;
  // A big result of constants (a mask expanded to [b, h, s, t]) is cheaper as a run-time op
  // on its small inputs than as a constant in the IR.
  if (opHandlers().count(node.op_type()))
    for (const std::string &out : node.output()) {
      auto it = inferredElements_.find(out);
      if (it != inferredElements_.end() && it->second > kRuntimeAbove)
        return false;
    }
  for (const std::string &in : node.input())
    if (!in.empty() && !constants.count(in))
      return false;
  return true;
}

std::set<std::string> GraphImporter::findParameters() {
  // A float initializer is a weight when its data reaches a node evaluated at run time (or a
  // graph output), directly or through folded ops that keep its values (Slice, Transpose,
  // Gather, arithmetic, ...). Masks made from float buffers by a comparison stay constants.
  // Making a weight a run-time value can stop other folds, so iterate to a fixed point.
  std::set<std::string> params;
  while (true) {
    std::set<std::string> constants;
    std::map<std::string, std::set<std::string>> sources;
    for (const auto &[name, info] : values) {
      if (!info.initializer || params.count(name))
        continue;
      constants.insert(name);
      if (isFloatType(info.type) && checkedNumElements(info.shape) > 1)
        sources[name] = {name};
    }
    std::set<std::string> next = params;
    auto reach = [&](const std::string &name) {
      auto it = sources.find(name);
      if (it != sources.end())
        next.insert(it->second.begin(), it->second.end());
    };
    for (const auto &node : graph_.node()) {
      if (nodeFolds(node, constants)) {
        std::set<std::string> flowing;
        if (!dropsFloatData(node))
          for (int i : dataInputs(node))
            if (i < node.input_size()) {
              auto it = sources.find(node.input(i));
              if (it != sources.end())
                flowing.insert(it->second.begin(), it->second.end());
            }
        for (const std::string &out : node.output()) {
          constants.insert(out);
          if (!flowing.empty())
            sources[out] = flowing;
        }
      } else {
        for (const std::string &in : node.input())
          reach(in);
      }
    }
    for (const auto &out : graph_.output())
      reach(out.name());
    if (next == params)
      return params;
    params = std::move(next);
  }
}

LogicalResult GraphImporter::importNode(const onnx::NodeProto &node, int64_t index) {
  NodeContext c(*this, node, index, opset_);
  if (!isDefaultDomain(node.domain()))
    return emitError(c.loc()) << "unsupported ONNX op '" << node.domain() << "." << node.op_type()
                              << "' in node '" << node.name() << "' (opset " << opset_
                              << "): only the default domain is "
                              << "supported";
  for (const std::string &in : node.input())
    if (!in.empty() && !values.count(in))
      return c.fail("input '" + in + "' is not defined before this node");
  std::set<std::string> constants;
  for (const std::string &in : node.input())
    if (!in.empty() && values.at(in).isConstant())
      constants.insert(in);
  if (node.op_type() == "TopK")
    return importMoeBlock(c, index);
  LogicalResult result = failure();
  if (node.op_type() == "Loop") {
    result = importLoop(c, index);
  } else if (nodeFolds(node, constants)) {
    result = foldHandlers().at(node.op_type())(c);
  } else if (auto it = opHandlers().find(node.op_type()); it != opHandlers().end()) {
    result = it->second(c);
  } else if (foldHandlers().count(node.op_type())) {
    for (int i = 0; i < node.input_size(); ++i)
      if (c.hasInput(i) && !constants.count(node.input(i)))
        return c.fail("this op is supported only on constants (shape or mask arithmetic), "
                      "but input " +
                      Twine(i) + " ('" + node.input(i) + "') is computed at run time");
  } else {
    return emitError(c.loc()) << "unsupported ONNX op '" << node.op_type() << "' in node '"
                              << node.name() << "' (opset " << opset_ << ")";
  }
  if (mlir::failed(result) || c.failed()) {
    if (!c.failed())
      return c.fail("could not be converted");
    return failure();
  }
  for (int i = 0; i < node.output_size(); ++i)
    if (c.hasOutput(i) && !values.count(node.output(i)))
      return c.fail("output " + Twine(i) + " ('" + node.output(i) +
                    "') is not produced by the importer for this form of the op");
  return success();
}

FailureOr<OnnxImport> GraphImporter::run() {
  ctx.loadDialect<mega::MegaDialect, func::FuncDialect>();
  module_ = ModuleOp::create(UnknownLoc::get(&ctx));
  builder.setInsertionPointToEnd(module_->getBody());
  std::string name = sanitizeSymbol(graph_.name());
  func_ = func::FuncOp::create(builder, NameLoc::get(builder.getStringAttr(graph_.name())), name,
                               builder.getFunctionType({}, {}));
  Block *body = func_.addEntryBlock();
  builder.setInsertionPointToEnd(body);

  if (mlir::failed(declareValues()))
    return failure();
  auto record = [&](const onnx::ValueInfoProto &v) {
    if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
      return;
    Shape shape;
    for (const auto &d : v.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return;
      shape.push_back(d.dim_value());
    }
    inferredElements_[v.name()] = checkedNumElements(shape);
  };
  for (const auto &v : graph_.value_info())
    record(v);
  for (const auto &v : graph_.output())
    record(v);

  // Weights: function arguments, values on the side. One initializer is one parameter
  // however many nodes use it (a tied embedding and head stay tied).
  std::set<std::string> params = findParameters();
  for (auto &init : *graph_.mutable_initializer()) {
    if (!params.count(init.name()))
      continue;
    Location loc = NameLoc::get(StringAttr::get(&ctx, init.name()));
    auto weight = decodeWeight(init, loc);
    if (mlir::failed(weight))
      return failure();
    ValueInfo &info = values.at(init.name());
    Type argType = RankedTensorType::get(info.shape, elementTypeOf(ctx, info.type));
    info.value = body->addArgument(argType, loc);
    info.initializer = nullptr;
    argTypes_.push_back(argType);
    argAttrs_.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr(mega::kParamAttr, builder.getStringAttr(init.name()))}));
    weights_[init.name()] = std::move(*weight);
  }

  for (int64_t i = 0; i < graph_.node_size(); ++i)
    if (!skipped_.count(i) && mlir::failed(importNode(graph_.node(int(i)), i)))
      return failure();

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  SmallVector<DictionaryAttr> resultAttrs;
  for (const auto &out : graph_.output()) {
    Location loc = NameLoc::get(StringAttr::get(&ctx, out.name()));
    auto it = values.find(out.name());
    if (it == values.end())
      return emitError(loc) << "graph output '" << out.name() << "' is not produced by any node";
    auto v = materializeValue(it->second, loc, out.name());
    if (mlir::failed(v))
      return failure();
    results.push_back(*v);
    resultTypes.push_back(v->getType());
    resultAttrs.push_back(builder.getDictionaryAttr(
        {builder.getNamedAttr(mega::kOutputAttr, builder.getStringAttr(out.name()))}));
  }
  if (results.empty())
    return emitError(func_.getLoc()) << "the ONNX graph has no outputs";
  func::ReturnOp::create(builder, func_.getLoc(), results);
  func_.setFunctionType(builder.getFunctionType(argTypes_, resultTypes));
  func_.setAllArgAttrs(argAttrs_);
  func_.setAllResultAttrs(resultAttrs);
  if (mlir::failed(verify(*module_)))
    return failure();
  OnnxImport imported;
  imported.module = std::move(module_);
  imported.weights = std::move(weights_);
  return imported;
}

} // namespace megac::onnx_import
