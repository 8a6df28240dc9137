// RUN: megac-opt %s | megac-opt | FileCheck %s
// Axis names that are not bare identifiers are printed quoted, so they parse back.

// CHECK: #mega.mesh<{{"?}}x y{{"?}} = 2, tp = 4>
// CHECK: func.func @quoted
// CHECK-SAME: #mega.sharding<#mesh, {{\[}}[{{"?}}x y{{"?}}], [tp]]>
func.func @quoted(%x: tensor<8x16xf32, #mega.sharding<#mega.mesh<"x y" = 2, tp = 4>, [["x y"], [tp]]>>) {
  return
}
