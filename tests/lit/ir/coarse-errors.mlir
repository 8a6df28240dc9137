// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of embedding, layer_norm, rms_norm, attention, gelu, silu, rope, cross_entropy and
// dropout
// (linear's are in linear-errors.mlir).

func.func @embedding_table_rank(%t: tensor<2x128x64xf32>, %ids: tensor<8xi64>) -> tensor<8x64xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{embedding table must be [vocab, hidden], got [2, 128, 64]}}
  %e = mega.embedding %t[%ids] : tensor<2x128x64xf32>, tensor<8xi64> -> tensor<8x64xf32>
  return %e : tensor<8x64xf32>
}

// -----

func.func @embedding_result(%t: tensor<128x64xf32>, %ids: tensor<2x8xi64>) -> tensor<16x64xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.embedding' op inferred type(s) 'tensor<2x8x64xf32>' are incompatible with return type(s) of operation 'tensor<16x64xf32>'}}
  %e = mega.embedding %t[%ids] : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<16x64xf32>
  return %e : tensor<16x64xf32>
}

// -----

func.func @embedding_float_ids(%t: tensor<128x64xf32>, %ids: tensor<8xf32>) -> tensor<8x64xf32> {
  // expected-error @+1 {{'mega.embedding' op operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<8xf32>'}}
  %e = mega.embedding %t[%ids] : tensor<128x64xf32>, tensor<8xf32> -> tensor<8x64xf32>
  return %e : tensor<8x64xf32>
}

// -----

func.func @layer_norm_rank(%x: tensor<f32>, %g: tensor<1xf32>) -> tensor<f32> {
  // expected-error @+1 {{'mega.layer_norm' op layer_norm input must have rank >= 1}}
  %y = mega.layer_norm %x, %g eps 1.0e-05 : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
  return %y : tensor<f32>
}

// -----

