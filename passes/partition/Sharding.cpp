// Shardings and their #mega.sharding encodings (Sharding.h).
#include "passes/partition/Sharding.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;

namespace megac::partition {

bool Sharding::isReplicated() const {
  return partial.empty() && llvm::all_of(dims, [](const AxisList &a) { return a.empty(); });
}

AxisList Sharding::allAxes() const {
  AxisList all(partial.begin(), partial.end());
  for (const AxisList &d : dims)
    all.append(d.begin(), d.end());
  return all;
}

int Sharding::dimOf(unsigned axis) const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (llvm::is_contained(dims[d], axis))
      return static_cast<int>(d);
  return -1;
}

bool Sharding::isPartialOver(unsigned axis) const { return llvm::is_contained(partial, axis); }

Sharding shardingOf(Type type, mega::MeshAttr mesh) {
  auto tensor = cast<RankedTensorType>(type);
  Sharding layout = Sharding::replicated(tensor.getRank());
  auto sharding = dyn_cast_or_null<mega::ShardingAttr>(tensor.getEncoding());
  if (!sharding)
    return layout;
  for (unsigned d = 0; d < tensor.getRank(); ++d)
    for (StringAttr axis : sharding.getAxesOfDim(d))
      layout.dims[d].push_back(*mesh.findAxis(axis.getValue()));
  for (StringAttr axis : sharding.getPartialAxes())
    layout.partial.push_back(*mesh.findAxis(axis.getValue()));
  return layout;
}

ArrayAttr axisNames(MLIRContext *context, mega::MeshAttr mesh, const AxisList &axes) {
  SmallVector<Attribute> names;
  for (unsigned a : axes)
    names.push_back(mesh.getAxisNames()[a]);
  return ArrayAttr::get(context, names);
}

RankedTensorType withSharding(RankedTensorType type, const Sharding &layout, mega::MeshAttr mesh) {
  if (layout.isReplicated())
    return RankedTensorType::get(type.getShape(), type.getElementType());
  MLIRContext *context = type.getContext();
  SmallVector<Attribute> dims;
  for (const AxisList &d : layout.dims)
    dims.push_back(axisNames(context, mesh, d));
  SmallVector<StringAttr> partial;
  for (unsigned a : layout.partial)
    partial.push_back(mesh.getAxisNames()[a]);
  auto sharding = mega::ShardingAttr::get(context, mesh, ArrayAttr::get(context, dims), partial,
                                          mega::ReduceKind::sum);
  return RankedTensorType::get(type.getShape(), type.getElementType(), sharding);
}

int64_t groupSize(mega::MeshAttr mesh, const AxisList &axes) {
  int64_t n = 1;
  for (unsigned a : axes)
    n *= mesh.getAxisSizes()[a];
  return n;
}

RankedTensorType localType(RankedTensorType type, const Sharding &layout, mega::MeshAttr mesh) {
  SmallVector<int64_t> shape(type.getShape());
  for (size_t d = 0; d < shape.size() && d < layout.dims.size(); ++d)
    shape[d] /= groupSize(mesh, layout.dims[d]);
  return RankedTensorType::get(shape, type.getElementType());
}

std::string describe(const Sharding &layout, mega::MeshAttr mesh) {
  std::string out;
  for (size_t d = 0; d < layout.dims.size(); ++d) {
    out += d ? ", [" : "[";
    for (size_t i = 0; i < layout.dims[d].size(); ++i)
      out += (i ? "," : "") + mesh.getAxisNames()[layout.dims[d][i]].getValue().str();
    out += "]";
  }
  if (!layout.partial.empty()) {
    out += " partial(";
    for (size_t i = 0; i < layout.partial.size(); ++i)
      out += (i ? "," : "") + mesh.getAxisNames()[layout.partial[i]].getValue().str();
    out += ")";
  }
  return out;
}

} // namespace megac::partition
