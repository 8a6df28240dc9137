// Splitting a CPU kernel's independent work (rows, heads, elements) over threads.
//
// The kernels stay bit-identical to a serial run: a parallel loop hands each thread a contiguous
// range of items that the body computes exactly as the serial loop would, and no reduction is
// ever split across threads (a reduction's order is part of a kernel's contract).
#pragma once

#include <cstdint>
#include <utility>

namespace megac::runtime::cpu {

/// Sets how many threads a rank's kernels use (OpenBLAS's and the kernel pool's: kernelThreads())
/// and, on Linux, where they run. With T > 1 threads the calling thread (the one that runs the
/// kernels) is pinned to one CPU and every other thread of the process (OpenBLAS's workers, the
/// kernel pool's, idle helpers) to T - 1 others, so a product's BLAS worker never lands on the
/// caller's CPU: left to the scheduler, a woken worker often does (wake-affine), and the GEMMs
/// of the next few milliseconds then run at one thread's speed (2 threads on a 2-core VM: steps
/// of one run 82-135 ms, 80-91 ms placed). The CPUs are the process's (its affinity when first
/// called), local rank r of an MPI job taking block r of T. T = 1, or a set without every local
/// rank's block (oversubscribed, or bound by the launcher): every thread may run on any of the
/// process's CPUs, as without this call (and with MEGAC_PIN_THREADS=0,
/// for a machine shared with other jobs).
void setKernelThreads(int threads);

} // namespace megac::runtime::cpu

namespace megac::runtime::cpu::detail {

/// Threads a kernel may use: OpenBLAS's thread count (set by `megac train --threads`) when the
/// kernels are built with BLAS, else 1.
int kernelThreads();

/// Calls body(context, begin, end) over contiguous chunks of [0, n) (a few per thread, none
/// smaller than `grain` items) on the caller and up to kernelThreads() - 1 pool threads, and
/// returns when every chunk is done. A call from inside a body, or while another thread's loop
/// is running, runs serially (in one chunk).
void parallelForRaw(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                    void *context);

/// parallelForRaw with a callable f(begin, end). Chunks must write disjoint memory.
template <typename F> void parallelFor(int64_t n, int64_t grain, F &&f) {
  parallelForRaw(
      n, grain,
      [](void *context, int64_t begin, int64_t end) { (*static_cast<F *>(context))(begin, end); },
      const_cast<void *>(static_cast<const void *>(&f)));
}

/// parallelForRaw for bodies made of BLAS calls (attention's per-head products): the loop runs
/// on kernelThreads() threads while OpenBLAS runs every call on its calling thread (its thread
/// count is 1 until the loop returns), so the kernel threads take BLAS's place, one product
/// each. The products' bits then do not depend on the thread count either: OpenBLAS splits a
/// product differently on 3 threads than on 1.
void parallelForSerialBlasRaw(int64_t n, int64_t grain, void (*body)(void *, int64_t, int64_t),
                              void *context);

/// parallelForSerialBlasRaw with a callable f(begin, end). Chunks must write disjoint memory.
template <typename F> void parallelForSerialBlas(int64_t n, int64_t grain, F &&f) {
  parallelForSerialBlasRaw(
      n, grain,
      [](void *context, int64_t begin, int64_t end) { (*static_cast<F *>(context))(begin, end); },
      const_cast<void *>(static_cast<const void *>(&f)));
}

/// Items per chunk that make a chunk worth a thread hand-off (~tens of microseconds) when one
/// item costs about `workPerItem` simple operations.
inline int64_t grainFor(int64_t workPerItem) {
  constexpr int64_t kMinWork = 1 << 15;
  return workPerItem >= kMinWork ? 1 : kMinWork / (workPerItem < 1 ? 1 : workPerItem);
}

} // namespace megac::runtime::cpu::detail
