// The `mega` dialect: its declaration, the base class of its ops and its type constraints.
#ifndef MEGA_DIALECT_TD
#define MEGA_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mega_Dialect : Dialect {
  let name = "mega";
  let summary = "Transformer training graphs: low-level ONNX-like ops, coarse parallel ops, "
                "optimizer ops and collectives";
  let description = [{
    One dialect at two levels. Low-level ops (elementwise, `matmul`, `gather`, `reduce`,
    `reshape`, ...) are what the ONNX importer maps onto one to one. Coarse ops (`linear`,
    `embedding`, `layer_norm`, `attention`, `cross_entropy`, ...) are where parallelism lives:
    `passes/input` raises low-level patterns into them and the graph DSL emits them directly.
    Optimizer ops, collectives, pipeline `send`/`recv` and `reshard` express the training step
    and its distribution.

    Tensors are builtin ranked tensors with static shapes. Before partitioning, a tensor may
    carry a `#mega.sharding` encoding saying how it is laid out over a `#mega.mesh`.
  }];
  let cppNamespace = "::mega";
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Mega_Op<string mnemonic, list<Trait> traits = []> :
    Op<Mega_Dialect, mnemonic, traits>;

// Element types megac computes in: f64 is the reference precision for equivalence tests.

def Mega_FloatTensor : StaticShapeTensorOf<[F64, F32, BF16, F16]>;
def Mega_IntTensor : StaticShapeTensorOf<[I64, I32]>;
def Mega_BoolTensor : StaticShapeTensorOf<[I1]>;
def Mega_Tensor : StaticShapeTensorOf<[F64, F32, BF16, F16, I64, I32, I1]>;
def Mega_NumTensor : StaticShapeTensorOf<[F64, F32, BF16, F16, I64, I32]>;
def Mega_ScalarFloat : 0DTensorOf<[F64, F32]>;
def Mega_ScalarI64 : 0DTensorOf<[I64]>;

#endif // MEGA_DIALECT_TD
