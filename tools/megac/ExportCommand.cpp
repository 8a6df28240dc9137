// `megac export --load DIR --onnx MODEL.onnx -o TRAINED.onnx`: the newest checkpoint's trained
// weights written back into the ONNX model it was trained from (driver/CheckpointModel.h).
#include "tools/megac/Cli.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"

#include "driver/CheckpointModel.h"

#include <cstdio>

namespace megac::cli {

int exportCommand(int argc, char **argv) {
  const char *command = "megac export";
  Flags f(command, kExportHelp);
  std::optional<std::string> load, onnx, output;
  f.text("--load", load, "DIR").text("--onnx", onnx, "MODEL.onnx");
  f.text("-o,--output", output, "TRAINED.onnx");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (!f.positional().empty())
    return f.usage("unexpected argument '" + f.positional().front() + "' (see --help)");
  if (!load)
    return f.usage("missing --load DIR (a megac train --save directory)");
  if (!output)
    return f.usage("missing -o TRAINED.onnx (the file to write)");
  StatusOr<driver::ExportSource> source =
      driver::openExportSource(*load, [&](const std::string &line) {
        std::fprintf(stderr, "%s: warning: %s\n", command, line.c_str());
      });
  if (!source.isOk())
    return fail(command, source.status().message());
  if (!onnx)
    return f.usage("missing --onnx MODEL.onnx (the checkpoint was trained from " +
                   source->model.path + ")");
  auto summary = driver::exportCheckpoint(*source, *onnx, *output);
  if (!summary.isOk())
    return fail(command, summary.status().message());
  std::printf("wrote %s: %lld trained initializers from %s (step %lld), %lld other initializers "
              "kept, %llu bytes\n",
              output->c_str(), (long long)summary->replaced, source->checkpointPath.c_str(),
              (long long)source->step, (long long)summary->kept,
              (unsigned long long)summary->outputBytes);
  return 0;
}

} // namespace megac::cli
