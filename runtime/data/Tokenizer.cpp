// The byte tokenizer and the --tokenizer spec parser (the BPE tokenizers: BpeTokenizer.cpp).
#include "runtime/data/Tokenizer.h"

#include "runtime/data/BpeTokenizer.h"

namespace megac::runtime::data {

namespace {

class ByteTokenizer final : public Tokenizer {
public:
  std::vector<int64_t> encode(std::string_view text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i)
      ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  StatusOr<std::string> decode(std::span<const int64_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int64_t id : ids) {
      if (id == kEndOfDocument)
        continue;
      if (id < 0 || id > 255)
        return Status::error("token " + std::to_string(id) +
                             " is not a byte (the byte tokenizer's ids are 0..256)");
      text.push_back(static_cast<char>(id));
    }
    return text;
  }
  int64_t vocabSize() const override { return kEndOfDocument + 1; }
  std::optional<int64_t> endOfDocument() const override { return kEndOfDocument; }
  std::string spec() const override { return "byte"; }

private:
  static constexpr int64_t kEndOfDocument = 256;
};

} // namespace

std::unique_ptr<Tokenizer> makeByteTokenizer() { return std::make_unique<ByteTokenizer>(); }

StatusOr<std::unique_ptr<Tokenizer>> makeTokenizer(const std::string &spec) {
  if (spec == "byte")
    return makeByteTokenizer();
  std::string_view rest(spec);
  if (rest.starts_with("gpt2:")) {
    rest.remove_prefix(5);
    size_t comma = rest.find(',');
    if (comma == std::string_view::npos || comma == 0 || comma + 1 == rest.size() ||
        rest.find(',', comma + 1) != std::string_view::npos)
      return Status::error("tokenizer '" + spec +
                           "': give gpt2:VOCAB.json,MERGES.txt (two files, one comma)");
    return loadGpt2Tokenizer(std::string(rest.substr(0, comma)),
                             std::string(rest.substr(comma + 1)));
  }
  if (rest.starts_with("hf:") && rest.size() > 3)
    return loadHfTokenizer(std::string(rest.substr(3)));
  return Status::error("tokenizer '" + spec +
                       "' is not supported (use byte, gpt2:VOCAB.json,MERGES.txt or "
                       "hf:TOKENIZER.json)");
}

} // namespace megac::runtime::data
