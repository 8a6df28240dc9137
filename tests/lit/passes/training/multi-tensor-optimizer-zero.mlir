// mega-training-multi-tensor-optimizer on ZeRO-1's partitioned step (the one-layer GPT of
// partition/optimizer-zero.mlir at tp 2, dp 2): the updates of dp shards (shard_slice of each
// parameter, 1/dp moments) group into one adamw_update_multi, before the bucket's all_gather.
// RUN: megac-opt %S/../partition/optimizer-zero.mlir --mega-training-loss --mega-sharding-propagation="tp=2 dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=1" --mega-training-multi-tensor-optimizer | FileCheck %s

// CHECK-LABEL: func.func @apply_gradients(
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<8x8xf32> {{[^}]*}}mega.param = "wte"}
// CHECK-SAME: %[[MWTE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.state = "adam.m.wte"}
// CHECK-SAME: %[[VWTE:arg[0-9]+]]: tensor<4x8xf32> {{[^}]*}}mega.state = "adam.v.wte"}
// CHECK-SAME: %[[LR:arg[0-9]+]]: tensor<f32> {mega.input = "lr"}, %[[STEP:arg[0-9]+]]: tensor<i64> {mega.input = "step"}
// CHECK: %[[SWTE:.*]] = mega.shard_slice %[[WTE]] on #mesh axes ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK-NOT: mega.adamw_update %
// CHECK: %[[U:.*]]:{{[0-9]+}} = mega.adamw_update_multi %[[LR]], %[[STEP]], %[[SWTE]], %{{.*}}, %[[MWTE]], %[[VWTE]], 
// CHECK-SAME: (tensor<f32>, tensor<i64>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>,
// CHECK-NOT: mega.adamw_update %
// CHECK: mega.all_gather %{{.*}} on #mesh axes ["dp"] dim 0 : tensor<286xf32> -> tensor<572xf32>
// CHECK-NOT: mega.adamw_update %
// CHECK: return
