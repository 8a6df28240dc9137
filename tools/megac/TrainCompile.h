// Compiling `megac train`'s model to the training step's plan: the model bound to the data
// (a zoo spec's seq and batch, an ONNX export's input shape), the input and training phases
// (partitioned by the layout), codegen. Shared by training and `megac plan`'s plan mode.
#pragma once

#include "tools/megac/TrainOptions.h"

#include "passes/training/TrainingPipeline.h"
#include "support/HostTensor.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

/// The training step's plan and the model's weights.
struct TrainModel {
  std::vector<uint8_t> plan;
  TensorMap weights;
  std::string description;
  int64_t vocab = 0;
  int64_t decoderSeq = 0; // seq2seq (t5): the decoder's length D
  passes::LossKind lossKind = passes::LossKind::causal;
  double compileSeconds = 0;
};

/// Compiles the step for rows of `seq` tokens; errors go to stderr (nullopt).
std::optional<TrainModel> compileTrainingStep(const TrainConfig &c, int64_t seq);

} // namespace megac::cli
