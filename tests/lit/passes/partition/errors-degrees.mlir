// mega-sharding-propagation rejects degrees below 1 and prints them.
// RUN: not megac-opt %s --mega-sharding-propagation="tp=0" 2>&1 | FileCheck %s --check-prefix=TP0
// RUN: not megac-opt %s --mega-sharding-propagation="tp=2 dp=-1 pp=3" 2>&1 | FileCheck %s --check-prefix=DPNEG

// TP0: error: mega-sharding-propagation: degrees must be >= 1 (tp = 0, dp = 1, pp = 1)
// DPNEG: error: mega-sharding-propagation: degrees must be >= 1 (tp = 2, dp = -1, pp = 3)

func.func @forward_backward(%w: tensor<4x4xf32> {mega.param = "w"}, %x: tensor<2x4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.linear %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %l = mega.reduce sum %y over [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
