// Hardware as data (issue 6): per-device peak FLOP/s, memory and links, and clusters of them.
// MLIR-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

/// What `megac calibrate` measured on a machine (planner/Calibration.h reads these tables; the
/// datasheet presets leave them empty and fall back to the formulas in planner/KernelModel.h).
/// Every rate was measured with all of the spec's ranks running at once, as in training.
struct GemmPoint {
  int64_t m = 0, n = 0, k = 0; // C[m,n] = A[m,k]·B[k,n]
  int64_t elementBytes = 4;    // 4 fp32, 2 bf16/fp16
  double flopsPerSecond = 0;
};
struct BandwidthPoint {
  double workingSetBytes = 0; // bytes read + written by one pass of a streaming copy
  double bytesPerSecond = 0;  // (read + written) / time
};
struct KernelPoint {
  std::string kernel; // a memory-bound kernel class (planner/KernelModel.h, kernelClassName)
  double bytes = 0;   // bytes read + written by one call
  double seconds = 0; // one call, instruction overhead included
};
struct AttentionPoint {
  int64_t batchHeads = 0, seq = 0, headDim = 0; // q [b·h, s, d], keys over the same s
  bool causal = true;
  double forwardSeconds = 0, backwardSeconds = 0; // one call each
};
struct CommPoint {
  std::string op;     // "all_reduce", "all_gather", "reduce_scatter", "send_recv"
  int64_t ranks = 2;  // group size
  double bytes = 0;   // the whole buffer (all-gather: the gathered output)
  double seconds = 0; // one call, median over repetitions
};
/// The per-rank tables of one occupancy of the machine: what one rank measured while `ranks`
/// ranks of `threads` kernel threads each ran the same benchmarks at once (issue 34: ranks that
/// share cores, caches and memory bandwidth are slower than one alone).
struct OccupancyTables {
  std::string name;              // "alone-1t", "alone-2t", ... (JSON key "name")
  int64_t ranks = 1;             // ranks measuring at once on the node
  int64_t threads = 1;           // kernel/BLAS threads per rank
  double instructionSeconds = 0; // as Calibration's
  std::vector<GemmPoint> gemm;
  std::vector<BandwidthPoint> bandwidth;
  std::vector<KernelPoint> kernels;
  std::vector<AttentionPoint> attention;
};
struct Calibration {
  std::string source;  // "megac calibrate --backend cpu --threads 1 on HOST, DATE"
  int64_t threads = 0; // CPU: BLAS/kernel threads per rank the tables hold
  /// Ranks that measured the tables below at once, and the node's cores; 0 in specs written
  /// before issue 34 (their tables then serve every layout).
  int64_t ranks = 0, cores = 0;
  double instructionSeconds = 0; // fixed cost of one plan instruction / kernel launch
  std::vector<GemmPoint> gemm;
  std::vector<BandwidthPoint> bandwidth; // by working set: cache levels, then DRAM
  std::vector<KernelPoint> kernels;
  std::vector<AttentionPoint> attention;
  std::vector<CommPoint> comm;
  /// Tables measured at other occupancies (`megac calibrate --backend cpu` without --ranks:
  /// one rank alone with 1 thread and with every core's threads); the ones above are then
  /// every core busy (ranks = cores, 1 thread each). calibrationFor (planner/Calibration.h)
  /// picks a layout's.
  std::vector<OccupancyTables> occupancies;
  bool empty() const {
    return gemm.empty() && bandwidth.empty() && kernels.empty() && attention.empty() &&
           comm.empty() && instructionSeconds == 0 && occupancies.empty();
  }
};

struct DeviceSpec {
  std::string name;         // "a100-80g"
  double peakFlopsFp32 = 0; // dense, FLOP/s (TF32 tensor cores where that is the default)
  double peakFlopsBf16 = 0;
  double peakFlopsFp16 = 0;
  double memoryBytes = 0;     // HBM capacity
  double memoryBandwidth = 0; // bytes/s
  int64_t devicesPerNode = 8;
  double intraNodeBandwidth = 0; // per device, one direction, bytes/s (NVLink)
  double intraNodeLatency = 0;   // seconds
  double interNodeBandwidth = 0; // per device, bytes/s (InfiniBand)
  double interNodeLatency = 0;
  // What the cost model (planner/CostModel.h) needs beyond the datasheet. Defaults are the
  // assumptions stated in planner/Hardware.cpp; a spec file may override them by these names.
  int64_t computeUnits = 1; // SMs (GEMM tiles run one wave of computeUnits at a time)
  int64_t gemmTileM = 128, gemmTileN = 128; // output tile of one unit (tile quantization)
  double gemmEfficiency = 0.8;              // fraction of peak a large, well-shaped GEMM reaches
  double memoryEfficiency = 0.85; // fraction of memoryBandwidth a streaming kernel reaches
  double linkEfficiency = 0.8;    // fraction of link bandwidth a collective (bus bandwidth) reaches
  double reservedBytes = 0;       // runtime context, library workspaces, allocator slack
  /// Gap between two dependent kernels on a GPU (launch latency as the device sees it).
  double launchSeconds = 0;
  /// Fraction of peak a flash-attention kernel reaches, forward and backward (FLOPs counted
  /// without the causal half); used when the calibration has no attention points.
  double attentionForwardEfficiency = 0.6, attentionBackwardEfficiency = 0.5;
  /// Device <-> host copies (PCIe), bytes/s one direction: pipeline sends staged in host memory.
  double hostBandwidth = 0;
  /// Last-level cache: a memory-bound kernel whose working set fits streams at cacheBandwidth.
  double cacheBytes = 0, cacheBandwidth = 0;
  /// Measured tables from `megac calibrate` (JSON key "calibration"); empty for presets.
  Calibration calibration;
  /// CPU: kernel threads each rank of the planned layout runs (`megac plan --threads`, as
  /// `megac train --threads`); 0: megac train's default, the calibration's cores over the ranks
  /// per node. Picks the calibration's occupancy; not a spec-file field.
  int64_t threadsPerRank = 0;
};

struct Cluster {
  DeviceSpec device;
  int64_t nodes = 1;
  int64_t devices() const { return nodes * device.devicesPerNode; }
};

/// The built-in presets: a100-40g, a100-80g, h100-sxm, h200, cpu (one rank per core of this
/// machine, numbers from bench/planner_microbench.cpp).
std::vector<std::string> presetNames();
std::optional<DeviceSpec> preset(const std::string &name);
/// A device from a JSON spec file (the DeviceSpec fields by name; "base": "h100-sxm" starts
/// from a preset and makes every field optional), or nullopt with a one-line `error`.
std::optional<DeviceSpec> loadDeviceSpec(const std::string &path, std::string *error);
/// "a100-80g:128x8" (nodes x devices per node), "h100-sxm:16" (16 devices on
/// ceil(16 / devicesPerNode) nodes; the count must fill them), or "FILE.json:4x8".
std::optional<Cluster> parseCluster(const std::string &text, std::string *error);

} // namespace megac::planner
