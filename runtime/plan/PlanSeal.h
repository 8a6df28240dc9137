// The checksum header of a plan file: `megac compile -o` writes 16 bytes before the FlatBuffer
// ("MPLNSEAL", the body's CRC32, the header version) and loadPlanFile verifies them, so a flipped
// bit anywhere in a plan (an f64 attribute the validator cannot judge) is refused, not run.
//
//   bytes 0..7    "MPLNSEAL"
//   bytes 8..11   CRC32 (zlib's) of the body, little-endian
//   bytes 12..15  header version (1), little-endian
//   bytes 16..    the plan's FlatBuffer ("MPLN" at 20..23)
#pragma once

#include "support/Status.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace megac::runtime {

constexpr size_t kPlanSealBytes = 16;

/// The header to write before `body`.
std::array<uint8_t, kPlanSealBytes> planSealHeader(std::span<const uint8_t> body);
/// `body` with its header, as one buffer.
std::vector<uint8_t> sealPlan(std::span<const uint8_t> body);
/// Whether `bytes` start with a plan seal.
bool isSealedPlan(std::span<const uint8_t> bytes);
/// The body of sealed `bytes` after checking its CRC32; an error names `path`. Bytes without a
/// seal (an in-memory plan, a plan file of an older megac) are returned as they are.
StatusOr<std::vector<uint8_t>> unsealPlan(std::vector<uint8_t> bytes, const std::string &path);

} // namespace megac::runtime
