// RUN: megac-opt %s --split-input-file --mega-schedule-latency-hiding | FileCheck %s
// RUN: megac-opt %s --split-input-file --mega-schedule-latency-hiding="max-in-flight-bytes=256" | FileCheck %s --check-prefix=BUDGET
// RUN: not megac-opt %s --split-input-file --mega-schedule-latency-hiding="max-in-flight-bytes=-1" 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: error: mega-schedule-latency-hiding: max-in-flight-bytes -1 is negative; give 0 (no overlap) or more

// mega-schedule-latency-hiding: each blocking collective becomes a start (as early as its input
// allows) and a done (just before the first reader), unless nothing would run between them.

// Buckets of @apply_gradients: each bucket's reduction starts as soon as it is flattened and is
// done only where the optimizer reads it, so the second bucket's flattening and the first
// bucket's update overlap the reductions. With a 256-byte budget (one bucket) the first bucket's
// done cannot sink past the second's reduction, so it stays blocking and the second overlaps.
#mesh = #mega.mesh<dp = 2>
func.func @apply_gradients(%g0: tensor<64xf32>, %g1: tensor<64xf32>, %w: tensor<64xf32>)
    -> (tensor<64xf32>, tensor<64xf32>) {
  %b0 = mega.neg %g0 : tensor<64xf32>
  %r0 = mega.all_reduce sum %b0 on #mesh axes ["dp"] : tensor<64xf32>
  %b1 = mega.neg %g1 : tensor<64xf32>
  %r1 = mega.all_reduce sum %b1 on #mesh axes ["dp"] : tensor<64xf32>
  %u0 = mega.add %w, %r0 : tensor<64xf32>
  %u1 = mega.add %w, %r1 : tensor<64xf32>
  return %u0, %u1 : tensor<64xf32>, tensor<64xf32>
}
// CHECK-LABEL: func.func @apply_gradients
// CHECK:         %[[B0:.*]] = mega.neg %arg0
// CHECK-NEXT:    %[[H0:.*]] = mega.all_reduce_start sum %[[B0]]
// CHECK-NEXT:    %[[B1:.*]] = mega.neg %arg1
// CHECK-NEXT:    %[[H1:.*]] = mega.all_reduce_start sum %[[B1]]
// CHECK-NEXT:    %[[R0:.*]] = mega.collective_done %[[H0]] : tensor<64xf32>
// CHECK-NEXT:    %[[U0:.*]] = mega.add %arg2, %[[R0]]
// CHECK-NEXT:    %[[R1:.*]] = mega.collective_done %[[H1]] : tensor<64xf32>
// CHECK-NEXT:    %[[U1:.*]] = mega.add %arg2, %[[R1]]
// CHECK-NOT:     mega.all_reduce sum
// BUDGET-LABEL: func.func @apply_gradients
// BUDGET:         mega.neg %arg0
// BUDGET-NEXT:    mega.all_reduce sum
// BUDGET-NEXT:    mega.neg %arg1
// BUDGET-NEXT:    mega.all_reduce_start sum
// BUDGET-NEXT:    mega.add
// BUDGET-NEXT:    mega.collective_done
// BUDGET-NEXT:    mega.add
// -----

// Backward of a column-parallel linear: the input gradient's all-reduce over tp starts right
// after its GEMM and overlaps the weight-gradient GEMM.
#mesh = #mega.mesh<tp = 2>
func.func @backward(%dy: tensor<8x16xf32>, %w: tensor<16x32xf32>, %x: tensor<8x32xf32>)
    -> (tensor<8x32xf32>, tensor<16x32xf32>) {
  %dx = mega.matmul %dy, %w : tensor<8x16xf32>, tensor<16x32xf32> -> tensor<8x32xf32>
  %dxr = mega.all_reduce sum %dx on #mesh axes ["tp"] : tensor<8x32xf32>
  %dw = mega.matmul %dy, %x {transpose_lhs = true} : tensor<8x16xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  return %dxr, %dw : tensor<8x32xf32>, tensor<16x32xf32>
}
// CHECK-LABEL: func.func @backward
// CHECK:         %[[DX:.*]] = mega.matmul %arg0, %arg1
// CHECK-NEXT:    %[[H:.*]] = mega.all_reduce_start sum %[[DX]] on {{.*}} axes ["tp"] : tensor<8x32xf32>
// CHECK-NEXT:    %[[DW:.*]] = mega.matmul %arg0, %arg2
// CHECK-NEXT:    %[[R:.*]] = mega.collective_done %[[H]] : tensor<8x32xf32>
// CHECK-NEXT:    return %[[R]], %[[DW]]

// -----

