// The model zoo: builds a GPT, BERT, T5, Llama, Mixtral or Nemotron forward graph as mega IR
// from a config (a spec, or a transformers config.json read by HfConfig.h).
#pragma once

#include "frontends/models/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>

namespace megac::models {

/// The forward graph of `config` in a new module (one func named after the arch), or null
/// with `error` set to a message naming the failing call.
mlir::OwningOpRef<mlir::ModuleOp> buildModel(mlir::MLIRContext &ctx, const ModelConfig &config,
                                             std::string &error);

} // namespace megac::models
