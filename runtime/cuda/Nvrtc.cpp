// NVRTC compilation of fused kernels, the on-disk cubin cache and loading/launching through the
// CUDA runtime's library API (cudaLibraryLoadData: no libcuda link needed).
#include "runtime/cuda/Fusion.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

namespace megac::runtime::cuda {

namespace {

uint64_t fnv1a64(const void *data, size_t size, uint64_t h = 0xcbf29ce484222325ull) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

std::string cudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

/// Destroys the NVRTC program on every path.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program)
      nvrtcDestroyProgram(&program);
  }
};

class LoadedKernel final : public FusedKernel {
public:
  LoadedKernel(cudaLibrary_t library, cudaKernel_t kernel, size_t parameters, std::string name)
      : library_(library), kernel_(kernel), parameters_(parameters), name_(std::move(name)) {}
  ~LoadedKernel() override { cudaLibraryUnload(library_); }
  LoadedKernel(const LoadedKernel &) = delete;
  LoadedKernel &operator=(const LoadedKernel &) = delete;

  Status launch(const std::vector<void *> &pointers, int64_t elements,
                void *stream) const override {
    if (pointers.size() != parameters_)
      return Status::error("fused kernel " + name_ + ": " + std::to_string(pointers.size()) +
                           " buffers given, it takes " + std::to_string(parameters_));
    if (elements < 0)
      return Status::error("fused kernel " + name_ + ": negative element count " +
                           std::to_string(elements));
    if (elements == 0)
      return Status::ok();
    // cudaLaunchKernel takes the address of each argument's value.
    std::vector<void *> values(pointers.begin(), pointers.end());
    long long n = elements;
    std::vector<void *> args;
    for (void *&p : values)
      args.push_back(&p);
    args.push_back(&n);
    constexpr int kThreads = 256;
    long long blocks = std::min<long long>((n + kThreads - 1) / kThreads, 65535LL * 4);
    cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void *>(kernel_),
                                     dim3(static_cast<unsigned>(blocks)), dim3(kThreads),
                                     args.data(), 0, static_cast<cudaStream_t>(stream));
    if (e != cudaSuccess)
      return Status::error("launching fused kernel " + name_ + ": " + cudaMessage(e));
    return Status::ok();
  }

private:
  cudaLibrary_t library_;
  cudaKernel_t kernel_;
  size_t parameters_;
  std::string name_;
};

/// Loads a cubin and finds `name` in it; the error names the CUDA error.
StatusOr<std::unique_ptr<FusedKernel>> loadCubin(const std::vector<char> &cubin,
                                                 const FusedGroup &group) {
  cudaLibrary_t library = nullptr;
  cudaError_t e =
      cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    cudaGetLastError(); // a failed load is not the executor's next launch error
    return Status::error("loading fused kernel " + group.kernelName + ": " + cudaMessage(e));
  }
  cudaKernel_t kernel = nullptr;
  e = cudaLibraryGetKernel(&kernel, library, group.kernelName.c_str());
  if (e != cudaSuccess) {
    cudaGetLastError();
    cudaLibraryUnload(library);
    return Status::error("fused kernel " + group.kernelName +
                         " is not in its cubin: " + cudaMessage(e));
  }
  return std::unique_ptr<FusedKernel>(std::make_unique<LoadedKernel>(
      library, kernel, group.inputs.size() + group.outputs.size(), group.kernelName));
}

// A cache file is the cubin followed by its 8-byte FNV-1a hash (little-endian), so a truncated
// or damaged file is recognized and recompiled instead of handed to the driver.
std::optional<std::vector<char>> readCached(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 8 + 4)
    return std::nullopt;
  size_t size = bytes.size() - 8;
  uint64_t want = 0;
  for (int k = 7; k >= 0; --k)
    want = (want << 8) | static_cast<unsigned char>(bytes[size + k]);
  static const char kElf[4] = {0x7f, 'E', 'L', 'F'};
  if (fnv1a64(bytes.data(), size) != want || std::memcmp(bytes.data(), kElf, 4) != 0)
    return std::nullopt;
  bytes.resize(size);
  return bytes;
}

