// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// RUN: megac-opt %s | FileCheck %s --check-prefix=ALIAS
// Round trip of the attributes: #mega.mesh, #mega.sharding (as tensor encodings and as plain
// attributes, with partial reductions) and #mega.init on parameter arguments. Meshes are
// printed once, at the top, under #mesh aliases; shardings refer to them by alias.

// CHECK-DAG: #[[M3:mesh[0-9]*]] = #mega.mesh<pp = 2, dp = 2, tp = 4>
// CHECK-DAG: #[[M2:mesh[0-9]*]] = #mega.mesh<dp = 2, tp = 4>
// CHECK-DAG: #[[M1:mesh[0-9]*]] = #mega.mesh<world = 1>

// No mesh is spelled out inside a sharding or an attribute dictionary anywhere in the output.
// ALIAS-NOT: <#mega.mesh<
// ALIAS-NOT: = #mega.mesh<{{.*}}>{{[,}]}}

// A user alias of any name, and a quoted axis name that is a keyword, print the same way.
#grid = #mega.mesh<"dp" = 2, tp = 4>

// CHECK: module attributes {mega.mesh = #[[M3]]}
module attributes {mega.mesh = #mega.mesh<pp = 2, dp = 2, tp = 4>} {

// CHECK-LABEL: func.func @encodings
// CHECK-SAME: tensor<8x16x64xf32, #mega.sharding<#[[M2]], {{\[}}[dp], [], [tp]]>>
// CHECK-SAME: tensor<8x16x64xf32, #mega.sharding<#[[M2]], {{\[}}[dp], [], []], partial = sum(tp)>>
// CHECK-SAME: tensor<64x64xbf16, #mega.sharding<#[[M2]], {{\[}}[dp, tp], []]>>
// CHECK-SAME: tensor<64x64xbf16, #mega.sharding<#[[M2]], {{\[}}[], []]>>
// CHECK-SAME: tensor<f32, #mega.sharding<#[[M2]], [], partial = max(dp, tp)>>
// CHECK-SAME: tensor<16x3xi64, #mega.sharding<#[[M3]], {{\[}}[pp, tp], []], partial = mean(dp)>>
// CHECK-SAME: tensor<5xf16, #mega.sharding<#[[M1]], {{\[}}[world]]>>
func.func @encodings(
    %split: tensor<8x16x64xf32, #mega.sharding<#grid, [[dp], [], [tp]]>>,
    %partial: tensor<8x16x64xf32, #mega.sharding<#grid, [[dp], [], []], partial = sum(tp)>>,
    %two_axes: tensor<64x64xbf16, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp, tp], []]>>,
    %replicated: tensor<64x64xbf16, #mega.sharding<#grid, [[], []]>>,
    %scalar: tensor<f32, #mega.sharding<#grid, [], partial = max(dp, tp)>>,
    %three: tensor<16x3xi64, #mega.sharding<#mega.mesh<pp = 2, dp = 2, tp = 4>, [[pp, tp], []], partial = mean(dp)>>,
    // A size-1 axis divides every dim.
    %one: tensor<5xf16, #mega.sharding<#mega.mesh<world = 1>, [[world]]>>) {
  return
}

// Shardings and meshes as ordinary attributes.
// CHECK-LABEL: func.func @plain_attributes
// CHECK-SAME: mega.layout = #mega.sharding<#[[M2]], {{\[}}[tp]], partial = min(dp)>
// CHECK-SAME: mega.mesh = #[[M1]]
func.func @plain_attributes(%x: tensor<8xf32> {mega.layout = #mega.sharding<#grid, [[tp]], partial = min(dp)>, mega.mesh = #mega.mesh<world = 1>}) {
  return
}

// Parameter init specs. normal's std is printed as a double; zeros with an explicit zero std
// is just zeros.
// CHECK-LABEL: func.func @params
// CHECK-SAME: %arg0: tensor<4x4xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "w"}
// CHECK-SAME: %arg1: tensor<4xf32> {mega.init = #mega.init<zeros>, mega.param = "b"}
// CHECK-SAME: %arg2: tensor<4xf32> {mega.init = #mega.init<ones>, mega.param = "ln.weight"}
// CHECK-SAME: %arg3: tensor<8x4xbf16> {mega.init = #mega.init<normal, std = 1.000000e+00>}
// CHECK-SAME: %arg4: tensor<4xf32> {mega.init = #mega.init<zeros>}
// CHECK-SAME: %arg5: tensor<8x4xf32, #mega.sharding<#[[M2]], {{\[}}[dp], [tp]]>> {mega.init = #mega.init<normal, std = 0.0123456789>, mega.param = "sharded"}
func.func @params(%w: tensor<4x4xf32> {mega.param = "w", mega.init = #mega.init<normal, std = 0.02>},
                  %b: tensor<4xf32> {mega.param = "b", mega.init = #mega.init<zeros>},
                  %g: tensor<4xf32> {mega.param = "ln.weight", mega.init = #mega.init<ones>},
                  %e: tensor<8x4xbf16> {mega.init = #mega.init<normal, std = 1.0>},
                  %z: tensor<4xf32> {mega.init = #mega.init<zeros, std = 0.0>},
                  %s: tensor<8x4xf32, #mega.sharding<#grid, [[dp], [tp]]>> {mega.param = "sharded", mega.init = #mega.init<normal, std = 0.0123456789>}) {
  return
}

}
