// Results that are an argument, constants (i32, i1) and reshapes sharing a parameter's or an
// input's bytes: megac-run.test checks each value.
func.func @pass(%x: tensor<2x3xf32> {mega.input = "x"}, %w: tensor<6xf32> {mega.param = "w", mega.init = #mega.init<ones>})
    -> (tensor<2x3xf32>, tensor<2xi32>, tensor<2x3xf32>, tensor<3x2xf32>, tensor<3xi1>) {
  %c = mega.constant dense<[4, 5]> : tensor<2xi32>
  %m = mega.constant dense<[true, false, true]> : tensor<3xi1>
  %r = mega.reshape %w : tensor<6xf32> -> tensor<2x3xf32>
  %r2 = mega.reshape %x : tensor<2x3xf32> -> tensor<3x2xf32>
  return %x, %c, %r, %r2, %m : tensor<2x3xf32>, tensor<2xi32>, tensor<2x3xf32>, tensor<3x2xf32>, tensor<3xi1>
}
