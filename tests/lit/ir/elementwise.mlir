// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of mega.constant and the elementwise ops: unary, binary, compare, logical, where.

// CHECK-LABEL: func.func @constants
// CHECK: mega.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK{LITERAL}: mega.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
// CHECK: mega.constant dense<[true, false]> : tensor<2xi1>
// CHECK: mega.constant dense<5.000000e-01> : tensor<4x4xbf16>
// CHECK: mega.constant dense<7> : tensor<i32>
func.func @constants() -> (tensor<2xf32>, tensor<2x3xi64>, tensor<2xi1>, tensor<4x4xbf16>, tensor<i32>) {
  %a = mega.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %b = mega.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %c = mega.constant dense<[true, false]> : tensor<2xi1>
  %d = mega.constant dense<0.5> : tensor<4x4xbf16>
  %e = mega.constant dense<7> : tensor<i32>
  return %a, %b, %c, %d, %e : tensor<2xf32>, tensor<2x3xi64>, tensor<2xi1>, tensor<4x4xbf16>, tensor<i32>
}

// neg and abs take any number type; the rest only floats.
// CHECK-LABEL: func.func @unary
// CHECK: mega.neg %arg0 : tensor<4x8xf32>
// CHECK: mega.neg %arg3 : tensor<16xi32>
// CHECK: mega.abs %arg3 : tensor<16xi32>
// CHECK: mega.abs %arg2 : tensor<2x2xf64>
// CHECK: mega.exp %arg0 : tensor<4x8xf32>
// CHECK: mega.log %arg1 : tensor<8xbf16>
// CHECK: mega.tanh %arg2 : tensor<2x2xf64>
// CHECK: mega.erf %arg0 : tensor<4x8xf32>
// CHECK: mega.sigmoid %arg4 : tensor<3x5xf16>
// CHECK: mega.relu %arg1 : tensor<8xbf16>
// CHECK: mega.sqrt %arg0 : tensor<4x8xf32>
// CHECK: mega.rsqrt %arg4 : tensor<3x5xf16>
// CHECK: mega.sin %arg0 : tensor<4x8xf32>
// CHECK: mega.cos %arg2 : tensor<2x2xf64>
func.func @unary(%x: tensor<4x8xf32>, %h: tensor<8xbf16>, %d: tensor<2x2xf64>, %i: tensor<16xi32>, %f: tensor<3x5xf16>) {
  %0 = mega.neg %x : tensor<4x8xf32>
  %1 = mega.neg %i : tensor<16xi32>
  %2 = mega.abs %i : tensor<16xi32>
  %3 = mega.abs %d : tensor<2x2xf64>
  %4 = mega.exp %x : tensor<4x8xf32>
  %5 = mega.log %h : tensor<8xbf16>
  %6 = mega.tanh %d : tensor<2x2xf64>
  %7 = mega.erf %x : tensor<4x8xf32>
  %8 = mega.sigmoid %f : tensor<3x5xf16>
  %9 = mega.relu %h : tensor<8xbf16>
  %10 = mega.sqrt %x : tensor<4x8xf32>
  %11 = mega.rsqrt %f : tensor<3x5xf16>
  %12 = mega.sin %x : tensor<4x8xf32>
  %13 = mega.cos %d : tensor<2x2xf64>
  return
}

// Operand order is kept (sub, div and pow are not commutative).
// CHECK-LABEL: func.func @binary
// CHECK: mega.add %arg0, %arg1 : tensor<4x8xf32>
// CHECK: mega.sub %arg1, %arg0 : tensor<4x8xf32>
// CHECK: mega.mul %arg2, %arg2 : tensor<16xi64>
// CHECK: mega.div %arg3, %arg4 : tensor<2x3xbf16>
// CHECK: mega.pow %arg0, %arg1 : tensor<4x8xf32>
// CHECK: mega.min %arg2, %arg2 : tensor<16xi64>
// CHECK: mega.max %arg3, %arg4 : tensor<2x3xbf16>
// CHECK: mega.add %arg5, %arg5 : tensor<f64>
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %i: tensor<16xi64>, %h: tensor<2x3xbf16>, %g: tensor<2x3xbf16>, %s: tensor<f64>) {
  %0 = mega.add %a, %b : tensor<4x8xf32>
  %1 = mega.sub %b, %a : tensor<4x8xf32>
  %2 = mega.mul %i, %i : tensor<16xi64>
  %3 = mega.div %h, %g : tensor<2x3xbf16>
  %4 = mega.pow %a, %b : tensor<4x8xf32>
  %5 = mega.min %i, %i : tensor<16xi64>
  %6 = mega.max %h, %g : tensor<2x3xbf16>
  %7 = mega.add %s, %s : tensor<f64>
  return
}

