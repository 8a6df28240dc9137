// Loading a plan: read the bytes, verify the FlatBuffer and every index, size, attribute and
// in-place write, and reject another format version, so the executor can trust what it reads.
#pragma once

#include "support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace megac::plan {
struct Plan;
struct Program;
} // namespace megac::plan

namespace megac::runtime {

/// A verified plan; owns its bytes.
class LoadedPlan {
public:
  const megac::plan::Plan &plan() const;
  const std::vector<uint8_t> &bytes() const { return bytes_; }
  /// The file the plan came from (empty if from memory): weights_file is relative to it.
  const std::string &path() const { return path_; }

private:
  friend StatusOr<LoadedPlan> loadPlanFromBytes(std::vector<uint8_t> bytes, std::string path);
  std::vector<uint8_t> bytes_;
  std::string path_;
};

StatusOr<LoadedPlan> loadPlanFromBytes(std::vector<uint8_t> bytes, std::string path = {});
StatusOr<LoadedPlan> loadPlanFile(const std::string &path);

/// How errors name a program: "program 'stage0'" ("program 2" when it has no name).
std::string describeProgram(const megac::plan::Program &program, size_t programIndex);
/// How errors name a function: "program 'stage0', function 'forward'".
std::string describeFunction(const megac::plan::Program &program, size_t programIndex,
                             size_t functionIndex);
/// How errors name an instruction:
/// "program 'stage0', function 'forward', instruction 3 (Linear at 'h0.fc1')".
std::string describeInstruction(const megac::plan::Program &program, size_t programIndex,
                                size_t functionIndex, size_t instructionIndex);

} // namespace megac::runtime
