// The real NCCL and CUDA runtime behind NcclApi (NcclApi.h): each method forwards to its call
// (an NCCL call then clears the CUDA runtime's last error: RealNcclApi::call); NCCL's functions
// come from libnccl.so.2 opened with dlopen at the first use, not at link time.
#include "runtime/cuda/NcclApi.h"

#include <dlfcn.h>

#include <cstdlib>

namespace megac::runtime::cuda {

namespace {

// The NCCL functions megac calls: X(member, symbol).
#define MEGAC_NCCL_FUNCTIONS(X)                                                                    \
  X(getUniqueId, ncclGetUniqueId)                                                                  \
  X(commInitRankConfig, ncclCommInitRankConfig)                                                    \
  X(commSplit, ncclCommSplit)                                                                      \
  X(commGetAsyncError, ncclCommGetAsyncError)                                                      \
  X(commFinalize, ncclCommFinalize)                                                                \
  X(commDestroy, ncclCommDestroy)                                                                  \
  X(commAbort, ncclCommAbort)                                                                      \
  X(getErrorString, ncclGetErrorString)                                                            \
  X(getLastError, ncclGetLastError)                                                                \
  X(groupStart, ncclGroupStart)                                                                    \
  X(groupEnd, ncclGroupEnd)                                                                        \
  X(allReduce, ncclAllReduce)                                                                      \
  X(allGather, ncclAllGather)                                                                      \
  X(reduceScatter, ncclReduceScatter)                                                              \
  X(send, ncclSend)                                                                                \
  X(recv, ncclRecv)

/// libnccl's functions, resolved from one dlopen handle (kept open for the process).
struct NcclLibrary {
#define MEGAC_NCCL_POINTER(member, symbol) decltype(&symbol) member = nullptr;
  MEGAC_NCCL_FUNCTIONS(MEGAC_NCCL_POINTER)
#undef MEGAC_NCCL_POINTER
  std::string error; // empty when every function resolved

  explicit NcclLibrary(const std::string &path) {
    void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char *why = dlerror();
      error = "cannot load NCCL (" + path + "): " + (why ? why : "dlopen failed") +
              "; NCCL collectives need libnccl.so.2 (CUDA's lib64, the nvidia-nccl-cu13 wheel, "
              "or MEGAC_NCCL_LIBRARY=/path/to/libnccl.so.2)";
      return;
    }
#define MEGAC_NCCL_RESOLVE(member, symbol)                                                         \
  member = reinterpret_cast<decltype(&symbol)>(dlsym(handle, #symbol));                            \
  if (!member && error.empty())                                                                    \
    error = "NCCL (" + path + ") has no " #symbol ": megac needs NCCL 2.19 or newer";
    MEGAC_NCCL_FUNCTIONS(MEGAC_NCCL_RESOLVE)
#undef MEGAC_NCCL_RESOLVE
  }
};

class RealNcclApi final : public NcclApi {
public:
  explicit RealNcclApi(const std::string &path) : nccl_(path) {}

  std::string loadError() const override { return nccl_.error; }

