// The data options of `megac train` and the samples they name (TrainData.h).
#include "driver/TrainData.h"

#include "frontends/models/ModelConfig.h"
#include "runtime/data/IndexedDataset.h"
#include "runtime/train/TokenBatches.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

namespace megac::driver {

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
        checks_.warn(what_ + inner_->describe(i) + " contains token " + std::to_string(out[t]) +
                     ", which masked-LM training uses as [MASK]");
        checks_.warn = nullptr;
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
std::string partPrefix(const RunConfig &c, DataPart part) {
  if (part == DataPart::validation)
    return c.data.evalPath ? "--eval-data: " : "--split (validation part): ";
  return part == DataPart::test ? "--split (test part): " : "";
}

/// The file `part` reads: --eval-data's for validation when given, else --data's.
std::string partPath(const RunConfig &c, DataPart part) {
  return part == DataPart::validation && c.data.evalPath ? datasetPrefix(*c.data.evalPath)
                                                         : c.data.path;
}

} // namespace

std::optional<double> parseNumber(const std::string &text) {
  if (text.empty())
    return std::nullopt;
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (*end != 0 || !std::isfinite(value))
    return std::nullopt;
  return value;
}

void setDataPath(DataConfig &c, const std::string &path) {
  c.path = datasetPrefix(path);
  c.indexed = isIndexed(c.path);
  if (c.indexed)
    c.blend = {{1.0, c.path}};
}

Status setDataBlend(DataConfig &c, const std::vector<std::string> &values) {
  if (values.size() != 1 && values.size() % 2 != 0)
    return Status::error("--data-path: " + std::to_string(values.size()) +
                         " values; give one PREFIX or pairs of WEIGHT PREFIX (e.g. --data-path "
                         "0.7 A 0.3 B)");
  std::string missing;
  for (size_t i = 0; i < values.size(); i += values.size() == 1 ? 1 : 2) {
    double weight = 1;
    std::string prefix = values[i];
    if (values.size() > 1) {
      std::optional<double> w = parseNumber(values[i]);
      if (!w || !(*w > 0))
        return Status::error("--data-path: weight '" + values[i] + "' (of " + values[i + 1] +
                             ") is not a number > 0");
      weight = *w;
      prefix = values[i + 1];
    }
    prefix = datasetPrefix(prefix);
    if (prefix.ends_with(".npy"))
      return Status::error("--data-path: " + prefix +
                           " is a .npy file; a blend takes indexed datasets (PREFIX of "
                           "PREFIX.bin/.idx); give .npy rows with --data");
    for (const char *ext : {".idx", ".bin"})
      if (!std::filesystem::exists(prefix + ext))
        missing += (missing.empty() ? "" : ", ") + prefix + ext;
    c.blend.push_back({weight, prefix});
    c.path += (c.path.empty() ? "" : " ") + (values.size() > 1 ? values[i] + " " : std::string()) +
              prefix;
  }
  if (!missing.empty())
    return Status::error("--data-path: " + missing +
                         " not found (write each dataset with `megac data prep INPUT -o PREFIX`)");
  c.indexed = true;
  return Status::ok();
}

Status setDataSplit(DataConfig &c, const std::string &text) {
  std::vector<double> weights;
  double sum = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find(',', start);
    std::string part = text.substr(start, end == std::string::npos ? end : end - start);
    std::optional<double> w = parseNumber(part);
    if (!w || !(*w >= 0))
      return Status::error("--split: '" + text +
                           "' is not up to three weights >= 0 (e.g. 949,50,1)");
    weights.push_back(*w);
    sum += *w;
    if (end == std::string::npos)
      break;
    start = end + 1;
  }
  if (weights.size() > 3 || !(sum > 0) || weights[0] <= 0)
    return Status::error("--split: '" + text +
                         "' is not up to three weights >= 0 with a positive train weight (e.g. "
                         "949,50,1)");
  weights.resize(3, 0.0);
  c.split = weights;
  return Status::ok();
}

StatusOr<int64_t> trainingSequenceLength(const RunConfig &c) {
  if (!c.data.indexed) {
    ASSIGN_OR_RETURN(train::TokenData rows, train::readTokenData(c.data.path));
    return rows.sequenceLength();
  }
  const models::ModelConfig *config = c.model.config();
  if (c.data.seq > 0 || !config)
    return c.data.seq;
  if (config->seq == 0) // hf:PATH without seq=
    return Status::error("--data " + c.data.path + " (an indexed dataset) with --model " +
                         c.model.text() + " needs --seq S or hf:PATH,seq=S");
  return config->seq + (config->arch == models::Arch::t5 ? config->decSeq : 0);
}

StatusOr<std::unique_ptr<data::SampleSource>> openSamples(const RunConfig &c, DataPart part) {
  // Sample numbers step * B + j are int64.
  if (c.data.batch.globalBatch > 0 && c.lr.totalSteps > INT64_MAX / c.data.batch.globalBatch)
    return Status::error("--steps " + std::to_string(c.lr.totalSteps) + " x " + "--global-batch " +
                         std::to_string(c.data.batch.globalBatch) +
                         " samples is more than megac can count");
  bool evalFile = part == DataPart::validation && c.data.evalPath;
  std::string what = partPrefix(c, part), path = partPath(c, part);
  if (evalFile ? path.ends_with(".npy") : !c.data.indexed) {
    StatusOr<train::TokenData> rows = train::readTokenData(path);
    if (!rows.isOk())
      return Status::error(what + rows.status().message());
    return std::unique_ptr<data::SampleSource>(std::make_unique<train::TokenArraySamples>(
        std::make_shared<const train::TokenData>(std::move(rows).value())));
  }
  ASSIGN_OR_RETURN(int64_t seq, trainingSequenceLength(c));
  std::vector<std::pair<double, std::string>> blend =
      evalFile ? std::vector<std::pair<double, std::string>>{{1.0, path}} : c.data.blend;
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
    if (c.data.split && !evalFile) {
      documents = data::splitDocuments(dataset->documentCount(), *c.data.split)[size_t(part)];
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
checkSamples(const RunConfig &c, DataPart part, std::unique_ptr<data::SampleSource> samples,
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
        checks.warn("the data contains token " + std::to_string(token) +
                    ", which masked-LM training uses as [MASK]");
        break;
      }
  return samples;
}

} // namespace megac::driver
