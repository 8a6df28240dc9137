// Per-kernel times from a device spec's calibration tables, or from its datasheet numbers.
#include "planner/KernelModel.h"

#include "planner/Calibration.h"
#include "planner/CostModel.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace megac::planner {
namespace {

constexpr std::array<const char *, kKernelClassCount> kNames = {"gemm",
                                                                "attention",
                                                                "elementwise",
                                                                "copy",
                                                                "transpose",
                                                                "broadcast",
                                                                "cast",
                                                                "softmax",
                                                                "softmax_grad",
                                                                "gelu",
                                                                "gelu_grad",
                                                                "silu",
                                                                "layer_norm",
                                                                "layer_norm_grad",
                                                                "rms_norm",
                                                                "rms_norm_grad",
                                                                "reduce",
                                                                "embedding",
                                                                "embedding_grad",
                                                                "cross_entropy",
                                                                "cross_entropy_grad",
                                                                "adamw",
                                                                "global_norm",
                                                                "dropout",
                                                                "rope"};

// Seconds of one call moving `bytes`, interpolated piecewise-linearly between measured calls of
// one kernel class (sorted by bytes) and anchored at (0, overhead); past the largest call, at
// the rate of the last segment (the DRAM rate when the largest call streams from memory).
double interpolate(std::vector<std::pair<double, double>> points, double bytes, double overhead) {
  std::sort(points.begin(), points.end());
  points.insert(points.begin(), {0.0, overhead});
  for (size_t i = 1; i < points.size(); ++i)
    if (bytes <= points[i].first) {
      auto [b0, t0] = points[i - 1];
      auto [b1, t1] = points[i];
      return t0 + (t1 - t0) * (bytes - b0) / std::max(b1 - b0, 1.0);
    }
  auto [b0, t0] = points[points.size() - 2];
  auto [b1, t1] = points.back();
  double slope = (t1 - t0) / std::max(b1 - b0, 1.0);
  if (slope <= 0)
    slope = (t1 - overhead) / std::max(b1, 1.0);
  return t1 + slope * (bytes - b1);
}

/// Least squares on the relative error of t ~ x·beta over the columns `use` of x (the others 0):
/// every measured shape counts alike, a small one as much as a large one. Returns the relative
/// sum of squares, or a negative number where the columns are degenerate or a coefficient comes
/// out negative.
double fitRelative(const std::vector<std::array<double, 3>> &x, const std::vector<double> &t,
                   const std::vector<int> &use, std::array<double, 3> &beta) {
  const size_t k = use.size();
  if (x.size() < k)
    return -1;
  // Columns scaled to a unit largest entry: the terms differ by orders of magnitude.
  std::array<double, 3> scale{};
  for (size_t j = 0; j < k; ++j)
    for (size_t i = 0; i < x.size(); ++i)
      scale[j] = std::max(scale[j], std::abs(x[i][size_t(use[j])] / t[i]));
  double m[3][4] = {};
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t r = 0; r < k; ++r) {
      double ar = x[i][size_t(use[r])] / t[i] / scale[r];
      for (size_t c = 0; c < k; ++c)
        m[r][c] += ar * x[i][size_t(use[c])] / t[i] / scale[c];
      m[r][3] += ar;
    }
  for (size_t c = 0; c < k; ++c) { // Gaussian elimination, partial pivoting
    size_t pivot = c;
    for (size_t r = c + 1; r < k; ++r)
      if (std::abs(m[r][c]) > std::abs(m[pivot][c]))
        pivot = r;
    if (std::abs(m[pivot][c]) < 1e-9 * double(x.size()))
      return -1;
    for (size_t j = 0; j < 4; ++j)
      std::swap(m[c][j], m[pivot][j]);
    for (size_t r = 0; r < k; ++r)
      if (r != c) {
        double f = m[r][c] / m[c][c];
        for (size_t j = c; j < 4; ++j)
          m[r][j] -= f * m[c][j];
      }
  }
  beta = {};
  for (size_t j = 0; j < k; ++j) {
    beta[size_t(use[j])] = m[j][3] / m[j][j] / scale[j];
    if (!(beta[size_t(use[j])] >= 0))
      return -1;
  }
  double sse = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double fit = x[i][0] * beta[0] + x[i][1] * beta[1] + x[i][2] * beta[2];
    sse += (fit / t[i] - 1) * (fit / t[i] - 1);
  }
  return sse;
}

