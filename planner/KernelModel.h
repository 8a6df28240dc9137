// Per-kernel time (issue 15): GEMMs by shape with tile and wave quantization, attention as its
// own class, memory-bound kernels as bytes at achievable bandwidth (cache-resident where the
// working set fits), a fixed cost per kernel or plan instruction; from `megac calibrate` tables
// when the device spec has them, else from the datasheet and the assumptions in
// docs/planner.md. MLIR-free.
#pragma once

#include "planner/Hardware.h"
#include "planner/Planner.h"
#include "planner/StackProfile.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace megac::planner {

/// What a kernel is, for timing (memory-bound classes are calibrated one by one: their names are
/// the "kernel" keys of a calibration's "kernels" table).
enum class KernelClass : int {
  gemm,
  attention, // the attention core (q·kᵀ, softmax, ·v) as one kernel
  elementwise,
  copy,
  transpose,
  broadcast,
  cast,
  softmax,
  softmaxGrad,
  gelu,
  geluGrad,
  silu,
  layerNorm,
  layerNormGrad,
  rmsNorm,
  rmsNormGrad,
  reduce,
  embedding,
  embeddingGrad,
  crossEntropy,
  crossEntropyGrad,
  adamw,
  globalNorm,
  dropout,
  rope,
};
constexpr int kKernelClassCount = int(KernelClass::rope) + 1;
const char *kernelClassName(KernelClass kind);
std::optional<KernelClass> kernelClassFromName(const std::string &name);

/// One kernel launch (or `count` identical ones).
struct KernelOp {
  KernelClass kind = KernelClass::elementwise;
  int64_t m = 0, n = 0, k = 0;  // gemm: C[m,n] = A[m,k]·B[k,n]
  int64_t batch = 1;            // gemm: independent products; attention: batch x heads
  int64_t seq = 0, headDim = 0; // attention: causal self-attention over seq tokens
  bool backward = false;        // attention: the gradient kernel
  /// attention: the share of the seq x seq causal work this rank does (context parallelism with
  /// causal load balancing: 1/cp).
  double share = 1;
  /// memory-bound: bytes read + written; gemm: bytes the instruction moves besides its product
  /// (megac's moe_matmul packs its active rows and zero-fills its static output), charged at
  /// the memory rate.
  double bytes = 0;
  double count = 1;
  /// backward: a weight-gradient kernel (dW, db), what a zero-bubble schedule's W step runs
  /// (docs/pipeline.md); the rest of the backward is its B.
  bool weightGradient = false;
  /// gemm: an expert matrix over routed tokens (its rows depend on the routing: `m` is the
  /// balanced share).
  bool routed = false;
  /// memory-bound: its operands are f32 whatever the step's precision (a gradient accumulated
  /// into its f32 accumulator), so a runtime that computes half operands in f32 converts none.
  bool f32Operands = false;
  /// gemm and memory-bound: bytes of its operands that stream from main memory whatever the
  /// kernel's size: a weight read a whole step after it was last touched, a weight gradient
  /// written back, the gradient and parameter state the data-parallel reduction packs and
  /// unpacks. Charged at the calibrated DRAM rate when the rank's training state does not
  /// fit the node's last-level cache (KernelModel::setWeightsInMemory); the calibrated tables
  /// time kernels on operands their repetitions keep in cache. A GEMM adds the stream to its
  /// arithmetic; a memory-bound kernel moves these bytes at the DRAM rate instead of its table's.
  double coldBytes = 0;
};

/// Seconds split the way `megac plan --explain` reports them.
struct KernelTime {
  double gemm = 0, attention = 0, memory = 0, overhead = 0;
  /// Kernels launched, by class (what `megac train --trace` shows as instructions).
  std::array<double, kKernelClassCount> launches{};
  /// Their time by class (work without the per-kernel overhead; a GEMM's packing bytes with it).
  std::array<double, kKernelClassCount> seconds{};
  /// And the bytes they move (KernelOp::bytes; a GEMM's only its packing's).
  std::array<double, kKernelClassCount> bytes{};
  /// The GEMMs among them, by shape (in the order added; mergeGemmShapes folds equal ones).
  std::vector<GemmShape> gemms;
  double total() const { return gemm + attention + memory + overhead; }
  KernelTime &operator+=(const KernelTime &o) {
    gemm += o.gemm;
    attention += o.attention;
    memory += o.memory;
    overhead += o.overhead;
    for (size_t i = 0; i < launches.size(); ++i) {
      launches[i] += o.launches[i];
      seconds[i] += o.seconds[i];
      bytes[i] += o.bytes[i];
    }
    gemms.insert(gemms.end(), o.gemms.begin(), o.gemms.end());
    return *this;
  }
  KernelTime scaled(double f) const {
    KernelTime t{gemm * f,  attention * f, memory * f, overhead * f,
                 launches,  seconds,       bytes,      gemms};
    for (size_t i = 0; i < launches.size(); ++i) {
      t.launches[i] *= f;
      t.seconds[i] *= f;
      t.bytes[i] *= f;
    }
    for (GemmShape &g : t.gemms)
      g.count *= f;
    return t;
  }
};

