// Byte-level BPE as GPT-2 defines it: text split by GPT-2's regex, each piece's UTF-8 bytes
// merged pairwise in merge-rank order. Tokens are kept as raw bytes (the files' printable
// bytes_to_unicode spelling is undone at load), so encoding never maps characters.
#include "runtime/data/BpeTokenizer.h"

#include "runtime/data/Unicode.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <climits>
#include <cstdio>
#include <functional>
#include <queue>
#include <unordered_map>

namespace megac::runtime::data {

namespace {

/// bytes_to_unicode's table: printable Latin-1 bytes stand for themselves, the other 68 bytes
/// for U+0100 onwards, in byte order.
struct ByteUnicodeTable {
  std::array<uint32_t, 256> toUnicode{};
  std::array<int16_t, 324> toByte{}; // -1: not a byte's character
  ByteUnicodeTable() {
    toByte.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      toUnicode[b] = printable ? b : next++;
      toByte[toUnicode[b]] = static_cast<int16_t>(b);
    }
  }
};
const ByteUnicodeTable &byteTable() {
  static const ByteUnicodeTable table;
  return table;
}

/// The raw bytes a byte-level token string stands for, or nullopt if a character in it is not
/// one of bytes_to_unicode's (such a token can only come from an added token).
std::optional<std::string> tokenBytes(std::string_view token) {
  std::string bytes;
  for (size_t pos = 0; pos < token.size();) {
    uint32_t cp = 0;
    pos += decodeUtf8(token, pos, cp);
    if (cp >= byteTable().toByte.size() || byteTable().toByte[cp] < 0)
      return std::nullopt;
    bytes.push_back(static_cast<char>(byteTable().toByte[cp]));
  }
  return bytes;
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

/// The ids of pieces seen before, one cache per thread (so encode takes no lock), dropped when
/// the thread moves on to another tokenizer. Full at kMaxEntries, it keeps what it has (the
/// frequent pieces come early) rather than clearing and refilling.
struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 18, kMaxPieceBytes = 64;
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> ids;
};
std::atomic<uint64_t> nextTokenizerSerial{1};

/// Merge ranks by token pair: open addressing with linear probing, a load factor <= 1/2, so
/// a lookup is one or two cache lines (std::unordered_map's was a fifth of encoding time).
class MergeTable {
public:
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void reserve(size_t count) {
    size_t capacity = 16;
    while (capacity < 2 * count)
      capacity *= 2;
    keys_.assign(capacity, kEmpty);
    values_.assign(capacity, {});
    shift_ = 64 - std::countr_zero(capacity);
  }
  /// Sets (a, b)'s merge, replacing an earlier one (reserve() first, for all of them).
  void set(int32_t a, int32_t b, Merge merge) {
    size_t i = slot(key(a, b));
    while (keys_[i] != kEmpty && keys_[i] != key(a, b))
      i = (i + 1) & (keys_.size() - 1);
    keys_[i] = key(a, b);
    values_[i] = merge;
  }
  const Merge *find(int32_t a, int32_t b) const {
    uint64_t k = key(a, b);
    for (size_t i = slot(k);; i = (i + 1) & (keys_.size() - 1)) {
      if (keys_[i] == k)
        return &values_[i];
      if (keys_[i] == kEmpty)
        return nullptr;
    }
  }

private:
  static constexpr uint64_t kEmpty = ~uint64_t(0); // ids are < 2^31, so no key is this
  size_t slot(uint64_t k) const { return (k * 0x9e3779b97f4a7c15ull) >> shift_; }
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
  int shift_ = 60;
};

class BpeTokenizer final : public Tokenizer {
public:
  static StatusOr<std::unique_ptr<Tokenizer>> make(BpeSpec spec);

  std::vector<int64_t> encode(std::string_view text) const override;
  StatusOr<std::string> decode(std::span<const int64_t> ids) const override;
  int64_t vocabSize() const override { return static_cast<int64_t>(pieces_.size()); }
  std::optional<int64_t> endOfDocument() const override { return endOfDocument_; }
  std::string spec() const override { return spec_; }

private:
  using Merge = MergeTable::Merge;
  const Merge *findMerge(int32_t a, int32_t b) const { return merges_.find(a, b); }

  void encodeSegment(std::string_view segment, std::vector<int64_t> &out) const;
  void encodePiece(std::string_view piece, std::vector<int32_t> &out) const;
  void mergeLongPiece(std::vector<int32_t> &symbols) const;

