// `megac calibrate`: flags -> runtime/calibrate's microbenchmarks -> a device spec file that
// `megac plan --cluster FILE.json:NODESxPER_NODE` reads. Also built without the compiler as
// megac-calibrate (MEGAC_CALIBRATE_STANDALONE: no MLIR, no MPI; one process).
#include "planner/Calibration.h"
#include "planner/Hardware.h"
#include "runtime/calibrate/Calibrate.h"
#include "tools/megac/Args.h"
#include "tools/megac/BackendOption.h"

#ifndef MEGAC_CALIBRATE_STANDALONE
#include "runtime/comm/MpiCommunicator.h"
#include "tools/megac/TrainOptions.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace megac::cli {
namespace {

namespace cal = runtime::calibrate;

constexpr const char *kCalibrateHelp =
    R"(usage: megac calibrate [--backend cpu|cuda] [--ranks N] [--threads T] [--quick]
                       [--allow-tf32] [--oversubscribe] -o HW.json

Measures this machine with the runtime's own kernels and writes a device spec for the planner:
`megac plan MODEL --cluster HW.json:NODESxPER_NODE ...`. Every group runs on all ranks at once,
as training does, and each point is the slowest rank's:
  instruction  the executor's cost of one tiny instruction (cuda: also an empty kernel launch)
  gemm         Linear/MatMul over square and transformer shapes, f32 and bf16 (cuda: fp16 too)
  bandwidth    a streaming copy from 16 KiB to 256 MiB working sets (cuda: 64 KiB to 2 GiB)
  kernels      each memory-bound kernel class (norms, softmax, GELU, cross-entropy, AdamW, ...)
               in cache and in DRAM, one instruction each
  attention    causal Attention and AttentionGrad at a few (batch x heads, seq, head dim)
  collectives  all-reduce, all-gather, reduce-scatter and send/recv from 4 B to 64 MiB
               (only with --ranks N > 1; over NCCL on GPUs)
Points repeat until about 50 ms each (--quick: a few points, 10 ms each, for tests); the
whole CPU run takes about a minute. No training plan is run.

  --backend cpu|cuda  cpu: OpenBLAS and the reference kernels (MPI between ranks); cuda: one GPU
                      per rank (cuBLASLt, the CUDA kernels, NCCL). Default: cuda when usable.
  --ranks N           N processes, started under mpirun as `megac train --ranks` does
                      (default 1; a job already started by mpirun is detected)
  --threads T         CPU kernel/BLAS threads per rank (default: cores / ranks on this node)
  --oversubscribe     pass --oversubscribe to mpirun (it is added anyway when N > cores)
  --allow-tf32        cuda: fp32 GEMMs through TF32 tensor cores
  -o HW.json          the device spec to write (rank 0 writes it))";

std::optional<int64_t> positive(const std::string &text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  int64_t v = std::stoll(text);
  return v >= 1 ? std::optional<int64_t>(v) : std::nullopt;
}

int launched() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return 0;
}

/// A failure of the run (exit 1); usage() is a bad command line (exit 2).
int fail(const std::string &message) {
  std::fprintf(stderr, "megac calibrate: error: %s\n", message.c_str());
  return 1;
}
int usage(const std::string &message) {
  fail(message);
  return 2;
}

/// Link numbers when no collective was measured (one rank or one GPU): the matching datasheet
/// preset's for a known GPU, else one copy in and one out of DRAM on a CPU; says which in `note`.
void assumeLinks(planner::DeviceSpec &d, const cal::Results &r, std::string &note) {
  std::optional<planner::DeviceSpec> base;
  if (r.backend == "cuda") {
    const std::string &name = r.deviceName;
    if (name.find("H200") != std::string::npos)
      base = planner::preset("h200");
    else if (name.find("H100") != std::string::npos)
      base = planner::preset("h100-sxm");
    else if (name.find("A100") != std::string::npos)
      base = planner::preset(r.memoryBytes > 50e9 ? "a100-80g" : "a100-40g");
  }
  if (base) {
    d.intraNodeBandwidth = base->intraNodeBandwidth;
    d.intraNodeLatency = base->intraNodeLatency;
    d.interNodeBandwidth = base->interNodeBandwidth;
    d.interNodeLatency = base->interNodeLatency;
    note = "link numbers from the " + base->name + " preset (datasheet)";
  } else if (r.backend == "cuda") {
    d.intraNodeBandwidth = d.interNodeBandwidth = 25e9; // PCIe 4.0 x16, one direction
    d.intraNodeLatency = d.interNodeLatency = 10e-6;
    note = "link numbers assumed (PCIe 4.0 x16: 25 GB/s, 10 us)";
  } else {
    d.intraNodeBandwidth = d.interNodeBandwidth = r.dramBandwidth() / 2;
    d.intraNodeLatency = d.interNodeLatency = 1e-6;
    note = "link numbers assumed (shared memory: half the DRAM copy rate, 1 us)";
  }
}

