// What `megac calibrate` measured, as plain tables. They mirror the planner's
// planner::Calibration (planner/Hardware.h) field for field; the runtime depends on no planner
// header, so the tool (tools/megac/CalibrateCommand.cpp) copies these into a DeviceSpec.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace megac::runtime::calibrate {

/// C[m,n] = A[m,k]·B[k,n] through the executor's Linear (x·Wᵀ) or MatMul opcode.
struct GemmResult {
  int64_t m = 0, n = 0, k = 0;
  int64_t elementBytes = 4; // 4 fp32, 2 bf16/fp16
  std::string dtype;        // "f32", "bf16", "f16"
  std::string form;         // "linear" (x·Wᵀ) or "matmul" (A·B)
  double flopsPerSecond = 0;
};
/// One streaming copy (the Copy opcode) of workingSetBytes / 2 into as many other bytes.
struct BandwidthResult {
  double workingSetBytes = 0; // read + written
  double bytesPerSecond = 0;
};
/// One instruction of a memory-bound kernel class, dispatch included.
struct KernelResult {
  std::string kernel; // "layer_norm_grad", ... (planner/KernelModel.h's class names)
  double bytes = 0;   // the instruction's operand bytes + result bytes
  double seconds = 0;
};
/// The Attention and AttentionGrad opcodes on q, k, v [1, seq, batchHeads, headDim].
struct AttentionResult {
  int64_t batchHeads = 0, seq = 0, headDim = 0;
  bool causal = true;
  double forwardSeconds = 0, backwardSeconds = 0;
};
/// One collective instruction over every rank of the job, median over repetitions.
struct CommResult {
  std::string op;    // "all_reduce", "all_gather", "reduce_scatter", "send_recv"
  int64_t ranks = 2; // group size
  double bytes = 0;  // the whole buffer (all-gather: its output; reduce-scatter: its input)
  double seconds = 0;
};

struct Results {
  std::string backend;           // "cpu" or "cuda"
  std::string deviceName;        // the CPU model or the GPU's name
  std::string source;            // the command, host and date, and what was not measured
  int64_t ranks = 1;             // processes that ran the benchmarks at once
  int64_t threads = 0;           // CPU: kernel/BLAS threads per rank; cuda: 0
  int64_t cores = 0;             // the node's hardware threads (std::thread::hardware_concurrency)
  int64_t computeUnits = 1;      // CPU: threads; cuda: SMs
  double memoryBytes = 0;        // per rank: MemTotal / ranks, or the GPU's memory
  double cacheBytes = 0;         // CPU: the node's last-level cache (sysfs), 0 unknown; cuda: 0
  double instructionSeconds = 0; // one tiny instruction through the executor
  double launchSeconds = 0;      // cuda: one empty kernel launch, back to back; CPU: 0
  std::vector<GemmResult> gemm;
  std::vector<BandwidthResult> bandwidth;
  std::vector<KernelResult> kernels;
  std::vector<AttentionResult> attention;
  std::vector<CommResult> comm;
  std::vector<std::string> notes; // "collectives not measured: 1 GPU", ...
  /// CPU, several threads per rank: the cache-line round trip between the first two CPUs the
  /// process may use (`probedCpus`) before and after the sweeps (runtime/calibrate/
  /// CoreDistance.h), so a spec says which placement its multi-thread rates describe; empty
  /// otherwise.
  std::vector<double> coreRoundTripNs;
  std::pair<int, int> probedCpus{0, 1};

  // ---- Summaries for the device spec's scalar fields ----
  /// The best GEMM rate of a dtype ("f32", "bf16", "f16"), 0 when none was measured.
  double peakFlops(const std::string &dtype) const;
  /// The streaming-copy rate at the largest working set (DRAM / HBM).
  double dramBandwidth() const;
  /// All-reduce bus bandwidth at the largest message (bytes/s x 2(N-1)/N), 0 if not measured.
  double linkBandwidth() const;
  /// The smallest all-reduce's time per ring step (seconds / 2(N-1)), 0 if not measured.
  double linkLatency() const;
};

} // namespace megac::runtime::calibrate
