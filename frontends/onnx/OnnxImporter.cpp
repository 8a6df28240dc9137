// The ONNX frontend's boundary: reads and parses the model, binds input shapes, runs libonnx's
// checker and shape inference (which throw: caught here and turned into diagnostics), then
// hands the graph to GraphImporter.
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/OnnxGraph.h"

#include "ir/MegaDialect.h"
#include "support/Files.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

#include <climits>
#include <fstream>
#include <sstream>

using namespace mlir;

namespace megac::onnx_import {

namespace {

Location modelLoc(MLIRContext &ctx, const std::string &what) {
  return NameLoc::get(StringAttr::get(&ctx, what));
}

std::string dimsStr(const std::vector<int64_t> &dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i)
    s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

/// Replaces symbolic and unknown input dims by the bound ones; every dim must end up known.
LogicalResult bindInputShapes(MLIRContext &ctx, onnx::GraphProto &graph,
                              const OnnxImportOptions &options) {
  std::set<std::string> initializers;
  for (const auto &init : graph.initializer())
    initializers.insert(init.name());
  std::set<std::string> inputs;
  for (const auto &input : graph.input())
    if (!initializers.count(input.name()))
      inputs.insert(input.name());
  for (const auto &[name, dims] : options.inputShapes)
    if (!inputs.count(name)) {
      std::string known;
      for (const std::string &in : inputs)
        known += (known.empty() ? "" : ", ") + in;
      return emitError(modelLoc(ctx, name))
             << "--input-shape names '" << name
             << "', which is not a graph input (inputs: " << (known.empty() ? "none" : known)
             << ")";
    }
  for (auto &input : *graph.mutable_input()) {
    if (initializers.count(input.name()))
      continue;
    Location loc = modelLoc(ctx, input.name());
    if (!input.type().has_tensor_type())
      return emitError(loc) << "graph input '" << input.name()
                            << "' is not a tensor (sequence, map and optional inputs are not "
                               "supported)";
    auto *tt = input.mutable_type()->mutable_tensor_type();
    auto bound = options.inputShapes.find(input.name());
    if (bound != options.inputShapes.end()) {
      for (int64_t d : bound->second)
        if (d < 0)
          return emitError(loc) << "--input-shape " << input.name() << "=" << dimsStr(bound->second)
                                << ": dims must be >= 0";
      if (tt->has_shape() && tt->shape().dim_size() != int(bound->second.size()))
        return emitError(loc) << "--input-shape " << input.name() << "=" << dimsStr(bound->second)
                              << " has rank " << bound->second.size()
                              << ", but the model's input has rank " << tt->shape().dim_size();
      if (!tt->has_shape())
        for (size_t i = 0; i < bound->second.size(); ++i)
          tt->mutable_shape()->add_dim();
      tt->mutable_shape(); // a 0-d input has an empty but present shape
      for (int i = 0; i < tt->shape().dim_size(); ++i) {
        auto *dim = tt->mutable_shape()->mutable_dim(i);
        int64_t want = bound->second[i];
        if (dim->has_dim_value() && dim->dim_value() != want)
          return emitError(loc) << "--input-shape " << input.name() << "=" << dimsStr(bound->second)
                                << " gives dim " << i << " as " << want
                                << ", but the model fixes it to " << dim->dim_value();
        dim->set_dim_value(want);
      }
      continue;
    }
    if (!tt->has_shape())
      return emitError(loc) << "graph input '" << input.name()
                            << "' has no shape; bind it with --input-shape " << input.name()
                            << "=D0xD1x...";
    for (int i = 0; i < tt->shape().dim_size(); ++i) {
      const auto &dim = tt->shape().dim(i);
      if (dim.has_dim_value() && dim.dim_value() >= 0)
        continue;
      std::string symbol = dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "";
      return emitError(loc) << "graph input '" << input.name() << "' has symbolic dim " << i
                            << symbol << "; bind it with --input-shape " << input.name()
                            << "=D0xD1x...";
    }
  }
  return success();
}

/// The default-domain opset, within the range the linked ONNX library's schemas cover (its
/// shape inference and checker are what megac validates a model with; opset 1 through the
/// library's last release, 17 for Debian 12's ONNX 1.12). Outside it: an error naming the range.
FailureOr<int64_t> defaultOpset(MLIRContext &ctx, const onnx::ModelProto &model) {
  for (const auto &op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") {
      auto [first, last] =
          onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at(onnx::ONNX_DOMAIN);
      if (op.version() < first || op.version() > last)
        return emitError(modelLoc(ctx, model.graph().name()))
               << "the model uses ONNX opset " << op.version() << "; megac imports opsets "
               << first << " to " << last << " (export with opset_version between them, e.g. "
               << last << ")";
      return int64_t(op.version());
    }
  return emitError(modelLoc(ctx, model.graph().name()))
         << "the model imports no version of the default ONNX opset";
}

/// Shape inference names the failing node as "(op_type:Add, node name: add_3)": locate the
/// error there, as the importer's own node errors are.
Location inferenceErrorLoc(MLIRContext &ctx, std::string_view message, Location fallback) {
  auto field = [&](std::string_view key) -> std::string_view {
    size_t at = message.find(key);
    if (at == std::string_view::npos)
      return {};
    at += key.size();
    size_t end = message.find_first_of("),", at);
    return end == std::string_view::npos ? std::string_view() : message.substr(at, end - at);
  };
  std::string_view op = field("(op_type:"), node = field("node name: ");
  if (op.empty() || node.empty())
    return fallback;
  return NameLoc::get(StringAttr::get(&ctx, node), NameLoc::get(StringAttr::get(&ctx, op)));
}

/// The libonnx part: everything in it may throw.
LogicalResult checkAndInfer(MLIRContext &ctx, onnx::ModelProto &model,
                            const OnnxImportOptions &options) {
  Location loc = modelLoc(ctx, model.graph().name());
  try {
    onnx::checker::check_model(model);
    if (failed(bindInputShapes(ctx, *model.mutable_graph(), options)))
      return failure();
    // Stale intermediate shapes (symbolic ones from a dynamic-axes export) would only be
    // merged with the inferred ones; drop them and infer from the bound inputs.
    model.mutable_graph()->clear_value_info();
    onnx::ShapeInferenceOptions inference(/*check_type=*/true, /*error_mode=*/1,
                                          /*enable_data_propagation=*/false);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), inference);
  } catch (const onnx::checker::ValidationError &e) {
    return emitError(loc) << "invalid ONNX model: " << e.what();
  } catch (const std::exception &e) {
    return emitError(inferenceErrorLoc(ctx, e.what(), loc))
           << "ONNX shape inference failed: " << e.what();
  } catch (...) {
    return emitError(loc) << "libonnx failed with an unknown exception";
  }
  return success();
}

} // namespace

