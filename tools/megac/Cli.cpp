// megac's command lines on CLI11 (Cli.h).
#include "tools/megac/Cli.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace megac::cli {

namespace {

/// A non-negative decimal integer below 2^63, or nullopt.
std::optional<int64_t> parseCount(const std::string &text) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (value > uint64_t(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return int64_t(value);
}

/// The long name of "-o,--output": "--output"; of "-o": "-o".
std::string longName(const std::string &names) {
  size_t comma = names.rfind(',');
  return comma == std::string::npos ? names : names.substr(comma + 1);
}

} // namespace

Flags::Flags(std::string command, std::string help)
    : command_(std::move(command)), help_(std::move(help)) {
  app_.set_help_flag();
  app_.allow_extras();
  app_.add_flag("-h,--help", help_flag_);
}

Flags &Flags::text(const std::string &names, std::optional<std::string> &out, const char *value) {
  app_.add_option_function<std::string>(names, [&out](const std::string &v) { out = v; })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(value);
  return *this;
}

Flags &Flags::repeated(const std::string &names, std::vector<std::string> &out, const char *value) {
  app_.add_option(names, out)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll)
      ->type_name(value);
  return *this;
}

Flags &Flags::values(const std::string &names, std::vector<std::string> &out, const char *value) {
  app_.add_option(names, out)->expected(1, -1)->type_name(value);
  return *this;
}

Flags &Flags::flag(const std::string &names, bool &out) {
  app_.add_flag(names, out);
  return *this;
}

void Flags::valueError(const std::string &name, const std::string &message) {
  if (firstError_.empty())
    firstError_ = name + ": " + message;
}

Flags &Flags::count(const std::string &names, int64_t &out, int64_t min, const char *value,
                    int64_t max) {
  std::string name = longName(names);
  app_.add_option_function<std::string>(
          names,
          [this, &out, min, max, name](const std::string &v) {
            std::optional<int64_t> n = parseCount(v);
            if (!n || *n < min || *n > max)
              return valueError(
                  name, "'" + v + "' is not an integer " +
                            (max == std::numeric_limits<int64_t>::max()
                                 ? ">= " + std::to_string(min)
                                 : "in " + std::to_string(min) + ".." + std::to_string(max)));
            out = *n;
          })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(value);
  return *this;
}

Flags &Flags::number(const std::string &names, double &out, std::function<bool(double)> valid,
                     const std::string &expected, const char *value) {
  std::string name = longName(names);
  app_.add_option_function<std::string>(names,
                                        [this, &out, valid, expected, name](const std::string &v) {
                                          char *end = nullptr;
                                          double x = std::strtod(v.c_str(), &end);
                                          if (v.empty() || *end || !std::isfinite(x) || !valid(x))
                                            return valueError(name,
                                                              "'" + v + "' is not " + expected);
                                          out = x;
                                        })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(value);
  return *this;
}

Flags &Flags::choice(const std::string &names, std::string &out,
                     const std::vector<std::string> &choices) {
  std::string name = longName(names), list, type;
  for (size_t i = 0; i < choices.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
    type += (i ? "|" : "") + choices[i];
  }
  app_.add_option_function<std::string>(names,
                                        [this, &out, choices, list, name](const std::string &v) {
                                          for (const std::string &c : choices)
                                            if (v == c) {
                                              out = v;
                                              return;
                                            }
                                          valueError(name, "'" + v + "' is not " + list);
                                        })
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(type);
  return *this;
}

Flags &Flags::refuse(const std::string &names, const std::string &message) {
  app_.add_option_function<std::string>(
          names, [this, message](const std::string &) { refusal_ = message; })
      ->expected(0, 1)
      ->group(""); // not listed in --help
  return *this;
}

std::string Flags::helpText() const {
  std::string text = help_ + "\n\nflags:";
  size_t column = 100;
  for (const CLI::Option *opt : app_.get_options()) {
    if (opt->get_group().empty())
      continue;
    std::string entry = opt->get_name(false, true);
    if (opt->get_type_size() != 0 && !opt->get_type_name().empty())
      entry += " " + opt->get_type_name();
    if (column + entry.size() + 2 > 100) {
      text += "\n ";
      column = 1;
    }
    text += " " + entry;
    column += entry.size() + 1;
  }
  return text;
}

std::optional<int> Flags::parse(int argc, char **argv, int first) {
  std::vector<std::string> args;
  for (int i = argc - 1; i >= first; --i) // CLI11 takes the arguments reversed
    args.push_back(argv[i]);
  try {
    app_.parse(args);
  } catch (const CLI::ParseError &e) {
    if (help_flag_) {
      std::puts(helpText().c_str());
      return 0;
    }
    std::string message = e.what();
    if (message.find("required") != std::string::npos &&
        message.find("missing") != std::string::npos)
      message = "option " + message.substr(0, message.find(':')) + " needs a value";
    return usage(message);
  }
  if (help_flag_) {
    std::puts(helpText().c_str());
    return 0;
  }
  if (!refusal_.empty()) {
    std::fprintf(stderr, "%s: %s\n", command_.c_str(), refusal_.c_str());
    return 2;
  }
  for (const std::string &arg : app_.remaining()) {
    if (arg.size() > 1 && arg[0] == '-')
      return usage("unknown option " + arg);
    positional_.push_back(arg);
  }
  if (!firstError_.empty())
    return usage(firstError_);
  return std::nullopt;
}

bool Flags::given(const std::string &name) const { return app_.count(name) > 0; }

int Flags::usage(const std::string &message) const { return fail(command_, message, 2); }

int fail(const std::string &command, const std::string &message, int code) {
  std::fprintf(stderr, "%s: error: %s\n", command.c_str(), message.c_str());
  std::fflush(stderr);
  return code;
}

} // namespace megac::cli
