// mega-training-defer-parameter-gather (docs/training-step.md "Overlap"): ZeRO-1/2's all-gathers
// of updated shards move from the end of @forward_backward_apply into the next step's forward.
// RUN: megac-opt %s --split-input-file --mega-training-defer-parameter-gather | FileCheck %s

// Two parameters, each gathered from its updated shard: the fused step keeps the packed shards
// as pending states (zero.gather.0, .1) and loses the gathers and the parameters' updates; the
// gather_ copies gather each parameter just before its first use (w before the first mul, v
// before the second) and return it as the parameter's update; gather_parameters gathers alone.
// CHECK-LABEL: func.func @gather_forward_backward(
// CHECK-SAME: %[[W:[^:]*]]: tensor<4xf32> {mega.param = "w"}, %[[V:[^:]*]]: tensor<4xf32> {mega.param = "v"}, %[[X:[^:]*]]: tensor<4xf32> {mega.input = "x"}, %[[P0:[^:]*]]: tensor<2xf32> {mega.state = "zero.gather.0"}, %[[P1:[^:]*]]: tensor<2xf32> {mega.state = "zero.gather.1"})
// CHECK-SAME: {mega.output = "gathered.loss"}, tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.updates = "v"})
// CHECK-NEXT:    %[[GW:.*]] = mega.all_gather %[[P0]]
// CHECK-NEXT:    %[[H:.*]] = mega.mul %[[X]], %[[GW]]
// CHECK-NEXT:    %[[GV:.*]] = mega.all_gather %[[P1]]
// CHECK-NEXT:    mega.mul %[[H]], %[[GV]]
// CHECK:         return %{{.*}}, %[[GW]], %[[GV]]
// CHECK-LABEL: func.func @forward_backward_apply(
// CHECK-SAME: {mega.state = "zero.gather.0"}, %{{[^:]*}}: tensor<2xf32> {mega.state = "zero.gather.1"})
// CHECK-SAME: -> (tensor<f32> {mega.output = "last.loss"}, tensor<2xf32> {mega.updates = "zero.gather.0"}, tensor<2xf32> {mega.updates = "zero.gather.1"})
// CHECK-NOT:     mega.all_gather
// CHECK:         %[[NW:.*]] = mega.sub
// CHECK-NEXT:    %[[NV:.*]] = mega.sub
// CHECK-NEXT:    return %{{.*}}, %[[NW]], %[[NV]]
// CHECK-LABEL: func.func @gather_forward_backward_apply(
// CHECK-SAME: {mega.output = "gathered.last.loss"}, tensor<2xf32> {mega.updates = "zero.gather.0"}, tensor<2xf32> {mega.updates = "zero.gather.1"}, tensor<4xf32> {mega.updates = "w"}, tensor<4xf32> {mega.updates = "v"})
// CHECK-NEXT:    mega.all_gather
// CHECK-NEXT:    mega.mul
// CHECK-NEXT:    mega.all_gather
// CHECK-LABEL: func.func @gather_parameters(
// CHECK-SAME: %[[Q0:[^:]*]]: tensor<2xf32> {mega.state = "zero.gather.0"}, %[[Q1:[^:]*]]: tensor<2xf32> {mega.state = "zero.gather.1"}, %{{[^:]*}}: tensor<4xf32> {mega.param = "w"}, %{{[^:]*}}: tensor<4xf32> {mega.param = "v"})
// CHECK-NEXT:    %[[A0:.*]] = mega.all_gather %[[Q0]]
// CHECK-NEXT:    %[[A1:.*]] = mega.all_gather %[[Q1]]
// CHECK-NEXT:    return %[[A0]], %[[A1]]
#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}, %v: tensor<4xf32> {mega.param = "v"},
    %x: tensor<4xf32> {mega.input = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %h = mega.mul %x, %w : tensor<4xf32>
  %y = mega.mul %h, %v : tensor<4xf32>
  %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
func.func @forward_backward_apply(%w: tensor<4xf32> {mega.param = "w"}, %v: tensor<4xf32> {mega.param = "v"},
    %x: tensor<4xf32> {mega.input = "x"}, %g: tensor<4xf32> {mega.state = "grad.w"})
    -> (tensor<f32> {mega.output = "last.loss"}, tensor<4xf32> {mega.updates = "w"},
        tensor<4xf32> {mega.updates = "v"}) {
  %h = mega.mul %x, %w : tensor<4xf32>
  %y = mega.mul %h, %v : tensor<4xf32>
  %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
  %gs = mega.slice %g [0] to [2] step [1] : tensor<4xf32> -> tensor<2xf32>
  %ws = mega.slice %w [0] to [2] step [1] : tensor<4xf32> -> tensor<2xf32>
  %vs = mega.slice %v [0] to [2] step [1] : tensor<4xf32> -> tensor<2xf32>
  %nw = mega.sub %ws, %gs : tensor<2xf32>
  %nv = mega.sub %vs, %gs : tensor<2xf32>
  %aw = mega.all_gather %nw on #mesh axes ["dp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
  %av = mega.all_gather %nv on #mesh axes ["dp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
  return %l, %aw, %av : tensor<f32>, tensor<4xf32>, tensor<4xf32>
}
}

// -----

// A gather read by something other than a parameter's update (here an output) stays, and with
// no gather to defer nothing is added.
// CHECK-LABEL: func.func @forward_backward_apply(
// CHECK:         mega.all_gather
// CHECK-NOT:     func.func @gather_
#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"}) -> (tensor<4xf32> {mega.output = "y"}) {
  return %w : tensor<4xf32>
}
func.func @forward_backward_apply(%w: tensor<4xf32> {mega.param = "w"})
    -> (tensor<4xf32> {mega.output = "last.y"}, tensor<4xf32> {mega.updates = "w"}) {
  %s = mega.slice %w [0] to [2] step [1] : tensor<4xf32> -> tensor<2xf32>
  %a = mega.all_gather %s on #mesh axes ["dp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
  return %a, %a : tensor<4xf32>, tensor<4xf32>
}
}
