// Hardware presets (datasheet numbers, REFERENCE.md), device spec files and cluster strings.
#include "planner/Hardware.h"

#include "planner/Calibration.h"
#include "support/Json.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace megac::planner {
namespace {

// Assumptions shared by the GPU presets (no device was available to measure them):
// - gemmEfficiency 0.8: REFERENCE.md, "large GEMMs ~70-80% of peak".
// - memoryEfficiency 0.85: streaming kernels reach a bit below the HBM datasheet rate.
// - linkEfficiency 0.8: NCCL bus bandwidth stays below the link rate (REFERENCE.md).
// - Latencies: one ring step over NVLink 3 us, over InfiniBand 6 us (kernel launch plus the
//   protocol's handshake; only small messages feel them).
// - reservedBytes 2 GB: CUDA context, cuBLAS workspace, NCCL buffers, allocator slack.
// - Tiles per SM: cuBLAS's large bf16 tiles, 256x128 (Ampere) and 128x256 (Hopper).
// - Intra-node bandwidth is the NVLink datasheet number halved (one direction); inter-node is
//   one NIC per GPU (DGX: 8x HDR 200 Gb/s = 25 GB/s, 8x NDR 400 Gb/s = 50 GB/s).
DeviceSpec gpu(std::string name, double tf32, double bf16, double memory, double bandwidth,
               double nvlinkBidirectional, double ib, int64_t sms, double l2, double hostLink) {
  DeviceSpec d;
  d.name = std::move(name);
  d.peakFlopsFp32 = tf32; // TF32 tensor cores: what fp32 matmuls use by default in training
  d.peakFlopsBf16 = bf16;
  d.peakFlopsFp16 = bf16;
  d.memoryBytes = memory;
  d.memoryBandwidth = bandwidth;
  d.devicesPerNode = 8;
  d.intraNodeBandwidth = nvlinkBidirectional / 2;
  d.intraNodeLatency = 3e-6;
  d.interNodeBandwidth = ib;
  d.interNodeLatency = 6e-6;
  d.computeUnits = sms;
  // cuBLAS's large bf16/fp16 tiles: 256x128 on Ampere (ampere_*_s16816gemm_*_256x128_* kernels),
  // 128x256 on Hopper (sm90_xmma_gemm_*_tilesize128x256x64, CUTLASS 3's default warp-specialized
  // tile): the names Nsight Systems shows for Megatron's GEMMs. Presets below set them per GPU.
  d.gemmTileM = 128;
  d.gemmTileN = 256;
  d.gemmEfficiency = 0.8;
  d.memoryEfficiency = 0.85;
  d.linkEfficiency = 0.8;
  d.reservedBytes = 2e9;
  d.launchSeconds = 2e-6;
  d.hostBandwidth = hostLink;
  d.cacheBytes = l2;
  d.cacheBandwidth = 2.5 * bandwidth;
  return d;
}

// This machine, one rank per core (megac train gives each of the local ranks cores/ranks
// BLAS threads). Measured by bench/planner_microbench.cpp (build-pl/bin/bench-planner-micro)
// on 2026-11-30, AMD EPYC (Zen 4) under KVM, 2 cores, three runs (a CI build shared the
// machine; the best runs are kept):
// - single-thread sgemm 115 GFLOP/s at 64^3 (in cache: the core's FMA peak), 97-100 GFLOP/s at
//   1024^3..2048^3 (gemmEfficiency 0.87), 79-104 GFLOP/s on skinny shapes down to 64 wide;
// - STREAM triad 16.5 GB/s, copy 23 GB/s on one core;
// - the runtime's scalar std::exp / std::erf maps move only 2.5 / 2.0 GB/s: compute-bound.
//   memoryEfficiency 0.25 is the byte-weighted harmonic mean over a GPT block's memory-bound
//   ops in this model (planner/Planner.cpp): about half of their bytes are softmax and GELU
//   (~2.25 GB/s), half norms, adds and transposes (16.5 GB/s): 1 / (0.53/16.5 + 0.47/2.25)
//   = 4.15 GB/s = 0.25 x 16.5.
// bf16/fp16 run the fp32 kernels on widened values (docs/training-step.md), so the same peak.
// Ranks exchange data through MPI shared memory: one copy in and one out at the copy rate
// (11.5 GB/s), ~1 us per message (assumed, not measured). The BLAS micro-kernel tile is 16x4.
DeviceSpec cpu() {
  DeviceSpec d;
  d.name = "cpu";
  d.peakFlopsFp32 = d.peakFlopsBf16 = d.peakFlopsFp16 = 115e9;
  d.memoryBytes = 12e9; // MemTotal 24.6e9 bytes (/proc/meminfo) shared by the 2 ranks
  d.memoryBandwidth = 16.5e9;
  d.devicesPerNode = 2;
  d.intraNodeBandwidth = d.interNodeBandwidth = 23e9 / 2;
  d.intraNodeLatency = d.interNodeLatency = 1e-6;
  d.computeUnits = 1;
  d.gemmTileM = 16;
  d.gemmTileN = 4;
  d.gemmEfficiency = 0.87;
  d.memoryEfficiency = 0.25;
  d.linkEfficiency = 1.0;
  d.reservedBytes = 0;
  return d;
}

std::vector<DeviceSpec> presets() {
  // REFERENCE.md datasheet table (dense, no sparsity); memory in decimal GB as datasheets say.
  // L2: 40 MB (A100), 50 MB (H100/H200); host link PCIe 4.0 x16 (A100) / 5.0 x16 (H100),
  // 32 / 64 GB/s per direction, ~80% achievable.
  auto ampere = [](DeviceSpec d) {
    d.gemmTileM = 256;
    d.gemmTileN = 128;
    return d;
  };
  return {ampere(gpu("a100-40g", 156e12, 312e12, 40e9, 1.555e12, 600e9, 25e9, 108, 40e6, 25e9)),
          ampere(gpu("a100-80g", 156e12, 312e12, 80e9, 2.039e12, 600e9, 25e9, 108, 40e6, 25e9)),
          gpu("h100-sxm", 495e12, 989e12, 80e9, 3.35e12, 900e9, 50e9, 132, 50e6, 50e9),
          gpu("h200", 495e12, 989e12, 141e9, 4.8e12, 900e9, 50e9, 132, 50e6, 50e9), cpu()};
}

bool setField(DeviceSpec &d, const std::string &key, const json::Value &v, std::string *error) {
  using Kind = json::Value::Kind;
  if (key == "name" || key == "base") {
    if (v.kind != Kind::string) {
      *error = "'" + key + "' must be a string";
      return false;
    }
    if (key == "name")
      d.name = v.string;
    return true;
  }
  if (key == "calibration") // `megac calibrate`'s tables (planner/Calibration.h)
    return parseCalibration(v, &d.calibration, error);
  if (v.kind != Kind::number || !std::isfinite(v.number) || v.number < 0) {
    *error = "'" + key + "' must be a non-negative number";
    return false;
  }
  double x = v.number;
  struct Real {
    const char *name;
    double DeviceSpec::*field;
  } reals[] = {{"peakFlopsFp32", &DeviceSpec::peakFlopsFp32},
               {"peakFlopsBf16", &DeviceSpec::peakFlopsBf16},
               {"peakFlopsFp16", &DeviceSpec::peakFlopsFp16},
               {"memoryBytes", &DeviceSpec::memoryBytes},
               {"memoryBandwidth", &DeviceSpec::memoryBandwidth},
               {"intraNodeBandwidth", &DeviceSpec::intraNodeBandwidth},
               {"intraNodeLatency", &DeviceSpec::intraNodeLatency},
               {"interNodeBandwidth", &DeviceSpec::interNodeBandwidth},
               {"interNodeLatency", &DeviceSpec::interNodeLatency},
               {"gemmEfficiency", &DeviceSpec::gemmEfficiency},
               {"memoryEfficiency", &DeviceSpec::memoryEfficiency},
               {"linkEfficiency", &DeviceSpec::linkEfficiency},
               {"reservedBytes", &DeviceSpec::reservedBytes},
               {"launchSeconds", &DeviceSpec::launchSeconds},
               {"attentionForwardEfficiency", &DeviceSpec::attentionForwardEfficiency},
               {"attentionBackwardEfficiency", &DeviceSpec::attentionBackwardEfficiency},
               {"hostBandwidth", &DeviceSpec::hostBandwidth},
               {"cacheBytes", &DeviceSpec::cacheBytes},
               {"cacheBandwidth", &DeviceSpec::cacheBandwidth}};
  for (const Real &r : reals)
    if (key == r.name) {
      d.*r.field = x;
      return true;
    }
  struct Int {
    const char *name;
    int64_t DeviceSpec::*field;
  } ints[] = {{"devicesPerNode", &DeviceSpec::devicesPerNode},
              {"computeUnits", &DeviceSpec::computeUnits},
              {"gemmTileM", &DeviceSpec::gemmTileM},
              {"gemmTileN", &DeviceSpec::gemmTileN}};
  for (const Int &i : ints)
    if (key == i.name) {
      if (!v.isInteger || v.integer < 1) {
        *error = "'" + key + "' must be a positive integer";
        return false;
      }
      d.*i.field = v.integer;
      return true;
    }
  *error = "unknown field '" + key + "'";
  return false;
}

// A spec that the cost model can divide by.
bool validate(const DeviceSpec &d, std::string *error) {
  const char *zero = nullptr;
  if (d.peakFlopsFp32 <= 0)
    zero = "peakFlopsFp32";
  else if (d.peakFlopsBf16 <= 0)
    zero = "peakFlopsBf16";
  else if (d.peakFlopsFp16 <= 0)
    zero = "peakFlopsFp16";
  else if (d.memoryBytes <= 0)
    zero = "memoryBytes";
  else if (d.memoryBandwidth <= 0)
    zero = "memoryBandwidth";
  else if (d.intraNodeBandwidth <= 0)
    zero = "intraNodeBandwidth";
  else if (d.interNodeBandwidth <= 0)
    zero = "interNodeBandwidth";
  else if (d.gemmEfficiency <= 0 || d.gemmEfficiency > 1)
    zero = "gemmEfficiency (in (0, 1])";
  else if (d.memoryEfficiency <= 0 || d.memoryEfficiency > 1)
    zero = "memoryEfficiency (in (0, 1])";
  else if (d.linkEfficiency <= 0 || d.linkEfficiency > 1)
    zero = "linkEfficiency (in (0, 1])";
  if (zero) {
    *error = std::string("'") + zero + "' must be given and positive";
    return false;
  }
  return true;
}

} // namespace

