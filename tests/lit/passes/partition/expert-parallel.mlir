// Expert parallelism (docs/moe.md): a one-layer Mixtral (megac import --model mixtral:layers=1,
// hidden=8,heads=2,kv_heads=1,experts=4,topk=2,ffn=8,seq=4,vocab=16,batch=4, inline below) on
// dp 4 with ep 2: the mesh is <pp, dp = 2, ep = 2, tp>, the batch split over (dp, ep); each
// rank holds 2 of the 4 experts, whose gradients are partial sums over dp only, while dense
// parameters' are over dp and ep. Each rank dispatches its own tokens to every expert; a
// moe_exchange (a variable-split all-to-all of the routed rows, after the routing is
// all-gathered over ep and sliced to this rank's experts) moves them to the experts' ranks, and
// another brings the experts' outputs back before a local combine. The load-balancing term is
// reduced once over (dp, ep) and enters add_aux_loss without copy_to_shards.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=4 ep=2" --mega-spmdize --cse | FileCheck %s

// CHECK: #mesh = #mega.mesh<pp = 1, dp = 2, ep = 2, tp = 1>
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: tensor<1x4xi64> {mega.dim_axes = {{\[\[}}"dp", "ep"], []], mega.global_shape = array<i64: 4, 4>, mega.input = "input_ids"}
// CHECK-SAME: %[[GATE:arg[0-9]+]]: tensor<4x8xf32> {mega.dim_axes = {{\[\[}}], []], mega.global_shape = array<i64: 4, 8>, mega.grad_partial = ["dp", "ep"], {{[^}]*}}mega.param = "layers.0.block_sparse_moe.gate.weight"}
// CHECK-SAME: %[[W1:arg[0-9]+]]: tensor<2x8x8xf32> {mega.dim_axes = {{\[\[}}"ep"], [], []], mega.global_shape = array<i64: 4, 8, 8>, mega.grad_partial = ["dp"], {{[^}]*}}mega.param = "layers.0.block_sparse_moe.experts.w1.weight"}
// CHECK: mega.all_reduce sum %{{.*}} on #mesh axes ["dp", "ep"] : tensor<f32>
// CHECK-NOT: copy_to_shards
// CHECK: %[[X:.*]] = mega.add_aux_loss %{{.*}}, %{{.*}} : tensor<1x4x8xf32>, tensor<f32>
// CHECK: %[[D:.*]] = mega.moe_dispatch %[[X]], %[[M:.*]] : (tensor<1x4x8xf32>, tensor<1x4x4xf32>) -> tensor<4x1x4x8xf32>
// CHECK: %[[MG:.*]] = mega.all_gather %[[M]] on #mesh axes ["ep"] dim 0 : tensor<1x4x4xf32> -> tensor<2x4x4xf32>
// CHECK: %[[ME:.*]] = mega.shard_slice %[[MG]] on #mesh axes ["ep"] dim 2 : tensor<2x4x4xf32> -> tensor<2x4x2xf32>
// CHECK: %[[TO:.*]] = mega.moe_exchange %[[D]], %[[M]], %[[ME]] on #mesh axes ["ep"] {to_experts} : (tensor<4x1x4x8xf32>, tensor<1x4x4xf32>, tensor<2x4x2xf32>) -> tensor<2x2x4x8xf32>
// CHECK: mega.moe_matmul %[[TO]], %[[W1]], %[[ME]] topk 2 {global_experts = 4 : i64} : (tensor<2x2x4x8xf32>, tensor<2x8x8xf32>, tensor<2x4x2xf32>) -> tensor<2x2x4x8xf32>
// CHECK: %[[BACK:.*]] = mega.moe_exchange %{{.*}}, %[[M]], %[[ME]] on #mesh axes ["ep"] : (tensor<2x2x4x8xf32>, tensor<1x4x4xf32>, tensor<2x4x2xf32>) -> tensor<4x1x4x8xf32>
// CHECK: mega.moe_combine %[[BACK]], %{{.*}} : (tensor<4x1x4x8xf32>, tensor<1x4x4xf32>) -> tensor<1x4x8xf32>
// CHECK-NOT: reduce_scatter
// CHECK: return

