// megac's subcommands. Each parses its flags (Cli.h), calls the driver library and prints; it
// returns the process exit code (0; 1 when the work failed; 2 for a bad command line), errors
// on stderr in one line.
#pragma once

namespace megac::cli {

int importCommand(int argc, char **argv);
int describeCommand(int argc, char **argv);
int compileCommand(int argc, char **argv);
int runCommand(int argc, char **argv);
int trainCommand(int argc, char **argv);
/// `megac data prep|info`: indexed datasets.
int dataCommand(int argc, char **argv);
/// `megac plan`: the planner (--cluster), or the partitioned training step's plan explained.
int planCommand(int argc, char **argv);
/// `megac generate`: text from a checkpoint.
int generateCommand(int argc, char **argv);
/// `megac export`: a checkpoint's weights written back into its ONNX model.
int exportCommand(int argc, char **argv);
/// `megac calibrate`: microbenchmarks written as a device spec.
int calibrateCommand(int argc, char **argv);
/// True when `megac compile`'s arguments name a layout (--ranks, --tp, ...): it then compiles
/// the training step for every rank (compileWithLayout) instead of a one-rank forward plan.
bool hasLayoutFlag(int argc, char **argv);
int compileWithLayout(int argc, char **argv);

} // namespace megac::cli
