// Code point classes from the generated tables, UTF-8 decoding and GPT-2's pre-tokenizer.
#include "runtime/data/Unicode.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace megac::runtime::data {

namespace {

struct CodePointRange {
  uint32_t first, last;
};

#include "runtime/data/UnicodeTables.inc"

bool inRanges(const CodePointRange *begin, const CodePointRange *end, uint32_t cp) {
  const CodePointRange *it = std::upper_bound(
      begin, end, cp, [](uint32_t c, const CodePointRange &r) { return c < r.first; });
  return it != begin && cp <= std::prev(it)->last;
}

template <size_t N> bool inTable(const CodePointRange (&table)[N], uint32_t cp) {
  return inRanges(table, table + N, cp);
}

CharClass slowClass(uint32_t cp) {
  if (inTable(kLetterRanges, cp))
    return CharClass::letter;
  if (inTable(kNumberRanges, cp))
    return CharClass::number;
  if (inTable(kSpaceRanges, cp))
    return CharClass::space;
  return CharClass::other;
}

// The first 0x800 code points (ASCII, Latin, Greek, Cyrillic, Hebrew, Arabic) by table lookup.
constexpr uint32_t kFastLimit = 0x800;
const std::array<CharClass, kFastLimit> &fastClasses() {
  static const std::array<CharClass, kFastLimit> table = [] {
    std::array<CharClass, kFastLimit> t{};
    for (uint32_t cp = 0; cp < kFastLimit; ++cp)
      t[cp] = slowClass(cp);
    return t;
  }();
  return table;
}

} // namespace

CharClass charClass(uint32_t cp) {
  if (cp < kFastLimit)
    return fastClasses()[cp];
  return slowClass(cp);
}

const char *unicodeVersion() { return kUnicodeVersion; }

size_t decodeUtf8(std::string_view text, size_t pos, uint32_t &cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char b0 = byte(pos);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t length = b0 >= 0xf0 && b0 <= 0xf4 ? 4
                  : b0 >= 0xe0             ? (b0 < 0xf0 ? 3 : 0)
                  : b0 >= 0xc2             ? 2
                                           : 0;
  cp = 0xfffd;
  if (length == 0 || pos + length > text.size())
    return 1;
  uint32_t value = b0 & (0x7f >> length);
  for (size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xc0) != 0x80)
      return 1;
    value = (value << 6) | (byte(pos + i) & 0x3f);
  }
  bool overlong = (length == 3 && value < 0x800) || (length == 4 && value < 0x10000);
  if (overlong || value > 0x10ffff || (value >= 0xd800 && value < 0xe000))
    return 1;
  cp = value;
  return length;
}

namespace {

/// The class and byte length of the code point at pos.
struct Scanned {
  CharClass cls;
  size_t length;
  uint32_t cp;
};
Scanned scan(std::string_view text, size_t pos) {
  Scanned s;
  s.length = decodeUtf8(text, pos, s.cp);
  s.cls = charClass(s.cp);
  return s;
}

bool isNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

/// The end of the run of `cls` code points starting at pos.
size_t runEnd(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    Scanned s = scan(text, pos);
    if (s.cls != cls)
      break;
    pos += s.length;
  }
  return pos;
}

/// A whitespace run from pos: where it ends, where its last code point starts, and where its
/// last newline ends (0 when it has none).
struct SpaceRun {
  size_t end, last, afterNewline;
};
SpaceRun spaceRun(std::string_view text, size_t pos) {
  SpaceRun r{pos, pos, 0};
  while (r.end < text.size()) {
    Scanned s = scan(text, r.end);
    if (s.cls != CharClass::space)
      break;
    r.last = r.end;
    r.end += s.length;
    if (isNewline(s.cp))
      r.afterNewline = r.end;
  }
  return r;
}

/// `\s+(?!\S)|\s+` on the run from pos: when a non-space follows, its last code point is left for
/// the next piece (a space there joins the word), unless it is the run's only one.
size_t spacePieceEnd(std::string_view text, size_t pos, const SpaceRun &r) {
  return r.end < text.size() && r.last > pos ? r.last : r.end;
}

/// The length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
size_t contraction(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size())
    return 0;
  char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if (pos + 2 >= text.size())
    return 0;
  char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

} // namespace

void splitGpt2Pattern(std::string_view text, std::vector<std::string_view> &pieces) {
  size_t pos = 0, n = text.size();
  while (pos < n) {
    if (size_t c = contraction(text, pos)) {
      pieces.push_back(text.substr(pos, c));
      pos += c;
      continue;
    }
    Scanned first = scan(text, pos);
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class.
    size_t runStart = pos;
    CharClass runClass = first.cls;
    if (first.cp == ' ' && pos + 1 < n) {
      Scanned second = scan(text, pos + 1);
      if (second.cls != CharClass::space) {
        runStart = pos + 1;
        runClass = second.cls;
      }
    }
    // Else `\s+(?!\S)|\s+`: a whitespace run.
    size_t end = runClass != CharClass::space ? runEnd(text, runStart, runClass)
                                              : spacePieceEnd(text, pos, spaceRun(text, pos));
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

const char *const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char *const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+)"
    R"([\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

/// The length of a case-insensitive contraction at pos, or 0. Unicode case folding makes
/// U+017F (long s, UTF-8 C5 BF) match 's' too.
size_t contractionAnyCase(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size())
    return 0;
  if (text.substr(pos + 1, 2) == "\xc5\xbf")
    return 3;
  auto lower = [&](size_t i) { return static_cast<char>(text[i] | 0x20); };
  char a = lower(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd')
    return 2;
  if (pos + 2 >= text.size())
    return 0;
  char b = lower(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
    return 3;
  return 0;
}

} // namespace

void splitLlama3Pattern(std::string_view text, std::vector<std::string_view> &pieces) {
  size_t pos = 0, n = text.size();
  auto emit = [&](size_t end) {
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  };
  while (pos < n) {
    if (size_t c = contractionAnyCase(text, pos)) {
      emit(pos + c);
      continue;
    }
    Scanned first = scan(text, pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+: letters, after at most one code point that is not a newline,
    // letter or number (a space, a tab, punctuation).
    if (first.cls == CharClass::letter) {
      emit(runEnd(text, pos, CharClass::letter));
      continue;
    }
    bool prefixable = first.cls != CharClass::number && !isNewline(first.cp);
    if (prefixable && pos + first.length < n &&
        scan(text, pos + first.length).cls == CharClass::letter) {
      emit(runEnd(text, pos + first.length, CharClass::letter));
      continue;
    }
    // \p{N}{1,3}
    if (first.cls == CharClass::number) {
      size_t end = pos;
      for (int i = 0; i < 3 && end < n; ++i) {
        Scanned s = scan(text, end);
        if (s.cls != CharClass::number)
          break;
        end += s.length;
      }
      emit(end);
      continue;
    }
    // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    size_t runStart = pos;
    if (first.cp == ' ' && pos + 1 < n && scan(text, pos + 1).cls == CharClass::other)
      runStart = pos + 1;
    if (runStart != pos || first.cls == CharClass::other) {
      size_t end = runEnd(text, runStart, CharClass::other);
      while (end < n && (text[end] == '\r' || text[end] == '\n'))
        ++end;
      emit(end);
      continue;
    }
    // Whitespace. `\s*[\r\n]+`: through the run's last newline, if it has one; else
    // `\s+(?!\S)|\s+` as in GPT-2's pattern.
    SpaceRun run = spaceRun(text, pos);
    emit(run.afterNewline ? run.afterNewline : spacePieceEnd(text, pos, run));
  }
}

} // namespace megac::runtime::data
