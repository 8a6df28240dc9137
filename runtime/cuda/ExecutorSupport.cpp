// The CUDA executor's host-side decisions: the device from the launcher's local rank, the
// names of failing launch steps, and the per-opcode GPU time profile's sums and table.
#include "runtime/cuda/ExecutorSupport.h"

#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

namespace megac::runtime::cuda {

namespace {

struct Launcher {
  const char *rankVariable, *sizeVariable;
  bool slurm = false; // without sizeVariable, the size is this node's of SLURM_TASKS_PER_NODE
};

// In the order they are read (see deviceForLocalRank for why Slurm is last).
constexpr Launcher kLaunchers[] = {
    {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", true},
};

constexpr const char *kOtherVariables[] = {"SLURM_TASKS_PER_NODE", "SLURM_NODEID",
                                           "CUDA_VISIBLE_DEVICES"};

const std::string *lookup(const LauncherEnv &env, const std::string &name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

/// A non-negative int, all of `text`.
std::optional<int> parseCount(std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    return std::nullopt;
  return value;
}

Status malformed(const std::string &name, const std::string &value, const char *what) {
  return Status::error(name + "='" + value + "' is not " + what +
                       " (it is read to choose this process's CUDA device)");
}

/// This node's task count from SLURM_TASKS_PER_NODE ("2(x3),1": 2 on each of the first three
/// nodes, 1 on the fourth) at SLURM_NODEID; nullopt when it cannot be told.
std::optional<int> slurmTasksOnThisNode(const LauncherEnv &env) {
  const std::string *list = lookup(env, "SLURM_TASKS_PER_NODE");
  if (!list)
    return std::nullopt;
  std::vector<int> perNode;
  std::string_view rest = *list;
  while (!rest.empty()) {
    std::string_view entry = rest.substr(0, rest.find(','));
    rest.remove_prefix(std::min(rest.size(), entry.size() + 1));
    int repeat = 1;
    if (size_t open = entry.find("(x"); open != std::string_view::npos) {
      if (entry.back() != ')')
        return std::nullopt;
      std::optional<int> r = parseCount(entry.substr(open + 2, entry.size() - open - 3));
      if (!r || *r < 1 || *r > 1 << 20)
        return std::nullopt;
      repeat = *r;
      entry = entry.substr(0, open);
    }
    std::optional<int> tasks = parseCount(entry);
    if (!tasks)
      return std::nullopt;
    perNode.insert(perNode.end(), size_t(repeat), *tasks);
  }
  if (perNode.empty())
    return std::nullopt;
  if (const std::string *node = lookup(env, "SLURM_NODEID")) {
    std::optional<int> id = parseCount(*node);
    return id && size_t(*id) < perNode.size() ? std::optional<int>(perNode[size_t(*id)])
                                              : std::nullopt;
  }
  for (int tasks : perNode) // no node id: only a list of equal counts says it
    if (tasks != perNode.front())
      return std::nullopt;
  return perNode.front();
}

} // namespace

LauncherEnv launcherEnvironment() {
  LauncherEnv env;
  auto add = [&](const char *name) {
    if (const char *value = std::getenv(name))
      env[name] = value;
  };
  for (const Launcher &l : kLaunchers) {
    add(l.rankVariable);
    add(l.sizeVariable);
  }
  for (const char *name : kOtherVariables)
    add(name);
  return env;
}

StatusOr<int> deviceForLocalRank(const LauncherEnv &env, int rank, int devices) {
  if (devices < 1)
    return Status::error("no CUDA device is visible");
  int local = rank;
  std::string from; // "OMPI_COMM_WORLD_LOCAL_RANK=3"; empty: no launcher variable is set
  std::optional<int> size;
  std::string sizeFrom;
  for (const Launcher &l : kLaunchers) {
    const std::string *value = lookup(env, l.rankVariable);
    if (!value)
      continue;
    std::optional<int> parsed = parseCount(*value);
    if (!parsed)
      return malformed(l.rankVariable, *value, "a local rank (a non-negative integer)");
    local = *parsed;
    from = std::string(l.rankVariable) + "=" + *value;
    if (const std::string *s = lookup(env, l.sizeVariable)) {
      size = parseCount(*s);
      if (!size || *size < 1)
        return malformed(l.sizeVariable, *s, "a count of ranks on the node (a positive integer)");
      sizeFrom = std::string(l.sizeVariable) + "=" + *s;
    } else if (l.slurm && (size = slurmTasksOnThisNode(env))) {
      sizeFrom = "SLURM_TASKS_PER_NODE=" + *lookup(env, "SLURM_TASKS_PER_NODE");
      if (const std::string *node = lookup(env, "SLURM_NODEID"))
        sizeFrom += " at SLURM_NODEID=" + *node;
    }
    break;
  }
  if (size && local >= *size)
    return Status::error("rank " + std::to_string(rank) + ": local rank " + std::to_string(local) +
                         " (" + from + ") is not below the ranks on the node (" + sizeFrom +
                         "): the launcher's variables disagree");
  const std::string *visible = lookup(env, "CUDA_VISIBLE_DEVICES");
  bool givenOne = devices == 1 && visible && !visible->empty();
  if (givenOne)
    return 0;
  int needed = size ? *size : local + 1;
  if (needed <= devices)
    return local;
  std::string plural = devices == 1 ? "" : "s";
  std::string remedy = "make more devices visible" +
                       (visible ? " (CUDA_VISIBLE_DEVICES=" + *visible + ")" : std::string());
  if (from.empty())
    return Status::error("rank " + std::to_string(rank) +
                         ": no launcher's local-rank variable is set (OMPI_COMM_WORLD_LOCAL_RANK, "
                         "MPI_LOCALRANKID, LOCAL_RANK, SLURM_LOCALID), and the world rank is not "
                         "below the " +
                         std::to_string(devices) + " visible CUDA device" + plural +
                         ": start the ranks with a launcher that sets one, or " + remedy);
  std::string counted = size ? std::to_string(*size) + " ranks on this node (" + sizeFrom + ")"
                             : "at least " + std::to_string(needed) + " ranks on this node";
  return Status::error("rank " + std::to_string(rank) + ": " + counted + " but " +
                       std::to_string(devices) + " visible CUDA device" + plural + " (local rank " +
                       std::to_string(local) + " from " + from +
                       "); each rank needs a GPU of its own (NCCL refuses two ranks on one "
                       "device): start at most " +
                       std::to_string(devices) + " rank" + plural + " per node, or " + remedy);
}

StatusOr<bool> syncEachRequested(const char *value) {
  if (!value || !*value || std::string_view(value) == "0")
    return false;
  if (std::string_view(value) == "1")
    return true;
  return Status::error(std::string("MEGAC_CUDA_SYNC_EACH='") + value +
                       "' is not 0 or 1 (1: synchronize after every instruction and name the "
                       "one that fails)");
}

StatusOr<bool> profileRequested(const char *value) {
  if (!value || !*value || std::string_view(value) == "0")
    return false;
  if (std::string_view(value) == "1")
    return true;
  return Status::error(std::string("MEGAC_CUDA_PROFILE='") + value +
                       "' is not 0 or 1 (1: time every launch step with CUDA events and print "
                       "the GPU time per opcode when the executor is destroyed)");
}

std::string profileKey(megac::plan::Opcode op, StepKind kind) {
  switch (kind) {
  case StepKind::fused:
    return "fused elementwise";
  case StepKind::adamw:
    return "AdamW (multi-tensor)";
  case StepKind::single:
    break;
  }
  return megac::plan::EnumNameOpcode(op);
}

void KernelProfile::add(const std::string &key, double ms) {
  Row &row = rows_[key];
  ++row.calls;
  row.ms += ms;
}

void KernelProfile::reset() {
  rows_.clear();
  runs_ = 0;
}

std::string KernelProfile::format(int rank) const {
  std::vector<std::pair<std::string, Row>> rows(rows_.begin(), rows_.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto &a, const auto &b) { return a.second.ms > b.second.ms; });
  double total = 0;
  uint64_t steps = 0;
  size_t width = 3;
  for (const auto &[key, row] : rows) {
    total += row.ms;
    steps += row.calls;
    width = std::max(width, key.size());
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "megac: CUDA profile of rank %d over %llu function runs: %llu launch steps, "
                "%.3f ms\n",
                rank, static_cast<unsigned long long>(runs_),
                static_cast<unsigned long long>(steps), total);
  std::string text = line;
  int w = static_cast<int>(width);
  std::snprintf(line, sizeof line, "  %-*s %8s %10s %7s %10s\n", w, "key", "calls", "total ms",
                "% time", "mean us");
  text += line;
  for (const auto &[key, row] : rows) {
    std::snprintf(line, sizeof line, "  %-*s %8llu %10.3f %7.1f %10.3f\n", w, key.c_str(),
                  static_cast<unsigned long long>(row.calls), row.ms,
                  total > 0 ? 100.0 * row.ms / total : 0.0, 1e3 * row.ms / double(row.calls));
    text += line;
  }
  return text;
}

std::string describeStep(const megac::plan::Program &program, size_t programIndex, size_t function,
                         size_t first, size_t count, StepKind kind) {
  std::string text = describeInstruction(program, programIndex, function, first);
  if (kind == StepKind::fused)
    text += " (fused with the " + std::to_string(count - 1) + " instructions after it)";
  else if (kind == StepKind::adamw)
    text += " (with the " + std::to_string(count - 1) + " AdamW instructions after it)";
  return text;
}

std::string syncEachFailure(const megac::plan::Program &program, size_t programIndex,
                            size_t function, size_t first, size_t count, StepKind kind,
                            std::string_view errorName, std::string_view errorString, int device) {
  std::string text = describeStep(program, programIndex, function, first, count, kind) +
                     " failed on CUDA device " + std::to_string(device) + ": " +
                     std::string(errorName) + ": " + std::string(errorString) +
                     " (MEGAC_CUDA_SYNC_EACH=1 synchronized after every instruction before it";
  if (kind == StepKind::fused)
    text += "; MEGAC_NO_FUSION=1 runs the fused instructions one by one";
  return text + ")";
}

} // namespace megac::runtime::cuda
