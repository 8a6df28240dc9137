// Hardware as data (issue 6): per-device peak FLOP/s, memory and links, and clusters of them.
// MLIR-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

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
