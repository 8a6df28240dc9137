// `megac data prep` (text or JSON lines to an indexed dataset; driver/DataPrep.h) and
// `megac data info` (a dataset's summary).
#include "tools/megac/Cli.h"
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"

#include "driver/DataPrep.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <unistd.h>

namespace megac::cli {

namespace {

int prepCommand(int argc, char **argv) {
  Flags f("megac data prep", kDataHelp);
  std::optional<std::string> out, tokenizerSpec;
  driver::PrepOptions o;
  int64_t workers = std::max(1u, std::thread::hardware_concurrency());
  f.text("-o,--output", out, "PREFIX").text("--tokenizer", tokenizerSpec, "SPEC");
  f.flag("--append-eod", o.appendEod).count("--workers", workers, 1, "N", 4096);
  std::optional<std::string> key;
  f.text("--json-key", key, "KEY");
  if (std::optional<int> exit = f.parse(argc, argv, 3))
    return *exit;
  if (workers > 1024)
    return f.usage("--workers '" + std::to_string(workers) + "' is not a thread count (1..1024)");
  if (f.positional().size() != 1)
    return f.usage("give one input file (.txt or .jsonl)");
  if (!out)
    return f.usage("missing -o PREFIX");
  if (!tokenizerSpec)
    return f.usage("missing --tokenizer (byte, gpt2:VOCAB.json,MERGES.txt or hf:TOKENIZER.json)");
  StatusOr<std::unique_ptr<driver::Tokenizer>> tokenizer = driver::makeTokenizer(*tokenizerSpec);
  if (!tokenizer.isOk())
    return f.usage("--tokenizer: " + tokenizer.status().message());
  if (o.appendEod && !(*tokenizer)->endOfDocument())
    return f.usage("--append-eod: tokenizer " + *tokenizerSpec +
                   " has no end-of-document token (<|endoftext|>, <|end_of_text|> or </s>); "
                   "drop --append-eod");
  o.input = f.positional().front();
  o.output = *out;
  o.tokenizer = tokenizer->get();
  o.jsonKey = key.value_or("text");
  o.workers = int(workers);
  // Progress on a terminal: MB done and the rate, at most twice a second.
  auto start = std::chrono::steady_clock::now(), shown = start;
  auto progress = [&](double done, double total) {
    auto now = std::chrono::steady_clock::now();
    if (now - shown <= std::chrono::milliseconds(500))
      return;
    shown = now;
    double s = std::chrono::duration<double>(now - start).count();
    std::fprintf(stderr, "\r%.1f / %.1f MB, %.1f MB/s  ", done, total, done / s);
    std::fflush(stderr);
  };
  bool terminal = isatty(fileno(stderr));
  StatusOr<driver::PrepSummary> done =
      driver::prepareDataset(o, terminal ? std::function<void(double, double)>(progress) : nullptr);
  if (terminal && shown != start)
    std::fprintf(stderr, "\r%60s\r", "");
  if (!done.isOk())
    return fail("megac data prep", done.status().message());
  const driver::PrepSummary &d = *done;
  std::string eodText = d.eod ? ", eod " + std::to_string(*d.eod) : "";
  std::printf("wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s, %s, vocab %lld%s); "
              "%.2f MB in %.2f s on %d workers (%.1f MB/s)\n",
              out->c_str(), out->c_str(), (long long)d.documents, (long long)d.tokens,
              d.narrow ? "uint16" : "int32",
              tokenizerSpec->substr(0, tokenizerSpec->find(':')).c_str(), (long long)d.vocab,
              eodText.c_str(), d.megabytes, d.seconds, d.workers,
              d.seconds > 0 ? d.megabytes / d.seconds : 0.0);
  return 0;
}

int infoCommand(int argc, char **argv) {
  Flags f("megac data info", kDataHelp);
  if (std::optional<int> exit = f.parse(argc, argv, 3))
    return *exit;
  if (f.positional().size() != 1)
    return f.usage("give one dataset PREFIX (of PREFIX.bin, PREFIX.idx)");
  StatusOr<driver::DatasetInfo> ds = driver::datasetInfo(f.positional()[0]);
  if (!ds.isOk())
    return fail("megac data info", ds.status().message());
  std::printf("dtype %s, %lld sequences, %lld documents, %lld tokens\n", ds->tokenType.c_str(),
              (long long)ds->sequences, (long long)ds->documents, (long long)ds->tokens);
  return 0;
}

} // namespace

int dataCommand(int argc, char **argv) {
  if (argc >= 3 && !std::strcmp(argv[2], "prep"))
    return prepCommand(argc, argv);
  if (argc >= 3 && !std::strcmp(argv[2], "info"))
    return infoCommand(argc, argv);
  if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "help"))) {
    std::puts(kDataHelp);
    return 0;
  }
  if (argc >= 3)
    return fail("megac data",
                std::string(argv[2]).starts_with("-")
                    ? "unknown option " + std::string(argv[2])
                    : "unknown command '" + std::string(argv[2]) +
                          "' (prep or info; see megac data --help)",
                2);
  std::fprintf(stderr, "%s\n", kDataHelp);
  return 2;
}

} // namespace megac::cli
