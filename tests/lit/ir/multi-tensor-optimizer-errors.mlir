// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of adamw_update_multi's verifier.

func.func @tensors_not_four(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{takes four tensors (param, grad, exp_avg, exp_avg_sq) per parameter after lr and step, got 3}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @results(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{has 2 results for 1 parameters; it returns three (param, exp_avg, exp_avg_sq) each}}
  %r:2 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @decays(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{has 2 weight_decays for 1 parameters; give one each}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1, 0.0>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @betas(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{beta1 and beta2 must be in [0, 1)}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 1.0, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @eps(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{eps must be > 0}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 0.0, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @shapes(%p: tensor<4xf32>, %g: tensor<3xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{parameter 0: param, grad and moments must share one shape; param is 'tensor<4xf32>'}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %g, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<3xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @moments(%p: tensor<4xf32>, %m: tensor<4xf64>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{parameter 0: the moments must have the parameter's type 'tensor<4xf32>'}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %m, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf64>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @result_types(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{parameter 0: results must have the parameter's type 'tensor<4xf32>'}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: 0.1>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf64>, tensor<4xf32>)
  return
}

// -----

func.func @decay_sign(%p: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // expected-error @+1 {{parameter 0: weight decay must be >= 0, got -1}}
  %r:3 = mega.adamw_update_multi %lr, %step, %p, %p, %p, %p {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decays = array<f64: -1.0>}
      : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
