// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of the backward ops.

func.func @pad_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{pad amounts on dim 0 must be >= 0}}
  %p = mega.pad %x low [-1] high [1] interior [0] : tensor<4xf32> -> tensor<4xf32>
  return %p : tensor<4xf32>
}

// -----

func.func @pad_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{pad low/high/interior need 1 entries each for [4]}}
  %p = mega.pad %x low [0, 0] high [0] interior [0] : tensor<4xf32> -> tensor<4xf32>
  return %p : tensor<4xf32>
}

// -----

func.func @ln_weight(%x: tensor<2x64xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{layer_norm_grad weight [32] must be [64] to match the last dim of [2, 64]}}
  %dx, %dw, %db = mega.layer_norm_grad %x, %x, %w eps 1.0e-05 : (tensor<2x64xf32>, tensor<2x64xf32>, tensor<32xf32>) -> (tensor<2x64xf32>, tensor<32xf32>, tensor<32xf32>)
  return
}

// -----

func.func @ln_eps(%x: tensor<2x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{epsilon must be > 0}}
  %dx, %dw, %db = mega.layer_norm_grad %x, %x, %w eps 0.0 : (tensor<2x64xf32>, tensor<2x64xf32>, tensor<64xf32>) -> (tensor<2x64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @ln_result(%x: tensor<2x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{input_grad has type 'tensor<2x64xf64>' but must match 'tensor<2x64xf32>'}}
  %dx, %dw, %db = mega.layer_norm_grad %x, %x, %w eps 1.0e-05 : (tensor<2x64xf32>, tensor<2x64xf32>, tensor<64xf32>) -> (tensor<2x64xf64>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @rms_weight(%x: tensor<2x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+1 {{weight_grad has type 'tensor<32xf32>' but must match 'tensor<64xf32>'}}
  %dx, %dw = mega.rms_norm_grad %x, %x, %w eps 1.0e-06 : (tensor<2x64xf32>, tensor<2x64xf32>, tensor<64xf32>) -> (tensor<2x64xf32>, tensor<32xf32>)
  return
}

// -----

func.func @attention_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x3x16xf32>) {
  // expected-error @+1 {{attention key/value heads (3) must divide query heads (4)}}
  %dq, %dk, %dv = mega.attention_grad %q, %q, %k, %k : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x3x16xf32>, tensor<2x8x3x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x3x16xf32>, tensor<2x8x3x16xf32>)
  return
}

// -----

func.func @attention_mask_grad(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{has a mask_grad result exactly when it has a mask operand}}
  %dq, %dk, %dv, %dm = mega.attention_grad %q, %q, %q, %q : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  return
}

// -----

func.func @attention_result_grad(%q: tensor<2x8x4x16xf32>, %do: tensor<2x8x4x8xf32>) {
  // expected-error @+1 {{result_grad has type 'tensor<2x8x4x8xf32>' but must match 'tensor<2x8x4x16xf32>'}}
  %dq, %dk, %dv = mega.attention_grad %do, %q, %q, %q : (tensor<2x8x4x8xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  return
}

// -----

func.func @attention_scale(%q: tensor<2x8x4x16xf32>) {
  // expected-error @+1 {{scale must be > 0}}
  %dq, %dk, %dv = mega.attention_grad %q, %q, %q, %q {scale = 0.0} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>)
  return
}

// -----

func.func @attention_mask_grad_type(%q: tensor<2x8x4x16xf32>, %m: tensor<2x1x1x8xf32>) {
  // expected-error @+1 {{mask_grad has type 'tensor<2x4x8x8xf32>' but must match 'tensor<2x1x1x8xf32>'}}
  %dq, %dk, %dv, %dm = mega.attention_grad %q, %q, %q, %q mask %m : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x4x8x8xf32>)
  return
}

// -----

func.func @softmax_axis(%y: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{axis -3 is out of range for rank 2}}
  %dx = mega.softmax_grad %y, %y axis -3 : tensor<2x8xf32>
  return %dx : tensor<2x8xf32>
}

// -----

func.func @ce_labels(%dl: tensor<2x8xf32>, %z: tensor<2x8x128xf32>, %l: tensor<2x7xi64>) {
  // expected-error @+1 {{cross_entropy labels [2, 7] must be the logits [2, 8, 128] without the vocab dim}}
  %dz = mega.cross_entropy_grad %dl, %z, %l : (tensor<2x8xf32>, tensor<2x8x128xf32>, tensor<2x7xi64>) -> tensor<2x8x128xf32>
  return
}

// -----

func.func @ce_loss_grad(%dl: tensor<2x7xf32>, %z: tensor<2x8x128xf32>, %l: tensor<2x8xi64>) {
  // expected-error @+1 {{loss_grad has type 'tensor<2x7xf32>' but must match 'tensor<2x8xf32>'}}
  %dz = mega.cross_entropy_grad %dl, %z, %l : (tensor<2x7xf32>, tensor<2x8x128xf32>, tensor<2x8xi64>) -> tensor<2x8x128xf32>
  return
}

// -----

func.func @ce_logits_grad(%dl: tensor<2x8xf32>, %z: tensor<2x8x128xf32>, %l: tensor<2x8xi64>) {
  // expected-error @+1 {{logits_grad has type 'tensor<2x8x64xf32>' but must match 'tensor<2x8x128xf32>'}}
  %dz = mega.cross_entropy_grad %dl, %z, %l : (tensor<2x8xf32>, tensor<2x8x128xf32>, tensor<2x8xi64>) -> tensor<2x8x64xf32>
  return
}

// -----

func.func @embedding_table_rank(%dy: tensor<2x8x64xf32>, %ids: tensor<2x8xi64>) {
  // expected-error @+1 {{table_grad must be [vocab, hidden], got [128]}}
  %dt = mega.embedding_grad %dy[%ids] : tensor<2x8x64xf32>, tensor<2x8xi64> -> tensor<128xf32>
  return
}

// -----

func.func @embedding_dy(%dy: tensor<2x8x32xf32>, %ids: tensor<2x8xi64>) {
  // expected-error @+1 {{result_grad 'tensor<2x8x32xf32>' must be the embedding output [2, 8, 64] of the table's element type}}
  %dt = mega.embedding_grad %dy[%ids] : tensor<2x8x32xf32>, tensor<2x8xi64> -> tensor<128x64xf32>
  return
}
