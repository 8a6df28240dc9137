// Reading and writing `megac calibrate`'s tables and device spec files (planner/Calibration.h).
#include "planner/Calibration.h"

#include "support/Json.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace megac::planner {
namespace {

using json::Value;
using Kind = Value::Kind;

// clang-format off
constexpr std::array<const char *, 23> kKernelClasses = {
    "elementwise", "copy", "transpose", "broadcast", "cast", "softmax", "softmax_grad", "gelu",
    "gelu_grad", "silu", "layer_norm", "layer_norm_grad", "rms_norm", "rms_norm_grad", "reduce",
    "embedding", "embedding_grad", "cross_entropy", "cross_entropy_grad", "adamw", "global_norm",
    "dropout", "rope"};
// clang-format on

constexpr std::array<const char *, 5> kCommOps = {"all_reduce", "all_gather", "reduce_scatter",
                                                  "all_to_all", "send_recv"};

/// One object of a table: every field must be read exactly once, and anything else is an error.
class Fields {
public:
  Fields(const Value &object, std::string where, std::string *error)
      : object_(object), where_(std::move(where)), error_(error) {}

  bool isObject() {
    if (object_.kind == Kind::object)
      return true;
    return fail("must be an object");
  }
  bool positiveInteger(const char *key, int64_t &out, int64_t min = 1) {
    const Value *v = get(key);
    if (!v)
      return false;
    if (!v->isInteger || v->integer < min)
      return fail(
          std::string("'") + key + "' must be " +
          (min == 1 ? std::string("a positive integer") : "an integer >= " + std::to_string(min)));
    out = v->integer;
    return true;
  }
  bool positiveNumber(const char *key, double &out) {
    const Value *v = get(key);
    if (!v)
      return false;
    if (v->kind != Kind::number || !std::isfinite(v->number) || v->number <= 0)
      return fail(std::string("'") + key + "' must be a positive number");
    out = v->number;
    return true;
  }
  bool boolean(const char *key, bool &out) {
    const Value *v = get(key);
    if (!v)
      return false;
    if (v->kind != Kind::boolean)
      return fail(std::string("'") + key + "' must be true or false");
    out = v->boolean;
    return true;
  }
  /// A string that is one of `allowed`.
  template <size_t N>
  bool oneOf(const char *key, std::string &out, const std::array<const char *, N> &allowed,
             const char *what) {
    const Value *v = get(key);
    if (!v)
      return false;
    if (v->kind == Kind::string &&
        std::find(allowed.begin(), allowed.end(), v->string) != allowed.end()) {
      out = v->string;
      return true;
    }
    std::string names;
    for (const char *name : allowed)
      names += (names.empty() ? "" : ", ") + std::string(name);
    return fail(std::string("'") + key + "' must be " + what + " (" + names + ")");
  }
  /// After reading every field: no others.
  bool noOthers() {
    for (const std::string &key : object_.keys)
      if (std::find(read_.begin(), read_.end(), key) == read_.end())
        return fail("unknown field '" + key + "'");
    return true;
  }

private:
  const Value *get(const char *key) {
    read_.push_back(key);
    const Value *v = object_.find(key);
    if (!v)
      fail(std::string("'") + key + "' is missing");
    return v;
  }
  bool fail(const std::string &what) {
    *error_ = where_ + ": " + what;
    return false;
  }

