// The opcode table (runtime/plan/Opcodes.def) against everything that must cover it: every
// opcode of plan.fbs has a row, a signature, a validator rule, a CPU handler and a CUDA handler
// (checked without a device), the fusion writes exactly the Fusible opcodes, the flags are
// coherent, and the numbers match the committed lock file (append-only).
#include "runtime/exec/CpuHandlers.h"
#include "runtime/plan/OpSignatures.h"
#include "runtime/plan/Opcodes.h"
#include "runtime/plan/PlanRules.h"
#include "runtime/plan/PlanValidator.h"

#ifdef MEGAC_TEST_CUDA
#include "runtime/cuda/CudaDispatch.h"
#include "runtime/cuda/Fusion.h"
#endif

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace megac;
using namespace megac::runtime;
namespace fb = megac::plan;

namespace {

/// Every value of plan.fbs's generated enum.
std::vector<fb::Opcode> generatedOpcodes() {
  return {std::begin(fb::EnumValuesOpcode()), std::end(fb::EnumValuesOpcode())};
}

struct LockEntry {
  int number;
  std::string name;
};

/// The "NUMBER NAME" lines of a lock file (comments and blank lines skipped); `error` says what
/// is malformed.
std::vector<LockEntry> readLock(std::istream &in, std::string &error) {
  std::vector<LockEntry> entries;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    if (line.empty() || line[0] == '#')
      continue;
    std::istringstream fields(line);
    LockEntry e;
    std::string extra;
    if (!(fields >> e.number >> e.name) || (fields >> extra)) {
      error = "line " + std::to_string(lineNo) + " is not \"NUMBER NAME\": " + line;
      return {};
    }
    entries.push_back(e);
  }
  return entries;
}

/// What keeps the numbering append-only: lock entry k is number k, and the table's opcode with
/// that number has that name; the table's opcodes past the lock are to be appended to it.
/// Returns the problems, one per line ("" when the table and the lock agree).
std::string checkAgainstLock(const std::vector<LockEntry> &lock) {
  std::ostringstream problems;
  for (size_t k = 0; k < lock.size(); ++k) {
    const LockEntry &e = lock[k];
    if (e.number != static_cast<int>(k)) {
      problems << "opcodes.lock: entry " << k << " is number " << e.number
               << " (entries are 0, 1, 2, ... in order)\n";
      continue;
    }
    if (k >= fb::kOpcodeCount) {
      problems << "opcode " << e.number << " " << e.name
               << " is in opcodes.lock but no longer in Opcodes.def: numbers are never removed\n";
      continue;
    }
    if (e.name != fb::kOpcodes[k].name)
      problems << "opcode " << e.number << " is " << fb::kOpcodes[k].name << " in Opcodes.def but "
               << e.name
               << " in opcodes.lock: opcodes are never renumbered (plans on disk carry the "
                  "numbers); append new ones at the end\n";
  }
  for (size_t k = lock.size(); k < fb::kOpcodeCount; ++k)
    problems << "opcode " << k << " " << fb::kOpcodes[k].name
             << " is not in opcodes.lock: append the line \"" << k << " " << fb::kOpcodes[k].name
             << "\" to runtime/plan/opcodes.lock\n";
  return problems.str();
}

} // namespace

TEST(OpcodeTable, HasEveryGeneratedOpcodeInNumberOrderUnderItsName) {
  std::vector<fb::Opcode> generated = generatedOpcodes();
  ASSERT_EQ(generated.size(), fb::kOpcodeCount);
  for (size_t k = 0; k < generated.size(); ++k) {
    const fb::OpcodeInfo *info = fb::opcodeInfo(generated[k]);
    ASSERT_NE(info, nullptr) << fb::EnumNameOpcode(generated[k]);
    EXPECT_EQ(info, &fb::kOpcodes[k]);
    EXPECT_EQ(fb::opcodeIndex(generated[k]), k);
    EXPECT_STREQ(info->name, fb::EnumNameOpcode(generated[k]));
    EXPECT_EQ(fb::opcodeNamed(info->name), generated[k]);
  }
  EXPECT_EQ(fb::opcodeNamed("NoSuchOp"), std::nullopt);
}

