// `megac export --load DIR --onnx MODEL.onnx -o TRAINED.onnx`: the newest checkpoint's trained
// weights written back into the ONNX model it was trained from (driver/CheckpointModel.h); and
// `megac export --load DIR --hf OUT [--model hf:FOLDER]`: a checkpoint of an hf: model written
// as the transformers folder --save-hf writes (driver/HfSave.h).
#include "tools/megac/Cli.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"

#include "driver/CheckpointModel.h"
#include "driver/HfSave.h"

#include <cstdio>

namespace megac::cli {

int exportCommand(int argc, char **argv) {
  const char *command = "megac export";
  Flags f(command, kExportHelp);
  std::optional<std::string> load, onnx, output, hf, spec, shardSize;
  f.text("--load", load, "DIR").text("--onnx", onnx, "MODEL.onnx");
  f.text("-o,--output", output, "TRAINED.onnx");
  f.text("--hf", hf, "DIR")
      .text("--model", spec, "hf:FOLDER")
      .text("--hf-shard-size", shardSize, "SIZE");
  if (std::optional<int> exit = f.parse(argc, argv, 2))
    return *exit;
  if (!f.positional().empty())
    return f.usage("unexpected argument '" + f.positional().front() + "' (see --help)");
  if (!load)
    return f.usage("missing --load DIR (a megac train --save directory)");
  if (hf && (onnx || output))
    return f.usage("give --hf DIR (a transformers folder) or --onnx and -o (an ONNX file), not "
                   "both");
  if (!hf && (spec || shardSize))
    return f.usage(std::string(spec ? "--model" : "--hf-shard-size") + " applies to --hf DIR");
  if (hf) {
    uint64_t shardBytes = 5'000'000'000;
    if (shardSize && !driver::parseByteSize(*shardSize, shardBytes))
      return f.usage("--hf-shard-size: '" + *shardSize +
                     "' is not a size (bytes, or a number with KB, MB, GB, KiB, MiB, GiB)");
    auto summary =
        driver::exportHfCheckpoint(*load, spec, *hf, shardBytes, [&](const std::string &line) {
          std::fprintf(stderr, "%s: warning: %s\n", command, line.c_str());
        });
    if (!summary.isOk())
      return fail(command, summary.status().message());
    std::printf("wrote %s: %zu parameters from %s (step %lld) as a transformers folder (%s)\n",
                hf->c_str(), summary->parameters, summary->checkpointPath.c_str(),
                (long long)summary->step, runtime::safetensorsDtype(summary->dtype));
    return 0;
  }
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
