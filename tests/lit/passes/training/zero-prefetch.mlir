// mega-training-zero-prefetch (docs/training-step.md, "ZeRO-2 and ZeRO-3"): after latency hiding
// every ZeRO-3 gather would start at the top of @forward_backward (its input is an argument);
// the pass moves each layer's starts down to just before the previous layer's first done. The
// one-layer GPT of zero.mlir at dp 2: units wte, wpe, h0, ln_f in the forward, then the
// backward's regathers (ln_f, wte, h0 in reverse, ...).
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3" --canonicalize --cse --mega-schedule-latency-hiding --mega-training-zero-prefetch | FileCheck %s
// Without the pass every gather of the step, the backward's regathers included, starts before
// the embedding:
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="dp=2" --mega-spmdize --mega-training-autodiff --mega-training-optimizer="zero=3" --canonicalize --cse --mega-schedule-latency-hiding | FileCheck %s --check-prefix=TOP

// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[WTE:.*]] = mega.all_gather_start %arg1 on #mesh axes ["dp"] dim 0
// CHECK: %[[WPE:.*]] = mega.all_gather_start %arg2 on #mesh axes ["dp"] dim 0
// CHECK-NOT: all_gather_start
// CHECK: mega.collective_done %[[WTE]]
// CHECK-NEXT: mega.embedding
// h0's gathers start during the embedding unit, before wpe's done:
// CHECK-NEXT: %[[LN1:.*]] = mega.all_gather_start %arg3 on #mesh axes ["dp"] dim 0
// CHECK: mega.all_gather_start %arg18
// CHECK-NOT: all_gather_start
// CHECK: mega.collective_done %[[WPE]]
// ln_f's start after wpe's done, before h0's first:
// CHECK: mega.all_gather_start %arg19
// CHECK-NEXT: mega.all_gather_start %arg20
// CHECK-NEXT: mega.collective_done %[[LN1]]
// CHECK: mega.layer_norm
// The backward's regather of h0.mlp.fc.weight starts in the backward, not at the top:
// CHECK: mega.cross_entropy_grad
// CHECK: mega.all_gather_start %arg15 on #mesh axes ["dp"] dim 0
// CHECK: return

// TOP-LABEL: func.func @forward_backward(
// TOP: mega.all_gather_start %arg15 on #mesh axes ["dp"] dim 0
// TOP: mega.all_gather_start %arg15 on #mesh axes ["dp"] dim 0
// TOP: mega.embedding
// TOP: return

module attributes {mega.model = "gpt:layers=1,hidden=8,heads=2,ffn=32,seq=4,vocab=16,batch=4,tied=1,gelu=erf,dtype=f32"} {
  func.func @gpt(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<16x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg2: tensor<4x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg3: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg4: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg5: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg6: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg7: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg8: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg9: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg10: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg11: tensor<8x8xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg12: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg13: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg14: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg15: tensor<32x8xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg16: tensor<32xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg17: tensor<8x32xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg18: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg19: tensor<8xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg20: tensor<8xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
    %0 = mega.embedding %arg1[%arg0] : tensor<16x8xf32>, tensor<4x4xi64> -> tensor<4x4x8xf32>
    %1 = mega.broadcast %arg2 : tensor<4x8xf32> -> tensor<4x4x8xf32>
    %2 = mega.add %0, %1 : tensor<4x4x8xf32>
    %3 = mega.layer_norm %2, %arg3, %arg4 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %4 = mega.linear %3, %arg5, %arg6 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %5 = mega.reshape %4 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %6 = mega.linear %3, %arg7, %arg8 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %7 = mega.reshape %6 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %8 = mega.linear %3, %arg9, %arg10 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %9 = mega.reshape %8 : tensor<4x4x8xf32> -> tensor<4x4x2x4xf32>
    %10 = mega.attention %5, %7, %9 causal : (tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>, tensor<4x4x2x4xf32>) -> tensor<4x4x2x4xf32>
    %11 = mega.reshape %10 : tensor<4x4x2x4xf32> -> tensor<4x4x8xf32>
    %12 = mega.linear %11, %arg11, %arg12 : (tensor<4x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %13 = mega.add %2, %12 : tensor<4x4x8xf32>
    %14 = mega.layer_norm %13, %arg13, %arg14 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %15 = mega.linear %14, %arg15, %arg16 : (tensor<4x4x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<4x4x32xf32>
    %16 = mega.gelu none %15 : tensor<4x4x32xf32>
    %17 = mega.linear %16, %arg17, %arg18 : (tensor<4x4x32xf32>, tensor<8x32xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %18 = mega.add %13, %17 : tensor<4x4x8xf32>
    %19 = mega.layer_norm %18, %arg19, %arg20 eps 1.000000e-05 : (tensor<4x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32>
    %20 = mega.linear %19, %arg1 : (tensor<4x4x8xf32>, tensor<16x8xf32>) -> tensor<4x4x16xf32>
    return %20 : tensor<4x4x16xf32>
  }
}