  std::vector<std::string> pieces_; // id -> bytes
  std::vector<bool> present_;       // id has a token
  PieceMap ids_;                    // bytes -> id, for byte-level tokens
  std::array<int32_t, 256> byteIds_{};
  MergeTable merges_;
  std::vector<std::pair<std::string, int32_t>> added_; // longest first
  std::array<bool, 256> addedFirstByte_{};
  BpeSpec::Split split_ = BpeSpec::Split::none;
  bool addPrefixSpace_ = false, useRegex_ = true, ignoreMerges_ = false;
  std::optional<int64_t> endOfDocument_;
  std::string spec_, source_;
  uint64_t serial_ = nextTokenizerSerial++;
};

/// How many unused ids a vocabulary may leave below its largest id: generous for real
/// tokenizers (HF allows gaps; added tokens sit past the vocabulary), while the id table stays
/// under ~40 MB for a corrupt id.
constexpr int64_t kMaxIdGap = 1 << 20;

StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::make(BpeSpec spec) {
  auto t = std::make_unique<BpeTokenizer>();
  const std::string &src = spec.source;
  // Ids index a table, so an id far past the number of tokens is a corrupt file, refused before
  // the table grows to it; real vocabularies are dense or have small gaps.
  int64_t idLimit = std::min<int64_t>(
      INT32_MAX, int64_t(spec.vocab.size() + spec.addedTokens.size()) + kMaxIdGap);
  auto setToken = [&](int64_t id, std::string bytes, const std::string &name) -> Status {
    if (id < 0 || id >= idLimit)
      return Status::error(
          src + ": token '" + name + "' has id " + std::to_string(id) + ", but the ids of its " +
          std::to_string(spec.vocab.size() + spec.addedTokens.size()) + " tokens must lie in 0.." +
          std::to_string(idLimit - 1) + " (a corrupt id?)");
    if (static_cast<size_t>(id) >= t->pieces_.size()) {
      t->pieces_.resize(id + 1);
      t->present_.resize(id + 1);
    }
    if (t->present_[id])
      return Status::error(src + ": id " + std::to_string(id) + " is given to two tokens ('" +
                           name + "' and another)");
    t->present_[id] = true;
    t->pieces_[id] = std::move(bytes);
    return Status::ok();
  };
  for (auto &[name, id] : spec.vocab) {
    std::optional<std::string> bytes = tokenBytes(name);
    RETURN_IF_ERROR(setToken(id, bytes ? *bytes : name, name));
    if (bytes)
      t->ids_.emplace(std::move(*bytes), static_cast<int32_t>(id));
  }
  PieceMap added;
  for (auto &[content, id] : spec.addedTokens) {
    if (content.empty())
      return Status::error(src + ": added token " + std::to_string(id) + " is empty");
    bool inVocab = id >= 0 && static_cast<size_t>(id) < t->present_.size() && t->present_[id];
    if (!inVocab)
      RETURN_IF_ERROR(setToken(id, content, content));
    t->added_.emplace_back(content, static_cast<int32_t>(id));
    t->addedFirstByte_[static_cast<unsigned char>(content[0])] = true;
    added.emplace(content, static_cast<int32_t>(id));
  }
  std::stable_sort(t->added_.begin(), t->added_.end(),
                   [](auto &a, auto &b) { return a.first.size() > b.first.size(); });
  for (int b = 0; b < 256; ++b) {
    auto it = t->ids_.find(std::string(1, static_cast<char>(b)));
    if (it == t->ids_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", b);
      return Status::error(src + ": the vocabulary has no token for byte " + std::string(hex) +
                           " (a byte-level BPE vocabulary has all 256)");
    }
    t->byteIds_[b] = it->second;
  }
  t->merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    auto &[left, right] = spec.merges[rank];
    std::optional<std::string> a = tokenBytes(left), b = tokenBytes(right);
    auto where = [&] {
      return src + ": merge " + std::to_string(rank + 1) + " '" + left + " " + right + "'";
    };
    if (!a || !b)
      return Status::error(where() + " is not byte-level (a character outside bytes_to_unicode)");
    auto ia = t->ids_.find(*a), ib = t->ids_.find(*b), ic = t->ids_.find(*a + *b);
    if (ia == t->ids_.end() || ib == t->ids_.end() || ic == t->ids_.end())
      return Status::error(where() + ": '" +
                           (ia == t->ids_.end()   ? left
                            : ib == t->ids_.end() ? right
                                                  : left + right) +
                           "' is not in the vocabulary");
    // A repeated merge takes its last rank, as GPT-2's dict(zip(merges, ranks)) does.
    t->merges_.set(ia->second, ib->second, Merge{static_cast<int32_t>(rank), ic->second});
  }
  for (const std::string &name : spec.endOfDocumentNames) {
    if (auto it = added.find(name); it != added.end()) {
      t->endOfDocument_ = it->second;
      break;
    }
    if (std::optional<std::string> bytes = tokenBytes(name))
      if (auto it = t->ids_.find(*bytes); it != t->ids_.end()) {
        t->endOfDocument_ = it->second;
        break;
      }
  }
  t->split_ = spec.split;
  t->addPrefixSpace_ = spec.addPrefixSpace;
  t->useRegex_ = spec.useRegex;
  t->ignoreMerges_ = spec.ignoreMerges;
  t->spec_ = std::move(spec.spec);
  t->source_ = std::move(spec.source);
  return std::unique_ptr<Tokenizer>(std::move(t));
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 1);
  if (added_.empty()) {
    encodeSegment(text, out);
    return out;
  }
  // Added tokens first, leftmost-longest (Hugging Face's order); the text between them is
  // pre-tokenized on its own.
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    if (addedFirstByte_[static_cast<unsigned char>(text[pos])]) {
      auto match = std::find_if(added_.begin(), added_.end(), [&](auto &token) {
        return text.compare(pos, token.first.size(), token.first) == 0;
      });
      if (match != added_.end()) {
        encodeSegment(text.substr(segment, pos - segment), out);
        out.push_back(match->second);
        pos += match->first.size();
        segment = pos;
        continue;
      }
    }
    ++pos;
  }
  encodeSegment(text.substr(segment), out);
  return out;
}

