// The device spec JSON of `megac calibrate` (planner/Calibration.h): an exact round trip through
// loadDeviceSpec, a located error for every malformed calibration field, and a calibrated spec
// file used as a cluster.
#include "planner/Calibration.h"
#include "planner/Hardware.h"
#include "planner/KernelModel.h"
#include "planner/StackProfile.h"
#include "support/Json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <unistd.h>

namespace megac::planner {
namespace {

std::string writeTemp(const std::string &name, const std::string &text) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("megac_calibration_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

/// Every field away from its default, with values that need all 17 digits.
DeviceSpec sampleSpec() {
  DeviceSpec d;
  d.name = "EPYC \"test\" (calibrated)";
  d.peakFlopsFp32 = 1.0 / 3.0 * 1e11;
  d.peakFlopsBf16 = 9.876543210987654e10;
  d.peakFlopsFp16 = 9.1e10;
  d.memoryBytes = 12342046208;
  d.memoryBandwidth = 3.6312345678901234e10;
  d.devicesPerNode = 2;
  d.intraNodeBandwidth = 7.4e8 + 1.0 / 7.0;
  d.intraNodeLatency = 4.9999999999999998e-7;
  d.interNodeBandwidth = 6.5e8;
  d.interNodeLatency = 1.25e-6;
  d.computeUnits = 3;
  d.gemmTileM = 16;
  d.gemmTileN = 4;
  d.gemmEfficiency = 1.0;
  d.memoryEfficiency = 0.9999999999999999;
  d.linkEfficiency = 0.7;
  d.reservedBytes = 1.5e9;
  d.launchSeconds = 2.3456789e-6;
  Calibration &c = d.calibration;
  c.source = "megac calibrate --backend cpu --ranks 2 on host, today";
  c.threads = 1;
  c.instructionSeconds = 6.484927240353894e-08;
  c.gemm = {{64, 64, 64, 4, 9.98e10}, {2048, 256, 64, 2, 1.0 / 9.0 * 1e12}};
  c.bandwidth = {{16384, 1.758e11}, {268435456, 3.63e10 + 0.1}};
  c.kernels = {
      {"layer_norm", 262144, 1.1e-5}, {"layer_norm", 67108864, 0.015 / 7}, {"adamw", 1e6, 3e-4}};
  c.attention = {{8, 128, 64, true, 6.6e-4, 1.25e-3}, {4, 1024, 64, false, 2.06e-2, 3.9e-2}};
  c.comm = {{"all_reduce", 2, 4, 1.0e-6}, {"send_recv", 2, 67108864, 3.77e-2}};
  return d;
}

void expectEqual(const DeviceSpec &a, const DeviceSpec &b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.peakFlopsFp32, b.peakFlopsFp32);
  EXPECT_EQ(a.peakFlopsBf16, b.peakFlopsBf16);
  EXPECT_EQ(a.peakFlopsFp16, b.peakFlopsFp16);
  EXPECT_EQ(a.memoryBytes, b.memoryBytes);
  EXPECT_EQ(a.memoryBandwidth, b.memoryBandwidth);
  EXPECT_EQ(a.devicesPerNode, b.devicesPerNode);
  EXPECT_EQ(a.intraNodeBandwidth, b.intraNodeBandwidth);
  EXPECT_EQ(a.intraNodeLatency, b.intraNodeLatency);
  EXPECT_EQ(a.interNodeBandwidth, b.interNodeBandwidth);
  EXPECT_EQ(a.interNodeLatency, b.interNodeLatency);
  EXPECT_EQ(a.computeUnits, b.computeUnits);
  EXPECT_EQ(a.gemmTileM, b.gemmTileM);
  EXPECT_EQ(a.gemmTileN, b.gemmTileN);
  EXPECT_EQ(a.gemmEfficiency, b.gemmEfficiency);
  EXPECT_EQ(a.memoryEfficiency, b.memoryEfficiency);
  EXPECT_EQ(a.linkEfficiency, b.linkEfficiency);
  EXPECT_EQ(a.reservedBytes, b.reservedBytes);
  EXPECT_EQ(a.launchSeconds, b.launchSeconds);
  const Calibration &x = a.calibration, &y = b.calibration;
  EXPECT_EQ(x.source, y.source);
  EXPECT_EQ(x.threads, y.threads);
  EXPECT_EQ(x.instructionSeconds, y.instructionSeconds);
  ASSERT_EQ(x.gemm.size(), y.gemm.size());
  for (size_t i = 0; i < x.gemm.size(); ++i) {
    EXPECT_EQ(x.gemm[i].m, y.gemm[i].m);
    EXPECT_EQ(x.gemm[i].n, y.gemm[i].n);
    EXPECT_EQ(x.gemm[i].k, y.gemm[i].k);
    EXPECT_EQ(x.gemm[i].elementBytes, y.gemm[i].elementBytes);
    EXPECT_EQ(x.gemm[i].flopsPerSecond, y.gemm[i].flopsPerSecond);
  }
  ASSERT_EQ(x.bandwidth.size(), y.bandwidth.size());
  for (size_t i = 0; i < x.bandwidth.size(); ++i) {
    EXPECT_EQ(x.bandwidth[i].workingSetBytes, y.bandwidth[i].workingSetBytes);
    EXPECT_EQ(x.bandwidth[i].bytesPerSecond, y.bandwidth[i].bytesPerSecond);
  }
  ASSERT_EQ(x.kernels.size(), y.kernels.size());
  for (size_t i = 0; i < x.kernels.size(); ++i) {
    EXPECT_EQ(x.kernels[i].kernel, y.kernels[i].kernel);
    EXPECT_EQ(x.kernels[i].bytes, y.kernels[i].bytes);
    EXPECT_EQ(x.kernels[i].seconds, y.kernels[i].seconds);
  }
  ASSERT_EQ(x.attention.size(), y.attention.size());
  for (size_t i = 0; i < x.attention.size(); ++i) {
    EXPECT_EQ(x.attention[i].batchHeads, y.attention[i].batchHeads);
    EXPECT_EQ(x.attention[i].seq, y.attention[i].seq);
    EXPECT_EQ(x.attention[i].headDim, y.attention[i].headDim);
    EXPECT_EQ(x.attention[i].causal, y.attention[i].causal);
    EXPECT_EQ(x.attention[i].forwardSeconds, y.attention[i].forwardSeconds);
    EXPECT_EQ(x.attention[i].backwardSeconds, y.attention[i].backwardSeconds);
  }
  ASSERT_EQ(x.comm.size(), y.comm.size());
  for (size_t i = 0; i < x.comm.size(); ++i) {
    EXPECT_EQ(x.comm[i].op, y.comm[i].op);
    EXPECT_EQ(x.comm[i].ranks, y.comm[i].ranks);
    EXPECT_EQ(x.comm[i].bytes, y.comm[i].bytes);
    EXPECT_EQ(x.comm[i].seconds, y.comm[i].seconds);
  }
  EXPECT_EQ(x.ranks, y.ranks);
  EXPECT_EQ(x.cores, y.cores);
  ASSERT_EQ(x.occupancies.size(), y.occupancies.size());
  for (size_t i = 0; i < x.occupancies.size(); ++i) {
    const OccupancyTables &o = x.occupancies[i], &p = y.occupancies[i];
    EXPECT_EQ(o.name, p.name);
    EXPECT_EQ(o.ranks, p.ranks);
    EXPECT_EQ(o.threads, p.threads);
    EXPECT_EQ(o.instructionSeconds, p.instructionSeconds);
    ASSERT_EQ(o.gemm.size(), p.gemm.size());
    for (size_t j = 0; j < o.gemm.size(); ++j)
      EXPECT_EQ(o.gemm[j].flopsPerSecond, p.gemm[j].flopsPerSecond);
    ASSERT_EQ(o.bandwidth.size(), p.bandwidth.size());
    for (size_t j = 0; j < o.bandwidth.size(); ++j)
      EXPECT_EQ(o.bandwidth[j].bytesPerSecond, p.bandwidth[j].bytesPerSecond);
    ASSERT_EQ(o.kernels.size(), p.kernels.size());
    for (size_t j = 0; j < o.kernels.size(); ++j) {
      EXPECT_EQ(o.kernels[j].kernel, p.kernels[j].kernel);
      EXPECT_EQ(o.kernels[j].seconds, p.kernels[j].seconds);
    }
    ASSERT_EQ(o.attention.size(), p.attention.size());
    for (size_t j = 0; j < o.attention.size(); ++j)
      EXPECT_EQ(o.attention[j].backwardSeconds, p.attention[j].backwardSeconds);
  }
}

/// sampleSpec as one spec per machine of 2 cores: the top level every core busy (2 ranks x 1
/// thread), and one rank alone with 1 and with 2 threads, each faster than the last.
DeviceSpec machineSpec() {
  DeviceSpec d = sampleSpec();
  Calibration &c = d.calibration;
  c.ranks = 2;
  c.cores = 2;
  c.threads = 1;
  for (auto [name, threads, speedup] :
       {std::tuple{"alone-1t", 1, 1.25}, std::tuple{"alone-2t", 2, 2.0 + 1.0 / 3.0}}) {
    OccupancyTables o;
    o.name = name;
    o.ranks = 1;
    o.threads = threads;
    o.instructionSeconds = c.instructionSeconds / speedup;
    o.gemm = c.gemm;
    for (GemmPoint &g : o.gemm)
      g.flopsPerSecond *= speedup;
    o.bandwidth = c.bandwidth;
    for (BandwidthPoint &b : o.bandwidth)
      b.bytesPerSecond *= speedup;
    o.kernels = c.kernels;
    for (KernelPoint &k : o.kernels)
      k.seconds /= speedup;
    o.attention = c.attention;
    for (AttentionPoint &a : o.attention) {
      a.forwardSeconds /= speedup;
      a.backwardSeconds /= speedup;
    }
    c.occupancies.push_back(std::move(o));
  }
  return d;
}

TEST(CalibrationJson, OccupanciesRoundTripExactly) {
  DeviceSpec d = machineSpec();
  std::string text = deviceSpecJson(d);
  EXPECT_NE(text.find("\"occupancies\""), std::string::npos);
  std::string error;
  std::optional<DeviceSpec> loaded = loadDeviceSpec(writeTemp("machine.json", text), &error);
  ASSERT_TRUE(loaded) << error;
  expectEqual(d, *loaded);
  EXPECT_EQ(deviceSpecJson(*loaded), text);
  // A spec written before occupancies (no ranks, cores or occupancies) still loads as it was.
  EXPECT_EQ(deviceSpecJson(sampleSpec()).find("occupancies"), std::string::npos);
  EXPECT_EQ(deviceSpecJson(sampleSpec()).find("\"cores\""), std::string::npos);
}

TEST(CalibrationOccupancy, EachLayoutGetsItsOwnTables) {
  DeviceSpec d = machineSpec();
  const Calibration &c = d.calibration;
  struct Case {
    int64_t ranks, threads;
    const char *name;
    double gemmRate;
  };
  // On 2 cores every layout's occupancy was measured: 1 rank x 1 thread, 1 x 2 (megac train's
  // default for one rank: cores / ranks), 2 x 1 (the default for two).
  for (const Case &k :
       {Case{1, 1, "alone-1t", c.occupancies[0].gemm[0].flopsPerSecond},
        Case{1, 0, "alone-2t", c.occupancies[1].gemm[0].flopsPerSecond},
        Case{1, 2, "alone-2t", c.occupancies[1].gemm[0].flopsPerSecond},
        Case{2, 0, "busy", c.gemm[0].flopsPerSecond}, Case{2, 1, "busy", c.gemm[0].flopsPerSecond},
        // Oversubscribed (4 ranks on 2 cores): the nearest, every core busy.
        Case{4, 1, "busy", c.gemm[0].flopsPerSecond}}) {
    std::string chosen;
    Calibration t = calibrationFor(c, k.ranks, k.threads, &chosen);
    EXPECT_EQ(chosen, k.name) << k.ranks << "x" << k.threads;
    EXPECT_TRUE(t.occupancies.empty());
    EXPECT_EQ(t.gemm[0].flopsPerSecond, k.gemmRate) << k.ranks << "x" << k.threads;
    EXPECT_EQ(t.comm.size(), c.comm.size()); // the collectives are the busy run's
  }
  // Without occupancies the one set of tables serves every layout, as before issue 34.
  DeviceSpec old = sampleSpec();
  std::string chosen;
  Calibration same = calibrationFor(old.calibration, 1, 1, &chosen);
  EXPECT_EQ(chosen, "busy");
  EXPECT_EQ(same.gemm[0].flopsPerSecond, old.calibration.gemm[0].flopsPerSecond);
  // A 16-core machine's layout of 4 ranks x 4 threads: every core busy, 4 threads a rank; the
  // nearest in (log2 threads, log2 busy cores) is one rank of 16 threads (1 + 0) over 16 ranks of
  // one thread (2 + 0) and one thread alone (2 + 4).
  Calibration wide = c;
  wide.cores = 16;
  wide.ranks = 16;
  wide.occupancies[1].threads = 16;
  wide.occupancies[1].name = "alone-16t";
  calibrationFor(wide, 4, 4, &chosen);
  EXPECT_EQ(chosen, "alone-16t");
  calibrationFor(wide, 8, 0, &chosen); // 8 ranks x 2 threads: busy (1 + 0) vs alone-16t (3 + 0)
  EXPECT_EQ(chosen, "busy");
}

TEST(CalibrationOccupancy, KernelModelUsesTheLayoutsRates) {
  // The cost model reads the layout's occupancy: one rank alone is faster than each of two ranks
  // sharing the machine, by the tables' factor.
  DeviceSpec d = machineSpec();
  StackProfile megac = *stackProfile("megac", true);
  auto gemm = [&](int64_t ranks, int64_t threads) {
    DeviceSpec at = d;
    at.devicesPerNode = ranks;
    at.threadsPerRank = threads;
    KernelModel k(at, megac, Precision::fp32);
    return k.gemmSeconds(64, 64, 64, 1);
  };
  EXPECT_NEAR(gemm(2, 1) / gemm(1, 1), 1.25, 1e-12);
  EXPECT_NEAR(gemm(2, 1) / gemm(1, 2), 2.0 + 1.0 / 3.0, 1e-12);
  DeviceSpec alone = d;
  alone.devicesPerNode = 1;
  alone.threadsPerRank = 1;
  KernelModel k(alone, megac, Precision::fp32);
  EXPECT_EQ(k.occupancy(), "alone-1t");
  EXPECT_NEAR(k.overheadSeconds(), d.calibration.instructionSeconds / 1.25, 1e-20);
  // MFU's peak is the occupancy's best GEMM: a rank of 2 threads runs 2 cores, so its peak is
  // not the spec's (a 1-thread rank's, every core busy).
  double busyPeak = 0;
  for (const GemmPoint &g : d.calibration.gemm)
    if (g.elementBytes == 4)
      busyPeak = std::max(busyPeak, g.flopsPerSecond);
  DeviceSpec two = d;
  two.devicesPerNode = 1;
  two.threadsPerRank = 2;
  EXPECT_NEAR(KernelModel(two, megac, Precision::fp32).rankPeakFlops(), busyPeak * (2.0 + 1.0 / 3.0),
              busyPeak * 1e-12);
  DeviceSpec busy = d;
  busy.devicesPerNode = 2;
  busy.threadsPerRank = 1;
  EXPECT_NEAR(KernelModel(busy, megac, Precision::fp32).rankPeakFlops(), busyPeak, busyPeak * 1e-12);
}

TEST(CalibrationJson, RoundTripIsExact) {
  DeviceSpec d = sampleSpec();
  std::string text = deviceSpecJson(d);
  std::string error;
  std::optional<DeviceSpec> loaded = loadDeviceSpec(writeTemp("round.json", text), &error);
  ASSERT_TRUE(loaded) << error;
  expectEqual(d, *loaded);
  EXPECT_EQ(deviceSpecJson(*loaded), text); // writing what was read gives the same bytes
}

TEST(CalibrationJson, PresetRoundTripHasNoCalibration) {
  std::optional<DeviceSpec> h200 = preset("h200");
  ASSERT_TRUE(h200);
  std::string text = deviceSpecJson(*h200);
  EXPECT_EQ(text.find("calibration"), std::string::npos);
  std::string error;
  std::optional<DeviceSpec> loaded = loadDeviceSpec(writeTemp("h200.json", text), &error);
  ASSERT_TRUE(loaded) << error;
  expectEqual(*h200, *loaded);
  EXPECT_TRUE(loaded->calibration.empty());
}

TEST(CalibrationJson, ClusterFromCalibratedSpec) {
  DeviceSpec d = sampleSpec();
  std::string path = writeTemp("x.json", deviceSpecJson(d));
  std::string error;
  std::optional<Cluster> cluster = parseCluster(path + ":1x2", &error);
  ASSERT_TRUE(cluster) << error;
  EXPECT_EQ(cluster->nodes, 1);
  EXPECT_EQ(cluster->device.devicesPerNode, 2);
  EXPECT_EQ(cluster->devices(), 2);
  expectEqual(d, cluster->device);
  // A preset base with only a calibration and a launch cost added.
  std::string partial = writeTemp(
      "partial.json", R"({"base": "cpu", "launchSeconds": 1e-6, "calibration": {"source": "s",
      "kernels": [{"kernel": "gelu", "bytes": 1024, "seconds": 2e-6}]}})");
  cluster = parseCluster(partial + ":2", &error);
  ASSERT_TRUE(cluster) << error;
  EXPECT_EQ(cluster->device.launchSeconds, 1e-6);
  ASSERT_EQ(cluster->device.calibration.kernels.size(), 1u);
  EXPECT_EQ(cluster->device.calibration.kernels[0].kernel, "gelu");
  EXPECT_EQ(cluster->device.calibration.source, "s");
  EXPECT_EQ(cluster->device.peakFlopsFp32, preset("cpu")->peakFlopsFp32);
}

