// `megac data prep` (text or JSON lines to an indexed dataset) and `megac data info` (its summary).
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"

#include "runtime/data/IndexedDataset.h"
#include "runtime/io/Files.h"
#include "runtime/io/Json.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace megac::cli {

namespace {

namespace data = runtime::data;

const char *kUsage = R"(usage: megac data prep INPUT.txt|INPUT.jsonl --tokenizer byte -o PREFIX
                       [--append-eod] [--json-key text]
       megac data info PREFIX

prep writes PREFIX.bin and PREFIX.idx, Megatron's indexed dataset format (uint16 tokens), for
`megac train --data PREFIX`. Documents: in a .jsonl file, the string --json-key (default "text")
of each line's object; in any other file, the paragraphs (runs of lines between empty lines),
newlines included. Empty documents are skipped. --tokenizer byte: each UTF-8 byte is one token
(0..255); --append-eod ends every document with token 256 (train with vocab >= 257).
info prints a dataset's dtype, sequence, document and token counts.)";

constexpr int64_t kEod = 256;

int fail(const char *command, const std::string &message, int code = 1) {
  std::fprintf(stderr, "megac data %s: error: %s\n", command, message.c_str());
  return code;
}

/// Calls `emit(document)` for each document of `text`; returns an error or empty.
template <typename Emit>
std::string splitDocuments(std::string_view text, bool jsonl, const std::string &key, Emit emit) {
  size_t lineNo = 0, start = 0, paragraph = std::string_view::npos;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    size_t next = end == std::string_view::npos ? text.size() : end + 1;
    std::string_view line = text.substr(start, next - start);
    ++lineNo;
    std::string_view bare = line;
    while (!bare.empty() && (bare.back() == '\n' || bare.back() == '\r'))
      bare.remove_suffix(1);
    if (jsonl) {
      if (!bare.empty()) {
        runtime::StatusOr<runtime::json::Value> value = runtime::json::parse(bare);
        if (!value.isOk())
          return "line " + std::to_string(lineNo) + ": " + value.status().message();
        const runtime::json::Value *field = value->find(key);
        if (!field || field->kind != runtime::json::Value::Kind::string)
          return "line " + std::to_string(lineNo) + ": no string member \"" + key + "\"";
        if (std::string err = emit(std::string_view(field->string)); !err.empty())
          return err;
      }
    } else if (bare.empty()) {
      if (paragraph != std::string_view::npos)
        if (std::string err = emit(text.substr(paragraph, start - paragraph)); !err.empty())
          return err;
      paragraph = std::string_view::npos;
    } else if (paragraph == std::string_view::npos) {
      paragraph = start;
    }
    start = next;
  }
  if (paragraph != std::string_view::npos)
    return emit(text.substr(paragraph));
  return {};
}

