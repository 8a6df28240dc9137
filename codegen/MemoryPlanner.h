// Static memory planning for a program of straight-line functions: arena offsets from buffer
// liveness.
//
// Persistent buffers (parameters, state, constants) keep their bytes across runs of every
// function; they are laid out first, back to back in request order. Functions run one at a time,
// so each function's other buffers are planned on their own above the persistent region, and the
// arena is the persistent bytes plus the largest function's peak.
//
// Within a function every buffer has a size and a live interval [def, lastUse] in that function's
// instruction indices (both inclusive, so an instruction's outputs never share bytes with its
// inputs). Pinned buffers (the function's inputs and outputs) are live for the whole function and
// come first, back to back in request order. The other buffers are placed largest first, each at
// the lowest-waste gap (best fit by offset) among the already placed buffers of the function
// whose intervals overlap its own, so buffers that are never live at the same time share bytes.
//
// A buffer may alias an earlier one (a reshape's result sharing its input's bytes): the two
// are planned as one storage whose interval is the union of theirs and whose size is the larger.
// An alias of a persistent buffer is part of that storage; otherwise both belong to one function.
//
// MLIR-free, so it is unit-testable on synthetic programs.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace megac::codegen {

inline constexpr uint64_t kArenaAlignment = 64;

struct BufferRequest {
  uint64_t bytes = 0;
  /// Instruction that writes the buffer and the last one that reads it (def <= lastUse).
  /// Ignored for pinned buffers.
  int64_t def = 0;
  int64_t lastUse = 0;
  /// Live for the whole function (its inputs and outputs).
  bool pinned = false;
  /// Live for the whole program, in every function (parameters, state, constants).
  bool persistent = false;
  /// The function the buffer belongs to (ignored for persistent buffers).
  size_t function = 0;
  /// Index of an earlier request whose bytes this buffer shares, if any.
  std::optional<size_t> aliasOf;
};

struct MemoryPlan {
  std::vector<uint64_t> offsets; // one per request, multiples of the alignment
  uint64_t arenaBytes = 0;       // the peak: every buffer ends at or below it
  uint64_t persistentBytes = 0;  // the prefix holding the persistent storages
  uint64_t pinnedBytes = 0;      // the largest prefix of persistent plus one function's pinned
  uint64_t totalBytes = 0;       // sum of every storage's aligned size (no reuse)
};

struct MemoryPlanResult {
  std::optional<MemoryPlan> plan;
  std::string error; // why there is no plan (a malformed request)
};

/// Plans `requests`; alignment is a power of two.
MemoryPlanResult planMemory(std::span<const BufferRequest> requests,
                            uint64_t alignment = kArenaAlignment);

} // namespace megac::codegen
