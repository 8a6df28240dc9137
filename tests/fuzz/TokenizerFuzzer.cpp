// Fuzz target of the tokenizer loaders: the input split at the seed framing is a vocab.json and
// a merges.txt (GPT-2's files), and whole it is a tokenizer.json; what loads encodes and
// decodes a short text. Never a crash.
#include "FuzzFiles.h"

#include "runtime/data/Tokenizer.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace megac;
  std::string_view input(reinterpret_cast<const char *>(data), size);
  const std::string dir = fuzz::scratchDir();
  auto use = [](const std::string &spec) {
    auto t = runtime::data::makeTokenizer(spec);
    if (!t.isOk())
      return;
    std::vector<int64_t> ids = (*t)->encode("Hello world <|endoftext|> 123\n\xc3\xa9");
    (void)(*t)->decode(ids).isOk();
  };
  auto [vocab, merges] = fuzz::splitInput(input);
  fuzz::writeFile(dir + "/vocab.json", vocab);
  fuzz::writeFile(dir + "/merges.txt", merges);
  use("gpt2:" + dir + "/vocab.json," + dir + "/merges.txt");
  fuzz::writeFile(dir + "/tokenizer.json", input);
  use("hf:" + dir + "/tokenizer.json");
  return 0;
}
