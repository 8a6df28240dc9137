// The data options of `megac train` and the samples they name (TrainData.h).
#include "tools/megac/TrainData.h"

#include "frontends/models/ModelConfig.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/train/TokenBatches.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

namespace megac::cli {

namespace data = runtime::data;
namespace train = runtime::train;

namespace {

/// PREFIX.bin or PREFIX.idx names PREFIX (when PREFIX.idx exists).
std::string datasetPrefix(const std::string &path) {
  for (const char *suffix : {".bin", ".idx"})
    if (std::string stem = path.substr(0, path.size() - 4);
        path.ends_with(suffix) && std::filesystem::exists(stem + ".idx"))
      return stem;
  return path;
}

bool isIndexed(const std::string &path) {
  return !path.empty() && !path.ends_with(".npy") && std::filesystem::exists(path + ".idx");
}

/// --data-path [W1] PREFIX1 [W2 PREFIX2 ...] (Megatron's) into c.blend.
std::string parseBlend(const std::vector<std::string> &values, TrainConfig &c) {
  if (values.size() != 1 && values.size() % 2 != 0)
    return "--data-path: " + std::to_string(values.size()) +
           " values; give one PREFIX or pairs of WEIGHT PREFIX (e.g. --data-path 0.7 A 0.3 B)";
  std::string missing;
  for (size_t i = 0; i < values.size(); i += values.size() == 1 ? 1 : 2) {
    double weight = 1;
    std::string prefix = values[i];
    if (values.size() > 1) {
      std::optional<double> w = parseNumber(values[i]);
      if (!w || !(*w > 0))
        return "--data-path: weight '" + values[i] + "' (of " + values[i + 1] +
               ") is not a number > 0";
      weight = *w;
      prefix = values[i + 1];
    }
    prefix = datasetPrefix(prefix);
    if (prefix.ends_with(".npy"))
      return "--data-path: " + prefix +
             " is a .npy file; a blend takes indexed datasets (PREFIX of PREFIX.bin/.idx); give "
             ".npy rows with --data";
    for (const char *ext : {".idx", ".bin"})
      if (!std::filesystem::exists(prefix + ext))
        missing += (missing.empty() ? "" : ", ") + prefix + ext;
    c.blend.push_back({weight, prefix});
    c.dataPath += (c.dataPath.empty() ? "" : " ") +
                  (values.size() > 1 ? values[i] + " " : std::string()) + prefix;
  }
  if (!missing.empty())
    return "--data-path: " + missing + " not found (write each dataset with `megac data prep " +
           "INPUT -o PREFIX`)";
  c.indexedData = true;
  return {};
}

/// --split A,B,C into c.dataSplit (three weights).
std::string parseSplit(const std::string &text, TrainConfig &c) {
  std::vector<double> weights;
  double sum = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find(',', start);
    std::string part = text.substr(start, end == std::string::npos ? end : end - start);
    std::optional<double> w = parseNumber(part);
    if (!w || !(*w >= 0))
      return "--split: '" + text + "' is not up to three weights >= 0 (e.g. 949,50,1)";
    weights.push_back(*w);
    sum += *w;
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  if (weights.size() > 3 || !(sum > 0) || weights[0] <= 0)
    return "--split: '" + text +
           "' is not up to three weights >= 0 with a positive train "
           "weight (e.g. 949,50,1)";
  weights.resize(3, 0.0);
  c.dataSplit = weights;
  return {};
}

/// Samples whose tokens are checked when read: in [0, vocab), with a warning (once) when
/// masked-LM training's [MASK] token occurs in the data. Messages start with `what` (the
/// option, for evaluation parts) and name the dataset and window.
class CheckedSamples final : public data::SampleSource {
public:
  CheckedSamples(std::unique_ptr<data::SampleSource> inner, SampleChecks checks, std::string what)
      : inner_(std::move(inner)), checks_(checks), what_(std::move(what)) {}
  int64_t rowLength() const override { return inner_->rowLength(); }
  std::string describe(int64_t i) override { return inner_->describe(i); }
  Status read(int64_t i, std::span<int64_t> out) override {
    RETURN_IF_ERROR(inner_->read(i, out));
    for (size_t t = 0; t < out.size(); ++t) {
      if (out[t] < 0 || out[t] >= checks_.vocab)
        return Status::error(what_ + "token " + std::to_string(out[t]) + " at position " +
                             std::to_string(t) + " of " + inner_->describe(i) +
                             " is outside the model's vocabulary [0, " +
                             std::to_string(checks_.vocab) + ")");
      if (checks_.warn && checks_.maskToken && out[t] == *checks_.maskToken) {
        std::fprintf(stderr,
                     "megac train: warning: %s%s contains token %lld, which masked-LM training "
                     "uses as [MASK]\n",
                     what_.c_str(), inner_->describe(i).c_str(), (long long)out[t]);
        checks_.warn = false;
      }
    }
    return Status::ok();
  }

private:
  std::unique_ptr<data::SampleSource> inner_;
  SampleChecks checks_;
  std::string what_;
};

/// What errors about `part`'s samples start with: the option, for evaluation parts.
std::string partPrefix(const TrainConfig &c, DataPart part) {
  if (part == DataPart::validation)
    return c.evalData ? "--eval-data: " : "--split (validation part): ";
  return part == DataPart::test ? "--split (test part): " : "";
}

/// The file `part` reads: --eval-data's for validation when given, else --data's.
std::string partPath(const TrainConfig &c, DataPart part) {
  return part == DataPart::validation && c.evalData ? datasetPrefix(*c.evalData) : c.dataPath;
}

} // namespace

std::string parseDataArgs(const Args &args, TrainConfig &c) {
  std::vector<std::string> blend = args.getAll("data-path");
  if (args.get("data") && !blend.empty())
    return "give either --data or --data-path, not both";
  if (!args.get("data") && blend.empty() && !c.planOnly)
    return "missing --data TOKENS.npy | PREFIX (or --data-path [W1] PREFIX1 [W2 PREFIX2 ...])";
  if (!blend.empty()) {
    if (std::string e = parseBlend(blend, c); !e.empty())
      return e;
  } else {
    c.dataPath = datasetPrefix(args.get("data").value_or(""));
    c.indexedData = isIndexed(c.dataPath);
    if (c.indexedData)
      c.blend = {{1.0, c.dataPath}};
  }
  c.evalData = args.get("eval-data");
  for (std::string e : {countOption(args, "eval-interval", 1, c.evalInterval, false),
                        countOption(args, "eval-iters", 1, c.evalIters, false)})
    if (!e.empty())
      return e;
  if (std::optional<std::string> split = args.get("split")) {
    if (!c.indexedData)
      return "--split applies to an indexed dataset (--data PREFIX of PREFIX.bin/.idx)";
    if (std::string e = parseSplit(*split, c); !e.empty())
      return e;
  }
  bool validationSplit = c.dataSplit && (*c.dataSplit)[1] > 0;
  bool testSplit = c.dataSplit && (*c.dataSplit)[2] > 0;
  if (c.evalData && !args.get("eval-interval"))
    return "--eval-data needs --eval-interval N (validate every N steps)";
  if (!c.evalData && !validationSplit &&
      (args.get("eval-interval") || (args.get("eval-iters") && !testSplit)))
    return "--eval-interval and --eval-iters need --eval-data (the validation tokens) or a "
           "--split with a validation part (--eval-iters also applies to a test part)";
  if (std::string e = countOption(args, "seq", 1, c.dataSeq, false); !e.empty())
    return e;
  if (args.get("seq") && !c.indexedData)
    return "--seq applies to an indexed dataset (--data PREFIX of PREFIX.bin/.idx)";
  if (c.indexedData && !args.get("seq") && !c.spec)
    return "--data " + c.dataPath + " (an indexed dataset) with a model file needs --seq S";
  return {};
}

StatusOr<int64_t> trainingSequenceLength(const TrainConfig &c) {
  if (!c.indexedData) {
    ASSIGN_OR_RETURN(train::TokenData rows, train::readTokenData(c.dataPath));
    return rows.sequenceLength();
  }
  if (c.dataSeq > 0 || !c.spec)
    return c.dataSeq;
  models::ConfigResult parsed = models::parseModelSpec(*c.spec);
  if (!parsed.config)
    return Status::error("--model: " + parsed.error);
  return parsed.config->seq + (parsed.config->arch == models::Arch::t5 ? parsed.config->decSeq : 0);
}

StatusOr<std::unique_ptr<data::SampleSource>> openSamples(const TrainConfig &c, DataPart part) {
  // Sample numbers step * B + j are int64.
  if (c.split.globalBatch > 0 && c.schedule.totalSteps > INT64_MAX / c.split.globalBatch)
    return Status::error("--steps " + std::to_string(c.schedule.totalSteps) + " x " +
                         "--global-batch " + std::to_string(c.split.globalBatch) +
                         " samples is more than megac can count");
  bool evalFile = part == DataPart::validation && c.evalData;
  std::string what = partPrefix(c, part), path = partPath(c, part);
  if (evalFile ? path.ends_with(".npy") : !c.indexedData) {
    StatusOr<train::TokenData> rows = train::readTokenData(path);
    if (!rows.isOk())
      return Status::error(what + rows.status().message());
    return std::unique_ptr<data::SampleSource>(std::make_unique<train::TokenArraySamples>(
        std::make_shared<const train::TokenData>(std::move(rows).value())));
  }
  ASSIGN_OR_RETURN(int64_t seq, trainingSequenceLength(c));
  std::vector<std::pair<double, std::string>> blend =
      evalFile ? std::vector<std::pair<double, std::string>>{{1.0, path}} : c.blend;
  static const char *const kPartNames[] = {"train", "validation", "test"};
  std::vector<std::unique_ptr<data::SampleSource>> sources;
  std::vector<double> weights;
  for (const auto &[weight, prefix] : blend) {
    StatusOr<data::IndexedDataset> opened = data::IndexedDataset::open(prefix);
    if (!opened.isOk())
      return Status::error(what + opened.status().message());
    auto dataset = std::make_shared<const data::IndexedDataset>(std::move(opened).value());
    data::DocumentRange documents;
    std::string partName;
    if (c.dataSplit && !evalFile) {
      documents = data::splitDocuments(dataset->documentCount(), *c.dataSplit)[size_t(part)];
      partName = std::string(" (the ") + kPartNames[int(part)] + " part of --split)";
    }
    auto windows = data::WindowSamples::create(dataset, prefix, seq, c.seed, documents);
    if (!windows.isOk())
      return Status::error(what + prefix + partName + ": " + windows.status().message());
    sources.push_back(std::move(windows).value());
    weights.push_back(weight);
  }
  if (sources.size() == 1)
    return std::move(sources[0]);
  ASSIGN_OR_RETURN(std::unique_ptr<data::SampleSource> samples,
                   data::BlendedSamples::create(std::move(sources), weights));
  return samples;
}

StatusOr<std::unique_ptr<data::SampleSource>>
checkSamples(const TrainConfig &c, DataPart part, std::unique_ptr<data::SampleSource> samples,
             const SampleChecks &checks) {
  auto *array = dynamic_cast<train::TokenArraySamples *>(samples.get());
  if (!array) // read lazily: checked as read
    return std::unique_ptr<data::SampleSource>(
        std::make_unique<CheckedSamples>(std::move(samples), checks, partPrefix(c, part)));
  if (Status s = train::checkTokenRange(array->data(), checks.vocab); !s.isOk())
    return Status::error(partPrefix(c, part) + partPath(c, part) + ": " + s.message());
  if (checks.warn && checks.maskToken)
    for (int64_t token : array->data().tokens)
      if (token == *checks.maskToken) {
        std::fprintf(stderr,
                     "megac train: warning: the data contains token %lld, which masked-LM "
                     "training uses as [MASK]\n",
                     (long long)token);
        break;
      }
  return samples;
}

} // namespace megac::cli
