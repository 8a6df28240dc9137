// Registration of the `mega` dialect and how its printed IR names meshes.
#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"

#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mega;

#include "ir/MegaDialect.cpp.inc"
#include "ir/MegaEnums.cpp.inc"

namespace {
/// Prints meshes once at the top of a module (`#mesh = #mega.mesh<...>`) and refers to them
/// by alias, so shardings stay readable.
struct MegaOpAsmInterface : public OpAsmDialectInterface {
  using OpAsmDialectInterface::OpAsmDialectInterface;
  AliasResult getAlias(Attribute attr, raw_ostream &os) const override {
    if (isa<MeshAttr>(attr)) {
      os << "mesh";
      return AliasResult::FinalAlias;
    }
    return AliasResult::NoAlias;
  }
};
} // namespace

void MegaDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "ir/MegaOps.cpp.inc"
      >();
  addInterfaces<MegaOpAsmInterface>();
}
