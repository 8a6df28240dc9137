// Signatures codegen cannot map onto a plan's parameters and ports are located errors.
// RUN: split-file --leading-lines %s %t
// RUN: not megac compile %t/sharded.mlir -o %t/a.mplan 2>&1 | FileCheck %s --check-prefix=SHARDED
// RUN: not megac compile %t/duplicate.mlir -o %t/b.mplan 2>&1 | FileCheck %s --check-prefix=DUP
// RUN: not megac compile %t/duplicate-outputs.mlir -o %t/b.mplan 2>&1 | FileCheck %s --check-prefix=DUPOUT
// RUN: megac compile %t/two-funcs.mlir -o %t/c.mplan | FileCheck %s --check-prefix=FUNCS
// RUN: megac compile %t/two-funcs.mlir --function second -o %t/c.mplan | FileCheck %s --check-prefix=PICK
// RUN: not megac compile %t/two-funcs.mlir --function third -o %t/c.mplan 2>&1 | FileCheck %s --check-prefix=NOFUNC
// RUN: not megac compile %t/mesh.mlir -o %t/d.mplan 2>&1 | FileCheck %s --check-prefix=MESH
// RUN: not megac compile %t/other-dialect.mlir -o %t/e.mplan 2>&1 | FileCheck %s --check-prefix=OTHER

//--- sharded.mlir
// SHARDED: sharded.mlir:[[@LINE+1]]:{{[0-9]+}}: error: value of type 'tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, {{\[\[}}tp]]>>' is laid out over 2 devices; a single-rank plan needs per-rank shapes
func.func @f(%x: tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>>) -> tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>> {
  return %x : tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[tp]]>>
}

//--- duplicate.mlir
// DUP: duplicate.mlir:[[@LINE+1]]:{{[0-9]+}}: error: two parameters are named 'w'
func.func @f(%a: tensor<4xf32> {mega.param = "w"}, %b: tensor<4xf32> {mega.param = "w"}) -> tensor<4xf32> {
  return %a : tensor<4xf32>
}

//--- duplicate-outputs.mlir
func.func @f(%a: tensor<4xf32>) -> (tensor<4xf32> {mega.output = "o"}, tensor<4xf32> {mega.output = "o"}) {
  // DUPOUT: duplicate-outputs.mlir:[[@LINE+1]]:{{[0-9]+}}: error: 'func.return' op two outputs are named 'o'
  return %a, %a : tensor<4xf32>, tensor<4xf32>
}

//--- two-funcs.mlir
// Every function by default, one plan Function each; they share the arena (128 bytes, not 192).
// FUNCS: wrote {{.*}}c.mplan: 1 instructions, 3 buffers, 0 parameters, arena 128 bytes (192 without reuse)
// PICK: wrote {{.*}}c.mplan: 1 instructions, 2 buffers, 0 parameters, arena 128 bytes (128 without reuse)
// NOFUNC: error: no function @third in the module
func.func @first(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @second(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = mega.exp %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

//--- mesh.mlir
// MESH: error: mega.mesh is not a #mega.mesh
module attributes {mega.mesh = "dp=2"} {
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

//--- other-dialect.mlir
// OTHER: other-dialect.mlir:[[@LINE+2]]:{{[0-9]+}}: error: 'func.call' is not a mega op; codegen lowers only mega ops
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = func.call @f(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
