// The save folder (runtime/checkpoint/SaveFolder.h): the lock refuses a live holder by host and
// pid, takes over a stale one, survives only its owner; retention keeps the newest and listed
// steps and removes what failed saves left; temporary names are unique to the process.
#include "runtime/checkpoint/SaveFolder.h"
#include "runtime/checkpoint/Checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

using namespace megac;
namespace ckpt = megac::runtime::checkpoint;
namespace fs = std::filesystem;

namespace {

class SaveFolderTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("megac-save-folder-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string lockPath() const { return dir_ + "/" + ckpt::kLockFile; }
  void write(const std::string &path, const std::string &text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }
  std::string read(const std::string &path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  static std::string host() {
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    return name;
  }
  /// A pid no process has now: a child that has exited and been reaped.
  static pid_t deadPid() {
    pid_t child = fork();
    if (child == 0)
      _exit(0);
    int status = 0;
    waitpid(child, &status, 0);
    return child;
  }
  std::string dir_;
};

TEST_F(SaveFolderTest, SecondWriterRefusedNamingHostAndPid) {
  auto first = ckpt::SaveFolderLock::acquire(dir_);
  ASSERT_TRUE(first.isOk()) << first.status().message();
  EXPECT_NE(read(lockPath()).find("\"pid\": " + std::to_string(getpid())), std::string::npos);
  auto second = ckpt::SaveFolderLock::acquire(dir_);
  ASSERT_FALSE(second.isOk());
  const std::string &m = second.status().message();
  EXPECT_NE(m.find("another run is saving into '" + dir_ + "'"), std::string::npos) << m;
  EXPECT_NE(m.find("host " + host() + ", pid " + std::to_string(getpid())), std::string::npos) << m;
  // The refused attempt left the holder's lock in place; releasing it frees the folder.
  EXPECT_TRUE(fs::exists(lockPath()));
  first->reset();
  EXPECT_FALSE(fs::exists(lockPath()));
  EXPECT_TRUE(ckpt::SaveFolderLock::acquire(dir_).isOk());
}

TEST_F(SaveFolderTest, StaleLockOfAGoneProcessIsTakenOver) {
  pid_t gone = deadPid();
  write(lockPath(), "{\"host\": \"" + host() + "\", \"pid\": " + std::to_string(gone) +
                        ", \"start_ticks\": 1, \"since\": \"2026-01-01T00:00:00Z\"}\n");
  std::string tookOver;
  auto lock = ckpt::SaveFolderLock::acquire(dir_, &tookOver);
  ASSERT_TRUE(lock.isOk()) << lock.status().message();
  EXPECT_NE(tookOver.find("took over the stale save folder lock"), std::string::npos) << tookOver;
  EXPECT_NE(tookOver.find("pid " + std::to_string(gone)), std::string::npos) << tookOver;
  EXPECT_NE(read(lockPath()).find("\"pid\": " + std::to_string(getpid())), std::string::npos);
}

TEST_F(SaveFolderTest, KilledButUnreapedHolderIsStale) {
  // A zombie: the child has ended, its parent (this test) has not reaped it yet.
  pid_t child = fork();
  if (child == 0)
    _exit(0);
  usleep(200 * 1000);
  write(lockPath(), "{\"host\": \"" + host() + "\", \"pid\": " + std::to_string(child) + "}\n");
  std::string tookOver;
  auto lock = ckpt::SaveFolderLock::acquire(dir_, &tookOver);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(lock.isOk()) << lock.status().message();
  EXPECT_NE(tookOver.find("pid " + std::to_string(child)), std::string::npos) << tookOver;
}

TEST_F(SaveFolderTest, ReusedPidIsStale) {
  // This very pid, but a process started at another time: the holder is gone.
  write(lockPath(), "{\"host\": \"" + host() + "\", \"pid\": " + std::to_string(getpid()) +
                        ", \"start_ticks\": 1}\n");
  std::string tookOver;
  auto lock = ckpt::SaveFolderLock::acquire(dir_, &tookOver);
  ASSERT_TRUE(lock.isOk()) << lock.status().message();
  EXPECT_FALSE(tookOver.empty());
}

TEST_F(SaveFolderTest, HolderOnAnotherHostIsNotGuessed) {
  write(lockPath(), "{\"host\": \"elsewhere-node-7\", \"pid\": 4242}\n");
  auto lock = ckpt::SaveFolderLock::acquire(dir_);
  ASSERT_FALSE(lock.isOk());
  const std::string &m = lock.status().message();
  EXPECT_NE(m.find("host elsewhere-node-7, pid 4242"), std::string::npos) << m;
  EXPECT_NE(m.find("remove " + lockPath() + " once it has ended"), std::string::npos) << m;
}

TEST_F(SaveFolderTest, ForeignLockFileRefused) {
  write(lockPath(), "not json");
  auto lock = ckpt::SaveFolderLock::acquire(dir_);
  ASSERT_FALSE(lock.isOk());
  EXPECT_NE(lock.status().message().find("is not a megac lock"), std::string::npos);
}

TEST_F(SaveFolderTest, ReleaseLeavesAnotherOwnersLock) {
  auto lock = ckpt::SaveFolderLock::acquire(dir_);
  ASSERT_TRUE(lock.isOk());
  std::string other = "{\"host\": \"x\", \"pid\": 1}\n";
  write(lockPath(), other); // taken over meanwhile (our lock looked stale to someone)
  lock->reset();
  EXPECT_EQ(read(lockPath()), other);
}

TEST_F(SaveFolderTest, TemporaryNamesAreThisProcesss) {
  std::string suffix = ckpt::tempSuffix();
  EXPECT_EQ(suffix, ".tmp-" + host() + "-" + std::to_string(getpid()));
  auto tmp = ckpt::beginSave(dir_, 3);
  ASSERT_TRUE(tmp.isOk()) << tmp.status().message();
  EXPECT_EQ(*tmp, ckpt::stepPath(dir_, 3) + suffix);
  EXPECT_TRUE(fs::is_directory(*tmp));
}

TEST_F(SaveFolderTest, RetentionKeepsNewestAndListedStepsAndRemovesFailedSaves) {
  for (int step = 1; step <= 6; ++step)
    write(ckpt::stepPath(dir_, step) + "/meta.json", "{}");
  write(dir_ + "/latest", "6\n");
  // What failed saves of this and older megac versions leave, and a step folder without
  // meta.json (incomplete, not a temporary: kept).
  write(dir_ + "/step-7.tmp/model-rank-00000.safetensors", "x");
  write(dir_ + "/step-4.tmp-otherhost-99/meta.json", "{}");
  write(dir_ + "/latest.tmp-otherhost-99", "4\n");
  write(dir_ + "/step-9/model-rank-00000.safetensors", "x");
  auto removed = ckpt::pruneSaveFolder(dir_, {2, {1, 3}});
  ASSERT_TRUE(removed.isOk()) << removed.status().message();
  std::vector<std::string> left;
  for (const auto &e : fs::directory_iterator(dir_))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left,
            (std::vector<std::string>{"latest", "step-1", "step-3", "step-5", "step-6", "step-9"}));
  EXPECT_EQ(removed->size(), 5u);
  // keepLast 0 keeps every complete step; temporaries still go.
  write(dir_ + "/step-2.tmp", "");
  removed = ckpt::pruneSaveFolder(dir_, {});
  ASSERT_TRUE(removed.isOk());
  EXPECT_EQ(*removed, (std::vector<std::string>{dir_ + "/step-2.tmp"}));
}

} // namespace