module attributes {mega.model = "mixtral:layers=1,hidden=8,heads=2,kv_heads=1,experts=4,topk=2,ffn=8,seq=4,vocab=16,batch=4,tied=0,rope_theta=10000,norm_eps=1e-05,dtype=f32"} {
  func.func @mixtral(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "embed_tokens.weight"}, %arg2: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "layers.0.input_layernorm.weight"}, %arg3: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.self_attn.q_proj.weight"}, %arg4: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.self_attn.k_proj.weight"}, %arg5: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.self_attn.v_proj.weight"}, %arg6: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "layers.0.self_attn.o_proj.weight"}, %arg7: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "layers.0.post_attention_layernorm.weight"}, %arg8: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.block_sparse_moe.gate.weight"}, %arg9: tensor<4x8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.block_sparse_moe.experts.w1.weight"}, %arg10: tensor<4x8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "layers.0.block_sparse_moe.experts.w2.weight"}, %arg11: tensor<4x8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "layers.0.block_sparse_moe.experts.w3.weight"}, %arg12: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "norm.weight"}, %arg13: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "lm_head.weight"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
    %0 = mega.constant dense<[[[[1.000000e+00, 1.000000e+00, 1.000000e+00, 1.000000e+00]], [[0.540302277, 0.999949991, 0.540302277, 0.999949991]], [[-0.416146845, 9.998000e-01, -0.416146845, 9.998000e-01]], [[-0.989992499, 0.999550044, -0.989992499, 0.999550044]]]]> : tensor<1x4x1x4xf32>
    %1 = mega.constant dense<[[[[0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00]], [[0.841470957, 0.00999983306, 0.841470957, 0.00999983306]], [[0.909297406, 0.0199986659, 0.909297406, 0.0199986659]], [[1.411200e-01, 0.029995501, 1.411200e-01, 0.029995501]]]]> : tensor<1x4x1x4xf32>
    %2 = mega.embedding %arg1[%arg0] : tensor<16x8xf32>, tensor<4x4xi64> -> tensor<4x4x8xf32>
    %3 = mega.rms_norm %2, %arg2 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %4 = mega.linear %3, %arg3 : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
    %5 = mega.reshape %4 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %6 = mega.linear %3, %arg4 : (tensor<4x4x8xf32>, tensor<4x8xf32>) -> tensor<4x4x4xf32>
    %7 = mega.reshape %6 : tensor<4x4x4xf32> -> tensor<4x4x1x4xf32>
    %8 = mega.linear %3, %arg5 : (tensor<4x4x8xf32>, tensor<4x8xf32>) -> tensor<4x4x4xf32>
    %9 = mega.reshape %8 : tensor<4x4x4xf32> -> tensor<4x4x1x4xf32>
    %10 = mega.slice %5 [0, 0, 0, 0] to [4, 4, 2, 2] step [1, 1, 1, 1] : tensor<4x4x2x4xf32> -> tensor<4x4x2x2xf32>
    %11 = mega.slice %5 [0, 0, 0, 2] to [4, 4, 2, 4] step [1, 1, 1, 1] : tensor<4x4x2x4xf32> -> tensor<4x4x2x2xf32>
    %12 = mega.neg %11 : tensor<4x4x2x2xf32>
    %13 = mega.concat %12, %10 axis 3 : (tensor<4x4x2x2xf32>, tensor<4x4x2x2xf32>) -> tensor<4x4x2x4xf32>
    %14 = mega.broadcast %1 : tensor<1x4x1x4xf32> -> tensor<4x4x2x4xf32>
    %15 = mega.mul %13, %14 : tensor<4x4x2x4xf32>
    %16 = mega.broadcast %0 : tensor<1x4x1x4xf32> -> tensor<4x4x2x4xf32>
    %17 = mega.mul %5, %16 : tensor<4x4x2x4xf32>
    %18 = mega.add %17, %15 : tensor<4x4x2x4xf32>
    %19 = mega.slice %7 [0, 0, 0, 0] to [4, 4, 1, 2] step [1, 1, 1, 1] : tensor<4x4x1x4xf32> -> tensor<4x4x1x2xf32>
    %20 = mega.slice %7 [0, 0, 0, 2] to [4, 4, 1, 4] step [1, 1, 1, 1] : tensor<4x4x1x4xf32> -> tensor<4x4x1x2xf32>
    %21 = mega.neg %20 : tensor<4x4x1x2xf32>
    %22 = mega.concat %21, %19 axis 3 : (tensor<4x4x1x2xf32>, tensor<4x4x1x2xf32>) -> tensor<4x4x1x4xf32>
    %23 = mega.broadcast %1 : tensor<1x4x1x4xf32> -> tensor<4x4x1x4xf32>
    %24 = mega.mul %22, %23 : tensor<4x4x1x4xf32>
    %25 = mega.broadcast %0 : tensor<1x4x1x4xf32> -> tensor<4x4x1x4xf32>
    %26 = mega.mul %7, %25 : tensor<4x4x1x4xf32>
    %27 = mega.add %26, %24 : tensor<4x4x1x4xf32>
    %28 = mega.attention %18, %27, %9 causal : (tensor<4x4x2x4xf32>, tensor<4x4x1x4xf32>, tensor<4x4x1x4xf32>) -> tensor<4x4x2x4xf32>
    %29 = mega.reshape %28 : tensor<4x4x2x4xf32> -> tensor<4x4x8xf32>
    %30 = mega.linear %29, %arg6 : (tensor<4x4x8xf32>, tensor<8x8xf32>) -> tensor<4x4x8xf32>
    %31 = mega.add %2, %30 : tensor<4x4x8xf32>
    %32 = mega.rms_norm %31, %arg7 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %33 = mega.linear %32, %arg8 : (tensor<4x4x8xf32>, tensor<4x8xf32>) -> tensor<4x4x4xf32>
    %34 = mega.softmax %33 axis -1 : tensor<4x4x4xf32>
    %35 = mega.topk_mask %34 k 2 : tensor<4x4x4xf32>
    %36 = mega.mul %34, %35 : tensor<4x4x4xf32>
    %37 = mega.reduce sum %36 over [-1] keep_dims : tensor<4x4x4xf32> -> tensor<4x4x1xf32>
    %38 = mega.broadcast %37 : tensor<4x4x1xf32> -> tensor<4x4x4xf32>
    %39 = mega.div %36, %38 : tensor<4x4x4xf32>
    %40 = mega.moe_dispatch %32, %35 : (tensor<4x4x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4x8xf32>
    %41 = mega.moe_matmul %40, %arg9, %35 topk 2 : (tensor<4x4x4x8xf32>, tensor<4x8x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4x8xf32>
    %42 = mega.moe_matmul %40, %arg11, %35 topk 2 : (tensor<4x4x4x8xf32>, tensor<4x8x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4x8xf32>
    %43 = mega.sigmoid %41 : tensor<4x4x4x8xf32>
    %44 = mega.mul %41, %43 : tensor<4x4x4x8xf32>
    %45 = mega.mul %44, %42 : tensor<4x4x4x8xf32>
    %46 = mega.moe_matmul %45, %arg10, %35 topk 2 : (tensor<4x4x4x8xf32>, tensor<4x8x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4x8xf32>
    %47 = mega.moe_combine %46, %39 : (tensor<4x4x4x8xf32>, tensor<4x4x4xf32>) -> tensor<4x4x8xf32>
    %48 = mega.add %31, %47 : tensor<4x4x8xf32>
    %49 = mega.rms_norm %48, %arg12 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %50 = mega.linear %49, %arg13 : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    return %50 : tensor<4x4x16xf32>
  }
}
