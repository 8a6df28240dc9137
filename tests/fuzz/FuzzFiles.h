// Files for fuzz targets whose parsers read paths: one scratch folder per process, and inputs
// split into several files by a simple framing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace megac::fuzz {

/// /tmp/megac-fuzz-<pid>/, created once.
inline const std::string &scratchDir() {
  static const std::string dir = [] {
    std::string d = (std::filesystem::temp_directory_path() /
                     ("megac-fuzz-" + std::to_string(::getpid())))
                        .string();
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline void writeFile(const std::string &path, std::string_view bytes) {
  if (FILE *f = std::fopen(path.c_str(), "wb")) {
    if (!bytes.empty()) // fwrite's buffer may not be null, even for 0 bytes
      std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

/// The input cut at its first "\n--8<--\n" (the framing of multi-file seeds): {before, after}.
inline std::pair<std::string_view, std::string_view> splitInput(std::string_view input) {
  constexpr std::string_view kCut = "\n--8<--\n";
  size_t at = input.find(kCut);
  if (at == std::string_view::npos)
    return {input, {}};
  return {input.substr(0, at), input.substr(at + kCut.size())};
}

} // namespace megac::fuzz
