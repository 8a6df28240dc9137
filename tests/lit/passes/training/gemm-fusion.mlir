// mega-training-gemm-fusion: transposes feeding GEMMs become layout flags, weight-gradient GEMMs
// accumulate into their gradient accumulator, and what must stay stays.
// RUN: megac-opt %s --mega-training-gemm-fusion --split-input-file | FileCheck %s

// The linear's backward: dx = linear(g, transpose(w)) is matmul(g, w); dW = transpose(g2) x2
// reads g2 transposed and accumulates into grad.w; the bias's reduce keeps its add.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: %[[G:[^:]*]]: tensor<2x4x3xf32>
// CHECK-SAME: %[[X:[^:]*]]: tensor<8x5xf32>
// CHECK-SAME: %[[W:[^:]*]]: tensor<3x5xf32>
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<3x5xf32> {mega.state = "grad.w"}
// CHECK-SAME: %[[ACCB:[^:]*]]: tensor<3xf32> {mega.state = "grad.b"}
// CHECK-NOT: mega.transpose
// CHECK: %[[DX:.*]] = mega.matmul %[[G]], %[[W]] : tensor<2x4x3xf32>, tensor<3x5xf32> -> tensor<2x4x5xf32>
// CHECK: %[[G2:.*]] = mega.reshape %[[G]]
// CHECK-NOT: mega.transpose
// CHECK-NEXT: %[[DW:.*]] = mega.matmul %[[G2]], %[[X]] accumulate %[[ACC]] {transpose_lhs = true} : tensor<8x3xf32>, tensor<8x5xf32>, tensor<3x5xf32> -> tensor<3x5xf32>
// CHECK-NEXT: %[[DB:.*]] = mega.reduce sum %[[G2]]
// CHECK-NEXT: %[[NB:.*]] = mega.add %[[ACCB]], %[[DB]]
// CHECK: return %[[DX]], %[[DW]], %[[NB]]
func.func @forward_backward(%g: tensor<2x4x3xf32> {mega.input = "g"},
    %x: tensor<8x5xf32> {mega.input = "x"}, %w: tensor<3x5xf32> {mega.param = "w"},
    %acc: tensor<3x5xf32> {mega.state = "grad.w"}, %accb: tensor<3xf32> {mega.state = "grad.b"})
    -> (tensor<2x4x5xf32> {mega.output = "dx"}, tensor<3x5xf32> {mega.updates = "grad.w"},
        tensor<3xf32> {mega.updates = "grad.b"}) {
  %wt = mega.transpose %w [1, 0] : tensor<3x5xf32> -> tensor<5x3xf32>
  %dx = mega.linear %g, %wt : (tensor<2x4x3xf32>, tensor<5x3xf32>) -> tensor<2x4x5xf32>
  %g2 = mega.reshape %g : tensor<2x4x3xf32> -> tensor<8x3xf32>
  %gt = mega.transpose %g2 [1, 0] : tensor<8x3xf32> -> tensor<3x8xf32>
  %dw = mega.matmul %gt, %x : tensor<3x8xf32>, tensor<8x5xf32> -> tensor<3x5xf32>
  %db = mega.reduce sum %g2 over [0] : tensor<8x3xf32> -> tensor<3xf32>
  %nw = mega.add %acc, %dw : tensor<3x5xf32>
  %nb = mega.add %accb, %db : tensor<3xf32>
  return %dx, %nw, %nb : tensor<2x4x5xf32>, tensor<3x5xf32>, tensor<3xf32>
}

// -----

