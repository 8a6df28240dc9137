// RUN: megac-opt %s | FileCheck %s
// RUN: megac-opt %s | megac-opt | FileCheck %s
// Round trip of mega.linear, with and without bias.

// CHECK-LABEL: func.func @with_bias
// CHECK: mega.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
func.func @with_bias(%x: tensor<2x8x64xf32>, %w: tensor<256x64xf32>, %b: tensor<256xf32>) -> tensor<2x8x256xf32> {
  %y = mega.linear %x, %w, %b : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
  return %y : tensor<2x8x256xf32>
}

// CHECK-LABEL: func.func @no_bias
// CHECK: mega.linear %{{.*}}, %{{.*}} : (tensor<16x64xbf16>, tensor<32x64xbf16>) -> tensor<16x32xbf16>
func.func @no_bias(%x: tensor<16x64xbf16>, %w: tensor<32x64xbf16>) -> tensor<16x32xbf16> {
  %y = mega.linear %x, %w : (tensor<16x64xbf16>, tensor<32x64xbf16>) -> tensor<16x32xbf16>
  return %y : tensor<16x32xbf16>
}
