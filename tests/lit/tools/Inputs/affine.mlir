// y = x * 2 + 1 and its transpose: outputs megac-run.test predicts exactly.
func.func @affine(%x: tensor<2x3xf32> {mega.input = "x"})
    -> (tensor<2x3xf32> {mega.output = "y"}, tensor<3x2xf32> {mega.output = "y/t"}) {
  %two = mega.constant dense<2.0> : tensor<2x3xf32>
  %one = mega.constant dense<1.0> : tensor<2x3xf32>
  %m = mega.mul %x, %two : tensor<2x3xf32>
  %y = mega.add %m, %one : tensor<2x3xf32>
  %t = mega.transpose %y [1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  return %y, %t : tensor<2x3xf32>, tensor<3x2xf32>
}
