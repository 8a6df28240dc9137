// The mega ops' ODS against the plan opcode table (runtime/plan/Opcodes.def): every registered op
// that lowers to an instruction names an opcode (Mega_Plan<"Name">) that exists, with the same
// operand and result counts, and carries Mega_Elementwise exactly when the opcode is flagged
// Elementwise; elementwise ops get the elementwise sharding rule from that trait.
#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"
#include "runtime/plan/Opcodes.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

namespace pl = megac::plan;
using mlir::RegisteredOperationName;

namespace {

/// A count range from the ODS traits: max -1 for no upper bound.
struct Range {
  int min = -2, max = -2; // -2: no count trait found
};

template <int... N>
Range operandRange(RegisteredOperationName name, std::integer_sequence<int, N...>) {
  namespace T = mlir::OpTrait;
  if (name.hasTrait<T::ZeroOperands>())
    return {0, 0};
  if (name.hasTrait<T::OneOperand>())
    return {1, 1};
  if (name.hasTrait<T::VariadicOperands>())
    return {0, -1};
  Range r;
  ((name.hasTrait<T::NOperands<N>::template Impl>() ? (r = {N, N}, 0) : 0), ...);
  ((name.hasTrait<T::AtLeastNOperands<N>::template Impl>() ? (r = {N, -1}, 0) : 0), ...);
  if (name.hasTrait<T::AtLeastNOperands<1>::template Impl>())
    r = {1, -1};
  return r;
}

template <int... N>
Range resultRange(RegisteredOperationName name, std::integer_sequence<int, N...>) {
  namespace T = mlir::OpTrait;
  if (name.hasTrait<T::ZeroResults>())
    return {0, 0};
  if (name.hasTrait<T::OneResult>())
    return {1, 1};
  if (name.hasTrait<T::VariadicResults>())
    return {0, -1};
  Range r;
  ((name.hasTrait<T::NResults<N>::template Impl>() ? (r = {N, N}, 0) : 0), ...);
  ((name.hasTrait<T::AtLeastNResults<N>::template Impl>() ? (r = {N, -1}, 0) : 0), ...);
  if (name.hasTrait<T::AtLeastNResults<1>::template Impl>())
    r = {1, -1};
  return r;
}

/// The counts NOperands/NResults and AtLeastN... come with (ZeroOperands, OneOperand below 2).
using Counts = std::integer_sequence<int, 2, 3, 4, 5, 6, 7, 8, 9>;

/// Whether the table's [min, max] (max kVariadic: unbounded) is what ODS declares: the same fixed
/// count; for AtLeastN (optional operands or results) the same minimum and a larger maximum; for
/// variadic ones no maximum.
bool agrees(Range ods, int min, int max) {
  if (ods.max == ods.min)
    return min == ods.min && max == ods.max;
  if (ods.min > 0) // AtLeastN
    return min == ods.min && (max == pl::kVariadic || max > min);
  return max == pl::kVariadic && min >= ods.min;
}

std::string str(Range r) {
  return "[" + std::to_string(r.min) + ", " + (r.max < 0 ? "any" : std::to_string(r.max)) + "]";
}

/// The mega ops that become no instruction: constants become constant buffers, reshape,
/// copy_to_shards and add_aux_loss alias their input's bytes, reshard is lowered by spmdize
/// before codegen.
const std::set<std::string> kNotInstructions = {"mega.constant", "mega.reshape",
                                                "mega.copy_to_shards", "mega.reshard",
                                                "mega.add_aux_loss"};

} // namespace

