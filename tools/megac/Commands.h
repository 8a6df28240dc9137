// megac's subcommands. Each returns the process exit code; errors go to stderr in one line.
#pragma once

// recordOnnxModel: what `megac train --save` records of an ONNX model for generate and export.
#include "tools/megac/CheckpointModel.h"

namespace megac::cli {

int importCommand(int argc, char **argv);
int describeCommand(int argc, char **argv);
int compileCommand(int argc, char **argv);
int runCommand(int argc, char **argv);
int trainCommand(int argc, char **argv);
/// `megac data prep|info`: indexed datasets (DataCommand.cpp).
int dataCommand(int argc, char **argv);
/// `megac plan`: the partitioned training step's plan, explained (PlanCommand.cpp).
int planCommand(int argc, char **argv);
/// `megac generate`: text from a checkpoint (GenerateCommand.cpp).
int generateCommand(int argc, char **argv);
/// `megac export`: a checkpoint's weights written back into its ONNX model (ExportCommand.cpp).
int exportCommand(int argc, char **argv);
/// `megac calibrate`: microbenchmarks written as a device spec (CalibrateCommand.cpp).
int calibrateCommand(int argc, char **argv);
/// `megac plan --cluster SPEC`: the layout search (PlanSearchCommand.cpp).
int planSearchCommand(int argc, char **argv);
/// True when `megac compile`'s arguments name a layout (--ranks, --tp, ...): it then compiles
/// the training step for every rank (compileWithLayout) instead of a one-rank forward plan.
bool hasLayoutFlag(int argc, char **argv);
int compileWithLayout(int argc, char **argv);

} // namespace megac::cli
