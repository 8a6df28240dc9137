// What each gradient rule (ir/GradientRules.cpp) builds, seen through mega-training-autodiff.
// Numbers are checked against finite differences in tests/unit/training/.
// RUN: megac-opt %s --mega-training-autodiff --split-input-file | FileCheck %s

// Binary elementwise ops, last first: max and min split ties evenly, pow differentiates both
// sides, div, mul, sub, add.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<3xf32> {mega.param = "x"}, %[[Y:[a-z0-9]+]]: tensor<3xf32> {mega.param = "y"}
// CHECK: %[[S:.*]] = mega.sub %[[A:.*]], %[[Y]]
// CHECK-NEXT: %[[M:.*]] = mega.mul %[[S]], %[[Y]]
// CHECK-NEXT: %[[D:.*]] = mega.div %[[M]], %[[Y]]
// CHECK-NEXT: %[[P:.*]] = mega.pow %[[D]], %[[Y]]
// CHECK-NEXT: %[[MN:.*]] = mega.min %[[P]], %[[Y]]
// CHECK-NEXT: %[[MX:.*]] = mega.max %[[MN]], %[[Y]]
// CHECK: %[[G:.*]] = mega.broadcast %{{.*}} : tensor<1xf32> -> tensor<3xf32>
// max: dmn = g * ([mn > y] + 0.5 [mn == y]), dy = g - dmn.
// CHECK-NEXT: %[[GT:.*]] = mega.compare gt %[[MN]], %[[Y]]
// CHECK-NEXT: %[[GTF:.*]] = mega.cast %[[GT]] : tensor<3xi1> -> tensor<3xf32>
// CHECK-NEXT: %[[EQ:.*]] = mega.compare eq %[[MN]], %[[Y]]
// CHECK-NEXT: %[[EQF:.*]] = mega.cast %[[EQ]]
// CHECK-NEXT: %[[HALF:.*]] = mega.constant dense<5.000000e-01> : tensor<3xf32>
// CHECK-NEXT: %[[TIE:.*]] = mega.mul %[[EQF]], %[[HALF]]
// CHECK-NEXT: %[[SHARE:.*]] = mega.add %[[GTF]], %[[TIE]]
// CHECK-NEXT: %[[DMN:.*]] = mega.mul %[[G]], %[[SHARE]]
// CHECK-NEXT: %[[DY1:.*]] = mega.sub %[[G]], %[[DMN]]
// min: the same with lt.
// CHECK-NEXT: mega.compare lt %[[P]], %[[Y]]
// CHECK: %[[DP:.*]] = mega.mul %[[DMN]], %{{.*}}
// CHECK-NEXT: %[[DY2:.*]] = mega.sub %[[DMN]], %[[DP]]
// CHECK-NEXT: %[[DY12:.*]] = mega.add %[[DY1]], %[[DY2]]
// pow: dd = dp * y * d^(y-1), dy = dp * p * log(d).
// CHECK-NEXT: %[[ONE:.*]] = mega.constant dense<1.000000e+00> : tensor<3xf32>
// CHECK-NEXT: %[[YM1:.*]] = mega.sub %[[Y]], %[[ONE]]
// CHECK-NEXT: %[[DPOW:.*]] = mega.pow %[[D]], %[[YM1]]
// CHECK-NEXT: %[[YDP:.*]] = mega.mul %[[Y]], %[[DPOW]]
// CHECK-NEXT: %[[DD:.*]] = mega.mul %[[DP]], %[[YDP]]
// CHECK-NEXT: %[[LOG:.*]] = mega.log %[[D]]
// CHECK-NEXT: %[[PLOG:.*]] = mega.mul %[[P]], %[[LOG]]
// CHECK-NEXT: %[[DY3:.*]] = mega.mul %[[DP]], %[[PLOG]]
// CHECK-NEXT: %[[DY123:.*]] = mega.add %[[DY12]], %[[DY3]]
// div: dm = dd / y, dy = -(dd * d) / y.
// CHECK-NEXT: %[[DM:.*]] = mega.div %[[DD]], %[[Y]]
// CHECK-NEXT: %[[DDD:.*]] = mega.mul %[[DD]], %[[D]]
// CHECK-NEXT: %[[Q:.*]] = mega.div %[[DDD]], %[[Y]]
// CHECK-NEXT: %[[DY4:.*]] = mega.neg %[[Q]]
// CHECK-NEXT: %[[DY1234:.*]] = mega.add %[[DY123]], %[[DY4]]
// mul: ds = dm * y, dy = dm * s.
// CHECK-NEXT: %[[DS:.*]] = mega.mul %[[DM]], %[[Y]]
// CHECK-NEXT: %[[DY5:.*]] = mega.mul %[[DM]], %[[S]]
// CHECK-NEXT: %[[DY15:.*]] = mega.add %[[DY1234]], %[[DY5]]
// sub: da = ds, dy = -ds; add: dx = dy = da.
// CHECK-NEXT: %[[DY6:.*]] = mega.neg %[[DS]]
// CHECK-NEXT: %[[DY16:.*]] = mega.add %[[DY15]], %[[DY6]]
// CHECK-NEXT: %[[DY17:.*]] = mega.add %[[DY16]], %[[DS]]
// CHECK-NEXT: %[[NX:.*]] = mega.add %{{.*}}, %[[DS]]
// CHECK-NEXT: %[[NY:.*]] = mega.add %{{.*}}, %[[DY17]]
// CHECK-NEXT: return %{{.*}}, %[[NX]], %[[NY]]
func.func @forward_backward(%x: tensor<3xf32> {mega.param = "x"}, %y: tensor<3xf32> {mega.param = "y"}) -> (tensor<f32> {mega.output = "loss"}) {
  %a = mega.add %x, %y : tensor<3xf32>
  %s = mega.sub %a, %y : tensor<3xf32>
  %m = mega.mul %s, %y : tensor<3xf32>
  %d = mega.div %m, %y : tensor<3xf32>
  %p = mega.pow %d, %y : tensor<3xf32>
  %mn = mega.min %p, %y : tensor<3xf32>
  %mx = mega.max %mn, %y : tensor<3xf32>
  %l = mega.reduce sum %mx over [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Unary elementwise ops, last first.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[NEG:.*]] = mega.neg %arg0
// CHECK-NEXT: %[[ABS:.*]] = mega.abs %[[NEG]]
// CHECK-NEXT: %[[EXP:.*]] = mega.exp %[[ABS]]
// CHECK-NEXT: %[[LOG:.*]] = mega.log %[[EXP]]
// CHECK-NEXT: %[[TANH:.*]] = mega.tanh %[[LOG]]
// CHECK-NEXT: %[[ERF:.*]] = mega.erf %[[TANH]]
// CHECK-NEXT: %[[SIG:.*]] = mega.sigmoid %[[ERF]]
// CHECK-NEXT: %[[RELU:.*]] = mega.relu %[[SIG]]
// CHECK-NEXT: %[[SQRT:.*]] = mega.sqrt %[[RELU]]
// CHECK-NEXT: %[[RSQRT:.*]] = mega.rsqrt %[[SQRT]]
// CHECK: %[[G:.*]] = mega.broadcast
// rsqrt: -0.5 g y^3.
// CHECK-NEXT: %[[Y2:.*]] = mega.mul %[[RSQRT]], %[[RSQRT]]
// CHECK-NEXT: %[[Y3:.*]] = mega.mul %[[RSQRT]], %[[Y2]]
// CHECK-NEXT: %[[MH:.*]] = mega.constant dense<-5.000000e-01>
// CHECK-NEXT: %[[GS:.*]] = mega.mul %[[G]], %[[MH]]
// CHECK-NEXT: %[[D9:.*]] = mega.mul %[[GS]], %[[Y3]]
// sqrt: 0.5 g / y.
// CHECK-NEXT: %[[H:.*]] = mega.constant dense<5.000000e-01>
// CHECK-NEXT: %[[D9H:.*]] = mega.mul %[[D9]], %[[H]]
// CHECK-NEXT: %[[D8:.*]] = mega.div %[[D9H]], %[[SQRT]]
// relu: g [x > 0].
// CHECK-NEXT: %[[Z:.*]] = mega.constant dense<0.000000e+00>
// CHECK-NEXT: %[[POS:.*]] = mega.compare gt %[[SIG]], %[[Z]]
// CHECK-NEXT: %[[POSF:.*]] = mega.cast %[[POS]]
// CHECK-NEXT: %[[D7:.*]] = mega.mul %[[D8]], %[[POSF]]
// sigmoid: g y (1 - y).
// CHECK-NEXT: %[[ONE:.*]] = mega.constant dense<1.000000e+00>
// CHECK-NEXT: %[[OMY:.*]] = mega.sub %[[ONE]], %[[SIG]]
// CHECK-NEXT: %[[YY:.*]] = mega.mul %[[SIG]], %[[OMY]]
// CHECK-NEXT: %[[D6:.*]] = mega.mul %[[D7]], %[[YY]]
// erf: 2/sqrt(pi) g exp(-x^2).
// CHECK-NEXT: %[[XX:.*]] = mega.mul %[[TANH]], %[[TANH]]
// CHECK-NEXT: %[[NXX:.*]] = mega.neg %[[XX]]
// CHECK-NEXT: %[[BELL:.*]] = mega.exp %[[NXX]]
// CHECK-NEXT: %[[C:.*]] = mega.constant dense<1.12837923>
// CHECK-NEXT: %[[GC:.*]] = mega.mul %[[D6]], %[[C]]
// CHECK-NEXT: %[[D5:.*]] = mega.mul %[[GC]], %[[BELL]]
// tanh: g (1 - y^2).
// CHECK-NEXT: %[[ONE2:.*]] = mega.constant dense<1.000000e+00>
// CHECK-NEXT: %[[T2:.*]] = mega.mul %[[TANH]], %[[TANH]]
// CHECK-NEXT: %[[OMT:.*]] = mega.sub %[[ONE2]], %[[T2]]
// CHECK-NEXT: %[[D4:.*]] = mega.mul %[[D5]], %[[OMT]]
// log: g / x; exp: g y.
// CHECK-NEXT: %[[D3:.*]] = mega.div %[[D4]], %[[EXP]]
// CHECK-NEXT: %[[D2:.*]] = mega.mul %[[D3]], %[[EXP]]
// abs: g ([x > 0] - [x < 0]); neg: -g.
// CHECK-NEXT: %[[Z2:.*]] = mega.constant dense<0.000000e+00>
// CHECK-NEXT: %[[P:.*]] = mega.compare gt %[[NEG]], %[[Z2]]
// CHECK-NEXT: %[[PF:.*]] = mega.cast %[[P]]
// CHECK-NEXT: %[[N:.*]] = mega.compare lt %[[NEG]], %[[Z2]]
// CHECK-NEXT: %[[NF:.*]] = mega.cast %[[N]]
// CHECK-NEXT: %[[SIGN:.*]] = mega.sub %[[PF]], %[[NF]]
// CHECK-NEXT: %[[D1:.*]] = mega.mul %[[D2]], %[[SIGN]]
// CHECK-NEXT: %[[D0:.*]] = mega.neg %[[D1]]
// CHECK-NEXT: %[[NEW:.*]] = mega.add %arg1, %[[D0]]
// CHECK-NEXT: return %{{.*}}, %[[NEW]]
func.func @forward_backward(%x: tensor<3xf32> {mega.param = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %0 = mega.neg %x : tensor<3xf32>
  %1 = mega.abs %0 : tensor<3xf32>
  %2 = mega.exp %1 : tensor<3xf32>
  %3 = mega.log %2 : tensor<3xf32>
  %4 = mega.tanh %3 : tensor<3xf32>
  %5 = mega.erf %4 : tensor<3xf32>
  %6 = mega.sigmoid %5 : tensor<3xf32>
  %7 = mega.relu %6 : tensor<3xf32>
  %8 = mega.sqrt %7 : tensor<3xf32>
  %9 = mega.rsqrt %8 : tensor<3xf32>
  %l = mega.reduce sum %9 over [0] : tensor<3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// matmul with a broadcast batch: dA = G B^T, dB = sum over the batch of A^T G.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[A:[a-z0-9]+]]: tensor<2x3x4xf32> {mega.param = "a"}, %[[B:[a-z0-9]+]]: tensor<4x5xf32> {mega.param = "b"}
// CHECK: %[[G:.*]] = mega.broadcast %{{.*}} : tensor<1x1x1xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT: %[[BT:.*]] = mega.transpose %[[B]] [1, 0] : tensor<4x5xf32> -> tensor<5x4xf32>
// CHECK-NEXT: %[[DA:.*]] = mega.matmul %[[G]], %[[BT]] : tensor<2x3x5xf32>, tensor<5x4xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[AT:.*]] = mega.transpose %[[A]] [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
// CHECK-NEXT: %[[P:.*]] = mega.matmul %[[AT]], %[[G]] : tensor<2x4x3xf32>, tensor<2x3x5xf32> -> tensor<2x4x5xf32>
// CHECK-NEXT: %[[DB:.*]] = mega.reduce sum %[[P]] over [0] : tensor<2x4x5xf32> -> tensor<4x5xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[DA]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DB]]
func.func @forward_backward(%a: tensor<2x3x4xf32> {mega.param = "a"}, %b: tensor<4x5xf32> {mega.param = "b"}) -> (tensor<f32> {mega.output = "loss"}) {
  %c = mega.matmul %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
  %l = mega.reduce sum %c over [0, 1, 2] : tensor<2x3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// reduce mean (scale by 1/count), reduce max (to the maxima, split among ties), transpose
// (inverse permutation), broadcast (sum over the broadcast dims, reshape back).
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[T:.*]] = mega.transpose %{{.*}} [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: %[[MAX:.*]] = mega.reduce max %[[T]] over [0, 2] : tensor<4x2x3xf32> -> tensor<2xf32>
// CHECK: %[[G:.*]] = mega.broadcast %{{.*}} : tensor<1xf32> -> tensor<2xf32>
// CHECK-NEXT: %[[INV:.*]] = mega.constant dense<5.000000e-01> : tensor<2xf32>
// CHECK-NEXT: %[[GM:.*]] = mega.mul %[[G]], %[[INV]]
// CHECK-NEXT: %[[R:.*]] = mega.reshape %[[GM]] : tensor<2xf32> -> tensor<1x2x1xf32>
// CHECK-NEXT: %[[GB:.*]] = mega.broadcast %[[R]] : tensor<1x2x1xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: %[[MR:.*]] = mega.reshape %[[MAX]] : tensor<2xf32> -> tensor<1x2x1xf32>
// CHECK-NEXT: %[[MB:.*]] = mega.broadcast %[[MR]] : tensor<1x2x1xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: %[[HIT:.*]] = mega.compare eq %[[T]], %[[MB]]
// CHECK-NEXT: %[[HITF:.*]] = mega.cast %[[HIT]]
// CHECK-NEXT: %[[TIES:.*]] = mega.reduce sum %[[HITF]] over [0, 2] keep_dims : tensor<4x2x3xf32> -> tensor<1x2x1xf32>
// CHECK-NEXT: %[[TB:.*]] = mega.broadcast %[[TIES]] : tensor<1x2x1xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT: %[[Q:.*]] = mega.div %[[GB]], %[[TB]]
// CHECK-NEXT: %[[DT:.*]] = mega.mul %[[Q]], %[[HITF]]
// CHECK-NEXT: %[[DBC:.*]] = mega.transpose %[[DT]] [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[S:.*]] = mega.reduce sum %[[DBC]] over [0, 2] : tensor<2x3x4xf32> -> tensor<3xf32>
// CHECK-NEXT: %[[DX:.*]] = mega.reshape %[[S]] : tensor<3xf32> -> tensor<3x1xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[DX]]
func.func @forward_backward(%x: tensor<3x1xf32> {mega.param = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %b = mega.broadcast %x : tensor<3x1xf32> -> tensor<2x3x4xf32>
  %t = mega.transpose %b [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %l = mega.reduce max %t over [0, 2] : tensor<4x2x3xf32> -> tensor<2xf32>
  %m = mega.reduce mean %l over [0] : tensor<2xf32> -> tensor<f32>
  return %m : tensor<f32>
}

// -----

// cast (back to the input's type), concat (a slice per input), strided slice (pad with the
// start before, the rest after, stride - 1 between).
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[ONE:.*]] = mega.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[ONE64:.*]] = mega.cast %[[ONE]] : tensor<f32> -> tensor<f64>
// CHECK: %[[G:.*]] = mega.broadcast %{{.*}} : tensor<1x1xf64> -> tensor<9x2xf64>
// CHECK-NEXT: %[[G32:.*]] = mega.cast %[[G]] : tensor<9x2xf64> -> tensor<9x2xf32>
// CHECK-NEXT: %[[GS:.*]] = mega.slice %[[G32]] [0, 0] to [3, 2] step [1, 1] : tensor<9x2xf32> -> tensor<3x2xf32>
// CHECK-NEXT: %[[GY:.*]] = mega.slice %[[G32]] [3, 0] to [9, 2] step [1, 1] : tensor<9x2xf32> -> tensor<6x2xf32>
// CHECK-NEXT: %[[GX:.*]] = mega.pad %[[GS]] low [1, 0] high [0, 1] interior [1, 2] : tensor<3x2xf32> -> tensor<6x5xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[GX]] : tensor<6x5xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[GY]] : tensor<6x2xf32>
func.func @forward_backward(%x: tensor<6x5xf32> {mega.param = "x"}, %y: tensor<6x2xf32> {mega.param = "y"}) -> (tensor<f32> {mega.output = "loss"}) {
  %s = mega.slice %x [1, 0] to [6, 5] step [2, 3] : tensor<6x5xf32> -> tensor<3x2xf32>
  %c = mega.concat %s, %y axis 0 : (tensor<3x2xf32>, tensor<6x2xf32>) -> tensor<9x2xf32>
  %h = mega.cast %c : tensor<9x2xf32> -> tensor<9x2xf64>
  %l = mega.reduce sum %h over [0, 1] : tensor<9x2xf64> -> tensor<f64>
  %r = mega.cast %l : tensor<f64> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// softmax (softmax_grad from the output) and gather on axis 0 of a rank-3 table
// (embedding_grad over rows flattened to [V, 6]; run-time ids in [-V, V) wrapped to [0, V)).
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[T:[a-z0-9]+]]: tensor<10x2x3xf32> {mega.param = "t"}, %[[IDS:[a-z0-9]+]]: tensor<4xi64>
// CHECK: %[[SM:.*]] = mega.softmax %{{.*}} axis -1 : tensor<4x2x3xf32>
// CHECK: %[[G:.*]] = mega.broadcast
// CHECK-NEXT: %[[DS:.*]] = mega.softmax_grad %[[G]], %[[SM]] axis -1 : tensor<4x2x3xf32>
// CHECK-NEXT: %[[R:.*]] = mega.reshape %[[DS]] : tensor<4x2x3xf32> -> tensor<4x6xf32>
// CHECK-NEXT: %[[ZERO:.*]] = mega.constant dense<0> : tensor<4xi64>
// CHECK-NEXT: %[[NEG:.*]] = mega.compare lt %[[IDS]], %[[ZERO]]
// CHECK-NEXT: %[[V:.*]] = mega.constant dense<10> : tensor<4xi64>
// CHECK-NEXT: %[[UP:.*]] = mega.add %[[IDS]], %[[V]] : tensor<4xi64>
// CHECK-NEXT: %[[ROWS:.*]] = mega.where %[[NEG]], %[[UP]], %[[IDS]]
// CHECK-NEXT: %[[E:.*]] = mega.embedding_grad %[[R]][%[[ROWS]]] : tensor<4x6xf32>, tensor<4xi64> -> tensor<10x6xf32>
// CHECK-NEXT: %[[DT:.*]] = mega.reshape %[[E]] : tensor<10x6xf32> -> tensor<10x2x3xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[DT]]
func.func @forward_backward(%t: tensor<10x2x3xf32> {mega.param = "t"}, %ids: tensor<4xi64> {mega.input = "ids"}) -> (tensor<f32> {mega.output = "loss"}) {
  %g = mega.gather %t[%ids] axis 0 : tensor<10x2x3xf32>, tensor<4xi64> -> tensor<4x2x3xf32>
  %sm = mega.softmax %g axis -1 : tensor<4x2x3xf32>
  %l = mega.reduce sum %sm over [0, 1, 2] : tensor<4x2x3xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// linear with bias, layer_norm, rms_norm, gelu and dropout (same seed and stream).
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3x4xf32> {mega.param = "x"}, %[[W:[a-z0-9]+]]: tensor<5x4xf32> {mega.param = "w"}, %{{.*}}: tensor<5xf32> {mega.param = "b"}, %[[GAMMA:[a-z0-9]+]]: tensor<5xf32> {mega.param = "g"}, %{{.*}}: tensor<5xf32> {mega.param = "beta"}, %[[R:[a-z0-9]+]]: tensor<5xf32> {mega.param = "r"}, %[[SEED:[a-z0-9]+]]: tensor<i64>
// CHECK: %[[Y:.*]] = mega.linear
// CHECK-NEXT: %[[N:.*]] = mega.layer_norm
// CHECK-NEXT: %[[M:.*]] = mega.rms_norm
// CHECK: %[[G:.*]] = mega.broadcast
// CHECK-NEXT: %[[DD:.*]] = mega.dropout %[[G]], %[[SEED]] ratio 1.000000e-01 stream 3
// CHECK-NEXT: %[[DE:.*]] = mega.gelu_grad none %[[DD]], %[[M]]
// CHECK-NEXT: %[[DN:.*]], %[[DR:.*]] = mega.rms_norm_grad %[[DE]], %[[N]], %[[R]] eps 9.9999999999999995E-7
// CHECK-NEXT: %[[DY:.*]], %[[DG:.*]], %[[DBETA:.*]] = mega.layer_norm_grad %[[DN]], %[[Y]], %[[GAMMA]] eps 1.000000e-05
// CHECK-NEXT: %[[WT:.*]] = mega.transpose %[[W]] [1, 0] : tensor<5x4xf32> -> tensor<4x5xf32>
// CHECK-NEXT: %[[DX:.*]] = mega.linear %[[DY]], %[[WT]] : (tensor<2x3x5xf32>, tensor<4x5xf32>) -> tensor<2x3x4xf32>
// CHECK-NEXT: %[[DY2:.*]] = mega.reshape %[[DY]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK-NEXT: %[[X2:.*]] = mega.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-NEXT: %[[DYT:.*]] = mega.transpose %[[DY2]] [1, 0] : tensor<6x5xf32> -> tensor<5x6xf32>
// CHECK-NEXT: %[[DW:.*]] = mega.matmul %[[DYT]], %[[X2]] : tensor<5x6xf32>, tensor<6x4xf32> -> tensor<5x4xf32>
// CHECK-NEXT: %[[DB:.*]] = mega.reduce sum %[[DY2]] over [0] : tensor<6x5xf32> -> tensor<5xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[DX]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DW]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DB]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DG]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DBETA]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DR]]
func.func @forward_backward(%x: tensor<2x3x4xf32> {mega.param = "x"}, %w: tensor<5x4xf32> {mega.param = "w"}, %b: tensor<5xf32> {mega.param = "b"}, %g: tensor<5xf32> {mega.param = "g"}, %beta: tensor<5xf32> {mega.param = "beta"}, %r: tensor<5xf32> {mega.param = "r"}, %seed: tensor<i64> {mega.input = "seed"}) -> (tensor<f32> {mega.output = "loss"}) {
  %y = mega.linear %x, %w, %b : (tensor<2x3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %n = mega.layer_norm %y, %g, %beta eps 1.0e-05 : (tensor<2x3x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %m = mega.rms_norm %n, %r eps 1.0e-06 : (tensor<2x3x5xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
  %e = mega.gelu none %m : tensor<2x3x5xf32>
  %d = mega.dropout %e, %seed ratio 1.0e-01 stream 3 : tensor<2x3x5xf32>, tensor<i64>
  %l = mega.reduce sum %d over [0, 1, 2] : tensor<2x3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention with a trainable mask (grouped-query: one key/value head), embedding and
// cross_entropy (ignore_index carried over); a slice of the heads in between.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<1x4x2x3xf32> {mega.param = "q"}, %[[K:[a-z0-9]+]]: tensor<1x4x1x3xf32> {mega.param = "k"}, %[[V:[a-z0-9]+]]: tensor<1x4x1x3xf32> {mega.param = "v"}, %[[MASK:[a-z0-9]+]]: tensor<1x2x4x4xf32> {mega.param = "bias"}, %{{.*}}: tensor<7x3xf32> {mega.param = "table"}, %[[IDS:[a-z0-9]+]]: tensor<1x4xi64> {mega.input = "ids"}, %[[LABELS:[a-z0-9]+]]: tensor<1x4xi64> {mega.input = "labels"}
// CHECK: %[[Z:.*]] = mega.add
// CHECK: %[[G:.*]] = mega.broadcast %{{.*}} : tensor<1x1xf32> -> tensor<1x4xf32>
// CHECK-NEXT: %[[DZ:.*]] = mega.cross_entropy_grad %[[G]], %[[Z]], %[[LABELS]] {ignore_index = -100 : i64}
// CHECK-NEXT: %[[DS:.*]] = mega.reshape %[[DZ]] : tensor<1x4x3xf32> -> tensor<1x4x1x3xf32>
// CHECK-NEXT: %[[DO:.*]] = mega.pad %[[DS]] low [0, 0, 0, 0] high [0, 0, 1, 0] interior [0, 0, 0, 0] : tensor<1x4x1x3xf32> -> tensor<1x4x2x3xf32>
// CHECK-NEXT: %[[DT:.*]] = mega.embedding_grad %[[DZ]][%[[IDS]]] : tensor<1x4x3xf32>, tensor<1x4xi64> -> tensor<7x3xf32>
// CHECK-NEXT: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]], %[[DM:.*]] = mega.attention_grad %[[DO]], %[[Q]], %[[K]], %[[V]] mask %[[MASK]] causal
// CHECK-NEXT: mega.add %{{.*}}, %[[DQ]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DK]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DV]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DM]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DT]]
func.func @forward_backward(%q: tensor<1x4x2x3xf32> {mega.param = "q"}, %k: tensor<1x4x1x3xf32> {mega.param = "k"}, %v: tensor<1x4x1x3xf32> {mega.param = "v"}, %bias: tensor<1x2x4x4xf32> {mega.param = "bias"}, %table: tensor<7x3xf32> {mega.param = "table"}, %ids: tensor<1x4xi64> {mega.input = "ids"}, %labels: tensor<1x4xi64> {mega.input = "labels"}) -> (tensor<f32> {mega.output = "loss"}) {
  %o = mega.attention %q, %k, %v mask %bias causal : (tensor<1x4x2x3xf32>, tensor<1x4x1x3xf32>, tensor<1x4x1x3xf32>, tensor<1x2x4x4xf32>) -> tensor<1x4x2x3xf32>
  %e = mega.embedding %table[%ids] : tensor<7x3xf32>, tensor<1x4xi64> -> tensor<1x4x3xf32>
  %s = mega.slice %o [0, 0, 0, 0] to [1, 4, 1, 3] step [1, 1, 1, 1] : tensor<1x4x2x3xf32> -> tensor<1x4x1x3xf32>
  %h = mega.reshape %s : tensor<1x4x1x3xf32> -> tensor<1x4x3xf32>
  %z = mega.add %h, %e : tensor<1x4x3xf32>
  %ce = mega.cross_entropy %z, %labels {ignore_index = -100 : i64} : tensor<1x4x3xf32>, tensor<1x4xi64> -> tensor<1x4xf32>
  %l = mega.reduce sum %ce over [0, 1] : tensor<1x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// silu: dx = g * ((s - y s) + y), s = sigmoid(x), y = silu(x). rope: dx = rope(g, cos, -swap(sin)),
// swap exchanging the halves of the last dim; the tables' gradients (constants here) are dropped.
// CHECK-LABEL: func.func @forward_backward(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3x4x6xf32> {mega.param = "x"}
// CHECK: %[[C:.*]] = mega.constant dense<5.000000e-01> : tensor<4x6xf32>
// CHECK-NEXT: %[[S:.*]] = mega.constant dense<2.500000e-01> : tensor<4x6xf32>
// CHECK-NEXT: %[[R:.*]] = mega.rope %[[X]], %[[C]], %[[S]]
// CHECK-NEXT: %[[Y:.*]] = mega.silu %[[R]]
// CHECK: %[[G:.*]] = mega.broadcast
// CHECK-NEXT: %[[SG:.*]] = mega.sigmoid %[[R]]
// CHECK-NEXT: %[[YS:.*]] = mega.mul %[[Y]], %[[SG]]
// CHECK-NEXT: %[[SMYS:.*]] = mega.sub %[[SG]], %[[YS]]
// CHECK-NEXT: %[[SLOPE:.*]] = mega.add %[[SMYS]], %[[Y]]
// CHECK-NEXT: %[[DR:.*]] = mega.mul %[[G]], %[[SLOPE]]
// CHECK-NEXT: %[[LO:.*]] = mega.slice %[[S]] [0, 0] to [4, 3] step [1, 1]
// CHECK-NEXT: %[[HI:.*]] = mega.slice %[[S]] [0, 3] to [4, 6] step [1, 1]
// CHECK-NEXT: %[[SW:.*]] = mega.concat %[[HI]], %[[LO]] axis 1
// CHECK-NEXT: %[[NS:.*]] = mega.neg %[[SW]]
// CHECK-NEXT: %[[DX:.*]] = mega.rope %[[DR]], %[[C]], %[[NS]]
// CHECK-NEXT: mega.add %{{.*}}, %[[DX]]
func.func @forward_backward(%x: tensor<2x3x4x6xf32> {mega.param = "x"}) -> (tensor<f32> {mega.output = "loss"}) {
  %c = mega.constant dense<0.5> : tensor<4x6xf32>
  %s = mega.constant dense<0.25> : tensor<4x6xf32>
  %y = mega.rope %x, %c, %s : (tensor<2x3x4x6xf32>, tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<2x3x4x6xf32>
  %z = mega.silu %y : tensor<2x3x4x6xf32>
  %l = mega.reduce sum %z over [0, 1, 2, 3] : tensor<2x3x4x6xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// gather on axis 1 (a constant pick out of a fused projection, as Falcon's q/k/v): the
// gradient moves the axis to the front, scatters with embedding_grad and moves it back.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[G:.*]] = mega.broadcast
// CHECK-NEXT: %[[T:.*]] = mega.transpose %[[G]] [1, 0] : tensor<3x2xf32> -> tensor<2x3xf32>
// CHECK-NEXT: %[[E:.*]] = mega.embedding_grad %[[T]][%{{.*}}] : tensor<2x3xf32>, tensor<2xi64> -> tensor<5x3xf32>
// CHECK-NEXT: %[[B:.*]] = mega.transpose %[[E]] [1, 0] : tensor<5x3xf32> -> tensor<3x5xf32>
// CHECK-NEXT: mega.add %{{.*}}, %[[B]] : tensor<3x5xf32>
func.func @forward_backward(%w: tensor<3x5xf32> {mega.param = "w"}) -> (tensor<f32> {mega.output = "loss"}) {
  %ids = mega.constant dense<[4, 1]> : tensor<2xi64>
  %g = mega.gather %w[%ids] axis 1 : tensor<3x5xf32>, tensor<2xi64> -> tensor<3x2xf32>
  %l = mega.reduce sum %g over [0, 1] : tensor<3x2xf32> -> tensor<f32>
  return %l : tensor<f32>
}