// ZeRO-1: a reduce-scatter feeding the update and the update's all-gather; the gather of the
// first shard overlaps the second shard's update. The last gather, read by the very next op,
// is left blocking by the schedule, then split by the tail's order (orderTailByArrival) so that
// the first gather's done, on the link before it, comes first.
#mesh = #mega.mesh<dp = 2>
func.func @zero(%g0: tensor<8xf32>, %g1: tensor<8xf32>, %p0: tensor<4xf32>, %p1: tensor<4xf32>)
    -> (tensor<8xf32>, tensor<8xf32>) {
  %s0 = mega.reduce_scatter sum %g0 on #mesh axes ["dp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  %s1 = mega.reduce_scatter sum %g1 on #mesh axes ["dp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  %u0 = mega.add %p0, %s0 : tensor<4xf32>
  %a0 = mega.all_gather %u0 on #mesh axes ["dp"] dim 0 : tensor<4xf32> -> tensor<8xf32>
  %u1 = mega.add %p1, %s1 : tensor<4xf32>
  %a1 = mega.all_gather %u1 on #mesh axes ["dp"] dim 0 : tensor<4xf32> -> tensor<8xf32>
  %n = mega.neg %a1 : tensor<8xf32>
  return %a0, %n : tensor<8xf32>, tensor<8xf32>
}
// CHECK-LABEL: func.func @zero
// CHECK-NEXT:    %[[H0:.*]] = mega.reduce_scatter_start sum %arg0 {{.*}} dim 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[H1:.*]] = mega.reduce_scatter_start sum %arg1 {{.*}} dim 0 : tensor<8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[S0:.*]] = mega.collective_done %[[H0]]
// CHECK-NEXT:    %[[U0:.*]] = mega.add %arg2, %[[S0]]
// CHECK-NEXT:    %[[G0:.*]] = mega.all_gather_start %[[U0]] {{.*}} dim 0 : tensor<4xf32> -> tensor<8xf32>
// CHECK-NEXT:    %[[S1:.*]] = mega.collective_done %[[H1]]
// CHECK-NEXT:    %[[U1:.*]] = mega.add %arg3, %[[S1]]
// CHECK-NEXT:    %[[G1:.*]] = mega.all_gather_start %[[U1]]
// CHECK-NEXT:    %[[A0:.*]] = mega.collective_done %[[G0]]
// CHECK-NEXT:    %[[A1:.*]] = mega.collective_done %[[G1]]
// CHECK-NEXT:    %[[N:.*]] = mega.neg %[[A1]]
// CHECK-NEXT:    return %[[A0]], %[[N]]

// -----

