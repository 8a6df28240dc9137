// `megac calibrate`'s measurements and the device spec from them (Calibrate.h).
#include "driver/Calibrate.h"

#include "planner/Calibration.h"
#include "runtime/calibrate/Calibrate.h"
#include "runtime/calibrate/CoreDistance.h"
#include "support/Files.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>

namespace megac::driver {

namespace cal = runtime::calibrate;

namespace {

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

// Writes `spec` to `path` atomically and reads it back with the planner's loader, so a spec
// that `megac plan` cannot read is an error here, not later.
Status writeAndCheckSpec(const std::string &path, const planner::DeviceSpec &spec) {
  std::string json = planner::deviceSpecJson(spec);
  std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(json.data()), json.size());
  if (Status st = writeFileAtomically(path, {&piece, 1}); !st.isOk())
    return Status::error("-o: " + st.message());
  std::string error;
  if (!planner::loadDeviceSpec(path, &error))
    return Status::error("the written spec does not load: " + error);
  return Status::ok();
}

} // namespace

StatusOr<CalibrationResults> calibrate(const CalibrateRequest &request, Communicator *world) {
  int64_t threads = request.threads;
  if (threads == 0) {
    int64_t local = request.ranks;
    if (const char *value = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      local = std::max<int64_t>(1, std::atoll(value));
    threads = cal::defaultThreads(local);
  }
  cal::setKernelThreads(threads);
  cal::Options options;
  options.backend = request.backend;
  options.allowTf32 = request.allowTf32;
  options.quick = request.quick;
  options.threads = threads;
  options.world = world;
  options.command =
      std::string("megac calibrate --backend ") + backendName(request.backend) + " --ranks " +
      std::to_string(request.ranks) +
      (request.backend == Backend::cpu ? " --threads " + std::to_string(threads) : std::string()) +
      (request.quick ? " --quick" : "");
  options.progress = request.progress;
  return cal::calibrate(options);
}

StatusOr<std::string> writeDeviceSpec(const std::string &path, const CalibrationResults &results) {
  planner::DeviceSpec spec = deviceSpec(results);
  if (Status st = writeAndCheckSpec(path, spec); !st.isOk())
    return st;
  return summaryText(path, spec, results);
}

planner::DeviceSpec deviceSpec(const cal::Results &r) {
  planner::DeviceSpec d;
  d.name = r.deviceName + " (calibrated)";
  d.peakFlopsFp32 = r.peakFlops("f32");
  d.peakFlopsBf16 = r.peakFlops("bf16") > 0 ? r.peakFlops("bf16") : d.peakFlopsFp32;
  // The CPU runtime computes fp16 exactly as bf16 (widened to f32): the same rate.
  d.peakFlopsFp16 = r.peakFlops("f16") > 0 ? r.peakFlops("f16") : d.peakFlopsBf16;
  d.memoryBytes = r.memoryBytes;
  d.memoryBandwidth = r.dramBandwidth();
  d.cacheBytes = r.cacheBytes; // the cold operands' threshold (KernelModel::setWeightsInMemory)
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
  if (r.backend == "cpu") { // one node: every rank on it
    c.ranks = r.ranks;
    c.cores = r.cores;
  }
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

StatusOr<std::string> writeMachineSpec(const std::string &path, planner::DeviceSpec busy,
                                       const std::vector<CalibrationResults> &alone) {
  planner::Calibration &c = busy.calibration;
  if (c.ranks <= 0 || c.cores <= 0)
    return Status::error("the every-core-busy spec records no ranks or cores");
  std::string sources;
  for (const CalibrationResults &r : alone) {
    planner::DeviceSpec one = deviceSpec(r);
    planner::OccupancyTables o;
    o.name = "alone-" + std::to_string(r.threads) + "t";
    o.ranks = 1;
    o.threads = r.threads;
    o.instructionSeconds = r.instructionSeconds;
    o.gemm = std::move(one.calibration.gemm);
    o.bandwidth = std::move(one.calibration.bandwidth);
    o.kernels = std::move(one.calibration.kernels);
    o.attention = std::move(one.calibration.attention);
    c.occupancies.push_back(std::move(o));
    sources += (sources.empty() ? "" : ", ") + std::to_string(r.threads) + " thread(s)";
  }
  c.source = "megac calibrate --backend cpu (one spec per machine): every core busy, " + c.source +
             "; one rank alone with " + sources;
  // Where the multi-thread occupancies ran (runtime/calibrate/CoreDistance.h).
  for (const CalibrationResults &r : alone)
    if (!r.coreRoundTripNs.empty())
      c.source += "; alone-" + std::to_string(r.threads) +
                  "t: " + cal::placementNote(r.probedCpus, r.coreRoundTripNs);
  if (Status st = writeAndCheckSpec(path, busy); !st.isOk())
    return st;
  std::string out = "wrote " + path + ": " + busy.name + ", tables for " +
                    std::to_string(c.occupancies.size() + 1) + " occupancies:\n";
  char line[256];
  auto occupancy = [&](const std::string &name, int64_t ranks, int64_t threads,
                       const std::vector<planner::GemmPoint> &gemm,
                       const std::vector<planner::BandwidthPoint> &bandwidth) {
    double peak = 0;
    for (const planner::GemmPoint &g : gemm)
      if (g.elementBytes == 4)
        peak = std::max(peak, g.flopsPerSecond);
    std::snprintf(line, sizeof line,
                  "  %-9s %lld rank(s) x %lld thread(s): gemm f32 peak %.1f GFLOP/s, copy %.1f "
                  "GB/s per rank\n",
                  name.c_str(), (long long)ranks, (long long)threads, peak / 1e9,
                  bandwidth.empty() ? 0.0 : bandwidth.back().bytesPerSecond / 1e9);
    out += line;
  };
  for (const planner::OccupancyTables &o : c.occupancies)
    occupancy(o.name, o.ranks, o.threads, o.gemm, o.bandwidth);
  occupancy("busy", c.ranks, c.threads, c.gemm, c.bandwidth);
  return out;
}

std::string summaryText(const std::string &path, const planner::DeviceSpec &d,
                        const cal::Results &r) {
  std::string out;
  char line[256];
  auto print = [&](auto... args) {
    std::snprintf(line, sizeof line, args...);
    out += line;
  };
  double low = 0, high = 0;
  for (const cal::GemmResult &g : r.gemm)
    if (g.dtype == "f32") {
      low = low == 0 ? g.flopsPerSecond : std::min(low, g.flopsPerSecond);
      high = std::max(high, g.flopsPerSecond);
    }
  print("wrote %s: %s, %lld rank(s)\n", path.c_str(), d.name.c_str(), (long long)d.devicesPerNode);
  print("  gemm f32 %.1f-%.1f GFLOP/s, bf16 peak %.1f, fp16 peak %.1f\n", low / 1e9, high / 1e9,
        d.peakFlopsBf16 / 1e9, d.peakFlopsFp16 / 1e9);
  print("  streaming copy %.1f GB/s at %.0f MiB; instruction %.3f us", d.memoryBandwidth / 1e9,
        r.bandwidth.empty() ? 0.0 : r.bandwidth.back().workingSetBytes / (1 << 20),
        r.instructionSeconds * 1e6);
  if (r.launchSeconds > 0)
    print("; empty kernel launch %.2f us", r.launchSeconds * 1e6);
  print("\n  kernels (GB/s, largest call):");
  for (size_t i = 0; i < r.kernels.size(); ++i)
    if (i + 1 == r.kernels.size() || r.kernels[i + 1].kernel != r.kernels[i].kernel)
      print(" %s %.1f", r.kernels[i].kernel.c_str(),
            r.kernels[i].bytes / r.kernels[i].seconds / 1e9);
  print("\n");
  const cal::CommResult *smallest = nullptr, *largest = nullptr;
  for (const cal::CommResult &m : r.comm)
    if (m.op == "all_reduce") {
      smallest = !smallest || m.bytes < smallest->bytes ? &m : smallest;
      largest = !largest || m.bytes > largest->bytes ? &m : largest;
    }
  for (const cal::CommResult *m : {smallest, largest})
    if (m)
      print("  all_reduce of %.0f bytes over %lld ranks: %.1f us\n", m->bytes, (long long)m->ranks,
            m->seconds * 1e6);
  if (largest)
    print("  link: %.2f GB/s bus bandwidth, %.2f us per ring step\n", d.intraNodeBandwidth / 1e9,
          d.intraNodeLatency * 1e6);
  for (const std::string &note : r.notes)
    print("  %s\n", note.c_str());
  return out;
}

} // namespace megac::driver
