// mega-backward-weight-split (the zero-bubble schedules' backward split, docs/pipeline.md): each
// @backward.c<c> becomes @backward_input.c<c> (B: what grad.act.c<c> needs) and
// @backward_weight.c<c> (W: the accumulator updates and what only they need); values W reads
// from B travel as stash.c<c>.w<k>.
// RUN: megac-opt %s --mega-training-autodiff --mega-forward-backward-split="recompute=none" --mega-backward-weight-split | FileCheck %s
// RUN: not megac-opt %s --mega-backward-weight-split 2>&1 | FileCheck %s --check-prefix=NOCHUNKS
// A 2-stage zoo GPT under each recompute policy:
// RUN: megac import --model gpt:layers=2,hidden=16,heads=2,seq=8,vocab=32,batch=2 -o %t.mlir
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=none" --mega-backward-weight-split | FileCheck %s --check-prefix=GPT-NONE
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=selective" --mega-backward-weight-split | FileCheck %s --check-prefix=GPT-SEL
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=full" --mega-backward-weight-split | FileCheck %s --check-prefix=GPT-FULL

module {
  module @stage0 attributes {mega.stage = 0 : i64} {
    func.func @forward_backward.c0(%w: tensor<4xf32> {mega.param = "w0"},
        %x: tensor<4xf32> {mega.input = "x"})
        -> (tensor<4xf32> {mega.output = "act.c1"}) {
      %y = mega.mul %w, %x : tensor<4xf32>
      %t = mega.tanh %y : tensor<4xf32>
      return %t : tensor<4xf32>
    }
  }
  module @stage1 attributes {mega.stage = 1 : i64} {
    func.func @forward_backward.c1(%w: tensor<4xf32> {mega.param = "w1"},
        %a: tensor<4xf32> {mega.input = "act.c1"})
        -> (tensor<f32> {mega.output = "loss"}) {
      %t = mega.tanh %a : tensor<4xf32>
      %y = mega.mul %w, %t : tensor<4xf32>
      %l = mega.reduce sum %y over [0] : tensor<4xf32> -> tensor<f32>
      return %l : tensor<f32>
    }
  }
}

// Chunk 0 sends no gradient: its B is empty (it lists the incoming gradient, which the runner
// receives for it) and W reads the received grad.act.c1 itself.
// CHECK-LABEL: module @stage0
// CHECK:       func.func @forward.c0(
// CHECK:       func.func @backward_input.c0(%{{.*}}: tensor<4xf32> {mega.input = "grad.act.c1"}) {
// CHECK-NEXT:    return
// CHECK:       func.func @backward_weight.c0(%{{.*}}: tensor<4xf32> {mega.input = "stash.c0.0"}, %{{.*}}: tensor<4xf32> {mega.input = "grad.act.c1"}, %{{.*}}: tensor<4xf32> {mega.input = "x"}, %{{.*}}: tensor<4xf32> {mega.state = "grad.w0"}) -> (tensor<4xf32> {mega.updates = "grad.w0"})
// CHECK-NOT:   func.func @backward.c0

// Chunk 1: B computes the loss's gradient dy (broadcast of 1) and grad.act.c1 = dy * w1 *
// (1 - t^2); W reads dy from B (stash.c1.w0) and t from the forward's stash for dw1 = dy * t.
// CHECK-LABEL: module @stage1
// CHECK:       func.func @backward_input.c1(%[[W:.*]]: tensor<4xf32> {mega.param = "w1"}, %[[T:.*]]: tensor<4xf32> {mega.input = "stash.c1.0"})
// CHECK-SAME:    -> (tensor<4xf32> {mega.output = "grad.act.c1"}, tensor<4xf32> {mega.output = "stash.c1.w0"})
// CHECK:         %[[DY:.*]] = mega.broadcast
// CHECK:         %[[DT:.*]] = mega.mul %[[DY]], %[[W]]
// CHECK:         %[[DA:.*]] = mega.mul %[[DT]],
// CHECK-NEXT:    return %[[DA]], %[[DY]]
// CHECK:       func.func @backward_weight.c1(%[[T2:.*]]: tensor<4xf32> {mega.input = "stash.c1.0"}, %[[ACC:.*]]: tensor<4xf32> {mega.state = "grad.w1"}, %[[DY2:.*]]: tensor<4xf32> {mega.input = "stash.c1.w0"})
// CHECK-SAME:    -> (tensor<4xf32> {mega.updates = "grad.w1"})
// CHECK-NEXT:    %[[DW:.*]] = mega.mul %[[DY2]], %[[T2]]
// CHECK-NEXT:    %[[NEW:.*]] = mega.add %[[ACC]], %[[DW]]
// CHECK-NEXT:    return %[[NEW]]
// CHECK-NOT:   func.func @backward.c1

