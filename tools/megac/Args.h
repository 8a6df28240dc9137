// A small command-line parser for megac's subcommands: --key value, --key=value, flags, files.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace megac::cli {

class Args {
public:
  /// Parses argv[first..]; `valued` options take a value, `flags` don't, `lists` take every
  /// argument up to the next --option (`--data-path 0.7 A 0.3 B`; getAll returns them). Returns
  /// an error message ("unknown option --x") or empty.
  std::string parse(int argc, char **argv, int first, const std::set<std::string> &valued,
                    const std::set<std::string> &flags, const std::set<std::string> &lists = {});
  /// The last value of a valued option.
  std::optional<std::string> get(const std::string &name) const;
  /// Every value of a valued option given more than once (`--input a=x --input b=y`).
  std::vector<std::string> getAll(const std::string &name) const;
  bool has(const std::string &name) const;
  const std::vector<std::string> &positional() const { return positional_; }

private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> allValues_;
  std::set<std::string> flags_;
  std::vector<std::string> positional_;
};

} // namespace megac::cli
