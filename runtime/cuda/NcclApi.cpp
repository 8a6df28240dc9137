// The real NCCL and CUDA runtime behind NcclApi (NcclApi.h): each method forwards to its call.
#include "runtime/cuda/NcclApi.h"

namespace megac::runtime::cuda {

namespace {

class RealNcclApi final : public NcclApi {
public:
  ncclResult_t getUniqueId(ncclUniqueId *id) override { return ncclGetUniqueId(id); }
  ncclResult_t commInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t *config) override {
    return ncclCommInitRankConfig(comm, nranks, id, rank, config);
  }
  ncclResult_t commSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                         ncclConfig_t *config) override {
    return ncclCommSplit(comm, color, key, newcomm, config);
  }
  ncclResult_t commGetAsyncError(ncclComm_t comm, ncclResult_t *state) override {
    return ncclCommGetAsyncError(comm, state);
  }
  ncclResult_t commFinalize(ncclComm_t comm) override { return ncclCommFinalize(comm); }
  ncclResult_t commDestroy(ncclComm_t comm) override { return ncclCommDestroy(comm); }
  ncclResult_t commAbort(ncclComm_t comm) override { return ncclCommAbort(comm); }
  const char *getErrorString(ncclResult_t result) override { return ncclGetErrorString(result); }
  const char *getLastError(ncclComm_t comm) override { return ncclGetLastError(comm); }
  ncclResult_t groupStart() override { return ncclGroupStart(); }
  ncclResult_t groupEnd() override { return ncclGroupEnd(); }
  ncclResult_t allReduce(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return ncclAllReduce(in, out, count, type, op, comm, stream);
  }
  ncclResult_t allGather(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclComm_t comm, cudaStream_t stream) override {
    return ncclAllGather(in, out, count, type, comm, stream);
  }
  ncclResult_t reduceScatter(const void *in, void *out, size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    return ncclReduceScatter(in, out, count, type, op, comm, stream);
  }
  ncclResult_t send(const void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return ncclSend(data, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    return ncclRecv(data, count, type, peer, comm, stream);
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
};

} // namespace

NcclApi &NcclApi::real() {
  static RealNcclApi api;
  return api;
}

} // namespace megac::runtime::cuda
