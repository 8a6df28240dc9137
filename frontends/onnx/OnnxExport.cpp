// Trained weights written back into the original ONNX model (OnnxExport.h).
#include "frontends/onnx/OnnxExport.h"

#include "frontends/onnx/ConstTensor.h"

#include "ir/MegaDialect.h"
#include "support/Files.h"
#include "support/Float16.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "onnx/onnx_pb.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>

namespace megac::onnx_import {

namespace {

StatusOr<std::string> readBytes(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "ONNX model"));
  return std::string(bytes.begin(), bytes.end());
}

/// `split` is `dims` with one dim d written as two, a·b = dims[d]: how a fused projection's
/// weight holds its initializer (the part dim of mega-split-fused-projections; same elements,
/// same order). A transpose or any other reshape is not.
bool splitsOneDim(const std::vector<int64_t> &dims, const std::vector<int64_t> &split) {
  if (split.size() != dims.size() + 1)
    return false;
  for (size_t d = 0; d < dims.size(); ++d) {
    bool before = std::equal(dims.begin(), dims.begin() + long(d), split.begin());
    bool after = std::equal(dims.begin() + long(d) + 1, dims.end(), split.begin() + long(d) + 2);
    if (before && after && split[d] > 0 && split[d + 1] > 0 &&
        split[d] * split[d + 1] == dims[d])
      return true;
  }
  return false;
}

StatusOr<onnx::ModelProto> parse(const std::string &path, const std::string &bytes) {
  onnx::ModelProto model;
  if (bytes.size() > size_t(INT_MAX))
    return Status::error(path + " is over 2 GiB; models with external data are not supported");
  if (!model.ParseFromArray(bytes.data(), int(bytes.size())) || !model.has_graph())
    return Status::error("cannot parse " + path +
                         ": truncated, corrupt or not an ONNX ModelProto with a graph");
  return model;
}

std::string shapeOf(const onnx::TensorProto &t) {
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  return shapeString(dims);
}

/// Element `i` of a float tensor, widened to double.
double elementAt(const HostTensor &t, int64_t i) {
  switch (t.dtype) {
  case DType::f64:
    return t.data<double>()[i];
  case DType::f32:
    return t.data<float>()[i];
  case DType::bf16:
    return bf16ToFloat(t.data<uint16_t>()[i]);
  default: // f16 (callers pass float tensors only)
    return halfToFloat(t.data<uint16_t>()[i]);
  }
}

/// Replaces `init`'s values by `value`'s, in `init`'s element type and storage field.
Status replaceValues(onnx::TensorProto &init, const HostTensor &value) {
  auto type = ElemType(init.data_type());
  int64_t n = value.numElements();
  std::string raw;
  switch (type) {
  case ElemType::f32: {
    raw.resize(size_t(n) * 4);
    auto *out = reinterpret_cast<float *>(raw.data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = value.dtype == DType::f32 ? value.data<float>()[i] : float(elementAt(value, i));
    break;
  }
  case ElemType::f64: {
    raw.resize(size_t(n) * 8);
    auto *out = reinterpret_cast<double *>(raw.data());
    for (int64_t i = 0; i < n; ++i)
      out[i] = elementAt(value, i);
    break;
  }
  case ElemType::f16:
  case ElemType::bf16: {
    raw.resize(size_t(n) * 2);
    auto *out = reinterpret_cast<uint16_t *>(raw.data());
    DType same = type == ElemType::f16 ? DType::f16 : DType::bf16;
    for (int64_t i = 0; i < n; ++i) {
      auto f = float(elementAt(value, i));
      out[i] = value.dtype == same     ? value.data<uint16_t>()[i]
               : type == ElemType::f16 ? floatToHalf(f)
                                       : floatToBf16(f);
    }
    break;
  }
  default:
    return Status::error("initializer '" + init.name() + "' has element type " +
                         elemTypeName(init.data_type()) + ", which export cannot write");
  }
  if (init.has_raw_data()) {
    init.set_raw_data(std::move(raw));
    return Status::ok();
  }
  // The model stored the values in the typed field: keep that form.
  if (type == ElemType::f32) {
    init.mutable_float_data()->Resize(int(n), 0.0f);
    std::memcpy(init.mutable_float_data()->mutable_data(), raw.data(), raw.size());
  } else if (type == ElemType::f64) {
    init.mutable_double_data()->Resize(int(n), 0.0);
    std::memcpy(init.mutable_double_data()->mutable_data(), raw.data(), raw.size());
  } else {
    init.mutable_int32_data()->Resize(int(n), 0);
    const auto *bits = reinterpret_cast<const uint16_t *>(raw.data());
    for (int64_t i = 0; i < n; ++i)
      init.mutable_int32_data()->Set(int(i), bits[i]);
  }
  return Status::ok();
}

bool isFloatDType(DType d) {
  return d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16;
}

/// The model's parameters (name: the imported value), as the importer finds them.
StatusOr<TensorMap> importedParameters(const std::string &path, const std::string &bytes,
                                       const OnnxImportOptions &options) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
  std::string first;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &diag) {
    if (first.empty() && diag.getSeverity() == mlir::DiagnosticSeverity::Error) {
      std::string where;
      if (auto name = mlir::dyn_cast<mlir::NameLoc>(diag.getLocation()))
        where = name.getName().str() + ": ";
      first = where + diag.str();
    }
    return mlir::success();
  });
  mlir::FailureOr<OnnxImport> imported = importOnnxBytes(ctx, bytes, options);
  if (mlir::failed(imported))
    return Status::error("cannot import " + path + " to find its parameters: " + first);
  return std::move(imported->weights);
}

} // namespace

