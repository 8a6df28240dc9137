// A 2-layer zoo GPT (tied embedding) cut into pipeline chunks.
// RUN: megac import --model gpt:layers=2,hidden=16,heads=2,seq=8,vocab=32,batch=2 -o %t.mlir
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2" | FileCheck %s --check-prefix=PP2
// RUN: megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2 virtual-stages=2" | FileCheck %s --check-prefix=VPP
// RUN: not megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=8" 2>&1 | FileCheck %s --check-prefix=TOOMANY
// RUN: not megac-opt %t.mlir --mega-training-loss --mega-pipeline-split="stages=2 virtual-stages=4" 2>&1 | FileCheck %s --check-prefix=TOOMANYV

// pp=2: the cut lands between the layers; only the residual stream crosses; wte is read by the
// embedding (stage 0) and the LM head (stage 1).
// PP2:      module attributes {mega.model = "gpt:
// PP2-NOT:  func.func @forward(
// PP2:      module @stage0 attributes {mega.stage = 0 : i64}
// PP2-NEXT: func.func @forward_backward.c0(%[[WTE:.*]]: tensor<32x16xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte", mega.shared_stages = [0, 1]}, %{{.*}}: tensor<8x16xf32> {{.*}}mega.param = "wpe"}
// PP2-SAME:   mega.param = "h0.ln1.weight"
// PP2-SAME:   mega.param = "h0.mlp.proj.bias"}, %[[IDS:.*]]: tensor<2x8xi64> {mega.input = "input_ids"})
// PP2-SAME:   -> (tensor<2x8x16xf32> {mega.output = "act.c1"}) attributes {mega.loss_kind = "causal"}
// PP2-NOT:    mega.param = "h1.
// PP2:        mega.embedding %[[WTE]][%[[IDS]]]
// PP2-COUNT-1: mega.attention
// PP2-NOT:    mega.attention
// PP2:        return %{{.*}} : tensor<2x8x16xf32>
// PP2:      module @stage1 attributes {mega.stage = 1 : i64}
// PP2-NEXT: func.func @forward_backward.c1(%[[WTE1:.*]]: tensor<32x16xf32> {{.*}}mega.param = "wte", mega.shared_stages = [0, 1]}, %{{.*}}: tensor<16xf32> {{.*}}mega.param = "h1.ln1.weight"}
// PP2-SAME:   mega.param = "ln_f.bias"}, %[[ACT:.*]]: tensor<2x8x16xf32> {mega.input = "act.c1"}, %{{.*}}: tensor<2x8xi64> {mega.input = "labels"}, %{{.*}}: tensor<f32> {mega.input = "loss_normalizer"})
// PP2-SAME:   -> (tensor<f32> {mega.output = "loss"})
// PP2-NEXT:   mega.layer_norm %[[ACT]]
// PP2-COUNT-1: mega.attention
// PP2:        mega.linear %{{.*}}, %[[WTE1]] : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
// PP2:        mega.cross_entropy

// pp=2, vpp=2: four chunks, c0 and c2 on stage 0, c1 and c3 on stage 1: the embedding, a layer,
// a layer, the head.
// VPP:      module @stage0 attributes {mega.stage = 0 : i64}
// VPP-NEXT: func.func @forward_backward.c0(
// VPP-SAME:   mega.shared_stages = [0, 1]
// VPP-SAME:   -> (tensor<2x8x16xf32> {mega.output = "act.c1"})
// VPP:      func.func @forward_backward.c2(
// VPP-SAME:   mega.param = "h1.ln1.weight"
// VPP-SAME:   {mega.input = "act.c2"}) -> (tensor<2x8x16xf32> {mega.output = "act.c3"})
// VPP:      module @stage1 attributes {mega.stage = 1 : i64}
// VPP-NEXT: func.func @forward_backward.c1(
// VPP-SAME:   mega.param = "h0.ln1.weight"
// VPP-SAME:   {mega.input = "act.c1"}) -> (tensor<2x8x16xf32> {mega.output = "act.c2"})
// VPP:      func.func @forward_backward.c3(
// VPP-SAME:   mega.param = "wte", mega.shared_stages = [0, 1]
// VPP-SAME:   {mega.input = "act.c3"}, {{.*}}{mega.input = "labels"}
// VPP-SAME:   -> (tensor<f32> {mega.output = "loss"})

// TOOMANY: error: mega-pipeline-split: cannot cut @forward_backward into 8 pipeline chunks: the model has 5 cut points, pp=8 and vpp=1 need 7
// TOOMANYV: error: mega-pipeline-split: cannot cut @forward_backward into 8 pipeline chunks: the model has 5 cut points, pp=2 and vpp=4 need 7
