// RUN: not megac-opt %s -split-input-file 2>&1 | FileCheck %s
// Meshes whose device count would overflow group-size arithmetic (once a SIGFPE in
// ShardingAttr::verifyEncoding and the collectives' shape inference) are rejected by
// MeshAttr::verify, whatever uses them.

// CHECK: error: mesh has more than 2147483648 devices
func.func @encoding(%x: tensor<8xf32, #mega.sharding<#mega.mesh<a = 4294967296, b = 4294967296>, [[a, b]]>>) {
  return
}

// -----

// CHECK: error: mesh has more than 2147483648 devices
func.func @reduce_scatter(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = mega.reduce_scatter sum %x on #mega.mesh<a = 4294967296, b = 4294967296> axes ["a", "b"] dim 0 : tensor<8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// CHECK: error: mesh has more than 2147483648 devices
func.func @all_to_all(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = mega.all_to_all %x on #mega.mesh<a = 4294967296, b = 4294967296> axes ["a", "b"] split 0 concat 0 : tensor<8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// CHECK: error: mesh has more than 2147483648 devices
// CHECK-NOT: tensor<-
func.func @all_gather(%x: tensor<3xf32>) -> tensor<3xf32> {
  %y = mega.all_gather %x on #mega.mesh<a = 4611686018427387904> axes ["a"] dim 0 : tensor<3xf32> -> tensor<3xf32>
  return %y : tensor<3xf32>
}
