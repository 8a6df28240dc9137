// Static memory planning: persistent storages first, then per function its pinned storages and
// best-fit by offset, largest first; functions share the bytes above the persistent region.
#include "codegen/MemoryPlanner.h"

#include <algorithm>
#include <map>

namespace megac::codegen {

namespace {

/// One region of the arena: a buffer and every buffer aliasing it.
struct Storage {
  uint64_t bytes = 0; // aligned
  int64_t def = 0;
  int64_t lastUse = 0;
  bool pinned = false;
  bool persistent = false;
  size_t function = 0;
  uint64_t offset = 0;
};

bool alignUp(uint64_t bytes, uint64_t alignment, uint64_t &out) {
  if (bytes > UINT64_MAX - (alignment - 1))
    return false;
  out = (bytes + alignment - 1) & ~(alignment - 1);
  return true;
}

/// Places one function's storages above `base`: pinned back to back, then best fit. Returns
/// the function's end, or nullopt on overflow.
std::optional<uint64_t> placeFunction(std::vector<Storage> &storages,
                                      const std::vector<size_t> &members, uint64_t base) {
  uint64_t end = base;
  for (size_t index : members) {
    Storage &s = storages[index];
    if (!s.pinned)
      continue;
    s.offset = end;
    if (__builtin_add_overflow(end, s.bytes, &end))
      return std::nullopt;
  }
  uint64_t pinnedEnd = end;

  // Largest first (ties: earliest definition, then request order) keeps fragmentation low.
  std::vector<size_t> order;
  for (size_t index : members)
    if (!storages[index].pinned && storages[index].bytes > 0)
      order.push_back(index);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (storages[a].bytes != storages[b].bytes)
      return storages[a].bytes > storages[b].bytes;
    return storages[a].def < storages[b].def;
  });

  std::vector<size_t> placed, conflicts;
  for (size_t index : order) {
    Storage &s = storages[index];
    conflicts.clear();
    for (size_t other : placed) {
      const Storage &o = storages[other];
      if (o.def <= s.lastUse && s.def <= o.lastUse)
        conflicts.push_back(other);
    }
    std::sort(conflicts.begin(), conflicts.end(),
              [&](size_t a, size_t b) { return storages[a].offset < storages[b].offset; });
    // Best fit: the smallest gap between live neighbours that holds the buffer; else the
    // first offset above all of them.
    uint64_t cursor = pinnedEnd, best = UINT64_MAX, bestWaste = UINT64_MAX;
    for (size_t other : conflicts) {
      const Storage &o = storages[other];
      if (o.offset > cursor && o.offset - cursor >= s.bytes &&
          o.offset - cursor - s.bytes < bestWaste) {
        best = cursor;
        bestWaste = o.offset - cursor - s.bytes;
      }
      cursor = std::max(cursor, o.offset + o.bytes);
    }
    s.offset = best != UINT64_MAX ? best : cursor;
    uint64_t top;
    if (__builtin_add_overflow(s.offset, s.bytes, &top))
      return std::nullopt;
    end = std::max(end, top);
    placed.push_back(index);
  }
  return end;
}

} // namespace

MemoryPlanResult planMemory(std::span<const BufferRequest> requests, uint64_t alignment) {
  auto fail = [](std::string message) { return MemoryPlanResult{std::nullopt, message}; };
  if (alignment == 0 || (alignment & (alignment - 1)))
    return fail("alignment " + std::to_string(alignment) + " is not a power of two");

  // Resolve aliases to their root storage.
  std::vector<size_t> storageOf(requests.size());
  std::vector<Storage> storages;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BufferRequest &r = requests[i];
    bool timed = !r.pinned && !r.persistent;
    if (timed && r.def > r.lastUse)
      return fail("buffer " + std::to_string(i) + " is used (" + std::to_string(r.lastUse) +
                  ") before it is defined (" + std::to_string(r.def) + ")");
    uint64_t bytes;
    if (!alignUp(r.bytes, alignment, bytes))
      return fail("buffer " + std::to_string(i) + " is too large");
    if (r.aliasOf) {
      if (*r.aliasOf >= i)
        return fail("buffer " + std::to_string(i) + " aliases buffer " +
                    std::to_string(*r.aliasOf) + ", which is not an earlier one");
      Storage &s = storages[storageOf[*r.aliasOf]];
      if (!s.persistent && !r.persistent && s.function != r.function)
        return fail("buffer " + std::to_string(i) + " of function " + std::to_string(r.function) +
                    " aliases buffer " + std::to_string(*r.aliasOf) + " of function " +
                    std::to_string(s.function));
      if (r.persistent && !s.persistent)
        return fail("buffer " + std::to_string(i) + " is persistent but aliases buffer " +
                    std::to_string(*r.aliasOf) + ", which is not");
      storageOf[i] = storageOf[*r.aliasOf];
      s.bytes = std::max(s.bytes, bytes);
      s.pinned = s.pinned || r.pinned;
      if (timed) {
        s.def = std::min(s.def, r.def);
        s.lastUse = std::max(s.lastUse, r.lastUse);
      }
      continue;
    }
    storageOf[i] = storages.size();
    storages.push_back({bytes, r.def, r.lastUse, r.pinned, r.persistent, r.function, 0});
  }

  MemoryPlan plan;
  uint64_t end = 0;
  std::map<size_t, std::vector<size_t>> functions; // function -> its storages
  for (size_t index = 0; index < storages.size(); ++index) {
    Storage &s = storages[index];
    if (__builtin_add_overflow(plan.totalBytes, s.bytes, &plan.totalBytes))
      return fail("the buffers' total size overflows 64 bits");
    if (!s.persistent) {
      functions[s.function].push_back(index);
      continue;
    }
    s.offset = end;
    end += s.bytes;
  }
  plan.persistentBytes = plan.pinnedBytes = plan.arenaBytes = end;
  for (const auto &[function, members] : functions) {
    uint64_t pinnedEnd = plan.persistentBytes;
    for (size_t index : members)
      if (storages[index].pinned)
        pinnedEnd += storages[index].bytes;
    plan.pinnedBytes = std::max(plan.pinnedBytes, pinnedEnd);
    std::optional<uint64_t> top = placeFunction(storages, members, plan.persistentBytes);
    if (!top)
      return fail("the arena size overflows 64 bits");
    plan.arenaBytes = std::max(plan.arenaBytes, *top);
  }

  plan.offsets.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    plan.offsets[i] = storages[storageOf[i]].offset;
  return {std::move(plan), {}};
}

} // namespace megac::codegen