/// Writes through a temporary file and a rename, so readers never see half a file; failures
/// only cost a recompile next time.
void writeCached(const std::string &dir, const std::string &path, const std::vector<char> &cubin) {
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return;
  std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return;
    uint64_t h = fnv1a64(cubin.data(), cubin.size());
    char trailer[8];
    for (int k = 0; k < 8; ++k)
      trailer[k] = static_cast<char>((h >> (8 * k)) & 0xff);
    out.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    out.write(trailer, 8);
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    std::filesystem::remove(tmp, ec);
}

} // namespace

StatusOr<std::vector<char>> nvrtcCompile(const std::string &source, const std::string &name,
                                         const std::string &arch) {
  auto failure = [&](const std::string &what) {
    return Status::error("NVRTC: compiling " + name + " for " + arch + ": " + what);
  };
  if (arch.rfind("sm_", 0) != 0)
    return failure("the architecture must be sm_XX (a cubin), not '" + arch + "'");
  ProgramGuard guard;
  nvrtcResult r = nvrtcCreateProgram(&guard.program, source.c_str(), (name + ".cu").c_str(), 0,
                                     nullptr, nullptr);
  if (r != NVRTC_SUCCESS) {
    guard.program = nullptr;
    return failure(nvrtcGetErrorString(r));
  }
  std::string archOption = "--gpu-architecture=" + arch;
  const char *options[] = {archOption.c_str(), "-default-device", "--std=c++17", "-lineinfo"};
  r = nvrtcCompileProgram(guard.program, 4, options);
  if (r != NVRTC_SUCCESS) {
    std::string log;
    size_t logSize = 0;
    if (nvrtcGetProgramLogSize(guard.program, &logSize) == NVRTC_SUCCESS && logSize > 1) {
      log.resize(logSize);
      if (nvrtcGetProgramLog(guard.program, log.data()) != NVRTC_SUCCESS)
        log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
        log.pop_back();
    }
    return failure(std::string(nvrtcGetErrorString(r)) + "\n" + log);
  }
  size_t size = 0;
  r = nvrtcGetCUBINSize(guard.program, &size);
  if (r != NVRTC_SUCCESS || size == 0)
    return failure(std::string("no cubin: ") + nvrtcGetErrorString(r));
  std::vector<char> cubin(size);
  r = nvrtcGetCUBIN(guard.program, cubin.data());
  if (r != NVRTC_SUCCESS)
    return failure(std::string("no cubin: ") + nvrtcGetErrorString(r));
  return cubin;
}

std::string defaultKernelCacheDir() {
  if (const char *dir = std::getenv("MEGAC_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/megac/nvrtc";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/megac/nvrtc";
  return ""; // nowhere to cache
}

StatusOr<std::unique_ptr<FusedKernel>> compileFusedKernel(const FusedGroup &group,
                                                          const std::string &cacheDir) {
  auto failure = [&](const std::string &what) {
    return Status::error("fused kernel " + group.kernelName + " (instructions " +
                         std::to_string(group.first) + ".." +
                         std::to_string(group.first + group.count - 1) + "): " + what);
  };
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return failure("no device: " + cudaMessage(e));
  }
  std::string arch = "sm_" + std::to_string(major * 10 + minor);

  std::string path;
  if (!cacheDir.empty()) {
    int nvMajor = 0, nvMinor = 0;
    nvrtcVersion(&nvMajor, &nvMinor);
    std::string key =
        group.source + '\0' + arch + '\0' + std::to_string(nvMajor) + "." + std::to_string(nvMinor);
    path = cacheDir + "/" + hex64(fnv1a64(key.data(), key.size())) + ".cubin";
    if (std::optional<std::vector<char>> cached = readCached(path)) {
      auto kernel = loadCubin(*cached, group);
      if (kernel.isOk())
        return kernel;
      // Unloadable (another driver, a damaged file): compile afresh and overwrite it.
    }
  }
  auto cubin = nvrtcCompile(group.source, group.kernelName, arch);
  if (!cubin.isOk())
    return failure(cubin.status().message());
  auto kernel = loadCubin(cubin.value(), group);
  if (!kernel.isOk())
    return failure(kernel.status().message());
  if (!path.empty())
    writeCached(cacheDir, path, cubin.value());
  return kernel;
}

} // namespace megac::runtime::cuda
