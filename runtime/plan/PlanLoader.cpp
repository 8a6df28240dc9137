// Loading a plan: FlatBuffers verification and the format version here, then PlanValidator's
// checks of every index, size, attribute, in-place write and rank entry, so the executor can
// index buffers and read attributes without checking again. Also how errors name a program,
// function and instruction.
#include "runtime/plan/PlanLoader.h"

#include "runtime/plan/PlanSeal.h"
#include "runtime/plan/PlanValidator.h"
#include "runtime/plan/plan_generated.h"
#include "support/Files.h"

namespace megac::runtime {

namespace fb = megac::plan;

const fb::Plan &LoadedPlan::plan() const { return *fb::GetPlan(bytes_.data()); }

std::string describeProgram(const fb::Program &program, size_t programIndex) {
  if (program.name() && program.name()->size())
    return "program '" + program.name()->str() + "'";
  return "program " + std::to_string(programIndex);
}

std::string describeFunction(const fb::Program &program, size_t programIndex,
                             size_t functionIndex) {
  std::string text = describeProgram(program, programIndex);
  const auto *functions = program.functions();
  if (functions && functionIndex < functions->size()) {
    const fb::Function *fn = functions->Get(static_cast<flatbuffers::uoffset_t>(functionIndex));
    if (fn->name() && fn->name()->size())
      return text + ", function '" + fn->name()->str() + "'";
  }
  return text + ", function " + std::to_string(functionIndex);
}

std::string describeInstruction(const fb::Program &program, size_t programIndex,
                                size_t functionIndex, size_t instructionIndex) {
  std::string text = describeFunction(program, programIndex, functionIndex) + ", instruction " +
                     std::to_string(instructionIndex);
  const auto *functions = program.functions();
  if (!functions || functionIndex >= functions->size())
    return text;
  const auto *instructions =
      functions->Get(static_cast<flatbuffers::uoffset_t>(functionIndex))->instructions();
  if (!instructions || instructionIndex >= instructions->size())
    return text;
  const fb::Instruction *inst =
      instructions->Get(static_cast<flatbuffers::uoffset_t>(instructionIndex));
  const char *op = fb::EnumNameOpcode(inst->op());
  text += " (";
  text += *op ? op : ("opcode " + std::to_string(static_cast<int>(inst->op()))).c_str();
  if (inst->location() && inst->location()->size())
    text += " at '" + inst->location()->str() + "'";
  return text + ")";
}

namespace {

/// Versions 2 (one rank, no collectives) and 3 (partitioned) are read as they are; the validator
/// refuses an opcode or schedule step newer than the plan's version (PlanValidator::
/// minimumVersion).
bool supportedVersion(uint32_t version) {
  return version >= 2 && version <= static_cast<uint32_t>(fb::FormatVersion::Current);
}

std::string versionError(uint32_t version) {
  return "plan format version " + std::to_string(version) +
         " is not supported (this runtime reads versions 2 to " +
         std::to_string(static_cast<uint32_t>(fb::FormatVersion::Current)) +
         "); recompile the model";
}

} // namespace

StatusOr<LoadedPlan> loadPlanFromBytes(std::vector<uint8_t> bytes, std::string path) {
  std::string source = path.empty() ? "(from memory)" : "'" + path + "'";
  auto error = [&](const std::string &what) {
    return Status::error("plan " + source + ": " + what);
  };
  if (bytes.size() < 8 || !flatbuffers::BufferHasIdentifier(bytes.data(), fb::PlanIdentifier()))
    return error("not a megac plan (no \"MPLN\" file identifier)");
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), /*max_depth=*/64,
                                 /*max_tables=*/10'000'000);
  if (!fb::VerifyPlanBuffer(verifier)) {
    // A plan of another version may not verify against this schema: say "version" rather
    // than "corrupt" when the root table and its version field alone are in bounds.
    flatbuffers::Verifier shallow(bytes.data(), bytes.size());
    const fb::Plan *root = fb::GetPlan(bytes.data());
    const auto *table = reinterpret_cast<const flatbuffers::Table *>(root);
    if (table->VerifyTableStart(shallow) &&
        table->VerifyField<uint32_t>(shallow, fb::Plan::VT_FORMAT_VERSION, 4) &&
        !supportedVersion(root->format_version()))
      return error(versionError(root->format_version()));
    return error("the FlatBuffer is corrupt or truncated (verification failed)");
  }
  const fb::Plan *root = fb::GetPlan(bytes.data());
  if (!supportedVersion(root->format_version()))
    return error(versionError(root->format_version()));
  RETURN_IF_ERROR(PlanValidator(*root, source).run());
  LoadedPlan plan;
  plan.bytes_ = std::move(bytes);
  plan.path_ = std::move(path);
  return plan;
}

StatusOr<LoadedPlan> loadPlanFile(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "plan file"));
  ASSIGN_OR_RETURN(bytes, unsealPlan(std::move(bytes), path));
  return loadPlanFromBytes(std::move(bytes), path);
}

} // namespace megac::runtime