TEST(CalibrationJson, LoadErrorIsLocated) {
  std::string text = R"({"base": "cpu", "calibration": {"gemm": [
    {"m": 1, "n": 1, "k": 1, "elementBytes": 4, "flopsPerSecond": 1},
    {"m": 1, "n": 1, "k": 1, "elementBytes": 4, "flopsPerSecond": 1},
    {"m": 1, "n": 1, "k": 1, "elementBytes": 4, "flopsPerSecond": 1},
    {"m": 0, "n": 1, "k": 1, "elementBytes": 4, "flopsPerSecond": 1}]}})";
  std::string path = writeTemp("bad.json", text), error;
  EXPECT_FALSE(loadDeviceSpec(path, &error));
  EXPECT_EQ(error,
            "device spec '" + path + "': calibration.gemm[3]: 'm' must be a positive integer");
  EXPECT_FALSE(parseCluster(path + ":1x2", &error));
  EXPECT_EQ(error,
            "device spec '" + path + "': calibration.gemm[3]: 'm' must be a positive integer");
  // launchSeconds is a number like the other fields.
  path = writeTemp("bad-launch.json", R"({"base": "cpu", "launchSeconds": "fast"})");
  EXPECT_FALSE(loadDeviceSpec(path, &error));
  EXPECT_EQ(error, "device spec '" + path + "': 'launchSeconds' must be a non-negative number");
}

