// A deterministic driver for libFuzzer-style targets, for compilers without -fsanitize=fuzzer:
// runs the target on every seed file, then on a bounded number of mutations of them (bit
// flips, byte overwrites with boundary values, truncations, insertions, splices of two seeds),
// from a fixed random seed so a failure reproduces.
//
//   onnx_import_fuzz_driver [--runs N] [--max-seconds S] [--seed K] [--save-crash DIR] SEED...
//
// A crash kills the process (ctest reports it); before each run the input is written to
// DIR/current-input when --save-crash is given, so the offending bytes survive.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

/// xorshift64*: small, fast and the same everywhere.
struct Rng {
  uint64_t state;
  uint64_t next() {
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 2685821657736338717ULL;
  }
  size_t below(size_t n) { return n ? size_t(next() % n) : 0; }
};

Bytes mutate(const std::vector<Bytes> &seeds, Rng &rng) {
  Bytes b = seeds[rng.below(seeds.size())];
  // Values that hit edges in protobuf varints, lengths and tensor dims.
  static const uint8_t kInteresting[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe, 0x08, 0x10, 0x40};
  // Mostly one small edit: protobuf's wire format rejects most inputs with many edits, and
  // the importer is only reached by ones that still parse.
  size_t r = rng.below(8);
  int edits = r < 5 ? 1 : r < 7 ? 2 : 4;
  for (int e = 0; e < edits; ++e) {
    switch (rng.below(16)) {
    case 0:
    case 1:
    case 2:
    case 3: // flip a bit
      if (!b.empty())
        b[rng.below(b.size())] ^= uint8_t(1u << rng.below(8));
      break;
    case 4:
    case 5:
    case 6:
    case 7: // nudge a byte by +-1 (dims, attribute values, enum tags stay plausible)
      if (!b.empty())
        b[rng.below(b.size())] += rng.below(2) ? 1 : 0xff;
      break;
    case 8:
    case 9: // overwrite a byte with a boundary value
      if (!b.empty())
        b[rng.below(b.size())] = kInteresting[rng.below(sizeof kInteresting)];
      break;
    case 10: // truncate
      b.resize(rng.below(b.size() + 1));
      break;
    case 11:
    case 12: { // insert random bytes
      size_t at = rng.below(b.size() + 1), n = 1 + rng.below(8);
      Bytes extra(n);
      for (uint8_t &x : extra)
        x = uint8_t(rng.next());
      b.insert(b.begin() + long(at), extra.begin(), extra.end());
      break;
    }
    case 13: { // splice: a prefix of this input, a suffix of another seed
      const Bytes &other = seeds[rng.below(seeds.size())];
      size_t cut = rng.below(b.size() + 1), from = rng.below(other.size() + 1);
      b.resize(cut);
      b.insert(b.end(), other.begin() + long(from), other.end());
      break;
    }
    default: { // duplicate a chunk (repeated fields, nested messages)
      if (b.size() < 2)
        break;
      size_t begin = rng.below(b.size());
      size_t len = 1 + rng.below(std::min<size_t>(64, b.size() - begin));
      Bytes chunk(b.begin() + long(begin), b.begin() + long(begin + len));
      b.insert(b.begin() + long(rng.below(b.size() + 1)), chunk.begin(), chunk.end());
      break;
    }
    }
  }
  return b;
}

int usage() {
  std::fprintf(stderr, "usage: fuzz_driver [--runs N] [--max-seconds S] [--seed K] "
                       "[--save-crash DIR] SEED_FILE...\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  long runs = 10000;
  double maxSeconds = 1e9;
  uint64_t seed = 0x6d656761; // "mega"
  std::string crashDir;
  std::vector<Bytes> seeds;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--runs" || arg == "--max-seconds" || arg == "--seed" || arg == "--save-crash") &&
        i + 1 < argc) {
      const char *value = argv[++i];
      if (arg == "--runs")
        runs = std::atol(value);
      else if (arg == "--max-seconds")
        maxSeconds = std::atof(value);
      else if (arg == "--seed")
        seed = std::strtoull(value, nullptr, 10);
      else
        crashDir = value;
      continue;
    }
    if (arg.rfind("--", 0) == 0)
      return usage();
    std::ifstream in(arg, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "fuzz_driver: cannot read seed %s\n", arg.c_str());
      return 2;
    }
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (seeds.empty())
    return usage();
  auto runOne = [&](const Bytes &input) {
    if (!crashDir.empty()) {
      std::ofstream out(crashDir + "/current-input", std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char *>(input.data()), long(input.size()));
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
  };
  auto start = std::chrono::steady_clock::now();
  for (const Bytes &s : seeds)
    runOne(s);
  Rng rng{seed | 1};
  long done = 0;
  for (; done < runs; ++done) {
    if (done % 256 == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
            maxSeconds)
      break;
    runOne(mutate(seeds, rng));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz_driver: %zu seeds and %ld mutations (seed %llu) in %.1f s, no crash\n",
              seeds.size(), done, (unsigned long long)seed, seconds);
  return 0;
}
