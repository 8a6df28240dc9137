// Writing trained weights back into the ONNX model they were imported from (`megac export`),
// and reading an ONNX file's graph inputs (what `megac generate` binds).
//
// The importer makes one parameter of each float initializer whose data reaches a run-time node
// (OnnxGraph.cpp findParameters), named by the initializer and holding its values unchanged:
// no transpose, split, fusion or folding touches a parameter (a fused projection's weight only
// gains a part dim, mega-split-fused-projections: [3h, in] is held as [3, h, in], the same
// elements in the same order). Export is therefore the exact inverse: each parameter's initializer gets the trained tensor, converted to the initializer's
// own element type and stored in the field it used (raw_data or the typed field); every other
// byte of the model (graph, constants, metadata, opsets) is kept as it was read.
#pragma once

#include "frontends/onnx/OnnxImporter.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace megac::onnx_import {

/// The graph inputs of the model at `path` that are not initializers, with their declared dims
/// (-1 for a symbolic or unknown dim); a missing shape is an empty vector.
StatusOr<std::map<std::string, std::vector<int64_t>>> readOnnxInputDims(const std::string &path);

/// What exportOnnxWeights did.
struct OnnxExportSummary {
  int64_t replaced = 0;     // initializers given trained values
  int64_t kept = 0;         // initializers left as they were (constants: masks, shape tensors)
  uint64_t outputBytes = 0; // the size of the written model
};

/// Writes `source` to `output` (atomically: tmp, fsync, rename) with every parameter's
/// initializer replaced by `weights`' tensor of the same name. The parameters are found by
/// importing `source` with `options` (its input shapes). Refuses, naming the tensor, a
/// parameter `weights` lacks, a tensor of `weights` that is no parameter of the model, a shape
/// that differs, and an initializer whose element type is not a float type.
StatusOr<OnnxExportSummary> exportOnnxWeights(const std::string &source,
                                              const OnnxImportOptions &options,
                                              const TensorMap &weights, const std::string &output);

} // namespace megac::onnx_import
