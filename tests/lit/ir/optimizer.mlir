// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of the optimizer ops: adamw_update, global_norm, clip_by_norm.

// The three results are named after what they hold.
// CHECK-LABEL: func.func @adamw_update
// CHECK: %new_param, %new_exp_avg, %new_exp_avg_sq = mega.adamw_update %arg0, %arg1, %arg2, %arg3, %arg4, %arg5 {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<i64>) -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
func.func @adamw_update(%p: tensor<64x64xf32>, %g: tensor<64x64xf32>, %m: tensor<64x64xf32>, %v: tensor<64x64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  %p2, %m2, %v2 = mega.adamw_update %p, %g, %m, %v, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
  return
}

// fp32 master weights and moments with a bf16 gradient and an f64 learning rate; beta1 = 0 and
// no weight decay are allowed.
// CHECK-LABEL: func.func @adamw_update_mixed
// CHECK: %new_param, %new_exp_avg, %new_exp_avg_sq = mega.adamw_update %arg0, %arg1, %arg2, %arg3, %arg4, %arg5 {beta1 = 0.000000e+00 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, weight_decay = 0.000000e+00 : f64} : (tensor<128xf32>, tensor<128xbf16>, tensor<128xf32>, tensor<128xf32>, tensor<f64>, tensor<i64>) -> (tensor<128xf32>, tensor<128xf32>, tensor<128xf32>)
func.func @adamw_update_mixed(%p: tensor<128xf32>, %g: tensor<128xbf16>, %m: tensor<128xf32>, %v: tensor<128xf32>, %lr: tensor<f64>, %step: tensor<i64>) {
  %p2, %m2, %v2 = mega.adamw_update %p, %g, %m, %v, %lr, %step
      {beta1 = 0.0, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.0}
      : (tensor<128xf32>, tensor<128xbf16>, tensor<128xf32>, tensor<128xf32>, tensor<f64>, tensor<i64>)
      -> (tensor<128xf32>, tensor<128xf32>, tensor<128xf32>)
  return
}

// The norm is f64 when every input is f64 and f32 otherwise (bf16 and f16 inputs included).
// CHECK-LABEL: func.func @global_norm
// CHECK: mega.global_norm %arg0, %arg1 : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<f32>
// CHECK: mega.global_norm %arg2 : (tensor<8xf64>) -> tensor<f64>
// CHECK: mega.global_norm %arg2, %arg3 : (tensor<8xf64>, tensor<4x4xbf16>) -> tensor<f32>
// CHECK: mega.global_norm %arg4 : (tensor<2xf16>) -> tensor<f32>
func.func @global_norm(%g0: tensor<64x64xf32>, %g1: tensor<64xf32>, %d: tensor<8xf64>, %h: tensor<4x4xbf16>, %f: tensor<2xf16>) {
  %0 = mega.global_norm %g0, %g1 : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<f32>
  %1 = mega.global_norm %d : (tensor<8xf64>) -> tensor<f64>
  %2 = mega.global_norm %d, %h : (tensor<8xf64>, tensor<4x4xbf16>) -> tensor<f32>
  %3 = mega.global_norm %f : (tensor<2xf16>) -> tensor<f32>
  return
}

// CHECK-LABEL: func.func @clip_by_norm
// CHECK: mega.clip_by_norm %arg0, %arg1 max 1.000000e+00 : tensor<64x64xf32>, tensor<f32>
// CHECK: mega.clip_by_norm %arg2, %arg3 max 5.000000e-01 : tensor<16xbf16>, tensor<f64>
func.func @clip_by_norm(%g: tensor<64x64xf32>, %n: tensor<f32>, %h: tensor<16xbf16>, %d: tensor<f64>) {
  %0 = mega.clip_by_norm %g, %n max 1.0 : tensor<64x64xf32>, tensor<f32>
  %1 = mega.clip_by_norm %h, %d max 0.5 : tensor<16xbf16>, tensor<f64>
  return
}

// A tp-sharded parameter keeps its layout through the update.
// CHECK-LABEL: func.func @sharded
// CHECK{LITERAL}: mega.adamw_update %arg0, %arg0, %arg0, %arg0, %arg1, %arg2 {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : (tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<f32>, tensor<i64>) -> (tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mesh, [[tp], []]>>)
func.func @sharded(%p: tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, %lr: tensor<f32>, %step: tensor<i64>) {
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<f32>, tensor<i64>)
      -> (tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>, tensor<64x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>)
  return
}