void BpeTokenizer::encodeSegment(std::string_view segment, std::vector<int64_t> &out) const {
  if (segment.empty())
    return;
  // Hugging Face's order: the Split pattern (if any), then ByteLevel on each split: a prefix
  // space, then GPT-2's pattern.
  thread_local std::vector<std::string_view> splits, pieces;
  thread_local std::vector<std::string> prefixed;
  thread_local std::vector<int32_t> ids;
  splits.clear();
  pieces.clear();
  prefixed.clear();
  if (split_ == BpeSpec::Split::gpt2)
    splitGpt2Pattern(segment, splits);
  else if (split_ == BpeSpec::Split::llama3)
    splitLlama3Pattern(segment, splits);
  else
    splits.push_back(segment);
  if (addPrefixSpace_) {
    prefixed.reserve(splits.size()); // views into it stay valid
    for (std::string_view &piece : splits)
      if (piece.front() != ' ')
        piece = prefixed.emplace_back(" " + std::string(piece));
  }
  for (std::string_view piece : splits) {
    if (useRegex_)
      splitGpt2Pattern(piece, pieces);
    else
      pieces.push_back(piece);
  }
  thread_local PieceCache cache;
  if (cache.owner != serial_) {
    cache.ids.clear();
    cache.owner = serial_;
  }
  for (std::string_view piece : pieces) {
    if (ignoreMerges_)
      if (auto it = ids_.find(piece); it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
    if (auto it = cache.ids.find(piece); it != cache.ids.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      continue;
    }
    ids.clear();
    encodePiece(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (piece.size() <= PieceCache::kMaxPieceBytes && cache.ids.size() < PieceCache::kMaxEntries)
      cache.ids.emplace(std::string(piece), ids);
  }
}

void BpeTokenizer::encodePiece(std::string_view piece, std::vector<int32_t> &symbols) const {
  for (char c : piece)
    symbols.push_back(byteIds_[static_cast<unsigned char>(c)]);
  if (symbols.size() > 64)
    return mergeLongPiece(symbols);
  // GPT-2's loop: merge every occurrence of the best-ranked adjacent pair, left to right,
  // until no adjacent pair has a merge. pairs[i] is the merge of symbols i, i+1 (one table
  // entry per pair, so equal pointers are equal pairs); after a round only the pairs touching
  // a new symbol are looked up again.
  thread_local std::vector<const Merge *> pairs;
  thread_local std::vector<uint32_t> from; // a kept symbol's index before the round
  thread_local std::vector<bool> fresh;    // made by this round's merge
  size_t n = symbols.size();
  pairs.resize(n);
  for (size_t i = 0; i + 1 < n; ++i)
    pairs[i] = findMerge(symbols[i], symbols[i + 1]);
  from.resize(n);
  fresh.resize(n);
  while (n > 1) {
    const Merge *best = nullptr;
    for (size_t i = 0; i + 1 < n; ++i)
      if (pairs[i] && (!best || pairs[i]->rank < best->rank))
        best = pairs[i];
    if (!best)
      break;
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i, ++kept) {
      from[kept] = static_cast<uint32_t>(i);
      fresh[kept] = i + 1 < n && pairs[i] == best;
      symbols[kept] = fresh[kept] ? best->id : symbols[i];
      i += fresh[kept]; // the right half is consumed
    }
    n = kept;
    for (size_t k = 0; k + 1 < n; ++k) // pairs[from[k]] is read before it is overwritten
      pairs[k] = fresh[k] || fresh[k + 1] ? findMerge(symbols[k], symbols[k + 1]) : pairs[from[k]];
  }
  symbols.resize(n);
}

/// The same merges for a long piece (a run of spaces or symbols) in O(n log n): a heap of
/// (rank, position) over a linked list of symbols. It pops a rank's occurrences left to right,
/// as GPT-2's loop merges them, given merges whose parts are made by earlier merges (true of
/// any trained merge list).
void BpeTokenizer::mergeLongPiece(std::vector<int32_t> &symbols) const {
  size_t n = symbols.size();
  std::vector<int32_t> next(n), prev(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    next[i] = static_cast<int32_t>(i + 1 < n ? i + 1 : -1);
    prev[i] = static_cast<int32_t>(i) - 1;
  }
  struct Candidate {
    int32_t rank, pos, left, right;
    bool operator>(const Candidate &o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0)
      return;
    if (const Merge *m = findMerge(symbols[pos], symbols[next[pos]]))
      heap.push({m->rank, pos, symbols[pos], symbols[next[pos]]});
  };
  for (size_t i = 0; i + 1 < n; ++i)
    consider(static_cast<int32_t>(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    int32_t right = next[c.pos];
    if (!alive[c.pos] || right < 0 || symbols[c.pos] != c.left || symbols[right] != c.right)
      continue; // stale: a neighbour was merged since
    symbols[c.pos] = findMerge(c.left, c.right)->id;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0)
      prev[next[right]] = c.pos;
    consider(prev[c.pos]);
    consider(c.pos);
  }
  size_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[i])
    symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

StatusOr<std::string> BpeTokenizer::decode(std::span<const int64_t> ids) const {
  std::string text;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocabSize() || !present_[id])
      return Status::error("token " + std::to_string(id) + " is not in the vocabulary of " +
                           source_ + " (" + std::to_string(vocabSize()) + " ids)");
    text += pieces_[id];
  }
  return text;
}

