// The forward/backward split of pipeline chunks, and recompute in place without chunks, on a
// 2-layer zoo GPT.
// RUN: megac import --model gpt:layers=2,hidden=16,heads=2,seq=8,vocab=32,batch=2 -o %t.mlir
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=none" | FileCheck %s --check-prefix=NONE
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=selective" | FileCheck %s --check-prefix=SEL
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" --mega-training-autodiff --mega-forward-backward-split="recompute=full" | FileCheck %s --check-prefix=FULL
// RUN: megac-opt %t.mlir --mega-training-loss --mega-training-autodiff --mega-forward-backward-split="recompute=none" | FileCheck %s --check-prefix=INPLACE-NONE
// RUN: megac-opt %t.mlir --mega-training-loss --mega-training-autodiff --cse --mega-forward-backward-split="recompute=selective" --cse | FileCheck %s --check-prefix=INPLACE-SEL
// RUN: megac-opt %t.mlir --mega-training-loss --mega-training-autodiff --mega-forward-backward-split="recompute=full" | FileCheck %s --check-prefix=INPLACE-FULL

// none: chunk 1's forward returns the loss and 13 residuals (the layer's input, norms, q/k/v,
// the attention output, the MLP's hidden values, the final norm and the logits); its backward
// reads them and sends grad.act.c1 back.
// NONE-NOT:  @forward_backward.c
// NONE:      module @stage0
// NONE:      func.func @forward.c0(
// NONE-SAME:   {mega.input = "input_ids"}) -> (tensor<2x8x16xf32> {mega.output = "act.c1"}, tensor<2x8x16xf32> {mega.output = "stash.c0.0"},
// NONE:      func.func @backward.c0(
// NONE-SAME:   {mega.input = "grad.act.c1"}, %{{.*}}: tensor<2x8xi64> {mega.input = "input_ids"}, %{{.*}}: tensor<32x16xf32> {mega.state = "grad.wte"}
// NONE-NOT:  mega.attention %
// NONE:      module @stage1
// NONE:      func.func @forward.c1(
// NONE-SAME:   %[[ACT:[a-z0-9]+]]: tensor<2x8x16xf32> {mega.input = "act.c1"}, %{{.*}}: tensor<2x8xi64> {mega.input = "labels"}, %{{.*}}: tensor<f32> {mega.input = "loss_normalizer"})
// NONE-SAME:   -> (tensor<f32> {mega.output = "loss"}, tensor<2x8x16xf32> {mega.output = "stash.c1.0"},
// NONE-SAME:   tensor<2x8x32xf32> {mega.output = "stash.c1.12"})
// NONE:        mega.attention
// NONE:        return %{{.*}}, %[[ACT]], %{{.*}} : tensor<f32>, tensor<2x8x16xf32>,
// NONE:      func.func @backward.c1(%{{.*}}: tensor<16xf32> {{.*}}mega.param = "h1.ln1.weight"}
// NONE-SAME:   {mega.input = "stash.c1.0"}
// NONE-SAME:   {mega.input = "stash.c1.12"}, %{{.*}}: tensor<2x8xi64> {mega.input = "labels"}, %{{.*}}: tensor<f32> {mega.input = "loss_normalizer"}, %{{.*}}: tensor<32x16xf32> {mega.state = "grad.wte"}
// NONE-SAME:   -> (tensor<2x8x16xf32> {mega.output = "grad.act.c1"}, tensor<32x16xf32> {mega.updates = "grad.wte"}
// NONE-NOT:    mega.attention %
// NONE:        mega.attention_grad
// NONE:        return