/// `gemms` with equal shapes folded into one entry each, in a canonical form: a product and
/// its transpose are one GEMM (m <= n), sorted. Entries whose count is (about) 0 are dropped.
std::vector<GemmShape> mergeGemmShapes(const std::vector<GemmShape> &gemms);

/// Whether a rank holding `stateBytes` of training state (parameters, gradients, optimizer
/// moments), with every rank of the node holding as much, overflows the node's last-level cache
/// (DeviceSpec::cacheBytes; false where it is unknown).
bool stateOutgrowsCache(const DeviceSpec &device, double stateBytes);

class KernelModel {
public:
  KernelModel(const DeviceSpec &device, const StackProfile &stack, Precision precision);

  KernelTime time(const KernelOp &op) const;
  KernelTime time(const std::vector<KernelOp> &ops) const;
  /// Adds `op` (its count times) to `t`.
  void add(const KernelOp &op, KernelTime &t) const;

  /// One GEMM (`batch` of them), without the per-kernel overhead.
  double gemmSeconds(int64_t m, int64_t n, int64_t k, int64_t batch) const;
  /// A memory-bound kernel moving `bytes`, without the per-kernel overhead.
  double memorySeconds(KernelClass kind, double bytes) const;
  /// The attention core of `batchHeads` causal (seq x seq) problems, without the overhead.
  double attentionSeconds(int64_t batchHeads, int64_t seq, int64_t headDim, bool backward) const;
  /// Whether the weights and weight gradients a step touches stream from main memory
  /// (KernelOp::coldBytes): charged at the layout's occupancy's DRAM copy rate where the
  /// calibration measured one (its largest working set, at least twice the spec's cacheBytes);
  /// otherwise nothing (CPU calibrations only: a GPU's GEMM rates, measured or from the
  /// datasheet, already stream their operands from HBM).
  void setWeightsInMemory(bool inMemory);
  /// Whether KernelOp::coldBytes are charged (setWeightsInMemory found the state out of cache
  /// and a main-memory rate to charge them at).
  bool chargesColdOperands() const { return coldSecondsPerByte_ > 0; }
  /// The rank's peak FLOP/s for MFU: the best GEMM rate its occupancy's table measured at the
  /// precision's element size (a CPU rank of T threads runs T cores), else the spec's peak.
  double rankPeakFlops() const;
  /// The fixed cost of one kernel or instruction.
  double overheadSeconds() const { return overhead_; }
  int64_t elementBytes() const { return elementBytes_; }
  /// The device, its calibration reduced to the tables of this layout's occupancy.
  const DeviceSpec &device() const { return device_; }
  /// Which measured occupancy the tables are ("busy", "alone-1t", ...; "busy" without any).
  const std::string &occupancy() const { return occupancy_; }
  const StackProfile &stack() const { return stack_; }

  /// The calibrated attention model t = perFlop·(b·h·s²·d) + perScore·(b·h·s²) + perRow·(b·h·s)
  /// (attentionSeconds), fitted once per model from the occupancy's measured calls.
  struct AttentionFit {
    double perFlop = 0, perScore = 0, perRow = 0;
    bool valid = false;
  };

private:
  /// `batch` products of m x n x k at the rates of a calibrated GEMM table.
  double tableGemmSeconds(const std::vector<GemmPoint> &table, int64_t m, int64_t n, int64_t k,
                          int64_t batch) const;

  double peak_;
  int64_t elementBytes_;
  double overhead_ = 0;
  AttentionFit attentionFit_[2]; // forward, backward
  DeviceSpec device_;
  StackProfile stack_;
  std::string occupancy_;
  /// Kernel threads per rank of this layout (CPU calibrations; 1 otherwise), and the GEMM table
  /// of as many single-thread ranks sharing the node: the rate of one product per thread side by
  /// side (StackProfile::expertsOnKernelThreads).
  int64_t threads_ = 1;
  std::vector<GemmPoint> serialGemm_;
  /// StackProfile::halfMathInF32 under bf16/fp16.
  bool halfMathInF32_ = false;
  /// Seconds per cold operand byte (setWeightsInMemory); 0: not charged.
  double coldSecondsPerByte_ = 0;
};

} // namespace megac::planner
