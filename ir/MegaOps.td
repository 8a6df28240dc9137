// Operations of the `mega` dialect, from ONNX-level elementwise ops to collectives.
#ifndef MEGA_OPS_TD
#define MEGA_OPS_TD

include "ir/MegaDialect.td"
include "ir/MegaAttrs.td"
include "ir/MegaInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Result shapes are inferred; encodings (layouts) are not, they come from sharding propagation,
// so an inferred type is compatible with the declared one when shape and element type agree.
def Mega_InferShape : InferTypeOpAdaptorBase<[{
  static bool isCompatibleReturnTypes(::mlir::TypeRange l, ::mlir::TypeRange r) {
    return ::mega::sameShapesAndElementTypes(l, r);
  }
}]>;

// A differentiable op builds its own vector-Jacobian product (ir/GradientRules.cpp).
def Mega_Differentiable : DeclareOpInterfaceMethods<Mega_GradientOpInterface>;

// Elementwise ops (ir/MegaTraits.h): their sharding rule is the elementwise one
// (ir/ShardingRules.cpp), and the plan opcode they lower to is flagged Elementwise. A pending sum
// over ranks passes through a Mega_PartialLinear op (neg, cast) and through a Mega_PartialSum op
// whose operands are all partial over the same axes (add, sub); other ops resolve it first.
def Mega_Elementwise : NativeOpTrait<"Elementwise"> { let cppNamespace = "::mega::OpTrait"; }
def Mega_PartialLinear : NativeOpTrait<"PartialLinear"> { let cppNamespace = "::mega::OpTrait"; }
def Mega_PartialSum : NativeOpTrait<"PartialSum"> { let cppNamespace = "::mega::OpTrait"; }

// The plan opcode an op lowers to: `Mega_Plan<"Silu">` names a row of runtime/plan/Opcodes.def
// (PlanOpInterface). Codegen lowers attribute-free opcodes from the name alone.
class Mega_PlanOpcodeTrait<string name> : NativeOpTrait<"PlanOpcode", [],
    "static constexpr ::llvm::StringLiteral getPlanOpcode() { return \"" # name # "\"; }"> {
  let cppNamespace = "::mega::OpTrait";
}
class Mega_Plan<string name> : TraitList<[Mega_PlanOpcodeTrait<name>, Mega_PlanOpInterface]>;

// Every op reports its cost; `costOverrides` names the methods it computes itself.
class Mega_CostedOp<string mnemonic, list<Trait> traits = [], list<string> costOverrides = []>
    : Mega_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Mega_CostOpInterface, costOverrides>,
         Mega_ShardingRuleOpInterface])>;

//===----------------------------------------------------------------------===//
// Low level: constants and elementwise ops
//===----------------------------------------------------------------------===//

