// Whole tensors from the shards of a partitioned plan, assembled on one rank: the parameters
// (for `megac train --save-weights`) and the gradients (accumulators summed over their partial
// axes, for `--save-grads`). Every rank of the job calls the same function; what each rank owns
// is read from the plan (rank table, shardings), so no rank needs another's executor.
#pragma once

#include "runtime/comm/Communicator.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"
#include "support/HostTensor.h"
#include "support/Status.h"

#include <set>
#include <string>

namespace megac::runtime {

/// Every parameter of every program by name (a parameter on several stages, such as tied
/// embeddings, once), whole, on `root`; other ranks get an empty map. For each distinct shard
/// the lowest rank holding it sends it.
StatusOr<TensorMap> gatherParameters(const LoadedPlan &plan, const Executor &executor,
                                     comm::Communicator &comm, int root = 0);
/// The same for the parameters named in `names` only (every rank passes the same names): what a
/// writer that saves a model piece by piece gathers, so that `root` never holds it whole.
StatusOr<TensorMap> gatherParameters(const LoadedPlan &plan, const Executor &executor,
                                     comm::Communicator &comm, const std::set<std::string> &names,
                                     int root = 0);

/// The gradient of every parameter, keyed by the parameter's name, on `root`: its accumulator
/// "grad.<name>" summed over the accumulator's partial axes (on a copy; the executor's state is
/// unchanged), then assembled like the parameters; a parameter on several pipeline stages (tied
/// embeddings) gets the sum of its stages' accumulators. Parameters without an accumulator are
/// left out.
StatusOr<TensorMap> gatherGradients(const LoadedPlan &plan, const Executor &executor,
                                    comm::Communicator &comm, int root = 0);

} // namespace megac::runtime
