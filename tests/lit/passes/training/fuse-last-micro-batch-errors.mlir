// RUN: megac-opt %s --split-input-file --mega-training-fuse-last-micro-batch --verify-diagnostics -o /dev/null

// mega-training-fuse-last-micro-batch's errors: an existing @forward_backward_apply, an
// accumulator the backward does not update, a name bound with two types.
#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "grad.w"}) {
  %a = mega.add %g, %w : tensor<4xf32>
  return %a : tensor<4xf32>
}
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "w"}) {
  %r = mega.all_reduce sum %g on #mesh axes ["dp"] : tensor<4xf32>
  return %r : tensor<4xf32>
}
// expected-error @+1 {{mega-training-fuse-last-micro-batch: the module already has @forward_backward_apply}}
func.func @forward_backward_apply() {
  return
}
}

// -----

#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "grad.w"}) {
  %a = mega.add %g, %w : tensor<4xf32>
  return %a : tensor<4xf32>
}
// expected-error @+1 {{mega-training-fuse-last-micro-batch: @forward_backward has no update of 'grad.u' of type 'tensor<4xf32>' for @apply_gradients's accumulator}}
func.func @apply_gradients(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.u"}) -> (tensor<4xf32> {mega.updates = "w"}) {
  %r = mega.all_reduce sum %g on #mesh axes ["dp"] : tensor<4xf32>
  return %r : tensor<4xf32>
}
}

// -----

#mesh = #mega.mesh<dp = 2>
module attributes {mega.mesh = #mesh} {
func.func @forward_backward(%w: tensor<4xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<4xf32> {mega.updates = "grad.w"}) {
  %a = mega.add %g, %w : tensor<4xf32>
  return %a : tensor<4xf32>
}
// expected-error @+1 {{mega-training-fuse-last-micro-batch: 'w' is 'tensor<4xf32>' in @forward_backward but 'tensor<2xf32>' in @apply_gradients}}
func.func @apply_gradients(%w: tensor<2xf32> {mega.param = "w"},
    %g: tensor<4xf32> {mega.state = "grad.w"}) -> (tensor<2xf32> {mega.updates = "w"}) {
  %r = mega.all_reduce sum %g on #mesh axes ["dp"] : tensor<4xf32>
  %s = mega.slice %r [0] to [2] step [1] : tensor<4xf32> -> tensor<2xf32>
  return %s : tensor<2xf32>
}
}
