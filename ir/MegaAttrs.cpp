// The mesh, sharding and init attributes: syntax, verifiers and layout arithmetic.
#include "ir/MegaDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mega;

#define GET_ATTRDEF_CLASSES
#include "ir/MegaAttrs.cpp.inc"

void MegaDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "ir/MegaAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

/// 2^31 devices: far beyond any cluster, small enough that shape arithmetic cannot overflow.
static constexpr int64_t kMaxMeshDevices = int64_t(1) << 31;

// <dp = 2, pp = 2, tp = 4>
Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SmallVector<StringAttr> names;
  SmallVector<int64_t> sizes;
  auto parseAxis = [&]() -> ParseResult {
    std::string name;
    int64_t size;
    if (parser.parseKeywordOrString(&name) || parser.parseEqual() || parser.parseInteger(size))
      return failure();
    names.push_back(parser.getBuilder().getStringAttr(name));
    sizes.push_back(size);
    return success();
  };
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::LessGreater, parseAxis))
    return {};
  return MeshAttr::getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                              parser.getContext(), names, sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << '<';
  for (auto [i, name, size] : llvm::enumerate(getAxisNames(), getAxisSizes())) {
    printer << (i ? ", " : "");
    printer.printKeywordOrString(name.getValue());
    printer << " = " << size;
  }
  printer << '>';
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> names, ArrayRef<int64_t> sizes) {
  if (names.empty())
    return emitError() << "a mesh needs at least one axis";
  if (names.size() != sizes.size())
    return emitError() << "mesh has " << names.size() << " axis names but " << sizes.size()
                       << " sizes";
  llvm::SmallSet<StringRef, 4> seen;
  int64_t devices = 1;
  for (auto [name, size] : llvm::zip(names, sizes)) {
    if (name.getValue().empty())
      return emitError() << "mesh axis names must not be empty";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue() << "' is listed twice";
    if (size < 1)
      return emitError() << "mesh axis '" << name.getValue() << "' has size " << size
                         << "; sizes must be >= 1";
    // Keeps every group size (a product of axis sizes) far from int64 overflow.
    if (size > kMaxMeshDevices / devices)
      return emitError() << "mesh has more than " << kMaxMeshDevices << " devices";
    devices *= size;
  }
  return success();
}

std::optional<unsigned> MeshAttr::findAxis(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(getAxisNames()))
    if (axis.getValue() == name)
      return i;
  return std::nullopt;
}

int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (int64_t s : getAxisSizes())
    n *= s;
  return n;
}

int64_t MeshAttr::getGroupSize(ArrayRef<StringAttr> axes) const {
  int64_t n = 1;
  for (StringAttr axis : axes)
    if (auto i = findAxis(axis.getValue()))
      n *= getAxisSizes()[*i];
  return n;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

// <#mesh, [[dp], [], [tp]], partial = sum(tp)>
Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  Builder &b = parser.getBuilder();
  Attribute meshAttr;
  if (parser.parseLess() || parser.parseAttribute(meshAttr) || parser.parseComma())
    return {};
  auto mesh = dyn_cast<MeshAttr>(meshAttr);
  if (!mesh) {
    parser.emitError(parser.getNameLoc(), "expected a #mega.mesh as the first parameter");
    return {};
  }
  auto parseAxisList = [&](SmallVectorImpl<StringAttr> &axes) -> ParseResult {
    return parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
      std::string name;
      if (parser.parseKeywordOrString(&name))
        return failure();
      axes.push_back(b.getStringAttr(name));
      return success();
    });
  };
  SmallVector<Attribute> dims;
  if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
        SmallVector<StringAttr> axes;
        if (parseAxisList(axes))
          return failure();
        dims.push_back(b.getArrayAttr(SmallVector<Attribute>(axes.begin(), axes.end())));
        return success();
      }))
    return {};
  SmallVector<StringAttr> partial;
  ReduceKind kind = ReduceKind::sum;
  if (succeeded(parser.parseOptionalComma())) {
    std::string kindName;
    if (parser.parseKeyword("partial") || parser.parseEqual() ||
        parser.parseKeywordOrString(&kindName))
      return {};
    auto parsedKind = symbolizeReduceKind(kindName);
    if (!parsedKind) {
      parser.emitError(parser.getCurrentLocation(), "unknown reduce kind '") << kindName << "'";
      return {};
    }
    kind = *parsedKind;
    SmallVector<StringAttr> axes;
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Paren, [&]() -> ParseResult {
          std::string name;
          if (parser.parseKeywordOrString(&name))
            return failure();
          partial.push_back(b.getStringAttr(name));
          return success();
        }))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return ShardingAttr::getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                                  parser.getContext(), mesh, b.getArrayAttr(dims), partial, kind);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printer.printAttribute(getMesh());
  printer << ", [";
  for (auto [i, dim] : llvm::enumerate(getDimAxes())) {
    printer << (i ? ", " : "") << '[';
    for (auto [j, axis] : llvm::enumerate(cast<ArrayAttr>(dim))) {
      printer << (j ? ", " : "");
      printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
    }
    printer << ']';
  }
  printer << ']';
  if (!getPartialAxes().empty()) {
    printer << ", partial = " << stringifyReduceKind(getPartialKind()) << '(';
    for (auto [i, axis] : llvm::enumerate(getPartialAxes())) {
      printer << (i ? ", " : "");
      printer.printKeywordOrString(axis.getValue());
    }
    printer << ')';
  }
  printer << '>';
}

