// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of adamw_update, global_norm and clip_by_norm.

func.func @adamw_shapes(%p: tensor<64x64xf32>, %g: tensor<64x32xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: param, grad and moments must share one shape; param is [64, 64], another is [64, 32]}}
  %p2, %m2, %v2 = mega.adamw_update %p, %g, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64x64xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
  return
}

// -----

func.func @adamw_moment_shape(%p: tensor<64xf32>, %v: tensor<32xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: param, grad and moments must share one shape; param is [64], another is [32]}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %v, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<32xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<32xf32>)
  return
}

// -----

func.func @adamw_beta1(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: beta1 and beta2 must be in [0, 1)}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 1.0, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_beta2(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: beta1 and beta2 must be in [0, 1)}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = -0.5, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_eps(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: eps must be > 0 and weight_decay >= 0}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 0.0, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_weight_decay(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: eps must be > 0 and weight_decay >= 0}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = -0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_result(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.adamw_update' op inferred type(s) 'tensor<64xf32>', 'tensor<64xf32>', 'tensor<64xf32>' are incompatible with return type(s) of operation 'tensor<64xf32>', 'tensor<64xf32>', 'tensor<64xbf16>'}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xbf16>)
  return
}

// -----

func.func @adamw_lr_not_scalar(%p: tensor<64xf32>, %lr: tensor<1xf32>, %step: tensor<i64>) {
  // expected-error @+1 {{'mega.adamw_update' op operand #4 must be 0D tensor of 64-bit float or 32-bit float values, but got 'tensor<1xf32>'}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<1xf32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_step_type(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'mega.adamw_update' op operand #5 must be 0D tensor of 64-bit signless integer values, but got 'tensor<i32>'}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i32>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @adamw_missing_beta(%p: tensor<64xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{'mega.adamw_update' op requires attribute 'beta2'}}
  %p2, %m2, %v2 = mega.adamw_update %p, %p, %p, %p, %lr, %step
      {beta1 = 0.9, eps = 1.0e-08, weight_decay = 0.1}
      : (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<64xf32>, tensor<64xf32>, tensor<64xf32>)
  return
}

// -----

func.func @global_norm_no_inputs() -> tensor<f32> {
  // expected-error @+1 {{'mega.global_norm' op needs at least one input}}
  %n = mega.global_norm : () -> tensor<f32>
  return %n : tensor<f32>
}

// -----

func.func @global_norm_result(%g: tensor<64xf32>) -> tensor<f64> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.global_norm' op inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<f64>'}}
  %n = mega.global_norm %g : (tensor<64xf32>) -> tensor<f64>
  return %n : tensor<f64>
}

// -----

func.func @global_norm_bf16_result(%g: tensor<64xbf16>) -> tensor<bf16> {
  // expected-error @+1 {{'mega.global_norm' op result #0 must be 0D tensor of 64-bit float or 32-bit float values, but got 'tensor<bf16>'}}
  %n = mega.global_norm %g : (tensor<64xbf16>) -> tensor<bf16>
  return %n : tensor<bf16>
}

// -----

func.func @clip_max_norm(%g: tensor<64xf32>, %n: tensor<f32>) -> tensor<64xf32> {
  // expected-error @+1 {{'mega.clip_by_norm' op max_norm must be > 0}}
  %c = mega.clip_by_norm %g, %n max 0.0 : tensor<64xf32>, tensor<f32>
  return %c : tensor<64xf32>
}

// -----

func.func @clip_norm_not_scalar(%g: tensor<64xf32>, %n: tensor<64xf32>) -> tensor<64xf32> {
  // expected-error @+1 {{'mega.clip_by_norm' op operand #1 must be 0D tensor of 64-bit float or 32-bit float values, but got 'tensor<64xf32>'}}
  %c = mega.clip_by_norm %g, %n max 1.0 : tensor<64xf32>, tensor<64xf32>
  return %c : tensor<64xf32>
}

// -----

func.func @moments_in_another_type(%p: tensor<128xbf16>, %g: tensor<128xbf16>, %m: tensor<128xf32>, %v: tensor<128xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{adamw_update: the moments must have the parameter's element type}}
  %p2, %m2, %v2 = mega.adamw_update %p, %g, %m, %v, %lr, %step
      {beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.0}
      : (tensor<128xbf16>, tensor<128xbf16>, tensor<128xf32>, tensor<128xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<128xbf16>, tensor<128xf32>, tensor<128xf32>)
  return
}
