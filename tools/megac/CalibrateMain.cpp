// megac-calibrate: `megac calibrate` in a binary without the compiler (no MLIR, no MPI), for
// machines that only run plans. `megac-calibrate ARGS` is `megac calibrate ARGS` with one rank.
#include <string>
#include <vector>

namespace megac::cli {
int calibrateCommand(int argc, char **argv); // tools/megac/CalibrateCommand.cpp
}

int main(int argc, char **argv) {
  std::string command = "calibrate";
  std::vector<char *> args = {argv[0], command.data()};
  for (int i = 1; i < argc; ++i)
    args.push_back(argv[i]);
  args.push_back(nullptr);
  return megac::cli::calibrateCommand(int(args.size()) - 1, args.data());
}