/// The attention model of the measured calls: t = perFlop·(b·h·s²·d) + perScore·(b·h·s²) +
/// perRow·(b·h·s). The products scale with the head size, the softmax and the masking with the
/// scores, and each query row has a fixed part (its max and sum, and on the CPU the causal row
/// blocks' small product calls), which dominates short sequences. Of the term subsets that keep
/// the products and fit with non-negative coefficients, the one with the smallest relative error
/// (with one head size measured, products and scores cannot be told apart: those subsets are
/// degenerate and drop out).
KernelModel::AttentionFit fitAttention(const std::vector<AttentionPoint> &table, double overhead,
                                       bool backward) {
  std::vector<std::array<double, 3>> x;
  std::vector<double> t;
  for (const AttentionPoint &p : table) {
    double seconds = (backward ? p.backwardSeconds : p.forwardSeconds) - overhead;
    if (!(seconds > 0))
      continue;
    double rows = double(p.batchHeads) * double(p.seq);
    x.push_back({rows * double(p.seq) * double(p.headDim), rows * double(p.seq), rows});
    t.push_back(seconds);
  }
  KernelModel::AttentionFit best;
  double bestSse = -1;
  for (const std::vector<int> &use :
       std::vector<std::vector<int>>{{0, 1, 2}, {0, 2}, {0, 1}, {0}}) {
    std::array<double, 3> beta{};
    double sse = fitRelative(x, t, use, beta);
    if (sse < 0 || !(beta[0] > 0) || (bestSse >= 0 && sse >= bestSse))
      continue;
    bestSse = sse;
    best = {beta[0], beta[1], beta[2], true};
  }
  return best;
}

/// The memory-bound classes a CPU runtime computes through f32 when an operand is half (megac:
/// runtime/exec/CpuHandlers.cpp `math` handlers); data movement (copies, broadcasts, transposes,
/// lookups, casts) runs on half storage, and norms, the loss and the optimizer see f32 operands.
bool computesInF32(KernelClass kind) {
  switch (kind) {
  case KernelClass::elementwise:
  case KernelClass::gelu:
  case KernelClass::geluGrad:
  case KernelClass::silu:
  case KernelClass::reduce:
  case KernelClass::rope:
  case KernelClass::dropout:
  case KernelClass::embeddingGrad:
    return true;
  default:
    return false;
  }
}

} // namespace

const char *kernelClassName(KernelClass kind) { return kNames[size_t(kind)]; }

std::optional<KernelClass> kernelClassFromName(const std::string &name) {
  for (int i = 0; i < kKernelClassCount; ++i)
    if (name == kNames[size_t(i)])
      return KernelClass(i);
  return std::nullopt;
}

KernelModel::KernelModel(const DeviceSpec &device, const StackProfile &stack, Precision precision)
    : peak_(peakFlops(device, precision)), elementBytes_(planner::elementBytes(precision)),
      device_(device), stack_(stack) {
  // The tables of the layout's occupancy (ranks per node x threads per rank) when the spec was
  // calibrated at several (planner/Calibration.h, calibrationFor).
  device_.calibration =
      calibrationFor(device.calibration, device.devicesPerNode, device.threadsPerRank, &occupancy_);
  overhead_ = device_.calibration.instructionSeconds > 0 ? device_.calibration.instructionSeconds
                                                         : device_.launchSeconds;
  halfMathInF32_ = stack.halfMathInF32 && elementBytes_ == 2;
  const Calibration &all = device.calibration;
  if (!all.gemm.empty() && all.cores > 0) {
    int64_t ranks = std::max<int64_t>(1, device.devicesPerNode);
    threads_ = device.threadsPerRank > 0 ? device.threadsPerRank
                                         : std::max<int64_t>(1, all.cores / ranks);
    if (threads_ > 1)
      serialGemm_ = calibrationFor(all, ranks * threads_, 1).gemm;
  }
  if (!device_.calibration.attention.empty())
    for (int backward = 0; backward < 2; ++backward)
      attentionFit_[backward] =
          fitAttention(device_.calibration.attention, overhead_, backward != 0);
}

void KernelModel::setWeightsInMemory(bool inMemory) {
  coldSecondsPerByte_ = 0;
  const std::vector<BandwidthPoint> &curve = device_.calibration.bandwidth;
  if (!inMemory || device_.cacheBytes <= 0 || curve.empty() || device_.calibration.cores <= 0)
    return;
  // The streaming copy at the largest working set: main memory, if it is well past the cache.
  // One cold operand byte costs one copied byte (read + written): the hardware prefetcher
  // overlaps part of the stream with the product (this VM, 1-thread 128-row products: a cold
  // 4 MB weight adds its bytes at 19-26 GB/s, a cold 4 MB gradient output at 16-42 GB/s,
  // against a 25 GB/s DRAM copy; docs/planner.md).
  auto largest = std::max_element(curve.begin(), curve.end(), [](const auto &a, const auto &b) {
    return a.workingSetBytes < b.workingSetBytes;
  });
  if (largest->workingSetBytes >= 2 * device_.cacheBytes && largest->bytesPerSecond > 0)
    coldSecondsPerByte_ = 1.0 / largest->bytesPerSecond;
}

