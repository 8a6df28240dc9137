// `megac calibrate`: flags -> runtime/calibrate's microbenchmarks -> a device spec file
// (driver/Calibrate.h) that `megac plan --cluster FILE.json:NODESxPER_NODE` reads. Also built
// without the compiler as megac-calibrate (MEGAC_CALIBRATE_STANDALONE: no MLIR, no MPI; one
// process).
#include "tools/megac/Cli.h"
#include "tools/megac/Help.h"

#include "driver/Backend.h"
#include "driver/Calibrate.h"
#include "planner/Calibration.h"
#include "runtime/calibrate/Calibrate.h"
#include "support/Files.h"

#ifndef MEGAC_CALIBRATE_STANDALONE
#include "runtime/comm/MpiCommunicator.h"
#include "tools/megac/RunFlags.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace megac::cli {
namespace {

namespace cal = runtime::calibrate;
constexpr const char *kCommand = "megac calibrate";

int launched() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// The calibration written to `out` by rank 0, loaded back as the planner will read it.
int writeSpec(const std::string &out, const cal::Results &results) {
  planner::DeviceSpec spec = driver::deviceSpec(results);
  std::string json = planner::deviceSpecJson(spec);
  std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(json.data()), json.size());
  if (Status st = writeFileAtomically(out, {&piece, 1}); !st.isOk())
    return fail(kCommand, "-o: " + st.message());
  std::string error;
  if (!planner::loadDeviceSpec(out, &error))
    return fail(kCommand, "the written spec does not load: " + error);
  std::fputs(driver::summaryText(out, spec, results).c_str(), stdout);
  return 0;
}

/// The microbenchmarks on `ranks` ranks (MPI when more than one), written by rank 0.
int calibrate(const std::string &out, runtime::Backend backend, int64_t ranks, int64_t threads,
              bool quick, bool allowTf32) {
  int64_t local = ranks;
  if (const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    local = std::max<int64_t>(1, std::atoll(value));
  if (threads == 0)
    threads = cal::defaultThreads(local);
  cal::setKernelThreads(threads);

  std::unique_ptr<runtime::comm::Communicator> world;
#ifndef MEGAC_CALIBRATE_STANDALONE
  if (ranks > 1) {
    auto created =
        runtime::comm::MpiCommunicator::create(cal::worldMesh(ranks), std::chrono::seconds(300));
    if (!created.isOk())
      return fail(kCommand, created.status().message());
    world = std::move(created.value());
  }
#endif
  int rank = world ? world->rank() : 0;
  cal::Options options;
  options.backend = backend;
  options.allowTf32 = allowTf32;
  options.quick = quick;
  options.threads = threads;
  options.world = world.get();
  options.command =
      std::string("megac calibrate --backend ") + runtime::backendName(backend) + " --ranks " +
      std::to_string(ranks) +
      (backend == runtime::Backend::cpu ? " --threads " + std::to_string(threads) : std::string()) +
      (quick ? " --quick" : "");
  options.progress = [](const std::string &line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  StatusOr<cal::Results> results = cal::calibrate(options);
  if (!results.isOk()) {
    fail(kCommand, (ranks > 1 ? "rank " + std::to_string(rank) + ": " : std::string()) +
                       results.status().message());
#ifndef MEGAC_CALIBRATE_STANDALONE
    if (world)
      runtime::comm::MpiCommunicator::abortJob(1);
#endif
    return 1;
  }
  return rank == 0 ? writeSpec(out, *results) : 0;
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
  StatusOr<runtime::Backend> resolved = driver::resolveBackend(backendName);
  if (!resolved.isOk())
    return f.usage(resolved.status().message());
  runtime::Backend backend = *resolved;
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
  return calibrate(*out, backend, ranks, threads, quick, allowTf32);
}

} // namespace megac::cli
