// Collectives and transfers need the module's mesh (a partitioned module's mega.mesh), and
// reshard must be lowered by mega-spmdize first: located errors, every one of them, never dropped.
// (Each reads only arguments, since users of a failed op's results are skipped without a
// message, and each result is returned, since the input pipeline deletes dead pure ops.)
// RUN: not megac compile %s -o %t.mplan 2>&1 | FileCheck %s

func.func @step(%x: tensor<8xf32>, %x2: tensor<2x8xf32>,
                %y: tensor<8xf32, #mega.sharding<#mega.mesh<tp = 1>, [[tp]]>>)
    -> (tensor<8xf32>, tensor<8xf32>, tensor<16xf32>, tensor<4xf32>, tensor<4x4xf32>,
        tensor<8xf32>) {
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis "dp" is not an axis of the plan's mesh (the module has no mega.mesh)
  %s = mega.all_reduce sum %x on #mega.mesh<dp = 2> axes ["dp"] : tensor<8xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis 'pp' is not an axis of the plan's mesh
  mega.send %x on #mega.mesh<pp = 2> along "pp" shift 1 tag 7 : tensor<8xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis 'pp' is not an axis of the plan's mesh
  %r = mega.recv on #mega.mesh<pp = 2> along "pp" shift 1 tag 7 : tensor<8xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis "tp" is not an axis of the plan's mesh (the module has no mega.mesh)
  %a = mega.all_gather %x on #mega.mesh<tp = 2> axes ["tp"] dim 0 : tensor<8xf32> -> tensor<16xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis "tp" is not an axis of the plan's mesh (the module has no mega.mesh)
  %rs = mega.reduce_scatter sum %x on #mega.mesh<tp = 2> axes ["tp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: mesh axis "tp" is not an axis of the plan's mesh (the module has no mega.mesh)
  %aa = mega.all_to_all %x2 on #mega.mesh<tp = 2> axes ["tp"] split 1 concat 0 : tensor<2x8xf32> -> tensor<4x4xf32>
  // CHECK: unsupported-ops.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'mega.reshard' cannot be lowered to a plan (run mega-spmdize first)
  %rh = mega.reshard %y : tensor<8xf32, #mega.sharding<#mega.mesh<tp = 1>, [[tp]]>> -> tensor<8xf32>
  // CHECK: megac compile: error: cannot compile {{.*}}unsupported-ops.mlir to a plan (see the errors above)
  return %s, %r, %a, %rs, %aa, %rh
      : tensor<8xf32>, tensor<8xf32>, tensor<16xf32>, tensor<4xf32>, tensor<4x4xf32>,
        tensor<8xf32>
}