TEST(OdsOpcodes, EveryLowerableOpNamesAnOpcodeOfTheTableWithItsArityAndElementwiseFlag) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mega::MegaDialect>();
  int checked = 0;
  std::set<std::string> named;
  for (RegisteredOperationName name : ctx.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "mega")
      continue;
    std::string op = name.getStringRef().str();
    SCOPED_TRACE(op);
    auto *iface = name.getInterface<mega::PlanOpInterface>();
    if (kNotInstructions.count(op)) {
      EXPECT_EQ(iface, nullptr) << "lowers to no instruction, yet names a plan opcode";
      continue;
    }
    ASSERT_NE(iface, nullptr) << "names no plan opcode: give it Mega_Plan<\"Name\"> in ODS";
    EXPECT_TRUE(name.hasTrait<mega::OpTrait::PlanOpcode>());
    std::string opcode = iface->getPlanOpcode().str();
    std::optional<pl::Opcode> known = pl::opcodeNamed(opcode);
    ASSERT_TRUE(known) << "names plan opcode '" << opcode << "', which Opcodes.def lacks";
    named.insert(opcode);
    const pl::OpcodeInfo &info = *pl::opcodeInfo(*known);
    Range operands = operandRange(name, Counts{}), results = resultRange(name, Counts{});
    ASSERT_NE(operands.min, -2) << "no operand count trait";
    ASSERT_NE(results.min, -2) << "no result count trait";
    EXPECT_TRUE(agrees(operands, info.minInputs, info.maxInputs))
        << "ODS operands " << str(operands) << ", " << info.name << " inputs [" << info.minInputs
        << ", " << info.maxInputs << "]";
    EXPECT_TRUE(agrees(results, info.minOutputs, info.maxOutputs))
        << "ODS results " << str(results) << ", " << info.name << " outputs [" << info.minOutputs
        << ", " << info.maxOutputs << "]";
    EXPECT_EQ(name.hasTrait<mega::OpTrait::Elementwise>(), info.has(pl::opflag::Elementwise))
        << "Mega_Elementwise and " << info.name << "'s Elementwise flag disagree";
    ++checked;
  }
  EXPECT_GT(checked, 50);
  // Every opcode but Copy (reshapes alias, a copy of bytes is codegen's own) and the ring
  // attention pair (attention and attention_grad with mega.ring_axes, codegen's choice) has an op.
  for (const pl::OpcodeInfo &info : pl::kOpcodes) {
    if (info.op != pl::Opcode::Copy && info.op != pl::Opcode::RingAttention &&
        info.op != pl::Opcode::RingAttentionGrad) {
      EXPECT_TRUE(named.count(info.name)) << "no mega op lowers to " << info.name;
    }
  }
}

TEST(OdsOpcodes, ElementwiseOpsGetTheElementwiseShardingRuleFromTheirTraits) {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mega::MegaDialect>();
  mlir::OpBuilder b(&ctx);
  auto type = mlir::RankedTensorType::get({4, 8}, b.getF32Type());
  // Ops in a detached block are enough for the rule: it reads only shapes.
  mlir::Block block;
  block.addArgument(type, b.getUnknownLoc());
  block.addArgument(type, b.getUnknownLoc());
  b.setInsertionPointToEnd(&block);
  auto check = [&](mlir::Operation *op, mega::PartialRule partial) {
    SCOPED_TRACE(op->getName().getStringRef().str());
    mega::ShardingRule rule = mega::sharding::ruleOf(op);
    EXPECT_TRUE(rule.known);
    EXPECT_EQ(rule.partial, partial);
    ASSERT_EQ(rule.results.size(), 1u);
    ASSERT_EQ(rule.operands.size(), op->getNumOperands());
    for (const auto &operand : rule.operands)
      EXPECT_EQ(operand, rule.results[0]); // every dim shares the result's factor
  };
  mlir::Value x = block.getArgument(0), y = block.getArgument(1);
  check(mega::TanhOp::create(b, b.getUnknownLoc(), type, x), mega::PartialRule::none);
  check(mega::SiluOp::create(b, b.getUnknownLoc(), type, x), mega::PartialRule::none);
  check(mega::NegOp::create(b, b.getUnknownLoc(), type, x), mega::PartialRule::linear);
  check(mega::AddOp::create(b, b.getUnknownLoc(), type, x, y), mega::PartialRule::sum);
  check(mega::MulOp::create(b, b.getUnknownLoc(), type, x, y), mega::PartialRule::none);
  check(mega::GeluGradOp::create(b, b.getUnknownLoc(), type, mega::GeluApproximation::none, x, y),
        mega::PartialRule::none);
}
