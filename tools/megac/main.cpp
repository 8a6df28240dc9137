// megac: the compiler driver. `megac <command> [options]`.
#include "tools/megac/Commands.h"
#include "tools/megac/Help.h"

#include <cstdio>
#include <cstring>
#include <initializer_list>

int main(int argc, char **argv) {
  using namespace megac::cli;
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "-h")) {
    std::fputs(kMainHelp, argc < 2 ? stderr : stdout);
    std::fputc('\n', argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  struct Command {
    const char *name;
    int (*run)(int, char **);
  };
  for (Command c : {Command{"import", importCommand},
                    {"describe", describeCommand},
                    {"compile", compileCommand},
                    {"run", runCommand},
                    {"train", trainCommand},
                    {"data", dataCommand},
                    {"plan", planCommand},
                    {"generate", generateCommand},
                    {"export", exportCommand},
                    {"calibrate", calibrateCommand}})
    if (!std::strcmp(argv[1], c.name))
      return c.run(argc, argv);
  std::fprintf(stderr, "megac: error: unknown command '%s'; run `megac help`\n", argv[1]);
  return 2;
}
