// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of all_reduce, all_gather, reduce_scatter, all_to_all, send, recv and reshard:
// mesh axes, dims, group-size divisibility, peers and layouts.

func.func @all_reduce_no_axes(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.all_reduce' op a collective needs at least one mesh axis}}
  %y = mega.all_reduce sum %x on #mega.mesh<dp = 2, tp = 4> axes [] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @all_reduce_unknown_axis(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mesh axis 'pp' is not in the mesh}}
  %y = mega.all_reduce sum %x on #mega.mesh<dp = 2, tp = 4> axes ["pp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @all_reduce_axis_twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mesh axis 'tp' is listed twice}}
  %y = mega.all_reduce max %x on #mega.mesh<dp = 2, tp = 4> axes ["tp", "dp", "tp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @all_reduce_bool(%x: tensor<4xi1>) -> tensor<4xi1> {
  // expected-error @+1 {{'mega.all_reduce' op operand #0 must be statically shaped tensor of 64-bit float or 32-bit float or bfloat16 type or 16-bit float or 64-bit signless integer or 32-bit signless integer values, but got 'tensor<4xi1>'}}
  %y = mega.all_reduce sum %x on #mega.mesh<tp = 4> axes ["tp"] : tensor<4xi1>
  return %y : tensor<4xi1>
}

// -----

func.func @all_reduce_axes_not_strings(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'mega.all_reduce' op attribute 'axes' failed to satisfy constraint: string array attribute}}
  %y = mega.all_reduce sum %x on #mega.mesh<tp = 4> axes [0] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @all_reduce_not_a_mesh(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{invalid kind of attribute specified}}
  %y = mega.all_reduce sum %x on #mega.init<ones> axes ["tp"] : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @all_gather_no_axes(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{a collective needs at least one mesh axis}}
  %y = mega.all_gather %x on #mega.mesh<tp = 4> axes [] dim 0 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @all_gather_unknown_axis(%x: tensor<2x8xf32>) -> tensor<8x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{mesh axis 'dp' is not in the mesh}}
  %y = mega.all_gather %x on #mega.mesh<tp = 4> axes ["dp"] dim 0 : tensor<2x8xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// -----

func.func @all_gather_dim(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{all_gather dim 2 is out of range for [2, 8]}}
  %y = mega.all_gather %x on #mega.mesh<tp = 4> axes ["tp"] dim 2 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @all_gather_result(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.all_gather' op inferred type(s) 'tensor<2x32xf32>' are incompatible with return type(s) of operation 'tensor<2x8xf32>'}}
  %y = mega.all_gather %x on #mega.mesh<tp = 4> axes ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @reduce_scatter_axis_twice(%x: tensor<8x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{mesh axis 'tp' is listed twice}}
  %y = mega.reduce_scatter sum %x on #mega.mesh<tp = 4> axes ["tp", "tp"] dim 0 : tensor<8x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @reduce_scatter_dim(%x: tensor<8x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce_scatter dim 2 is out of range for [8, 8]}}
  %y = mega.reduce_scatter sum %x on #mega.mesh<tp = 4> axes ["tp"] dim 2 : tensor<8x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @reduce_scatter_divisible(%x: tensor<6x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{reduce_scatter dim 0 of size 6 is not divisible by the group size 8}}
  %y = mega.reduce_scatter sum %x on #mega.mesh<dp = 2, tp = 4> axes ["dp", "tp"] dim -2 : tensor<6x8xf32> -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @all_to_all_unknown_axis(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{mesh axis 'ep' is not in the mesh}}
  %y = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["ep"] split 1 concat 0 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @all_to_all_split_dim(%x: tensor<2x8xf32>) -> tensor<8x2xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{all_to_all split/concat dims are out of range for [2, 8]}}
  %y = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split 2 concat 0 : tensor<2x8xf32> -> tensor<8x2xf32>
  return %y : tensor<8x2xf32>
}

// -----

func.func @all_to_all_concat_dim(%x: tensor<2x8xf32>) -> tensor<8x2xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{all_to_all split/concat dims are out of range for [2, 8]}}
  %y = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split 1 concat -3 : tensor<2x8xf32> -> tensor<8x2xf32>
  return %y : tensor<8x2xf32>
}