// The result of compare is i1 of the operands' shape; it is inferred, and printed as the
// operand type only.
// CHECK-LABEL: func.func @compare
// CHECK: %[[EQ:.*]] = mega.compare eq %arg0, %arg1 : tensor<4x8xf32>
// CHECK: mega.compare ne %arg0, %arg1 : tensor<4x8xf32>
// CHECK: mega.compare lt %arg2, %arg2 : tensor<16xi32>
// CHECK: mega.compare le %arg2, %arg2 : tensor<16xi32>
// CHECK: mega.compare gt %arg0, %arg1 : tensor<4x8xf32>
// CHECK: mega.compare ge %arg0, %arg1 : tensor<4x8xf32>
// CHECK: return %[[EQ]] : tensor<4x8xi1>
func.func @compare(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %i: tensor<16xi32>) -> tensor<4x8xi1> {
  %0 = mega.compare eq %a, %b : tensor<4x8xf32>
  %1 = mega.compare ne %a, %b : tensor<4x8xf32>
  %2 = mega.compare lt %i, %i : tensor<16xi32>
  %3 = mega.compare le %i, %i : tensor<16xi32>
  %4 = mega.compare gt %a, %b : tensor<4x8xf32>
  %5 = mega.compare ge %a, %b : tensor<4x8xf32>
  return %0 : tensor<4x8xi1>
}

// CHECK-LABEL: func.func @logical
// CHECK: mega.not %arg0 : tensor<4x8xi1>
// CHECK: mega.and %arg0, %arg1 : tensor<4x8xi1>
// CHECK: mega.or %arg1, %arg0 : tensor<4x8xi1>
func.func @logical(%p: tensor<4x8xi1>, %q: tensor<4x8xi1>) {
  %0 = mega.not %p : tensor<4x8xi1>
  %1 = mega.and %p, %q : tensor<4x8xi1>
  %2 = mega.or %q, %p : tensor<4x8xi1>
  return
}

// CHECK-LABEL: func.func @where
// CHECK: mega.where %arg0, %arg1, %arg2 : tensor<8x8xi1>, tensor<8x8xf32>
// CHECK: mega.where %arg0, %arg3, %arg3 : tensor<8x8xi1>, tensor<8x8xi64>
func.func @where(%m: tensor<8x8xi1>, %x: tensor<8x8xf32>, %y: tensor<8x8xf32>, %i: tensor<8x8xi64>) {
  %0 = mega.where %m, %x, %y : tensor<8x8xi1>, tensor<8x8xf32>
  %1 = mega.where %m, %i, %i : tensor<8x8xi1>, tensor<8x8xi64>
  return
}

// Elementwise ops keep the sharding encoding of their operands; compare keeps it on its i1
// result.
// CHECK-LABEL: func.func @sharded
// CHECK{LITERAL}: mega.add %arg0, %arg0 : tensor<8x16xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
// CHECK{LITERAL}: %1 = mega.compare gt %arg0, %arg0 : tensor<8x16xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
// CHECK{LITERAL}: return %1 : tensor<8x16xi1, #mega.sharding<#mesh, [[dp], [tp]]>>
func.func @sharded(%x: tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>)
    -> tensor<8x16xi1, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>> {
  %0 = mega.add %x, %x : tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  %1 = mega.compare gt %x, %x : tensor<8x16xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  return %1 : tensor<8x16xi1, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
}
