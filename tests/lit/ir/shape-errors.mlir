// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of matmul, gather, reduce, softmax, reshape, transpose, slice, concat, broadcast
// and cast. Inferred-shape ops report the rule that failed, then "failed to infer returned
// types", both on the op's line.

func.func @matmul_element_types(%a: tensor<4x8xf32>, %b: tensor<8x4xbf16>) -> tensor<4x4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{matmul operands have different element types}}
  %c = mega.matmul %a, %b : tensor<4x8xf32>, tensor<8x4xbf16> -> tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}

// -----

func.func @matmul_rank(%a: tensor<8xf32>, %b: tensor<8x4xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{matmul operands need rank >= 2, got [8] and [8, 4]}}
  %c = mega.matmul %a, %b : tensor<8xf32>, tensor<8x4xf32> -> tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

func.func @matmul_contraction(%a: tensor<4x8xf32>, %b: tensor<6x4xf32>) -> tensor<4x4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{matmul contraction dims differ: [4, 8] has k = 8, [6, 4] has k = 6}}
  %c = mega.matmul %a, %b : tensor<4x8xf32>, tensor<6x4xf32> -> tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}

// -----

func.func @matmul_batch(%a: tensor<2x3x4x8xf32>, %b: tensor<5x8x4xf32>) -> tensor<2x3x4x4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{matmul batch dims: shapes [2, 3] and [5] do not broadcast (dim 1: 3 vs 5)}}
  %c = mega.matmul %a, %b : tensor<2x3x4x8xf32>, tensor<5x8x4xf32> -> tensor<2x3x4x4xf32>
  return %c : tensor<2x3x4x4xf32>
}

// -----

func.func @matmul_result(%a: tensor<4x8xf32>, %b: tensor<8x2xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.matmul' op inferred type(s) 'tensor<4x2xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  %c = mega.matmul %a, %b : tensor<4x8xf32>, tensor<8x2xf32> -> tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

func.func @matmul_int(%a: tensor<4x8xi32>, %b: tensor<8x2xi32>) -> tensor<4x2xi32> {
  // expected-error @+1 {{'mega.matmul' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4x8xi32>'}}
  %c = mega.matmul %a, %b : tensor<4x8xi32>, tensor<8x2xi32> -> tensor<4x2xi32>
  return %c : tensor<4x2xi32>
}

// -----

func.func @gather_axis(%t: tensor<16x4xf32>, %i: tensor<3xi64>) -> tensor<16x3xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{gather axis 2 is out of range for [16, 4]}}
  %r = mega.gather %t[%i] axis 2 : tensor<16x4xf32>, tensor<3xi64> -> tensor<16x3xf32>
  return %r : tensor<16x3xf32>
}

// -----

func.func @gather_float_indices(%t: tensor<16x4xf32>, %i: tensor<3xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'mega.gather' op operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<3xf32>'}}
  %r = mega.gather %t[%i] axis 0 : tensor<16x4xf32>, tensor<3xf32> -> tensor<3x4xf32>
  return %r : tensor<3x4xf32>
}

// -----

func.func @reduce_no_axes(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce needs at least one axis}}
  %r = mega.reduce sum %x over [] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

func.func @reduce_axis_range(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce axis -3 is out of range for [4, 8]}}
  %r = mega.reduce sum %x over [-3] : tensor<4x8xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @reduce_axis_twice(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce axis -1 is listed twice}}
  %r = mega.reduce max %x over [1, -1] : tensor<4x8xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @reduce_forgot_keep_dims(%x: tensor<4x8xf32>) -> tensor<4x1xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.reduce' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4x1xf32>'}}
  %r = mega.reduce mean %x over [1] : tensor<4x8xf32> -> tensor<4x1xf32>
  return %r : tensor<4x1xf32>
}

// -----

func.func @reduce_kind(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{custom op 'mega.reduce' expected string or keyword containing one of the following enum values for attribute 'kind' [sum, mean, max, min]}}
  %r = mega.reduce prod %x over [1] : tensor<4x8xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @softmax_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'mega.softmax' op axis 2 is out of range for rank 2}}
  %y = mega.softmax %x axis 2 : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @reshape_element_type(%x: tensor<4x8xf32>) -> tensor<32xf16> {
  // expected-error @+1 {{'mega.reshape' op cannot change the element type; use mega.cast}}
  %y = mega.reshape %x : tensor<4x8xf32> -> tensor<32xf16>
  return %y : tensor<32xf16>
}

// -----

func.func @reshape_count(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  // expected-error @+1 {{'mega.reshape' op cannot reshape [4, 8] (32 elements) to [4, 4] (16 elements)}}
  %y = mega.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

func.func @transpose_entries(%x: tensor<2x3x4xf32>) -> tensor<3x2xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{transpose permutation [1, 0] has 2 entries for rank 3}}
  %y = mega.transpose %x [1, 0] : tensor<2x3x4xf32> -> tensor<3x2xf32>
  return %y : tensor<3x2xf32>
}