func.func @layer_norm_weight(%x: tensor<2x64xf32>, %g: tensor<2x64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.layer_norm' op layer_norm weight [2, 64] must be [64] to match the last dim of [2, 64]}}
  %y = mega.layer_norm %x, %g eps 1.0e-05 : (tensor<2x64xf32>, tensor<2x64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @layer_norm_bias(%x: tensor<2x64xf32>, %g: tensor<64xf32>, %b: tensor<32xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.layer_norm' op layer_norm bias [32] must be [64] to match the last dim of [2, 64]}}
  %y = mega.layer_norm %x, %g, %b eps 1.0e-05 : (tensor<2x64xf32>, tensor<64xf32>, tensor<32xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @layer_norm_epsilon(%x: tensor<2x64xf32>, %g: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.layer_norm' op epsilon must be > 0}}
  %y = mega.layer_norm %x, %g eps 0.0 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @layer_norm_result_type(%x: tensor<2x64xf32>, %g: tensor<64xf32>) -> tensor<2x64xbf16> {
  // expected-error @+1 {{'mega.layer_norm' op failed to verify that all of {input, result} have same type}}
  %y = mega.layer_norm %x, %g eps 1.0e-05 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xbf16>
  return %y : tensor<2x64xbf16>
}

// -----

func.func @rms_norm_rank(%x: tensor<f32>, %g: tensor<1xf32>) -> tensor<f32> {
  // expected-error @+1 {{'mega.rms_norm' op rms_norm input must have rank >= 1}}
  %y = mega.rms_norm %x, %g eps 1.0e-06 : (tensor<f32>, tensor<1xf32>) -> tensor<f32>
  return %y : tensor<f32>
}

// -----

func.func @rms_norm_weight(%x: tensor<2x64xf32>, %g: tensor<32xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.rms_norm' op rms_norm weight [32] must be [64] to match the last dim of [2, 64]}}
  %y = mega.rms_norm %x, %g eps 1.0e-06 : (tensor<2x64xf32>, tensor<32xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @rms_norm_epsilon(%x: tensor<2x64xf32>, %g: tensor<64xf32>) -> tensor<2x64xf32> {
  // expected-error @+1 {{'mega.rms_norm' op epsilon must be > 0}}
  %y = mega.rms_norm %x, %g eps -1.0e-06 : (tensor<2x64xf32>, tensor<64xf32>) -> tensor<2x64xf32>
  return %y : tensor<2x64xf32>
}

// -----

func.func @attention_rank(%q: tensor<2x8x64xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention query/key/value must be [batch, seq, heads, head_dim], got [2, 8, 64], [2, 8, 4, 16], [2, 8, 4, 16]}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x64xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  return %o : tensor<2x8x64xf32>
}

// -----

func.func @attention_positions_causal(%q: tensor<2x8x4x16xf32>, %p: tensor<8xi64>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention positions are causal masking by global position: give them instead of `causal`, not with it}}
  %o = mega.attention %q, %q, %q positions %p, %p causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<8xi64>, tensor<8xi64>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_positions_shape(%q: tensor<2x8x4x16xf32>, %p: tensor<8xi64>, %short: tensor<4xi64>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention positions must be [seq] = [8] and [kv_seq] = [8], got [8] and [4]}}
  %o = mega.attention %q, %q, %q positions %p, %short : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<8xi64>, tensor<4xi64>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_positions_i32(%q: tensor<2x8x4x16xf32>, %p: tensor<8xi32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention positions must be ranked i64 tensors}}
  %o = mega.attention %q, %q, %q positions %p, %p : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<8xi32>, tensor<8xi32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_batch(%q: tensor<2x8x4x16xf32>, %k: tensor<3x8x4x16xf32>, %v: tensor<3x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention batch sizes differ: query [2, 8, 4, 16], key [3, 8, 4, 16], value [3, 8, 4, 16]}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<3x8x4x16xf32>, tensor<3x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_kv_seq(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x6x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention key [2, 8, 4, 16] and value [2, 6, 4, 16] differ in sequence length or heads}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x6x4x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_kv_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x2x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention key [2, 8, 4, 16] and value [2, 8, 2, 16] differ in sequence length or heads}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x2x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_head_dim(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x4x32xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention query [2, 8, 4, 16] and key [2, 8, 4, 32] differ in head_dim}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x8x4x32xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_gqa_heads(%q: tensor<2x8x6x16xf32>, %k: tensor<2x8x4x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x6x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention key/value heads (4) must divide query heads (6)}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x6x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x6x16xf32>
  return %o : tensor<2x8x6x16xf32>
}

// -----

func.func @attention_no_kv_heads(%q: tensor<2x8x4x16xf32>, %k: tensor<2x8x0x16xf32>, %v: tensor<2x8x0x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention key/value heads (0) must divide query heads (4)}}
  %o = mega.attention %q, %k, %v : (tensor<2x8x4x16xf32>, tensor<2x8x0x16xf32>, tensor<2x8x0x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_mask(%q: tensor<2x8x4x16xf32>, %k: tensor<2x6x4x16xf32>, %v: tensor<2x6x4x16xf32>, %m: tensor<2x1x8x8xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention mask must broadcast to [batch, heads, seq, kv_seq] = [2, 4, 8, 6]: cannot broadcast [2, 1, 8, 8] to [2, 4, 8, 6] (dim 3 is 8, not 1 or 6)}}
  %o = mega.attention %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x6x4x16xf32>, tensor<2x6x4x16xf32>, tensor<2x1x8x8xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_mask_rank(%q: tensor<2x8x4x16xf32>, %m: tensor<1x2x1x1x8xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention mask must broadcast to [batch, heads, seq, kv_seq] = [2, 4, 8, 8]: cannot broadcast [1, 2, 1, 1, 8] to lower rank [2, 4, 8, 8]}}
  %o = mega.attention %q, %q, %q mask %m causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<1x2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_scale(%q: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention scale must be > 0}}
  %o = mega.attention %q, %q, %q {scale = 0.0 : f64} : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
  return %o : tensor<2x8x4x16xf32>
}

// -----

func.func @attention_result(%q: tensor<1x4x8x16xf32>, %k: tensor<1x12x2x16xf32>, %v: tensor<1x12x2x32xf32>) -> tensor<1x4x8x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.attention' op inferred type(s) 'tensor<1x4x8x32xf32>' are incompatible with return type(s) of operation 'tensor<1x4x8x16xf32>'}}
  %o = mega.attention %q, %k, %v : (tensor<1x4x8x16xf32>, tensor<1x12x2x16xf32>, tensor<1x12x2x32xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

func.func @gelu_approximation(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{custom op 'mega.gelu' expected string or keyword containing one of the following enum values for attribute 'approximation' [none, tanh]}}
  %y = mega.gelu erf %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @cross_entropy_rank(%logits: tensor<f32>, %labels: tensor<i64>) -> tensor<f32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{cross_entropy logits must have rank >= 1}}
  %l = mega.cross_entropy %logits, %labels : tensor<f32>, tensor<i64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

func.func @cross_entropy_labels(%logits: tensor<2x8x128xf32>, %labels: tensor<2x128xi64>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{cross_entropy labels [2, 128] must be the logits [2, 8, 128] without the vocab dim}}
  %l = mega.cross_entropy %logits, %labels : tensor<2x8x128xf32>, tensor<2x128xi64> -> tensor<2x8xf32>
  return %l : tensor<2x8xf32>
}

// -----

