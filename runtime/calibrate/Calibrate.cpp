// The calibration run: device facts, then each group of microbenchmarks (Calibrate.h).
#include "runtime/calibrate/Calibrate.h"

#include "runtime/calibrate/Benches.h"
#include "runtime/calibrate/CoreDistance.h"
#include "runtime/calibrate/CudaProbe.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/cuda/Device.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <thread>
#include <unistd.h>

namespace megac::runtime::calibrate {
namespace {

/// "model name" of /proc/cpuinfo, or "cpu".
std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0)
      if (size_t colon = line.find(':'); colon != std::string::npos) {
        std::string name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        if (!name.empty())
          return name;
      }
  return "cpu";
}

/// MemTotal of /proc/meminfo in bytes, 0 if unreadable.
double memTotal() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemTotal:")
      return kib * 1024;
  return 0;
}

/// The largest cache of CPU 0 in sysfs (its highest level: on x86 the last-level cache that
/// every core of the node, or of its die, shares), in bytes; 0 if unreadable.
double lastLevelCacheBytes() {
  double largest = 0;
  for (int index = 0; index < 16; ++index) {
    std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    if (!in)
      break;
    double size = 0;
    std::string unit;
    if (!(in >> size))
      continue;
    in >> unit; // "32768K", read as 32768 then "K"
    double scale = unit == "K" ? 1024 : unit == "M" ? 1024 * 1024 : unit.empty() ? 1 : 0;
    largest = std::max(largest, size * scale);
  }
  return largest;
}

int64_t ranksOnThisNode(int64_t ranks) {
  if (const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    return std::max<int64_t>(1, std::atoll(local));
  return ranks;
}

std::string hostAndDate() {
  char host[256] = "unknown host";
  gethostname(host, sizeof host - 1);
  std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&t));
  return std::string(host) + ", " + date;
}

/// Sets an environment variable for the lifetime of the object.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

private:
  const char *name_;
  std::optional<std::string> old_;
};

} // namespace

double Results::peakFlops(const std::string &dtype) const {
  double best = 0;
  for (const GemmResult &g : gemm)
    if (g.dtype == dtype)
      best = std::max(best, g.flopsPerSecond);
  return best;
}

double Results::dramBandwidth() const {
  const BandwidthResult *largest = nullptr;
  for (const BandwidthResult &b : bandwidth)
    if (!largest || b.workingSetBytes > largest->workingSetBytes)
      largest = &b;
  return largest ? largest->bytesPerSecond : 0;
}

double Results::linkBandwidth() const {
  const CommResult *largest = nullptr;
  for (const CommResult &c : comm)
    if (c.op == "all_reduce" && (!largest || c.bytes > largest->bytes))
      largest = &c;
  if (!largest)
    return 0;
  double n = double(largest->ranks);
  return largest->bytes / largest->seconds * 2 * (n - 1) / n;
}

double Results::linkLatency() const {
  const CommResult *smallest = nullptr;
  for (const CommResult &c : comm)
    if (c.op == "all_reduce" && (!smallest || c.bytes < smallest->bytes))
      smallest = &c;
  if (!smallest)
    return 0;
  return smallest->seconds / (2 * double(smallest->ranks - 1));
}

comm::Mesh worldMesh(int64_t ranks) { return comm::Mesh{{"world"}, {ranks}}; }

void setKernelThreads(int64_t threads) { runtime::cpu::setKernelThreads(int(threads)); }

int64_t defaultThreads(int64_t ranksOnThisNode) {
  int64_t cores = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  return std::max<int64_t>(1, cores / std::max<int64_t>(1, ranksOnThisNode));
}

/// Runs `bench` `rounds` times (spread over the calibration, so one slow moment of a shared
/// machine does not set a table) and keeps, point by point, the median of each measured value.
template <typename Row>
Status medianOfRounds(int rounds, std::vector<Row> Results::*table,
                      const std::function<Status(Results &)> &bench,
                      const std::vector<double Row::*> &values, Results &into) {
  std::vector<Results> runs(size_t(std::max(1, rounds)));
  for (Results &run : runs)
    RETURN_IF_ERROR(bench(run));
  std::vector<Row> rows = runs.front().*table;
  for (size_t i = 0; i < rows.size(); ++i)
    for (double Row::*value : values) {
      std::vector<double> samples;
      for (const Results &run : runs)
        if (i < (run.*table).size())
          samples.push_back((run.*table)[i].*value);
      std::sort(samples.begin(), samples.end());
      rows[i].*value = samples[samples.size() / 2];
    }
  into.*table = std::move(rows);
  return Status::ok();
}

