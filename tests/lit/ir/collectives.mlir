// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of the distribution ops: all_reduce, all_gather, reduce_scatter, all_to_all,
// send, recv, reshard. Meshes print once, as #mesh aliases.

// CHECK-DAG: #[[MESH:mesh[0-9]*]] = #mega.mesh<dp = 2, tp = 4>
// CHECK-DAG: #[[TP4:mesh[0-9]*]] = #mega.mesh<tp = 4>
// CHECK-DAG: #[[PP:mesh[0-9]*]] = #mega.mesh<pp = 4, tp = 2>

// CHECK-LABEL: func.func @all_reduce
// CHECK: mega.all_reduce sum %arg0 on #[[MESH]] axes ["tp"] : tensor<2x8x64xf32>
// CHECK: mega.all_reduce max %arg1 on #[[MESH]] axes ["dp", "tp"] : tensor<16xi64>
// CHECK: mega.all_reduce mean %arg0 on #[[MESH]] axes ["dp"] : tensor<2x8x64xf32>
// CHECK: mega.all_reduce min %arg1 on #[[MESH]] axes ["tp", "dp"] : tensor<16xi64>
func.func @all_reduce(%x: tensor<2x8x64xf32>, %i: tensor<16xi64>) {
  %0 = mega.all_reduce sum %x on #mega.mesh<dp = 2, tp = 4> axes ["tp"] : tensor<2x8x64xf32>
  %1 = mega.all_reduce max %i on #mega.mesh<dp = 2, tp = 4> axes ["dp", "tp"] : tensor<16xi64>
  %2 = mega.all_reduce mean %x on #mega.mesh<dp = 2, tp = 4> axes ["dp"] : tensor<2x8x64xf32>
  %3 = mega.all_reduce min %i on #mega.mesh<dp = 2, tp = 4> axes ["tp", "dp"] : tensor<16xi64>
  return
}

// CHECK-LABEL: func.func @all_gather
// CHECK: mega.all_gather %arg0 on #[[TP4]] axes ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x32x16xf32>
// CHECK: mega.all_gather %arg0 on #[[MESH]] axes ["dp", "tp"] dim -1 : tensor<2x8x16xf32> -> tensor<2x8x128xf32>
// CHECK: mega.all_gather %arg1 on #[[MESH]] axes ["dp"] dim 0 : tensor<3xi1> -> tensor<6xi1>
func.func @all_gather(%x: tensor<2x8x16xf32>, %m: tensor<3xi1>) {
  %0 = mega.all_gather %x on #mega.mesh<tp = 4> axes ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x32x16xf32>
  %1 = mega.all_gather %x on #mega.mesh<dp = 2, tp = 4> axes ["dp", "tp"] dim -1 : tensor<2x8x16xf32> -> tensor<2x8x128xf32>
  %2 = mega.all_gather %m on #mega.mesh<dp = 2, tp = 4> axes ["dp"] dim 0 : tensor<3xi1> -> tensor<6xi1>
  return
}

// CHECK-LABEL: func.func @reduce_scatter
// CHECK: mega.reduce_scatter sum %arg0 on #[[TP4]] axes ["tp"] dim 1 : tensor<2x32x16xf32> -> tensor<2x8x16xf32>
// CHECK: mega.reduce_scatter max %arg1 on #[[MESH]] axes ["dp", "tp"] dim -1 : tensor<4x16xbf16> -> tensor<4x2xbf16>
func.func @reduce_scatter(%x: tensor<2x32x16xf32>, %h: tensor<4x16xbf16>) {
  %0 = mega.reduce_scatter sum %x on #mega.mesh<tp = 4> axes ["tp"] dim 1 : tensor<2x32x16xf32> -> tensor<2x8x16xf32>
  %1 = mega.reduce_scatter max %h on #mega.mesh<dp = 2, tp = 4> axes ["dp", "tp"] dim -1 : tensor<4x16xbf16> -> tensor<4x2xbf16>
  return
}

