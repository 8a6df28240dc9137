// `megac import`: a loaded model's forward graph as textual mega IR, through the input phase when
// asked, its weights beside it as FILE.safetensors (named by the module's mega.weights).
#pragma once

#include "driver/ModelSource.h"

#include "support/Status.h"

#include "llvm/Support/raw_ostream.h"

#include <string>

namespace megac::driver {

struct ImportOptions {
  bool inputPhase = false;     // --compile-to=input: canonicalized and raised (passes/input)
  bool debugLocations = false; // every op's location printed
};

/// Writes `model` to `path` ("-": stdout, for a model without weights). Located diagnostics of
/// the input phase go to `diagnostics`.
Status writeImportedModel(LoadedModel &model, const std::string &path, const ImportOptions &options,
                          llvm::raw_ostream &diagnostics = llvm::errs());

} // namespace megac::driver