StatusOr<Results> calibrate(const Options &options) {
  Sync sync(options.world);
  if (options.world && options.world->mesh().axisSizes.size() != 1)
    return Status::error("calibrate: the world communicator must have one mesh axis");
  Results r;
  r.backend = backendName(options.backend);
  r.ranks = sync.ranks();
  r.cores = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()));
  BenchContext ctx;
  ctx.backend = options.backend;
  ctx.allowTf32 = options.allowTf32;
  ctx.quick = options.quick;
  ctx.sync = &sync;
  ctx.policy.targetSeconds = options.quick ? 0.01 : 0.05;
  // Repeated elementwise instructions must stay separate kernels on a GPU (the CUDA executor
  // would fuse them): the tables are per kernel, and the planner's stack profile applies fusion.
  std::optional<ScopedEnv> noFusion;
  std::string device;
  if (options.backend == Backend::cuda) {
    StatusOr<int> devices = cuda::usableDevices();
    if (!devices.isOk())
      return Status::error("calibrate --backend cuda: no usable CUDA device: " +
                           devices.status().message());
    ASSIGN_OR_RETURN(int index, cuda::defaultDeviceFor(sync.rank()));
    ASSIGN_OR_RETURN(GpuInfo gpu, gpuInfo(index));
    r.deviceName = gpu.name;
    r.memoryBytes = gpu.memoryBytes;
    r.computeUnits = gpu.multiprocessors;
    r.threads = 0;
    ASSIGN_OR_RETURN(double launch, emptyKernelLaunchSeconds(index));
    ASSIGN_OR_RETURN(r.launchSeconds, sync.max(launch));
    ctx.activation = DType::bf16;
    ctx.repeat = 16;
    noFusion.emplace("MEGAC_NO_FUSION", "1");
    StatusOr<std::string> described = cuda::describeDevice(index);
    device = described.isOk() ? *described : gpu.name;
  } else {
    r.deviceName = cpuModel();
    r.memoryBytes = memTotal() / double(ranksOnThisNode(r.ranks));
    r.cacheBytes = lastLevelCacheBytes();
    r.threads = options.threads;
    r.computeUnits = options.threads;
    ctx.activation = DType::f32;
    device = r.deviceName;
  }

  auto group = [&](const char *name, const std::function<Status(std::string &)> &run) -> Status {
    double start = now();
    std::string detail;
    RETURN_IF_ERROR(run(detail));
    if (options.progress && sync.rank() == 0) {
      char line[320];
      std::snprintf(line, sizeof line, "calibrate: %-11s %6.1f s  %s", name, now() - start,
                    detail.c_str());
      options.progress(line);
    }
    return Status::ok();
  };
  auto count = [](size_t n, const char *what) { return std::to_string(n) + " " + what; };
  // Where the host has the CPUs of a multi-thread rank, before and after its sweeps: two dies
  // apart, every transfer between its threads costs ~6x (runtime/calibrate/CoreDistance.h).
  auto probePlacement = [&] {
    if (options.backend != Backend::cpu || r.threads < 2 || r.ranks != 1)
      return;
    std::optional<std::pair<int, int>> cpus = firstTwoAllowedCpus();
    if (!cpus)
      return;
    r.probedCpus = *cpus;
    if (std::optional<double> ns = coreRoundTripNs(cpus->first, cpus->second))
      r.coreRoundTripNs.push_back(*ns);
  };
  probePlacement();
  // GEMM, kernel and attention tables: the median of three sweeps (one with --quick).
  const int rounds = options.quick ? 1 : 3;
  RETURN_IF_ERROR(
      group("instruction", [&](std::string &d) { return benchInstructionOverhead(ctx, r, d); }));
  RETURN_IF_ERROR(group("gemm", [&](std::string &d) {
    RETURN_IF_ERROR(medianOfRounds<GemmResult>(
        rounds, &Results::gemm, [&](Results &run) { return benchGemm(ctx, run); },
        {&GemmResult::flopsPerSecond}, r));
    char text[96];
    std::snprintf(text, sizeof text, ", best %.1f GFLOP/s f32, %.1f bf16", r.peakFlops("f32") / 1e9,
                  r.peakFlops("bf16") / 1e9);
    d = count(r.gemm.size(), "shapes") + text;
    return Status::ok();
  }));
  RETURN_IF_ERROR(group("bandwidth", [&](std::string &d) {
    RETURN_IF_ERROR(benchBandwidth(ctx, r));
    char text[96];
    std::snprintf(text, sizeof text, ", %.1f GB/s at the largest", r.dramBandwidth() / 1e9);
    d = count(r.bandwidth.size(), "working sets") + text;
    return Status::ok();
  }));
  RETURN_IF_ERROR(group("kernels", [&](std::string &d) {
    RETURN_IF_ERROR(medianOfRounds<KernelResult>(
        rounds, &Results::kernels, [&](Results &run) { return benchKernels(ctx, run); },
        {&KernelResult::seconds}, r));
    d = count(r.kernels.size(), "points") + " of " +
        count(kernelClassNames().size(), "kernel classes");
    return Status::ok();
  }));
  RETURN_IF_ERROR(group("attention", [&](std::string &d) {
    RETURN_IF_ERROR(medianOfRounds<AttentionResult>(
        rounds, &Results::attention, [&](Results &run) { return benchAttention(ctx, run); },
        {&AttentionResult::forwardSeconds, &AttentionResult::backwardSeconds}, r));
    d = count(r.attention.size(), "shapes") + ", causal, forward and backward";
    return Status::ok();
  }));
  probePlacement();
  if (!r.coreRoundTripNs.empty()) {
    r.notes.push_back(placementNote(r.probedCpus, r.coreRoundTripNs));
    if (options.progress && sync.rank() == 0)
      options.progress("calibrate: " + r.notes.back());
  }
  if (r.ranks > 1) {
    RETURN_IF_ERROR(group("collectives", [&](std::string &d) {
      RETURN_IF_ERROR(benchCollectives(ctx, r));
      d = count(r.comm.size(), "points") + " over " + std::to_string(r.ranks) + " ranks";
      return Status::ok();
    }));
  } else {
    r.notes.push_back(options.backend == Backend::cuda ? "collectives not measured: 1 GPU"
                                                       : "collectives not measured: 1 rank");
    if (options.progress && sync.rank() == 0)
      options.progress("calibrate: " + r.notes.back());
  }
  r.source = options.command + " on " + hostAndDate() + " (" + device + ")";
  for (const std::string &note : r.notes)
    r.source += "; " + note;
  return r;
}

} // namespace megac::runtime::calibrate
