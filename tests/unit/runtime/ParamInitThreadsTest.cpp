// Threaded parameter init: every thread count fills the same values as the serial definition
// (initialValue per element) and as the single-threaded fillShard of before threads existed.
#include "runtime/init/ParamInit.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

using namespace megac::init;

namespace {

struct Case {
  InitSpec spec;
  uint64_t seed;
  std::string name;
  std::vector<int64_t> global, offset, local;
  uint64_t hash; // FNV-1a of the f32 bytes, from fillShard at commit e6041c3 (one thread)
};

// Large enough for seven chunks of at least 2^16 elements, and with chunk bounds that fall
// inside rows (561501 / 7 is not a multiple of 89 or 701 * 89) and an offset on every dim.
const Case kCases[] = {
    {{InitKind::normal, 0.02},
     1234,
     "h0.attn.q.weight",
     {20, 1500, 100},
     {3, 17, 5},
     {9, 701, 89},
     0x142f280dd1fc7488ull},
    {{InitKind::normal, 1.0}, 7, "wte", {50257, 16}, {0, 0}, {50257, 16}, 0x263fe5aa27b19b17ull},
    {{InitKind::normal, 0.5}, 42, "b", {4096}, {100}, {3000}, 0x2276261aafba2eebull},
    {{InitKind::ones, 0.0},
     1,
     "ln.weight",
     {2, 600000},
     {1, 0},
     {1, 600000},
     0xe3fb76d475eb1925ull},
    {{InitKind::zeros, 0.0}, 1, "ln.bias", {600000}, {0}, {600000}, 0xe6375cda6af50f25ull},
};

uint64_t fnv(const std::vector<float> &values) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (float f : values) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    for (int k = 0; k < 4; ++k) {
      h ^= (bits >> (8 * k)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

int64_t countOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// The definition: element i of the box is initialValue at its global row-major index.
std::vector<float> serialReference(const Case &c) {
  std::vector<float> out;
  std::vector<int64_t> at(c.local.size(), 0);
  for (int64_t i = 0; i < countOf(c.local); ++i) {
    uint64_t global = 0;
    for (size_t d = 0; d < at.size(); ++d)
      global = global * c.global[d] + c.offset[d] + at[d];
    out.push_back(static_cast<float>(initialValue(c.spec, c.seed, c.name, global)));
    for (size_t d = at.size(); d-- > 0;) {
      if (++at[d] < c.local[d])
        break;
      at[d] = 0;
    }
  }
  return out;
}

std::vector<float> filled(const Case &c, int threads) {
  std::vector<float> out(static_cast<size_t>(countOf(c.local)), -7.0f);
  EXPECT_TRUE(fillShard(c.spec, c.seed, c.name, c.global, c.offset, c.local, out, threads));
  return out;
}

} // namespace

TEST(ParamInitThreads, EveryThreadCountMatchesTheSerialDefinitionAndTheOldValues) {
  for (const Case &c : kCases) {
    SCOPED_TRACE(c.name);
    std::vector<float> reference = serialReference(c);
    EXPECT_EQ(fnv(reference), c.hash) << "the values changed from those of commit e6041c3";
    for (int threads : {1, 2, 7, 0}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      std::vector<float> got = filled(c, threads);
      ASSERT_EQ(got.size(), reference.size());
      // Bitwise: memcmp, so that a NaN or a signed zero cannot hide a difference.
      size_t firstDiff = got.size();
      for (size_t i = 0; i < got.size() && firstDiff == got.size(); ++i)
        if (std::memcmp(&got[i], &reference[i], sizeof(float)) != 0)
          firstDiff = i;
      EXPECT_EQ(firstDiff, got.size()) << "first differing element " << firstDiff;
      EXPECT_EQ(fnv(got), c.hash);
    }
  }
}

TEST(ParamInitThreads, SmallAndDegenerateBoxes) {
  // A scalar, an empty box, and a box smaller than the thread count.
  std::vector<float> scalar(1);
  ASSERT_TRUE(fillShard({InitKind::normal, 1.0}, 3, "s", {}, {}, {}, scalar, 7));
  EXPECT_EQ(scalar[0], static_cast<float>(initialValue({InitKind::normal, 1.0}, 3, "s", 0)));
  std::vector<float> none;
  EXPECT_TRUE(fillShard({InitKind::normal, 1.0}, 3, "e", std::vector<int64_t>{4, 0},
                        std::vector<int64_t>{0, 0}, std::vector<int64_t>{4, 0}, none, 7));
  std::vector<float> few(5);
  ASSERT_TRUE(fillShard({InitKind::normal, 1.0}, 3, "f", std::vector<int64_t>{10},
                        std::vector<int64_t>{2}, std::vector<int64_t>{5}, few, 7));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(few[i], static_cast<float>(initialValue({InitKind::normal, 1.0}, 3, "f", 2 + i)));
  // A box that does not fit is refused before any thread starts.
  std::vector<float> out(6);
  EXPECT_FALSE(fillShard({InitKind::zeros, 0}, 0, "w", std::vector<int64_t>{2, 3},
                         std::vector<int64_t>{1, 0}, std::vector<int64_t>{2, 3}, out, 7));
}
