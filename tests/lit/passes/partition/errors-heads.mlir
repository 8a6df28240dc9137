// tp = 3 on a GPT whose hidden size (6) divides by 3 but whose 2 heads do not (megac import
// --model gpt:layers=1,hidden=6,heads=2,seq=4,vocab=16,batch=4): the attention is rejected,
// naming the heads and the degree. The vocab (16) does not divide either: a warning, and the
// table stays whole.
// RUN: megac-opt %s --mega-training-loss --mega-sharding-propagation="tp=3" -verify-diagnostics -o /dev/null

module attributes {mega.model = "gpt:layers=1,hidden=6,heads=2,ffn=24,seq=4,vocab=16,batch=4,tied=1,gelu=erf,dtype=f32"} {
  func.func @gpt(%arg0: tensor<4x4xi64> {mega.input = "input_ids"}, %arg1: tensor<16x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wte"}, %arg2: tensor<4x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "wpe"}, %arg3: tensor<6xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln1.weight"}, %arg4: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln1.bias"}, %arg5: tensor<6x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.q.weight"}, %arg6: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.q.bias"}, %arg7: tensor<6x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.k.weight"}, %arg8: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.k.bias"}, %arg9: tensor<6x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.attn.v.weight"}, %arg10: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.v.bias"}, %arg11: tensor<6x6xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.attn.proj.weight"}, %arg12: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.attn.proj.bias"}, %arg13: tensor<6xf32> {mega.init = #mega.init<ones>, mega.param = "h0.ln2.weight"}, %arg14: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.ln2.bias"}, %arg15: tensor<24x6xf32> {mega.init = #mega.init<normal, std = 2.000000e-02>, mega.param = "h0.mlp.fc.weight"}, %arg16: tensor<24xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.fc.bias"}, %arg17: tensor<6x24xf32> {mega.init = #mega.init<normal, std = 0.014142135623730949>, mega.param = "h0.mlp.proj.weight"}, %arg18: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "h0.mlp.proj.bias"}, %arg19: tensor<6xf32> {mega.init = #mega.init<ones>, mega.param = "ln_f.weight"}, %arg20: tensor<6xf32> {mega.init = #mega.init<zeros>, mega.param = "ln_f.bias"}) -> (tensor<4x4x16xf32> {mega.output = "logits"}) {
    // expected-warning@+1 {{embedding table 'wte' has 16 rows, not divisible by tp = 3: it stays whole on every rank (pad the vocab to a multiple of tp)}}
    %0 = mega.embedding %arg1[%arg0] : tensor<16x6xf32>, tensor<4x4xi64> -> tensor<4x4x6xf32>
    %1 = mega.broadcast %arg2 : tensor<4x6xf32> -> tensor<4x4x6xf32>
    %2 = mega.add %0, %1 : tensor<4x4x6xf32>
    %3 = mega.layer_norm %2, %arg3, %arg4 eps 1.000000e-05 : (tensor<4x4x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %4 = mega.linear %3, %arg5, %arg6 : (tensor<4x4x6xf32>, tensor<6x6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %5 = mega.reshape %4 : tensor<4x4x6xf32> -> tensor<4x4x2x3xf32>
    %6 = mega.linear %3, %arg7, %arg8 : (tensor<4x4x6xf32>, tensor<6x6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %7 = mega.reshape %6 : tensor<4x4x6xf32> -> tensor<4x4x2x3xf32>
    %8 = mega.linear %3, %arg9, %arg10 : (tensor<4x4x6xf32>, tensor<6x6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %9 = mega.reshape %8 : tensor<4x4x6xf32> -> tensor<4x4x2x3xf32>
    // expected-error@+1 {{attention has 2 query heads, which tp = 3 does not divide: tensor parallelism splits the query heads (choose a tp that divides 2)}}
    %10 = mega.attention %5, %7, %9 causal : (tensor<4x4x2x3xf32>, tensor<4x4x2x3xf32>, tensor<4x4x2x3xf32>) -> tensor<4x4x2x3xf32>
    %11 = mega.reshape %10 : tensor<4x4x2x3xf32> -> tensor<4x4x6xf32>
    %12 = mega.linear %11, %arg11, %arg12 : (tensor<4x4x6xf32>, tensor<6x6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %13 = mega.add %2, %12 : tensor<4x4x6xf32>
    %14 = mega.layer_norm %13, %arg13, %arg14 eps 1.000000e-05 : (tensor<4x4x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %15 = mega.linear %14, %arg15, %arg16 : (tensor<4x4x6xf32>, tensor<24x6xf32>, tensor<24xf32>) -> tensor<4x4x24xf32>
    %16 = mega.gelu none %15 : tensor<4x4x24xf32>
    %17 = mega.linear %16, %arg17, %arg18 : (tensor<4x4x24xf32>, tensor<6x24xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %18 = mega.add %13, %17 : tensor<4x4x6xf32>
    %19 = mega.layer_norm %18, %arg19, %arg20 eps 1.000000e-05 : (tensor<4x4x6xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<4x4x6xf32>
    %20 = mega.linear %19, %arg1 : (tensor<4x4x6xf32>, tensor<16x6xf32>) -> tensor<4x4x16xf32>
    return %20 : tensor<4x4x16xf32>
  }
}
