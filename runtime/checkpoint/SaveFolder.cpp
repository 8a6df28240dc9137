// The save folder's lock, temporary names and retention (SaveFolder.h).
#include "runtime/checkpoint/SaveFolder.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "support/Files.h"
#include "support/Json.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace megac::runtime::checkpoint {

namespace fs = std::filesystem;

namespace {

std::string hostName() {
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) != 0)
    return "unknown-host";
  return name;
}

/// Fields 3 (state) and 22 (start time, in clock ticks since boot: tells a reused pid from the
/// holder) of /proc/PID/stat; {"", -1} when unknown.
std::pair<std::string, int64_t> procStat(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t close = text.rfind(')'); // the command name may hold spaces and parentheses
  if (close == std::string::npos)
    return {"", -1};
  std::istringstream fields(text.substr(close + 1));
  std::string field, state;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3)
      state = field;
    if (i == 22)
      return {state, std::atoll(field.c_str())};
  }
  return {state, -1};
}

int64_t startTicks(int64_t pid) { return procStat(pid).second; }

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

struct Holder {
  std::string host, since;
  int64_t pid = 0, ticks = -1;
  std::string describe() const {
    return "host " + host + ", pid " + std::to_string(pid) +
           (since.empty() ? "" : ", since " + since);
  }
};

std::string lockContent() {
  int64_t pid = getpid();
  return "{\"host\": " + json::quote(hostName()) + ", \"pid\": " + std::to_string(pid) +
         ", \"start_ticks\": " + std::to_string(startTicks(pid)) +
         ", \"since\": " + json::quote(utcNow()) + "}\n";
}

StatusOr<Holder> readHolder(const std::string &path) {
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "save folder lock"));
  StatusOr<json::Value> v =
      json::parse(std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()));
  const json::Value *host = v.isOk() ? v->find("host") : nullptr;
  const json::Value *pid = v.isOk() ? v->find("pid") : nullptr;
  if (!host || host->kind != json::Value::Kind::string || !pid || !pid->isInteger)
    return Status::error("the save folder lock '" + path +
                         "' is not a megac lock (no host and pid); remove it if no run is saving "
                         "there");
  Holder h{host->string, "", pid->integer, -1};
  if (const json::Value *since = v->find("since");
      since && since->kind == json::Value::Kind::string)
    h.since = since->string;
  if (const json::Value *ticks = v->find("start_ticks"); ticks && ticks->isInteger)
    h.ticks = ticks->integer;
  return h;
}

/// Whether the holder has gone: on this host, no process with its pid, a zombie (killed, not
/// yet reaped by its parent), or one started at another time (the pid was reused).
bool holderGoneNow(const Holder &h) {
  if (::kill(pid_t(h.pid), 0) != 0 && errno == ESRCH)
    return true;
  auto [state, ticks] = procStat(h.pid);
  return state == "Z" || state == "X" || (h.ticks >= 0 && ticks >= 0 && ticks != h.ticks);
}

/// holderGoneNow, waiting up to 3 s for a holder that is being killed (a job stopped and
/// started again at once: its ranks may take a moment to end).
bool holderGone(const Holder &h) {
  if (h.host != hostName() || h.pid <= 0)
    return false;
  for (int i = 0; i < 30; ++i) {
    if (holderGoneNow(h))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

Status writeNew(const std::string &path, const std::string &content, bool &exists) {
  exists = false;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    exists = errno == EEXIST;
    return exists ? Status::ok()
                  : Status::error("cannot create the save folder lock '" + path +
                                  "': " + std::strerror(errno));
  }
  ssize_t n = ::write(fd, content.data(), content.size());
  std::string why = n < 0                          ? std::strerror(errno)
                    : n != ssize_t(content.size()) ? "a short write"
                                                   : "";
  if (why.empty() && ::fsync(fd) != 0)
    why = std::strerror(errno);
  if (::close(fd) != 0 && why.empty())
    why = std::strerror(errno);
  if (!why.empty()) {
    ::unlink(path.c_str());
    return Status::error("cannot write the save folder lock '" + path + "': " + why);
  }
  return Status::ok();
}

/// The step of "step-N" followed by `rest` ("" or a temporary suffix), else -1.
int64_t stepOf(const std::string &name, std::string *rest) {
  if (!name.starts_with("step-"))
    return -1;
  size_t end = name.find_first_not_of("0123456789", 5);
  if (end == 5 || (end == std::string::npos ? name.size() : end) - 5 > 18)
    return -1;
  *rest = end == std::string::npos ? "" : name.substr(end);
  return std::atoll(name.c_str() + 5);
}

} // namespace

