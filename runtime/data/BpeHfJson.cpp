// Hugging Face tokenizer.json to a BpeSpec: a BPE model with a ByteLevel pre-tokenizer and
// decoder (a Split of GPT-2's or Llama 3's pattern may come first). Anything else that would
// change the ids (another model, a normalizer, other pre-tokenizers or patterns) is refused,
// naming the field. The post-processor is not applied (add_special_tokens=False).
#include "runtime/data/BpeTokenizer.h"

#include "runtime/data/Unicode.h"

#include "support/Files.h"
#include "support/Json.h"

namespace megac::runtime::data {

namespace {

using json::Value;

class HfReader {
public:
  explicit HfReader(std::string path) : path_(std::move(path)) {}

  Status error(const std::string &field, const std::string &what) const {
    return Status::error("tokenizer file " + path_ + ": " + field + " " + what);
  }

  /// The member's "type" string, or "" when the value is null or has none.
  static std::string typeOf(const Value *v) {
    if (!v || v->kind != Value::Kind::object)
      return "";
    const Value *type = v->find("type");
    return type && type->kind == Value::Kind::string ? type->string : "";
  }
  static bool isNull(const Value *v) { return !v || v->kind == Value::Kind::null; }
  static bool flag(const Value &object, std::string_view key, bool fallback) {
    const Value *v = object.find(key);
    return v && v->kind == Value::Kind::boolean ? v->boolean : fallback;
  }

  static Status byteLevel(const Value &v, BpeSpec &spec) {
    spec.addPrefixSpace = flag(v, "add_prefix_space", false);
    spec.useRegex = flag(v, "use_regex", true);
    return Status::ok();
  }

  /// A Split of GPT-2's or Llama 3's pattern, isolating its matches.
  Status split(const Value &v, const std::string &field, BpeSpec &spec) {
    const Value *pattern = v.find("pattern");
    const Value *regex = pattern ? pattern->find("Regex") : nullptr;
    const Value *behavior = v.find("behavior");
    if (!regex || regex->kind != Value::Kind::string)
      return error(field + ".pattern",
                   "is not a {\"Regex\": ...} (String splits are not supported)");
    if (regex->string == kGpt2Pattern)
      spec.split = BpeSpec::Split::gpt2;
    else if (regex->string == kLlama3Pattern)
      spec.split = BpeSpec::Split::llama3;
    else
      return error(field + ".pattern",
                   "'" + regex->string + "' is not supported (only GPT-2's and Llama 3's)");
    if (!behavior || behavior->kind != Value::Kind::string || behavior->string != "Isolated")
      return error(field + ".behavior", "is not supported (only Isolated)");
    if (flag(v, "invert", false))
      return error(field + ".invert", "is not supported");
    return Status::ok();
  }

  /// ByteLevel, or a Sequence of [Split,] ByteLevel.
  Status preTokenizer(const Value *v, BpeSpec &spec) {
    std::string type = typeOf(v);
    if (type == "ByteLevel")
      return byteLevel(*v, spec);
    if (type == "Sequence") {
      const Value *list = v->find("pretokenizers");
      if (!list || list->kind != Value::Kind::array || list->items.empty() ||
          list->items.size() > 2 || typeOf(&list->items.back()) != "ByteLevel" ||
          (list->items.size() == 2 && typeOf(&list->items[0]) != "Split"))
        return error("pre_tokenizer",
                     "is a Sequence other than [Split,] ByteLevel (not supported)");
      if (list->items.size() == 2)
        RETURN_IF_ERROR(split(list->items[0], "pre_tokenizer.pretokenizers[0]", spec));
      return byteLevel(list->items.back(), spec);
    }
    return error("pre_tokenizer", "'" + (type.empty() ? std::string("null") : type) +
                                      "' is not supported (only ByteLevel)");
  }

  Status normalizer(const Value *v) {
    if (isNull(v))
      return Status::ok();
    const Value *list = v->find("normalizers");
    if (typeOf(v) == "Sequence" && list && list->kind == Value::Kind::array && list->items.empty())
      return Status::ok();
    return error("normalizer", "'" + typeOf(v) + "' is not supported (it changes the text)");
  }

