// A model's fingerprint from its canonical forward IR (ModelFingerprint.h).
#include "driver/ModelFingerprint.h"

#include "ir/MegaDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/raw_ostream.h"

#include <cinttypes>
#include <cstdio>

namespace megac::driver {

namespace {

/// FNV-1a, 64 bits: stable across runs and machines (std::hash is neither).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(std::string_view s) {
    for (unsigned char c : s)
      h = (h ^ c) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull; // field separator
  }
  void add(int64_t v) { add(std::to_string(v)); }
};

/// A zoo spec without its batch key ("gpt:layers=2,...,batch=8,..."): the batch is the layout's.
std::string withoutBatch(std::string spec) {
  size_t at = spec.find(",batch=");
  if (at == std::string::npos)
    return spec;
  size_t end = spec.find(',', at + 1);
  spec.erase(at, end == std::string::npos ? std::string::npos : end - at);
  return spec;
}

/// An attribute as hashed: integer arrays and element data by length only (they may hold the
/// batch size), everything else as printed.
std::string attributeText(mlir::Attribute attr) {
  if (auto elements = mlir::dyn_cast<mlir::ElementsAttr>(attr))
    return "elements rank " + std::to_string(elements.getShapedType().getRank());
  if (auto array = mlir::dyn_cast<mlir::DenseI64ArrayAttr>(attr))
    return "i64 array of " + std::to_string(array.size());
  if (auto array = mlir::dyn_cast<mlir::ArrayAttr>(attr)) {
    bool integers =
        llvm::all_of(array, [](mlir::Attribute a) { return mlir::isa<mlir::IntegerAttr>(a); });
    if (integers)
      return "integer array of " + std::to_string(array.size());
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  attr.print(os);
  return text;
}

} // namespace

runtime::checkpoint::ModelFingerprint fingerprintOf(mlir::ModuleOp module,
                                                    const std::string &description) {
  runtime::checkpoint::ModelFingerprint f;
  f.model = description;
  if (auto spec = module->getAttrOfType<mlir::StringAttr>("mega.model"))
    f.model = withoutBatch(spec.str());
  Fnv hash;
  hash.add(f.model);
  llvm::DenseMap<mlir::Value, int64_t> ids;
  for (auto func : module.getOps<mlir::func::FuncOp>()) {
    hash.add(func.getSymName());
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      mlir::BlockArgument arg = func.getArgument(i);
      ids[arg] = int64_t(ids.size());
      auto type = mlir::dyn_cast<mlir::RankedTensorType>(arg.getType());
      if (auto name = func.getArgAttrOfType<mlir::StringAttr>(i, mega::kParamAttr)) {
        std::vector<int64_t> shape;
        if (type)
          shape.assign(type.getShape().begin(), type.getShape().end());
        f.parameters[name.str()] = shape;
        hash.add(name.getValue());
      }
      hash.add(type ? type.getRank() : -1);
    }
    func.walk([&](mlir::Operation *op) {
      if (op == func.getOperation())
        return;
      hash.add(op->getName().getStringRef());
      for (mlir::NamedAttribute attr : op->getAttrs()) {
        // Which operand fills which optional segment is already in the operand list hashed
        // below (mega.attention: a mask or a query/key position pair, never both). Leaving the
        // segment sizes out keeps the fingerprints of checkpoints saved before attention had
        // optional positions (tests/e2e/optimizer_checkpoint's fixture).
        if (attr.getName().getValue() == "operandSegmentSizes")
          continue;
        hash.add(attr.getName().getValue());
        hash.add(attributeText(attr.getValue()));
      }
      for (mlir::Value operand : op->getOperands()) {
        auto it = ids.find(operand);
        hash.add(it == ids.end() ? int64_t(-1) : it->second);
      }
      for (mlir::Value result : op->getResults()) {
        ids[result] = int64_t(ids.size());
        auto type = mlir::dyn_cast<mlir::RankedTensorType>(result.getType());
        hash.add(type ? type.getRank() : -1);
      }
    });
  }
  char hex[24];
  std::snprintf(hex, sizeof(hex), "%016" PRIx64, hash.h);
  f.graphHash = hex;
  return f;
}

} // namespace megac::driver