std::vector<std::string> presetNames() {
  std::vector<std::string> names;
  for (const DeviceSpec &d : presets())
    names.push_back(d.name);
  return names;
}

std::optional<DeviceSpec> preset(const std::string &name) {
  for (DeviceSpec &d : presets())
    if (d.name == name)
      return d;
  return std::nullopt;
}

std::optional<DeviceSpec> loadDeviceSpec(const std::string &path, std::string *error) {
  std::string dummy;
  if (!error)
    error = &dummy;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open device spec '" + path + "'";
    return std::nullopt;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto parsed = json::parse(text.str());
  if (!parsed.isOk()) {
    *error = "device spec '" + path + "': " + parsed.status().message();
    return std::nullopt;
  }
  const json::Value &root = parsed.value();
  if (root.kind != json::Value::Kind::object) {
    *error = "device spec '" + path + "': expected a JSON object of DeviceSpec fields";
    return std::nullopt;
  }
  // "base": a preset whose numbers the file starts from (then every field is optional).
  DeviceSpec d;
  if (const json::Value *base = root.find("base")) {
    std::optional<DeviceSpec> b =
        base->kind == json::Value::Kind::string ? preset(base->string) : std::nullopt;
    if (!b) {
      *error = "device spec '" + path + "': 'base' must name a preset (a100-40g, a100-80g, " +
               "h100-sxm, h200, cpu)";
      return std::nullopt;
    }
    d = *b;
  } else {
    d.peakFlopsFp16 = -1; // defaults to bf16 below unless given
  }
  for (size_t i = 0; i < root.keys.size(); ++i) {
    std::string why;
    if (!setField(d, root.keys[i], root.items[i], &why)) {
      *error = "device spec '" + path + "': " + why;
      return std::nullopt;
    }
  }
  if (d.peakFlopsFp16 < 0)
    d.peakFlopsFp16 = d.peakFlopsBf16;
  if (d.name.empty()) {
    size_t slash = path.find_last_of('/');
    d.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  }
  std::string why;
  if (!validate(d, &why)) {
    *error = "device spec '" + path + "': " + why;
    return std::nullopt;
  }
  return d;
}