func.func @cross_entropy_labels_rank(%logits: tensor<2x8x128xf32>, %labels: tensor<2x8x1xi64>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{cross_entropy labels [2, 8, 1] must be the logits [2, 8, 128] without the vocab dim}}
  %l = mega.cross_entropy %logits, %labels : tensor<2x8x128xf32>, tensor<2x8x1xi64> -> tensor<2x8xf32>
  return %l : tensor<2x8xf32>
}

// -----

func.func @dropout_ratio_one(%x: tensor<4xf32>, %seed: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.dropout' op ratio must be in [0, 1), got 1.000000e+00}}
  %y = mega.dropout %x, %seed ratio 1.0 stream 0 : tensor<4xf32>, tensor<i64>
  return %y : tensor<4xf32>
}

// -----

func.func @dropout_ratio_negative(%x: tensor<4xf32>, %seed: tensor<i64>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.dropout' op ratio must be in [0, 1), got -5.000000e-01}}
  %y = mega.dropout %x, %seed ratio -0.5 stream 0 : tensor<4xf32>, tensor<i64>
  return %y : tensor<4xf32>
}

// -----

func.func @dropout_seed(%x: tensor<4xf32>, %seed: tensor<1xi64>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.dropout' op operand #1 must be 0D tensor of 64-bit signless integer values, but got 'tensor<1xi64>'}}
  %y = mega.dropout %x, %seed ratio 0.1 stream 0 : tensor<4xf32>, tensor<1xi64>
  return %y : tensor<4xf32>
}

// -----

func.func @linear_mixed_types(%x: tensor<2x64xf32>, %w: tensor<32x64xbf16>) -> tensor<2x32xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{linear input, weight and bias must share one element type}}
  %y = mega.linear %x, %w : (tensor<2x64xf32>, tensor<32x64xbf16>) -> tensor<2x32xf32>
  return %y : tensor<2x32xf32>
}

// -----

func.func @attention_mixed_types(%q: tensor<1x8x2x16xf32>, %k: tensor<1x8x2x16xbf16>) -> tensor<1x8x2x16xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{attention query, key, value and mask must share one element type}}
  %o = mega.attention %q, %k, %k : (tensor<1x8x2x16xf32>, tensor<1x8x2x16xbf16>, tensor<1x8x2x16xbf16>) -> tensor<1x8x2x16xf32>
  return %o : tensor<1x8x2x16xf32>
}

// -----

func.func @silu_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  // expected-error @+1 {{'mega.silu' op operand #0 must be}}
  %y = mega.silu %x : tensor<4xi32>
  return %y : tensor<4xi32>
}

// -----

func.func @rope_odd(%x: tensor<2x4x7xf32>, %t: tensor<4x7xf32>) -> tensor<2x4x7xf32> {
  // expected-error @+1 {{'mega.rope' op rope input [2, 4, 7] must end in an even head dim (it rotates halves)}}
  %y = mega.rope %x, %t, %t : (tensor<2x4x7xf32>, tensor<4x7xf32>, tensor<4x7xf32>) -> tensor<2x4x7xf32>
  return %y : tensor<2x4x7xf32>
}

// -----

func.func @rope_tables_differ(%x: tensor<2x4x8xf32>, %c: tensor<4x8xf32>, %s: tensor<1x4x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'mega.rope' op rope cos [4, 8] and sin [1, 4, 8] must have one shape}}
  %y = mega.rope %x, %c, %s : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<1x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

func.func @rope_table_dim(%x: tensor<2x4x8xf32>, %t: tensor<4x4xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'mega.rope' op rope tables [4, 4] must end in the input's head dim 8}}
  %y = mega.rope %x, %t, %t : (tensor<2x4x8xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

func.func @rope_table_broadcast(%x: tensor<2x4x8xf32>, %t: tensor<3x8xf32>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'mega.rope' op rope tables: cannot broadcast [3, 8] to [2, 4, 8] (dim 0 is 3, not 1 or 4)}}
  %y = mega.rope %x, %t, %t : (tensor<2x4x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

func.func @rope_table_type(%x: tensor<2x4x8xf32>, %t: tensor<4x8xf64>) -> tensor<2x4x8xf32> {
  // expected-error @+1 {{'mega.rope' op cos and sin must have the input's element type; cast first}}
  %y = mega.rope %x, %t, %t : (tensor<2x4x8xf32>, tensor<4x8xf64>, tensor<4x8xf64>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

func.func @rope_result(%x: tensor<2x4x8xf32>, %t: tensor<4x8xf32>) -> tensor<2x4x4xf32> {
  // expected-error @+1 {{'mega.rope' op failed to verify that all of {input, result} have same type}}
  %y = mega.rope %x, %t, %t : (tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x4xf32>
  return %y : tensor<2x4x4xf32>
}
