// megac's subcommands. Each returns the process exit code; errors go to stderr in one line.
#pragma once

namespace megac::cli {

int importCommand(int argc, char **argv);
int describeCommand(int argc, char **argv);
int compileCommand(int argc, char **argv);
int runCommand(int argc, char **argv);
int trainCommand(int argc, char **argv);

} // namespace megac::cli
