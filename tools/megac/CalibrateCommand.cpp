// `megac calibrate`: flags -> the driver's calibration (driver/Calibrate.h) -> a device spec file
// that `megac plan --cluster FILE.json:NODESxPER_NODE` reads. Also built without the compiler as
// megac-calibrate (MEGAC_CALIBRATE_STANDALONE: no MLIR, no MPI; one process).
#include "tools/megac/Cli.h"
#include "tools/megac/Help.h"

#include "driver/Backend.h"
#include "driver/Calibrate.h"

#ifndef MEGAC_CALIBRATE_STANDALONE
#include "driver/Job.h"
#include "planner/Hardware.h"
#include "tools/megac/RunFlags.h"
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <unistd.h>
#include <vector>

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

#ifndef MEGAC_CALIBRATE_STANDALONE
/// One spec per machine (CPU, no --ranks/--threads, `cores` > 1): one rank alone with 1 thread
/// and with `cores` threads in this process, then every core busy (`cores` ranks of 1 thread,
/// collectives included) as an MPI job of this executable writing a temporary spec; the three
/// merged into `out` (driver::writeMachineSpec).
int calibrateMachine(const char *self, const std::string &out, driver::CalibrateRequest request,
                     int64_t cores, bool oversubscribe) {
  request.progress = [](const std::string &line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  std::vector<driver::CalibrationResults> alone;
  for (int64_t threads : {int64_t(1), cores}) {
    std::fprintf(stderr, "calibrate: one rank alone, %lld thread(s)\n", (long long)threads);
    request.ranks = 1;
    request.threads = threads;
    StatusOr<driver::CalibrationResults> results = driver::calibrate(request);
    if (!results.isOk())
      return fail(kCommand, results.status().message());
    alone.push_back(std::move(results).value());
  }
  std::fprintf(stderr, "calibrate: every core busy, %lld ranks x 1 thread\n", (long long)cores);
  std::string busyPath = out + ".busy-" + std::to_string(::getpid()) + ".json";
  std::vector<std::string> line = {
      self,        "calibrate", "--backend", "cpu",   "--ranks", std::to_string(cores),
      "--threads", "1",         "-o",        busyPath};
  if (request.quick)
    line.push_back("--quick");
  std::vector<char *> args;
  for (std::string &arg : line)
    args.push_back(arg.data());
  // The job's own summary goes to stderr with the progress: stdout is the merged spec's.
  std::fflush(stdout);
  int saved = ::dup(fileno(stdout));
  ::dup2(fileno(stderr), fileno(stdout));
  int rc =
      relaunchUnderMpirun(int(args.size()), args.data(), kCommand, cores, oversubscribe, 1);
  std::fflush(stdout);
  ::dup2(saved, fileno(stdout));
  ::close(saved);
  std::string error;
  std::optional<planner::DeviceSpec> busy =
      rc == 0 ? planner::loadDeviceSpec(busyPath, &error) : std::nullopt;
  std::filesystem::remove(busyPath);
  if (rc != 0)
    return rc;
  if (!busy)
    return fail(kCommand, "the every-core-busy spec does not load: " + error);
  StatusOr<std::string> summary = driver::writeMachineSpec(out, *busy, alone);
  if (!summary.isOk())
    return fail(kCommand, summary.status().message());
  std::fputs(summary->c_str(), stdout);
  return 0;
}
#endif

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
    return relaunchUnderMpirun(argc, argv, kCommand, ranks, oversubscribe, threads);
#endif
  }
  driver::CalibrateRequest request;
#ifndef MEGAC_CALIBRATE_STANDALONE
  // One spec per machine: without --ranks and --threads a CPU calibration measures one rank
  // alone and every core busy (issue 34); a job mpirun started is one occupancy.
  int64_t cores = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  if (*backend == driver::Backend::cpu && !f.given("--ranks") && !f.given("--threads") &&
      launched() <= 1 && cores > 1) {
    request.backend = *backend;
    request.quick = quick;
    return calibrateMachine(argv[0], *out, request, cores, oversubscribe);
  }
#endif
  request.backend = *backend;
  request.ranks = ranks;
  request.threads = threads;
  request.quick = quick;
  request.allowTf32 = allowTf32;
  return calibrate(*out, request);
}

} // namespace megac::cli
