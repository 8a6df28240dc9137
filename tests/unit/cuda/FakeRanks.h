// Several ranks of NcclCommunicator in one process over the fake NCCL (FakeNccl.h), one thread
// and one communicator each, for NcclFakeTest.cpp and NcclAsyncFakeTest.cpp.
#pragma once

#include "FakeNccl.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "tests/unit/runtime/StubCommunicator.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <thread>

namespace megac::runtime::cuda::fake {

/// Rank 0's NCCL id reaches every rank: the only host collective NcclCommunicator::create uses.
class IdExchange {
public:
  Status share(int rank, const void *in, void *out, size_t bytes) {
    std::unique_lock<std::mutex> lock(mu_);
    if (rank == 0) {
      id_.assign(static_cast<const char *>(in), static_cast<const char *>(in) + bytes);
      ready_.notify_all();
    } else {
      ready_.wait(lock, [&] { return !id_.empty(); });
    }
    std::memcpy(out, id_.data(), bytes); // block 0: rank 0's id (all NcclCommunicator reads)
    return Status::ok();
  }

private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::vector<char> id_;
};

/// The host communicator NcclCommunicator::create is given: it only shares rank 0's id.
class HostStub final : public megac::runtime::test::StubCommunicator {
public:
  HostStub(comm::Mesh mesh, int rank, IdExchange &ids)
      : StubCommunicator(std::move(mesh), rank, "HostStub (NcclCommunicator's host)"), ids_(ids) {}
  Status allGather(std::span<const uint32_t>, const void *in, void *out, size_t bytes) override {
    return ids_.share(rank(), in, out, bytes);
  }

private:
  IdExchange &ids_;
};

inline comm::Mesh meshOf(std::vector<int64_t> sizes) {
  comm::Mesh mesh;
  mesh.axisSizes = sizes;
  for (size_t a = 0; a < sizes.size(); ++a)
    mesh.axisNames.push_back("a" + std::to_string(a));
  return mesh;
}

/// Runs `body` on every rank of `mesh`, each on its own thread with its own communicator over
/// the fake; returns each rank's status (the creation's when that failed).
struct FakeRanks {
  comm::Mesh mesh;
  FakeNcclWorld world;
  IdExchange ids;
  std::vector<std::unique_ptr<FakeNccl>> apis;

  explicit FakeRanks(comm::Mesh m) : mesh(std::move(m)), world(static_cast<int>(mesh.size())) {
    for (int r = 0; r < mesh.size(); ++r)
      apis.push_back(std::make_unique<FakeNccl>(world, r));
  }

  std::vector<Status> run(const std::function<Status(int, NcclCommunicator &)> &body,
                          std::chrono::seconds timeout = std::chrono::seconds(20)) {
    std::vector<Status> status(apis.size(), Status::ok());
    std::vector<std::thread> threads;
    for (int r = 0; r < static_cast<int>(apis.size()); ++r)
      threads.emplace_back([&, r] {
        {
          HostStub host(mesh, r, ids);
          FakeNccl &api = *apis[r];
          auto c = NcclCommunicator::create(mesh, r, &host, api.computeStream(), timeout, &api);
          if (!c.isOk())
            status[r] = c.status();
          else
            status[r] = body(r, **c);
        } // the communicator's destructor (it flushes and waits) runs before the rank exits
        world.exit(r);
      });
    for (std::thread &t : threads)
      t.join();
    return status;
  }
};

inline std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

} // namespace megac::runtime::cuda::fake

#define EXPECT_ALL_OK(statuses)                                                                    \
  for (size_t r_ = 0; r_ < (statuses).size(); ++r_)                                                \
  EXPECT_TRUE((statuses)[r_].isOk()) << "rank " << r_ << ": " << (statuses)[r_].message()
