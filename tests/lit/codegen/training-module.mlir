// A training module (docs/training-step.md) compiles to one plan, a function per func, with
// parameters and state shared by name; `megac run` runs its forward function. An update that a
// later op would read the old value of is a located error, with a note where it is overwritten.
// RUN: split-file --leading-lines %s %t
// RUN: megac compile %t/regression.mlir -o %t/r.mplan | FileCheck %s --check-prefix=OK
// RUN: /usr/bin/python3 -c "import numpy as np; np.save('%t/x.npy', np.ones((4, 3), dtype=np.float32))"
// RUN: megac run %t/r.mplan --input x=%t/x.npy --output-dir %t/out | FileCheck %s --check-prefix=EXEC
// RUN: not megac compile %t/conflict.mlir -o %t/c.mplan 2>&1 | FileCheck %s --check-prefix=CONFLICT
// RUN: not megac compile %t/bad-target.mlir -o %t/b.mplan 2>&1 | FileCheck %s --check-prefix=TARGET

//--- regression.mlir
// 2 + 12 + 3 instructions (the input pipeline raises x @ w to transpose + linear); one w for
// three functions.
// OK: wrote {{.*}}r.mplan: 17 instructions, {{[0-9]+}} buffers, 1 parameters, arena {{[0-9]+}} bytes
// EXEC: output pred f32 [4, 1] -> {{.*}}out/pred.npy
func.func @forward(%w: tensor<3x1xf32> {mega.param = "w", mega.init = #mega.init<normal, std = 0.5>},
                   %x: tensor<4x3xf32> {mega.input = "x"}) -> (tensor<4x1xf32> {mega.output = "pred"}) {
  %p = mega.matmul %x, %w : tensor<4x3xf32>, tensor<3x1xf32> -> tensor<4x1xf32>
  return %p : tensor<4x1xf32>
}
func.func @forward_backward(%w: tensor<3x1xf32> {mega.param = "w"},
                            %x: tensor<4x3xf32> {mega.input = "x"},
                            %t: tensor<4x1xf32> {mega.input = "t"},
                            %norm: tensor<f32> {mega.input = "loss_normalizer"},
                            %acc: tensor<3x1xf32> {mega.state = "grad.w"})
    -> (tensor<f32> {mega.output = "loss"}, tensor<3x1xf32> {mega.updates = "grad.w"}) {
  %pred = mega.matmul %x, %w : tensor<4x3xf32>, tensor<3x1xf32> -> tensor<4x1xf32>
  %d = mega.sub %pred, %t : tensor<4x1xf32>
  %sq = mega.mul %d, %d : tensor<4x1xf32>
  %s = mega.reduce sum %sq over [0, 1] : tensor<4x1xf32> -> tensor<f32>
  %loss = mega.mul %s, %norm : tensor<f32>
  %two = mega.constant dense<2.0> : tensor<4x1xf32>
  %nb = mega.broadcast %norm : tensor<f32> -> tensor<4x1xf32>
  %g1 = mega.mul %d, %two : tensor<4x1xf32>
  %dp = mega.mul %g1, %nb : tensor<4x1xf32>
  %xt = mega.transpose %x [1, 0] : tensor<4x3xf32> -> tensor<3x4xf32>
  %gw = mega.matmul %xt, %dp : tensor<3x4xf32>, tensor<4x1xf32> -> tensor<3x1xf32>
  %acc2 = mega.add %acc, %gw : tensor<3x1xf32>
  return %loss, %acc2 : tensor<f32>, tensor<3x1xf32>
}
func.func @apply_gradients(%w: tensor<3x1xf32> {mega.param = "w"},
                           %acc: tensor<3x1xf32> {mega.state = "grad.w"},
                           %m: tensor<3x1xf32> {mega.state = "adam.m.w"},
                           %v: tensor<3x1xf32> {mega.state = "adam.v.w"},
                           %lr: tensor<f32> {mega.input = "lr"},
                           %step: tensor<i64> {mega.input = "step"})
    -> (tensor<3x1xf32> {mega.updates = "w"}, tensor<3x1xf32> {mega.updates = "adam.m.w"},
        tensor<3x1xf32> {mega.updates = "adam.v.w"}, tensor<f32> {mega.output = "grad_norm"}) {
  %n = mega.global_norm %acc : (tensor<3x1xf32>) -> tensor<f32>
  %c = mega.clip_by_norm %acc, %n max 1.0 : tensor<3x1xf32>, tensor<f32>
  %w2, %m2, %v2 = mega.adamw_update %w, %c, %m, %v, %lr, %step
      {beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08, weight_decay = 0.01}
      : (tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<f32>, tensor<i64>)
      -> (tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x1xf32>)
  return %w2, %m2, %v2, %n : tensor<3x1xf32>, tensor<3x1xf32>, tensor<3x1xf32>, tensor<f32>
}

//--- conflict.mlir
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"}, %g: tensor<4xf32> {mega.input = "g"})
    -> (tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.output = "delta"}) {
  %w2 = mega.sub %w, %g : tensor<4xf32>
  // CONFLICT: conflict.mlir:[[@LINE+1]]:{{[0-9]+}}: error: reads the old value of 'w' after it is updated in place (mega.updates on result 0); read it before the update
  %delta = mega.sub %w2, %w : tensor<4xf32>
  // CONFLICT: conflict.mlir:[[@LINE-3]]:{{[0-9]+}}: note: 'w' is overwritten here
  return %w2, %delta : tensor<4xf32>, tensor<4xf32>
}

//--- bad-target.mlir
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<4xf32> {mega.updates = "adam.m.w"}) {
  %e = mega.exp %w : tensor<4xf32>
  // TARGET: bad-target.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'func.return' op result 0 updates 'adam.m.w', which is not a mega.param or mega.state argument of @apply_gradients
  return %e : tensor<4xf32>
}
