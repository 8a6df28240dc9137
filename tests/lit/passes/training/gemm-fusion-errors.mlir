// Every diagnostic of mega-training-gemm-fusion, and the matmul verifier's accumulator check.
// RUN: megac-opt %s --mega-training-gemm-fusion --split-input-file --verify-diagnostics

// expected-error@+1 {{mega-training-gemm-fusion: result 0 of @forward_backward updates 'grad.w', but no argument has mega.state = 'grad.w'; gradient accumulators come from mega-training-autodiff}}
func.func @forward_backward(%a: tensor<3x5xf32> {mega.state = "grad.v"})
    -> (tensor<3x5xf32> {mega.updates = "grad.w"}) {
  return %a : tensor<3x5xf32>
}

// -----

func.func @bad_accumulator(%a: tensor<3x8xf32>, %b: tensor<8x5xf32>, %acc: tensor<3x5xf64>)
    -> tensor<3x5xf32> {
  // expected-error@+1 {{'mega.matmul' op accumulator 'tensor<3x5xf64>' must have the result's type 'tensor<3x5xf32>' (cast the product first; the GEMM accumulates in its own type)}}
  %p = mega.matmul %a, %b accumulate %acc : tensor<3x8xf32>, tensor<8x5xf32>, tensor<3x5xf64> -> tensor<3x5xf32>
  return %p : tensor<3x5xf32>
}

// -----

func.func @bad_transposed_contraction(%a: tensor<3x8xf32>, %b: tensor<8x5xf32>) -> tensor<8x5xf32> {
  // lhs read transposed is [8, 3]: k = 3 against rhs's 8.
  // expected-error@+2 {{failed to infer returned types}}
  // expected-error@+1 {{matmul contraction dims differ}}
  %p = mega.matmul %a, %b {transpose_lhs = true} : tensor<3x8xf32>, tensor<8x5xf32> -> tensor<8x5xf32>
  return %p : tensor<8x5xf32>
}