TEST(OpcodeTable, EveryOpcodeHasASignatureAValidatorRuleAndACpuHandler) {
  for (fb::Opcode op : generatedOpcodes()) {
    SCOPED_TRACE(fb::EnumNameOpcode(op));
    const fb::OpcodeInfo &info = *fb::opcodeInfo(op);
    OpSignature sig = signatureOf(op);
    EXPECT_EQ(sig.minInputs, info.minInputs);
    EXPECT_EQ(sig.maxInputs, info.maxInputs);
    EXPECT_EQ(sig.attrs, info.attrs);
    EXPECT_GE(sig.minInputs, 0);
    EXPECT_TRUE(PlanValidator::hasRule(op));
    EXPECT_NE(exec::cpuHandler(op).run, nullptr) << "no CPU handler (runtime/exec/CpuHandlers.cpp)";
  }
}

TEST(OpcodeTable, EveryOpcodeHasACudaHandler) {
#ifndef MEGAC_TEST_CUDA
  GTEST_SKIP() << "the CUDA backend is not built (MEGAC_CUDA off): its handlers are not checked";
#else
  for (fb::Opcode op : generatedOpcodes())
    EXPECT_TRUE(cuda::exec::hasHandler(op))
        << fb::EnumNameOpcode(op)
        << ": no CUDA handler (runtime/cuda/CudaDispatch.cpp, or no formula in "
           "kernels/ElementwiseMath.def)";
#endif
}

TEST(OpcodeTable, FusionWritesExactlyTheFusibleOpcodes) {
#ifndef MEGAC_TEST_CUDA
  GTEST_SKIP() << "the CUDA backend is not built (MEGAC_CUDA off)";
#else
  for (const fb::OpcodeInfo &info : fb::kOpcodes)
    EXPECT_EQ(cuda::hasFusionRule(info.op), info.has(fb::opflag::Fusible)) << info.name;
  EXPECT_TRUE(cuda::hasFusionRule(fb::Opcode::Silu)); // SwiGLU's silu * up fuses
#endif
}

TEST(OpcodeTable, FlagsAndKernelsAreCoherent) {
  for (const fb::OpcodeInfo &info : fb::kOpcodes) {
    SCOPED_TRACE(info.name);
    EXPECT_TRUE(info.maxInputs == fb::kVariadic || info.maxInputs >= info.minInputs);
    if (info.maxOutputs == fb::kVariadic) { // three outputs per four inputs (AdamWMulti)
      EXPECT_EQ(info.maxInputs, fb::kVariadic);
    } else {
      EXPECT_GE(info.maxOutputs, info.minOutputs);
    }
    if (info.has(fb::opflag::PositionPair)) {
      // a mask (one more output, at most), a position pair (none), or both
      EXPECT_EQ(info.maxInputs, info.minInputs + 3);
      EXPECT_LE(info.maxOutputs - info.minOutputs, 1);
    } else if (info.minOutputs != info.maxOutputs && info.maxOutputs != fb::kVariadic) {
      // each optional input adds an output
      EXPECT_EQ(info.maxOutputs - info.minOutputs, info.maxInputs - info.minInputs);
    }
    if (info.has(fb::opflag::Fusible)) {
      EXPECT_TRUE(info.has(fb::opflag::Elementwise));
    }
    if (info.has(fb::opflag::Elementwise)) {
      EXPECT_TRUE(info.has(fb::opflag::InPlace));
      EXPECT_EQ(info.maxOutputs, 1);
      EXPECT_EQ(info.minOutputs, 1);
    }
    if (info.kernel == fb::OpKernel::Unary) {
      EXPECT_TRUE(info.minInputs == 1 && info.maxInputs == 1 && info.attrs == fb::Attrs::NONE);
    }
    if (info.kernel == fb::OpKernel::Binary) {
      EXPECT_TRUE(info.minInputs == 2 && info.maxInputs == 2 && info.attrs == fb::Attrs::NONE);
    }
    if (info.has(fb::opflag::Collective)) {
      EXPECT_EQ(info.attrs, fb::Attrs::CollectiveAttrs);
    }
    if (info.has(fb::opflag::PointToPoint)) {
      EXPECT_EQ(info.attrs, fb::Attrs::P2PAttrs);
    }
    if (info.has(fb::opflag::OptionalAttrs)) {
      EXPECT_NE(info.attrs, fb::Attrs::NONE);
    }
    // The CPU executor traces communication on the communicator's lane, not as kernels.
    EXPECT_EQ(exec::cpuHandler(info.op).communicates,
              (info.has(fb::opflag::Collective) || info.has(fb::opflag::PointToPoint)) &&
                  info.op != fb::Opcode::ShardSlice);
  }
}

