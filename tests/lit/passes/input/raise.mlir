// mega-input-raise on the low-level IR the ONNX importer makes: each family of patterns, the
// forms torch.onnx.export produces, the trivial-op folds, the options, and near misses that
// must stay as they are. The pass emits no diagnostics (a pattern either matches or leaves the
// IR unchanged), so there are no expected-error cases.
// RUN: megac-opt %s --mega-input-raise --split-input-file | FileCheck %s
// RUN: megac-opt %s --mega-input-raise="attention=false gelu=false" --split-input-file | FileCheck %s --check-prefix=OFF

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32> {mega.input = "x"}, %[[W:.*]]: tensor<8xf32> {mega.param = "ln.weight"}, %[[B:.*]]: tensor<8xf32> {mega.param = "ln.bias"})
// CHECK-NEXT: %[[Y:.*]] = mega.layer_norm %[[X]], %[[W]], %[[B]] eps 9.9999997473787516E-6 : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @layer_norm(%x: tensor<2x4x8xf32> {mega.input = "x"}, %w: tensor<8xf32> {mega.param = "ln.weight"}, %b: tensor<8xf32> {mega.param = "ln.bias"}) -> tensor<2x4x8xf32> {
  %two = mega.constant dense<2.0> : tensor<2x4x8xf32>
  %eps = mega.constant dense<9.99999974E-6> : tensor<2x4x1xf32>
  %mean = mega.reduce mean %x over [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %meanb = mega.broadcast %mean : tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %d = mega.sub %x, %meanb : tensor<2x4x8xf32>
  %sq = mega.pow %d, %two : tensor<2x4x8xf32>
  %var = mega.reduce mean %sq over [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %ve = mega.add %var, %eps : tensor<2x4x1xf32>
  %std = mega.sqrt %ve : tensor<2x4x1xf32>
  %stdb = mega.broadcast %std : tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %n = mega.div %d, %stdb : tensor<2x4x8xf32>
  %wb = mega.broadcast %w : tensor<8xf32> -> tensor<2x4x8xf32>
  %scaled = mega.mul %n, %wb : tensor<2x4x8xf32>
  %bb = mega.broadcast %b : tensor<8xf32> -> tensor<2x4x8xf32>
  %y = mega.add %bb, %scaled : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Without weight and bias (elementwise_affine=False), and with the square as a product: the
// weight becomes a constant of ones.
// CHECK-LABEL: func.func @layer_norm_no_affine
// CHECK: %[[ONES:.*]] = mega.constant dense<1.000000e+00> : tensor<8xf32>
// CHECK-NEXT: mega.layer_norm %arg0, %[[ONES]] eps 9.999999960041972E-13
// CHECK-NOT: mega.reduce
func.func @layer_norm_no_affine(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %eps = mega.constant dense<1.0e-12> : tensor<4x1xf32>
  %mean = mega.reduce mean %x over [1] keep_dims : tensor<4x8xf32> -> tensor<4x1xf32>
  %meanb = mega.broadcast %mean : tensor<4x1xf32> -> tensor<4x8xf32>
  %d = mega.sub %x, %meanb : tensor<4x8xf32>
  %sq = mega.mul %d, %d : tensor<4x8xf32>
  %var = mega.reduce mean %sq over [1] keep_dims : tensor<4x8xf32> -> tensor<4x1xf32>
  %ve = mega.add %eps, %var : tensor<4x1xf32>
  %std = mega.sqrt %ve : tensor<4x1xf32>
  %stdb = mega.broadcast %std : tensor<4x1xf32> -> tensor<4x8xf32>
  %n = mega.div %d, %stdb : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// Statistics over a dim that is not the last are not a layer_norm.
// CHECK-LABEL: func.func @norm_over_first_dim
// CHECK-NOT: mega.layer_norm
func.func @norm_over_first_dim(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %eps = mega.constant dense<1.0e-5> : tensor<1x8xf32>
  %mean = mega.reduce mean %x over [0] keep_dims : tensor<4x8xf32> -> tensor<1x8xf32>
  %meanb = mega.broadcast %mean : tensor<1x8xf32> -> tensor<4x8xf32>
  %d = mega.sub %x, %meanb : tensor<4x8xf32>
  %sq = mega.mul %d, %d : tensor<4x8xf32>
  %var = mega.reduce mean %sq over [0] keep_dims : tensor<4x8xf32> -> tensor<1x8xf32>
  %ve = mega.add %var, %eps : tensor<1x8xf32>
  %std = mega.sqrt %ve : tensor<1x8xf32>
  %stdb = mega.broadcast %std : tensor<1x8xf32> -> tensor<4x8xf32>
  %n = mega.div %d, %stdb : tensor<4x8xf32>
  return %n : tensor<4x8xf32>
}

// -----

// torch's erf GELU: x * (erf(x / sqrt 2) + 1) * 0.5.
// CHECK-LABEL: func.func @gelu_erf
// CHECK-NEXT: %[[G:.*]] = mega.gelu none %arg0 : tensor<2x16xf32>
// CHECK-NEXT: return %[[G]]
// OFF-LABEL: func.func @gelu_erf
// OFF: mega.erf
func.func @gelu_erf(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %sqrt2 = mega.constant dense<1.41421354> : tensor<2x16xf32>
  %one = mega.constant dense<1.0> : tensor<2x16xf32>
  %half = mega.constant dense<0.5> : tensor<2x16xf32>
  %u = mega.div %x, %sqrt2 : tensor<2x16xf32>
  %e = mega.erf %u : tensor<2x16xf32>
  %a = mega.add %e, %one : tensor<2x16xf32>
  %m = mega.mul %x, %a : tensor<2x16xf32>
  %y = mega.mul %m, %half : tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// The HF form: (x * 0.5) * (1 + erf(x * (1 / sqrt 2))).
// CHECK-LABEL: func.func @gelu_erf_hf
// CHECK-NEXT: mega.gelu none %arg0
func.func @gelu_erf_hf(%x: tensor<16xf32>) -> tensor<16xf32> {
  %inv = mega.constant dense<0.707106769> : tensor<16xf32>
  %one = mega.constant dense<1.0> : tensor<16xf32>
  %half = mega.constant dense<0.5> : tensor<16xf32>
  %xh = mega.mul %x, %half : tensor<16xf32>
  %u = mega.mul %inv, %x : tensor<16xf32>
  %e = mega.erf %u : tensor<16xf32>
  %a = mega.add %one, %e : tensor<16xf32>
  %y = mega.mul %xh, %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// torch's tanh GELU: 0.5 * (x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * (x * (x * x)))))).
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-NEXT: mega.gelu tanh %arg0 : tensor<16xf32>
// CHECK-NOT: mega.tanh
func.func @gelu_tanh(%x: tensor<16xf32>) -> tensor<16xf32> {
  %beta = mega.constant dense<0.797884583> : tensor<16xf32>
  %kappa = mega.constant dense<4.471500e-02> : tensor<16xf32>
  %one = mega.constant dense<1.0> : tensor<16xf32>
  %half = mega.constant dense<0.5> : tensor<16xf32>
  %x2 = mega.mul %x, %x : tensor<16xf32>
  %x3 = mega.mul %x, %x2 : tensor<16xf32>
  %k = mega.mul %kappa, %x3 : tensor<16xf32>
  %s = mega.add %x, %k : tensor<16xf32>
  %inner = mega.mul %beta, %s : tensor<16xf32>
  %t = mega.tanh %inner : tensor<16xf32>
  %a = mega.add %one, %t : tensor<16xf32>
  %m = mega.mul %x, %a : tensor<16xf32>
  %y = mega.mul %half, %m : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// The HF gelu_new form with pow(x, 3).
// CHECK-LABEL: func.func @gelu_tanh_pow
// CHECK-NEXT: mega.gelu tanh %arg0
func.func @gelu_tanh_pow(%x: tensor<16xf32>) -> tensor<16xf32> {
  %beta = mega.constant dense<0.797884583> : tensor<16xf32>
  %kappa = mega.constant dense<4.471500e-02> : tensor<16xf32>
  %three = mega.constant dense<3.0> : tensor<16xf32>
  %one = mega.constant dense<1.0> : tensor<16xf32>
  %half = mega.constant dense<0.5> : tensor<16xf32>
  %x3 = mega.pow %x, %three : tensor<16xf32>
  %k = mega.mul %x3, %kappa : tensor<16xf32>
  %s = mega.add %k, %x : tensor<16xf32>
  %inner = mega.mul %s, %beta : tensor<16xf32>
  %t = mega.tanh %inner : tensor<16xf32>
  %a = mega.add %t, %one : tensor<16xf32>
  %xh = mega.mul %half, %x : tensor<16xf32>
  %y = mega.mul %xh, %a : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// A wrong constant (0.25 instead of 0.5) is not a GELU.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: mega.gelu
func.func @not_gelu(%x: tensor<16xf32>) -> tensor<16xf32> {
  %sqrt2 = mega.constant dense<1.41421354> : tensor<16xf32>
  %one = mega.constant dense<1.0> : tensor<16xf32>
  %q = mega.constant dense<0.25> : tensor<16xf32>
  %u = mega.div %x, %sqrt2 : tensor<16xf32>
  %e = mega.erf %u : tensor<16xf32>
  %a = mega.add %e, %one : tensor<16xf32>
  %m = mega.mul %x, %a : tensor<16xf32>
  %y = mega.mul %m, %q : tensor<16xf32>
  return %y : tensor<16xf32>
}

// -----

// do_constant_folding=True stores W^T [in, out]: linear(x, transpose(W)), the parameter kept.
// CHECK-LABEL: func.func @linear_folded
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x4x8xf32>, %[[WT:[^:]*]]: tensor<8x16xf32> {mega.param = "onnx::MatMul_7"}, %[[B:[^:]*]]: tensor<16xf32>
// CHECK-NEXT: %[[W:.*]] = mega.transpose %[[WT]] [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
// CHECK-NEXT: %[[Y:.*]] = mega.linear %[[X]], %[[W]], %[[B]] : (tensor<2x4x8xf32>, tensor<16x8xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear_folded(%x: tensor<2x4x8xf32>, %wt: tensor<8x16xf32> {mega.param = "onnx::MatMul_7"}, %b: tensor<16xf32> {mega.param = "fc.bias"}) -> tensor<2x4x16xf32> {
  %mm = mega.matmul %x, %wt : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %bb = mega.broadcast %b : tensor<16xf32> -> tensor<2x4x16xf32>
  %y = mega.add %bb, %mm : tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// do_constant_folding=False keeps MatMul(x, Transpose(W)) with W [out, in]: linear(x, W).
// CHECK-LABEL: func.func @linear_unfolded
// CHECK-NEXT: %[[Y:.*]] = mega.linear %arg0, %arg1 : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear_unfolded(%x: tensor<4x8xf32>, %w: tensor<16x8xf32> {mega.param = "head.weight"}) -> tensor<4x16xf32> {
  %t = mega.transpose %w [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %y = mega.matmul %x, %t : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// A matmul of two activations is not a linear.
// CHECK-LABEL: func.func @matmul_of_activations
// CHECK: mega.matmul
// CHECK-NOT: mega.linear
func.func @matmul_of_activations(%x: tensor<4x8xf32>, %w: tensor<8x16xf32> {mega.input = "w"}) -> tensor<4x16xf32> {
  %y = mega.matmul %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @embedding
// CHECK-NEXT: %[[E:.*]] = mega.embedding %arg1[%arg0] : tensor<32x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[E]]
func.func @embedding(%ids: tensor<2x4xi64> {mega.input = "ids"}, %wte: tensor<32x8xf32> {mega.param = "wte.weight"}) -> tensor<2x4x8xf32> {
  %e = mega.gather %wte[%ids] axis 0 : tensor<32x8xf32>, tensor<2x4xi64> -> tensor<2x4x8xf32>
  return %e : tensor<2x4x8xf32>
}

// -----

// A gather from a constant table stays a gather.
// CHECK-LABEL: func.func @gather_constant
// CHECK: mega.gather
func.func @gather_constant(%ids: tensor<3xi64>) -> tensor<3xi64> {
  %t = mega.constant dense<[5, 6, 7, 8]> : tensor<4xi64>
  %g = mega.gather %t[%ids] axis 0 : tensor<4xi64>, tensor<3xi64> -> tensor<3xi64>
  return %g : tensor<3xi64>
}

// -----

// nanoGPT's causal attention: masked_fill(bias == 0, -inf) is where(upper-triangle, -inf, s),
// with the heads transposed in and out; k^T is one transpose [0, 2, 3, 1].
// CHECK-LABEL: func.func @causal_attention
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x2x8xf32>, %[[K:[^:]*]]: tensor<2x4x2x8xf32>, %[[V:[^:]*]]: tensor<2x4x2x8xf32>)
// CHECK-NEXT: %[[O:.*]] = mega.attention %[[Q]], %[[K]], %[[V]] causal : (tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>) -> tensor<2x4x2x8xf32>
// CHECK-NEXT: return %[[O]]
// OFF-LABEL: func.func @causal_attention
// OFF: mega.softmax
func.func @causal_attention(%q: tensor<2x4x2x8xf32>, %k: tensor<2x4x2x8xf32>, %v: tensor<2x4x2x8xf32>) -> tensor<2x4x2x8xf32> {
  %upper = mega.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %scale = mega.constant dense<0.353553385> : tensor<2x2x4x4xf32>
  %ninf = mega.constant dense<0xFF800000> : tensor<2x2x4x4xf32>
  %qh = mega.transpose %q [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %kt = mega.transpose %k [0, 2, 3, 1] : tensor<2x4x2x8xf32> -> tensor<2x2x8x4xf32>
  %vh = mega.transpose %v [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %s = mega.matmul %qh, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %ss = mega.mul %s, %scale : tensor<2x2x4x4xf32>
  %mask = mega.broadcast %upper : tensor<1x1x4x4xi1> -> tensor<2x2x4x4xi1>
  %m = mega.where %mask, %ninf, %ss : tensor<2x2x4x4xi1>, tensor<2x2x4x4xf32>
  %p = mega.softmax %m axis -1 : tensor<2x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  %ot = mega.transpose %o [0, 2, 1, 3] : tensor<2x2x4x8xf32> -> tensor<2x4x2x8xf32>
  return %ot : tensor<2x4x2x8xf32>
}

// -----

// BERT: scores / sqrt(d) + additive padding mask [b, 1, 1, t]; k^T as two transposes.
// CHECK-LABEL: func.func @masked_attention
// CHECK-SAME: %[[M:[^:]*]]: tensor<2x1x1x4xf32>)
// CHECK-NEXT: %[[O:.*]] = mega.attention %arg0, %arg1, %arg2 mask %[[M]] : (tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x4x2x8xf32>, tensor<2x1x1x4xf32>) -> tensor<2x4x2x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @masked_attention(%q: tensor<2x4x2x8xf32>, %k: tensor<2x4x2x8xf32>, %v: tensor<2x4x2x8xf32>, %mask: tensor<2x1x1x4xf32>) -> tensor<2x4x2x8xf32> {
  %sqrtd = mega.constant dense<2.82842708> : tensor<2x2x4x4xf32>
  %qh = mega.transpose %q [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %kh = mega.transpose %k [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %kt = mega.transpose %kh [0, 1, 3, 2] : tensor<2x2x4x8xf32> -> tensor<2x2x8x4xf32>
  %vh = mega.transpose %v [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %s = mega.matmul %qh, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %ss = mega.div %s, %sqrtd : tensor<2x2x4x4xf32>
  %mb = mega.broadcast %mask : tensor<2x1x1x4xf32> -> tensor<2x2x4x4xf32>
  %m = mega.add %ss, %mb : tensor<2x2x4x4xf32>
  %p = mega.softmax %m axis 3 : tensor<2x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  %ot = mega.transpose %o [0, 2, 1, 3] : tensor<2x2x4x8xf32> -> tensor<2x4x2x8xf32>
  return %ot : tensor<2x4x2x8xf32>
}

// -----

// Falcon's multi-query attention: one key/value head broadcast over the query heads by the
// matmuls; mega.attention takes it as it is (hk = 1).
// CHECK-LABEL: func.func @multi_query_attention
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x4x2x8xf32>, %[[K:[^:]*]]: tensor<2x4x1x8xf32>, %[[V:[^:]*]]: tensor<2x4x1x8xf32>)
// CHECK-NEXT: %[[O:.*]] = mega.attention %[[Q]], %[[K]], %[[V]] causal : (tensor<2x4x2x8xf32>, tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>) -> tensor<2x4x2x8xf32>
// CHECK-NEXT: return %[[O]]
func.func @multi_query_attention(%q: tensor<2x4x2x8xf32>, %k: tensor<2x4x1x8xf32>, %v: tensor<2x4x1x8xf32>) -> tensor<2x4x2x8xf32> {
  %upper = mega.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %sqrtd = mega.constant dense<2.82842708> : tensor<2x2x4x4xf32>
  %ninf = mega.constant dense<0xFF800000> : tensor<2x2x4x4xf32>
  %qh = mega.transpose %q [0, 2, 1, 3] : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %kt = mega.transpose %k [0, 2, 3, 1] : tensor<2x4x1x8xf32> -> tensor<2x1x8x4xf32>
  %vh = mega.transpose %v [0, 2, 1, 3] : tensor<2x4x1x8xf32> -> tensor<2x1x4x8xf32>
  %s = mega.matmul %qh, %kt : tensor<2x2x4x8xf32>, tensor<2x1x8x4xf32> -> tensor<2x2x4x4xf32>
  %ss = mega.div %s, %sqrtd : tensor<2x2x4x4xf32>
  %mask = mega.broadcast %upper : tensor<1x1x4x4xi1> -> tensor<2x2x4x4xi1>
  %m = mega.where %mask, %ninf, %ss : tensor<2x2x4x4xi1>, tensor<2x2x4x4xf32>
  %p = mega.softmax %m axis -1 : tensor<2x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<2x2x4x4xf32>, tensor<2x1x4x8xf32> -> tensor<2x2x4x8xf32>
  %ot = mega.transpose %o [0, 2, 1, 3] : tensor<2x2x4x8xf32> -> tensor<2x4x2x8xf32>
  return %ot : tensor<2x4x2x8xf32>
}

// -----

// GPT-NeoX's baddbmm: the scores over [b*h, s, t] from reshaped q and k, scaled, plus a zero
// bias, reshaped back to [b, h, s, t]; lifted to rank 4 and raised (causal where-mask).
// CHECK-LABEL: func.func @batched_scores_attention
// CHECK-SAME: (%[[Q:[^:]*]]: tensor<2x2x4x8xf32>, %[[K:[^:]*]]: tensor<2x2x4x8xf32>, %[[V:[^:]*]]: tensor<2x2x4x8xf32>)
// CHECK-DAG: %[[QT:.*]] = mega.transpose %[[Q]] [0, 2, 1, 3]
// CHECK-DAG: %[[KT:.*]] = mega.transpose %[[K]] [0, 2, 1, 3]
// CHECK-DAG: %[[VT:.*]] = mega.transpose %[[V]] [0, 2, 1, 3]
// CHECK: mega.attention %[[QT]], %[[KT]], %[[VT]] causal :
// CHECK-NOT: mega.softmax
func.func @batched_scores_attention(%qh: tensor<2x2x4x8xf32>, %kh: tensor<2x2x4x8xf32>, %vh: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %keep = mega.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %scale = mega.constant dense<0.353553385> : tensor<4x4x4xf32>
  %zero = mega.constant dense<0.0> : tensor<4x4x4xf32>
  %min = mega.constant dense<-3.40282347E+38> : tensor<2x2x4x4xf32>
  %q3 = mega.reshape %qh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %k3 = mega.reshape %kh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %kt = mega.transpose %k3 [0, 2, 1] : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %s = mega.matmul %q3, %kt : tensor<4x4x8xf32>, tensor<4x8x4xf32> -> tensor<4x4x4xf32>
  %ss = mega.mul %s, %scale : tensor<4x4x4xf32>
  %sb = mega.add %ss, %zero : tensor<4x4x4xf32>
  %s4 = mega.reshape %sb : tensor<4x4x4xf32> -> tensor<2x2x4x4xf32>
  %mask = mega.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x2x4x4xi1>
  %m = mega.where %mask, %s4, %min : tensor<2x2x4x4xi1>, tensor<2x2x4x4xf32>
  %p = mega.softmax %m axis 3 : tensor<2x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// BLOOM: baddbmm(alibi [b*h, 1, t], q, k^T, alpha) over [b*h, s, t], reshaped to [b, h, s, t],
// plus an additive causal mask, softmax, then bmm with v over [b*h, s, d]: both matmuls lifted
// to rank 4, the ALiBi bias and the mask summed into one [b, h, s, t] attention mask.
// CHECK-LABEL: func.func @alibi_attention
// CHECK: %[[B:.*]] = mega.broadcast %{{.*}} : tensor<2x2x1x4xf32> -> tensor<2x2x4x4xf32>
// CHECK: %[[M:.*]] = mega.broadcast %{{.*}} : tensor<2x1x4x4xf32> -> tensor<2x2x4x4xf32>
// CHECK: %[[SUM:.*]] = mega.add %[[B]], %[[M]] : tensor<2x2x4x4xf32>
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[SUM]] :
// CHECK-NOT: mega.softmax
func.func @alibi_attention(%qh: tensor<2x2x4x8xf32>, %kh: tensor<2x2x4x8xf32>, %vh: tensor<2x2x4x8xf32>, %alibi: tensor<4x1x4xf32>, %causal: tensor<2x1x4x4xf32>) -> tensor<2x2x4x8xf32> {
  %scale = mega.constant dense<0.353553385> : tensor<4x4x4xf32>
  %q3 = mega.reshape %qh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %k3 = mega.reshape %kh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %v3 = mega.reshape %vh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %kt = mega.transpose %k3 [0, 2, 1] : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %s = mega.matmul %q3, %kt : tensor<4x4x8xf32>, tensor<4x8x4xf32> -> tensor<4x4x4xf32>
  %ss = mega.mul %s, %scale : tensor<4x4x4xf32>
  %ab = mega.broadcast %alibi : tensor<4x1x4xf32> -> tensor<4x4x4xf32>
  %sb = mega.add %ss, %ab : tensor<4x4x4xf32>
  %s4 = mega.reshape %sb : tensor<4x4x4xf32> -> tensor<2x2x4x4xf32>
  %cb = mega.broadcast %causal : tensor<2x1x4x4xf32> -> tensor<2x2x4x4xf32>
  %m = mega.add %s4, %cb : tensor<2x2x4x4xf32>
  %p = mega.softmax %m axis 3 : tensor<2x2x4x4xf32>
  %p3 = mega.reshape %p : tensor<2x2x4x4xf32> -> tensor<4x4x4xf32>
  %o3 = mega.matmul %p3, %v3 : tensor<4x4x4xf32>, tensor<4x4x8xf32> -> tensor<4x4x8xf32>
  %o = mega.reshape %o3 : tensor<4x4x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// OPT: q scaled before the q.k matmul (scale 1 here), an additive causal mask, the clamp
// max(scores, finfo.min), then softmax and bmm over [b*h, s, t]: lifted to rank 4 and raised.
// CHECK-LABEL: func.func @clamped_batched_softmax_attention
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %arg3 {scale = 1.000000e+00 : f64}
// CHECK-NOT: mega.softmax
// CHECK-NOT: mega.max
func.func @clamped_batched_softmax_attention(%qh: tensor<2x2x4x8xf32>, %kt: tensor<2x2x8x4xf32>, %vh: tensor<2x2x4x8xf32>, %causal: tensor<2x1x4x4xf32>) -> tensor<2x2x4x8xf32> {
  %min = mega.constant dense<-3.40282347E+38> : tensor<2x2x4x4xf32>
  %s = mega.matmul %qh, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %cb = mega.broadcast %causal : tensor<2x1x4x4xf32> -> tensor<2x2x4x4xf32>
  %m = mega.add %s, %cb : tensor<2x2x4x4xf32>
  %c = mega.max %m, %min : tensor<2x2x4x4xf32>
  %c3 = mega.reshape %c : tensor<2x2x4x4xf32> -> tensor<4x4x4xf32>
  %p = mega.softmax %c3 axis 2 : tensor<4x4x4xf32>
  %v3 = mega.reshape %vh : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %o3 = mega.matmul %p, %v3 : tensor<4x4x4xf32>, tensor<4x4x8xf32> -> tensor<4x4x8xf32>
  %o = mega.reshape %o3 : tensor<4x4x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// GPT-J: the causal where-mask first, then the division by sqrt(d), which scales the fill too
// (still a mask value).
// CHECK-LABEL: func.func @scaled_after_where_attention
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} causal :
// CHECK-NOT: mega.softmax
func.func @scaled_after_where_attention(%qh: tensor<2x2x4x8xf32>, %kt: tensor<2x2x8x4xf32>, %vh: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %keep = mega.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %min = mega.constant dense<-3.40282347E+38> : tensor<2x2x4x4xf32>
  %sqrtd = mega.constant dense<2.82842708> : tensor<2x2x4x4xf32>
  %s = mega.matmul %qh, %kt : tensor<2x2x4x8xf32>, tensor<2x2x8x4xf32> -> tensor<2x2x4x4xf32>
  %mask = mega.broadcast %keep : tensor<1x1x4x4xi1> -> tensor<2x2x4x4xi1>
  %m = mega.where %mask, %s, %min : tensor<2x2x4x4xi1>, tensor<2x2x4x4xf32>
  %ms = mega.div %m, %sqrtd : tensor<2x2x4x4xf32>
  %p = mega.softmax %ms axis -1 : tensor<2x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32> -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// T5: no scaling (scale 1), a position bias [1, h, s, t] added; the [b, h, s, d] result is
// used as it is, so the attention's [b, s, h, d] result is transposed back.
// CHECK-LABEL: func.func @unscaled_attention_with_bias
// CHECK: %[[O:.*]] = mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %arg3 {scale = 1.000000e+00 : f64}
// CHECK-NEXT: %[[T:.*]] = mega.transpose %[[O]] [0, 2, 1, 3] : tensor<1x4x2x8xf32> -> tensor<1x2x4x8xf32>
// CHECK-NEXT: return %[[T]]
func.func @unscaled_attention_with_bias(%qh: tensor<1x2x4x8xf32>, %kh: tensor<1x2x4x8xf32>, %vh: tensor<1x2x4x8xf32>, %bias: tensor<1x2x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %kt = mega.transpose %kh [0, 1, 3, 2] : tensor<1x2x4x8xf32> -> tensor<1x2x8x4xf32>
  %s = mega.matmul %qh, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %m = mega.add %s, %bias : tensor<1x2x4x4xf32>
  %p = mega.softmax %m axis -1 : tensor<1x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A where-mask that is not causal becomes an additive mask (keep ? 0 : fill).
// CHECK-LABEL: func.func @where_padding_mask
// CHECK: %[[Z:.*]] = mega.constant dense<0.000000e+00> : tensor<1x1x1x4xf32>
// CHECK: %[[F:.*]] = mega.constant dense<-1.000000e+09> : tensor<1x1x1x4xf32>
// CHECK: %[[A:.*]] = mega.where %arg3, %[[Z]], %[[F]] : tensor<1x1x1x4xi1>, tensor<1x1x1x4xf32>
// CHECK: mega.attention %{{.*}}, %{{.*}}, %{{.*}} mask %[[A]] {scale = 1.000000e+00 : f64}
func.func @where_padding_mask(%qh: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %vh: tensor<1x2x4x8xf32>, %keep: tensor<1x1x1x4xi1>) -> tensor<1x2x4x8xf32> {
  %fill = mega.constant dense<-1.0e9> : tensor<1x2x4x4xf32>
  %s = mega.matmul %qh, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %kb = mega.broadcast %keep : tensor<1x1x1x4xi1> -> tensor<1x2x4x4xi1>
  %m = mega.where %kb, %s, %fill : tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>
  %p = mega.softmax %m axis -1 : tensor<1x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Softmax over another dim, or a where with a mild fill, is not attention.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: mega.attention
func.func @not_attention(%qh: tensor<1x2x4x8xf32>, %kt: tensor<1x2x8x4xf32>, %vh: tensor<1x2x4x8xf32>, %keep: tensor<1x2x4x4xi1>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) {
  %fill = mega.constant dense<-1.0> : tensor<1x2x4x4xf32>
  %s = mega.matmul %qh, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %m = mega.where %keep, %s, %fill : tensor<1x2x4x4xi1>, tensor<1x2x4x4xf32>
  %p = mega.softmax %m axis -1 : tensor<1x2x4x4xf32>
  %o = mega.matmul %p, %vh : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %s2 = mega.matmul %qh, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %p2 = mega.softmax %s2 axis 2 : tensor<1x2x4x4xf32>
  %o2 = mega.matmul %p2, %vh : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o, %o2 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>
}

// -----

// Trivial ops: same-shape broadcast and reshape, identity transpose, chains.
// CHECK-LABEL: func.func @trivial
// CHECK-NEXT: %[[R:.*]] = mega.reshape %arg0 : tensor<2x3x4xf32> -> tensor<24xf32>
// CHECK-NEXT: %[[B:.*]] = mega.broadcast %arg1 : tensor<4xf32> -> tensor<5x2x3x4xf32>
// CHECK-NEXT: %[[T:.*]] = mega.transpose %arg0 [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: return %arg0, %[[R]], %[[B]], %[[T]], %arg0
func.func @trivial(%x: tensor<2x3x4xf32>, %b: tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<24xf32>, tensor<5x2x3x4xf32>, tensor<4x2x3xf32>, tensor<2x3x4xf32>) {
  %0 = mega.broadcast %x : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %1 = mega.reshape %0 : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %2 = mega.transpose %1 [0, 1, 2] : tensor<2x3x4xf32> -> tensor<2x3x4xf32>
  %3 = mega.reshape %x : tensor<2x3x4xf32> -> tensor<6x4xf32>
  %4 = mega.reshape %3 : tensor<6x4xf32> -> tensor<24xf32>
  %5 = mega.broadcast %b : tensor<4xf32> -> tensor<3x4xf32>
  %6 = mega.broadcast %5 : tensor<3x4xf32> -> tensor<5x2x3x4xf32>
  %7 = mega.transpose %x [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %8 = mega.transpose %7 [2, 1, 0] : tensor<3x2x4xf32> -> tensor<4x2x3xf32>
  %9 = mega.transpose %7 [1, 0, 2] : tensor<3x2x4xf32> -> tensor<2x3x4xf32>
  return %2, %4, %6, %8, %9 : tensor<2x3x4xf32>, tensor<24xf32>, tensor<5x2x3x4xf32>, tensor<4x2x3xf32>, tensor<2x3x4xf32>
}

// -----

// T5's norm: x * (1 / sqrt(mean(x^2) + eps)), then the weight.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT: %[[Y:.*]] = mega.rms_norm %arg0, %arg1 eps 9.9999999747524271E-7 : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm(%x: tensor<2x4x8xf32>, %w: tensor<8xf32> {mega.param = "ln.weight"}) -> tensor<2x4x8xf32> {
  %two = mega.constant dense<2.0> : tensor<2x4x8xf32>
  %eps = mega.constant dense<1.0e-6> : tensor<2x4x1xf32>
  %one = mega.constant dense<1.0> : tensor<2x4x1xf32>
  %sq = mega.pow %x, %two : tensor<2x4x8xf32>
  %var = mega.reduce mean %sq over [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %ve = mega.add %var, %eps : tensor<2x4x1xf32>
  %std = mega.sqrt %ve : tensor<2x4x1xf32>
  %inv = mega.div %one, %std : tensor<2x4x1xf32>
  %invb = mega.broadcast %inv : tensor<2x4x1xf32> -> tensor<2x4x8xf32>
  %n = mega.mul %x, %invb : tensor<2x4x8xf32>
  %wb = mega.broadcast %w : tensor<8xf32> -> tensor<2x4x8xf32>
  %y = mega.mul %wb, %n : tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}
