// The model zoo: dispatch from a config to the model's builder.
#include "frontends/models/ModelZoo.h"
#include "frontends/dsl/GraphBuilder.h"
#include "frontends/models/Layers.h"

namespace megac::models {

mlir::OwningOpRef<mlir::ModuleOp> buildModel(mlir::MLIRContext &ctx, const ModelConfig &config,
                                             std::string &error) {
  if ((config.kvOutputs || config.kvDecode) && !config.buildsKvCache()) {
    error = "megac generate's KV cache is built for GPT-2 under transformers' names (hf_gpt2=1) "
            "and the Llama family, not for " +
            config.spec();
    return {};
  }
  dsl::GraphBuilder b(ctx, archName(config.arch));
  switch (config.arch) {
  case Arch::gpt:
    buildGpt(b, config);
    break;
  case Arch::bert:
    buildBert(b, config);
    break;
  case Arch::t5:
    buildT5(b, config);
    break;
  case Arch::llama:
    buildLlama(b, config);
    break;
  case Arch::mixtral:
    buildMixtral(b, config);
    break;
  case Arch::nemotron:
    buildNemotron(b, config);
    break;
  }
  mlir::Operation *module = b.finish();
  if (!module) {
    error = b.error();
    return {};
  }
  auto op = mlir::cast<mlir::ModuleOp>(module);
  op->setAttr("mega.model", mlir::StringAttr::get(&ctx, config.spec()));
  return op;
}

} // namespace megac::models
