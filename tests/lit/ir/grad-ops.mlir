// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of the backward ops.

// CHECK-LABEL: func.func @backward
func.func @backward(%x: tensor<2x8x64xf32>, %w: tensor<64xf32>, %q: tensor<2x8x4x16xf32>,
                    %kv: tensor<2x8x2x16xf32>, %m: tensor<2x1x1x8xf32>, %y: tensor<2x4x8x8xf32>,
                    %logits: tensor<2x8x128xf32>, %labels: tensor<2x8xi64>, %dl: tensor<2x8xf32>,
                    %s: tensor<4x8xf32>, %pos: tensor<8xi64>) {
  // CHECK: mega.pad %{{.*}} low [0, 1] high [0, 2] interior [0, 1] : tensor<4x8xf32> -> tensor<4x18xf32>
  %p = mega.pad %s low [0, 1] high [0, 2] interior [0, 1] : tensor<4x8xf32> -> tensor<4x18xf32>
  // CHECK: mega.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  %dx, %dw, %db = mega.layer_norm_grad %x, %x, %w eps 1.0e-05 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>)
  // CHECK: mega.rms_norm_grad
  %rx, %rw = mega.rms_norm_grad %x, %x, %w eps 1.0e-06 : (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  // CHECK: mega.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x1x1x8xf32>)
  %dq, %dk, %dv, %dm = mega.attention_grad %q, %q, %kv, %kv mask %m causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>, tensor<2x8x2x16xf32>, tensor<2x1x1x8xf32>)
  // CHECK: mega.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  %aq, %ak, %av = mega.attention_grad %q, %q, %q, %q {scale = 0.25} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  // With positions: dq, dk, dv and no mask gradient.
  // CHECK: mega.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} positions %{{.*}}, %{{.*}} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  %pq, %pk, %pv = mega.attention_grad %q, %q, %q, %q positions %pos, %pos : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  // With a padding mask and positions (context parallelism of padded inputs): its dmask too.
  // CHECK: mega.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} positions %{{.*}}, %{{.*}} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>)
  %mq, %mk, %mv, %mm = mega.attention_grad %q, %q, %q, %q mask %m positions %pos, %pos : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>)
  // CHECK: mega.gelu_grad tanh %{{.*}}, %{{.*}} : tensor<2x8x64xf32>
  %g = mega.gelu_grad tanh %x, %x : tensor<2x8x64xf32>
  // CHECK: mega.softmax_grad %{{.*}}, %{{.*}} axis 3 : tensor<2x4x8x8xf32>
  %sg = mega.softmax_grad %y, %y axis 3 : tensor<2x4x8x8xf32>
  // CHECK: mega.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {ignore_index = -100 : i64} : (tensor<2x8xf32>, tensor<2x8x128xf32>, tensor<2x8xi64>) -> tensor<2x8x128xf32>
  %dz = mega.cross_entropy_grad %dl, %logits, %labels {ignore_index = -100 : i64} : (tensor<2x8xf32>, tensor<2x8x128xf32>, tensor<2x8xi64>) -> tensor<2x8x128xf32>
  // CHECK: mega.embedding_grad %{{.*}}[%{{.*}}] : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<128x64xf32>
  %dt = mega.embedding_grad %x[%labels] : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<128x64xf32>
  return
}
