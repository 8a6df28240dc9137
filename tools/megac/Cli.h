// megac's command lines, on CLI11: every subcommand declares its flags here, so each gets the same
// --help layout (usage, description, the flags it takes), an "unknown option --x" error naming
// the flag, and numbers range-checked with one-line errors ("--steps: '0' is not an integer >=
// 1"). Errors print as "megac <command>: error: ..." and exit 2.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace megac::cli {

class Flags {
public:
  /// `command` names the subcommand in errors ("megac train"); `help` is --help's text (usage
  /// lines, a blank line, the description); the flags are listed after it.
  Flags(std::string command, std::string help);

  /// A value (--key VALUE or --key=VALUE); given twice, the last counts.
  Flags &text(const std::string &names, std::optional<std::string> &out, const char *value = "X");
  /// Every value of a flag given several times (--input a=x --input b=y).
  Flags &repeated(const std::string &names, std::vector<std::string> &out, const char *value = "X");
  /// Every argument up to the next flag (--data-path 0.7 A 0.3 B).
  Flags &values(const std::string &names, std::vector<std::string> &out, const char *value = "X");
  Flags &flag(const std::string &names, bool &out);
  /// An integer in [min, max] ("--steps: '0' is not an integer >= 1"; with a max: "is not an
  /// integer in 1..604800").
  Flags &count(const std::string &names, int64_t &out, int64_t min, const char *value = "N",
               int64_t max = std::numeric_limits<int64_t>::max());
  /// A finite number for which `valid` holds; else "--lr: 'x' is not <expected>".
  Flags &number(const std::string &names, double &out, std::function<bool(double)> valid,
                const std::string &expected, const char *value = "X");
  /// One of `choices` ("--recompute: 'x' is not none, selective or full").
  Flags &choice(const std::string &names, std::string &out,
                const std::vector<std::string> &choices);
  /// A flag that is refused with `message` (a layout not implemented yet).
  Flags &refuse(const std::string &names, const std::string &message);

  /// Parses argv[first..]. Returns the exit code to return now (0 after printing --help, 2 after
  /// printing an error), or nullopt to go on with the values set.
  std::optional<int> parse(int argc, char **argv, int first);
  /// Whether the flag (its long name, "--steps") was on the command line.
  bool given(const std::string &name) const;
  const std::vector<std::string> &positional() const { return positional_; }
  /// Prints "<command>: error: <message>" and returns 2: a bad command line.
  int usage(const std::string &message) const;
  const std::string &command() const { return command_; }

private:
  /// Records the first error of a value (reported after unknown flags, like a hand parser).
  void valueError(const std::string &name, const std::string &message);
  std::string helpText() const;

  std::string command_, help_;
  CLI::App app_;
  bool help_flag_ = false;
  std::string firstError_, refusal_;
  std::vector<std::string> positional_;
};

/// Prints "<command>: error: <message>" and returns `code` (1: the run failed).
int fail(const std::string &command, const std::string &message, int code = 1);

} // namespace megac::cli
