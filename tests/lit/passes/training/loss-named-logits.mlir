// mega-training-loss with logits named among several float results.
// RUN: megac-opt %s --mega-training-loss="logits=scores" | FileCheck %s --check-prefix=NAMED
// Several float results: the logits by name; the other outputs and what only they used are
// gone from @forward_backward, and @forward keeps all of them. f64 logits give an f64 loss.
// NAMED-LABEL: func.func @forward(
// NAMED-SAME: -> (tensor<3xf64> {mega.output = "hidden"}, tensor<3x5xf64> {mega.output = "scores"})
// NAMED: mega.tanh
// NAMED-LABEL: func.func @forward_backward(
// NAMED-SAME: %[[LABELS:[a-z0-9]+]]: tensor<3xi64> {mega.input = "labels"}, %[[NORM:[a-z0-9]+]]: tensor<f64> {mega.input = "loss_normalizer"}) -> (tensor<f64> {mega.output = "loss"})
// NAMED-NOT: mega.tanh
// NAMED: mega.cross_entropy %{{.*}}, %[[LABELS]] {ignore_index = -100 : i64} : tensor<3x5xf64>, tensor<3xi64> -> tensor<3xf64>
// NAMED: mega.reduce sum %{{.*}} over [0] : tensor<3xf64> -> tensor<f64>
// NAMED: mega.mul %{{.*}}, %[[NORM]] : tensor<f64>
// NAMED-NOT: mega.tanh
// NAMED: return
func.func @model(%w: tensor<5x4xf64> {mega.param = "w"}, %x: tensor<3x4xf64> {mega.input = "x"}) -> (tensor<3xf64> {mega.output = "hidden"}, tensor<3x5xf64> {mega.output = "scores"}) {
  %z = mega.linear %x, %w : (tensor<3x4xf64>, tensor<5x4xf64>) -> tensor<3x5xf64>
  %r = mega.reduce sum %x over [1] : tensor<3x4xf64> -> tensor<3xf64>
  %t = mega.tanh %r : tensor<3xf64>
  return %t, %z : tensor<3xf64>, tensor<3x5xf64>
}