StatusOr<std::map<std::string, std::vector<int64_t>>> readOnnxInputDims(const std::string &path) {
  ASSIGN_OR_RETURN(std::string bytes, readBytes(path));
  ASSIGN_OR_RETURN(onnx::ModelProto model, parse(path, bytes));
  std::set<std::string> initializers;
  for (const auto &init : model.graph().initializer())
    initializers.insert(init.name());
  std::map<std::string, std::vector<int64_t>> dims;
  for (const auto &input : model.graph().input()) {
    if (initializers.count(input.name()))
      continue;
    std::vector<int64_t> &shape = dims[input.name()];
    if (!input.type().has_tensor_type() || !input.type().tensor_type().has_shape())
      continue;
    for (const auto &d : input.type().tensor_type().shape().dim())
      shape.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
  }
  return dims;
}

StatusOr<OnnxExportSummary> exportOnnxWeights(const std::string &source,
                                              const OnnxImportOptions &options,
                                              const TensorMap &weights, const std::string &output) {
  ASSIGN_OR_RETURN(std::string bytes, readBytes(source));
  ASSIGN_OR_RETURN(TensorMap params, importedParameters(source, bytes, options));
  // The model to write: parsed from the same bytes and left untouched but for the values of
  // the parameters (the import above binds shapes and infers on its own copy).
  ASSIGN_OR_RETURN(onnx::ModelProto model, parse(source, bytes));
  std::string().swap(bytes);

  for (const auto &[name, tensor] : weights)
    if (!params.count(name))
      return Status::error("the checkpoint's tensor '" + name + "' " + shapeString(tensor.shape) +
                           " is no parameter of " + source + " (a checkpoint of another model?)");
  OnnxExportSummary summary;
  std::set<std::string> done;
  for (onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer()) {
    if (!params.count(init.name())) {
      ++summary.kept;
      continue;
    }
    auto it = weights.find(init.name());
    if (it == weights.end())
      return Status::error("initializer '" + init.name() + "' " + shapeOf(init) +
                           " is a parameter of " + source +
                           ", but the checkpoint has no tensor of that name (a checkpoint of "
                           "another model?)");
    const HostTensor &value = it->second;
    std::vector<int64_t> dims(init.dims().begin(), init.dims().end());
    if (value.shape != dims && !splitsOneDim(dims, value.shape))
      return Status::error("initializer '" + init.name() + "' is " + shapeOf(init) + " in " +
                           source + ", but the checkpoint's tensor is " + shapeString(value.shape) +
                           " (a checkpoint of another model?)");
    if (!isFloatDType(value.dtype))
      return Status::error("the checkpoint's tensor '" + init.name() + "' is " +
                           dtypeName(value.dtype) + ", not a float type");
    if (!done.insert(init.name()).second)
      return Status::error(source + " has two initializers named '" + init.name() + "'");
    RETURN_IF_ERROR(replaceValues(init, value));
    ++summary.replaced;
  }
  if (done.size() != params.size())
    for (const auto &[name, value] : params)
      if (!done.count(name))
        return Status::error("parameter '" + name + "' of " + source +
                             " is not an initializer of its main graph; export cannot write it");

  std::string out;
  if (!model.SerializeToString(&out))
    return Status::error("cannot serialize the exported model (over 2 GiB?)");
  auto span = std::span<const uint8_t>(reinterpret_cast<const uint8_t *>(out.data()), out.size());
  std::span<const uint8_t> pieces[] = {span};
  RETURN_IF_ERROR(writeFileAtomically(output, pieces)) << " (writing " << output << ")";
  summary.outputBytes = out.size();
  return summary;
}

} // namespace megac::onnx_import
