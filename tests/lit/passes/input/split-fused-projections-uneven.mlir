// mega-split-fused-projections leaves alone a projection cut into unequal parts (Falcon's
// multi-query [heads + 2, d]: q, then one k and one v head).
// RUN: megac-opt %s --mega-split-fused-projections | FileCheck %s

// CHECK-LABEL: func.func @multi_query(
// CHECK-SAME: tensor<12x8xf32> {mega.param = "query_key_value.weight"}
// CHECK: mega.linear %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<12x8xf32>) -> tensor<2x4x12xf32>
func.func @multi_query(%x: tensor<2x4x8xf32> {mega.input = "x"}, %w: tensor<12x8xf32> {mega.param = "query_key_value.weight"}) -> (tensor<2x4x8xf32> {mega.output = "q"}, tensor<2x4x2xf32> {mega.output = "kv"}) {
  %y = mega.linear %x, %w : (tensor<2x4x8xf32>, tensor<12x8xf32>) -> tensor<2x4x12xf32>
  %q = mega.slice %y [0, 0, 0] to [2, 4, 8] step [1, 1, 1] : tensor<2x4x12xf32> -> tensor<2x4x8xf32>
  %k = mega.slice %y [0, 0, 8] to [2, 4, 10] step [1, 1, 1] : tensor<2x4x12xf32> -> tensor<2x4x2xf32>
  %v = mega.slice %y [0, 0, 10] to [2, 4, 12] step [1, 1, 1] : tensor<2x4x12xf32> -> tensor<2x4x2xf32>
  %s = mega.add %k, %v : tensor<2x4x2xf32>
  return %q, %s : tensor<2x4x8xf32>, tensor<2x4x2xf32>
}