// -----

func.func @all_to_all_divisible(%x: tensor<2x6xf32>) -> tensor<8x2xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{all_to_all split dim 1 of size 6 is not divisible by the group size 4}}
  %y = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split -1 concat 0 : tensor<2x6xf32> -> tensor<8x2xf32>
  return %y : tensor<8x2xf32>
}

// -----

func.func @all_to_all_result(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+2 {{failed to infer returned types}}
  // expected-error @+1 {{'mega.all_to_all' op inferred type(s) 'tensor<8x2xf32>' are incompatible with return type(s) of operation 'tensor<2x8xf32>'}}
  %y = mega.all_to_all %x on #mega.mesh<tp = 4> axes ["tp"] split 1 concat 0 : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @send_unknown_axis(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mega.send' op mesh axis 'dp' is not in the mesh}}
  mega.send %x on #mega.mesh<pp = 4, tp = 2> along "dp" shift 1 tag 0 : tensor<4xf32>
  return
}

// -----

func.func @send_shift_zero(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mega.send' op shift 0 must be non-zero and within the 4 devices of axis 'pp'}}
  mega.send %x on #mega.mesh<pp = 4, tp = 2> along "pp" shift 0 tag 0 : tensor<4xf32>
  return
}

// -----

func.func @send_shift_too_far(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mega.send' op shift 4 must be non-zero and within the 4 devices of axis 'pp'}}
  mega.send %x on #mega.mesh<pp = 4, tp = 2> along "pp" shift 4 tag 0 : tensor<4xf32>
  return
}

// -----

func.func @send_tag(%x: tensor<4xf32>) {
  // expected-error @+1 {{'mega.send' op tag must be >= 0}}
  mega.send %x on #mega.mesh<pp = 4, tp = 2> along "pp" shift 1 tag -1 : tensor<4xf32>
  return
}

// -----

func.func @recv_unknown_axis() -> tensor<4xf32> {
  // expected-error @+1 {{'mega.recv' op mesh axis 'dp' is not in the mesh}}
  %r = mega.recv on #mega.mesh<pp = 4, tp = 2> along "dp" shift -1 tag 0 : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @recv_shift_too_far() -> tensor<4xf32> {
  // expected-error @+1 {{'mega.recv' op shift -2 must be non-zero and within the 2 devices of axis 'tp'}}
  %r = mega.recv on #mega.mesh<pp = 4, tp = 2> along "tp" shift -2 tag 0 : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @recv_shift_zero() -> tensor<4xf32> {
  // expected-error @+1 {{'mega.recv' op shift 0 must be non-zero and within the 4 devices of axis 'pp'}}
  %r = mega.recv on #mega.mesh<pp = 4, tp = 2> along "pp" shift 0 tag 0 : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @recv_tag() -> tensor<4xf32> {
  // expected-error @+1 {{'mega.recv' op tag must be >= 0}}
  %r = mega.recv on #mega.mesh<pp = 4, tp = 2> along "pp" shift -1 tag -7 : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

func.func @reshard_shape(%x: tensor<8x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[], [tp]]>>) -> tensor<64x8xf32> {
  // expected-error @+1 {{'mega.reshard' op changes only the layout: the global shape and element type must stay the same}}
  %r = mega.reshard %x : tensor<8x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[], [tp]]>> -> tensor<64x8xf32>
  return %r : tensor<64x8xf32>
}

// -----

func.func @reshard_element_type(%x: tensor<8x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[], [tp]]>>) -> tensor<8x64xbf16, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>> {
  // expected-error @+1 {{'mega.reshard' op changes only the layout: the global shape and element type must stay the same}}
  %r = mega.reshard %x : tensor<8x64xf32, #mega.sharding<#mega.mesh<tp = 4>, [[], [tp]]>> -> tensor<8x64xbf16, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>
  return %r : tensor<8x64xbf16, #mega.sharding<#mega.mesh<tp = 4>, [[tp], []]>>
}
