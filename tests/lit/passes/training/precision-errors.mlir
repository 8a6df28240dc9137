// mega-training-precision: an unknown precision.
// RUN: megac-opt %s --mega-training-precision=precision=int8 --verify-diagnostics

// expected-error@+1 {{mega-training-precision: precision 'int8' is not fp32, fp64, bf16 or fp16}}
module {
}