// selective: the attention output is not stashed; the backward recomputes it from the stashed
// q, k, v right before the projection's weight gradient reads it.
// SEL:      func.func @forward.c1(
// SEL-SAME:   tensor<2x8x2x8xf32> {mega.output = "stash.c1.4"}, tensor<2x8x16xf32> {mega.output = "stash.c1.5"}
// SEL-NOT:    stash.c1.12
// SEL-SAME:   tensor<2x8x32xf32> {mega.output = "stash.c1.11"})
// SEL:      func.func @backward.c1(
// SEL-SAME:   %[[Q:[a-z0-9]+]]: tensor<2x8x2x8xf32> {mega.input = "stash.c1.2"}, %[[K:[a-z0-9]+]]: tensor<2x8x2x8xf32> {mega.input = "stash.c1.3"}, %[[V:[a-z0-9]+]]: tensor<2x8x2x8xf32> {mega.input = "stash.c1.4"}
// SEL:        %[[O:.*]] = mega.attention %[[Q]], %[[K]], %[[V]] causal {mega.recompute}
// SEL-NEXT:   mega.reshape %[[O]] {mega.recompute} : tensor<2x8x2x8xf32> -> tensor<2x8x16xf32>
// SEL:        mega.attention_grad %{{.*}}, %[[Q]], %[[K]], %[[V]] causal

// full: only the chunk's input is stashed; the backward re-runs the chunk's forward.
// FULL:      func.func @forward.c0(
// FULL-SAME:   -> (tensor<2x8x16xf32> {mega.output = "act.c1"})
// FULL:      func.func @backward.c0(
// FULL-NOT:    stash
// FULL-SAME:   {mega.input = "grad.act.c1"}
// FULL:        mega.embedding {{.*}} {mega.recompute}
// FULL:      func.func @forward.c1(%{{.*}}, %[[ACT:[a-z0-9]+]]: tensor<2x8x16xf32> {mega.input = "act.c1"}
// FULL-SAME:   -> (tensor<f32> {mega.output = "loss"}, tensor<2x8x16xf32> {mega.output = "stash.c1.0"})
// FULL:        return %{{.*}}, %[[ACT]] : tensor<f32>, tensor<2x8x16xf32>
// FULL:      func.func @backward.c1(
// FULL-SAME:   %[[S:[a-z0-9]+]]: tensor<2x8x16xf32> {mega.input = "stash.c1.0"}, %{{.*}}: tensor<2x8xi64> {mega.input = "labels"}
// FULL:        mega.layer_norm %[[S]], {{.*}} {mega.recompute}
// FULL:        mega.attention {{.*}} {mega.recompute}
// FULL:        mega.cross_entropy_grad

// Without chunks, none changes nothing.
// INPLACE-NONE:     func.func @forward_backward(
// INPLACE-NONE-COUNT-2: mega.attention %
// INPLACE-NONE-NOT: mega.attention %
// INPLACE-NONE-NOT: mega.recompute

// selective in place: each layer's attention is recomputed before its first backward use, and
// CSE keeps the marked clone.
// INPLACE-SEL:      func.func @forward_backward(
// INPLACE-SEL:        %[[O1:.*]] = mega.attention %[[Q1:[0-9]+]], %[[K1:[0-9]+]], %[[V1:[0-9]+]] causal :
// INPLACE-SEL:        %[[O2:.*]] = mega.attention %[[Q2:[0-9]+]], %[[K2:[0-9]+]], %[[V2:[0-9]+]] causal :
// INPLACE-SEL:        mega.cross_entropy_grad
// INPLACE-SEL:        mega.attention %[[Q2]], %[[K2]], %[[V2]] causal {mega.recompute}
// INPLACE-SEL:        mega.attention_grad %{{.*}}, %[[Q2]], %[[K2]], %[[V2]]
// INPLACE-SEL:        mega.attention %[[Q1]], %[[K1]], %[[V1]] causal {mega.recompute}
// INPLACE-SEL:        mega.attention_grad %{{.*}}, %[[Q1]], %[[K1]], %[[V1]]

// full in place: the layers' inputs are kept; the rest of each layer is recomputed from them.
// INPLACE-FULL:      func.func @forward_backward(
// INPLACE-FULL:        mega.layer_norm %[[X1:[0-9]+]], %arg19, %arg20 eps 1.000000e-05 :
// INPLACE-FULL:        mega.cross_entropy_grad
// INPLACE-FULL:        mega.layer_norm %[[X1]], %arg19, %arg20 eps 1.000000e-05 {mega.recompute}
// INPLACE-FULL:        mega.attention {{.*}} {mega.recompute}
// INPLACE-FULL:        mega.attention_grad