std::string parseError(const std::string &calibration) {
  auto parsed = json::parse(calibration);
  if (!parsed.isOk())
    return "JSON: " + parsed.status().message();
  Calibration c;
  std::string error;
  if (parseCalibration(parsed.value(), &c, &error))
    return "(accepted)";
  return error;
}

const char *kGemm = R"("m": 8, "n": 8, "k": 8, "elementBytes": 4, "flopsPerSecond": 1e9)";
const char *kBandwidth = R"("workingSetBytes": 16384, "bytesPerSecond": 1e10)";
const char *kKernel = R"("kernel": "softmax", "bytes": 4096, "seconds": 1e-6)";
const char *kAttention = R"("batchHeads": 8, "seq": 128, "headDim": 64, "causal": true,
                            "forwardSeconds": 1e-3, "backwardSeconds": 2e-3)";
const char *kComm = R"("op": "all_gather", "ranks": 2, "bytes": 8, "seconds": 1e-6)";

/// The calibration with table `table` of one point: `fields` with `key` replaced by `value`
/// (or removed when value is empty).
std::string withField(const char *table, const char *fields, const std::string &key,
                      const std::string &value) {
  std::string object = std::string("{") + fields + "}";
  auto parsed = json::parse(object);
  EXPECT_TRUE(parsed.isOk());
  std::string out = "{";
  bool found = false;
  for (const std::string &k : parsed.value().keys) {
    size_t at = object.find("\"" + k + "\"");
    size_t colon = object.find(':', at), end = object.find_first_of(",}", colon);
    std::string v = object.substr(colon + 1, end - colon - 1);
    if (k == key) {
      found = true;
      if (value.empty())
        continue;
      v = value;
    }
    out += (out.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  }
  if (!found)
    out += (out.size() > 1 ? ", \"" : "\"") + key + "\": " + value;
  return std::string("{\"") + table + "\": [" + out + "}]}";
}

TEST(CalibrationJson, EveryMalformedFieldIsNamed) {
  struct Case {
    const char *table, *fields;
    std::string key, value, error;
  };
  const std::vector<Case> cases = {
      {"gemm", kGemm, "m", "", "calibration.gemm[0]: 'm' is missing"},
      {"gemm", kGemm, "m", "0", "calibration.gemm[0]: 'm' must be a positive integer"},
      {"gemm", kGemm, "n", "-3", "calibration.gemm[0]: 'n' must be a positive integer"},
      {"gemm", kGemm, "k", "2.5", "calibration.gemm[0]: 'k' must be a positive integer"},
      {"gemm", kGemm, "k", "\"8\"", "calibration.gemm[0]: 'k' must be a positive integer"},
      {"gemm", kGemm, "elementBytes", "0",
       "calibration.gemm[0]: 'elementBytes' must be a positive integer"},
      {"gemm", kGemm, "flopsPerSecond", "0",
       "calibration.gemm[0]: 'flopsPerSecond' must be a positive number"},
      {"gemm", kGemm, "flopsPerSecond", "null",
       "calibration.gemm[0]: 'flopsPerSecond' must be a positive number"},
      {"gemm", kGemm, "flopsPerSecond", "", "calibration.gemm[0]: 'flopsPerSecond' is missing"},
      {"gemm", kGemm, "transposed", "true", "calibration.gemm[0]: unknown field 'transposed'"},
      {"bandwidth", kBandwidth, "workingSetBytes", "-1",
       "calibration.bandwidth[0]: 'workingSetBytes' must be a positive number"},
      {"bandwidth", kBandwidth, "bytesPerSecond", "\"fast\"",
       "calibration.bandwidth[0]: 'bytesPerSecond' must be a positive number"},
      {"bandwidth", kBandwidth, "bytesPerSecond", "",
       "calibration.bandwidth[0]: 'bytesPerSecond' is missing"},
      {"kernels", kKernel, "kernel", "\"softmax2\"",
       "calibration.kernels[0]: 'kernel' must be a memory-bound kernel class (elementwise, copy, "
       "transpose, broadcast, cast, softmax, softmax_grad, gelu, gelu_grad, silu, layer_norm, "
       "layer_norm_grad, rms_norm, rms_norm_grad, reduce, embedding, embedding_grad, "
       "cross_entropy, cross_entropy_grad, adamw, global_norm, dropout, rope)"},
      {"kernels", kKernel, "kernel", "3",
       "calibration.kernels[0]: 'kernel' must be a memory-"
       "bound kernel class (elementwise, copy, transpose, "
       "broadcast, cast, softmax, softmax_grad, gelu, "
       "gelu_grad, silu, layer_norm, layer_norm_grad, "
       "rms_norm, rms_norm_grad, reduce, embedding, "
       "embedding_grad, cross_entropy, cross_entropy_grad, "
       "adamw, global_norm, dropout, rope)"},
      {"kernels", kKernel, "bytes", "0",
       "calibration.kernels[0]: 'bytes' must be a positive number"},
      {"kernels", kKernel, "seconds", "-1e-6",
       "calibration.kernels[0]: 'seconds' must be a positive number"},
      {"kernels", kKernel, "seconds", "", "calibration.kernels[0]: 'seconds' is missing"},
      {"attention", kAttention, "batchHeads", "0",
       "calibration.attention[0]: 'batchHeads' must be a positive integer"},
      {"attention", kAttention, "seq", "1e3",
       "calibration.attention[0]: 'seq' must be a positive integer"},
      {"attention", kAttention, "headDim", "", "calibration.attention[0]: 'headDim' is missing"},
      {"attention", kAttention, "causal", "1",
       "calibration.attention[0]: 'causal' must be true or false"},
      {"attention", kAttention, "forwardSeconds", "0",
       "calibration.attention[0]: 'forwardSeconds' must be a positive number"},
      {"attention", kAttention, "backwardSeconds", "[]",
       "calibration.attention[0]: 'backwardSeconds' must be a positive number"},
      {"comm", kComm, "op", "\"broadcast\"",
       "calibration.comm[0]: 'op' must be a collective (all_reduce, all_gather, reduce_scatter, "
       "all_to_all, send_recv)"},
      {"comm", kComm, "ranks", "1", "calibration.comm[0]: 'ranks' must be an integer >= 2"},
      {"comm", kComm, "bytes", "0", "calibration.comm[0]: 'bytes' must be a positive number"},
      {"comm", kComm, "seconds", "", "calibration.comm[0]: 'seconds' is missing"},
      {"comm", kComm, "group", "\"dp\"", "calibration.comm[0]: unknown field 'group'"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(parseError(withField(c.table, c.fields, c.key, c.value)), c.error)
        << c.table << "." << c.key << " = " << c.value;
  // The unmodified points are accepted.
  for (auto [table, fields] :
       std::vector<std::pair<const char *, const char *>>{{"gemm", kGemm},
                                                          {"bandwidth", kBandwidth},
                                                          {"kernels", kKernel},
                                                          {"attention", kAttention},
                                                          {"comm", kComm}})
    EXPECT_EQ(parseError(std::string("{\"") + table + "\": [{" + fields + "}]}"), "(accepted)")
        << table;
}

TEST(CalibrationJson, MalformedTopLevel) {
  EXPECT_EQ(parseError("[]"), "calibration: must be an object");
  EXPECT_EQ(parseError(R"({"source": 3})"), "calibration.source: must be a string");
  EXPECT_EQ(parseError(R"({"threads": -1})"), "calibration.threads: must be an integer >= 0");
  EXPECT_EQ(parseError(R"({"threads": 1.5})"), "calibration.threads: must be an integer >= 0");
  EXPECT_EQ(parseError(R"({"instructionSeconds": -1})"),
            "calibration.instructionSeconds: must be a non-negative number");
  EXPECT_EQ(parseError(R"({"instructionSeconds": "1us"})"),
            "calibration.instructionSeconds: must be a non-negative number");
  EXPECT_EQ(parseError(R"({"gemms": []})"), "calibration: unknown field 'gemms'");
  EXPECT_EQ(parseError(R"({"gemm": {}})"), "calibration.gemm: must be an array of objects");
  EXPECT_EQ(parseError(R"({"comm": [[]]})"), "calibration.comm[0]: must be an object");
  EXPECT_EQ(parseError(R"({"kernels": [{"kernel": "copy", "bytes": 1, "seconds": 1}, 7]})"),
            "calibration.kernels[1]: must be an object");
  EXPECT_EQ(parseError(R"({"source": "", "threads": 0, "instructionSeconds": 0, "gemm": [],
                          "bandwidth": [], "kernels": [], "attention": [], "comm": []})"),
            "(accepted)");
}

TEST(CalibrationJson, MalformedOccupancy) {
  const std::string tables = R"("instructionSeconds": 1e-7, "gemm": [], "bandwidth": [],
                                 "kernels": [], "attention": [])";
  EXPECT_EQ(parseError(R"({"ranks": 0})"), "calibration.ranks: must be a positive integer");
  EXPECT_EQ(parseError(R"({"cores": 1.5})"), "calibration.cores: must be a positive integer");
  EXPECT_EQ(parseError(R"({"occupancies": {}})"),
            "calibration.occupancies: must be an array of objects");
  EXPECT_EQ(parseError(R"({"occupancies": [3]})"), "calibration.occupancies[0]: must be an object");
  EXPECT_EQ(parseError(R"({"occupancies": [{"name": "a", "ranks": 1, )" + tables + "}]}"),
            "calibration.occupancies[0]: 'threads' is missing");
  EXPECT_EQ(
      parseError(R"({"occupancies": [{"name": "", "ranks": 1, "threads": 1, )" + tables + "}]}"),
      "calibration.occupancies[0].name: must be a non-empty string");
  EXPECT_EQ(
      parseError(R"({"occupancies": [{"name": "a", "ranks": 0, "threads": 1, )" + tables + "}]}"),
      "calibration.occupancies[0].ranks: must be a positive integer");
  EXPECT_EQ(parseError(R"({"occupancies": [{"name": "a", "ranks": 1, "threads": 1, "comm": [], )" +
                       tables + "}]}"),
            "calibration.occupancies[0]: unknown field 'comm'");
  EXPECT_EQ(parseError(R"({"occupancies": [{"name": "a", "ranks": 1, "threads": 1, )" + tables +
                       R"(}, {"name": "b", "ranks": 1, "threads": 2, "instructionSeconds": 1e-7,
                           "gemm": [{"m": 0}], "bandwidth": [], "kernels": [], "attention": []}]})"),
            "calibration.occupancies[1].gemm[0]: 'm' must be a positive integer");
  EXPECT_EQ(parseError(R"({"ranks": 2, "cores": 2, "occupancies": [{"name": "alone-1t", "ranks": 1,
                          "threads": 1, )" +
                       tables + "}]}"),
            "(accepted)");
}

TEST(CalibrationJson, KernelClassesAreTheCostModels) {
  // The "kernel" names a calibration may hold are exactly the cost model's memory-bound classes.
  std::set<std::string> calibrated(calibratedKernelClasses().begin(),
                                   calibratedKernelClasses().end());
  EXPECT_EQ(calibrated.size(), calibratedKernelClasses().size());
  std::set<std::string> model;
  for (int i = 0; i < kKernelClassCount; ++i)
    if (KernelClass(i) != KernelClass::gemm && KernelClass(i) != KernelClass::attention)
      model.insert(kernelClassName(KernelClass(i)));
  EXPECT_EQ(calibrated, model);
}

} // namespace
} // namespace megac::planner
