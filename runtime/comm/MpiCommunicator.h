// The Communicator of a job launched by mpirun (Open MPI): one process per rank of the mesh.
//
// Collectives are deterministic and identical on every member: an all-reduce is an all-gather
// followed by a local reduction in group order (a reduce-scatter an all-to-all followed by the
// same), so a sum's rounding does not depend on MPI's algorithm choice. Every call is
// non-blocking MPI polled until a deadline; one that waits longer returns an error naming the
// rank, the operation and the group, and the caller aborts the job (abortJob).
#pragma once

#include "runtime/comm/Communicator.h"

namespace megac::runtime::comm {

class MpiCommunicator {
public:
  /// Initializes MPI (once per process; finalized at exit) and splits one sub-communicator per
  /// set of mesh axes. The job's size must equal the mesh's.
  static StatusOr<std::unique_ptr<Communicator>> create(Mesh mesh, std::chrono::seconds timeout);
  /// Whether this process was started by an MPI launcher with more than one rank (Open MPI's,
  /// PMI's or PMIx's environment variables).
  static bool launchedWithMoreThanOneRank();
  /// MPI_Abort on the world communicator (ends every rank of the job).
  [[noreturn]] static void abortJob(int code);
};

} // namespace megac::runtime::comm