int prepCommand(int argc, char **argv) {
  Args args;
  std::string error =
      args.parse(argc, argv, 3, {"tokenizer", "o", "output", "json-key"}, {"help", "append-eod"});
  if (args.has("help")) {
    std::puts(kUsage);
    return 0;
  }
  std::optional<std::string> output = args.get("o") ? args.get("o") : args.get("output");
  std::string tokenizer = args.get("tokenizer").value_or("");
  if (error.empty() && args.positional().size() != 1)
    error = "give one input file (.txt or .jsonl)";
  if (error.empty() && !output)
    error = "missing -o PREFIX";
  if (error.empty() && tokenizer.empty())
    error = "missing --tokenizer byte";
  if (error.empty() && tokenizer != "byte")
    error = "--tokenizer '" + tokenizer +
            "' is not supported (only byte; GPT-2 and Hugging Face BPE are not implemented yet)";
  if (!error.empty())
    return fail("prep", error, 2);
  std::string input = args.positional().front();
  bool jsonl = input.size() >= 6 && input.compare(input.size() - 6, 6, ".jsonl") == 0;
  std::string key = args.get("json-key").value_or("text");
  bool eod = args.has("append-eod");

  auto start = std::chrono::steady_clock::now();
  runtime::StatusOr<std::vector<uint8_t>> bytes = runtime::readFileBytes(input, "input");
  if (!bytes.isOk())
    return fail("prep", bytes.status().message());
  runtime::StatusOr<data::IndexedDatasetBuilder> builder =
      data::IndexedDatasetBuilder::create(*output, data::TokenType::u16);
  if (!builder.isOk())
    return fail("prep", builder.status().message());
  std::vector<int64_t> tokens;
  std::string_view text(reinterpret_cast<const char *>(bytes->data()), bytes->size());
  // Progress on a terminal: the share of the input read, at most twice a second.
  bool progress = isatty(fileno(stderr));
  auto shown = start;
  int64_t documents = 0;
  error = splitDocuments(text, jsonl, key, [&](std::string_view doc) -> std::string {
    if (progress && ++documents % 4096 == 0 && !jsonl) {
      auto now = std::chrono::steady_clock::now();
      if (now - shown > std::chrono::milliseconds(500)) {
        shown = now;
        double done = static_cast<double>(doc.data() - text.data()) / double(text.size());
        std::fprintf(stderr, "\r%.0f%% of %s", 100 * done, input.c_str());
      }
    }
    if (doc.empty())
      return {};
    tokens.resize(doc.size() + (eod ? 1 : 0));
    for (size_t i = 0; i < doc.size(); ++i)
      tokens[i] = static_cast<unsigned char>(doc[i]);
    if (eod)
      tokens.back() = kEod;
    runtime::Status s = builder->addDocument(tokens);
    return s.isOk() ? std::string() : s.message();
  });
  if (progress && shown != start)
    std::fprintf(stderr, "\r%*s\r", int(input.size()) + 8, "");
  if (!error.empty())
    return fail("prep", input + ": " + error);
  if (builder->documentCount() == 0)
    return fail("prep", input + ": no documents (the file is empty)");
  if (runtime::Status s = builder->finish(); !s.isOk())
    return fail("prep", s.message());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double mb = static_cast<double>(bytes->size()) / 1e6;
  std::printf("wrote %s.bin and %s.idx: %lld documents, %lld tokens (uint16, byte tokenizer%s); "
              "%.2f MB in %.2f s (%.1f MB/s)\n",
              output->c_str(), output->c_str(), (long long)builder->documentCount(),
              (long long)builder->tokenCount(), eod ? ", eod 256" : "", mb, seconds,
              seconds > 0 ? mb / seconds : 0.0);
  return 0;
}

int infoCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(argc, argv, 3, {}, {"help"});
  if (args.has("help")) {
    std::puts(kUsage);
    return 0;
  }
  if (error.empty() && args.positional().size() != 1)
    error = "give one dataset PREFIX (of PREFIX.bin, PREFIX.idx)";
  if (!error.empty())
    return fail("info", error, 2);
  runtime::StatusOr<data::IndexedDataset> ds = data::IndexedDataset::open(args.positional()[0]);
  if (!ds.isOk())
    return fail("info", ds.status().message());
  static const char *names[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                "int64", "float64", "float32", "uint16"};
  std::printf("dtype %s, %lld sequences, %lld documents, %lld tokens\n",
              names[static_cast<int>(ds->tokenType())], (long long)ds->sequenceCount(),
              (long long)ds->documentCount(), (long long)ds->totalTokens());
  return 0;
}

} // namespace

int dataCommand(int argc, char **argv) {
  if (argc >= 3 && !std::strcmp(argv[2], "prep"))
    return prepCommand(argc, argv);
  if (argc >= 3 && !std::strcmp(argv[2], "info"))
    return infoCommand(argc, argv);
  if (argc >= 3 && (!std::strcmp(argv[2], "--help") || !std::strcmp(argv[2], "help"))) {
    std::puts(kUsage);
    return 0;
  }
  std::fprintf(stderr, "%s\n", kUsage);
  return 2;
}

} // namespace megac::cli