double KernelModel::rankPeakFlops() const {
  double best = 0;
  for (const GemmPoint &p : device_.calibration.gemm)
    if (p.elementBytes == elementBytes_)
      best = std::max(best, p.flopsPerSecond);
  if (best == 0) // the CPU runtime computes half types in f32: its f32 rates then
    for (const GemmPoint &p : device_.calibration.gemm)
      best = std::max(best, p.flopsPerSecond);
  return best > 0 ? best : peak_;
}

bool stateOutgrowsCache(const DeviceSpec &device, double stateBytes) {
  return device.cacheBytes > 0 &&
         stateBytes * double(std::max<int64_t>(1, device.devicesPerNode)) > device.cacheBytes;
}

double KernelModel::gemmSeconds(int64_t m, int64_t n, int64_t k, int64_t batch) const {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0)
    return 0;
  if (device_.calibration.gemm.empty())
    return planner::gemmSeconds(device_, peak_, m, n, k, batch, elementBytes_);
  return tableGemmSeconds(device_.calibration.gemm, m, n, k, batch);
}

double KernelModel::tableGemmSeconds(const std::vector<GemmPoint> &table, int64_t m, int64_t n,
                                     int64_t k, int64_t batch) const {
  double flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  // Measured rates: inverse-square-distance weights over the nearest shapes in log space (a
  // measured shape gets its own rate), preferring
  // points of this element size (the CPU runtime computes half types in fp32: any size will do).
  bool sameSize = std::any_of(table.begin(), table.end(),
                              [&](const GemmPoint &p) { return p.elementBytes == elementBytes_; });
  std::vector<std::pair<double, double>> near; // (distance, rate)
  for (const GemmPoint &p : table) {
    if (sameSize && p.elementBytes != elementBytes_)
      continue;
    double d = std::abs(std::log2(double(m) / double(p.m))) +
               std::abs(std::log2(double(n) / double(p.n))) +
               std::abs(std::log2(double(k) / double(p.k)));
    near.push_back({d, p.flopsPerSecond});
  }
  std::sort(near.begin(), near.end());
  near.resize(std::min<size_t>(near.size(), 4));
  double weights = 0, rate = 0;
  for (auto [d, r] : near) {
    double w = 1.0 / (d * d + 1e-12);
    weights += w;
    rate += w * r;
  }
  return flops / (rate / weights);
}

double KernelModel::memorySeconds(KernelClass kind, double bytes) const {
  if (bytes <= 0)
    return 0;
  const Calibration &c = device_.calibration;
  std::vector<std::pair<double, double>> points;
  for (const KernelPoint &p : c.kernels)
    if (kernelClassFromName(p.kernel) == kind)
      points.push_back({p.bytes, p.seconds});
  if (points.empty()) // not measured on its own: a streaming copy of the same bytes
    for (const KernelPoint &p : c.kernels)
      if (p.kernel == "copy")
        points.push_back({p.bytes, p.seconds});
  if (!points.empty())
    return std::max(0.0, interpolate(points, bytes, overhead_) - overhead_);
  if (!c.bandwidth.empty()) {
    std::vector<std::pair<double, double>> curve;
    for (const BandwidthPoint &p : c.bandwidth)
      curve.push_back({p.workingSetBytes, p.workingSetBytes / p.bytesPerSecond});
    return std::max(0.0, interpolate(curve, bytes, 0.0));
  }
  double bandwidth = device_.memoryBandwidth * device_.memoryEfficiency;
  if (device_.cacheBytes > 0 && bytes <= device_.cacheBytes && device_.cacheBandwidth > 0)
    bandwidth = device_.cacheBandwidth;
  return bytes / bandwidth;
}

double KernelModel::attentionSeconds(int64_t batchHeads, int64_t seq, int64_t headDim,
                                     bool backward) const {
  if (batchHeads <= 0 || seq <= 0 || headDim <= 0)
    return 0;
  // q·kᵀ and p·v: 4·s²·d FLOPs per head forward, the backward's five products 2.5x that.
  double flops = 4.0 * double(batchHeads) * double(seq) * double(seq) * double(headDim) *
                 (backward ? 2.5 : 1.0);
  if (const AttentionFit &fit = attentionFit_[backward ? 1 : 0]; fit.valid) {
    double rows = double(batchHeads) * double(seq);
    return fit.perFlop * rows * double(seq) * double(headDim) + fit.perScore * rows * double(seq) +
           fit.perRow * rows;
  }
  // A causal flash kernel skips the masked half of the tiles (FlashAttention-2, section 3.1).
  double efficiency =
      backward ? device_.attentionBackwardEfficiency : device_.attentionForwardEfficiency;
  return 0.5 * flops / (peak_ * efficiency);
}