/// The device spec of a calibration: the scalars from the measurements (efficiencies 1: the
/// tables hold what is achieved), the tables as measured.
planner::DeviceSpec deviceSpec(const cal::Results &r) {
  planner::DeviceSpec d;
  d.name = r.deviceName + " (calibrated)";
  d.peakFlopsFp32 = r.peakFlops("f32");
  d.peakFlopsBf16 = r.peakFlops("bf16") > 0 ? r.peakFlops("bf16") : d.peakFlopsFp32;
  // The CPU runtime computes fp16 exactly as bf16 (widened to f32): the same rate.
  d.peakFlopsFp16 = r.peakFlops("f16") > 0 ? r.peakFlops("f16") : d.peakFlopsBf16;
  d.memoryBytes = r.memoryBytes;
  d.memoryBandwidth = r.dramBandwidth();
  d.devicesPerNode = r.ranks;
  d.computeUnits = std::max<int64_t>(1, r.computeUnits);
  if (r.backend == "cpu") { // the OpenBLAS sgemm micro-kernel's tile, as the cpu preset
    d.gemmTileM = 16;
    d.gemmTileN = 4;
  }
  d.gemmEfficiency = d.memoryEfficiency = d.linkEfficiency = 1.0;
  d.reservedBytes = r.backend == "cuda" ? 2e9 : 0; // the presets' CUDA context and workspaces
  d.launchSeconds = r.launchSeconds;
  std::string source = r.source;
  if (double bw = r.linkBandwidth(); bw > 0) {
    d.intraNodeBandwidth = d.interNodeBandwidth = bw; // one node: the same links measured
    d.intraNodeLatency = d.interNodeLatency = r.linkLatency();
    source += "; inter-node links not measured (one node): the intra-node numbers";
  } else {
    std::string note;
    assumeLinks(d, r, note);
    source += "; " + note;
  }
  planner::Calibration &c = d.calibration;
  c.source = source;
  c.threads = r.threads;
  c.instructionSeconds = r.instructionSeconds;
  for (const cal::GemmResult &g : r.gemm)
    c.gemm.push_back({g.m, g.n, g.k, g.elementBytes, g.flopsPerSecond});
  for (const cal::BandwidthResult &b : r.bandwidth)
    c.bandwidth.push_back({b.workingSetBytes, b.bytesPerSecond});
  for (const cal::KernelResult &k : r.kernels)
    c.kernels.push_back({k.kernel, k.bytes, k.seconds});
  for (const cal::AttentionResult &a : r.attention)
    c.attention.push_back(
        {a.batchHeads, a.seq, a.headDim, a.causal, a.forwardSeconds, a.backwardSeconds});
  for (const cal::CommResult &m : r.comm)
    c.comm.push_back({m.op, m.ranks, m.bytes, m.seconds});
  return d;
}

/// One paragraph on stdout: what the spec says.
void summarize(const std::string &path, const planner::DeviceSpec &d, const cal::Results &r) {
  double low = 0, high = 0;
  for (const cal::GemmResult &g : r.gemm)
    if (g.dtype == "f32") {
      low = low == 0 ? g.flopsPerSecond : std::min(low, g.flopsPerSecond);
      high = std::max(high, g.flopsPerSecond);
    }
  std::printf("wrote %s: %s, %lld rank(s)\n", path.c_str(), d.name.c_str(),
              (long long)d.devicesPerNode);
  std::printf("  gemm f32 %.1f-%.1f GFLOP/s, bf16 peak %.1f, fp16 peak %.1f\n", low / 1e9,
              high / 1e9, d.peakFlopsBf16 / 1e9, d.peakFlopsFp16 / 1e9);
  std::printf("  streaming copy %.1f GB/s at %.0f MiB; instruction %.3f us",
              d.memoryBandwidth / 1e9,
              r.bandwidth.empty() ? 0.0 : r.bandwidth.back().workingSetBytes / (1 << 20),
              r.instructionSeconds * 1e6);
  if (r.launchSeconds > 0)
    std::printf("; empty kernel launch %.2f us", r.launchSeconds * 1e6);
  std::printf("\n  kernels (GB/s, largest call):");
  for (size_t i = 0; i < r.kernels.size(); ++i)
    if (i + 1 == r.kernels.size() || r.kernels[i + 1].kernel != r.kernels[i].kernel)
      std::printf(" %s %.1f", r.kernels[i].kernel.c_str(),
                  r.kernels[i].bytes / r.kernels[i].seconds / 1e9);
  std::printf("\n");
  const cal::CommResult *smallest = nullptr, *largest = nullptr;
  for (const cal::CommResult &m : r.comm)
    if (m.op == "all_reduce") {
      smallest = !smallest || m.bytes < smallest->bytes ? &m : smallest;
      largest = !largest || m.bytes > largest->bytes ? &m : largest;
    }
  for (const cal::CommResult *m : {smallest, largest})
    if (m)
      std::printf("  all_reduce of %.0f bytes over %lld ranks: %.1f us\n", m->bytes,
                  (long long)m->ranks, m->seconds * 1e6);
  if (largest)
    std::printf("  link: %.2f GB/s bus bandwidth, %.2f us per ring step\n",
                d.intraNodeBandwidth / 1e9, d.intraNodeLatency * 1e6);
  for (const std::string &note : r.notes)
    std::printf("  %s\n", note.c_str());
}

} // namespace

