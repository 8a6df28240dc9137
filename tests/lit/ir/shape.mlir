// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of contraction, indexing, reduction and shape ops: matmul, gather, reduce,
// softmax, reshape, transpose, slice, concat, broadcast, cast.

// CHECK-LABEL: func.func @matmul
// CHECK: mega.matmul %arg0, %arg1 : tensor<16x8xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
// CHECK: mega.matmul %arg2, %arg3 : tensor<2x4x16x8xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x16x16xbf16>
// CHECK: mega.matmul %arg4, %arg5 : tensor<2x1x16x8xf64>, tensor<4x8x3xf64> -> tensor<2x4x16x3xf64>
func.func @matmul(%a: tensor<16x8xf32>, %b: tensor<8x32xf32>,
                  %q: tensor<2x4x16x8xbf16>, %kt: tensor<2x4x8x16xbf16>,
                  %l: tensor<2x1x16x8xf64>, %r: tensor<4x8x3xf64>) {
  %0 = mega.matmul %a, %b : tensor<16x8xf32>, tensor<8x32xf32> -> tensor<16x32xf32>
  %1 = mega.matmul %q, %kt : tensor<2x4x16x8xbf16>, tensor<2x4x8x16xbf16> -> tensor<2x4x16x16xbf16>
  // Batch dims broadcast: [2, 1] with [4] gives [2, 4].
  %2 = mega.matmul %l, %r : tensor<2x1x16x8xf64>, tensor<4x8x3xf64> -> tensor<2x4x16x3xf64>
  return
}

// CHECK-LABEL: func.func @gather
// CHECK: mega.gather %arg0[%arg1] axis 0 : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
// CHECK: mega.gather %arg0[%arg2] axis 1 : tensor<128x64xf32>, tensor<5xi32> -> tensor<128x5xf32>
// CHECK: mega.gather %arg0[%arg2] axis -1 : tensor<128x64xf32>, tensor<5xi32> -> tensor<128x5xf32>
func.func @gather(%t: tensor<128x64xf32>, %ids: tensor<2x8xi64>, %cols: tensor<5xi32>) {
  %0 = mega.gather %t[%ids] axis 0 : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
  %1 = mega.gather %t[%cols] axis 1 : tensor<128x64xf32>, tensor<5xi32> -> tensor<128x5xf32>
  %2 = mega.gather %t[%cols] axis -1 : tensor<128x64xf32>, tensor<5xi32> -> tensor<128x5xf32>
  return
}

// CHECK-LABEL: func.func @reduce
// CHECK: mega.reduce mean %arg0 over [2] keep_dims : tensor<2x8x64xf32> -> tensor<2x8x1xf32>
// CHECK: mega.reduce sum %arg0 over [0, 2] : tensor<2x8x64xf32> -> tensor<8xf32>
// CHECK: mega.reduce max %arg0 over [-1] : tensor<2x8x64xf32> -> tensor<2x8xf32>
// CHECK: mega.reduce min %arg1 over [0, 1] keep_dims : tensor<4x4xi32> -> tensor<1x1xi32>
// CHECK: mega.reduce sum %arg1 over [1, 0] : tensor<4x4xi32> -> tensor<i32>
func.func @reduce(%x: tensor<2x8x64xf32>, %i: tensor<4x4xi32>) {
  %0 = mega.reduce mean %x over [2] keep_dims : tensor<2x8x64xf32> -> tensor<2x8x1xf32>
  %1 = mega.reduce sum %x over [0, 2] : tensor<2x8x64xf32> -> tensor<8xf32>
  %2 = mega.reduce max %x over [-1] : tensor<2x8x64xf32> -> tensor<2x8xf32>
  %3 = mega.reduce min %i over [0, 1] keep_dims : tensor<4x4xi32> -> tensor<1x1xi32>
  %4 = mega.reduce sum %i over [1, 0] : tensor<4x4xi32> -> tensor<i32>
  return
}

// CHECK-LABEL: func.func @softmax
// CHECK: mega.softmax %arg0 axis -1 : tensor<2x4x16x16xf32>
// CHECK: mega.softmax %arg1 axis 0 : tensor<8x4xf16>
func.func @softmax(%s: tensor<2x4x16x16xf32>, %h: tensor<8x4xf16>) {
  %0 = mega.softmax %s axis -1 : tensor<2x4x16x16xf32>
  %1 = mega.softmax %h axis 0 : tensor<8x4xf16>
  return
}

// CHECK-LABEL: func.func @reshape
// CHECK: mega.reshape %arg0 : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
// CHECK: mega.reshape %arg1 : tensor<1xi64> -> tensor<i64>
func.func @reshape(%x: tensor<2x8x64xf32>, %one: tensor<1xi64>) {
  %0 = mega.reshape %x : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
  %1 = mega.reshape %one : tensor<1xi64> -> tensor<i64>
  return
}