def Mega_ConstantOp : Mega_CostedOp<"constant",
    [ConstantLike, Pure, Mega_InferShape], ["getFlops"]> {
  let summary = "a tensor constant";
  let description = [{
    A constant tensor (folded shape arithmetic, masks, small tables). Parameters are function
    arguments, not constants: weights never appear in textual IR.

    ```mlir
    %c = mega.constant dense<[1.0, 2.0]> : tensor<2xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

// An elementwise op of one operand lowering to plan opcode `opcode`.
class Mega_UnaryOp<string mnemonic, string opcode, string what,
                   TypeConstraint type = Mega_FloatTensor,
                   list<Trait> extraTraits = [Mega_Differentiable]>
    : Mega_CostedOp<mnemonic, !listconcat([Pure, SameOperandsAndResultType, Mega_Elementwise,
                                           Mega_Plan<opcode>], extraTraits)> {
  let summary = "elementwise " # what;
  let description = "Elementwise " # what # " of a tensor; the result has the operand's type."
      # "\n\n```mlir\n%y = mega." # mnemonic # " %x : tensor<4x8xf32>\n```";
  let arguments = (ins type:$input);
  let results = (outs type:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Mega_NegOp : Mega_UnaryOp<"neg", "Neg", "negation", Mega_NumTensor,
    [Mega_Differentiable, Mega_PartialLinear]>;
def Mega_AbsOp : Mega_UnaryOp<"abs", "Abs", "absolute value", Mega_NumTensor>;
def Mega_ExpOp : Mega_UnaryOp<"exp", "Exp", "exponential e^x">;
def Mega_LogOp : Mega_UnaryOp<"log", "Log", "natural logarithm">;
def Mega_TanhOp : Mega_UnaryOp<"tanh", "Tanh", "hyperbolic tangent">;
def Mega_ErfOp : Mega_UnaryOp<"erf", "Erf", "error function">;
def Mega_SigmoidOp : Mega_UnaryOp<"sigmoid", "Sigmoid", "logistic sigmoid 1 / (1 + e^-x)">;
def Mega_ReluOp : Mega_UnaryOp<"relu", "Relu", "rectifier max(x, 0)">;
def Mega_SqrtOp : Mega_UnaryOp<"sqrt", "Sqrt", "square root">;
def Mega_RsqrtOp : Mega_UnaryOp<"rsqrt", "Rsqrt", "reciprocal square root 1 / sqrt(x)">;
def Mega_SinOp : Mega_UnaryOp<"sin", "Sin", "sine (radians)">;
def Mega_CosOp : Mega_UnaryOp<"cos", "Cos", "cosine (radians)">;

// An elementwise op of two operands lowering to plan opcode `opcode`.
class Mega_BinaryOp<string mnemonic, string opcode, string what,
                    TypeConstraint type = Mega_NumTensor,
                    list<Trait> extraTraits = [Mega_Differentiable]>
    : Mega_CostedOp<mnemonic, !listconcat([Pure, SameOperandsAndResultType, Mega_Elementwise,
                                           Mega_Plan<opcode>], extraTraits)> {
  let summary = "elementwise " # what;
  let description = "Elementwise " # what # " of two tensors of the same type. Broadcasting "
      # "is explicit (`mega.broadcast`): the importer and the DSL insert it."
      # "\n\n```mlir\n%z = mega." # mnemonic # " %x, %y : tensor<4x8xf32>\n```";
  let arguments = (ins type:$lhs, type:$rhs);
  let results = (outs type:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Mega_AddOp : Mega_BinaryOp<"add", "Add", "sum x + y", Mega_NumTensor,
    [Mega_Differentiable, Mega_PartialSum]>;
def Mega_SubOp : Mega_BinaryOp<"sub", "Sub", "difference x - y", Mega_NumTensor,
    [Mega_Differentiable, Mega_PartialSum]>;
// mul could keep one partial operand partial, but its operands and result share one type
// (encoding included), so partial sums are resolved before it.
def Mega_MulOp : Mega_BinaryOp<"mul", "Mul", "product x * y">;
def Mega_DivOp : Mega_BinaryOp<"div", "Div", "quotient x / y">;
def Mega_PowOp : Mega_BinaryOp<"pow", "Pow", "power x ^ y", Mega_FloatTensor>;
def Mega_MinOp : Mega_BinaryOp<"min", "Min", "minimum">;
def Mega_MaxOp : Mega_BinaryOp<"max", "Max", "maximum">;

def Mega_CompareOp : Mega_CostedOp<"compare", [Mega_Elementwise, Mega_Plan<"Compare">, Pure,
    SameTypeOperands, Mega_InferShape]> {
  let summary = "elementwise comparison, giving i1";
  let description = [{
    Compares two tensors of the same type elementwise; the result has their shape (and
    encoding) with element type i1.

    ```mlir
    %m = mega.compare lt %x, %y : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Mega_ComparePredicate:$predicate, Mega_NumTensor:$lhs,
                       Mega_NumTensor:$rhs);
  let results = (outs Mega_BoolTensor:$result);
  let assemblyFormat = "$predicate $lhs `,` $rhs attr-dict `:` type($lhs)";
}

def Mega_NotOp : Mega_UnaryOp<"not", "Not", "logical negation", Mega_BoolTensor, []>;
def Mega_AndOp : Mega_BinaryOp<"and", "And", "logical and", Mega_BoolTensor, []>;
def Mega_OrOp : Mega_BinaryOp<"or", "Or", "logical or", Mega_BoolTensor, []>;

def Mega_WhereOp : Mega_CostedOp<"where",
    [Mega_Elementwise, Mega_Plan<"Where">, Pure,
     AllTypesMatch<["true_value", "false_value", "result"]>, Mega_Differentiable]> {
  let summary = "elementwise select";
  let description = [{
    `result[i] = cond[i] ? true_value[i] : false_value[i]`; all three have the same shape.

    ```mlir
    %y = mega.where %mask, %x, %neg_inf : tensor<8x8xi1>, tensor<8x8xf32>
    ```
  }];
  let arguments = (ins Mega_BoolTensor:$cond, Mega_Tensor:$true_value, Mega_Tensor:$false_value);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat =
      "$cond `,` $true_value `,` $false_value attr-dict `:` type($cond) `,` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Low level: contraction, indexing, reduction, shape
//===----------------------------------------------------------------------===//

def Mega_MatmulOp : Mega_CostedOp<"matmul", [Mega_Plan<"MatMul">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops", "getMatmulFlops"]> {
  let summary = "batched matrix product with broadcasting batch dims";
  let description = [{
    `[..., m, k] x [..., k, n] -> [..., m, n]`, both operands of rank >= 2; batch dims
    broadcast as in numpy. Element types match.

    Layout flags (mega-training-gemm-fusion sets them, GEMMs read them as BLAS's trans flags):
    with `transpose_lhs` the lhs is stored `[..., k, m]` and read as its transpose over the last
    two dims, with `transpose_rhs` the rhs is stored `[..., n, k]`. With an `accumulate`
    operand (the result's type) the product is added to it, `acc + lhs x rhs`: a gradient
    accumulator updated by the GEMM itself (beta = 1), no separate add. The accumulator has the
    operands' element type, or is f32 under bf16/f16 operands (mixed precision: the product of
    the half operands is summed in f32 and added to the f32 accumulator without being rounded
    to half; Megatron's gradient-accumulation fusion).

    ```mlir
    %s = mega.matmul %q, %kt : tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x16x16xf32>
    %dw = mega.matmul %g, %x accumulate %acc {transpose_lhs = true}
        : tensor<32x64xf32>, tensor<32x16xf32>, tensor<64x16xf32> -> tensor<64x16xf32>
    %dwh = mega.matmul %gh, %xh accumulate %acc {transpose_lhs = true}
        : tensor<32x64xbf16>, tensor<32x16xbf16>, tensor<64x16xf32> -> tensor<64x16xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$lhs, Mega_FloatTensor:$rhs,
                       Optional<Mega_FloatTensor>:$accumulate,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_lhs,
                       DefaultValuedAttr<BoolAttr, "false">:$transpose_rhs);
  let results = (outs Mega_FloatTensor:$result);
  let builders = [
    // The plain product: no accumulator, no transposed operand.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$lhs, "::mlir::Value":$rhs), [{
      build($_builder, $_state, result, lhs, rhs, ::mlir::Value(), false, false);
    }]>
  ];
  let assemblyFormat = "$lhs `,` $rhs (`accumulate` $accumulate^)? attr-dict `:` type($lhs) `,` "
                       "type($rhs) (`,` type($accumulate)^)? `->` type($result)";
  let hasVerifier = 1;
}

def Mega_GatherOp : Mega_CostedOp<"gather", [Mega_Plan<"Gather">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "gather slices of `data` along `axis` (ONNX Gather)";
  let description = [{
    Result shape `data.shape[:axis] + indices.shape + data.shape[axis+1:]`.

    ```mlir
    %r = mega.gather %table[%ids] axis 0 : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$data, Mega_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$data `[` $indices `]` `axis` $axis attr-dict `:` type($data) `,` "
                       "type($indices) `->` type($result)";
}

def Mega_GatherElementsOp : Mega_CostedOp<"gather_elements", [Mega_Plan<"GatherElements">, Pure,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "pick one element of `data` per index along `axis` (ONNX GatherElements)";
  let description = [{
    `result[i...] = data[i_0, ..., indices[i...], ..., i_r1]` with the index in position
    `axis`; indices and result have one shape, of data's rank, and may be smaller than data on
    every dim. Indices count from the end when negative. The gradient scatter-adds into zeros.

    ```mlir
    %r = mega.gather_elements %data[%idx] axis 1 : tensor<2x8xf32>, tensor<2x3xi64> -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$data, Mega_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$data `[` $indices `]` `axis` $axis attr-dict `:` type($data) `,` "
                       "type($indices) `->` type($result)";
  let hasVerifier = 1;
}

def Mega_ScatterElementsOp : Mega_CostedOp<"scatter_elements", [Mega_Plan<"ScatterElements">,
    Pure, AllTypesMatch<["data", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "write (or add) `updates` into a copy of `data` along `axis` (ONNX ScatterElements)";
  let description = [{
    `result = data`, then `result[i_0, ..., indices[i...], ..., i_r1] = updates[i...]` (or
    `+=` with `accumulate`) in row-major order of `i`; indices and updates have one shape of
    data's rank. Negative indices count from the end. The gradient of `gather_elements`.

    ```mlir
    %r = mega.scatter_elements %upd into %data[%idx] axis 1 {accumulate = true}
        : tensor<2x8xf32>, tensor<2x3xi64>, tensor<2x3xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$data, Mega_IntTensor:$indices, Mega_Tensor:$updates,
                       I64Attr:$axis, DefaultValuedAttr<BoolAttr, "false">:$accumulate);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$updates `into` $data `[` $indices `]` `axis` $axis attr-dict `:` "
                       "type($data) `,` type($indices) `,` type($updates)";
  let hasVerifier = 1;
}

def Mega_ScatterNdOp : Mega_CostedOp<"scatter_nd", [Mega_Plan<"ScatterND">, Pure,
    AllTypesMatch<["data", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "write (or add) slices of `updates` at index tuples of `data` (ONNX ScatterND)";
  let description = [{
    indices `[..., k]` name slices `data[j_0, ..., j_k1, :, ...]` (negative entries count
    from the end); `updates` has shape `indices.shape[:-1] + data.shape[k:]`. `result = data`,
    then each slice is overwritten (or added to, with `accumulate`) in row-major order.

    ```mlir
    %r = mega.scatter_nd %upd into %data[%idx] : tensor<4x8xf32>, tensor<2x1xi64>, tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$data, Mega_IntTensor:$indices, Mega_Tensor:$updates,
                       DefaultValuedAttr<BoolAttr, "false">:$accumulate);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$updates `into` $data `[` $indices `]` attr-dict `:` type($data) `,` "
                       "type($indices) `,` type($updates)";
  let hasVerifier = 1;
}

def Mega_CumSumOp : Mega_CostedOp<"cumsum", [Mega_Plan<"CumSum">, Pure, SameOperandsAndResultType,
    Mega_Differentiable]> {
  let summary = "cumulative sum along `axis` (ONNX CumSum)";
  let description = [{
    `result[.., i, ..] = sum of input[.., j, ..]` over `j <= i` (`j < i` with `exclusive`;
    `j >= i` / `j > i` with `reverse`), summed in index order. Integers wrap. The gradient is
    the cumulative sum of the result's gradient in the other direction.

    ```mlir
    %r = mega.cumsum %mask axis 1 {exclusive = false, reverse = false} : tensor<2x16xi64>
    ```
  }];
  let arguments = (ins Mega_NumTensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                       DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Mega_ReduceOp : Mega_CostedOp<"reduce", [Mega_Plan<"Reduce">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "reduce over axes (sum, mean, max, min)";
  let description = [{
    Reduces `input` over the listed axes (unique, in range); with `keep_dims` the reduced
    axes stay as size 1.

    ```mlir
    %m = mega.reduce mean %x over [2] keep_dims : tensor<2x8x64xf32> -> tensor<2x8x1xf32>
    ```
  }];
  let arguments = (ins Mega_ReduceKind:$kind, Mega_NumTensor:$input,
                       DenseI64ArrayAttr:$axes, UnitAttr:$keep_dims);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$kind $input `over` $axes (`keep_dims` $keep_dims^)? attr-dict `:` "
                       "type($input) `->` type($result)";
}

def Mega_SoftmaxOp : Mega_CostedOp<"softmax", [Mega_Plan<"Softmax">, Pure,
    SameOperandsAndResultType, Mega_Differentiable], ["getFlops"]> {
  let summary = "softmax along one axis";
  let description = [{
    `exp(x - max(x)) / sum(exp(x - max(x)))` along `axis` (negative counts from the end).

    ```mlir
    %p = mega.softmax %s axis -1 : tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `axis` $axis attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mega_ReshapeOp : Mega_CostedOp<"reshape", [Pure, Mega_Differentiable], ["getFlops"]> {
  let summary = "reshape to the same number of elements";
  let description = [{
    Row-major reinterpretation; element types match and element counts are equal.

    ```mlir
    %h = mega.reshape %x : tensor<2x8x64xf32> -> tensor<2x8x4x16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Mega_TransposeOp : Mega_CostedOp<"transpose", [Mega_Plan<"Transpose">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "permute dims";
  let description = [{
    `result.shape[i] = input.shape[perm[i]]`; `perm` is a permutation of the dims.

    ```mlir
    %t = mega.transpose %x [0, 2, 1, 3] : tensor<2x8x4x16xf32> -> tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input $perm attr-dict `:` type($input) `->` type($result)";
}

def Mega_SliceOp : Mega_CostedOp<"slice", [Mega_Plan<"Slice">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "static strided slice";
  let description = [{
    Per dim, elements `starts[d], starts[d] + strides[d], ...` below `limits[d]`;
    `0 <= starts <= limits <= size`, strides >= 1.

    ```mlir
    %q = mega.slice %qkv [0, 0, 0] to [2, 8, 64] step [1, 1, 1]
        : tensor<2x8x192xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input $starts `to` $limits `step` $strides attr-dict `:` type($input) "
                       "`->` type($result)";
}

def Mega_ConcatOp : Mega_CostedOp<"concat", [Mega_Plan<"Concat">, Pure, SameOperandsElementType,
    Mega_InferShape, Mega_Differentiable], ["getFlops"]> {
  let summary = "concatenate along an axis";
  let description = [{
    All inputs have the same rank and sizes except along `axis`.

    ```mlir
    %c = mega.concat %a, %b axis 1 : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Variadic<Mega_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$inputs `axis` $axis attr-dict `:` functional-type($inputs, $result)";
}

def Mega_BroadcastOp : Mega_CostedOp<"broadcast", [Mega_Plan<"Broadcast">, Pure,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "numpy-style broadcast to a larger shape";
  let description = [{
    Aligns shapes from the right; each input dim equals the result dim or is 1. The only way
    shapes grow implicitly elsewhere (ONNX, the DSL's `x + b`) is through this op.

    ```mlir
    %b2 = mega.broadcast %b : tensor<64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Mega_CastOp : Mega_CostedOp<"cast", [Mega_Elementwise, Mega_PartialLinear, Mega_Plan<"Cast">,
    Pure, Mega_Differentiable]> {
  let summary = "convert element type";
  let description = [{
    Same shape, another element type (float <-> float rounds to nearest even; float -> int
    truncates toward zero; i1 -> number gives 0 or 1).

    ```mlir
    %h = mega.cast %x : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Coarse ops: where the parallelism lives
//===----------------------------------------------------------------------===//

def Mega_LinearOp : Mega_CostedOp<"linear", [Mega_Plan<"Linear">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops", "getMatmulFlops"]> {
  let summary = "affine map x W^T + b (PyTorch's nn.Linear)";
  let description = [{
    `input [..., in]`, `weight [out, in]` (PyTorch's and Megatron's layout), optional
    `bias [out]` -> `[..., out]`. Splitting `weight` on dim 0 is Megatron's column-parallel
    linear, on dim 1 its row-parallel linear.

    ```mlir
    %y = mega.linear %x, %w, %b : (tensor<2x8x64xf32>, tensor<256x64xf32>, tensor<256xf32>) -> tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weight,
                       Optional<Mega_FloatTensor>:$bias);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? attr-dict `:` "
                       "functional-type(operands, results)";
}

def Mega_EmbeddingOp : Mega_CostedOp<"embedding", [Mega_Plan<"Embedding">, Pure, Mega_InferShape,
    Mega_Differentiable], ["getFlops"]> {
  let summary = "look up rows of a table by token id";
  let description = [{
    `table [V, h]`, `ids [...]` (i32 or i64, in [0, V)) -> `[..., h]`. Splitting the table on
    dim 0 is Megatron's vocab-parallel embedding.

    ```mlir
    %e = mega.embedding %wte[%ids] : tensor<128x64xf32>, tensor<2x8xi64> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$table, Mega_IntTensor:$ids,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$table `[` $ids `]` attr-dict `:` type($table) `,` type($ids) `->` "
                       "type($result)";
  let extraClassDeclaration = [{
    // After spmdize, `vocab_axes` (mesh axes of the module's mega.mesh) says the table is a
    // vocab shard: ids outside it give zero rows, so the result is a partial sum over them.
  }];
}

def Mega_LayerNormOp : Mega_CostedOp<"layer_norm", [Mega_Plan<"LayerNorm">, Pure,
    AllTypesMatch<["input", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "layer normalization over the last dim";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias` with the biased variance over the last
    dim; `weight` and the optional `bias` have shape `[h]`. Statistics are computed in at least
    fp32 whatever the storage type.

    ```mlir
    %y = mega.layer_norm %x, %g, %b eps 1.0e-05 : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weight,
                       Optional<Mega_FloatTensor>:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight (`,` $bias^)? `eps` $epsilon attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_RmsNormOp : Mega_CostedOp<"rms_norm", [Mega_Plan<"RmsNorm">, Pure,
    AllTypesMatch<["input", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "root-mean-square normalization over the last dim";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight` over the last dim; `weight` has shape `[h]`.

    ```mlir
    %y = mega.rms_norm %x, %g eps 1.0e-06 : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-6">:$epsilon);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight `eps` $epsilon attr-dict `:` "
                       "functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_AttentionOp : Mega_CostedOp<"attention", [Mega_Plan<"Attention">, Pure, Mega_InferShape,
    Mega_Differentiable, AttrSizedOperandSegments], ["getFlops", "getMatmulFlops"]> {
  let summary = "scaled dot-product attention over heads";
  let description = [{
    `query [b, s, h, d]`, `key [b, t, hk, d]`, `value [b, t, hk, dv]` -> `[b, s, h, dv]`:
    `softmax(scale * q k^T + mask) v` per head, with `scale` = 1/sqrt(d) unless given. Key/value
    heads `hk` divide `h` (grouped-query attention when hk < h). `causal` masks key positions
    after the query's (query i sees keys j <= i + t - s). The optional additive `mask` (padding
    mask, relative position bias) broadcasts to `[b, h, s, t]`. Splitting the heads dim is
    Megatron's head-parallel attention.

    `positions %qpos, %kpos` (i64 `[s]` and `[t]`, instead of `causal`) is causal attention by
    global positions: query i sees key j iff `kpos[j] <= qpos[i]`. Context parallelism
    (docs/context-parallel.md) gives each rank a permuted slice of the queries and the gathered
    keys; their positions say which pairs are causal, with nothing of size s x t stored. Unlike
    `causal`, the query dim is then parallel: it splits with its positions. A `mask` may come
    with them (padded inputs: the key padding mask, permuted like the keys).

    With `{mega.ring_axes = ["cp"]}` as well (context parallelism's ring), the keys and values
    split along the sequence with the queries: each rank's op holds its own key/value block and
    its positions, and the plan's RingAttention passes the blocks around the ring.

    ```mlir
    %o = mega.attention %q, %k, %v causal : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
    %o2 = mega.attention %q, %k, %v mask %m : (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x8x4x16xf32>
    %o3 = mega.attention %q, %k, %v positions %qp, %kp : (tensor<2x4x4x16xf32>, tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>, tensor<4xi64>, tensor<8xi64>) -> tensor<2x4x4x16xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$query, Mega_FloatTensor:$key, Mega_FloatTensor:$value,
                       Optional<Mega_FloatTensor>:$mask,
                       Optional<Mega_IntTensor>:$query_positions,
                       Optional<Mega_IntTensor>:$key_positions, UnitAttr:$causal,
                       OptionalAttr<F64Attr>:$scale);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$query `,` $key `,` $value (`mask` $mask^)? "
                       "(`positions` $query_positions^ `,` $key_positions)? (`causal` $causal^)? "
                       "attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1; // mega.ring_axes
  // The builder of the attention without positions (the input phase's, the DSL's).
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$query, "::mlir::Value":$key,
                   "::mlir::Value":$value, "::mlir::Value":$mask, "::mlir::UnitAttr":$causal,
                   "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, result, query, key, value, mask, ::mlir::Value(),
            ::mlir::Value(), causal, scale);
    }]>,
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$query, "::mlir::Value":$key,
                   "::mlir::Value":$value, "::mlir::Value":$mask, "bool":$causal,
                   "::mlir::FloatAttr":$scale), [{
      build($_builder, $_state, result, query, key, value, mask, ::mlir::Value(),
            ::mlir::Value(), causal ? $_builder.getUnitAttr() : ::mlir::UnitAttr(), scale);
    }]>
  ];
}

def Mega_GeluOp : Mega_CostedOp<"gelu", [Mega_Elementwise, Mega_Plan<"Gelu">, Pure,
    SameOperandsAndResultType, Mega_Differentiable], ["getFlops"]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `none`: `x * 0.5 * (1 + erf(x / sqrt(2)))`; `tanh`:
    `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.

    ```mlir
    %y = mega.gelu none %x : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Mega_GeluApproximation:$approximation, Mega_FloatTensor:$input);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$approximation $input attr-dict `:` type($result)";
}

def Mega_SiluOp : Mega_CostedOp<"silu", [Mega_Elementwise, Mega_Plan<"Silu">, Pure,
    SameOperandsAndResultType, Mega_Differentiable], ["getFlops"]> {
  let summary = "sigmoid linear unit x * sigmoid(x) (SwiGLU's gate)";
  let description = [{
    `x / (1 + exp(-x))` elementwise (PyTorch's `F.silu`). A SwiGLU MLP is
    `down(silu(gate(x)) * up(x))`: the product stays a `mega.mul`, elementwise like the silu.

    ```mlir
    %y = mega.silu %x : tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Mega_RopeOp : Mega_CostedOp<"rope", [Mega_Plan<"Rope">, Pure,
    AllTypesMatch<["input", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "rotary position embedding (rotate_half convention)";
  let description = [{
    `x * cos + rotate_half(x) * sin` with `rotate_half(x) = concat(-x[..., d/2:], x[..., :d/2])`
    (Hugging Face Llama's and GPT-NeoX's convention). `input [..., s, d]` with `d` even;
    `cos` and `sin` have one shape, of rank at most the input's, which broadcasts to the
    input's (aligned from the right, each dim equal or 1) and ends in `d`: a table `[s, d]`,
    or `[b, 1, s, d]` per sequence. Every dim but the last splits freely (batch, heads).

    ```mlir
    %q2 = mega.rope %q, %cos, %sin : (tensor<2x4x16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x4x16x16xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_FloatTensor:$cos, Mega_FloatTensor:$sin);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $cos `,` $sin attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mega_CrossEntropyOp : Mega_CostedOp<"cross_entropy", [Mega_Plan<"CrossEntropy">, Pure,
    Mega_InferShape, Mega_Differentiable], ["getFlops"]> {
  let summary = "per-token softmax cross-entropy";
  let description = [{
    `logits [..., V]`, `labels [...]` (i32/i64) -> per-token loss `[...]`
    `logsumexp(logits) - logits[label]`, in the logits' element type. Tokens whose label is
    `ignore_index` get loss 0. Reduction to a mean is a separate op, so that gradient
    accumulation can average over the global batch. Splitting V is Megatron's vocab-parallel
    cross-entropy (max and sum all-reduces; no rank holds full logits).

    ```mlir
    %l = mega.cross_entropy %logits, %labels : tensor<2x8x128xf32>, tensor<2x8xi64> -> tensor<2x8xf32>
    ```
  }];
  // After spmdize, `vocab_axes` (mesh axes of the module's mega.mesh) says the logits are a
  // vocab shard; the kernel reduces over those axes and the loss is the full-vocab one.
  let arguments = (ins Mega_FloatTensor:$logits, Mega_IntTensor:$labels,
                       OptionalAttr<I64Attr>:$ignore_index,
                       OptionalAttr<StrArrayAttr>:$vocab_axes);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->` "
                       "type($result)";
}

def Mega_DropoutOp : Mega_CostedOp<"dropout", [Mega_Plan<"Dropout">, Pure,
    AllTypesMatch<["input", "result"]>, Mega_Differentiable], ["getFlops"]> {
  let summary = "seeded, layout-independent dropout";
  let description = [{
    Zeroes each element with probability `ratio` and scales the rest by 1/(1 - ratio). Whether
    element i is dropped is a hash of (`seed`, `stream`, the element's global index), so the
    same elements drop however the tensor is split. `seed` is a 0-d i64 tensor (the run seed
    mixed with the step); `stream` tells dropout sites apart.

    ```mlir
    %y = mega.dropout %x, %seed ratio 1.0e-01 stream 3 : tensor<2x8x64xf32>, tensor<i64>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_ScalarI64:$seed, F64Attr:$ratio,
                       I64Attr:$stream);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $seed `ratio` $ratio `stream` $stream attr-dict `:` "
                       "type($input) `,` type($seed)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

def Mega_AdamWUpdateOp : Mega_CostedOp<"adamw_update", [Mega_Plan<"AdamW">, Pure, Mega_InferShape],
    ["getFlops"]> {
  let summary = "one AdamW step for one parameter (torch.optim.AdamW)";
  let description = [{
    With t = `step` (>= 1) and lr = `lr`:
    `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p = p - lr wd p - lr (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)`.
    Returns the new parameter, first and second moments; all four tensors share one shape.

    ```mlir
    %p2, %m2, %v2 = mega.adamw_update %p, %g, %m, %v, %lr, %step
        {beta1 = 0.9, beta2 = 0.95, eps = 1.0e-08, weight_decay = 0.1}
        : (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<f32>, tensor<i64>)
        -> (tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$param, Mega_FloatTensor:$grad,
                       Mega_FloatTensor:$exp_avg, Mega_FloatTensor:$exp_avg_sq,
                       Mega_ScalarFloat:$lr, Mega_ScalarI64:$step,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps, F64Attr:$weight_decay);
  let results = (outs Mega_FloatTensor:$new_param, Mega_FloatTensor:$new_exp_avg,
                      Mega_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

def Mega_GlobalNormOp : Mega_CostedOp<"global_norm", [Mega_Plan<"GlobalNorm">, Pure,
    Mega_InferShape], ["getFlops"]> {
  let summary = "L2 norm of all elements of all inputs";
  let description = [{
    `sqrt(sum_i sum(x_i^2))`, accumulated in f64 for f64 inputs and f32 otherwise; the
    result is a 0-d tensor of that type.

    ```mlir
    %n = mega.global_norm %g0, %g1 : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Mega_FloatTensor>:$inputs);
  let results = (outs Mega_ScalarFloat:$result);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, $result)";
  let hasVerifier = 1;
}

def Mega_ClipByNormOp : Mega_CostedOp<"clip_by_norm",
    [Mega_Plan<"ClipByNorm">, Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "scale a gradient so the global norm is at most max_norm";
  let description = [{
    `x * min(1, max_norm / (norm + 1e-6))` where `norm` is a `global_norm` result (PyTorch's
    clip_grad_norm_ and Megatron's clip_grads).

    ```mlir
    %c = mega.clip_by_norm %g, %n max 1.0 : tensor<64x64xf32>, tensor<f32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_ScalarFloat:$norm, F64Attr:$max_norm);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `,` $norm `max` $max_norm attr-dict `:` type($input) `,` type($norm)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Distribution: collectives, pipeline transfers, reshard
//===----------------------------------------------------------------------===//

class Mega_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Mega_CostedOp<mnemonic, !listconcat([Pure], traits)>;

def Mega_AllReduceOp : Mega_CollectiveOp<"all_reduce", [Mega_Plan<"AllReduce">,
    SameOperandsAndResultType, Mega_Differentiable]> {
  let summary = "reduce a per-device tensor over the devices of some mesh axes";
  let description = [{
    Every device in the group spanned by `axes` (the devices whose coordinates differ only on
    those axes) gets the reduction of all their inputs. Operates on local shapes.

    ```mlir
    %s = mega.all_reduce sum %x on #mega.mesh<dp = 2, tp = 4> axes [tp] : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_ReduceKind:$kind, Mega_NumTensor:$input, Mega_MeshAttr:$mesh,
                       StrArrayAttr:$axes);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$kind $input `on` $mesh `axes` $axes attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mega_AllGatherOp : Mega_CollectiveOp<"all_gather", [Mega_Plan<"AllGather">, Mega_InferShape,
    Mega_Differentiable]> {
  let summary = "concatenate per-device tensors along a dim over some mesh axes";
  let description = [{
    The result's `dim` is the input's times the group size; pieces are ordered by the
    devices' index in the group (major axis first). The gradient is this device's slice of the
    result's gradient; with `grad_partial` (the result feeds a computation split over the same
    axes, as in sequence parallelism) the result's gradient is a partial sum and the gradient
    is its `reduce_scatter`.

    ```mlir
    %g = mega.all_gather %x on #mega.mesh<tp = 4> axes [tp] dim 1 : tensor<2x8x16xf32> -> tensor<2x32x16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, Mega_MeshAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$dim, UnitAttr:$grad_partial);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input `on` $mesh `axes` $axes `dim` $dim (`grad_partial` $grad_partial^)? "
                       "attr-dict `:` type($input) `->` type($result)";
}

def Mega_ReduceScatterOp : Mega_CollectiveOp<"reduce_scatter", [Mega_Plan<"ReduceScatter">,
    Mega_InferShape, Mega_Differentiable]> {
  let summary = "reduce over some mesh axes, each device keeping one slice along a dim";
  let description = [{
    The input's `dim` is divisible by the group size; device i of the group gets slice i of
    the reduction.

    ```mlir
    %r = mega.reduce_scatter sum %x on #mega.mesh<tp = 4> axes [tp] dim 1 : tensor<2x32x16xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Mega_ReduceKind:$kind, Mega_NumTensor:$input, Mega_MeshAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$kind $input `on` $mesh `axes` $axes `dim` $dim attr-dict `:` "
                       "type($input) `->` type($result)";
}

def Mega_AllToAllOp : Mega_CollectiveOp<"all_to_all", [Mega_Plan<"AllToAll">, Mega_InferShape]> {
  let summary = "split along one dim, exchange, concatenate along another";
  let description = [{
    Each device splits its input into group-size pieces along `split_dim`, sends piece i to
    device i of the group, and concatenates what it receives along `concat_dim`.

    ```mlir
    %a = mega.all_to_all %x on #mega.mesh<tp = 4> axes [tp] split 2 concat 1 : tensor<2x8x64xf32> -> tensor<2x32x16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, Mega_MeshAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$split_dim, I64Attr:$concat_dim);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input `on` $mesh `axes` $axes `split` $split_dim `concat` $concat_dim "
                       "attr-dict `:` type($input) `->` type($result)";
}

def Mega_ShardSliceOp : Mega_CollectiveOp<"shard_slice", [Mega_Plan<"ShardSlice">, Mega_InferShape,
    Mega_Differentiable]> {
  let summary = "this device's slice of a replicated tensor (no communication)";
  let description = [{
    Device i of the group spanned by `axes` keeps slice i along `dim` (the dim divided by the
    group size): a replicated value entering a sharded layout. Its gradient gathers the slices'
    gradients (`all_gather`), so the gradient of the replicated value is whole on every device.

    ```mlir
    %s = mega.shard_slice %x on #mega.mesh<tp = 4> axes [tp] dim 1 : tensor<2x32x16xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, Mega_MeshAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$dim);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input `on` $mesh `axes` $axes `dim` $dim attr-dict `:` type($input) "
                       "`->` type($result)";
}

def Mega_CopyToShardsOp : Mega_CollectiveOp<"copy_to_shards", [SameOperandsAndResultType,
    Mega_Differentiable]> {
  let summary = "identity; the gradient is summed over some mesh axes";
  let description = [{
    Marks a replicated value entering a computation split over `axes` (a column-parallel linear,
    heads split over tp): the forward is the identity, and since each device's computation
    contributes only part of the value's gradient, the gradient is `all_reduce`d over `axes`
    (Megatron's `copy_to_tensor_model_parallel_region`).

    ```mlir
    %c = mega.copy_to_shards %x on #mega.mesh<tp = 4> axes [tp] : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_FloatTensor:$input, Mega_MeshAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs Mega_FloatTensor:$result);
  let assemblyFormat = "$input `on` $mesh `axes` $axes attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mega_SendOp : Mega_CostedOp<"send", [Mega_Plan<"Send">, MemoryEffects<[MemWrite]>],
    ["getFlops"]> {
  let summary = "send a tensor to the device `shift` steps along a mesh axis";
  let description = [{
    Point-to-point transfer between pipeline stages: the peer is this device with its
    coordinate on `axis` moved by `shift` (non-zero, the peer inside the mesh). The matching
    `recv` on the peer has the opposite shift and the same `tag`.

    ```mlir
    mega.send %act on #mega.mesh<pp = 4, tp = 2> along pp shift 1 tag 7 : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, Mega_MeshAttr:$mesh, StrAttr:$axis, I64Attr:$shift,
                       I64Attr:$tag);
  let assemblyFormat = "$input `on` $mesh `along` $axis `shift` $shift `tag` $tag attr-dict `:` "
                       "type($input)";
  let hasVerifier = 1;
}

def Mega_RecvOp : Mega_CostedOp<"recv", [Mega_Plan<"Recv">, MemoryEffects<[MemRead]>],
    ["getFlops"]> {
  let summary = "receive a tensor from the device `shift` steps along a mesh axis";
  let description = [{
    The counterpart of `send`: the peer's coordinate on `axis` is this device's plus `shift`.

    ```mlir
    %act = mega.recv on #mega.mesh<pp = 4, tp = 2> along pp shift -1 tag 7 : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Mega_MeshAttr:$mesh, StrAttr:$axis, I64Attr:$shift, I64Attr:$tag);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "`on` $mesh `along` $axis `shift` $shift `tag` $tag attr-dict `:` "
                       "type($result)";
  let hasVerifier = 1;
}

def Mega_ReshardOp : Mega_CostedOp<"reshard", [Pure], ["getFlops"]> {
  let summary = "change a tensor's sharding";
  let description = [{
    The only op that changes a layout: same global shape and element type, another
    `#mega.sharding` encoding (or none, meaning replicated). spmdize lowers it to the cheapest
    collective (all_gather, reduce_scatter, all_reduce, all_to_all) or to nothing.

    ```mlir
    #mesh = #mega.mesh<tp = 4>
    %r = mega.reshard %x : tensor<8x64xf32, #mega.sharding<#mesh, [[], [tp]]>> -> tensor<8x64xf32, #mega.sharding<#mesh, [[], []]>>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Asynchronous collectives (passes/schedule/LatencyHiding.cpp; docs/training-step.md "Overlap")
//===----------------------------------------------------------------------===//

// A start's result is the collective's result, in flight: only its one `mega.collective_done`
// may read it. Memory effects keep starts and dones from being merged, dropped or moved by
// generic passes; the scheduling pass places them.
class Mega_CollectiveStartOp<string mnemonic, string opcode, list<Trait> traits = []>
    : Mega_CostedOp<mnemonic, !listconcat([Mega_Plan<opcode>, MemoryEffects<[MemWrite]>],
                                          traits), ["getFlops"]>;

def Mega_AllReduceStartOp : Mega_CollectiveStartOp<"all_reduce_start", "AllReduceStart",
    [SameOperandsAndResultType]> {
  let summary = "start an all_reduce; the result is in flight until its collective_done";
  let description = [{
    `all_reduce`'s operands and result, split in two: the start posts the collective and the
    result may be read only by the one `mega.collective_done` that completes it. The latency
    hiding pass makes these from blocking `all_reduce`s.

    ```mlir
    %h = mega.all_reduce_start sum %x on #mega.mesh<dp = 2> axes [dp] : tensor<64xf32>
    %s = mega.collective_done %h : tensor<64xf32>
    ```
  }];
  let arguments = (ins Mega_ReduceKind:$kind, Mega_NumTensor:$input, Mega_MeshAttr:$mesh,
                       StrArrayAttr:$axes);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$kind $input `on` $mesh `axes` $axes attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Mega_AllGatherStartOp : Mega_CollectiveStartOp<"all_gather_start", "AllGatherStart"> {
  let summary = "start an all_gather; the result is in flight until its collective_done";
  let description = [{
    `all_gather`'s operands and result (the result's `dim` is the input's times the group
    size), completed by one `mega.collective_done`.

    ```mlir
    %h = mega.all_gather_start %x on #mega.mesh<dp = 2> axes [dp] dim 0 : tensor<8xf32> -> tensor<16xf32>
    %g = mega.collective_done %h : tensor<16xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input, Mega_MeshAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$dim);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input `on` $mesh `axes` $axes `dim` $dim attr-dict `:` type($input) "
                       "`->` type($result)";
  let hasVerifier = 1;
}

def Mega_ReduceScatterStartOp : Mega_CollectiveStartOp<"reduce_scatter_start",
    "ReduceScatterStart"> {
  let summary = "start a reduce_scatter; the result is in flight until its collective_done";
  let description = [{
    `reduce_scatter`'s operands and result (the input's `dim` divided by the group size),
    completed by one `mega.collective_done`.

    ```mlir
    %h = mega.reduce_scatter_start sum %x on #mega.mesh<dp = 2> axes [dp] dim 0 : tensor<16xf32> -> tensor<8xf32>
    %r = mega.collective_done %h : tensor<8xf32>
    ```
  }];
  let arguments = (ins Mega_ReduceKind:$kind, Mega_NumTensor:$input, Mega_MeshAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs Mega_NumTensor:$result);
  let assemblyFormat = "$kind $input `on` $mesh `axes` $axes `dim` $dim attr-dict `:` "
                       "type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Mega_CollectiveDoneOp : Mega_CostedOp<"collective_done", [Mega_Plan<"CollectiveDone">,
    SameOperandsAndResultType, MemoryEffects<[MemRead, MemWrite]>], ["getFlops"]> {
  let summary = "complete an asynchronous collective: its result";
  let description = [{
    The operand is the result of an `all_reduce_start`, `all_gather_start` or
    `reduce_scatter_start` in the same block (its only use); the result is the collective's.
    Every start is completed in the function that starts it.

    ```mlir
    %s = mega.collective_done %h : tensor<64xf32>
    ```
  }];
  let arguments = (ins Mega_Tensor:$input);
  let results = (outs Mega_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

include "ir/MegaGradOps.td"
include "ir/MegaMoeOps.td"
include "ir/MegaOptimOps.td"

#endif // MEGA_OPS_TD
