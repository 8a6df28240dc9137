// A small command-line parser for megac's subcommands.
#include "tools/megac/Args.h"

namespace megac::cli {

std::string Args::parse(int argc, char **argv, int first, const std::set<std::string> &valued,
                        const std::set<std::string> &flags, const std::set<std::string> &lists) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 && !(arg.size() == 2 && arg[0] == '-' && arg[1] != '-')) {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1), value;
    bool inlineValue = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inlineValue = true;
    }
    if (flags.count(name)) {
      if (inlineValue)
        return "option --" + name + " takes no value";
      flags_.insert(name);
    } else if (lists.count(name)) {
      if (inlineValue)
        allValues_[name].push_back(value);
      for (; i + 1 < argc && std::string(argv[i + 1]).rfind("--", 0) != 0; ++i)
        allValues_[name].push_back(argv[i + 1]);
      if (allValues_[name].empty())
        return "option --" + name + " needs a value";
      values_[name] = allValues_[name].back();
    } else if (valued.count(name)) {
      if (!inlineValue) {
        if (i + 1 >= argc)
          return "option --" + name + " needs a value";
        value = argv[++i];
      }
      values_[name] = value;
      allValues_[name].push_back(value);
    } else {
      return "unknown option " + arg;
    }
  }
  return {};
}

std::optional<std::string> Args::get(const std::string &name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::getAll(const std::string &name) const {
  auto it = allValues_.find(name);
  return it == allValues_.end() ? std::vector<std::string>{} : it->second;
}

bool Args::has(const std::string &name) const { return flags_.count(name) || values_.count(name); }

} // namespace megac::cli
