// The NCCL and CUDA runtime calls NcclCommunicator makes, behind one interface: production binds
// the real ncclXxx/cudaXxx (NcclApi::real(), runtime/cuda/NcclApi.cpp), the CPU tests bind a fake
// NCCL that runs several ranks in one process (tests/unit/cuda/NcclFakeTest.cpp), so the
// communicator's logic (groups, staging, error messages, the watchdog) is tested without a GPU,
// a CUDA driver or libnccl.
//
// Each method is the call of the same name, with the same arguments and results. Calls are made
// on the thread of the communicator that holds the interface (NCCL groups are per thread).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <string>

namespace megac::runtime::cuda {

class NcclApi {
public:
  virtual ~NcclApi() = default;
  /// The real NCCL and CUDA runtime (a process-wide instance). NCCL is opened at run time, at
  /// the first call, from $MEGAC_NCCL_LIBRARY or else "libnccl.so.2" on the loader's path: no
  /// megac binary needs libnccl to start, and only a run that makes an NCCL communicator fails
  /// without it, naming the library (every NCCL call then returns ncclSystemError and
  /// getErrorString says why).
  static NcclApi &real();
  /// The real binding with NCCL opened from `path` (as dlopen reads it); a binding whose library
  /// did not load says why in loadError() and fails every NCCL call.
  static std::unique_ptr<NcclApi> open(const std::string &path);
  /// Empty when NCCL loaded with every function megac calls, else why not.
  virtual std::string loadError() const { return {}; }

  // NCCL.
  virtual ncclResult_t getUniqueId(ncclUniqueId *id) = 0;
  virtual ncclResult_t commInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                          ncclConfig_t *config) = 0;
  virtual ncclResult_t commSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                 ncclConfig_t *config) = 0;
  virtual ncclResult_t commGetAsyncError(ncclComm_t comm, ncclResult_t *state) = 0;
  virtual ncclResult_t commFinalize(ncclComm_t comm) = 0;
  virtual ncclResult_t commDestroy(ncclComm_t comm) = 0;
  virtual ncclResult_t commAbort(ncclComm_t comm) = 0;
  virtual const char *getErrorString(ncclResult_t result) = 0;
  virtual const char *getLastError(ncclComm_t comm) = 0;
  virtual ncclResult_t groupStart() = 0;
  virtual ncclResult_t groupEnd() = 0;
  virtual ncclResult_t allReduce(const void *in, void *out, size_t count, ncclDataType_t type,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t allGather(const void *in, void *out, size_t count, ncclDataType_t type,
                                 ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t reduceScatter(const void *in, void *out, size_t count, ncclDataType_t type,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t send(const void *data, size_t count, ncclDataType_t type, int peer,
                            ncclComm_t comm, cudaStream_t stream) = 0;
  virtual ncclResult_t recv(void *data, size_t count, ncclDataType_t type, int peer,
                            ncclComm_t comm, cudaStream_t stream) = 0;

  // CUDA runtime.
  virtual cudaError_t getDevice(int *device) = 0;
  virtual cudaError_t streamCreateWithFlags(cudaStream_t *stream, unsigned flags) = 0;
  virtual cudaError_t streamDestroy(cudaStream_t stream) = 0;
  virtual cudaError_t streamSynchronize(cudaStream_t stream) = 0;
  virtual cudaError_t streamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) = 0;
  virtual cudaError_t eventCreateWithFlags(cudaEvent_t *event, unsigned flags) = 0;
  virtual cudaError_t eventDestroy(cudaEvent_t event) = 0;
  virtual cudaError_t eventRecord(cudaEvent_t event, cudaStream_t stream) = 0;
  virtual cudaError_t eventQuery(cudaEvent_t event) = 0;
  virtual cudaError_t mallocAsync(void **data, size_t bytes, cudaStream_t stream) = 0;
  virtual cudaError_t freeAsync(void *data, cudaStream_t stream) = 0;
  virtual cudaError_t memcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                  cudaStream_t stream) = 0;
  virtual const char *errorName(cudaError_t error) = 0;
  virtual const char *errorString(cudaError_t error) = 0;
};

} // namespace megac::runtime::cuda