KernelTime KernelModel::time(const KernelOp &op) const {
  KernelTime t;
  add(op, t);
  return t;
}

void KernelModel::add(const KernelOp &op, KernelTime &t) const {
  // Added in place, `op.count` times: the search sums every layout's optimizer kernels and
  // every pass, so no temporary KernelTime (three class arrays and a GEMM list) per kernel.
  const double n = op.count;
  double work = 0;
  switch (op.kind) {
  case KernelClass::gemm: {
    double gemm = gemmSeconds(op.m, op.n, op.k, op.batch);
    // Experts side by side on the threads: rounds of T single-thread products.
    if (op.routed && stack_.expertsOnKernelThreads && !serialGemm_.empty() &&
        op.batch >= threads_) {
      double rounds = std::ceil(double(op.batch) / double(threads_));
      gemm = rounds * tableGemmSeconds(serialGemm_, op.m, op.n, op.k, 1);
    }
    t.gemm += n * gemm;
    work = gemm;
    t.gemms.push_back({op.m, op.n, op.k, op.batch, n, op.routed});
    if (op.bytes > 0) {
      double packing = memorySeconds(KernelClass::copy, op.bytes);
      t.memory += n * packing;
      work += packing;
    }
    break;
  }
  case KernelClass::attention:
    work = attentionSeconds(op.batch, op.seq, op.headDim, op.backward) * op.share;
    if (halfMathInF32_) {
      // Its half tensors widened and its results narrowed: q, k, v in and the output out;
      // backward the output's gradient, q, k, v in and their three gradients out (k and v
      // counted at the query heads' size).
      double elements = double(op.batch) * double(op.seq) * double(op.headDim);
      double e = double(elementBytes_);
      work += memorySeconds(KernelClass::cast, elements * (op.backward ? 7 : 4) * (4 + e));
    }
    t.attention += n * work;
    break;
  default:
    work = memorySeconds(op.kind, op.bytes);
    if (halfMathInF32_ && !op.f32Operands && computesInF32(op.kind)) {
      // The f32 kernel on widened copies (twice the bytes, at the rate of the half operands'
      // working set: the copies were just written), each half operand converted once: read at
      // 2 bytes, written at 4 (or the reverse for an output).
      double e = double(elementBytes_);
      work = work * 4 / e + memorySeconds(KernelClass::cast, op.bytes * (4 + e) / e);
    }
    t.memory += n * work;
    break;
  }
  if (op.coldBytes > 0 && coldSecondsPerByte_ > 0) {
    double cold = op.coldBytes * coldSecondsPerByte_;
    if (op.kind != KernelClass::gemm && op.kind != KernelClass::attention && op.bytes > 0) {
      // A memory-bound kernel moves its cold bytes at the main-memory rate instead of the
      // table's (whose repeated calls keep them in cache): only its other bytes stay at the
      // table's rate. A product adds the stream to its arithmetic (the cold weight above).
      double warmShare = std::max(0.0, 1.0 - op.coldBytes / op.bytes);
      t.memory -= n * work * (1.0 - warmShare);
      work *= warmShare;
    }
    (op.kind == KernelClass::gemm ? t.gemm : op.kind == KernelClass::attention ? t.attention
                                                                                : t.memory) +=
        n * cold;
    work += cold;
  }
  // Every GPU kernel adds the device's launch gap; a CPU instruction the executor's dispatch.
  t.overhead += n * overhead_;
  const size_t kind = size_t(op.kind);
  t.launches[kind] += n;
  t.seconds[kind] += n * work;
  t.bytes[kind] += n * op.bytes;
}

KernelTime KernelModel::time(const std::vector<KernelOp> &ops) const {
  KernelTime t;
  for (const KernelOp &op : ops)
    add(op, t);
  // A host that issues each kernel (StackProfile::hostSecondsPerKernel) runs ahead of the device
  // through the stream's queue; the pass waits for it only where issuing its kernels takes longer
  // than running them: max(device, host), the difference charged as overhead.
  if (stack_.hostSecondsPerKernel > 0) {
    double launches = 0;
    for (double n : t.launches)
      launches += n;
    t.overhead += std::max(0.0, launches * stack_.hostSecondsPerKernel - t.total());
  }
  return t;
}

std::vector<GemmShape> mergeGemmShapes(const std::vector<GemmShape> &gemms) {
  std::map<std::array<int64_t, 5>, double> folded;
  for (const GemmShape &g : gemms)
    folded[{std::min(g.m, g.n), std::max(g.m, g.n), g.k, g.batch, g.routed}] += g.count;
  std::vector<GemmShape> out;
  for (const auto &[shape, count] : folded)
    if (count > 1e-9)
      out.push_back({shape[0], shape[1], shape[2], shape[3], count, shape[4] != 0});
  return out;
}

} // namespace megac::planner
