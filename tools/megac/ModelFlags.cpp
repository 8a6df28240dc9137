// The model flags of the one-model subcommands (ModelFlags.h).
#include "tools/megac/ModelFlags.h"

#include "mlir/IR/MLIRContext.h"

namespace megac::cli {

void ModelFlags::declare(Flags &f, bool inputShape) {
  f.text("--model", spec, "SPEC");
  if (inputShape)
    f.repeated("--input-shape", inputShapeSpecs, "NAME=D0xD1x...");
}

std::string ModelFlags::configure(const Flags &f, const char *oneFile) {
  if (f.positional().size() > 1)
    return oneFile;
  if (!f.positional().empty())
    file = f.positional().front();
  StatusOr<driver::InputShapes> shapes = driver::parseInputShapes(inputShapeSpecs);
  if (!shapes.isOk())
    return shapes.status().message();
  inputShapes = std::move(shapes).value();
  return {};
}

std::optional<driver::LoadedModel> ModelFlags::load(mlir::MLIRContext &ctx) const {
  StatusOr<driver::ModelSource> source = driver::ModelSource::parse(spec, file);
  if (!source.isOk()) {
    fail("megac", source.status().message());
    return std::nullopt;
  }
  StatusOr<driver::LoadedModel> model = driver::loadModel(ctx, *source, inputShapes);
  if (!model.isOk()) {
    fail("megac", model.status().message());
    return std::nullopt;
  }
  return std::move(model).value();
}

std::optional<driver::CompiledModel>
ModelFlags::compile(const char *command, const codegen::CodegenOptions &options) const {
  mlir::MLIRContext ctx;
  std::optional<driver::LoadedModel> model = load(ctx);
  if (!model)
    return std::nullopt;
  StatusOr<driver::CompiledModel> compiled = driver::compileForward(std::move(*model), options);
  if (!compiled.isOk()) {
    fail(command, compiled.status().message());
    return std::nullopt;
  }
  return std::move(compiled).value();
}

} // namespace megac::cli
