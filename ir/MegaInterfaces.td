// Op interfaces of the `mega` dialect: the cost every op reports, the gradient rules, the
// sharding rules and the plan opcode an op lowers to.
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

def Mega_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mega";
  let description = [{
    The vector-Jacobian product of a differentiable op, built in mega ops: given the gradients
    of the op's results, the gradients of its operands. Autodiff (passes/training) is a generic
    reverse walk that calls this on every op between a parameter and the loss.
  }];
  let methods = [
    InterfaceMethod<[{
        Appends to `operandGrads` one value per operand (in operand order): the gradient of
        the operand, of the operand's shape and element type, or null where the operand has
        none (integer ids, i1 conditions, seeds). `resultGrads` has one entry per result; a
        null entry means that result's gradient is zero. `b` inserts where the gradient ops go
        (after the forward op; forward values dominate it). Failure means a diagnostic was
        emitted on the op (a case the rule does not cover).
      }], "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$b, "::mlir::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>,
  ];
}

def Mega_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mega";
  let description = [{
    How an op's operands and results decompose into factors (ir/ShardingRule.h): the one input
    sharding propagation (passes/partition) needs. The default is the op's rule in
    ir/ShardingRules.cpp; an op with an unusual sharded form overrides it.
  }];
  let methods = [
    InterfaceMethod<"The op's sharding rule for its current shapes.", "::mega::ShardingRule",
      "getShardingRule", (ins), "", [{ return ::mega::sharding::ruleOf($_op); }]>,
  ];
}

def Mega_PlanOpInterface : OpInterface<"PlanOpInterface"> {
  let cppNamespace = "::mega";
  let description = [{
    The plan opcode an op lowers to, by its name in runtime/plan/Opcodes.def (the IR knows no
    runtime header). Ops declare it with `Mega_Plan<"Name">`. Codegen lowers an op whose opcode
    takes no attributes from the name alone; a test checks every name against the opcode table
    (it exists, the arity matches, Mega_Elementwise agrees with the Elementwise flag).
  }];
  let methods = [
    StaticInterfaceMethod<"The plan opcode's name (\"Silu\").", "::llvm::StringRef",
      "getPlanOpcode">,
  ];
}

#endif // MEGA_INTERFACES_TD