  Status model(const Value *v, BpeSpec &spec) {
    if (!v || v->kind != Value::Kind::object)
      return error("model", "is missing");
    std::string type = typeOf(v);
    if (!type.empty() && type != "BPE")
      return error("model.type", "'" + type + "' is not supported (only BPE)");
    if (const Value *d = v->find("dropout");
        !isNull(d) && !(d->kind == Value::Kind::number && d->number == 0.0))
      return error("model.dropout", "is set (BPE dropout is not deterministic)");
    for (const char *key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (const Value *s = v->find(key);
          !isNull(s) && !(s->kind == Value::Kind::string && s->string.empty()))
        return error(std::string("model.") + key, "is not supported");
    if (flag(*v, "byte_fallback", false))
      return error("model.byte_fallback", "is not supported (a byte-level BPE needs none)");
    spec.ignoreMerges = flag(*v, "ignore_merges", false);
    const Value *vocab = v->find("vocab");
    if (!vocab || vocab->kind != Value::Kind::object)
      return error("model.vocab", "is not an object of token -> id");
    for (size_t i = 0; i < vocab->keys.size(); ++i) {
      const Value &id = vocab->items[i];
      if (id.kind != Value::Kind::number || !id.isInteger)
        return error("model.vocab", "token '" + vocab->keys[i] + "' has no integer id");
      spec.vocab.emplace_back(vocab->keys[i], id.integer);
    }
    const Value *merges = v->find("merges");
    if (!merges || merges->kind != Value::Kind::array)
      return error("model.merges", "is not an array");
    for (size_t i = 0; i < merges->items.size(); ++i) {
      const Value &m = merges->items[i];
      std::string where = "model.merges[" + std::to_string(i) + "]";
      if (m.kind == Value::Kind::string) { // "a b"
        size_t space = m.string.find(' ');
        if (space == 0 || space == std::string::npos || space + 1 == m.string.size() ||
            m.string.find(' ', space + 1) != std::string::npos)
          return error(where, "'" + m.string + "' is not two tokens 'A B'");
        spec.merges.emplace_back(m.string.substr(0, space), m.string.substr(space + 1));
      } else if (m.kind == Value::Kind::array && m.items.size() == 2 &&
                 m.items[0].kind == Value::Kind::string &&
                 m.items[1].kind == Value::Kind::string) { // ["a", "b"]
        spec.merges.emplace_back(m.items[0].string, m.items[1].string);
      } else {
        return error(where, "is neither \"A B\" nor [\"A\", \"B\"]");
      }
    }
    return Status::ok();
  }

  Status addedTokens(const Value *v, BpeSpec &spec) {
    if (isNull(v))
      return Status::ok();
    if (v->kind != Value::Kind::array)
      return error("added_tokens", "is not an array");
    for (size_t i = 0; i < v->items.size(); ++i) {
      const Value &t = v->items[i];
      std::string where = "added_tokens[" + std::to_string(i) + "]";
      const Value *id = t.find("id"), *content = t.find("content");
      if (!id || !id->isInteger || !content || content->kind != Value::Kind::string)
        return error(where, "has no integer id and string content");
      for (const char *key : {"single_word", "lstrip", "rstrip"})
        if (flag(t, key, false))
          return error(where + "." + key, "is not supported");
      spec.addedTokens.emplace_back(content->string, id->integer);
    }
    return Status::ok();
  }

  StatusOr<BpeSpec> read() {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path_, "tokenizer file"));
    StatusOr<Value> root =
        json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
    if (!root.isOk())
      return Status::error("tokenizer file " + path_ + ": " + root.status().message());
    if (root->kind != Value::Kind::object)
      return error("the document", "is not a JSON object");
    BpeSpec spec;
    for (const char *key : {"truncation", "padding"})
      if (!isNull(root->find(key)))
        return error(key, "is set (data prep encodes whole documents; set it to null)");
    RETURN_IF_ERROR(normalizer(root->find("normalizer")));
    RETURN_IF_ERROR(preTokenizer(root->find("pre_tokenizer"), spec));
    // post_processor is not applied: documents are encoded as by encode(text,
    // add_special_tokens=False); --append-eod adds the end-of-document token.
    if (const Value *d = root->find("decoder"); !isNull(d) && typeOf(d) != "ByteLevel")
      return error("decoder", "'" + typeOf(d) + "' is not supported (only ByteLevel)");
    RETURN_IF_ERROR(model(root->find("model"), spec));
    RETURN_IF_ERROR(addedTokens(root->find("added_tokens"), spec));
    spec.endOfDocumentNames = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    spec.source = "tokenizer file " + path_;
    spec.spec = "hf:" + path_;
    return spec;
  }

private:
  std::string path_;
};

} // namespace

StatusOr<std::unique_ptr<Tokenizer>> loadHfTokenizer(const std::string &path) {
  ASSIGN_OR_RETURN(BpeSpec spec, HfReader(path).read());
  return makeBpeTokenizer(std::move(spec));
}

} // namespace megac::runtime::data
