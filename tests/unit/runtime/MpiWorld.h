// The one MPI communicator of a gtest binary that ctest runs under mpirun (MpiCommTest,
// AsyncCollectivesTest): created on first use over the binary's mesh, with a 60 s timeout; a
// failure to create it aborts the rank with the reason (every test needs it).
#pragma once

#include "runtime/comm/MpiCommunicator.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace megac::runtime::comm::testing {

/// The communicator over `mesh` (the same mesh on every call of one binary).
inline Communicator &mpiWorld(const Mesh &mesh) {
  static std::unique_ptr<Communicator> comm = [&] {
    auto made = MpiCommunicator::create(mesh, std::chrono::seconds(60));
    if (!made.isOk()) {
      std::fprintf(stderr, "%s\n", made.status().message().c_str());
      std::abort();
    }
    return std::move(made).value();
  }();
  return *comm;
}

} // namespace megac::runtime::comm::testing