namespace {

/// Parses `bytes` into `model`, or emits why not.
LogicalResult parseModel(MLIRContext &ctx, std::string_view bytes, onnx::ModelProto &model) {
  Location loc = UnknownLoc::get(&ctx);
  if (bytes.size() > size_t(INT_MAX))
    return emitError(loc) << "the ONNX model is " << bytes.size()
                          << " bytes; models over 2 GiB (external data) are not supported";
  if (!model.ParseFromArray(bytes.data(), int(bytes.size())))
    return emitError(loc) << "cannot parse the ONNX model (" << bytes.size()
                          << " bytes): truncated, corrupt or not an ONNX ModelProto";
  if (!model.has_graph())
    return emitError(loc) << "the ONNX model has no graph";
  return success();
}

FailureOr<OnnxImport> importModel(MLIRContext &ctx, onnx::ModelProto &model,
                                  const OnnxImportOptions &options) {
  auto opset = defaultOpset(ctx, model);
  if (failed(opset) || failed(checkAndInfer(ctx, model, options)))
    return failure();
  try {
    GraphImporter importer(ctx, model, *opset);
    return importer.run();
  } catch (const std::exception &e) {
    // Nothing below throws by design; this catches allocation failures on absurd models.
    return emitError(UnknownLoc::get(&ctx)) << "importing the ONNX model failed: " << e.what();
  }
}

} // namespace

FailureOr<OnnxImport> importOnnxBytes(MLIRContext &ctx, std::string_view bytes,
                                      const OnnxImportOptions &options) {
  ctx.loadDialect<mega::MegaDialect, func::FuncDialect>();
  onnx::ModelProto model;
  if (failed(parseModel(ctx, bytes, model)))
    return failure();
  return importModel(ctx, model, options);
}

FailureOr<OnnxImport> importOnnxFile(MLIRContext &ctx, const std::string &path,
                                     const OnnxImportOptions &options) {
  ctx.loadDialect<mega::MegaDialect, func::FuncDialect>();
  onnx::ModelProto model;
  {
    // readFileBytes refuses a directory by name (tellg() on one gave a huge size: bad_alloc).
    StatusOr<std::vector<uint8_t>> bytes = readFileBytes(path, "ONNX model");
    if (!bytes.isOk())
      return emitError(modelLoc(ctx, path)) << bytes.status().message();
    // The file's bytes are freed before the weights are copied out of the parsed model.
    if (failed(
            parseModel(ctx, {reinterpret_cast<const char *>(bytes->data()), bytes->size()}, model)))
      return failure();
  }
  return importModel(ctx, model, options);
}

} // namespace megac::onnx_import