LogicalResult ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError, MeshAttr mesh,
                                   ArrayAttr dimAxes, ArrayRef<StringAttr> partialAxes,
                                   ReduceKind partialKind) {
  llvm::SmallSet<StringRef, 4> used;
  auto use = [&](Attribute axisAttr, StringRef where) -> LogicalResult {
    auto axis = dyn_cast<StringAttr>(axisAttr);
    if (!axis)
      return emitError() << "sharding " << where << " must list mesh axis names";
    if (!mesh.findAxis(axis.getValue()))
      return emitError() << "sharding " << where << " names axis '" << axis.getValue()
                         << "', which the mesh does not have";
    if (!used.insert(axis.getValue()).second)
      return emitError() << "sharding uses mesh axis '" << axis.getValue() << "' twice";
    return success();
  };
  for (auto [d, dim] : llvm::enumerate(dimAxes)) {
    auto axes = dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return emitError() << "sharding dim " << d << " must be a list of mesh axes";
    for (Attribute axis : axes)
      if (failed(use(axis, "dim " + std::to_string(d))))
        return failure();
  }
  for (StringAttr axis : partialAxes)
    if (failed(use(axis, "partial")))
      return failure();
  if (partialAxes.empty() && partialKind != ReduceKind::sum)
    return emitError() << "sharding has partial kind '" << stringifyReduceKind(partialKind)
                       << "' but no partial axes";
  return success();
}

LogicalResult ShardingAttr::verifyEncoding(ArrayRef<int64_t> shape, Type,
                                           function_ref<InFlightDiagnostic()> emitError) const {
  if (shape.size() != getDimAxes().size())
    return emitError() << "sharding lists " << getDimAxes().size() << " dims for a tensor of rank "
                       << shape.size();
  for (unsigned d = 0; d < shape.size(); ++d) {
    SmallVector<StringAttr> axes = getAxesOfDim(d);
    int64_t parts = getMesh().getGroupSize(axes);
    if (shape[d] % parts != 0)
      return emitError() << "tensor dim " << d << " of size " << shape[d]
                         << " is not divisible by the " << parts
                         << " devices of the mesh axes it is split over";
  }
  return success();
}

SmallVector<StringAttr> ShardingAttr::getAxesOfDim(unsigned dim) const {
  SmallVector<StringAttr> axes;
  for (Attribute a : cast<ArrayAttr>(getDimAxes()[dim]))
    axes.push_back(cast<StringAttr>(a));
  return axes;
}

SmallVector<int64_t> ShardingAttr::getLocalShape(ArrayRef<int64_t> globalShape) const {
  SmallVector<int64_t> local(globalShape);
  for (unsigned d = 0; d < local.size() && d < getDimAxes().size(); ++d)
    local[d] /= getMesh().getGroupSize(getAxesOfDim(d));
  return local;
}

//===----------------------------------------------------------------------===//
// InitAttr
//===----------------------------------------------------------------------===//

// <normal, std = 0.02> | <zeros> | <ones>
Attribute InitAttr::parse(AsmParser &parser, Type) {
  std::string kindName;
  if (parser.parseLess() || parser.parseKeywordOrString(&kindName))
    return {};
  auto kind = symbolizeInitKind(kindName);
  if (!kind) {
    parser.emitError(parser.getCurrentLocation(), "unknown init kind '")
        << kindName << "'; expected normal, zeros or ones";
    return {};
  }
  double stddev = 0.0;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("std") || parser.parseEqual() || parser.parseFloat(stddev))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return InitAttr::getChecked([&] { return parser.emitError(parser.getNameLoc()); },
                              parser.getContext(), *kind, llvm::APFloat(stddev));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyInitKind(getKind());
  if (getKind() == InitKind::normal)
    printer << ", std = " << getStddev().convertToDouble();
  printer << '>';
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError, InitKind kind,
                               llvm::APFloat stddevValue) {
  double stddev = stddevValue.convertToDouble();
  if (kind == InitKind::normal && !(stddev > 0.0))
    return emitError() << "normal init needs std > 0, got " << stddev;
  if (kind != InitKind::normal && stddev != 0.0)
    return emitError() << stringifyInitKind(kind) << " init takes no std";
  return success();
}