  const Value &object_;
  std::string where_;
  std::string *error_;
  std::vector<std::string> read_;
};

/// Parses `table` (an array) into `out` with `one(Fields&, T&)` per element.
template <typename T, typename ParseOne>
bool parseTable(const Value &table, const std::string &where, std::vector<T> &out,
                std::string *error, ParseOne one) {
  if (table.kind != Kind::array) {
    *error = where + ": must be an array of objects";
    return false;
  }
  out.clear();
  for (size_t i = 0; i < table.items.size(); ++i) {
    Fields f(table.items[i], where + "[" + std::to_string(i) + "]", error);
    T point;
    if (!f.isObject() || !one(f, point) || !f.noOthers())
      return false;
    out.push_back(std::move(point));
  }
  return true;
}

// ---- Writing --------------------------------------------------------------------------------

std::string number(double x) {
  if (!std::isfinite(x))
    return "null"; // the loader then names the field; no spec holds a non-finite value
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", x);
  return text;
}

std::string integer(int64_t x) { return std::to_string(x); }

/// The tables of one occupancy, appended to `out` as `,\n<indent>"gemm": [...]` and so on.
void tablesJson(std::string &out, const std::string &indent, const std::vector<GemmPoint> &gemm,
                const std::vector<BandwidthPoint> &bandwidth,
                const std::vector<KernelPoint> &kernels,
                const std::vector<AttentionPoint> &attention, const std::vector<CommPoint> *comm) {
  auto table = [&](const char *name, size_t size, auto row) {
    out += ",\n" + indent + "\"" + name + "\": [";
    for (size_t i = 0; i < size; ++i)
      out += (i ? ",\n  " : "\n  ") + indent + "{" + row(i) + "}";
    out += size ? "\n" + indent + "]" : "]";
  };
  table("gemm", gemm.size(), [&](size_t i) {
    const GemmPoint &p = gemm[i];
    return "\"m\": " + integer(p.m) + ", \"n\": " + integer(p.n) + ", \"k\": " + integer(p.k) +
           ", \"elementBytes\": " + integer(p.elementBytes) +
           ", \"flopsPerSecond\": " + number(p.flopsPerSecond);
  });
  table("bandwidth", bandwidth.size(), [&](size_t i) {
    const BandwidthPoint &p = bandwidth[i];
    return "\"workingSetBytes\": " + number(p.workingSetBytes) +
           ", \"bytesPerSecond\": " + number(p.bytesPerSecond);
  });
  table("kernels", kernels.size(), [&](size_t i) {
    const KernelPoint &p = kernels[i];
    return "\"kernel\": " + json::quote(p.kernel) + ", \"bytes\": " + number(p.bytes) +
           ", \"seconds\": " + number(p.seconds);
  });
  table("attention", attention.size(), [&](size_t i) {
    const AttentionPoint &p = attention[i];
    return "\"batchHeads\": " + integer(p.batchHeads) + ", \"seq\": " + integer(p.seq) +
           ", \"headDim\": " + integer(p.headDim) +
           ", \"causal\": " + std::string(p.causal ? "true" : "false") +
           ", \"forwardSeconds\": " + number(p.forwardSeconds) +
           ", \"backwardSeconds\": " + number(p.backwardSeconds);
  });
  if (comm)
    table("comm", comm->size(), [&](size_t i) {
      const CommPoint &p = (*comm)[i];
      return "\"op\": " + json::quote(p.op) + ", \"ranks\": " + integer(p.ranks) +
             ", \"bytes\": " + number(p.bytes) + ", \"seconds\": " + number(p.seconds);
    });
}

std::string calibrationJson(const Calibration &c) {
  std::string out = "{\n";
  out += "    \"source\": " + json::quote(c.source) + ",\n";
  out += "    \"threads\": " + integer(c.threads) + ",\n";
  if (c.ranks > 0)
    out += "    \"ranks\": " + integer(c.ranks) + ",\n";
  if (c.cores > 0)
    out += "    \"cores\": " + integer(c.cores) + ",\n";
  out += "    \"instructionSeconds\": " + number(c.instructionSeconds);
  tablesJson(out, "    ", c.gemm, c.bandwidth, c.kernels, c.attention, &c.comm);
  if (!c.occupancies.empty()) {
    out += ",\n    \"occupancies\": [";
    for (size_t i = 0; i < c.occupancies.size(); ++i) {
      const OccupancyTables &o = c.occupancies[i];
      out += std::string(i ? "," : "") + "\n      {\"name\": " + json::quote(o.name) +
             ", \"ranks\": " + integer(o.ranks) + ", \"threads\": " + integer(o.threads) +
             ",\n        \"instructionSeconds\": " + number(o.instructionSeconds);
      tablesJson(out, "        ", o.gemm, o.bandwidth, o.kernels, o.attention, nullptr);
      out += "\n      }";
    }
    out += "\n    ]";
  }
  return out + "\n  }";
}

/// One of the tables an occupancy and the calibration's top level share ("gemm", "bandwidth",
/// "kernels", "attention"): parsed into the matching vector; false (with `error`) when `key` is
/// one of them and malformed. `handled` says whether it was one of them.
bool parseSharedTable(const std::string &key, const Value &v, const std::string &where,
                      std::vector<GemmPoint> &gemm, std::vector<BandwidthPoint> &bandwidth,
                      std::vector<KernelPoint> &kernels, std::vector<AttentionPoint> &attention,
                      std::string *error, bool &handled) {
  handled = true;
  if (key == "gemm")
    return parseTable(v, where, gemm, error, [](Fields &f, GemmPoint &p) {
      return f.positiveInteger("m", p.m) && f.positiveInteger("n", p.n) &&
             f.positiveInteger("k", p.k) && f.positiveInteger("elementBytes", p.elementBytes) &&
             f.positiveNumber("flopsPerSecond", p.flopsPerSecond);
    });
  if (key == "bandwidth")
    return parseTable(v, where, bandwidth, error, [](Fields &f, BandwidthPoint &p) {
      return f.positiveNumber("workingSetBytes", p.workingSetBytes) &&
             f.positiveNumber("bytesPerSecond", p.bytesPerSecond);
    });
  if (key == "kernels")
    return parseTable(v, where, kernels, error, [](Fields &f, KernelPoint &p) {
      return f.oneOf("kernel", p.kernel, kKernelClasses, "a memory-bound kernel class") &&
             f.positiveNumber("bytes", p.bytes) && f.positiveNumber("seconds", p.seconds);
    });
  if (key == "attention")
    return parseTable(v, where, attention, error, [](Fields &f, AttentionPoint &p) {
      return f.positiveInteger("batchHeads", p.batchHeads) && f.positiveInteger("seq", p.seq) &&
             f.positiveInteger("headDim", p.headDim) && f.boolean("causal", p.causal) &&
             f.positiveNumber("forwardSeconds", p.forwardSeconds) &&
             f.positiveNumber("backwardSeconds", p.backwardSeconds);
    });
  handled = false;
  return true;
}

/// calibration.occupancies[i]: name, ranks, threads, instructionSeconds and the four tables,
/// every one required.
bool parseOccupancy(const Value &v, const std::string &where, OccupancyTables &o,
                    std::string *error) {
  if (v.kind != Kind::object) {
    *error = where + ": must be an object";
    return false;
  }
  for (const char *required : {"name", "ranks", "threads", "instructionSeconds", "gemm",
                               "bandwidth", "kernels", "attention"})
    if (!v.find(required)) {
      *error = where + ": '" + required + "' is missing";
      return false;
    }
  for (size_t i = 0; i < v.keys.size(); ++i) {
    const std::string &key = v.keys[i];
    const Value &item = v.items[i];
    const std::string at = where + "." + key;
    bool handled = false;
    if (!parseSharedTable(key, item, at, o.gemm, o.bandwidth, o.kernels, o.attention, error,
                          handled))
      return false;
    if (handled)
      continue;
    if (key == "name") {
      if (item.kind != Kind::string || item.string.empty()) {
        *error = at + ": must be a non-empty string";
        return false;
      }
      o.name = item.string;
    } else if (key == "ranks" || key == "threads") {
      if (!item.isInteger || item.integer < 1) {
        *error = at + ": must be a positive integer";
        return false;
      }
      (key == "ranks" ? o.ranks : o.threads) = item.integer;
    } else if (key == "instructionSeconds") {
      if (item.kind != Kind::number || !std::isfinite(item.number) || item.number < 0) {
        *error = at + ": must be a non-negative number";
        return false;
      }
      o.instructionSeconds = item.number;
    } else {
      *error = where + ": unknown field '" + key + "'";
      return false;
    }
  }
  return true;
}

} // namespace

