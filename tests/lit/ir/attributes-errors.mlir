// RUN: megac-opt %s -split-input-file -verify-diagnostics
// Every error of the #mega.mesh, #mega.sharding and #mega.init parsers and verifiers, and of a
// sharding used as a tensor encoding (rank and divisibility).

// expected-error @+1 {{a mesh needs at least one axis}}
#empty = #mega.mesh<>

// -----

// expected-error @+1 {{mesh axis names must not be empty}}
#unnamed = #mega.mesh<"" = 2>

// -----

// expected-error @+1 {{mesh axis 'dp' is listed twice}}
#twice = #mega.mesh<dp = 2, tp = 4, dp = 2>

// -----

// expected-error @+1 {{mesh axis 'tp' has size 0; sizes must be >= 1}}
#zero = #mega.mesh<dp = 2, tp = 0>

// -----

// expected-error @+1 {{mesh axis 'dp' has size -2; sizes must be >= 1}}
#negative = #mega.mesh<dp = -2>

// -----

// expected-error @+1 {{expected '='}}
#no_size = #mega.mesh<dp 2>

// -----

// expected-error @+1 {{expected a #mega.mesh as the first parameter}}
#not_mesh = #mega.sharding<#mega.init<ones>, [[]]>

// -----

// expected-error @+1 {{unknown reduce kind 'prod'}}
#bad_kind = #mega.sharding<#mega.mesh<tp = 4>, [[]], partial = prod(tp)>

// -----

// expected-error @+1 {{expected 'partial'}}
#bad_keyword = #mega.sharding<#mega.mesh<tp = 4>, [[]], pending = sum(tp)>

// -----

// expected-error @+1 {{sharding dim 1 names axis 'pp', which the mesh does not have}}
#unknown_dim_axis = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [pp]]>

// -----

// expected-error @+1 {{sharding partial names axis 'pp', which the mesh does not have}}
#unknown_partial_axis = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], []], partial = sum(pp)>

// -----

// expected-error @+1 {{sharding uses mesh axis 'tp' twice}}
#twice_in_dim = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp, tp]]>

// -----

// expected-error @+1 {{sharding uses mesh axis 'tp' twice}}
#twice_across_dims = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[tp], [dp, tp]]>

// -----

// A dim cannot be split over an axis its values are pending a reduction on.
// expected-error @+1 {{sharding uses mesh axis 'tp' twice}}
#split_and_partial = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]], partial = sum(tp)>

// -----

// expected-error @+1 {{sharding uses mesh axis 'dp' twice}}
#partial_twice = #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[]], partial = max(dp, dp)>

// -----

// expected-error @+1 {{sharding lists 2 dims for a tensor of rank 3}}
func.func @encoding_rank(%x: tensor<8x16x64xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>) {
  return
}

// -----

// expected-error @+1 {{sharding lists 1 dims for a tensor of rank 0}}
func.func @encoding_rank_scalar(%x: tensor<f32, #mega.sharding<#mega.mesh<tp = 4>, [[]]>>) {
  return
}

// -----

// expected-error @+1 {{tensor dim 1 of size 6 is not divisible by the 4 devices of the mesh axes it is split over}}
func.func @encoding_divisible(%x: tensor<8x6xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp], [tp]]>>) {
  return
}

// -----

// Two axes on one dim split it into the product of their sizes.
// expected-error @+1 {{tensor dim 0 of size 4 is not divisible by the 8 devices of the mesh axes it is split over}}
func.func @encoding_divisible_two_axes(%x: tensor<4x8xf32, #mega.sharding<#mega.mesh<dp = 2, tp = 4>, [[dp, tp], []]>>) {
  return
}

// -----

func.func @encoding_on_op_result(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{tensor dim 0 of size 8 is not divisible by the 3 devices of the mesh axes it is split over}}
  %y = mega.reshard %x : tensor<8x16xf32> -> tensor<8x16xf32, #mega.sharding<#mega.mesh<tp = 3>, [[tp], []]>>
  return
}

// -----

// expected-error @+1 {{unknown init kind 'uniform'; expected normal, zeros or ones}}
func.func @init_kind(%w: tensor<4xf32> {mega.init = #mega.init<uniform, std = 0.02>}) {
  return
}

// -----

// expected-error @+1 {{normal init needs std > 0, got 0.000000e+00}}
func.func @init_normal_without_std(%w: tensor<4xf32> {mega.init = #mega.init<normal>}) {
  return
}

// -----

// expected-error @+1 {{normal init needs std > 0, got -5.000000e-01}}
func.func @init_normal_negative_std(%w: tensor<4xf32> {mega.init = #mega.init<normal, std = -0.5>}) {
  return
}

// -----

// expected-error @+1 {{ones init takes no std}}
func.func @init_ones_with_std(%w: tensor<4xf32> {mega.init = #mega.init<ones, std = 0.5>}) {
  return
}

// -----

// expected-error @+1 {{zeros init takes no std}}
func.func @init_zeros_with_std(%w: tensor<4xf32> {mega.init = #mega.init<zeros, std = 1.0>}) {
  return
}

// -----

// expected-error @+1 {{expected 'std'}}
func.func @init_keyword(%w: tensor<4xf32> {mega.init = #mega.init<normal, sigma = 0.02>}) {
  return
}

// -----

// A partial kind needs partial axes (it would otherwise print like a sharding without one).
// expected-error @+1 {{sharding has partial kind 'max' but no partial axes}}
func.func @partial_kind_without_axes(%x: tensor<8xf32, #mega.sharding<#mega.mesh<tp = 2>, [[]], partial = max()>>) {
  return
}