Status readLines(const std::string &path, const char *what, std::string &text) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, what));
  text.assign(bytes.begin(), bytes.end());
  return Status::ok();
}

} // namespace

uint32_t byteToUnicode(uint8_t byte) { return byteTable().toUnicode[byte]; }

StatusOr<std::unique_ptr<Tokenizer>> makeBpeTokenizer(BpeSpec spec) {
  return BpeTokenizer::make(std::move(spec));
}

StatusOr<std::unique_ptr<Tokenizer>> loadGpt2Tokenizer(const std::string &vocabPath,
                                                       const std::string &mergesPath) {
  BpeSpec spec;
  spec.spec = "gpt2:" + vocabPath + "," + mergesPath;
  std::string text;
  RETURN_IF_ERROR(readLines(vocabPath, "vocab file", text));
  StatusOr<json::Value> vocab = json::parse(text);
  if (!vocab.isOk())
    return Status::error("vocab file " + vocabPath + ": " + vocab.status().message());
  if (vocab->kind != json::Value::Kind::object)
    return Status::error("vocab file " + vocabPath + ": not a JSON object of token -> id");
  for (size_t i = 0; i < vocab->keys.size(); ++i) {
    const json::Value &id = vocab->items[i];
    if (id.kind != json::Value::Kind::number || !id.isInteger)
      return Status::error("vocab file " + vocabPath + ": token '" + vocab->keys[i] +
                           "' has no integer id");
    spec.vocab.emplace_back(std::move(vocab->keys[i]), id.integer);
  }
  RETURN_IF_ERROR(readLines(mergesPath, "merges file", text));
  size_t lineNo = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    ++lineNo;
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (line.empty() || (lineNo == 1 && line.starts_with("#version")))
      continue;
    size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      return Status::error("merges file " + mergesPath + " line " + std::to_string(lineNo) + ": '" +
                           std::string(line) + "' is not two tokens 'A B'");
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  spec.source = "vocab " + vocabPath + " / merges " + mergesPath;
  return makeBpeTokenizer(std::move(spec));
}

} // namespace megac::runtime::data
