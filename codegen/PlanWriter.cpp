// Lowering a module's single-rank mega functions to a FlatBuffers plan: which functions, the
// mesh, and the plan table around the one program (codegen/ProgramLowering.h).
#include "codegen/PlanWriter.h"

#include "codegen/ProgramLowering.h"
#include "ir/MegaOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"

namespace megac::codegen {

namespace {

namespace fb = flatbuffers;
namespace pl = megac::plan;

constexpr const char *kProducer = "megac 0.1";
/// Optional module attribute: the #mega.mesh a single-rank plan runs on (one device).
constexpr const char *kModuleMeshAttr = "mega.mesh";

/// The named function, or every function of the module.
mlir::FailureOr<llvm::SmallVector<mlir::func::FuncOp>> selectFunctions(mlir::ModuleOp module,
                                                                       const std::string &name) {
  llvm::SmallVector<mlir::func::FuncOp> funcs(module.getOps<mlir::func::FuncOp>());
  if (!name.empty()) {
    for (mlir::func::FuncOp func : funcs)
      if (func.getSymName() == name)
        return llvm::SmallVector<mlir::func::FuncOp>{func};
    return module.emitError() << "no function @" << name << " in the module";
  }
  if (funcs.empty())
    return module.emitError() << "the module has no functions to compile";
  return funcs;
}

} // namespace

mlir::FailureOr<std::vector<uint8_t>> writePlan(mlir::ModuleOp module,
                                                const CodegenOptions &options) {
  auto funcs = selectFunctions(module, options.function);
  if (failed(funcs))
    return mlir::failure();

  std::vector<std::string> axisNames{"dp"};
  std::vector<int64_t> axisSizes{1};
  if (mlir::Attribute attr = module->getAttr(kModuleMeshAttr)) {
    auto mesh = mlir::dyn_cast<mega::MeshAttr>(attr);
    if (!mesh)
      return module.emitError() << kModuleMeshAttr << " is not a #mega.mesh";
    if (mesh.getNumDevices() != 1)
      return module.emitError() << "the module's mesh has " << mesh.getNumDevices()
                                << " devices; codegen writes single-rank plans only";
    axisNames.clear();
    axisSizes.assign(mesh.getAxisSizes().begin(), mesh.getAxisSizes().end());
    for (mlir::StringAttr axis : mesh.getAxisNames())
      axisNames.push_back(axis.str());
  }

  fb::FlatBufferBuilder fbb(1 << 16);
  detail::ProgramLowering lowering(module, funcs->size(), fbb);
  bool ok = true;
  for (mlir::func::FuncOp func : *funcs)
    ok &= succeeded(lowering.lowerFunction(func)); // every function's errors, not the first's
  if (!ok)
    return mlir::failure();
  auto program = lowering.finish();
  if (failed(program))
    return mlir::failure();

  std::vector<fb::Offset<pl::Program>> programs{*program};
  std::vector<int64_t> coords(axisSizes.size(), 0);
  std::vector<fb::Offset<pl::RankEntry>> ranks{pl::CreateRankEntryDirect(fbb, 0, &coords)};
  std::vector<fb::Offset<fb::String>> axisNameOffsets;
  for (const std::string &axis : axisNames)
    axisNameOffsets.push_back(fbb.CreateString(axis));
  auto mesh = pl::CreateMeshDirect(fbb, &axisNameOffsets, &axisSizes);
  auto plan =
      pl::CreatePlanDirect(fbb, static_cast<uint32_t>(pl::FormatVersion::Current), kProducer, mesh,
                           &programs, &ranks, options.weightsFile.c_str(), options.seed);
  pl::FinishPlanBuffer(fbb, plan);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

} // namespace megac::codegen