std::span<const char *const> calibratedKernelClasses() { return kKernelClasses; }

bool parseCalibration(const Value &value, Calibration *out, std::string *error) {
  std::string dummy;
  if (!error)
    error = &dummy;
  if (value.kind != Kind::object) {
    *error = "calibration: must be an object";
    return false;
  }
  Calibration c;
  for (size_t i = 0; i < value.keys.size(); ++i) {
    const std::string &key = value.keys[i];
    const Value &v = value.items[i];
    const std::string where = "calibration." + key;
    bool ok = true, handled = false;
    if (!parseSharedTable(key, v, where, c.gemm, c.bandwidth, c.kernels, c.attention, error,
                          handled))
      return false;
    if (handled)
      continue;
    if (key == "source") {
      if (v.kind != Kind::string) {
        *error = where + ": must be a string";
        return false;
      }
      c.source = v.string;
    } else if (key == "threads") {
      if (!v.isInteger || v.integer < 0) {
        *error = where + ": must be an integer >= 0";
        return false;
      }
      c.threads = v.integer;
    } else if (key == "instructionSeconds") {
      if (v.kind != Kind::number || !std::isfinite(v.number) || v.number < 0) {
        *error = where + ": must be a non-negative number";
        return false;
      }
      c.instructionSeconds = v.number;
    } else if (key == "ranks" || key == "cores") {
      if (!v.isInteger || v.integer < 1) {
        *error = where + ": must be a positive integer";
        return false;
      }
      (key == "ranks" ? c.ranks : c.cores) = v.integer;
    } else if (key == "occupancies") {
      if (v.kind != Kind::array) {
        *error = where + ": must be an array of objects";
        return false;
      }
      for (size_t j = 0; j < v.items.size(); ++j) {
        OccupancyTables o;
        if (!parseOccupancy(v.items[j], where + "[" + std::to_string(j) + "]", o, error))
          return false;
        c.occupancies.push_back(std::move(o));
      }
    } else if (key == "comm") {
      ok = parseTable(v, where, c.comm, error, [](Fields &f, CommPoint &p) {
        return f.oneOf("op", p.op, kCommOps, "a collective") &&
               f.positiveInteger("ranks", p.ranks, 2) && f.positiveNumber("bytes", p.bytes) &&
               f.positiveNumber("seconds", p.seconds);
      });
    } else {
      *error = "calibration: unknown field '" + key + "'";
      return false;
    }
    if (!ok)
      return false;
  }
  *out = std::move(c);
  return true;
}

