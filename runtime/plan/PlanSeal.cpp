// A plan file's checksum header (PlanSeal.h).
#include "runtime/plan/PlanSeal.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <zlib.h>

namespace megac::runtime {

namespace {

constexpr char kMagic[] = "MPLNSEAL";
constexpr uint32_t kSealVersion = 1;

uint32_t crcOf(std::span<const uint8_t> bytes) {
  uLong value = ::crc32(0, nullptr, 0);
  for (size_t done = 0; done < bytes.size();) {
    uInt n = uInt(std::min<size_t>(bytes.size() - done, std::numeric_limits<uInt>::max()));
    value = ::crc32(value, bytes.data() + done, n);
    done += n;
  }
  return uint32_t(value);
}

uint32_t load32(const uint8_t *p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

void store32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = uint8_t(v >> (8 * i));
}

std::string hex32(uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%08" PRIx32, value);
  return buf;
}

} // namespace

std::array<uint8_t, kPlanSealBytes> planSealHeader(std::span<const uint8_t> body) {
  std::array<uint8_t, kPlanSealBytes> header{};
  std::memcpy(header.data(), kMagic, 8);
  store32(header.data() + 8, crcOf(body));
  store32(header.data() + 12, kSealVersion);
  return header;
}

std::vector<uint8_t> sealPlan(std::span<const uint8_t> body) {
  std::array<uint8_t, kPlanSealBytes> header = planSealHeader(body);
  std::vector<uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

bool isSealedPlan(std::span<const uint8_t> bytes) {
  return bytes.size() >= 8 && std::memcmp(bytes.data(), kMagic, 8) == 0;
}

StatusOr<std::vector<uint8_t>> unsealPlan(std::vector<uint8_t> bytes, const std::string &path) {
  if (!isSealedPlan(bytes))
    return bytes;
  std::string source = "plan '" + path + "'";
  if (bytes.size() < kPlanSealBytes)
    return Status::error(source + ": the checksum header is truncated");
  uint32_t version = load32(bytes.data() + 12);
  if (version != kSealVersion)
    return Status::error(source + ": checksum header version " + std::to_string(version) +
                         " is not supported (this runtime reads 1); recompile the model");
  uint32_t recorded = load32(bytes.data() + 8);
  std::span<const uint8_t> body(bytes.data() + kPlanSealBytes, bytes.size() - kPlanSealBytes);
  uint32_t actual = crcOf(body);
  if (actual != recorded)
    return Status::error(source + ": the body has CRC32 " + hex32(actual) + ", but the header " +
                         "records " + hex32(recorded) + " (corrupt or truncated; recompile it)");
  bytes.erase(bytes.begin(), bytes.begin() + kPlanSealBytes);
  return bytes;
}

} // namespace megac::runtime