std::optional<Cluster> parseCluster(const std::string &text, std::string *error) {
  std::string dummy;
  if (!error)
    error = &dummy;
  const std::string usage = " (expected DEVICE:NODESxPER_NODE or DEVICE:COUNT, e.g. "
                            "a100-80g:128x8, h200:16, my-gpu.json:4x8)";
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    *error = "cluster '" + text + "' is malformed" + usage;
    return std::nullopt;
  }
  std::string device = text.substr(0, colon), counts = text.substr(colon + 1);
  auto number = [](const std::string &s) -> int64_t {
    if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
      return 0;
    return std::stoll(s);
  };
  int64_t nodes = 0, perNode = 0, count = 0;
  if (size_t x = counts.find('x'); x != std::string::npos) {
    nodes = number(counts.substr(0, x));
    perNode = number(counts.substr(x + 1));
    if (nodes < 1 || perNode < 1) {
      *error = "cluster '" + text + "': counts must be positive integers" + usage;
      return std::nullopt;
    }
  } else {
    count = number(counts);
    if (count < 1) {
      *error = "cluster '" + text + "': the device count must be a positive integer" + usage;
      return std::nullopt;
    }
  }
  std::optional<DeviceSpec> spec;
  if (device.size() > 5 && device.substr(device.size() - 5) == ".json") {
    spec = loadDeviceSpec(device, error);
    if (!spec)
      return std::nullopt;
  } else {
    spec = preset(device);
    if (!spec) {
      std::string names;
      for (const std::string &n : presetNames())
        names += (names.empty() ? "" : ", ") + n;
      *error = "unknown device '" + device + "' in cluster '" + text + "' (presets: " + names +
               "; or a .json spec file)";
      return std::nullopt;
    }
  }
  Cluster c;
  c.device = *spec;
  if (count) {
    // COUNT devices fill whole nodes of the preset's size; fewer than one node is one node.
    if (count <= c.device.devicesPerNode) {
      c.device.devicesPerNode = count;
      c.nodes = 1;
    } else if (count % c.device.devicesPerNode != 0) {
      *error = "cluster '" + text + "': " + std::to_string(count) +
               " devices do not fill nodes of " + std::to_string(c.device.devicesPerNode) +
               "; write NODESxPER_NODE";
      return std::nullopt;
    } else {
      c.nodes = count / c.device.devicesPerNode;
    }
  } else {
    c.device.devicesPerNode = perNode;
    c.nodes = nodes;
  }
  return c;
}

} // namespace megac::planner