// CHECK-LABEL: func.func @transpose
// CHECK: mega.transpose %arg0 [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
// CHECK: mega.transpose %arg1 [1, 0] : tensor<3x5xi1> -> tensor<5x3xi1>
func.func @transpose(%x: tensor<2x8x4x16xf32>, %m: tensor<3x5xi1>) {
  %0 = mega.transpose %x [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
  %1 = mega.transpose %m [1, 0] : tensor<3x5xi1> -> tensor<5x3xi1>
  return
}

// CHECK-LABEL: func.func @slice
// CHECK: mega.slice %arg0 [0, 0, 64] to [2, 8, 128] step [1, 1, 1] : tensor<2x8x192xf32> -> tensor<2x8x64xf32>
// CHECK: mega.slice %arg1 [1] to [10] step [3] : tensor<10xi64> -> tensor<3xi64>
// CHECK: mega.slice %arg1 [4] to [4] step [1] : tensor<10xi64> -> tensor<0xi64>
func.func @slice(%qkv: tensor<2x8x192xf32>, %v: tensor<10xi64>) {
  %0 = mega.slice %qkv [0, 0, 64] to [2, 8, 128] step [1, 1, 1] : tensor<2x8x192xf32> -> tensor<2x8x64xf32>
  // Elements 1, 4, 7: the last step may end before the limit.
  %1 = mega.slice %v [1] to [10] step [3] : tensor<10xi64> -> tensor<3xi64>
  %2 = mega.slice %v [4] to [4] step [1] : tensor<10xi64> -> tensor<0xi64>
  return
}

// CHECK-LABEL: func.func @concat
// CHECK: mega.concat %arg0, %arg1 axis 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
// CHECK: mega.concat %arg0, %arg0, %arg1 axis -1 : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x11xf32>
// CHECK: mega.concat %arg2 axis 0 : (tensor<4xi32>) -> tensor<4xi32>
func.func @concat(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>, %c: tensor<4xi32>) {
  %0 = mega.concat %a, %b axis 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  %1 = mega.concat %a, %a, %b axis -1 : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x11xf32>
  %2 = mega.concat %c axis 0 : (tensor<4xi32>) -> tensor<4xi32>
  return
}

// CHECK-LABEL: func.func @broadcast
// CHECK: mega.broadcast %arg0 : tensor<64xf32> -> tensor<2x8x64xf32>
// CHECK: mega.broadcast %arg1 : tensor<2x1x1xbf16> -> tensor<2x8x64xbf16>
// CHECK: mega.broadcast %arg2 : tensor<f64> -> tensor<3x3xf64>
func.func @broadcast(%b: tensor<64xf32>, %s: tensor<2x1x1xbf16>, %z: tensor<f64>) {
  %0 = mega.broadcast %b : tensor<64xf32> -> tensor<2x8x64xf32>
  %1 = mega.broadcast %s : tensor<2x1x1xbf16> -> tensor<2x8x64xbf16>
  %2 = mega.broadcast %z : tensor<f64> -> tensor<3x3xf64>
  return
}

// CHECK-LABEL: func.func @cast
// CHECK: mega.cast %arg0 : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
// CHECK: mega.cast %arg0 : tensor<2x8x64xf32> -> tensor<2x8x64xi32>
// CHECK: mega.cast %arg1 : tensor<4xi1> -> tensor<4xf16>
// CHECK: mega.cast %arg2 : tensor<4xi64> -> tensor<4xf64>
func.func @cast(%x: tensor<2x8x64xf32>, %m: tensor<4xi1>, %i: tensor<4xi64>) {
  %0 = mega.cast %x : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
  %1 = mega.cast %x : tensor<2x8x64xf32> -> tensor<2x8x64xi32>
  %2 = mega.cast %m : tensor<4xi1> -> tensor<4xf16>
  %3 = mega.cast %i : tensor<4xi64> -> tensor<4xf64>
  return
}

// Inferred result shapes ignore encodings: a sharded operand may give a result with another
// (or no) layout.
// CHECK-LABEL: func.func @sharded
// CHECK{LITERAL}: mega.matmul %arg0, %arg1 : tensor<8x16xf32, #mega.sharding<#mesh, [[dp], []]>>, tensor<16x32xf32, #mega.sharding<#mesh, [[], [tp]]>> -> tensor<8x32xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
// CHECK{LITERAL}: mega.transpose %arg0 [1, 0] : tensor<8x16xf32, #mega.sharding<#mesh, [[dp], []]>> -> tensor<16x8xf32>
func.func @sharded(%a: tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []]>>,
                   %b: tensor<16x32xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], [tp]]>>) {
  %0 = mega.matmul %a, %b : tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []]>>, tensor<16x32xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], [tp]]>> -> tensor<8x32xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  %1 = mega.transpose %a [1, 0] : tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []]>> -> tensor<16x8xf32>
  return
}
