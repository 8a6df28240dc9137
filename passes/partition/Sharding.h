// A value's sharding over the mesh, as the partition passes handle it: per dim the mesh axes it
// is split over, and the axes it is a partial sum over. Converts to and from the
// #mega.sharding encoding that carries it in the IR between the two passes.
#pragma once

#include "ir/MegaDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace megac::partition {

using AxisList = llvm::SmallVector<unsigned, 2>; // mesh axis indices, major first

struct Sharding {
  llvm::SmallVector<AxisList, 4> dims;
  AxisList partial;

  static Sharding replicated(size_t rank) {
    return Sharding{llvm::SmallVector<AxisList, 4>(rank), {}};
  }
  bool operator==(const Sharding &other) const = default;
  bool isReplicated() const;
  /// Every axis the layout names (in dims or partial).
  AxisList allAxes() const;
  /// The dim split over `axis`, or -1.
  int dimOf(unsigned axis) const;
  bool isPartialOver(unsigned axis) const;
};

/// The layout a type's encoding gives (replicated when it has none).
Sharding shardingOf(mlir::Type type, mega::MeshAttr mesh);
/// `type` with the layout as its encoding (none when replicated).
mlir::RankedTensorType withSharding(mlir::RankedTensorType type, const Sharding &layout,
                                    mega::MeshAttr mesh);
/// The local shape of a value of `type` (global shape) under `layout`.
mlir::RankedTensorType localType(mlir::RankedTensorType type, const Sharding &layout,
                                 mega::MeshAttr mesh);
/// The number of devices in the group of `axes`.
int64_t groupSize(mega::MeshAttr mesh, const AxisList &axes);
/// The axes' names, as a string array attribute.
mlir::ArrayAttr axisNames(mlir::MLIRContext *context, mega::MeshAttr mesh, const AxisList &axes);
/// "[dp], [], [tp] partial(tp)": for diagnostics.
std::string describe(const Sharding &layout, mega::MeshAttr mesh);

} // namespace megac::partition