Calibration calibrationFor(const Calibration &c, int64_t ranksPerNode, int64_t threadsPerRank,
                           std::string *chosen) {
  if (c.occupancies.empty() || c.ranks <= 0) {
    if (chosen)
      *chosen = c.occupancies.empty() ? "busy" : "busy (ranks not recorded)";
    Calibration same = c;
    same.occupancies.clear();
    return same;
  }
  int64_t r = std::max<int64_t>(1, ranksPerNode);
  int64_t t =
      threadsPerRank > 0 ? threadsPerRank : std::max<int64_t>(1, (c.cores > 0 ? c.cores : r) / r);
  struct Candidate {
    const OccupancyTables *tables; // null: the top level
    int64_t ranks, threads;
  };
  std::vector<Candidate> candidates = {{nullptr, c.ranks, std::max<int64_t>(1, c.threads)}};
  for (const OccupancyTables &o : c.occupancies)
    candidates.push_back({&o, o.ranks, o.threads});
  auto distance = [&](const Candidate &k) {
    return std::abs(std::log2(double(t) / double(k.threads))) +
           std::abs(std::log2(double(r * t) / double(k.ranks * k.threads)));
  };
  const Candidate *best = &candidates.front();
  for (const Candidate &k : candidates) {
    double d = distance(k), b = distance(*best);
    if (d < b - 1e-9 ||
        (std::abs(d - b) <= 1e-9 &&
         (k.ranks * k.threads > best->ranks * best->threads ||
          (k.ranks * k.threads == best->ranks * best->threads && k.threads > best->threads))))
      best = &k;
  }
  Calibration out = c;
  out.occupancies.clear();
  if (const OccupancyTables *o = best->tables) {
    out.ranks = o->ranks;
    out.threads = o->threads;
    out.instructionSeconds = o->instructionSeconds;
    out.gemm = o->gemm;
    out.bandwidth = o->bandwidth;
    out.kernels = o->kernels;
    out.attention = o->attention;
  }
  if (chosen)
    *chosen = best->tables ? best->tables->name : "busy";
  return out;
}

std::string deviceSpecJson(const DeviceSpec &d) {
  std::string out = "{\n  \"name\": " + json::quote(d.name);
  auto real = [&](const char *key, double x) {
    out += std::string(",\n  \"") + key + "\": " + number(x);
  };
  auto whole = [&](const char *key, int64_t x) {
    out += std::string(",\n  \"") + key + "\": " + integer(x);
  };
  real("peakFlopsFp32", d.peakFlopsFp32);
  real("peakFlopsBf16", d.peakFlopsBf16);
  real("peakFlopsFp16", d.peakFlopsFp16);
  real("memoryBytes", d.memoryBytes);
  real("memoryBandwidth", d.memoryBandwidth);
  whole("devicesPerNode", d.devicesPerNode);
  real("intraNodeBandwidth", d.intraNodeBandwidth);
  real("intraNodeLatency", d.intraNodeLatency);
  real("interNodeBandwidth", d.interNodeBandwidth);
  real("interNodeLatency", d.interNodeLatency);
  whole("computeUnits", d.computeUnits);
  whole("gemmTileM", d.gemmTileM);
  whole("gemmTileN", d.gemmTileN);
  real("gemmEfficiency", d.gemmEfficiency);
  real("memoryEfficiency", d.memoryEfficiency);
  real("linkEfficiency", d.linkEfficiency);
  real("reservedBytes", d.reservedBytes);
  real("launchSeconds", d.launchSeconds);
  real("attentionForwardEfficiency", d.attentionForwardEfficiency);
  real("attentionBackwardEfficiency", d.attentionBackwardEfficiency);
  real("hostBandwidth", d.hostBandwidth);
  real("cacheBytes", d.cacheBytes);
  real("cacheBandwidth", d.cacheBandwidth);
  if (!d.calibration.empty() || !d.calibration.source.empty() || d.calibration.threads)
    out += ",\n  \"calibration\": " + calibrationJson(d.calibration);
  return out + "\n}\n";
}

} // namespace megac::planner
