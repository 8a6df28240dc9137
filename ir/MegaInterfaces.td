// Op interfaces of the `mega` dialect: the cost every op reports.
#ifndef MEGA_INTERFACES_TD
#define MEGA_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Mega_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mega";
  let description = [{
    The work an op does for the shapes it has: floating-point operations, split into those a
    GEMM unit (tensor cores, BLAS) executes and the rest, and bytes read and written. The
    planner's cost model and `megac describe` are built on it. Defaults: one flop per result
    element, no GEMM flops, every operand read once and every result written once.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations, GEMM ones included.", "int64_t", "getFlops",
      (ins), "", [{ return ::mega::cost::defaultFlops($_op); }]>,
    InterfaceMethod<"The part of getFlops() that is matrix multiplication.", "int64_t",
      "getMatmulFlops", (ins), "", [{ return 0; }]>,
    InterfaceMethod<"Bytes of operands read.", "int64_t", "getBytesRead", (ins), "",
      [{ return ::mega::cost::operandBytes($_op); }]>,
    InterfaceMethod<"Bytes of results written.", "int64_t", "getBytesWritten", (ins), "",
      [{ return ::mega::cost::resultBytes($_op); }]>,
  ];
}

#endif // MEGA_INTERFACES_TD