  ncclResult_t getUniqueId(ncclUniqueId *id) override { return call(nccl_.getUniqueId, id); }
  ncclResult_t commInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t *config) override {
    return call(nccl_.commInitRankConfig, comm, nranks, id, rank, config);
  }
  ncclResult_t commSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                         ncclConfig_t *config) override {
    return call(nccl_.commSplit, comm, color, key, newcomm, config);
  }
  ncclResult_t commGetAsyncError(ncclComm_t comm, ncclResult_t *state) override {
    return call(nccl_.commGetAsyncError, comm, state);
  }
  ncclResult_t commFinalize(ncclComm_t comm) override { return call(nccl_.commFinalize, comm); }
  ncclResult_t commDestroy(ncclComm_t comm) override { return call(nccl_.commDestroy, comm); }
  ncclResult_t commAbort(ncclComm_t comm) override { return call(nccl_.commAbort, comm); }
  const char *getErrorString(ncclResult_t result) override {
    return ok() ? nccl_.getErrorString(result) : nccl_.error.c_str();
  }
  const char *getLastError(ncclComm_t comm) override {
    return ok() ? nccl_.getLastError(comm) : nccl_.error.c_str();
  }
  ncclResult_t groupStart() override { return call(nccl_.groupStart); }
  ncclResult_t groupEnd() override { return call(nccl_.groupEnd); }
  ncclResult_t allReduce(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return call(nccl_.allReduce, in, out, count, type, op, comm, stream);
  }
  ncclResult_t allGather(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclComm_t comm, cudaStream_t stream) override {
    return call(nccl_.allGather, in, out, count, type, comm, stream);
  }
  ncclResult_t reduceScatter(const void *in, void *out, size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return call(nccl_.reduceScatter, in, out, count, type, op, comm, stream);
  }
  ncclResult_t send(const void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return call(nccl_.send, data, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return call(nccl_.recv, data, count, type, peer, comm, stream);
  }

  cudaError_t getDevice(int *device) override { return cudaGetDevice(device); }
  cudaError_t streamCreateWithFlags(cudaStream_t *stream, unsigned flags) override {
    return cudaStreamCreateWithFlags(stream, flags);
  }
  cudaError_t streamDestroy(cudaStream_t stream) override { return cudaStreamDestroy(stream); }
  cudaError_t streamSynchronize(cudaStream_t stream) override {
    return cudaStreamSynchronize(stream);
  }
  cudaError_t streamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) override {
    return cudaStreamWaitEvent(stream, event, flags);
  }
  cudaError_t eventCreateWithFlags(cudaEvent_t *event, unsigned flags) override {
    return cudaEventCreateWithFlags(event, flags);
  }
  cudaError_t eventDestroy(cudaEvent_t event) override { return cudaEventDestroy(event); }
  cudaError_t eventRecord(cudaEvent_t event, cudaStream_t stream) override {
    return cudaEventRecord(event, stream);
  }
  cudaError_t eventQuery(cudaEvent_t event) override { return cudaEventQuery(event); }
  cudaError_t mallocAsync(void **data, size_t bytes, cudaStream_t stream) override {
    return cudaMallocAsync(data, bytes, stream);
  }
  cudaError_t freeAsync(void *data, cudaStream_t stream) override {
    return cudaFreeAsync(data, stream);
  }
  cudaError_t memcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                          cudaStream_t stream) override {
    return cudaMemcpyAsync(dst, src, bytes, kind, stream);
  }
  const char *errorName(cudaError_t error) override { return cudaGetErrorName(error); }
  const char *errorString(cudaError_t error) override { return cudaGetErrorString(error); }

private:
  bool ok() const { return nccl_.error.empty(); }

  /// One NCCL call, then the CUDA runtime's last error of this thread cleared. NCCL reports its
  /// failures through ncclResult_t, but its setup probes devices and memory through the CUDA
  /// runtime and may leave an error there that it handled (or reported as its own); a stale one
  /// would be read by our next kernel launch's check (cudaGetLastError in launchStatus) and
  /// blamed on that kernel, e.g. "Embedding: cudaErrorInvalidDevice".
  template <typename Function, typename... Args>
  ncclResult_t call(Function function, Args... args) {
    if (!ok())
      return ncclSystemError;
    ncclResult_t result = function(args...);
    (void)cudaGetLastError();
    return result;
  }

  NcclLibrary nccl_;
};

} // namespace

std::unique_ptr<NcclApi> NcclApi::open(const std::string &path) {
  return std::make_unique<RealNcclApi>(path);
}

NcclApi &NcclApi::real() {
  static std::unique_ptr<NcclApi> api = [] {
    const char *path = std::getenv("MEGAC_NCCL_LIBRARY");
    return open(path && *path ? path : "libnccl.so.2");
  }();
  return *api;
}

} // namespace megac::runtime::cuda
