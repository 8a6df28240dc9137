// mega-training-precision: bf16/fp16 keep the parameters f32 (cast where used), compute the
// model in half and keep softmax, layer_norm and the loss in f32; fp16 adds a loss_scale input
// that autodiff seeds with and the optimizer divides by (@check_gradients); fp64 widens all.
// RUN: megac-opt %s --mega-training-precision=precision=bf16 --split-input-file | FileCheck %s --check-prefix=BF16
// RUN: megac-opt %s --mega-training-precision=precision=fp16 --split-input-file | FileCheck %s --check-prefix=FP16
// RUN: megac-opt %s --mega-training-precision=precision=fp64 --split-input-file | FileCheck %s --check-prefix=FP64
// RUN: megac-opt %s --mega-training-precision=precision=fp32 --split-input-file | FileCheck %s --check-prefix=FP32
// RUN: megac-opt %s --mega-training-precision=precision=fp16 --mega-training-autodiff=loss-scale=loss_scale --mega-training-optimizer --split-input-file | FileCheck %s --check-prefix=STEP

// BF16-LABEL: func.func @forward_backward(
// BF16-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {mega.param = "wte"}, %[[LNW:[a-z0-9]+]]: tensor<8xf32> {mega.param = "ln.weight"}, %[[LNB:[a-z0-9]+]]: tensor<8xf32> {mega.param = "ln.bias"}, %[[IDS:[a-z0-9]+]]: tensor<2x4xi64> {mega.input = "input_ids"}, %[[LABELS:[a-z0-9]+]]: tensor<2x4xi64> {mega.input = "labels"}, %[[NORM:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_normalizer"}) -> (tensor<f32> {mega.output = "loss"})
// BF16-NEXT: %[[WH:.*]] = mega.cast %[[WTE]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// BF16-NEXT: %[[H:.*]] = mega.embedding %[[WH]][%[[IDS]]] : tensor<16x8xbf16>, tensor<2x4xi64> -> tensor<2x4x8xbf16>
// BF16-NEXT: %[[C:.*]] = mega.constant dense<5.000000e-01> : tensor<2x4x8xbf16>
// BF16-NEXT: %[[M:.*]] = mega.mul %[[H]], %[[C]] : tensor<2x4x8xbf16>
// BF16-NEXT: %[[G:.*]] = mega.gelu none %[[M]] : tensor<2x4x8xbf16>
// BF16-NEXT: %[[GF:.*]] = mega.cast %[[G]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// BF16-NEXT: %[[S:.*]] = mega.softmax %[[GF]] axis -1 : tensor<2x4x8xf32>
// BF16-NEXT: %[[N:.*]] = mega.layer_norm %[[S]], %[[LNW]], %[[LNB]] eps 1.000000e-05 : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// BF16-NEXT: %[[NH:.*]] = mega.cast %[[N]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// BF16-NEXT: %[[Z:.*]] = mega.linear %[[NH]], %[[WH]] : (tensor<2x4x8xbf16>, tensor<16x8xbf16>) -> tensor<2x4x16xbf16>
// BF16-NEXT: %[[ZF:.*]] = mega.cast %[[Z]] : tensor<2x4x16xbf16> -> tensor<2x4x16xf32>
// BF16-NEXT: %[[CE:.*]] = mega.cross_entropy %[[ZF]], %[[LABELS]] {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
// BF16-NEXT: %[[SUM:.*]] = mega.reduce sum %[[CE]] over [0, 1] : tensor<2x4xf32> -> tensor<f32>
// BF16-NEXT: %[[LOSS:.*]] = mega.mul %[[SUM]], %[[NORM]] : tensor<f32>
// BF16-NEXT: return %[[LOSS]] : tensor<f32>

// FP16-LABEL: func.func @forward_backward(
// FP16-SAME: %{{.*}}: tensor<f32> {mega.input = "loss_normalizer"}, %{{.*}}: tensor<f32> {mega.input = "loss_scale"}) -> (tensor<f32> {mega.output = "loss"})
// FP16: mega.linear %{{.*}} : (tensor<2x4x8xf16>, tensor<16x8xf16>) -> tensor<2x4x16xf16>
// FP16: mega.cross_entropy %{{.*}} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>