TEST(OpcodeTable, PlanRulesComeFromTheTable) {
  EXPECT_TRUE(fb::writesInPlace(fb::Opcode::Silu));
  EXPECT_TRUE(fb::writesInPlace(fb::Opcode::AllReduce));
  EXPECT_FALSE(fb::writesInPlace(fb::Opcode::Rope));
  EXPECT_FALSE(fb::writesInPlace(fb::Opcode::Transpose));
  EXPECT_EQ(fb::outputCount(fb::Opcode::AttentionGrad, 4), 3);
  EXPECT_EQ(fb::outputCount(fb::Opcode::AttentionGrad, 5), 4);
  EXPECT_EQ(fb::outputCount(fb::Opcode::AttentionGrad, 6), 3); // query and key positions
  EXPECT_EQ(fb::outputCount(fb::Opcode::AttentionGrad, 7), 4); // a mask and positions: dmask
  EXPECT_EQ(fb::outputCount(fb::Opcode::Attention, 5), 1);
  EXPECT_EQ(fb::outputCount(fb::Opcode::Attention, 6), 1);
  EXPECT_EQ(fb::outputCount(fb::Opcode::AdamW, 6), 3);
  EXPECT_EQ(fb::outputCount(fb::Opcode::Send, 1), 0);
  EXPECT_EQ(fb::outputCount(fb::Opcode::GlobalNorm, 7), 1);
  // lr, step, then (p, g, m, v) per tensor -> (p, m, v) per tensor.
  EXPECT_TRUE(fb::writesInPlace(fb::Opcode::AdamWMulti));
  EXPECT_EQ(fb::outputCount(fb::Opcode::AdamWMulti, 6), 3);
  EXPECT_EQ(fb::outputCount(fb::Opcode::AdamWMulti, 14), 9);
}

TEST(OpcodeTable, AnUnknownNumberHasNoRowSignatureOrHandler) {
  auto unknown = static_cast<fb::Opcode>(fb::kOpcodeCount + 100);
  EXPECT_EQ(fb::opcodeInfo(unknown), nullptr);
  EXPECT_EQ(fb::opcodeIndex(unknown), std::nullopt);
  EXPECT_EQ(signatureOf(unknown).minInputs, -1);
  EXPECT_FALSE(PlanValidator::hasRule(unknown));
  EXPECT_EQ(exec::cpuHandler(unknown).run, nullptr);
  EXPECT_FALSE(fb::writesInPlace(unknown));
#ifdef MEGAC_TEST_CUDA
  EXPECT_FALSE(cuda::exec::hasHandler(unknown));
  EXPECT_FALSE(cuda::hasFusionRule(unknown));
#endif
}

TEST(OpcodeTable, NumbersMatchTheCommittedLockFile) {
  std::ifstream in(MEGAC_OPCODES_LOCK);
  ASSERT_TRUE(in) << "cannot open " << MEGAC_OPCODES_LOCK;
  std::string error;
  std::vector<LockEntry> lock = readLock(in, error);
  ASSERT_TRUE(error.empty()) << MEGAC_OPCODES_LOCK << ": " << error;
  ASSERT_FALSE(lock.empty());
  std::string problems = checkAgainstLock(lock);
  EXPECT_TRUE(problems.empty()) << problems;
}

TEST(OpcodeTable, TheLockCheckCatchesRenumberingRemovalAndUnlockedOpcodes) {
  // The check itself, on edited copies of the table's own lock.
  std::vector<LockEntry> lock;
  for (const fb::OpcodeInfo &info : fb::kOpcodes)
    lock.push_back({static_cast<int>(&info - fb::kOpcodes.data()), info.name});
  EXPECT_EQ(checkAgainstLock(lock), "");
  // Two opcodes swapped: a renumbering (as is an opcode inserted in the middle).
  std::vector<LockEntry> renumbered = lock;
  std::swap(renumbered[1].name, renumbered[2].name);
  EXPECT_NE(checkAgainstLock(renumbered).find("never renumbered"), std::string::npos);
  std::vector<LockEntry> longer = lock;
  longer.push_back({static_cast<int>(lock.size()), "Removed"});
  EXPECT_NE(checkAgainstLock(longer).find("no longer in Opcodes.def"), std::string::npos);
  std::vector<LockEntry> shorter(lock.begin(), lock.end() - 1);
  EXPECT_NE(checkAgainstLock(shorter).find("append the line"), std::string::npos);
  std::istringstream bad("0 Neg\n1 Abs extra\n");
  std::string error;
  readLock(bad, error);
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
}
