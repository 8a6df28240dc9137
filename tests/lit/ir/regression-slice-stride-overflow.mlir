// RUN: megac-opt %s | FileCheck %s
// Slice result sizes do not overflow for huge strides.

// CHECK: mega.slice %arg0 [0] to [4] step [9223372036854775807] : tensor<4xf32> -> tensor<1xf32>
func.func @huge_stride(%x: tensor<4xf32>) -> tensor<1xf32> {
  %y = mega.slice %x [0] to [4] step [9223372036854775807] : tensor<4xf32> -> tensor<1xf32>
  return %y : tensor<1xf32>
}