// FP64-LABEL: func.func @forward_backward(
// FP64-SAME: tensor<16x8xf64> {mega.param = "wte"}
// FP64-SAME: tensor<f64> {mega.input = "loss_normalizer"}) -> (tensor<f64> {mega.output = "loss"})
// FP64-NOT: mega.cast
// FP64: mega.constant dense<5.000000e-01> : tensor<2x4x8xf64>
// FP64: mega.layer_norm {{.*}} -> tensor<2x4x8xf64>

// FP32-NOT: mega.cast
// FP32-NOT: bf16

// The fp16 step: d(loss) is seeded with loss_scale; the optimizer unscales and checks.
// STEP-LABEL: func.func @forward_backward(
// STEP-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_scale"}, %{{.*}}: tensor<16x8xf32> {mega.state = "grad.wte"}
// STEP: mega.mul %[[SCALE]], %{{.*}} : tensor<f32>
// STEP: %[[DW:.*]] = mega.cast %{{.*}} : tensor<16x8xf16> -> tensor<16x8xf32>
// STEP: mega.add %{{.*}}, %[[DW]] : tensor<16x8xf32>
// STEP-LABEL: func.func @apply_gradients(
// STEP-SAME: %[[G:[a-z0-9]+]]: tensor<16x8xf32> {mega.state = "grad.wte"}
// STEP-SAME: %[[S:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_scale"})
// STEP: %[[R:.*]] = mega.reshape %[[S]] : tensor<f32> -> tensor<1x1xf32>
// STEP-NEXT: %[[B:.*]] = mega.broadcast %[[R]] : tensor<1x1xf32> -> tensor<16x8xf32>
// STEP-NEXT: %[[U:.*]] = mega.div %[[G]], %[[B]] : tensor<16x8xf32>
// STEP: mega.global_norm %[[U]],
// STEP-LABEL: func.func @check_gradients(
// STEP-SAME: %[[CG:[a-z0-9]+]]: tensor<16x8xf32> {mega.state = "grad.wte"}, %{{.*}}: tensor<8xf32> {mega.state = "grad.ln.weight"}, %{{.*}}: tensor<8xf32> {mega.state = "grad.ln.bias"}, %[[CS:[a-z0-9]+]]: tensor<f32> {mega.input = "loss_scale"}) -> (tensor<f32> {mega.output = "unscaled_grad_norm"})
// STEP-NEXT: %[[NORM:.*]] = mega.global_norm %[[CG]], {{.*}} -> tensor<f32>
// STEP-NEXT: %[[UN:.*]] = mega.div %[[NORM]], %[[CS]] : tensor<f32>
// STEP-NEXT: return %[[UN]] : tensor<f32>
func.func @forward_backward(%wte: tensor<16x8xf32> {mega.param = "wte"}, %lnw: tensor<8xf32> {mega.param = "ln.weight"}, %lnb: tensor<8xf32> {mega.param = "ln.bias"}, %ids: tensor<2x4xi64> {mega.input = "input_ids"}, %labels: tensor<2x4xi64> {mega.input = "labels"}, %norm: tensor<f32> {mega.input = "loss_normalizer"}) -> (tensor<f32> {mega.output = "loss"}) {
  %h = mega.embedding %wte[%ids] : tensor<16x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  %c = mega.constant dense<0.5> : tensor<2x4x8xf32>
  %m = mega.mul %h, %c : tensor<2x4x8xf32>
  %g = mega.gelu none %m : tensor<2x4x8xf32>
  %s = mega.softmax %g axis -1 : tensor<2x4x8xf32>
  %n = mega.layer_norm %s, %lnw, %lnb eps 1.000000e-05 : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %z = mega.linear %n, %wte : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %ce = mega.cross_entropy %z, %labels {ignore_index = -100 : i64} : tensor<2x4x16xf32>, tensor<2x4xi64> -> tensor<2x4xf32>
  %sum = mega.reduce sum %ce over [0, 1] : tensor<2x4xf32> -> tensor<f32>
  %loss = mega.mul %sum, %norm : tensor<f32>
  return %loss : tensor<f32>
}