// NOCHUNKS: error: mega-backward-weight-split: no @backward.c<c> functions; run mega-pipeline-split and mega-forward-backward-split first (pp > 1)

// GPT, recompute none. Stage 0's chunk sends no gradient: B is empty (but for the incoming
// gradient it lists), W reads the received grad.act.c1 itself.
// GPT-NONE-LABEL: module @stage0
// GPT-NONE-NOT:   @backward.c0
// GPT-NONE:       func.func @backward_input.c0(%{{.*}}: tensor<2x8x16xf32> {mega.input = "grad.act.c1"}) attributes {mega.loss_kind = "causal"} {
// GPT-NONE-NEXT:    return
// GPT-NONE:       func.func @backward_weight.c0(
// GPT-NONE-SAME:    {mega.input = "grad.act.c1"}
// GPT-NONE:         mega.embedding_grad
// Stage 1's B: the loss gradient, the input-gradient linears (weights transposed), layer-norm, GELU and attention gradients; no weight-gradient GEMM. W: the 7
// weight-gradient matmuls of the layer and the tied LM head, and the accumulator updates; it
// reads the forward's stash (the GEMMs' inputs) and B's output gradients (stash.c1.w<k>).
// GPT-NONE-LABEL: module @stage1
// GPT-NONE:       func.func @forward.c1(
// GPT-NONE:       func.func @backward_input.c1(
// GPT-NONE-SAME:    {mega.input = "stash.c1.0"}
// GPT-NONE-SAME:    -> (tensor<2x8x16xf32> {mega.output = "grad.act.c1"}, tensor<2x8x32xf32> {mega.output = "stash.c1.w0"},
// GPT-NONE-SAME:    {mega.output = "stash.c1.w12"})
// GPT-NONE-NOT:     mega.updates
// GPT-NONE:         mega.cross_entropy_grad
// GPT-NONE-NOT:     mega.matmul
// GPT-NONE:         mega.attention_grad
// GPT-NONE-NOT:     mega.matmul
// GPT-NONE:         return
// GPT-NONE:       func.func @backward_weight.c1(%{{.*}}: tensor<2x8x16xf32> {mega.input = "stash.c1.1"}
// GPT-NONE-SAME:    %{{.*}}: tensor<32x16xf32> {mega.state = "grad.wte"}
// GPT-NONE-SAME:    %{{.*}}: tensor<2x8x32xf32> {mega.input = "stash.c1.w0"}
// GPT-NONE-SAME:    -> (tensor<32x16xf32> {mega.updates = "grad.wte"}
// GPT-NONE-NOT:     mega.attention
// GPT-NONE-NOT:     mega.linear
// GPT-NONE-COUNT-7: mega.matmul
// GPT-NONE-NOT:     mega.matmul
// GPT-NONE:         return

// selective: the attention output is recomputed where its one user is, the projection's weight
// gradient in W; B's attention gradient reads the stashed q, k, v.
// GPT-SEL-LABEL: module @stage1
// GPT-SEL:       func.func @backward_input.c1(
// GPT-SEL-NOT:     mega.attention {{.*}}mega.recompute
// GPT-SEL:         mega.attention_grad
// GPT-SEL:       func.func @backward_weight.c1(
// GPT-SEL:         mega.attention {{.*}} causal {mega.recompute}
// GPT-SEL:         mega.matmul

// full: B recomputes the chunk's forward (its input gradients need it) and passes what the
// weight gradients read to W: W recomputes nothing.
// GPT-FULL-LABEL: module @stage1
// GPT-FULL:       func.func @forward.c1(
// GPT-FULL-SAME:    -> (tensor<f32> {mega.output = "loss"}, tensor<2x8x16xf32> {mega.output = "stash.c1.0"})
// GPT-FULL:       func.func @backward_input.c1(
// GPT-FULL-SAME:    {mega.output = "stash.c1.w17"})
// GPT-FULL:         mega.layer_norm {{.*}} {mega.recompute}
// GPT-FULL:         mega.attention {{.*}} {mega.recompute}
// GPT-FULL:         mega.attention_grad
// GPT-FULL:       func.func @backward_weight.c1(
// GPT-FULL-NOT:     mega.recompute
// GPT-FULL:         mega.matmul
// GPT-FULL-NOT:     mega.recompute
// GPT-FULL:         return
