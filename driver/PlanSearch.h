// The planner as `megac plan --cluster` runs it: the model's shape read off its IR
// (planner/ModelShape), layouts searched with the cost model under the user's pins
// (planner/Planner.h), the best reported with why #1 wins, #1's pipeline drawn, and #1's training
// step compiled to confirm the partitioner accepts it (with --explain, down to the plan, whose
// collectives get their predicted times).
#pragma once

#include "driver/ModelSource.h"

#include "planner/Hardware.h"
#include "planner/Planner.h"
#include "planner/StackProfile.h"
#include "support/Status.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace megac::driver {

struct PlanSearchRequest {
  ModelSource model;
  std::string clusterSpec; // as given ("a100-80g:128x8"), for the report
  planner::Cluster cluster;
  planner::StackProfile stack;
  int64_t globalBatch = 0;
  std::optional<int64_t> seq;    // the model's sequence length, overridden
  std::optional<double> dropout; // costed though the IR has none
  /// `--moe-load TRAIN.jsonl`: a `megac train --log-json` of this MoE model, whose moe_load
  /// (summed over its records) the planner charges the busiest expert-parallel rank with
  /// (planner::TransformerShape::moeLoad); unset, balanced routing.
  std::optional<std::string> moeLoadPath;
  planner::Pins pins; // pins.precision: the precision planned
  int top = 5;
  bool json = false;    // the report as one JSON object
  bool explain = false; // #1's step by op class, and its compiled plan explained
  bool compile = true;  // confirm the partitioner accepts #1
  std::optional<std::string> timelinePath, tracePath; // #1's pipeline as SVG, as Chrome trace
};

/// The stack a plan is costed for: `name` (megac, megatron-2021, ...) in the cluster's CPU or GPU
/// form, or the cluster's default when none is named; an unknown name is an error listing the
/// known ones.
StatusOr<planner::StackProfile> resolveStack(const std::optional<std::string> &name,
                                             const planner::Cluster &cluster);

/// Runs the search; the report goes to `emit` as it is made. False when no layout fits (the
/// report then says what the smallest needs and which single change would fit). Located
/// compiler diagnostics go to `diagnostics`.
StatusOr<bool> searchLayouts(const PlanSearchRequest &request,
                             const std::function<void(const std::string &)> &emit,
                             llvm::raw_ostream &diagnostics = llvm::errs());

} // namespace megac::driver
