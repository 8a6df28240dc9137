// Parameter counts, FLOPs and op histograms of a forward graph.
#include "planner/ModelStats.h"

#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

namespace megac::planner {

ModelStatsResult computeModelStats(mlir::ModuleOp module, std::string_view name) {
  mlir::func::FuncOp func;
  int functions = 0;
  for (auto f : module.getOps<mlir::func::FuncOp>()) {
    ++functions;
    if (name.empty() ? !func : f.getSymName() == llvm::StringRef(name.data(), name.size()))
      func = f;
  }
  if (!func)
    return {std::nullopt, name.empty() ? std::string("the module has no function")
                                       : "the module has no function @" + std::string(name)};
  if (name.empty() && functions > 1)
    return {std::nullopt,
            "the module has " + std::to_string(functions) + " functions; name the one to describe"};

  ModelStats s;
  s.function = func.getSymName().str();
  int64_t firstIntInput = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    mlir::Type type = func.getArgument(i).getType();
    if (func.getArgAttr(i, mega::kParamAttr)) {
      ++s.parameterTensors;
      s.parameters += mega::cost::numElements(type);
      s.parameterBytes += mega::cost::numBytes(type);
    } else if (auto input = func.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr)) {
      auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
      bool isInt = tensor && mlir::isa<mlir::IntegerType>(tensor.getElementType()) &&
                   tensor.getElementType().getIntOrFloatBitWidth() > 1;
      if (input.getValue() == "input_ids")
        s.tokens = mega::cost::numElements(type);
      else if (isInt && !firstIntInput)
        firstIntInput = mega::cost::numElements(type);
    }
  }
  if (!s.tokens)
    s.tokens = firstIntInput;

  // Expert weights: parameters moe_matmul reads as its weight, each counted once: a stacked
  // [E, ...] parameter (the zoo), or one parameter per expert reshaped, transposed or cast and
  // concatenated (the raised ONNX pattern).
  std::map<unsigned, std::pair<int64_t, int64_t>> expertWeights; // argument -> (E, topk)
  std::function<void(mlir::Value, int64_t, int64_t, int)> collect =
      [&](mlir::Value v, int64_t experts, int64_t topk, int depth) {
        if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v)) {
          if (arg.getOwner() == &func.getBody().front() &&
              func.getArgAttr(arg.getArgNumber(), mega::kParamAttr))
            expertWeights[arg.getArgNumber()] = {experts, topk};
          return;
        }
        mlir::Operation *def = v.getDefiningOp();
        if (!def || depth > 4 ||
            !mlir::isa<mega::ConcatOp, mega::ReshapeOp, mega::TransposeOp, mega::CastOp>(def))
          return;
        for (mlir::Value operand : def->getOperands())
          collect(operand, experts, topk, depth + 1);
      };
  func.walk([&](mlir::Operation *op) {
    if (op == func.getOperation())
      return;
    ++s.opHistogram[op->getName().getStringRef().str()];
    if (auto cost = mlir::dyn_cast<mega::CostOpInterface>(op)) {
      s.forwardFlops += cost.getFlops();
      s.forwardMatmulFlops += cost.getMatmulFlops();
      s.forwardBytes += cost.getBytesRead() + cost.getBytesWritten();
    }
    if (auto moe = mlir::dyn_cast<mega::MoeMatmulOp>(op))
      if (auto type = mlir::dyn_cast<mlir::RankedTensorType>(moe.getWeight().getType()))
        collect(moe.getWeight(), type.getDimSize(0), int64_t(moe.getTopk()), 0);
  });
  // A token uses topk/E of every expert weight (of a stacked one, topk of its E slices; of
  // per-expert ones, topk of the E in its stack: the same share, summed exactly below).
  double inactive = 0;
  for (auto [index, expertsAndTopk] : expertWeights) {
    auto [experts, topk] = expertsAndTopk;
    int64_t elements = mega::cost::numElements(func.getArgument(index).getType());
    s.expertParameters += elements;
    inactive += double(elements) * double(experts - std::min(topk, experts)) / double(experts);
    s.experts = std::max(s.experts, experts);
    s.topk = std::max(s.topk, topk);
  }
  s.activeParameters = s.parameters - static_cast<int64_t>(std::llround(inactive));
  // The MoE layers: one dispatch each.
  if (!expertWeights.empty())
    func.walk([&](mega::MoeDispatchOp) { ++s.moeLayers; });
  return {s, {}};
}

std::string withCommas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0)
      out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

namespace {
std::string scaled(double n, const char *const *prefixes, int count) {
  int i = 0;
  while (std::fabs(n) >= 1000.0 && i < count - 1) {
    n /= 1000.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, i ? "%.1f%s" : "%.0f%s", n, prefixes[i]);
  return buf;
}
} // namespace

std::string humanCount(double n) {
  static const char *prefixes[] = {"", "K", "M", "G", "T", "P", "E"};
  return scaled(n, prefixes, 7);
}

std::string humanParams(double n) {
  static const char *prefixes[] = {"", "K", "M", "B", "T"};
  return scaled(n, prefixes, 5);
}

} // namespace megac::planner