std::string tempSuffix() { return ".tmp-" + hostName() + "-" + std::to_string(getpid()); }

StatusOr<std::unique_ptr<SaveFolderLock>> SaveFolderLock::acquire(const std::string &dir,
                                                                  std::string *tookOver) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return Status::error("cannot create checkpoint directory '" + dir + "': " + ec.message());
  std::string path = dir + "/" + kLockFile, content = lockContent();
  bool exists = false;
  RETURN_IF_ERROR(writeNew(path, content, exists));
  if (!exists)
    return std::unique_ptr<SaveFolderLock>(new SaveFolderLock(path, content));
  ASSIGN_OR_RETURN(Holder holder, readHolder(path));
  if (!holderGone(holder)) {
    bool here = holder.host == hostName();
    return Status::error(
        "another run is saving into '" + dir + "' (" + holder.describe() + ", " + path + ")" +
        (here ? "; give this run another --save DIR, or stop that one first"
              : "; it runs on another host, so megac cannot tell whether it still runs: remove " +
                    path + " once it has ended"));
  }
  // Stale: replace it atomically with ours, then check that no other run replaced it too.
  std::string mine = path + tempSuffix();
  std::span<const uint8_t> piece(reinterpret_cast<const uint8_t *>(content.data()), content.size());
  RETURN_IF_ERROR(writeFileAtomically(mine, {&piece, 1}, tempSuffix()));
  if (::rename(mine.c_str(), path.c_str()) != 0) {
    ::unlink(mine.c_str());
    return Status::error("cannot take over the save folder lock '" + path +
                         "': " + std::strerror(errno));
  }
  StatusOr<std::vector<uint8_t>> now = readFileBytes(path, "save folder lock");
  if (!now.isOk() || std::string(now->begin(), now->end()) != content)
    return Status::error("another run took over the stale save folder lock '" + path +
                         "' at the same time");
  if (tookOver)
    *tookOver = "took over the stale save folder lock " + path + " (" + holder.describe() +
                ": that process has ended)";
  return std::unique_ptr<SaveFolderLock>(new SaveFolderLock(path, content));
}

SaveFolderLock::~SaveFolderLock() {
  StatusOr<std::vector<uint8_t>> now = readFileBytes(path_, "save folder lock");
  if (now.isOk() && std::string(now->begin(), now->end()) == content_)
    ::unlink(path_.c_str());
}

StatusOr<std::vector<std::string>> pruneSaveFolder(const std::string &dir,
                                                   const Retention &retention) {
  std::vector<std::string> doomed;
  std::error_code ec;
  for (const fs::directory_entry &e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string(), rest;
    bool tempStep = stepOf(name, &rest) >= 0 && rest.starts_with(".tmp");
    if (tempStep || name.starts_with("latest.tmp") ||
        (name.starts_with(std::string(kLockFile) + ".tmp")))
      doomed.push_back(e.path().string());
  }
  if (ec)
    return Status::error("cannot list checkpoint directory '" + dir + "': " + ec.message());
  if (retention.keepLast > 0) {
    std::set<int64_t> keep(retention.keepSteps.begin(), retention.keepSteps.end());
    std::vector<int64_t> steps = listCheckpointSteps(dir); // newest first
    for (size_t i = 0; i < steps.size(); ++i)
      if (int64_t(i) >= retention.keepLast && !keep.count(steps[i]))
        doomed.push_back(stepPath(dir, steps[i]));
  }
  std::sort(doomed.begin(), doomed.end());
  for (const std::string &path : doomed) {
    fs::remove_all(path, ec);
    if (ec)
      return Status::error("cannot remove '" + path + "': " + ec.message());
  }
  return doomed;
}

} // namespace megac::runtime::checkpoint
