// `--ranks N` outside an MPI launch: megac starts `mpirun -np N <itself> <same arguments>` as a
// child, waits for it and returns its exit code (RunFlags.h). A SIGTERM or SIGINT the launcher
// receives reaches the ranks as SIGUSR2 (sent to mpirun, which forwards SIGUSR1/SIGUSR2
// untouched; a SIGTERM it forwarded itself would be followed by SIGKILL about a second later),
// so a scheduler's SIGTERM lets them agree to save and stop (runtime/train/StopRequest.h).
#include "tools/megac/RunFlags.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace megac::cli {

namespace {

volatile std::sig_atomic_t gMpirun = 0; // the child's pid once it runs

extern "C" void forwardToMpirun(int signal) {
  pid_t child = pid_t(gMpirun);
  if (child > 0)
    ::kill(child, signal == SIGTERM || signal == SIGINT ? SIGUSR2 : signal);
}

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

/// mpirun's command line: this executable and its arguments under `mpirun -np N`.
std::vector<std::string> mpirunLine(int argc, char **argv, int64_t ranks, bool oversubscribe,
                                    int64_t threads) {
  std::vector<std::string> line = {"mpirun"};
  if (geteuid() == 0)
    line.push_back("--allow-run-as-root");
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (oversubscribe || ranks > int64_t(cores))
    line.push_back("--oversubscribe");
  if (threads == 0)
    threads = std::max<int64_t>(1, int64_t(cores) / std::max<int64_t>(1, ranks));
  if (threads > 1)
    line.insert(line.end(), {"--bind-to", "none"});
  line.insert(line.end(), {"-np", std::to_string(ranks)});
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  // A binary replaced on disk since it started (a rebuild) reads "PATH (deleted)": the ranks run
  // what is at PATH now.
  if (const std::string deleted = " (deleted)"; self.ends_with(deleted))
    self.resize(self.size() - deleted.size());
  line.push_back(ec ? std::string(argv[0]) : self);
  for (int i = 1; i < argc; ++i)
    line.push_back(argv[i]);
  return line;
}

} // namespace

int relaunchUnderMpirun(int argc, char **argv, const std::string &command, int64_t ranks,
                        bool oversubscribe, int64_t threads) {
  std::vector<std::string> line = mpirunLine(argc, argv, ranks, oversubscribe, threads);
  std::vector<char *> args;
  for (std::string &arg : line)
    args.push_back(arg.data());
  args.push_back(nullptr);
  setenv("MEGAC_TRAIN_STDOUT_IS_TTY", isatty(fileno(stdout)) ? "1" : "0", 1);
  std::fflush(stdout);
  std::fflush(stderr);
  auto cannotStart = [&](int error) {
    return fail(command, "--ranks " + std::to_string(ranks) +
                             " runs the job under mpirun, which cannot be started (" +
                             std::strerror(error) + "); install Open MPI (Debian: openmpi-bin)");
  };
  // exec's errno comes back through a close-on-exec pipe (nothing arrives when exec works).
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0)
    return cannotStart(errno);
  // The forwarded signals wait until the child's pid is known.
  sigset_t forwarded, before;
  sigemptyset(&forwarded);
  for (int signal : kForwarded)
    sigaddset(&forwarded, signal);
  sigprocmask(SIG_BLOCK, &forwarded, &before);
  pid_t child = ::fork();
  if (child == 0) {
    sigprocmask(SIG_SETMASK, &before, nullptr);
    ::close(pipeFds[0]);
    execvp("mpirun", args.data());
    int error = errno;
    (void)!::write(pipeFds[1], &error, sizeof error);
    _exit(127);
  }
  int forkError = errno;
  ::close(pipeFds[1]);
  if (child < 0) {
    sigprocmask(SIG_SETMASK, &before, nullptr);
    ::close(pipeFds[0]);
    return cannotStart(forkError);
  }
  gMpirun = child;
  for (int signal : kForwarded) {
    struct sigaction action;
    std::memset(&action, 0, sizeof action);
    action.sa_handler = forwardToMpirun;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(signal, &action, nullptr);
  }
  sigprocmask(SIG_SETMASK, &before, nullptr);
  int execError = 0;
  ssize_t n;
  do
    n = ::read(pipeFds[0], &execError, sizeof execError);
  while (n < 0 && errno == EINTR);
  ::close(pipeFds[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  gMpirun = 0;
  if (n == ssize_t(sizeof execError))
    return cannotStart(execError);
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

} // namespace megac::cli
