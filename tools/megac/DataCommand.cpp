// `megac data prep` (text or JSON lines to an indexed dataset, tokenized by worker threads) and
// `megac data info` (a dataset's summary).
#include "tools/megac/Args.h"
#include "tools/megac/Commands.h"

#include "runtime/data/IndexedDataset.h"
#include "runtime/data/Tokenizer.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>
#include <unistd.h>
#include <vector>

namespace megac::cli {

namespace {

namespace data = runtime::data;

const char *kUsage = R"(usage: megac data prep INPUT.txt|INPUT.jsonl --tokenizer SPEC -o PREFIX
                       [--append-eod] [--json-key text] [--workers N]
       megac data info PREFIX

prep writes PREFIX.bin and PREFIX.idx, Megatron's indexed dataset format, for
`megac train --data PREFIX`. Documents: in a .jsonl file, the string --json-key (default "text")
of each line's object; in any other file, the paragraphs (runs of lines between empty lines),
newlines included. Empty documents are skipped.
--tokenizer byte                      each UTF-8 byte is one token (0..255); end of document 256
--tokenizer gpt2:VOCAB.json,MERGES.txt   GPT-2's byte-level BPE files (as OpenAI released them)
--tokenizer hf:TOKENIZER.json         a Hugging Face byte-level BPE (GPT-2, RoBERTa, Llama-3 kind)
--append-eod ends every document with the tokenizer's end-of-document token (<|endoftext|>).
Tokens are uint16 when the vocabulary has fewer than 65500 ids, else int32 (Megatron's rule).
--workers N tokenizes on N threads (default: the hardware's); the output does not depend on N.
info prints a dataset's dtype, sequence, document and token counts.)";

int fail(const char *command, const std::string &message, int code = 1) {
  std::fprintf(stderr, "megac data %s: error: %s\n", command, message.c_str());
  return code;
}

/// Calls `emit(document)` for each document of `text` (whose first line is line `firstLine` of
/// the input); returns an error or empty.
template <typename Emit>
std::string splitDocuments(std::string_view text, size_t firstLine, bool jsonl,
                           const std::string &key, Emit emit) {
  size_t lineNo = firstLine - 1, start = 0, paragraph = std::string_view::npos;
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
        StatusOr<json::Value> value = json::parse(bare);
        if (!value.isOk())
          return "line " + std::to_string(lineNo) + ": " + value.status().message();
        const json::Value *field = value->find(key);
        if (!field || field->kind != json::Value::Kind::string)
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

/// A slice of the input that starts and ends on document boundaries (a line start for JSON
/// lines; the start of an empty line for paragraphs), so slices split like the whole file.
struct Chunk {
  size_t begin = 0, end = 0, firstLine = 1;
  // Filled by a worker:
  std::vector<int64_t> tokens, documentSizes;
  std::string error;
  bool done = false;
};

std::vector<Chunk> cutChunks(std::string_view text, bool jsonl, size_t target) {
  auto nextLine = [&](size_t pos) { // the start of the line after the one holding pos
    size_t nl = text.find('\n', pos);
    return nl == std::string_view::npos ? text.size() : nl + 1;
  };
  auto emptyLine = [&](size_t pos) { // only '\r's before its '\n'
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? nl : nl - pos);
    return line.find_first_not_of('\r') == std::string_view::npos;
  };
  std::vector<Chunk> chunks;
  size_t begin = 0, line = 1;
  while (begin < text.size()) {
    size_t cut = begin + target;
    if (cut >= text.size()) {
      cut = text.size();
    } else {
      cut = text[cut - 1] == '\n' ? cut : nextLine(cut);
      while (!jsonl && cut < text.size() && !emptyLine(cut))
        cut = nextLine(cut);
    }
    Chunk chunk;
    chunk.begin = begin;
    chunk.end = cut;
    chunk.firstLine = line;
    line += std::count(text.begin() + begin, text.begin() + cut, '\n');
    chunks.push_back(std::move(chunk));
    begin = cut;
  }
  return chunks;
}

/// Tokenizes the chunks on `workers` threads, at most a window of chunks ahead of the writer,
/// and hands them to `write` in input order. Returns the first error (in input order).
template <typename Write>
std::string tokenizeInOrder(std::string_view text, std::vector<Chunk> &chunks, bool jsonl,
                            const std::string &key, const data::Tokenizer &tokenizer,
                            std::optional<int64_t> eod, int workers, Write write) {
  std::mutex mutex;
  std::condition_variable changed;
  size_t written = 0, window = 4 * static_cast<size_t>(workers);
  std::atomic<size_t> nextChunk{0};
  std::atomic<bool> stop{false};
  auto work = [&] {
    while (!stop) {
      size_t i = nextChunk++;
      if (i >= chunks.size())
        return;
      {
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return stop || i < written + window; });
      }
      if (stop)
        return;
      Chunk &c = chunks[i];
      std::string_view slice = text.substr(c.begin, c.end - c.begin);
      std::string error = splitDocuments(slice, c.firstLine, jsonl, key, [&](std::string_view doc) {
        if (doc.empty())
          return std::string();
        std::vector<int64_t> ids = tokenizer.encode(doc);
        if (ids.empty())
          return std::string();
        c.tokens.insert(c.tokens.end(), ids.begin(), ids.end());
        if (eod)
          c.tokens.push_back(*eod);
        c.documentSizes.push_back(static_cast<int64_t>(ids.size()) + (eod ? 1 : 0));
        return std::string();
      });
      std::lock_guard lock(mutex);
      c.error = std::move(error);
      c.done = true;
      changed.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w)
    threads.emplace_back(work);
  std::string error;
  for (size_t i = 0; i < chunks.size() && error.empty(); ++i) {
    {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return chunks[i].done; });
    }
    error = chunks[i].error.empty() ? write(chunks[i]) : chunks[i].error;
    std::lock_guard lock(mutex);
    chunks[i].tokens = {}; // written: free it
    chunks[i].documentSizes = {};
    written = i + 1;
    if (!error.empty())
      stop = true;
    changed.notify_all();
  }
  for (std::thread &t : threads)
    t.join();
  return error;
}

int prepCommand(int argc, char **argv) {
  Args args;
  std::string error = args.parse(argc, argv, 3, {"tokenizer", "o", "output", "json-key", "workers"},
                                 {"help", "append-eod"});
  if (args.has("help")) {
    std::puts(kUsage);
    return 0;
  }
  std::optional<std::string> output = args.get("o") ? args.get("o") : args.get("output");
  std::string spec = args.get("tokenizer").value_or("");
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (std::optional<std::string> w = args.get("workers"); w && error.empty()) {
    auto [end, ec] = std::from_chars(w->data(), w->data() + w->size(), workers);
    if (ec != std::errc() || end != w->data() + w->size() || workers < 1 || workers > 1024)
      error = "--workers '" + *w + "' is not a thread count (1..1024)";
  }
  if (error.empty() && args.positional().size() != 1)
    error = "give one input file (.txt or .jsonl)";
  if (error.empty() && !output)
    error = "missing -o PREFIX";
  if (error.empty() && spec.empty())
    error = "missing --tokenizer (byte, gpt2:VOCAB.json,MERGES.txt or hf:TOKENIZER.json)";
  if (!error.empty())
    return fail("prep", error, 2);
  std::string input = args.positional().front();
  bool jsonl = input.size() >= 6 && input.compare(input.size() - 6, 6, ".jsonl") == 0;
  std::string key = args.get("json-key").value_or("text");

  auto start = std::chrono::steady_clock::now();
  StatusOr<std::unique_ptr<data::Tokenizer>> tokenizer = data::makeTokenizer(spec);
  if (!tokenizer.isOk())
    return fail("prep", "--tokenizer: " + tokenizer.status().message(), 2);
  std::optional<int64_t> eod;
  if (args.has("append-eod")) {
    eod = (*tokenizer)->endOfDocument();
    if (!eod)
      return fail("prep",
                  "--append-eod: tokenizer " + spec +
                      " has no end-of-document token (<|endoftext|>, <|end_of_text|> "
                      "or </s>); drop --append-eod",
                  2);
  }
  int64_t vocab = (*tokenizer)->vocabSize();
  bool narrow = vocab < 65500; // Megatron's best_fitting_dtype
  StatusOr<std::vector<uint8_t>> bytes = readFileBytes(input, "input");
  if (!bytes.isOk())
    return fail("prep", bytes.status().message());
  StatusOr<data::IndexedDatasetBuilder> builder = data::IndexedDatasetBuilder::create(
      *output, narrow ? data::TokenType::u16 : data::TokenType::i32);
  if (!builder.isOk())
    return fail("prep", builder.status().message());
  std::string_view text(reinterpret_cast<const char *>(bytes->data()), bytes->size());
  std::vector<Chunk> chunks = cutChunks(text, jsonl, size_t(1) << 20);

  // Progress on a terminal: MB done and the rate, at most twice a second.
  bool progress = isatty(fileno(stderr));
  auto shown = start;
  double totalMb = static_cast<double>(bytes->size()) / 1e6;
  error = tokenizeInOrder(
      text, chunks, jsonl, key, **tokenizer, eod, workers, [&](const Chunk &c) -> std::string {
        const int64_t *at = c.tokens.data();
        for (int64_t size : c.documentSizes) {
          if (Status s = builder->addDocument({at, static_cast<size_t>(size)}); !s.isOk())
            return s.message();
          at += size;
        }
        auto now = std::chrono::steady_clock::now();
        if (progress && now - shown > std::chrono::milliseconds(500)) {
          shown = now;
          double s = std::chrono::duration<double>(now - start).count();
          std::fprintf(stderr, "\r%.1f / %.1f MB, %.1f MB/s  ", double(c.end) / 1e6, totalMb,
                       double(c.end) / 1e6 / s);
          std::fflush(stderr);
        }
        return {};
      });
  if (progress && shown != start)
    std::fprintf(stderr, "\r%60s\r", "");
  if (!error.empty())
    return fail("prep", input + ": " + error);
  if (builder->documentCount() == 0)
    return fail("prep", input + ": no documents (the file is empty)");
  if (Status s = builder->finish(); !s.isOk())
    return fail("prep", s.message());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string eodText = eod ? ", eod " + std::to_string(*eod) : "";
  std::printf("wrote %s.bin and %s.idx: %lld documents, %lld tokens (%s, %s, vocab %lld%s); "
              "%.2f MB in %.2f s on %d workers (%.1f MB/s)\n",
              output->c_str(), output->c_str(), (long long)builder->documentCount(),
              (long long)builder->tokenCount(), narrow ? "uint16" : "int32",
              spec.substr(0, spec.find(':')).c_str(), (long long)vocab, eodText.c_str(), totalMb,
              seconds, workers, seconds > 0 ? totalMb / seconds : 0.0);
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
  StatusOr<data::IndexedDataset> ds = data::IndexedDataset::open(args.positional()[0]);
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
