// Attributes of the `mega` dialect: enums, the device mesh, shardings and parameter init specs.
#ifndef MEGA_ATTRS_TD
#define MEGA_ATTRS_TD

include "ir/MegaDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/TensorEncoding.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Mega_ReduceKind : I32EnumAttr<"ReduceKind", "how values are combined", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>,
    I32EnumAttrCase<"max", 2>, I32EnumAttrCase<"min", 3>]> {
  let cppNamespace = "::mega";
}

def Mega_ComparePredicate : I32EnumAttr<"ComparePredicate", "elementwise comparison", [
    I32EnumAttrCase<"eq", 0>, I32EnumAttrCase<"ne", 1>, I32EnumAttrCase<"lt", 2>,
    I32EnumAttrCase<"le", 3>, I32EnumAttrCase<"gt", 4>, I32EnumAttrCase<"ge", 5>]> {
  let cppNamespace = "::mega";
}

def Mega_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "the GELU formula: exact (erf) or the tanh approximation", [
    I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"tanh", 1>]> {
  let cppNamespace = "::mega";
}

def Mega_InitKind : I32EnumAttr<"InitKind", "how a parameter is initialized", [
    I32EnumAttrCase<"normal", 0>, I32EnumAttrCase<"zeros", 1>, I32EnumAttrCase<"ones", 2>]> {
  let cppNamespace = "::mega";
}

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def Mega_MeshAttr : AttrDef<Mega_Dialect, "Mesh"> {
  let mnemonic = "mesh";
  let summary = "a named, ordered grid of devices";
  let description = [{
    The logical device grid that shardings and collectives refer to: named axes with sizes,
    listed from the slowest-varying to the fastest-varying, so the rank of the device at mesh
    coordinates (c0, ..., cn) is the row-major index `c0 * (s1 * ... * sn) + ... + cn`.

    ```mlir
    #mega.mesh<pp = 2, dp = 2, tp = 4>   // 16 devices; tp ranks adjacent (Megatron's order)
    ```

    Axis names are unique; sizes are at least 1.
  }];
  let parameters = (ins ArrayRefParameter<"::mlir::StringAttr", "axis names">:$axisNames,
                        ArrayRefParameter<"int64_t", "axis sizes">:$axisSizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The index of `name` among the axes, or std::nullopt.
    std::optional<unsigned> findAxis(::llvm::StringRef name) const;
    /// Number of devices in the mesh.
    int64_t getNumDevices() const;
    /// Number of devices in the group spanned by `axes` (product of their sizes).
    int64_t getGroupSize(::llvm::ArrayRef<::mlir::StringAttr> axes) const;
  }];
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

def Mega_ShardingAttr : AttrDef<Mega_Dialect, "Sharding",
    [DeclareAttrInterfaceMethods<VerifiableTensorEncoding>]> {
  let mnemonic = "sharding";
  let summary = "how a global tensor is laid out over a mesh";
  let description = [{
    A tensor encoding. For each tensor dim, the list of mesh axes it is split over (major axis
    first); mesh axes not named anywhere replicate the tensor; `partial = <kind>(axes)` says the
    values on those axes are pending a reduction of that kind (the result of a contraction over
    a sharded dim, for example).

    As a function from tensor index to owners: element (i0, ..., ik) of a tensor whose dim d has
    global size Nd and is split over axes (a, b) with sizes (A, B) lives on every device whose
    coordinates satisfy `ca * B + cb == i_d / (Nd / (A * B))`, for every sharded dim, and any
    coordinate on the other axes.

    ```mlir
    #mesh = #mega.mesh<dp = 2, tp = 4>
    // [8, 16, 64]: batch split in 2 over dp, hidden split in 4 over tp, replicated otherwise.
    // Device (dp=1, tp=2) holds [4:8, 0:16, 32:48].
    tensor<8x16x64xf32, #mega.sharding<#mesh, [[dp], [], [tp]]>>
    // Row-parallel linear output before its all-reduce: full shape on every tp rank, each
    // holding a partial sum.
    tensor<8x16x64xf32, #mega.sharding<#mesh, [[dp], [], []], partial = sum(tp)>>
    ```

    Each mesh axis appears at most once (in dims or partial); every sharded dim's size is
    divisible by the product of its axes' sizes.
  }];
  let parameters = (ins "MeshAttr":$mesh,
                        "::mlir::ArrayAttr":$dimAxes,
                        ArrayRefParameter<"::mlir::StringAttr", "partial axes">:$partialAxes,
                        "ReduceKind":$partialKind);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The mesh axes dim `dim` is split over.
    ::llvm::SmallVector<::mlir::StringAttr> getAxesOfDim(unsigned dim) const;
    /// The shape one device holds of a tensor with this global shape.
    ::llvm::SmallVector<int64_t> getLocalShape(::llvm::ArrayRef<int64_t> globalShape) const;
  }];
}

//===----------------------------------------------------------------------===//
// Parameter initialization
//===----------------------------------------------------------------------===//

def Mega_InitAttr : AttrDef<Mega_Dialect, "Init"> {
  let mnemonic = "init";
  let summary = "how a parameter's initial values are made";
  let description = [{
    Attached to parameter arguments (`mega.init`). Values depend only on the run's seed, the
    parameter's name and each element's global index, never on the layout, so a model split
    any way starts from the same weights (see runtime/init/ParamInit.h).

    ```mlir
    #mega.init<normal, std = 0.02>
    #mega.init<zeros>
    #mega.init<ones>
    ```
  }];
  let parameters = (ins "InitKind":$kind, APFloatParameter<"standard deviation">:$stddev);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

#endif // MEGA_ATTRS_TD