// Batched transposes of the last two dims (attention-style products) fold on either side, a
// transpose of a transpose toggles back, and a transpose with another user stays for it.
// CHECK-LABEL: func.func @batched
// CHECK-SAME: %[[A:[^:]*]]: tensor<2x4x3xf32>, %[[B:[^:]*]]: tensor<2x5x4xf32>
// CHECK: %[[BT:.*]] = mega.transpose %[[B]] [0, 2, 1]
// CHECK: %[[P:.*]] = mega.matmul %[[A]], %[[B]] {transpose_lhs = true, transpose_rhs = true} : tensor<2x4x3xf32>, tensor<2x5x4xf32> -> tensor<2x3x5xf32>
// CHECK: %[[Q:.*]] = mega.matmul %[[A]], %[[A]] {transpose_lhs = true} : tensor<2x4x3xf32>, tensor<2x4x3xf32> -> tensor<2x3x3xf32>
// CHECK: return %[[P]], %[[Q]], %[[BT]]
func.func @batched(%a: tensor<2x4x3xf32>, %b: tensor<2x5x4xf32>)
    -> (tensor<2x3x5xf32>, tensor<2x3x3xf32>, tensor<2x4x5xf32>) {
  %at = mega.transpose %a [0, 2, 1] : tensor<2x4x3xf32> -> tensor<2x3x4xf32>
  %bt = mega.transpose %b [0, 2, 1] : tensor<2x5x4xf32> -> tensor<2x4x5xf32>
  %p = mega.matmul %at, %bt : tensor<2x3x4xf32>, tensor<2x4x5xf32> -> tensor<2x3x5xf32>
  %att = mega.transpose %at [0, 2, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  %q = mega.matmul %at, %att : tensor<2x3x4xf32>, tensor<2x4x3xf32> -> tensor<2x3x3xf32>
  return %p, %q, %bt : tensor<2x3x5xf32>, tensor<2x3x3xf32>, tensor<2x4x5xf32>
}

// -----

// A permutation that is not a swap of the last two dims stays a transpose; so does a linear's
// transposed weight when the linear has a bias.
// CHECK-LABEL: func.func @kept
// CHECK: mega.transpose %{{.*}} [1, 0, 2]
// CHECK: mega.matmul %{{.*}}, %{{.*}} : tensor<3x2x4xf32>, tensor<4x5xf32> -> tensor<3x2x5xf32>
// CHECK: mega.transpose %{{.*}} [1, 0] : tensor<5x4xf32> -> tensor<4x5xf32>
// CHECK: mega.linear
func.func @kept(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>, %w: tensor<5x4xf32>,
    %bias: tensor<4xf32>, %x: tensor<2x5xf32>) -> (tensor<3x2x5xf32>, tensor<2x4xf32>) {
  %at = mega.transpose %a [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %p = mega.matmul %at, %b : tensor<3x2x4xf32>, tensor<4x5xf32> -> tensor<3x2x5xf32>
  %wt = mega.transpose %w [1, 0] : tensor<5x4xf32> -> tensor<4x5xf32>
  %y = mega.linear %x, %wt, %bias : (tensor<2x5xf32>, tensor<4x5xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %p, %y : tensor<3x2x5xf32>, tensor<2x4xf32>
}

// -----

// A tied weight: the embedding's scatter and the head's GEMM both reach grad.wte. The GEMM
// accumulates into acc + scatter.
// CHECK-LABEL: func.func @tied
// CHECK-SAME: %[[E:[^:]*]]: tensor<6x4xf32>
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<6x4xf32> {mega.state = "grad.wte"}
// CHECK: %[[PART:.*]] = mega.add %[[ACC]], %[[E]] : tensor<6x4xf32>
// CHECK: %[[NEW:.*]] = mega.matmul %{{.*}}, %{{.*}} accumulate %[[PART]] {transpose_lhs = true}
// CHECK-NOT: mega.add
// CHECK: return %[[NEW]]
func.func @tied(%g: tensor<8x6xf32> {mega.input = "g"}, %h: tensor<8x4xf32> {mega.input = "h"},
    %e: tensor<6x4xf32> {mega.input = "e"}, %acc: tensor<6x4xf32> {mega.state = "grad.wte"})
    -> (tensor<6x4xf32> {mega.updates = "grad.wte"}) {
  %gt = mega.transpose %g [1, 0] : tensor<8x6xf32> -> tensor<6x8xf32>
  %dw = mega.matmul %gt, %h : tensor<6x8xf32>, tensor<8x4xf32> -> tensor<6x4xf32>
  %sum = mega.add %dw, %e : tensor<6x4xf32>
  %new = mega.add %acc, %sum : tensor<6x4xf32>
  return %new : tensor<6x4xf32>
}

// -----

// Mixed precision: a bf16 GEMM cast up to the f32 accumulator reads its bf16 operands into the
// accumulator itself (f32 result, no cast, no add); its transpose still folds. fp16 likewise.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: %[[G:[^:]*]]: tensor<8x3xbf16>
// CHECK-SAME: %[[X:[^:]*]]: tensor<8x5xbf16>
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<3x5xf32> {mega.state = "grad.w"}
// CHECK-SAME: %[[H:[^:]*]]: tensor<8x3xf16>
// CHECK-SAME: %[[ACCH:[^:]*]]: tensor<3x3xf32> {mega.state = "grad.v"}
// CHECK-NOT: mega.cast
// CHECK: %[[DW:.*]] = mega.matmul %[[G]], %[[X]] accumulate %[[ACC]] {transpose_lhs = true} : tensor<8x3xbf16>, tensor<8x5xbf16>, tensor<3x5xf32> -> tensor<3x5xf32>
// CHECK: %[[DV:.*]] = mega.matmul %[[H]], %[[H]] accumulate %[[ACCH]] {transpose_lhs = true} : tensor<8x3xf16>, tensor<8x3xf16>, tensor<3x3xf32> -> tensor<3x3xf32>
// CHECK-NOT: mega.cast
// CHECK-NOT: mega.add
// CHECK: return %[[DW]], %[[DV]]
func.func @mixed(%g: tensor<8x3xbf16> {mega.input = "g"}, %x: tensor<8x5xbf16> {mega.input = "x"},
    %acc: tensor<3x5xf32> {mega.state = "grad.w"}, %h: tensor<8x3xf16> {mega.input = "h"},
    %acch: tensor<3x3xf32> {mega.state = "grad.v"})
    -> (tensor<3x5xf32> {mega.updates = "grad.w"}, tensor<3x3xf32> {mega.updates = "grad.v"}) {
  %gt = mega.transpose %g [1, 0] : tensor<8x3xbf16> -> tensor<3x8xbf16>
  %dw = mega.matmul %gt, %x : tensor<3x8xbf16>, tensor<8x5xbf16> -> tensor<3x5xbf16>
  %up = mega.cast %dw : tensor<3x5xbf16> -> tensor<3x5xf32>
  %new = mega.add %acc, %up : tensor<3x5xf32>
  %ht = mega.transpose %h [1, 0] : tensor<8x3xf16> -> tensor<3x8xf16>
  %dv = mega.matmul %ht, %h : tensor<3x8xf16>, tensor<8x3xf16> -> tensor<3x3xf16>
  %upv = mega.cast %dv : tensor<3x3xf16> -> tensor<3x3xf32>
  %newv = mega.add %upv, %acch : tensor<3x3xf32>
  return %new, %newv : tensor<3x5xf32>, tensor<3x3xf32>
}

// -----

// A tied weight under bf16: the half sum of the embedding's scatter and the head's GEMM, cast up.
// The scatter is widened and added to the accumulator, the GEMM reads its bf16 operands into it.
// CHECK-LABEL: func.func @tied_mixed
// CHECK-SAME: %[[E:[^:]*]]: tensor<6x4xbf16>
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<6x4xf32> {mega.state = "grad.wte"}
// CHECK: %[[UP:.*]] = mega.cast %[[E]] : tensor<6x4xbf16> -> tensor<6x4xf32>
// CHECK: %[[PART:.*]] = mega.add %[[ACC]], %[[UP]] : tensor<6x4xf32>
// CHECK: %[[NEW:.*]] = mega.matmul %{{.*}}, %{{.*}} accumulate %[[PART]] {transpose_lhs = true} : tensor<8x6xbf16>, tensor<8x4xbf16>, tensor<6x4xf32> -> tensor<6x4xf32>
// CHECK-NOT: mega.add
// CHECK-NOT: mega.cast
// CHECK: return %[[NEW]]
func.func @tied_mixed(%g: tensor<8x6xbf16> {mega.input = "g"}, %h: tensor<8x4xbf16> {mega.input = "h"},
    %e: tensor<6x4xbf16> {mega.input = "e"}, %acc: tensor<6x4xf32> {mega.state = "grad.wte"})
    -> (tensor<6x4xf32> {mega.updates = "grad.wte"}) {
  %gt = mega.transpose %g [1, 0] : tensor<8x6xbf16> -> tensor<6x8xbf16>
  %dw = mega.matmul %gt, %h : tensor<6x8xbf16>, tensor<8x4xbf16> -> tensor<6x4xbf16>
  %sum = mega.add %e, %dw : tensor<6x4xbf16>
  %up = mega.cast %sum : tensor<6x4xbf16> -> tensor<6x4xf32>
  %new = mega.add %acc, %up : tensor<6x4xf32>
  return %new : tensor<6x4xf32>
}

// -----

// What stays under mixed precision: a widened product read by something else too, and a MoE
// expert weight gradient (moe_matmul_weight_grad has no bf16-into-f32 form).
// CHECK-LABEL: func.func @mixed_kept
// CHECK: %[[DW:.*]] = mega.matmul %{{.*}}, %{{.*}} {transpose_lhs = true} : tensor<8x3xbf16>, tensor<8x5xbf16> -> tensor<3x5xbf16>
// CHECK: %[[UP:.*]] = mega.cast %[[DW]]
// CHECK: mega.add %{{.*}}, %[[UP]] : tensor<3x5xf32>
// CHECK: %[[DE:.*]] = mega.moe_matmul_weight_grad
// CHECK: %[[UPE:.*]] = mega.cast %[[DE]]
// CHECK: mega.add %{{.*}}, %[[UPE]] : tensor<4x6x5xf32>
func.func @mixed_kept(%g: tensor<8x3xbf16> {mega.input = "g"}, %x: tensor<8x5xbf16> {mega.input = "x"},
    %acc: tensor<3x5xf32> {mega.state = "grad.w"}, %dy: tensor<4x8x6xbf16> {mega.input = "dy"},
    %xe: tensor<4x8x5xbf16> {mega.input = "xe"}, %m: tensor<8x4xbf16> {mega.input = "m"},
    %acce: tensor<4x6x5xf32> {mega.state = "grad.we"})
    -> (tensor<3x5xf32> {mega.updates = "grad.w"}, tensor<3x5xf32> {mega.output = "up"},
        tensor<4x6x5xf32> {mega.updates = "grad.we"}) {
  %gt = mega.transpose %g [1, 0] : tensor<8x3xbf16> -> tensor<3x8xbf16>
  %dw = mega.matmul %gt, %x : tensor<3x8xbf16>, tensor<8x5xbf16> -> tensor<3x5xbf16>
  %up = mega.cast %dw : tensor<3x5xbf16> -> tensor<3x5xf32>
  %new = mega.add %acc, %up : tensor<3x5xf32>
  %de = mega.moe_matmul_weight_grad %dy, %xe, %m topk 2 : (tensor<4x8x6xbf16>, tensor<4x8x5xbf16>, tensor<8x4xbf16>) -> tensor<4x6x5xbf16>
  %upe = mega.cast %de : tensor<4x6x5xbf16> -> tensor<4x6x5xf32>
  %newe = mega.add %acce, %upe : tensor<4x6x5xf32>
  return %new, %up, %newe : tensor<3x5xf32>, tensor<3x5xf32>, tensor<4x6x5xf32>
}

// -----

// A product read elsewhere too is not fused (the accumulator would change what the other user
// reads).
// CHECK-LABEL: func.func @shared
// CHECK: %[[DW:.*]] = mega.matmul %{{.*}}, %{{.*}} {transpose_lhs = true}
// CHECK: mega.add %{{.*}}, %[[DW]]
func.func @shared(%g: tensor<8x3xf32> {mega.input = "g"}, %x: tensor<8x5xf32> {mega.input = "x"},
    %acc: tensor<3x5xf32> {mega.state = "grad.w"})
    -> (tensor<3x5xf32> {mega.updates = "grad.w"}, tensor<3x5xf32> {mega.output = "dw"}) {
  %gt = mega.transpose %g [1, 0] : tensor<8x3xf32> -> tensor<3x8xf32>
  %dw = mega.matmul %gt, %x : tensor<3x8xf32>, tensor<8x5xf32> -> tensor<3x5xf32>
  %new = mega.add %acc, %dw : tensor<3x5xf32>
  return %new, %dw : tensor<3x5xf32>, tensor<3x5xf32>
}

// -----

// A MoE expert weight gradient (the grouped GEMM over each expert's active rows) accumulates into
// its accumulator too; one read by something else besides the add keeps its add.
// CHECK-LABEL: func.func @moe_experts
// CHECK-SAME: %[[DY:[^:]*]]: tensor<4x8x6xf32>
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x8x5xf32>
// CHECK-SAME: %[[M:[^:]*]]: tensor<8x4xf32>
// CHECK-SAME: %[[ACC:[^:]*]]: tensor<4x6x5xf32> {mega.state = "grad.w1"}
// CHECK-SAME: %[[ACC2:[^:]*]]: tensor<4x6x5xf32> {mega.state = "grad.w2"}
// CHECK: %[[DW:.*]] = mega.moe_matmul_weight_grad %[[DY]], %[[X]], %[[M]] topk 2 accumulate %[[ACC]] : (tensor<4x8x6xf32>, tensor<4x8x5xf32>, tensor<8x4xf32>, tensor<4x6x5xf32>) -> tensor<4x6x5xf32>
// CHECK: %[[DW2:.*]] = mega.moe_matmul_weight_grad %[[DY]], %[[X]], %[[M]] topk 2 : (tensor<4x8x6xf32>, tensor<4x8x5xf32>, tensor<8x4xf32>) -> tensor<4x6x5xf32>
// CHECK: %[[N2:.*]] = mega.add %[[ACC2]], %[[DW2]]
// CHECK: return %[[DW]], %[[N2]], %[[DW2]]
func.func @moe_experts(%dy: tensor<4x8x6xf32> {mega.input = "dy"},
    %x: tensor<4x8x5xf32> {mega.input = "x"}, %m: tensor<8x4xf32> {mega.input = "m"},
    %acc: tensor<4x6x5xf32> {mega.state = "grad.w1"}, %acc2: tensor<4x6x5xf32> {mega.state = "grad.w2"})
    -> (tensor<4x6x5xf32> {mega.updates = "grad.w1"}, tensor<4x6x5xf32> {mega.updates = "grad.w2"},
        tensor<4x6x5xf32> {mega.output = "dw2"}) {
  %dw = mega.moe_matmul_weight_grad %dy, %x, %m topk 2 : (tensor<4x8x6xf32>, tensor<4x8x5xf32>, tensor<8x4xf32>) -> tensor<4x6x5xf32>
  %dw2 = mega.moe_matmul_weight_grad %dy, %x, %m topk 2 : (tensor<4x8x6xf32>, tensor<4x8x5xf32>, tensor<8x4xf32>) -> tensor<4x6x5xf32>
  %n = mega.add %acc, %dw : tensor<4x6x5xf32>
  %n2 = mega.add %acc2, %dw2 : tensor<4x6x5xf32>
  return %n, %n2, %dw2 : tensor<4x6x5xf32>, tensor<4x6x5xf32>, tensor<4x6x5xf32>
}

// -----

// Two layers' backward as autodiff emits it: the input gradients first, the accumulations after
// the whole backward. Each weight-gradient GEMM (and the bias's add) rises to where its operands
// are final, next to its layer's input gradient, so layer 2's gradients are final before layer
// 1's backward runs (a dp bucket's reduction can start there) and x2 dies with layer 2.
// CHECK-LABEL: func.func @two_layers
// CHECK-SAME: %[[G:[^:]*]]: tensor<8x4xf32>
// CHECK-SAME: %[[X1:[^:]*]]: tensor<8x4xf32>
// CHECK-SAME: %[[W2:[^:]*]]: tensor<4x4xf32> {mega.param = "w2"}
// CHECK-SAME: %[[ACC1:[^:]*]]: tensor<4x4xf32> {mega.state = "grad.w1"}
// CHECK-SAME: %[[ACC2:[^:]*]]: tensor<4x4xf32> {mega.state = "grad.w2"}
// CHECK-SAME: %[[ACCB:[^:]*]]: tensor<4xf32> {mega.state = "grad.b2"}
// CHECK: %[[X2:.*]] = mega.gelu none %[[X1]]
// CHECK-NEXT: %[[DW2:.*]] = mega.matmul %[[G]], %[[X2]] accumulate %[[ACC2]] {transpose_lhs = true}
// CHECK-NEXT: %[[DX2:.*]] = mega.matmul %[[G]], %[[W2]]
// CHECK-NEXT: %[[DB:.*]] = mega.reduce sum %[[G]]
// CHECK-NEXT: %[[NB:.*]] = mega.add %[[ACCB]], %[[DB]]
// CHECK-NEXT: %[[DH:.*]] = mega.gelu_grad
// CHECK-NEXT: %[[DW1:.*]] = mega.matmul %[[DH]], %[[X1]] accumulate %[[ACC1]] {transpose_lhs = true}
// CHECK-NEXT: return %[[DW1]], %[[DW2]], %[[NB]]
func.func @two_layers(%g: tensor<8x4xf32> {mega.input = "g"}, %x1: tensor<8x4xf32> {mega.input = "x1"},
    %w2: tensor<4x4xf32> {mega.param = "w2"}, %acc1: tensor<4x4xf32> {mega.state = "grad.w1"},
    %acc2: tensor<4x4xf32> {mega.state = "grad.w2"}, %accb: tensor<4xf32> {mega.state = "grad.b2"})
    -> (tensor<4x4xf32> {mega.updates = "grad.w1"}, tensor<4x4xf32> {mega.updates = "grad.w2"},
        tensor<4xf32> {mega.updates = "grad.b2"}) {
  %x2 = mega.gelu none %x1 : tensor<8x4xf32>
  %dx2 = mega.matmul %g, %w2 : tensor<8x4xf32>, tensor<4x4xf32> -> tensor<8x4xf32>
  %db = mega.reduce sum %g over [0] : tensor<8x4xf32> -> tensor<4xf32>
  %dh = mega.gelu_grad none %dx2, %x1 : tensor<8x4xf32>
  %gt = mega.transpose %g [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %dw2 = mega.matmul %gt, %x2 : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  %dht = mega.transpose %dh [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
  %dw1 = mega.matmul %dht, %x1 : tensor<4x8xf32>, tensor<8x4xf32> -> tensor<4x4xf32>
  %n1 = mega.add %acc1, %dw1 : tensor<4x4xf32>
  %n2 = mega.add %acc2, %dw2 : tensor<4x4xf32>
  %nb = mega.add %accb, %db : tensor<4xf32>
  return %n1, %n2, %nb : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4xf32>
}