// CHECK-LABEL: func.func @all_to_all
// CHECK: mega.all_to_all %arg0 on #[[TP4]] axes ["tp"] split 2 concat 1 : tensor<2x8x64xf32> -> tensor<2x32x16xf32>
// CHECK: mega.all_to_all %arg0 on #[[MESH]] axes ["dp"] split 0 concat -1 : tensor<2x8x64xf32> -> tensor<1x8x128xf32>
// CHECK: mega.all_to_all %arg0 on #[[TP4]] axes ["tp"] split 1 concat 1 : tensor<2x8x64xf32> -> tensor<2x8x64xf32>
func.func @all_to_all(%x: tensor<2x8x64xf32>) {
  %0 = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split 2 concat 1 : tensor<2x8x64xf32> -> tensor<2x32x16xf32>
  %1 = mega.all_to_all %x on #mega.mesh<dp = 2, tp = 4> axes ["dp"] split 0 concat -1 : tensor<2x8x64xf32> -> tensor<1x8x128xf32>
  // Splitting and concatenating the same dim keeps the shape.
  %2 = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split 1 concat 1 : tensor<2x8x64xf32> -> tensor<2x8x64xf32>
  return
}

// CHECK-LABEL: func.func @send_recv
// CHECK: mega.send %arg0 on #[[PP]] along "pp" shift 1 tag 7 : tensor<2x8x64xf32>
// CHECK: mega.send %arg0 on #[[PP]] along "pp" shift -3 tag 0 : tensor<2x8x64xf32>
// CHECK: %[[R:.*]] = mega.recv on #[[PP]] along "pp" shift -1 tag 7 : tensor<2x8x64xf32>
// CHECK: mega.recv on #[[PP]] along "tp" shift 1 tag 12 : tensor<4xi64>
// CHECK: return %[[R]] : tensor<2x8x64xf32>
func.func @send_recv(%act: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  mega.send %act on #mega.mesh<pp = 4, tp = 2> along "pp" shift 1 tag 7 : tensor<2x8x64xf32>
  mega.send %act on #mega.mesh<pp = 4, tp = 2> along "pp" shift -3 tag 0 : tensor<2x8x64xf32>
  %r = mega.recv on #mega.mesh<pp = 4, tp = 2> along "pp" shift -1 tag 7 : tensor<2x8x64xf32>
  %s = mega.recv on #mega.mesh<pp = 4, tp = 2> along "tp" shift 1 tag 12 : tensor<4xi64>
  return %r : tensor<2x8x64xf32>
}

// reshard changes only the encoding: split to replicated, replicated to split, partial to
// split over the same axis, and to no encoding at all.
// CHECK-LABEL: func.func @reshard
// CHECK{LITERAL}: mega.reshard %arg0 : tensor<8x64xf32, #mega.sharding<#mesh, [[], [tp]]>> -> tensor<8x64xf32, #mega.sharding<#mesh, [[], []]>>
// CHECK{LITERAL}: mega.reshard %arg1 : tensor<8x64xf32> -> tensor<8x64xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
// CHECK{LITERAL}: mega.reshard %arg2 : tensor<8x64xf32, #mega.sharding<#mesh, [[dp], []], partial = sum(tp)>> -> tensor<8x64xf32, #mega.sharding<#mesh, [[dp], [tp]]>>
// CHECK{LITERAL}: mega.reshard %arg0 : tensor<8x64xf32, #mega.sharding<#mesh, [[], [tp]]>> -> tensor<8x64xf32>
func.func @reshard(%x: tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], [tp]]>>,
                   %y: tensor<8x64xf32>,
                   %p: tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []], partial = sum(tp)>>) {
  %0 = mega.reshard %x : tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], [tp]]>> -> tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], []]>>
  %1 = mega.reshard %y : tensor<8x64xf32> -> tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  %2 = mega.reshard %p : tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []], partial = sum(tp)>> -> tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>
  %3 = mega.reshard %x : tensor<8x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[], [tp]]>> -> tensor<8x64xf32>
  return
}
