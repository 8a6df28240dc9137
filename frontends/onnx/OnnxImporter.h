// The ONNX frontend: imports an ONNX model (torch.onnx.export of a GPT, BERT, T5, ...) into
// low-level mega IR, one ONNX op onto one or a few mega ops, with its weights on the side.
//
//   OnnxImportOptions options;
//   options.inputShapes["input_ids"] = {8, 128};        // binds symbolic dims
//   auto imported = importOnnxFile(ctx, "gpt2.onnx", options);
//   if (failed(imported)) ...                           // errors went to ctx's diagnostics
//
// Float initializers used as weights become function arguments (`mega.param` = the initializer
// name) and their values go to `weights`; constants and shape arithmetic are folded at import
// time, so the IR has no Shape/Gather/Concat chains. Errors are located diagnostics naming the
// node (NameLoc("node name"("OpType"))), its op type and the opset, or the initializer/input.
// libonnx throws; nothing escapes this API.
#pragma once

#include "support/HostTensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Support/LLVM.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace megac::onnx_import {

struct OnnxImportOptions {
  /// Full shapes for graph inputs, by name: binds symbolic (dim_param) or unknown dims; where
  /// the model has a fixed dim, the given one must equal it.
  std::map<std::string, std::vector<int64_t>> inputShapes;
};

struct OnnxImport {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// Parameter values by `mega.param` name.
  megac::TensorMap weights;
};

mlir::FailureOr<OnnxImport> importOnnxFile(mlir::MLIRContext &ctx, const std::string &path,
                                           const OnnxImportOptions &options);
/// The same from the bytes of a .onnx file (what the fuzzer feeds).
mlir::FailureOr<OnnxImport> importOnnxBytes(mlir::MLIRContext &ctx, std::string_view bytes,
                                            const OnnxImportOptions &options);

/// ONNX ops (default domain) the importer maps, sorted.
std::vector<std::string> supportedOnnxOps();
/// Ops the importer only evaluates at import time, when all their inputs are constants
/// (Floor, ArgMax, ... in shape or mask arithmetic), sorted.
std::vector<std::string> constantOnlyOnnxOps();

} // namespace megac::onnx_import
