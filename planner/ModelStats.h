// What a forward graph holds and costs: parameter counts, FLOPs from the cost interface, ops.
#pragma once

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace megac::planner {

struct ModelStats {
  std::string function;
  int64_t parameters = 0; // elements over all mega.param arguments (a tied weight once)
  int64_t parameterTensors = 0;
  int64_t parameterBytes = 0;
  int64_t tokens = 0;       // elements of the token input (input_ids, else the first int input)
  int64_t forwardFlops = 0; // all ops' CostOpInterface::getFlops
  int64_t forwardMatmulFlops = 0;
  int64_t forwardBytes = 0;                   // bytes read plus written, op by op (no fusion)
  std::map<std::string, int64_t> opHistogram; // "mega.linear" -> count
  /// Mixture of experts (docs/moe.md): the parameters that moe_matmul reads as expert weights
  /// ([E, ...] stacked over the experts), their experts per layer and topk, and the MoE layers
  /// (moe_dispatch ops). activeParameters: what one token uses, the
  /// dense parameters (the router included) and topk/E of every expert weight; == parameters
  /// for a dense model.
  int64_t activeParameters = 0;
  int64_t expertParameters = 0;
  int64_t experts = 0, topk = 0, moeLayers = 0;

  /// Model FLOPs of one training step (forward + backward = 3x forward, no recompute), the
  /// convention of Korthikanti et al. (REFERENCE.md) and of MFU.
  int64_t trainingFlops() const { return 3 * forwardFlops; }
};

/// Stats of the function `name` in `module` (its only function when `name` is empty), or an
/// error message.
struct ModelStatsResult {
  std::optional<ModelStats> stats;
  std::string error;
};
ModelStatsResult computeModelStats(mlir::ModuleOp module, std::string_view name = {});

/// "124,439,808".
std::string withCommas(int64_t n);
/// "124.4M", "1.2G" (SI prefixes: K M G T P E), for FLOPs and bytes.
std::string humanCount(double n);
/// "124.4M", "174.6B", "1.0T" (K M B T: how parameter counts are said).
std::string humanParams(double n);

} // namespace megac::planner
