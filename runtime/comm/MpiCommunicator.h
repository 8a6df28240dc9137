// The Communicator of a job launched by mpirun (Open MPI): one process per rank of the mesh.
//
// Collectives are deterministic and identical on every member: an all-reduce is an all-gather
// followed by a local reduction in group order (a reduce-scatter an all-to-all followed by the
// same), so a sum's rounding does not depend on MPI's algorithm choice. Every call is
// non-blocking MPI polled until a deadline; one that waits longer returns an error naming the
// rank, the operation and the group, and the caller aborts the job (abortJob).
//
// Asynchronous collectives (start*, Communicator.h) post the same nonblocking operation and
// return; a progress thread (MPI_THREAD_MULTIPLE) tests them while the caller computes, and
// the handle's wait reduces in group order, so the result has the blocking call's bits. With an
// emulated link, every collective completes no earlier than its alpha-beta time after posting;
// the waiting sleeps (no CPU).
#pragma once

#include "runtime/comm/Communicator.h"

namespace megac::runtime::comm {

class MpiCommunicator {
public:
  /// Initializes MPI (once per process; finalized at exit) and splits one sub-communicator per
  /// set of mesh axes. The job's size must equal the mesh's.
  /// `link`: an emulated link's alpha-beta time added to every collective (a measurement tool).
  static StatusOr<std::unique_ptr<Communicator>> create(Mesh mesh, std::chrono::seconds timeout,
                                                        LinkEmulation link = {});
  /// Whether this process was started by an MPI launcher with more than one rank (Open MPI's,
  /// PMI's or PMIx's environment variables).
  static bool launchedWithMoreThanOneRank();
  /// MPI_Abort on the world communicator (ends every rank of the job).
  [[noreturn]] static void abortJob(int code);
};

} // namespace megac::runtime::comm
