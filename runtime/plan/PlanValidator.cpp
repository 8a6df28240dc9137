// The plan validator's plan-wide checks: the mesh and rank table, the pipeline table, and the
// mesh axes and shardings that parameters, state and collectives name; then each program in turn.
#include "runtime/plan/PlanValidator.h"

#include <set>

namespace megac::runtime {

namespace fb = megac::plan;

Status PlanValidator::run() {
  if (!plan_.programs() || plan_.programs()->size() == 0)
    return planError("it has no programs");
  // The mesh and rank table first: sharding and collective checks use them.
  RETURN_IF_ERROR(ranks());
  RETURN_IF_ERROR(pipeline());
  for (size_t p = 0; p < plan_.programs()->size(); ++p)
    RETURN_IF_ERROR(program(*plan_.programs()->Get(flatbuffers::uoffset_t(p)), p));
  return Status::ok();
}

Status PlanValidator::planError(const std::string &what) const {
  return Status::error("plan " + source_ + ": " + what);
}

Status PlanValidator::ranks() {
  const fb::Mesh *mesh = plan_.mesh();
  size_t axes = mesh ? sizeOf(mesh->axis_sizes()) : 0;
  if (mesh && sizeOf(mesh->axis_names()) != axes)
    return planError("the mesh has " + std::to_string(sizeOf(mesh->axis_names())) +
                     " axis names but " + std::to_string(axes) + " axis sizes");
  int64_t positions = 1;
  for (size_t a = 0; a < axes; ++a) {
    int64_t size = mesh->axis_sizes()->Get(flatbuffers::uoffset_t(a));
    if (size < 1 || __builtin_mul_overflow(positions, size, &positions))
      return planError("mesh axis " + std::to_string(a) + " has size " + std::to_string(size));
  }
  size_t count = sizeOf(plan_.ranks());
  if (count == 0)
    return planError("the rank table is empty");
  if (static_cast<int64_t>(count) != positions)
    return planError("the mesh has " + std::to_string(positions) +
                     " positions but the rank "
                     "table has " +
                     std::to_string(count) + " entries");
  for (size_t r = 0; r < count; ++r) {
    const fb::RankEntry *entry = plan_.ranks()->Get(flatbuffers::uoffset_t(r));
    std::string which = "rank " + std::to_string(r);
    if (entry->role() >= plan_.programs()->size())
      return planError(which + " has role " + std::to_string(entry->role()) + ", but there are " +
                       std::to_string(plan_.programs()->size()) + " programs");
    if (sizeOf(entry->coords()) != axes)
      return planError(which + " has " + std::to_string(sizeOf(entry->coords())) +
                       " mesh coordinates, but the mesh has " + std::to_string(axes) + " axes");
    int64_t index = 0;
    for (size_t a = 0; a < axes; ++a) {
      int64_t c = entry->coords()->Get(flatbuffers::uoffset_t(a));
      int64_t size = mesh->axis_sizes()->Get(flatbuffers::uoffset_t(a));
      if (c < 0 || c >= size)
        return planError(which + " has coordinate " + std::to_string(c) + " on axis " +
                         std::to_string(a) + " of size " + std::to_string(size));
      index = index * size + c;
    }
    if (index != static_cast<int64_t>(r))
      return planError(which + " has the coordinates of rank " + std::to_string(index) +
                       " (a rank is the row-major index of its coordinates)");
  }
  return Status::ok();
}

Status PlanValidator::pipeline() const {
  const fb::Pipeline *pl = plan_.pipeline();
  if (!pl)
    return Status::ok();
  if (pl->stages() < 1 || pl->virtual_stages() < 1 || pl->micro_batches() < 1)
    return planError("pipeline has stages " + std::to_string(pl->stages()) + ", virtual_stages " +
                     std::to_string(pl->virtual_stages()) + " and micro_batches " +
                     std::to_string(pl->micro_batches()) + " (each must be >= 1)");
  for (size_t a = 0; a < meshRank(); ++a)
    if (plan_.mesh()->axis_names()->Get(flatbuffers::uoffset_t(a))->str() == "pp" &&
        axisSize(uint32_t(a)) != int64_t(pl->stages()))
      return planError("pipeline has " + std::to_string(pl->stages()) +
                       " stages, but the mesh's pp axis has size " +
                       std::to_string(axisSize(uint32_t(a))));
  return Status::ok();
}

int64_t PlanValidator::groupSize(const flatbuffers::Vector<uint32_t> *axes) const {
  int64_t n = 1;
  for (size_t k = 0; k < sizeOf(axes); ++k)
    n *= axisSize(axes->Get(flatbuffers::uoffset_t(k)));
  return n;
}

Status
PlanValidator::shardings(const flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>> *list,
                         const flatbuffers::Vector<int64_t> *global, const fb::Buffer &buf,
                         const std::string &which) const {
  size_t rank = sizeOf(buf.shape());
  std::set<uint32_t> dims, usedAxes;
  for (size_t k = 0; k < sizeOf(list); ++k) {
    const fb::DimSharding *ds = list->Get(flatbuffers::uoffset_t(k));
    std::string what = which + ": sharding " + std::to_string(k);
    if (ds->dim() >= rank)
      return progError(what + " splits dim " + std::to_string(ds->dim()) + " of a rank-" +
                       std::to_string(rank) + " tensor");
    if (!dims.insert(ds->dim()).second)
      return progError(what + " splits dim " + std::to_string(ds->dim()) + " twice");
    RETURN_IF_ERROR(meshAxes(
        ds->axes(), what + " axes", true, [&](const std::string &m) { return progError(m); },
        /*anyOrder=*/true));
    for (uint32_t a : *ds->axes())
      if (!usedAxes.insert(a).second)
        return progError(what + " reuses mesh axis " + std::to_string(a));
    int64_t local = buf.shape()->Get(ds->dim());
    int64_t whole = sizeOf(global) == rank ? global->Get(ds->dim()) : -1;
    int64_t parts = groupSize(ds->axes());
    if (ds->padded_size() != 0) {
      // A padded split (ZeRO-3): the dim rounded up to a multiple of the group, each rank's
      // buffer one part of it.
      std::string dim = ": dim " + std::to_string(ds->dim()) + " of global size " +
                        std::to_string(whole) + " has padded_size " +
                        std::to_string(ds->padded_size());
      int64_t expected = whole >= 0 ? (whole + parts - 1) / parts * parts : -1;
      if (ds->padded_size() != expected)
        return progError(what + dim + ", but split over the group's " + std::to_string(parts) +
                         " ranks it pads to " + std::to_string(expected));
      if (local * parts != ds->padded_size())
        return progError(what + dim + ", but the buffer's dim is " + std::to_string(local) +
                         ", not " + std::to_string(ds->padded_size()) + " / " +
                         std::to_string(parts) + " ranks");
      continue;
    }
    if (local * parts != whole)
      return progError(what + ": dim " + std::to_string(ds->dim()) + " has global size " +
                       std::to_string(whole) + ", not the local " + std::to_string(local) +
                       " times the group's " + std::to_string(parts) + " ranks");
  }
  return Status::ok();
}

} // namespace megac::runtime
