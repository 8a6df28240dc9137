// `megac data prep`'s work (DataPrep.h): the input cut into slices on document boundaries,
// tokenized by worker threads, written in input order to an indexed dataset.
#include "driver/DataPrep.h"

#include "runtime/data/IndexedDataset.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace megac::driver {

namespace {

namespace data = runtime::data;

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

} // namespace

StatusOr<PrepSummary> prepareDataset(const PrepOptions &o,
                                     const std::function<void(double, double)> &progress) {
  auto start = std::chrono::steady_clock::now();
  std::optional<int64_t> eod;
  if (o.appendEod) {
    eod = o.tokenizer->endOfDocument();
    if (!eod)
      return Status::error("--append-eod: the tokenizer has no end-of-document token");
  }
  PrepSummary summary;
  summary.vocab = o.tokenizer->vocabSize();
  summary.narrow = summary.vocab < 65500; // Megatron's best_fitting_dtype
  summary.eod = eod;
  summary.workers = o.workers;
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(o.input, "input"));
  ASSIGN_OR_RETURN(data::IndexedDatasetBuilder builder,
                   data::IndexedDatasetBuilder::create(
                       o.output, summary.narrow ? data::TokenType::u16 : data::TokenType::i32));
  std::string_view text(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  bool jsonl = o.input.ends_with(".jsonl");
  std::vector<Chunk> chunks = cutChunks(text, jsonl, size_t(1) << 20);
  summary.megabytes = static_cast<double>(bytes.size()) / 1e6;
  std::string error = tokenizeInOrder(
      text, chunks, jsonl, o.jsonKey, *o.tokenizer, eod, o.workers,
      [&](const Chunk &c) -> std::string {
        const int64_t *at = c.tokens.data();
        for (int64_t size : c.documentSizes) {
          if (Status s = builder.addDocument({at, static_cast<size_t>(size)}); !s.isOk())
            return s.message();
          at += size;
        }
        if (progress)
          progress(double(c.end) / 1e6, summary.megabytes);
        return {};
      });
  if (!error.empty())
    return Status::error(o.input + ": " + error);
  if (builder.documentCount() == 0)
    return Status::error(o.input + ": no documents (the file is empty)");
  RETURN_IF_ERROR(builder.finish());
  summary.documents = builder.documentCount();
  summary.tokens = builder.tokenCount();
  summary.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

StatusOr<DatasetInfo> datasetInfo(const std::string &prefix) {
  ASSIGN_OR_RETURN(runtime::data::IndexedDataset ds, runtime::data::IndexedDataset::open(prefix));
  static const char *names[] = {"?",     "uint8",   "int8",    "int16", "int32",
                                "int64", "float64", "float32", "uint16"};
  DatasetInfo info;
  info.tokenType = names[static_cast<int>(ds.tokenType())];
  info.sequences = ds.sequenceCount();
  info.documents = ds.documentCount();
  info.tokens = ds.totalTokens();
  return info;
}

} // namespace megac::driver
