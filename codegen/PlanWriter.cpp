// Lowering a module's single-rank mega functions to a FlatBuffers plan: which functions, the
// mesh, and the plan table around the one program (codegen/ProgramLowering.h).
#include "codegen/PlanWriter.h"

#include "codegen/ProgramLowering.h"
#include "ir/MegaOps.h"
#include "parallel/PipelineSchedule.h"

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

/// The nested per-stage modules of a pipelined module, by stage (empty if not pipelined).
mlir::FailureOr<llvm::SmallVector<mlir::ModuleOp>> stageModules(mlir::ModuleOp module) {
  llvm::SmallVector<mlir::ModuleOp> stages;
  for (auto nested : module.getOps<mlir::ModuleOp>()) {
    auto stage = nested->getAttrOfType<mlir::IntegerAttr>("mega.stage");
    if (!stage)
      continue;
    if (stage.getInt() != static_cast<int64_t>(stages.size()))
      return nested.emitError() << "stage modules must be in stage order; expected stage "
                                << stages.size() << ", got " << stage.getInt();
    stages.push_back(nested);
  }
  return stages;
}

/// Chunk indices of the forward.c<N> functions of a stage module.
int64_t countChunks(mlir::ModuleOp stage) {
  int64_t n = 0;
  for (auto f : stage.getOps<mlir::func::FuncOp>())
    if (f.getSymName().starts_with("forward.c"))
      ++n;
  return n;
}

} // namespace

mlir::FailureOr<std::vector<uint8_t>> writePlan(mlir::ModuleOp module,
                                                const CodegenOptions &options) {
  std::vector<std::string> axisNames{"dp"};
  std::vector<int64_t> axisSizes{1};
  mega::MeshAttr mesh;
  if (mlir::Attribute attr = module->getAttr(kModuleMeshAttr)) {
    mesh = mlir::dyn_cast<mega::MeshAttr>(attr);
    if (!mesh)
      return module.emitError() << kModuleMeshAttr << " is not a #mega.mesh";
    axisNames.clear();
    axisSizes.assign(mesh.getAxisSizes().begin(), mesh.getAxisSizes().end());
    for (mlir::StringAttr axis : mesh.getAxisNames())
      axisNames.push_back(axis.str());
  }
  auto stages = stageModules(module);
  if (failed(stages))
    return mlir::failure();
  std::optional<unsigned> ppAxis = mesh ? mesh.findAxis("pp") : std::nullopt;
  int64_t pp = ppAxis ? axisSizes[*ppAxis] : 1;
  if (!stages->empty() && static_cast<int64_t>(stages->size()) != pp)
    return module.emitError() << "the module has " << stages->size()
                              << " stage modules but the mesh has pp = " << pp;
  llvm::SmallVector<mlir::ModuleOp> containers =
      stages->empty() ? llvm::SmallVector<mlir::ModuleOp>{module} : *stages;

  // The schedule every stage runs (one generator: parallel/PipelineSchedule).
  std::vector<std::vector<schedule::ScheduleStep>> schedules;
  schedule::PipelineShape shape;
  schedule::ScheduleKind kind = options.schedule;
  if (!stages->empty()) {
    int64_t chunks = 0;
    for (mlir::ModuleOp stage : *stages)
      chunks += countChunks(stage);
    shape = {pp, chunks / pp, options.microBatches};
    if (chunks % pp != 0)
      return module.emitError() << chunks << " chunks do not split evenly over " << pp << " stages";
    kind = schedule::resolveSchedule(options.schedule, shape.virtualStages);
    shape.placement = schedule::placementOf(kind);
    std::string error;
    auto built = schedule::buildSchedule(kind, shape, &error);
    if (!built)
      return module.emitError() << "pipeline schedule: " << error;
    schedules = std::move(*built);
    // Every step's function must be in its stage: a zero-bubble schedule needs the backward
    // split (mega-backward-weight-split), the others the whole backward.
    for (auto [stage, steps] : llvm::enumerate(schedules))
      for (const schedule::ScheduleStep &step : steps) {
        std::string fn = schedule::stepFunction(step);
        if (!(*stages)[stage].lookupSymbol<mlir::func::FuncOp>(fn))
          return module.emitError()
                 << "pipeline schedule '" << schedule::scheduleName(kind) << "' runs @" << fn
                 << " on stage " << stage << ", which the stage module lacks"
                 << (schedule::splitsBackward(kind)
                         ? " (run mega-backward-weight-split for a zero-bubble schedule)"
                         : " (a split backward runs only under zb-h1, zb-h2 or zbv)");
      }
  }

  fb::FlatBufferBuilder fbb(1 << 16);
  std::vector<fb::Offset<pl::Program>> programs;
  bool ok = true;
  for (auto [stage, container] : llvm::enumerate(containers)) {
    auto funcs = selectFunctions(container, options.function);
    if (failed(funcs))
      return mlir::failure();
    detail::ProgramLowering lowering(container, funcs->size(), fbb, mesh);
    for (mlir::func::FuncOp func : *funcs)
      ok &= succeeded(lowering.lowerFunction(func)); // every function's errors, not the first's
    if (!ok)
      continue;
    if (!schedules.empty()) {
      lowering.setSchedule(schedules[stage]);
    }
    auto program = lowering.finish();
    if (failed(program))
      return mlir::failure();
    programs.push_back(*program);
  }
  if (!ok)
    return mlir::failure();

  // Every rank of the mesh: its coordinates (row-major) and its stage's program.
  int64_t devices = 1;
  for (int64_t size : axisSizes)
    devices *= size;
  std::vector<fb::Offset<pl::RankEntry>> ranks;
  size_t ppIndex = ppAxis.value_or(0);
  for (int64_t rank = 0; rank < devices; ++rank) {
    std::vector<int64_t> coords(axisSizes.size(), 0);
    int64_t rest = rank;
    for (size_t a = axisSizes.size(); a-- > 0;) {
      coords[a] = rest % axisSizes[a];
      rest /= axisSizes[a];
    }
    uint32_t role = stages->empty() ? 0 : static_cast<uint32_t>(coords[ppIndex]);
    ranks.push_back(pl::CreateRankEntryDirect(fbb, role, &coords));
  }
  std::vector<fb::Offset<fb::String>> axisNameOffsets;
  for (const std::string &axis : axisNames)
    axisNameOffsets.push_back(fbb.CreateString(axis));
  auto meshTable = pl::CreateMeshDirect(fbb, &axisNameOffsets, &axisSizes);
  fb::Offset<pl::Pipeline> pipeline;
  if (!stages->empty())
    pipeline = pl::CreatePipelineDirect(
        fbb, static_cast<uint32_t>(shape.stages), static_cast<uint32_t>(shape.virtualStages),
        static_cast<uint32_t>(shape.microBatches), schedule::scheduleName(kind));
  auto plan = pl::CreatePlanDirect(fbb, static_cast<uint32_t>(pl::FormatVersion::Current),
                                   kProducer, meshTable, &programs, &ranks,
                                   options.weightsFile.c_str(), options.seed, pipeline);
  pl::FinishPlanBuffer(fbb, plan);
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

} // namespace megac::codegen
