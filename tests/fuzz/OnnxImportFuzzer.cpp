// Fuzz target of the ONNX importer: any bytes must give an import or diagnostics, never a
// crash, an abort or a hang. Built with libFuzzer (clang, -fsanitize=fuzzer) or linked with
// FuzzDriver.cpp, the deterministic driver ctest runs.
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

namespace {

/// A context reused across inputs (creating one per input dominates the run time), renewed
/// now and then so uniqued attributes from past inputs do not pile up.
mlir::MLIRContext &context() {
  static std::unique_ptr<mlir::MLIRContext> ctx;
  static int uses = 0;
  if (!ctx || ++uses % 500 == 0)
    ctx = std::make_unique<mlir::MLIRContext>(mlir::MLIRContext::Threading::DISABLED);
  return *ctx;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlir::MLIRContext &ctx = context();
  // Diagnostics are the expected outcome for most inputs; keep them quiet.
  mlir::ScopedDiagnosticHandler quiet(&ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  megac::onnx_import::OnnxImportOptions options;
  auto imported = megac::onnx_import::importOnnxBytes(
      ctx, std::string_view(reinterpret_cast<const char *>(data), size), options);
  // What the importer accepts must be valid IR.
  if (mlir::succeeded(imported) && mlir::failed(mlir::verify(*imported->module)))
    std::abort();
  return 0;
}