// ZeRO-1's parameter all-gathers behind the optimizer: the multi-tensor AdamW splits by the
// bucket whose gather reads each updated parameter (the replicated %p3, gathered by none, last);
// each bucket's update, packing and gather start come before the next bucket's update, and the
// gathers complete where their buckets are unpacked, after the last update.
#mesh = #mega.mesh<dp = 2>
func.func @zero_buckets(%lr: tensor<f32>, %step: tensor<i64>, %p0: tensor<4xf32>,
    %g0: tensor<4xf32>, %p1: tensor<4xf32>, %g1: tensor<4xf32>, %p2: tensor<4xf32>,
    %g2: tensor<4xf32>, %p3: tensor<4xf32>, %g3: tensor<4xf32>, %m: tensor<4xf32>,
    %v: tensor<4xf32>) -> (tensor<16xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>) {
  %r:12 = mega.adamw_update_multi %lr, %step, %p0, %g0, %m, %v, %p1, %g1, %m, %v, %p2, %g2, %m, %v,
      %p3, %g3, %m, %v {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08,
      weight_decays = array<f64: 0.1, 0.2, 0.3, 0.0>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
         tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
      -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>,
          tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %c = mega.concat %r#0, %r#3 axis 0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  %a = mega.all_gather %c on #mesh axes ["dp"] dim 0 : tensor<8xf32> -> tensor<16xf32>
  %n = mega.neg %a : tensor<16xf32>
  %b = mega.all_gather %r#6 on #mesh axes ["dp"] dim 0 : tensor<4xf32> -> tensor<8xf32>
  %nb = mega.neg %b : tensor<8xf32>
  return %n, %nb, %r#9, %r#1 : tensor<16xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>
}
// CHECK-LABEL: func.func @zero_buckets
// CHECK-NEXT:    %[[U0:.*]]:6 = mega.adamw_update_multi %arg0, %arg1, %arg2, %arg3, %arg10, %arg11, %arg4, %arg5, %arg10, %arg11 {{.*}}weight_decays = array<f64: 1.000000e-01, 2.000000e-01>}
// CHECK-NEXT:    %[[C:.*]] = mega.concat %[[U0]]#0, %[[U0]]#3 axis 0
// CHECK-NEXT:    %[[H0:.*]] = mega.all_gather_start %[[C]]
// CHECK-NEXT:    %[[U1:.*]]:3 = mega.adamw_update_multi %arg0, %arg1, %arg6, %arg7, %arg10, %arg11 {{.*}}weight_decays = array<f64: 3.000000e-01>}
// CHECK-NEXT:    %[[H1:.*]] = mega.all_gather_start %[[U1]]#0
// CHECK-NEXT:    %[[U2:.*]]:3 = mega.adamw_update_multi %arg0, %arg1, %arg8, %arg9, %arg10, %arg11 {{.*}}weight_decays = array<f64: 0.000000e+00>}
// CHECK-NEXT:    %[[A:.*]] = mega.collective_done %[[H0]]
// CHECK-NEXT:    %[[N:.*]] = mega.neg %[[A]]
// CHECK-NEXT:    %[[B:.*]] = mega.collective_done %[[H1]]
// CHECK-NEXT:    %[[NB:.*]] = mega.neg %[[B]]
// CHECK-NEXT:    return %[[N]], %[[NB]], %[[U2]]#0, %[[U0]]#1

// -----

// ZeRO-2/3's accumulation of a micro-batch gradient into its shard, `acc + reduce_scatter(g)`:
// each reduce-scatter starts right after its gradient's GEMM and is done as late as the add
// allows (the add moves down to just before the return, then back to just after the done), so
// it runs under the rest of the backward. With a 256-byte budget (one [8, 8] gradient in flight:
// a reduce-scatter holds its whole input) the older one is done right before the newer starts.
#mesh = #mega.mesh<dp = 2>
func.func @accumulate(%acc0: tensor<4x8xf32>, %acc1: tensor<4x8xf32>, %dy: tensor<8x8xf32>,
    %x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %g1 = mega.matmul %dy, %x {transpose_lhs = true} : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %s1 = mega.reduce_scatter sum %g1 on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %a1 = mega.add %acc1, %s1 : tensor<4x8xf32>
  %dx = mega.matmul %dy, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %g0 = mega.matmul %dx, %x {transpose_lhs = true} : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %s0 = mega.reduce_scatter sum %g0 on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %a0 = mega.add %acc0, %s0 : tensor<4x8xf32>
  %n = mega.neg %dx : tensor<8x8xf32>
  return %n, %a0, %a1 : tensor<8x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @accumulate
// CHECK-NEXT:    %[[G1:.*]] = mega.matmul %arg2, %arg3
// CHECK-NEXT:    %[[H1:.*]] = mega.reduce_scatter_start sum %[[G1]] {{.*}} dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[DX:.*]] = mega.matmul %arg2, %arg4
// CHECK-NEXT:    %[[G0:.*]] = mega.matmul %[[DX]], %arg3
// CHECK-NEXT:    %[[H0:.*]] = mega.reduce_scatter_start sum %[[G0]]
// CHECK-NEXT:    %[[N:.*]] = mega.neg %[[DX]]
// CHECK-NEXT:    %[[S1:.*]] = mega.collective_done %[[H1]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[A1:.*]] = mega.add %arg1, %[[S1]]
// CHECK-NEXT:    %[[S0:.*]] = mega.collective_done %[[H0]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[A0:.*]] = mega.add %arg0, %[[S0]]
// CHECK-NEXT:    return %[[N]], %[[A0]], %[[A1]]
// BUDGET-LABEL: func.func @accumulate
// BUDGET-NEXT:    mega.matmul %arg2, %arg3
// BUDGET-NEXT:    %[[H1:.*]] = mega.reduce_scatter_start sum
// BUDGET-NEXT:    mega.matmul %arg2, %arg4
// BUDGET-NEXT:    %[[G0:.*]] = mega.matmul
// BUDGET-NEXT:    %[[S1:.*]] = mega.collective_done %[[H1]]
// BUDGET-NEXT:    mega.add %arg1, %[[S1]]
// BUDGET-NEXT:    %[[H0:.*]] = mega.reduce_scatter_start sum %[[G0]]
// BUDGET-NEXT:    mega.neg
// BUDGET-NEXT:    %[[S0:.*]] = mega.collective_done %[[H0]]
// BUDGET-NEXT:    mega.add %arg0, %[[S0]]
// BUDGET-NEXT:    return

// -----

// Under mixed precision the gradient reaches its reduce-scatter through a cast up to f32 that
// the precision pass leaves at the end of the backward: the cast and the reduce-scatter move up
// to just after the gradient's GEMM, so the reduce-scatter runs under the rest of the backward.
#mesh = #mega.mesh<dp = 2>
func.func @accumulate_cast(%acc: tensor<4x8xf32>, %dy: tensor<8x8xbf16>, %x: tensor<8x8xbf16>,
    %w: tensor<8x8xbf16>) -> (tensor<8x8xbf16>, tensor<4x8xf32>) {
  %g = mega.matmul %dy, %x {transpose_lhs = true} : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
  %dx = mega.matmul %dy, %w : tensor<8x8xbf16>, tensor<8x8xbf16> -> tensor<8x8xbf16>
  %n = mega.neg %dx : tensor<8x8xbf16>
  %c = mega.cast %g : tensor<8x8xbf16> -> tensor<8x8xf32>
  %s = mega.reduce_scatter sum %c on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %a = mega.add %acc, %s : tensor<4x8xf32>
  return %n, %a : tensor<8x8xbf16>, tensor<4x8xf32>
}
// CHECK-LABEL: func.func @accumulate_cast
// CHECK-NEXT:    %[[G:.*]] = mega.matmul %arg1, %arg2
// CHECK-NEXT:    %[[C:.*]] = mega.cast %[[G]] : tensor<8x8xbf16> -> tensor<8x8xf32>
// CHECK-NEXT:    %[[H:.*]] = mega.reduce_scatter_start sum %[[C]]
// CHECK-NEXT:    %[[DX:.*]] = mega.matmul %arg1, %arg3
// CHECK-NEXT:    %[[N:.*]] = mega.neg %[[DX]]
// CHECK-NEXT:    %[[S:.*]] = mega.collective_done %[[H]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[A:.*]] = mega.add %arg0, %[[S]]
// CHECK-NEXT:    return %[[N]], %[[A]]

// -----

// The tail after the first done is ordered by arrival: a group's link carries its collectives in
// posting order, so the work on bucket a's result (its unpacking and its squares for the norm)
// runs before bucket b's done, which then waits behind that work instead of in front of it. The
// sum that reads both stays last, and the two starts keep their order. Within the budget only:
// the 256-byte budget (two 64-byte buckets are in flight together) still reorders.
#mesh = #mega.mesh<dp = 2>
func.func @tail_by_arrival(%ga: tensor<16xf32>, %gb: tensor<16xf32>) -> tensor<f32> {
  %ra = mega.all_reduce sum %ga on #mesh axes ["dp"] : tensor<16xf32>
  %rb = mega.all_reduce sum %gb on #mesh axes ["dp"] : tensor<16xf32>
  %ua = mega.reshape %ra : tensor<16xf32> -> tensor<4x4xf32>
  %ub = mega.reshape %rb : tensor<16xf32> -> tensor<4x4xf32>
  %sa = mega.mul %ua, %ua : tensor<4x4xf32>
  %sb = mega.mul %ub, %ub : tensor<4x4xf32>
  %qa = mega.reduce sum %sa over [0, 1] : tensor<4x4xf32> -> tensor<f32>
  %qb = mega.reduce sum %sb over [0, 1] : tensor<4x4xf32> -> tensor<f32>
  %n = mega.add %qa, %qb : tensor<f32>
  return %n : tensor<f32>
}
// CHECK-LABEL: func.func @tail_by_arrival
// CHECK-NEXT:    %[[HA:.*]] = mega.all_reduce_start sum %arg0
// CHECK-NEXT:    %[[HB:.*]] = mega.all_reduce_start sum %arg1
// CHECK-NEXT:    %[[RA:.*]] = mega.collective_done %[[HA]]
// CHECK-NEXT:    %[[UA:.*]] = mega.reshape %[[RA]]
// CHECK-NEXT:    %[[SA:.*]] = mega.mul %[[UA]], %[[UA]]
// CHECK-NEXT:    %[[QA:.*]] = mega.reduce sum %[[SA]]
// CHECK-NEXT:    %[[RB:.*]] = mega.collective_done %[[HB]]
// CHECK-NEXT:    %[[UB:.*]] = mega.reshape %[[RB]]
// CHECK-NEXT:    %[[SB:.*]] = mega.mul %[[UB]], %[[UB]]
// CHECK-NEXT:    %[[QB:.*]] = mega.reduce sum %[[SB]]
// CHECK-NEXT:    mega.add %[[QA]], %[[QB]]
// CHECK-NEXT:    return
// BUDGET-LABEL: func.func @tail_by_arrival
// BUDGET:        mega.collective_done
// BUDGET-NEXT:   mega.reshape
// BUDGET-NEXT:   mega.mul
// BUDGET-NEXT:   mega.reduce
// BUDGET-NEXT:   mega.collective_done
