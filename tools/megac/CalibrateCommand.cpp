// `megac calibrate`: flags -> the driver's calibration (driver/Calibrate.h) -> a device spec file
// that `megac plan --cluster FILE.json:NODESxPER_NODE` reads. Also built without the compiler as
// megac-calibrate (MEGAC_CALIBRATE_STANDALONE: no MLIR, no MPI; one process).
#include "tools/megac/Cli.h"
#include "tools/megac/Help.h"

#include "driver/Backend.h"
#include "driver/Calibrate.h"

#ifndef MEGAC_CALIBRATE_STANDALONE
#include "driver/Job.h"
#include "tools/megac/RunFlags.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace megac::cli {
namespace {

constexpr const char *kCommand = "megac calibrate";

int launched() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// The microbenchmarks on `ranks` ranks (MPI when more than one); rank 0 writes the spec.
int calibrate(const std::string &out, driver::CalibrateRequest request) {
  std::unique_ptr<driver::Communicator> world;
#ifndef MEGAC_CALIBRATE_STANDALONE
  if (request.ranks > 1) {
    auto joined = driver::joinCalibrationJob(request.ranks);
    if (!joined.isOk())
      return fail(kCommand, joined.status().message());
    world = std::move(joined.value());
  }
#endif
  int rank = world ? world->rank() : 0;
  request.progress = [](const std::string &line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  StatusOr<driver::CalibrationResults> results = driver::calibrate(request, world.get());
  if (!results.isOk()) {
    fail(kCommand, (request.ranks > 1 ? "rank " + std::to_string(rank) + ": " : std::string()) +
                       results.status().message());
#ifndef MEGAC_CALIBRATE_STANDALONE
    if (world)
      driver::abortJob(1);
#endif
    return 1;
  }
  if (rank != 0)
    return 0;
  StatusOr<std::string> summary = driver::writeDeviceSpec(out, *results);
  if (!summary.isOk())
    return fail(kCommand, summary.status().message());
  std::fputs(summary->c_str(), stdout);
  return 0;
}

} // namespace

int calibrateCommand(int argc, char **argv) {
  Flags f(kCommand, kCalibrateHelp);
  std::optional<std::string> backendName, out;
  int64_t ranks = 1, threads = 0;
  bool quick = false, allowTf32 = false, oversubscribe = false;
  f.text("--backend", backendName, "cpu|cuda").count("--ranks", ranks, 1);
  f.count("--threads", threads, 1, "T").flag("--quick", quick).flag("--allow-tf32", allowTf32);
  f.flag("--oversubscribe", oversubscribe).text("-o,--output", out, "HW.json");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (!f.positional().empty())
    return f.usage("unexpected argument '" + f.positional()[0] + "'");
  if (!out)
    return f.usage("missing -o HW.json (the device spec to write)");
  std::filesystem::path dir = std::filesystem::path(*out).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    return f.usage("-o: no directory " + dir.string());
  StatusOr<driver::Backend> backend = driver::resolveBackend(backendName);
  if (!backend.isOk())
    return f.usage(backend.status().message());
  if (int n = launched(); n > 1) {
#ifdef MEGAC_CALIBRATE_STANDALONE
    return f.usage("megac-calibrate runs one process, not " + std::to_string(n) +
                   " under mpirun; use `megac calibrate --ranks N` (Open MPI)");
#endif
    if (f.given("--ranks") && ranks != n)
      return f.usage("--ranks " + std::to_string(ranks) + " differs from the " + std::to_string(n) +
                     " ranks mpirun started");
    ranks = n;
  } else if (ranks > 1) {
#ifdef MEGAC_CALIBRATE_STANDALONE
    return f.usage(
        "--ranks " + std::to_string(ranks) +
        ": megac-calibrate runs one process; use `megac calibrate --ranks N` (Open MPI)");
#else
    return relaunchUnderMpirun(argc, argv, kCommand, ranks, oversubscribe);
#endif
  }
  driver::CalibrateRequest request;
  request.backend = *backend;
  request.ranks = ranks;
  request.threads = threads;
  request.quick = quick;
  request.allowTf32 = allowTf32;
  return calibrate(*out, request);
}

} // namespace megac::cli
