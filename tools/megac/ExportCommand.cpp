// `megac export --load DIR --onnx MODEL.onnx -o TRAINED.onnx`: the newest checkpoint's trained
// weights written back into the ONNX model it was trained from, for inference elsewhere
// (onnxruntime, ...). The writing is frontends/onnx/OnnxExport.h's; this checks that MODEL.onnx
// is the file the checkpoint records (size and CRC32) before anything is written.
#include "tools/megac/Args.h"
#include "tools/megac/CheckpointModel.h"
#include "tools/megac/Commands.h"

#include "frontends/onnx/OnnxExport.h"
#include "runtime/checkpoint/Checkpoint.h"

#include <cstdio>

namespace megac::cli {

namespace {

constexpr const char *kCommand = "megac export";
constexpr const char *kHelp =
    R"(usage: megac export --load DIR --onnx MODEL.onnx -o TRAINED.onnx

Writes the newest checkpoint under DIR (`megac train MODEL.onnx --save DIR`) into a copy of
MODEL.onnx: every initializer that megac trained as a parameter gets the checkpoint's tensor,
in the initializer's own element type and layout; the graph, constants (masks, shapes),
metadata and opsets are kept byte for byte. MODEL.onnx must be the file the checkpoint was
trained from (its size and CRC32 are recorded at save time); a tensor that does not map onto
the model is refused by name. TRAINED.onnx is written atomically (a temporary file, then a
rename).)";

int fail(const std::string &message) {
  std::fprintf(stderr, "%s: error: %s\n", kCommand, message.c_str());
  return 1;
}

} // namespace

int exportCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(argc, argv, 2, {"load", "onnx", "o", "output"}, {"help"});
  if (args.has("help")) {
    std::puts(kHelp);
    return 0;
  }
  std::optional<std::string> output = args.get("o") ? args.get("o") : args.get("output");
  if (error.empty() && !args.positional().empty())
    error = "unexpected argument '" + args.positional().front() + "' (see --help)";
  if (error.empty() && !args.get("load"))
    error = "missing --load DIR (a megac train --save directory)";
  if (error.empty() && !output)
    error = "missing -o TRAINED.onnx (the file to write)";
  if (!error.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", kCommand, error.c_str());
    return 2;
  }
  auto checkpoint = runtime::checkpoint::loadLatestCheckpoint(
      *args.get("load"), nullptr, runtime::checkpoint::CheckpointParts::parametersOnly);
  if (!checkpoint.isOk())
    return fail(checkpoint.status().message());
  auto record = onnxRecordOf(checkpoint->meta.config);
  if (!record.isOk())
    return fail(checkpoint->path + ": " + record.status().message());
  if (!record->has_value())
    return fail(checkpoint->path + " is a checkpoint of '" + checkpoint->meta.model +
                "', not of an ONNX model trained by this megac; export writes weights back "
                "into the ONNX file they were trained from");
  const OnnxModelRecord &model = **record;
  std::optional<std::string> onnx = args.get("onnx");
  if (!onnx) {
    std::fprintf(stderr,
                 "%s: error: missing --onnx MODEL.onnx (the checkpoint was trained from %s)\n",
                 kCommand, model.path.c_str());
    return 2;
  }
  if (Status s = checkOnnxFile(model, *onnx); !s.isOk())
    return fail(s.message());
  auto shapes = bindTokenInput(model, *onnx, 1);
  if (!shapes.isOk())
    return fail(shapes.status().message());
  onnx_import::OnnxImportOptions options;
  options.inputShapes = *shapes;
  auto summary = onnx_import::exportOnnxWeights(*onnx, options, checkpoint->model, *output);
  if (!summary.isOk())
    return fail(summary.status().message() + " (" + checkpoint->path + "; nothing was written)");
  std::printf("wrote %s: %lld trained initializers from %s (step %lld), %lld other initializers "
              "kept, %llu bytes\n",
              output->c_str(), (long long)summary->replaced, checkpoint->path.c_str(),
              (long long)checkpoint->meta.step, (long long)summary->kept,
              (unsigned long long)summary->outputBytes);
  return 0;
}

} // namespace megac::cli