// -----

func.func @transpose_repeated(%x: tensor<2x3x4xf32>) -> tensor<3x3x4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{transpose permutation [1, 1, 2] is not a permutation of 0..2}}
  %y = mega.transpose %x [1, 1, 2] : tensor<2x3x4xf32> -> tensor<3x3x4xf32>
  return %y : tensor<3x3x4xf32>
}

// -----

func.func @transpose_out_of_range(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{transpose permutation [-1, 0] is not a permutation of 0..1}}
  %y = mega.transpose %x [-1, 0] : tensor<2x3xf32> -> tensor<3x2xf32>
  return %y : tensor<3x2xf32>
}

// -----

func.func @slice_entries(%x: tensor<4x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{slice starts/limits/strides need 2 entries each for [4, 8]}}
  %y = mega.slice %x [0, 0] to [2, 8] step [1] : tensor<4x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @slice_stride(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{slice stride 0 on dim 1 must be >= 1}}
  %y = mega.slice %x [0, 0] to [4, 8] step [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @slice_limit_past_size(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{slice dim 1 needs 0 <= start (2) <= limit (10) <= size (8)}}
  %y = mega.slice %x [0, 2] to [4, 10] step [1, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @slice_start_past_limit(%x: tensor<4x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{slice dim 0 needs 0 <= start (3) <= limit (2) <= size (4)}}
  %y = mega.slice %x [3, 0] to [2, 8] step [1, 1] : tensor<4x8xf32> -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @slice_negative_start(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{slice dim 0 needs 0 <= start (-1) <= limit (3) <= size (4)}}
  %y = mega.slice %x [-1, 0] to [3, 8] step [1, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @slice_result(%x: tensor<10xf32>) -> tensor<4xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.slice' op inferred type(s) 'tensor<3xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  %y = mega.slice %x [1] to [10] step [3] : tensor<10xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @concat_axis(%a: tensor<2x3xf32>) -> tensor<2x6xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{concat axis 2 is out of range for [2, 3]}}
  %c = mega.concat %a, %a axis 2 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x6xf32>
  return %c : tensor<2x6xf32>
}

// -----

func.func @concat_rank(%a: tensor<2x3xf32>, %b: tensor<2x3x1xf32>) -> tensor<2x6xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{concat input 1 [2, 3, 1] has another rank than [2, 3]}}
  %c = mega.concat %a, %b axis 1 : (tensor<2x3xf32>, tensor<2x3x1xf32>) -> tensor<2x6xf32>
  return %c : tensor<2x6xf32>
}

// -----

func.func @concat_other_dim(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x6xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{concat input 1 [4, 3] differs from [2, 3] on dim 0, which is not the concat axis}}
  %c = mega.concat %a, %b axis 1 : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x6xf32>
  return %c : tensor<2x6xf32>
}

// -----

func.func @concat_element_types(%a: tensor<2x3xf32>, %b: tensor<2x3xf16>) -> tensor<2x6xf32> {
  // expected-error @+1 {{'mega.concat' op requires the same element type for all operands}}
  %c = mega.concat %a, %b axis 1 : (tensor<2x3xf32>, tensor<2x3xf16>) -> tensor<2x6xf32>
  return %c : tensor<2x6xf32>
}

// -----

func.func @concat_nothing() -> tensor<2xf32> {
  // expected-error @+1 {{'mega.concat' op expected 1 or more operands, but found 0}}
  %c = mega.concat axis 0 : () -> tensor<2xf32>
  return %c : tensor<2xf32>
}

// -----

func.func @broadcast_element_type(%x: tensor<4xf32>) -> tensor<2x4xf64> {
  // expected-error @+1 {{'mega.broadcast' op cannot change the element type; use mega.cast}}
  %y = mega.broadcast %x : tensor<4xf32> -> tensor<2x4xf64>
  return %y : tensor<2x4xf64>
}

// -----

func.func @broadcast_lower_rank(%x: tensor<2x4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.broadcast' op cannot broadcast [2, 4] to lower rank [4]}}
  %y = mega.broadcast %x : tensor<2x4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @broadcast_dim(%x: tensor<3x1xf32>) -> tensor<2x4x5xf32> {
  // expected-error @+1 {{'mega.broadcast' op cannot broadcast [3, 1] to [2, 4, 5] (dim 0 is 3, not 1 or 4)}}
  %y = mega.broadcast %x : tensor<3x1xf32> -> tensor<2x4x5xf32>
  return %y : tensor<2x4x5xf32>
}

// -----

func.func @cast_shape(%x: tensor<4x8xf32>) -> tensor<32xbf16> {
  // expected-error @+1 {{'mega.cast' op cannot change the shape ([4, 8] to [32]); use mega.reshape}}
  %y = mega.cast %x : tensor<4x8xf32> -> tensor<32xbf16>
  return %y : tensor<32xbf16>
}