int calibrateCommand(int argc, char **argv) {
  for (int i = 2; i < argc; ++i)
    if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      std::puts(kCalibrateHelp);
      return 0;
    }
  Args args;
  if (std::string e = args.parse(argc, argv, 2, {"backend", "ranks", "threads", "o"},
                                 {"quick", "allow-tf32", "oversubscribe"});
      !e.empty())
    return usage(e + " (see megac calibrate --help)");
  if (!args.positional().empty())
    return usage("unexpected argument '" + args.positional()[0] + "'");
  std::optional<std::string> out = args.get("o");
  if (!out)
    return usage("missing -o HW.json (the device spec to write)");
  std::filesystem::path dir = std::filesystem::path(*out).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    return usage("-o: no directory " + dir.string());
  int64_t ranks = 1, threads = 0;
  if (std::optional<std::string> text = args.get("ranks")) {
    std::optional<int64_t> n = positive(*text);
    if (!n)
      return usage("--ranks: '" + *text + "' is not an integer >= 1");
    ranks = *n;
  }
  if (std::optional<std::string> text = args.get("threads")) {
    std::optional<int64_t> n = positive(*text);
    if (!n)
      return usage("--threads: '" + *text + "' is not an integer >= 1");
    threads = *n;
  }
  runtime::Backend backend = runtime::Backend::cpu;
  bool allowTf32 = false;
  if (std::string e = parseBackendOption(args, backend, allowTf32); !e.empty())
    return usage(e);
  if (int n = launched(); n > 1) {
#ifdef MEGAC_CALIBRATE_STANDALONE
    return usage("megac-calibrate runs one process, not " + std::to_string(n) +
                 " under mpirun; use `megac calibrate --ranks N` (Open MPI)");
#endif
    if (args.get("ranks") && ranks != n)
      return usage("--ranks " + std::to_string(ranks) + " differs from the " + std::to_string(n) +
                   " ranks mpirun started");
    ranks = n;
  } else if (ranks > 1) {
#ifdef MEGAC_CALIBRATE_STANDALONE
    return usage("--ranks " + std::to_string(ranks) +
                 ": megac-calibrate runs one process; use `megac calibrate --ranks N` (Open MPI)");
#else
    TrainConfig launch;
    launch.ranks = ranks;
    launch.oversubscribe = args.has("oversubscribe");
    return relaunchUnderMpirun(argc, argv, launch);
#endif
  }
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
      return fail(created.status().message());
    world = std::move(created.value());
  }
#endif
  int rank = world ? world->rank() : 0;
  cal::Options options;
  options.backend = backend;
  options.allowTf32 = allowTf32;
  options.quick = args.has("quick");
  options.threads = threads;
  options.world = world.get();
  options.command =
      std::string("megac calibrate --backend ") + runtime::backendName(backend) + " --ranks " +
      std::to_string(ranks) +
      (backend == runtime::Backend::cpu ? " --threads " + std::to_string(threads) : std::string()) +
      (options.quick ? " --quick" : "");
  options.progress = [](const std::string &line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  };
  StatusOr<cal::Results> results = cal::calibrate(options);
  if (!results.isOk()) {
    fail((ranks > 1 ? "rank " + std::to_string(rank) + ": " : std::string()) +
         results.status().message());
#ifndef MEGAC_CALIBRATE_STANDALONE
    if (world)
      runtime::comm::MpiCommunicator::abortJob(1);
#endif
    return 1;
  }
  if (rank != 0)
    return 0;
  planner::DeviceSpec spec = deviceSpec(*results);
  {
    std::ofstream file(*out, std::ios::binary | std::ios::trunc);
    file << planner::deviceSpecJson(spec);
    if (!file.flush())
      return fail("-o: cannot write '" + *out + "'");
  }
  // The file must load as the planner will read it.
  std::string error;
  if (!planner::loadDeviceSpec(*out, &error))
    return fail("the written spec does not load: " + error);
  summarize(*out, spec, *results);
  return 0;
}

} // namespace megac::cli
