// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Errors of mega.constant and the elementwise ops: the where verifier and the type constraints
// (static shapes, float-only and bool-only ops, same types).

func.func @where_shape(%m: tensor<8x1xi1>, %x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'mega.where' op condition shape [8, 1] differs from the value shape [8, 8]; broadcast it first}}
  %y = mega.where %m, %x, %x : tensor<8x1xi1>, tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

func.func @where_cond_not_bool(%m: tensor<8x8xf32>, %x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+1 {{'mega.where' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<8x8xf32>'}}
  %y = mega.where %m, %x, %x : tensor<8x8xf32>, tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

func.func @where_value_types(%m: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf64>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.where' op failed to verify that all of {true_value, false_value, result} have same type}}
  %r = "mega.where"(%m, %x, %y) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @dynamic_shape(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'mega.exp' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<?x4xf32>'}}
  %y = mega.exp %x : tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

func.func @unranked(%x: tensor<*xf32>) -> tensor<*xf32> {
  // expected-error @+1 {{custom op 'mega.neg' invalid kind of type specified: expected builtin.tensor, but found 'tensor<*xf32>'}}
  %y = mega.neg %x : tensor<*xf32>
  return %y : tensor<*xf32>
}

// -----

func.func @int_to_float_op(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{'mega.sqrt' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xi32>'}}
  %y = mega.sqrt %x : tensor<4xi32>
  return %y : tensor<4xi32>
}

// -----

func.func @int_pow(%x: tensor<4xi64>) -> tensor<4xi64> {
  // expected-error @+1 {{'mega.pow' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xi64>'}}
  %y = mega.pow %x, %x : tensor<4xi64>
  return %y : tensor<4xi64>
}

// -----

func.func @neg_bool(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'mega.neg' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float or 64-bit signless integer or 32-bit signless integer values, but got 'tensor<4xi1>'}}
  %y = mega.neg %x : tensor<4xi1>
  return %y : tensor<4xi1>
}

// -----

func.func @unsupported_element(%x: tensor<4xi8>) -> tensor<4xi8> {
  // expected-error @+1 {{'mega.add' op operand #0 must be statically shaped tensor of}}
  %y = mega.add %x, %x : tensor<4xi8>
  return %y : tensor<4xi8>
}

// -----

func.func @not_float(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.not' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %y = mega.not %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @binary_types_differ(%x: tensor<4xf32>, %y: tensor<4xf64>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.add' op requires the same type for all operands and results}}
  %z = "mega.add"(%x, %y) : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xf32>
  return %z : tensor<4xf32>
}

// -----

func.func @compare_types_differ(%x: tensor<4xf32>, %y: tensor<4xf64>) -> tensor<4xi1> {
  // expected-error @+1 {{'mega.compare' op requires all operands to have the same type}}
  %z = "mega.compare"(%x, %y) {predicate = 2 : i32} : (tensor<4xf32>, tensor<4xf64>) -> tensor<4xi1>
  return %z : tensor<4xi1>
}

// -----

func.func @compare_bool(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'mega.compare' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float or 64-bit signless integer or 32-bit signless integer values, but got 'tensor<4xi1>'}}
  %z = mega.compare eq %x, %x : tensor<4xi1>
  return %z : tensor<4xi1>
}

// -----

func.func @compare_result(%x: tensor<4xf32>) -> tensor<2x2xi1> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.compare' op inferred type(s) 'tensor<4xi1>' are incompatible with return type(s) of operation 'tensor<2x2xi1>'}}
  %z = "mega.compare"(%x, %x) {predicate = 0 : i32} : (tensor<4xf32>, tensor<4xf32>) -> tensor<2x2xi1>
  return %z : tensor<2x2xi1>
}

// -----

func.func @compare_predicate(%x: tensor<4xf32>) -> tensor<4xi1> {
  // expected-error @+1 {{custom op 'mega.compare' expected string or keyword containing one of the following enum values for attribute 'predicate' [eq, ne, lt, le, gt, ge]}}
  %z = mega.compare below %x, %x : tensor<4xf32>
  return %z : tensor<4xi1>
}

// -----

func.func @constant_not_tensor() {
  // expected-error @+1 {{'mega.constant' op result #0 must be statically shaped tensor of}}
  %c = mega.constant dense<1.0> : vector<2xf32>
  return
}

// -----

func.func @constant_no_value() {
  // expected-error @+1 {{'mega.constant' op requires attribute 'value'}}
  %c = "mega.constant"() : () -> tensor<2xf32>
  return
}
