// TensorBoard event files: TFRecord framing with Boost.CRC's CRC-32C, Event protos from
// tensorboard.proto (protoc, lite runtime).
#include "runtime/train/TensorBoardWriter.h"

#include "runtime/train/tensorboard.pb.h"

#include <boost/crc.hpp>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <unistd.h>

namespace megac::runtime::train {

namespace {

void appendLittleEndian(std::string &out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

double wallTime() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string hostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0')
    return "localhost";
  return name;
}

} // namespace

uint32_t crc32c(std::string_view bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

uint32_t maskedCrc32c(std::string_view bytes) {
  uint32_t crc = crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfRecord(std::string_view data) {
  std::string record;
  record.reserve(data.size() + 16);
  appendLittleEndian(record, data.size(), 8);
  appendLittleEndian(record, maskedCrc32c(record), 4);
  record.append(data);
  appendLittleEndian(record, maskedCrc32c(data), 4);
  return record;
}

std::vector<Scalar> stepScalars(const StepRecord &r) {
  std::vector<Scalar> scalars = {{"train/loss", r.loss},
                                 {"train/lr", r.lr},
                                 {"train/grad_norm", r.gradNorm},
                                 {"train/loss_scale", r.lossScale},
                                 {"train/skipped", r.skipped ? 1.0 : 0.0},
                                 {"train/tokens", double(r.tokens)},
                                 {"train/tokens_per_s", r.tokensPerSecond()},
                                 {"train/step_time_s", r.stepSeconds}};
  if (r.flopsPerToken > 0)
    scalars.push_back({"train/model_tflops_per_rank", r.modelTflopsPerRank()});
  if (r.flopsPerToken > 0 && r.peakFlopsPerRank > 0)
    scalars.push_back({"train/mfu", r.mfu()});
  if (r.memPlanBytes > 0)
    scalars.push_back({"train/mem_plan_bytes", double(r.memPlanBytes)});
  if (r.memRssPeakBytes > 0)
    scalars.push_back({"train/mem_rss_peak_bytes", double(r.memRssPeakBytes)});
  if (r.moe) {
    scalars.push_back({"train/moe_aux_loss", r.moe->auxLoss});
    scalars.push_back({"train/moe_dropped", r.moe->dropped});
    for (size_t l = 0; l < r.moe->load.size(); ++l)
      for (size_t e = 0; e < r.moe->load[l].size(); ++e)
        scalars.push_back(
            {"train/moe_load/layer" + std::to_string(l) + "/expert" + std::to_string(e),
             r.moe->load[l][e]});
  }
  return scalars;
}

std::vector<Scalar> evalScalars(const std::string &part, double loss) {
  return {{part + "/loss", loss}, {part + "/perplexity", std::exp(loss)}};
}

std::string fileVersionEvent(double wallTime) {
  megac::tensorboard::Event event;
  event.set_wall_time(wallTime);
  event.set_file_version("brain.Event:2");
  return event.SerializeAsString();
}

std::string scalarEvent(double wallTime, int64_t step, const Scalar &scalar) {
  megac::tensorboard::Event event;
  event.set_wall_time(wallTime);
  event.set_step(step);
  megac::tensorboard::Summary::Value *value = event.mutable_summary()->add_value();
  value->set_tag(scalar.tag);
  value->set_simple_value(static_cast<float>(scalar.value));
  return event.SerializeAsString();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_)
    std::fclose(file_);
}

Status TensorBoardWriter::open(const std::string &dir) {
  if (file_)
    return Status::error("TensorBoard event file " + path_ + " is open already");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    return Status::error("cannot create the TensorBoard directory " + dir + ": " +
                         (ec ? ec.message() : std::string("a file of that name is in the way")));
  double now = wallTime();
  std::string base = (std::filesystem::path(dir) / "events.out.tfevents.").string() +
                     std::to_string(static_cast<long long>(now)) + "." + hostName();
  // "x": never truncate another run's file; two runs started in the same second get .1, .2, ...
  for (int n = 0; n < 1000 && !file_; ++n) {
    path_ = n == 0 ? base : base + "." + std::to_string(n);
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_ && errno != EEXIST)
      return Status::error("cannot create TensorBoard event file " + path_ + ": " +
                           std::strerror(errno));
  }
  if (!file_)
    return Status::error("cannot create a TensorBoard event file in " + dir + ": " + base +
                         " and 999 numbered variants exist (remove old event files)");
  return append(tfRecord(fileVersionEvent(now)));
}

Status TensorBoardWriter::write(int64_t step, const std::vector<Scalar> &scalars) {
  if (!file_)
    return Status::error("the TensorBoard event file is not open");
  double now = wallTime();
  std::string records;
  for (const Scalar &scalar : scalars)
    records += tfRecord(scalarEvent(now, step, scalar));
  return append(records);
}

Status TensorBoardWriter::append(const std::string &records) {
  if (std::fwrite(records.data(), 1, records.size(), file_) != records.size() ||
      std::fflush(file_) != 0)
    return Status::error("cannot write TensorBoard event file " + path_ + ": " +
                         std::strerror(errno));
  return Status::ok();
}

Status TensorBoardWriter::close() {
  if (!file_)
    return Status::ok();
  int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0)
    return Status::error("cannot close TensorBoard event file " + path_ + ": " +
                         std::strerror(errno));
  return Status::ok();
}

} // namespace megac::runtime::train
