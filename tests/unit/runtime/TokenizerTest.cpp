// Tokenizers (runtime/data): GPT-2's pre-tokenization regex, BPE merges by rank on a tiny
// hand-written vocabulary in both file formats, decode round trips, and the loaders' errors.
#include "runtime/data/Tokenizer.h"
#include "runtime/data/BpeTokenizer.h"
#include "runtime/data/Unicode.h"
#include "support/Json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <unistd.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::data;

namespace {

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string_view> views;
  splitGpt2Pattern(text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

TEST(Gpt2Pattern, ContractionsWordsAndDigits) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm don't they're we've I'll he'd it's"),
            (Pieces{"I", "'m", " don", "'t", " they", "'re", " we", "'ve", " I", "'ll", " he", "'d",
                    " it", "'s"}));
  EXPECT_EQ(pieces("'S'x"), (Pieces{"'", "S", "'", "x"})); // contractions are case-sensitive
  EXPECT_EQ(pieces(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(pieces("123 4567"), (Pieces{"123", " 4567"})); // digit runs are not cut
  EXPECT_EQ(pieces("line1\nline2"), (Pieces{"line", "1", "\n", "line", "2"}));
}

TEST(Gpt2Pattern, PunctuationAndWhitespace) {
  EXPECT_EQ(pieces("Hello!!! ?"), (Pieces{"Hello", "!!!", " ?"}));
  EXPECT_EQ(pieces("abc  def"), (Pieces{"abc", " ", " def"})); // the last space joins the word
  EXPECT_EQ(pieces("a \t b"), (Pieces{"a", " \t", " b"}));
  EXPECT_EQ(pieces("x   "), (Pieces{"x", "   "})); // trailing spaces: one piece
  EXPECT_EQ(pieces("end \n"), (Pieces{"end", " \n"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("A\r\nB"), (Pieces{"A", "\r", "\n", "B"}));
  EXPECT_EQ(pieces(""), Pieces{});
}

std::vector<std::string> llama3Pieces(std::string_view text) {
  std::vector<std::string_view> views;
  splitLlama3Pattern(text, views);
  return {views.begin(), views.end()};
}

// Expected splits: Hugging Face tokenizers' Split(Regex(pattern), "isolated") on the same text.
TEST(Llama3Pattern, MatchesTheRegex) {
  EXPECT_EQ(llama3Pieces("I'M don'T they're"), (Pieces{"I", "'M", " don", "'T", " they", "'re"}));
  EXPECT_EQ(llama3Pieces("12345 678"), (Pieces{"123", "45", " ", "678"}));
  EXPECT_EQ(llama3Pieces("a\n\nb"), (Pieces{"a", "\n\n", "b"}));
  EXPECT_EQ(llama3Pieces("a\n  b"), (Pieces{"a", "\n", " ", " b"}));
  EXPECT_EQ(llama3Pieces("\t\thello"), (Pieces{"\t", "\thello"}));
  EXPECT_EQ(llama3Pieces("(hello !!!abc"), (Pieces{"(hello", " !!!", "abc"}));
  EXPECT_EQ(llama3Pieces("end.\n\nNext"), (Pieces{"end", ".\n\n", "Next"}));
  EXPECT_EQ(llama3Pieces(" 123"), (Pieces{" ", "123"}));
  EXPECT_EQ(llama3Pieces("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(llama3Pieces("a \n \n  x"), (Pieces{"a", " \n \n", " ", " x"}));
  EXPECT_EQ(llama3Pieces("日本語123 😀😀\n"), (Pieces{"日本語", "123", " 😀😀\n"}));
  EXPECT_EQ(llama3Pieces("'hello"), (Pieces{"'hello"}));
  EXPECT_EQ(llama3Pieces("'ſx"), (Pieces{"'ſ", "x"})); // case folding: long s is s
  EXPECT_EQ(llama3Pieces("a\r\n\r\nb  "), (Pieces{"a", "\r\n\r\n", "b", "  "}));
  EXPECT_EQ(llama3Pieces("Hi!\n  there"), (Pieces{"Hi", "!\n", " ", " there"}));
}

TEST(Gpt2Pattern, UnicodeClasses) {
  EXPECT_EQ(pieces("café 日本語 😀 ½"), (Pieces{"café", " 日本語", " 😀", " ½"}));
  EXPECT_EQ(charClass(0x3000), CharClass::space);  // ideographic space
  EXPECT_EQ(charClass(0x0663), CharClass::number); // Arabic-Indic three
  EXPECT_EQ(charClass(0x00BD), CharClass::number); // one half (No)
  EXPECT_EQ(charClass(0x1F600), CharClass::other); // emoji (So)
  EXPECT_EQ(charClass(0x1C), CharClass::other);    // not White_Space, unlike str.isspace()
  // Invalid UTF-8 is one "other" byte at a time, so nothing is lost.
  std::string bad = "a\xff\xfe b";
  EXPECT_EQ(pieces(bad), (Pieces{"a", "\xff\xfe", " b"}));
}

/// A temporary directory removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("megac-tok-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string &name, const std::string &text) const {
    std::string file = (path / name).string();
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
};

/// A token's spelling in the files: each byte through bytes_to_unicode, as UTF-8.
std::string spell(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = byteToUnicode(b);
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

using Merges = std::vector<std::pair<std::string, std::string>>;

/// Ids 0..255 are the bytes; then one id per merge result, then <|endoftext|>.
struct TinyVocab {
  std::vector<std::pair<std::string, std::string>> merges; // raw bytes
  std::map<std::string, int64_t> ids;                      // raw bytes -> id
  explicit TinyVocab(std::vector<std::pair<std::string, std::string>> m) : merges(std::move(m)) {
    for (int b = 0; b < 256; ++b)
      ids[std::string(1, static_cast<char>(b))] = b;
    for (auto &[a, b] : merges)
      ids.emplace(a + b, static_cast<int64_t>(ids.size()));
    ids.emplace("<|endoftext|>", static_cast<int64_t>(ids.size()));
  }
  std::string vocabJson() const {
    std::string json = "{";
    for (auto &[bytes, id] : ids)
      json +=
          (json.size() > 1 ? ",\n" : "") + json::quote(spell(bytes)) + ": " + std::to_string(id);
    return json + "}";
  }
  std::string mergesTxt() const {
    std::string text = "#version: 0.2\n";
    for (auto &[a, b] : merges)
      text += spell(a) + " " + spell(b) + "\n";
    return text;
  }
  int64_t id(const std::string &bytes) const { return ids.at(bytes); }
};

std::unique_ptr<Tokenizer> gpt2(const TempDir &dir, const TinyVocab &v) {
  std::string vocab = dir.write("vocab.json", v.vocabJson());
  std::string merges = dir.write("merges.txt", v.mergesTxt());
  auto t = makeTokenizer("gpt2:" + vocab + "," + merges);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return t.isOk() ? std::move(t).value() : nullptr;
}

TEST(BpeTokenizer, MergesByRank) {
  TempDir dir;
  TinyVocab v(Merges{{" ", "t"}, {"h", "e"}, {" t", "he"}, {"a", "b"}, {"b", "c"}});
  auto t = gpt2(dir, v);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("the the"), (std::vector<int64_t>{'t', v.id("he"), v.id(" the")}));
  // "abc": "a b" outranks "b c", so a+b merge first and c stays alone.
  EXPECT_EQ(t->encode("abc"), (std::vector<int64_t>{v.id("ab"), 'c'}));
  TinyVocab w(Merges{{"b", "c"}, {"a", "b"}});
  TempDir dir2;
  auto u = gpt2(dir2, w);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->encode("abc"), (std::vector<int64_t>{'a', w.id("bc")}));
  EXPECT_EQ(t->vocabSize(), 256 + 5 + 1);
  EXPECT_EQ(t->endOfDocument(), v.id("<|endoftext|>"));
  // Plain text: <|endoftext|> inside a document is characters, not the special token.
  std::vector<int64_t> ids = t->encode("<|endoftext|>");
  EXPECT_EQ(ids.size(), 13u); // no merges apply: one token per byte
  EXPECT_EQ(std::count(ids.begin(), ids.end(), v.id("<|endoftext|>")), 0);
}

/// GPT-2's bpe() written plainly over strings: the reference for the tokenizer's merge loops.
std::vector<std::string> referenceBpe(const std::string &piece, const Merges &merges) {
  std::vector<std::string> word;
  for (char c : piece)
    word.emplace_back(1, c);
  while (word.size() > 1) {
    size_t best = merges.size();
    for (size_t i = 0; i + 1 < word.size(); ++i)
      for (size_t r = 0; r < best; ++r)
        if (merges[r].first == word[i] && merges[r].second == word[i + 1])
          best = r;
    if (best == merges.size())
      break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == merges[best].first &&
          word[i + 1] == merges[best].second) {
        next.push_back(word[i] + word[i + 1]);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word = std::move(next);
  }
  return word;
}

TEST(BpeTokenizer, LongPiecesMergeLikeShortOnes) {
  TempDir dir;
  Merges merges = {{" ", " "}, {"  ", "  "}, {"!", "!"}, {"!!", "!"}, {"    ", "  "}};
  TinyVocab v(merges);
  auto t = gpt2(dir, v);
  ASSERT_TRUE(t);
  // Pieces past 64 bytes go through the heap instead of GPT-2's loop; both give its merges.
  for (size_t n : {1, 2, 3, 5, 7, 9, 63, 64, 65, 66, 67, 200, 1001}) {
    for (char c : {' ', '!'}) {
      std::vector<int64_t> want;
      for (const std::string &token : referenceBpe(std::string(n, c), merges))
        want.push_back(v.id(token));
      EXPECT_EQ(t->encode(std::string(n, c)), want) << n << " x '" << c << "'";
    }
  }
}

TEST(BpeTokenizer, DecodeRoundTripsAndThreads) {
  TempDir dir;
  TinyVocab v(Merges{{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\xc3", "\xa9"}});
  auto t = gpt2(dir, v);
  ASSERT_TRUE(t);
  std::string text = "the café — 日本語 😀 it's  \r\n\t 12½ \xff\xfe the end   ";
  std::vector<int64_t> ids = t->encode(text);
  EXPECT_NE(std::find(ids.begin(), ids.end(), v.id("\xc3\xa9")), ids.end());
  StatusOr<std::string> back = t->decode(ids);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(*back, text);
  std::vector<std::vector<int64_t>> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int k = 0; k < 50; ++k)
        results[i] = t->encode(text);
    });
  for (auto &th : threads)
    th.join();
  for (auto &r : results)
    EXPECT_EQ(r, ids);
  std::vector<int64_t> unknown = {1, t->vocabSize()};
  StatusOr<std::string> bad = t->decode(unknown);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("token " + std::to_string(t->vocabSize())),
            std::string::npos);
}

// Seeded random byte strings (valid and invalid UTF-8): both patterns cut them into non-empty
// pieces that concatenate back to the input, and encode/decode round-trips.
TEST(BpeTokenizer, RandomBytesRoundTrip) {
  TempDir dir;
  TinyVocab v(Merges{{" ", "t"}, {"h", "e"}, {" t", "he"}, {" ", " "}, {"\xc3", "\xa9"}});
  auto t = gpt2(dir, v);
  ASSERT_TRUE(t);
  const std::vector<std::string> pool = {"a",
                                         "Z",
                                         " ",
                                         "  ",
                                         "\t",
                                         "\n",
                                         "\r",
                                         "'",
                                         "s",
                                         "LL",
                                         "1",
                                         "!",
                                         "\xc3\xa9",
                                         "\xe6\x97\xa5",
                                         "\xf0\x9f\x98\x80",
                                         "\xe3\x80\x80",
                                         "\xc5\xbf",
                                         "\xff",
                                         "\x80",
                                         "\xe6\x97"};
  std::mt19937 rng(1);
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    for (int n = rng() % 30; n > 0; --n)
      text += pool[rng() % pool.size()];
    for (auto split : {splitGpt2Pattern, splitLlama3Pattern}) {
      std::vector<std::string_view> views;
      split(text, views);
      std::string joined;
      for (std::string_view piece : views) {
        EXPECT_FALSE(piece.empty());
        joined += piece;
      }
      ASSERT_EQ(joined, text);
    }
    StatusOr<std::string> back = t->decode(t->encode(text));
    ASSERT_TRUE(back.isOk());
    ASSERT_EQ(*back, text);
  }
}

TEST(BpeTokenizer, Gpt2FileErrors) {
  TempDir dir;
  TinyVocab v(Merges{{"a", "b"}});
  std::string vocab = dir.write("vocab.json", v.vocabJson());
  std::string merges = dir.write("merges.txt", v.mergesTxt());
  auto message = [](const std::string &spec) {
    auto t = makeTokenizer(spec);
    return t.isOk() ? std::string("(no error)") : t.status().message();
  };
  EXPECT_NE(message("gpt2:" + vocab + ",/nonexistent/m.txt").find("/nonexistent/m.txt"),
            std::string::npos);
  EXPECT_NE(message("gpt2:/nonexistent/v.json," + merges).find("/nonexistent/v.json"),
            std::string::npos);
  EXPECT_NE(message("gpt2:" + vocab).find("two files"), std::string::npos);
  std::string broken = dir.write("broken.json", "{\"a\": 1,");
  EXPECT_NE(message("gpt2:" + broken + "," + merges).find("broken.json: JSON error"),
            std::string::npos);
  std::string badMerge = dir.write("bad.txt", "#version: 0.2\na b\nx yz\n");
  EXPECT_NE(message("gpt2:" + vocab + "," + badMerge).find("'yz' is not in the vocabulary"),
            std::string::npos);
  std::string noBytes = dir.write("nobytes.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
  EXPECT_NE(message("gpt2:" + noBytes + "," + merges).find("no token for byte 0x00"),
            std::string::npos);
  // A duplicate key deep in a large object (the parser's hash set, past its linear scan).
  std::string dup = v.vocabJson();
  dup.insert(dup.size() - 1, ",\n\"ab\": 7");
  std::string dupFile = dir.write("dup.json", dup);
  EXPECT_NE(message("gpt2:" + dupFile + "," + merges).find("duplicate key \"ab\""),
            std::string::npos);
  EXPECT_NE(message("sentencepiece:x.model").find("is not supported"), std::string::npos);
}

/// A tokenizer.json around TinyVocab; `extra` replaces members (raw JSON text).
std::string hfJson(const TinyVocab &v, std::map<std::string, std::string> extra) {
  std::string merges = "[";
  for (auto &[a, b] : v.merges)
    merges += (merges.size() > 1 ? ", " : "") + json::quote(spell(a) + " " + spell(b));
  merges += "]";
  std::map<std::string, std::string> members = {
      {"version", "\"1.0\""},
      {"truncation", "null"},
      {"padding", "null"},
      {"added_tokens", "[{\"id\": " + std::to_string(v.id("<|endoftext|>")) +
                           ", \"content\": \"<|endoftext|>\", \"single_word\": false, "
                           "\"lstrip\": false, \"rstrip\": false, \"normalized\": false, "
                           "\"special\": true}]"},
      {"normalizer", "null"},
      {"pre_tokenizer", R"({"type": "ByteLevel", "add_prefix_space": false,
                            "trim_offsets": true, "use_regex": true})"},
      {"post_processor", R"({"type": "ByteLevel", "trim_offsets": true})"},
      {"decoder", R"({"type": "ByteLevel"})"},
      {"model", "{\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, "
                "\"byte_fallback\": false, \"vocab\": " +
                    v.vocabJson() + ", \"merges\": " + merges + "}"}};
  for (auto &[k, value] : extra)
    members[k] = value;
  std::string out = "{";
  for (auto &[k, value] : members)
    out += (out.size() > 1 ? ",\n" : "") + json::quote(k) + ": " + value;
  return out + "}";
}

TEST(BpeTokenizer, HuggingFaceJson) {
  TempDir dir;
  TinyVocab v(Merges{{" ", "t"}, {"h", "e"}, {" t", "he"}});
  auto t = makeTokenizer("hf:" + dir.write("tokenizer.json", hfJson(v, {})));
  ASSERT_TRUE(t.isOk()) << t.status().message();
  int64_t eot = v.id("<|endoftext|>");
  EXPECT_EQ((*t)->endOfDocument(), eot);
  // Added tokens are matched in the text (Hugging Face's behaviour), unlike gpt2:.
  EXPECT_EQ((*t)->encode("the<|endoftext|> the"),
            (std::vector<int64_t>{'t', v.id("he"), eot, v.id(" the")}));
  // [a, b] merges, add_prefix_space, a Sequence around ByteLevel.
  std::string pairs = "[[\"Ġ\", \"t\"], [\"h\", \"e\"], [\"Ġt\", \"he\"]]";
  std::string model =
      "{\"type\": \"BPE\", \"vocab\": " + v.vocabJson() + ", \"merges\": " + pairs + "}";
  auto u =
      makeTokenizer("hf:" + dir.write("prefix.json",
                                      hfJson(v, {{"model", model},
                                                 {"pre_tokenizer",
                                                  R"({"type": "Sequence", "pretokenizers": [{"type":
                                        "ByteLevel", "add_prefix_space": true}]})"}})));
  ASSERT_TRUE(u.isOk()) << u.status().message();
  EXPECT_EQ((*u)->encode("the"), (std::vector<int64_t>{v.id(" the")}));
  EXPECT_EQ((*u)->encode(" the"), (std::vector<int64_t>{v.id(" the")}));
  // Llama 3's Split, then ByteLevel without its regex: "\tthe" is one piece there.
  std::string llama = "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
                      "\"pattern\": {\"Regex\": " +
                      json::quote(kLlama3Pattern) +
                      "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                      "\"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}";
  auto l = makeTokenizer("hf:" + dir.write("llama.json", hfJson(v, {{"pre_tokenizer", llama}})));
  ASSERT_TRUE(l.isOk()) << l.status().message();
  EXPECT_EQ((*l)->encode("\tthe"), (std::vector<int64_t>{'\t', 't', v.id("he")}));
  EXPECT_EQ((*t)->encode("\tthe"), (std::vector<int64_t>{'\t', 't', v.id("he")}));
  EXPECT_EQ((*l)->encode("the the"), (std::vector<int64_t>{'t', v.id("he"), v.id(" the")}));
}

TEST(BpeTokenizer, HuggingFaceJsonRefusals) {
  TempDir dir;
  TinyVocab v(Merges{{"a", "b"}});
  auto message = [&](std::map<std::string, std::string> extra) {
    auto t = makeTokenizer("hf:" + dir.write("t.json", hfJson(v, std::move(extra))));
    return t.isOk() ? std::string("(no error)") : t.status().message();
  };
  EXPECT_EQ(message({}), "(no error)");
  EXPECT_NE(message({{"model", R"({"type": "WordPiece", "vocab": {}})"}}).find("model.type"),
            std::string::npos);
  EXPECT_NE(message({{"normalizer", R"({"type": "NFC"})"}}).find("t.json: normalizer 'NFC'"),
            std::string::npos);
  EXPECT_NE(message({{"pre_tokenizer", R"({"type": "Whitespace"})"}}).find("pre_tokenizer"),
            std::string::npos);
  EXPECT_NE(message({{"pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type":
                    "Split", "pattern": {"Regex": "x"}}, {"type": "ByteLevel"}]})"}})
                .find("pre_tokenizer"),
            std::string::npos);
  // A post-processor is not applied (add_special_tokens=False), so any is accepted.
  EXPECT_EQ(message({{"post_processor", R"({"type": "TemplateProcessing"})"}}), "(no error)");
  EXPECT_NE(message({{"pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type":
                    "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"},
                    {"type": "ByteLevel"}]})"}})
                .find("pre_tokenizer.pretokenizers[0].pattern"),
            std::string::npos);
  EXPECT_NE(message({{"decoder", R"({"type": "WordPiece"})"}}).find("decoder"), std::string::npos);
  auto broken = makeTokenizer("hf:" + dir.write("broken.json", "{\"model\": [}"));
  ASSERT_FALSE(broken.isOk());
  EXPECT_NE(broken.status().message().find("broken.json: JSON error"), std::string::npos);
  auto missing = makeTokenizer("hf:/nonexistent/tokenizer.json");
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

// Issue 19, finding 12: a token id of 2147483646 in vocab.json or tokenizer.json (vocabulary
// or added_tokens) grew the id table to 2^31 entries and aborted with bad_alloc.
TEST(BpeTokenizer, Issue19HugeTokenIdIsRefused) {
  TempDir dir;
  TinyVocab v(Merges{{"a", "b"}});
  auto message = [](const std::string &spec) {
    auto t = makeTokenizer(spec);
    return t.isOk() ? std::string("(no error)") : t.status().message();
  };
  std::string merges = dir.write("merges.txt", v.mergesTxt());
  std::string vocab = v.vocabJson();
  vocab.insert(vocab.size() - 1, ",\n\"zz\": 2147483646");
  std::string gpt2 = message("gpt2:" + dir.write("vocab.json", vocab) + "," + merges);
  EXPECT_NE(gpt2.find("token 'zz' has id 2147483646, but the ids of its"), std::string::npos)
      << gpt2;
  std::string added = message(
      "hf:" + dir.write("t.json", hfJson(v, {{"added_tokens", R"([{"id": 2147483646, "content":
          "<big>", "special": true}])"}})));
  EXPECT_NE(added.find("token '<big>' has id 2147483646"), std::string::npos) << added;
  // A small gap is a real vocabulary's, and fine.
  std::string gap = message("hf:" + dir.write("g.json", hfJson(v, {{"added_tokens", R"([{"id":
          1000, "content": "<gap>", "special": true}])"}})));
  EXPECT_EQ(gap, "(no error)");
}

TEST(ByteTokenizer, RoundTripAndErrors) {
  auto t = makeTokenizer("byte");
  ASSERT_TRUE(t.isOk());
  std::string text = "h\xc3\xa9\xff";
  std::vector<int64_t> ids = (*t)->encode(text);
  EXPECT_EQ(ids, (std::vector<int64_t>{'h', 0xc3, 0xa9, 0xff}));
  ids.push_back(256);
  EXPECT_EQ((*t)->decode(ids).value(), text);
  std::vector<int64_t> bad = {300};
  EXPECT_FALSE((*t)->decode(bad).isOk());
  EXPECT_EQ((*t)->vocabSize(), 257);
}

} // namespace
