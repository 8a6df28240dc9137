// The CUDA backend's asynchronous communication on one GPU (label gpu; scripts/device-check.sh's
// nccl-overlap step): a collective runs while a kernel runs on the compute stream (a two-way
// handshake between the streams that deadlocks, and times out on the device, if either stream
// waits for the other's later work); the device starts of one rank and their finish give the
// input back, the gathered pieces laid out along an inner dim; a send to itself and its
// receive posted ahead never touch host memory (every copy, transfer and staged buffer checked
// by cudaPointerGetAttributes through a recording NcclApi); the MoE token exchange of a group of
// one against the CPU backend's.
#include "runtime/cpu/Kernels.h"
#include "runtime/exec/CommOps.h"
#include "tests/unit/cuda/NcclDeviceTest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::cuda::test;

namespace {

/// About 2 s of an H200's clock (1.98 GHz): how long a handshake kernel waits before it gives
/// up and reports that the other stream never got there.
constexpr long long kSpinCycles = 4'000'000'000LL;

/// Waits until *flag == 1; *seen = whether it did within the budget.
__global__ void waitForFlag(const volatile int *flag, int *seen) {
  long long start = clock64();
  while (clock64() - start < kSpinCycles)
    if (*flag == 1) {
      *seen = 1;
      return;
    }
  *seen = 0;
}

/// Sets *flag = 1, then waits until *value == want; *seen = whether it did within the budget.
__global__ void setFlagThenWaitForValue(volatile int *flag, const volatile float *value, float want,
                                        int *seen) {
  *flag = 1;
  __threadfence_system();
  long long start = clock64();
  while (clock64() - start < kSpinCycles)
    if (*value == want) {
      *seen = 1;
      return;
    }
  *seen = 0;
}

/// The communicators time out after 10 s: a handshake that failed on the device fails the test
/// soon after its kernels gave up.
class NcclAsyncGpu : public NcclDeviceTest {
protected:
  std::unique_ptr<NcclCommunicator> make(const comm::Mesh &mesh, NcclApi *api = nullptr) {
    return NcclDeviceTest::make(mesh, 0, std::chrono::seconds(10), api);
  }
};

} // namespace

// Kernel B on the communication stream waits for a flag that kernel A on the compute stream sets
// once it runs; the all-reduce, started between them, is queued behind B; A then waits for the
// all-reduce's output. Both see what they wait for only if the collective ran while A was
// running: a start that waited on the host would time out (B waits for A, not yet launched), a
// compute stream that waited for the collective before A would leave B spinning until its
// budget ran out.
//
// What is tested is the steady state. The first use of a kernel or of a fresh communicator may
// block the host until the device is idle: CUDA's lazy loading loads a kernel's module at its
// first launch (which may synchronize the context), and NCCL sets up its buffers and loads its
// kernels at the first collective. Either, while B spins, would launch A only after B gave up.
// So both kernels are loaded and one all-reduce of the same size (the same NCCL path) runs to
// completion before the handshake, and the host time of the start and of A's launch is measured:
// a failure says whether one of them blocked.
TEST_F(NcclAsyncGpu, CollectiveOverlapsAKernelOnTwoStreams) {
  comm::Mesh mesh{{"dp"}, {1}};
  auto nccl = make(mesh);
  ASSERT_TRUE(nccl);
  const size_t n = 1 << 20;
  std::vector<float> x(n, 7.0f);
  DeviceBuffer in(n * 4), out(n * 4), flags(3 * sizeof(int));
  CUDA_OK(cudaMemcpy(in.data, x.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(flags.data, 0, 3 * sizeof(int)));
  int *flag = static_cast<int *>(flags.data), *seenB = flag + 1, *seenA = flag + 2;
  std::vector<uint32_t> dp = {0};
  // Warm-up: the kernels loaded (cudaFuncGetAttributes loads a lazily loaded kernel), NCCL's
  // first collective done, out cleared again for the handshake.
  cudaFuncAttributes attributes{};
  CUDA_OK(cudaFuncGetAttributes(&attributes, waitForFlag));
  CUDA_OK(cudaFuncGetAttributes(&attributes, setFlagThenWaitForValue));
  Status warm = nccl->allReduce(dp, in.data, out.data, n, DType::f32, comm::ReduceKind::sum);
  ASSERT_TRUE(warm.isOk()) << "warm-up all-reduce: " << warm.message();
  ASSERT_TRUE(nccl->drain().isOk());
  CUDA_OK(cudaMemset(out.data, 0, n * 4));
  CUDA_OK(cudaDeviceSynchronize());

  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  waitForFlag<<<1, 1, 0, nccl->stream()>>>(flag, seenB);
  CUDA_OK(cudaGetLastError());
  Clock::time_point t0 = Clock::now();
  Status started =
      nccl->startAllReduce(1, dp, in.data, out.data, n, DType::f32, comm::ReduceKind::sum);
  Clock::time_point t1 = Clock::now();
  ASSERT_TRUE(started.isOk()) << started.message();
  setFlagThenWaitForValue<<<1, 1, 0, stream_>>>(flag, static_cast<float *>(out.data) + n - 1, 7.0f,
                                                seenA);
  Clock::time_point t2 = Clock::now();
  CUDA_OK(cudaGetLastError());
  ASSERT_TRUE(nccl->finish(1).isOk());
  Status drained = nccl->drain();
  ASSERT_TRUE(drained.isOk()) << drained.message();
  std::vector<int> seen = download<int>(flags.data, 3);
  // B gives up after about 2 s: a host call that took over 1 s is the likely cause.
  std::string blocked;
  if (double s = seconds(t1 - t0); s > 1.0)
    blocked += "; the start blocked the host for " + std::to_string(s) + " s";
  if (double s = seconds(t2 - t1); s > 1.0)
    blocked +=
        "; the launch of the compute kernel blocked the host for " + std::to_string(s) + " s";
  EXPECT_EQ(seen[1], 1) << "the communication stream never saw the compute kernel run" << blocked;
  EXPECT_EQ(seen[2], 1) << "the compute kernel never saw the all-reduce's output" << blocked;
  EXPECT_EQ(download<float>(out.data, n), x);
  EXPECT_EQ(nccl->inFlight(), 0u);
}

// The device starts of a group of one: the result is the input (NCCL runs the collective), the
// gathered pieces laid out along dim 1 by the finish, the reduce-scatter from its own copy of
// the input, which may be overwritten right after the start.
TEST_F(NcclAsyncGpu, DeviceStartsOfOneRankGiveTheInputBack) {
  comm::Mesh mesh{{"dp"}, {1}};
  auto nccl = make(mesh);
  ASSERT_TRUE(nccl);
  std::vector<int64_t> shape = {3, 4, 5};
  const size_t n = 60;
  std::vector<float> x = randomFloats(n, 11);
  DeviceBuffer in(n * 4), reduced(n * 4), gathered(n * 4), scattered(n * 4);
  CUDA_OK(cudaMemcpy(in.data, x.data(), n * 4, cudaMemcpyHostToDevice));
  TensorRef xin{DType::f32, shape, in.data};
  std::vector<uint32_t> dp = {0};
  ASSERT_TRUE(devcomm::startAllReduce(*nccl, ctx_, 1, dp, comm::ReduceKind::sum, xin,
                                      {DType::f32, shape, reduced.data})
                  .isOk());
  ASSERT_TRUE(
      devcomm::startAllGather(*nccl, ctx_, 2, dp, 1, xin, {DType::f32, shape, gathered.data})
          .isOk());
  ASSERT_TRUE(devcomm::startReduceScatter(*nccl, ctx_, 3, dp, comm::ReduceKind::sum, 1, xin,
                                          {DType::f32, shape, scattered.data})
                  .isOk());
  CUDA_OK(cudaMemsetAsync(in.data, 0, n * 4, stream_)); // the starts copied it
  for (uint64_t key : {3, 1, 2})
    ASSERT_TRUE(devcomm::finishCollective(*nccl, key).isOk()) << key;
  ASSERT_TRUE(nccl->drain().isOk());
  EXPECT_EQ(download<float>(reduced.data, n), x);
  EXPECT_EQ(download<float>(gathered.data, n), x);
  EXPECT_EQ(download<float>(scattered.data, n), x);
}

namespace {

/// The real NCCL and CUDA calls, checking on the way that every pointer a copy, a transfer or a
/// collective touches is device memory and every copy is device to device.
class DeviceOnlyApi final : public NcclApi {
public:
  std::vector<std::string> violations;
  int copies = 0, transfers = 0;

  ncclResult_t getUniqueId(ncclUniqueId *id) override { return real().getUniqueId(id); }
  ncclResult_t commInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t *config) override {
    return real().commInitRankConfig(comm, nranks, id, rank, config);
  }
  ncclResult_t commSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                         ncclConfig_t *config) override {
    return real().commSplit(comm, color, key, newcomm, config);
  }
  ncclResult_t commGetAsyncError(ncclComm_t comm, ncclResult_t *state) override {
    return real().commGetAsyncError(comm, state);
  }
  ncclResult_t commFinalize(ncclComm_t comm) override { return real().commFinalize(comm); }
  ncclResult_t commDestroy(ncclComm_t comm) override { return real().commDestroy(comm); }
  ncclResult_t commAbort(ncclComm_t comm) override { return real().commAbort(comm); }
  const char *getErrorString(ncclResult_t r) override { return real().getErrorString(r); }
  const char *getLastError(ncclComm_t comm) override { return real().getLastError(comm); }
  ncclResult_t groupStart() override { return real().groupStart(); }
  ncclResult_t groupEnd() override { return real().groupEnd(); }
  ncclResult_t allReduce(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    device("allReduce in", in);
    device("allReduce out", out);
    return real().allReduce(in, out, count, type, op, comm, stream);
  }
  ncclResult_t allGather(const void *in, void *out, size_t count, ncclDataType_t type,
                         ncclComm_t comm, cudaStream_t stream) override {
    device("allGather in", in);
    device("allGather out", out);
    return real().allGather(in, out, count, type, comm, stream);
  }
  ncclResult_t reduceScatter(const void *in, void *out, size_t count, ncclDataType_t type,
                             ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) override {
    device("reduceScatter in", in);
    device("reduceScatter out", out);
    return real().reduceScatter(in, out, count, type, op, comm, stream);
  }
  ncclResult_t send(const void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    ++transfers;
    device("ncclSend", data);
    return real().send(data, count, type, peer, comm, stream);
  }
  ncclResult_t recv(void *data, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                    cudaStream_t stream) override {
    ++transfers;
    device("ncclRecv", data);
    return real().recv(data, count, type, peer, comm, stream);
  }
  cudaError_t getDevice(int *d) override { return real().getDevice(d); }
  cudaError_t streamCreateWithFlags(cudaStream_t *s, unsigned flags) override {
    return real().streamCreateWithFlags(s, flags);
  }
  cudaError_t streamDestroy(cudaStream_t s) override { return real().streamDestroy(s); }
  cudaError_t streamSynchronize(cudaStream_t s) override { return real().streamSynchronize(s); }
  cudaError_t streamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) override {
    return real().streamWaitEvent(s, e, flags);
  }
  cudaError_t eventCreateWithFlags(cudaEvent_t *e, unsigned flags) override {
    return real().eventCreateWithFlags(e, flags);
  }
  cudaError_t eventDestroy(cudaEvent_t e) override { return real().eventDestroy(e); }
  cudaError_t eventRecord(cudaEvent_t e, cudaStream_t s) override {
    return real().eventRecord(e, s);
  }
  cudaError_t eventQuery(cudaEvent_t e) override { return real().eventQuery(e); }
  cudaError_t mallocAsync(void **data, size_t bytes, cudaStream_t s) override {
    cudaError_t e = real().mallocAsync(data, bytes, s);
    if (e == cudaSuccess)
      device("cudaMallocAsync (a staged send)", *data);
    return e;
  }
  cudaError_t freeAsync(void *data, cudaStream_t s) override { return real().freeAsync(data, s); }
  cudaError_t memcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                          cudaStream_t s) override {
    ++copies;
    if (kind != cudaMemcpyDeviceToDevice)
      violations.push_back("a copy of kind " + std::to_string(int(kind)));
    device("copy destination", dst);
    device("copy source", src);
    return real().memcpyAsync(dst, src, bytes, kind, s);
  }
  const char *errorName(cudaError_t e) override { return real().errorName(e); }
  const char *errorString(cudaError_t e) override { return real().errorString(e); }

private:
  static NcclApi &real() { return NcclApi::real(); }
  void device(const char *what, const void *p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
      cudaGetLastError();
      violations.push_back(std::string(what) + " is not device memory (type " +
                           std::to_string(int(a.type)) + ")");
    }
  }
};

} // namespace

// One GPU cannot run two NCCL ranks, so the pipeline's device-to-device path is shown on a send
// to itself: staged into device memory, received posted ahead and blocking, every copy device to
// device, nothing on the host.
TEST_F(NcclAsyncGpu, SendRecvToItselfNeverTouchesHostMemory) {
  DeviceOnlyApi api;
  {
    comm::Mesh mesh{{"pp"}, {1}};
    auto nccl = make(mesh, &api);
    ASSERT_TRUE(nccl);
    const size_t n = 4096;
    std::vector<float> a = randomFloats(n, 5), b = randomFloats(n, 6);
    DeviceBuffer da(n * 4), db(n * 4), ahead(n * 4), blocking(n * 4);
    CUDA_OK(cudaMemcpy(da.data, a.data(), n * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db.data, b.data(), n * 4, cudaMemcpyHostToDevice));
    ASSERT_TRUE(nccl->send(0, 1, da.data, n * 4).isOk());
    ASSERT_TRUE(nccl->send(0, 2, db.data, n * 4).isOk());
    CUDA_OK(cudaMemsetAsync(da.data, 0, n * 4, stream_)); // the sends copied their data
    ASSERT_TRUE(nccl->startRecv(9, 0, 1, ahead.data, n * 4).isOk());
    ASSERT_TRUE(nccl->recv(0, 2, blocking.data, n * 4).isOk());
    ASSERT_TRUE(nccl->finish(9).isOk());
    ASSERT_TRUE(nccl->drain().isOk());
    EXPECT_EQ(download<float>(ahead.data, n), a);
    EXPECT_EQ(download<float>(blocking.data, n), b);
  }
  EXPECT_EQ(api.copies, 4); // two staged, two received
  EXPECT_TRUE(api.violations.empty()) << api.violations.front();
}

namespace {

HostTensor routingMask(std::vector<int64_t> shape, std::mt19937 &rng) {
  HostTensor t;
  t.dtype = DType::f32;
  t.shape = shape;
  size_t n = 1;
  for (int64_t d : shape)
    n *= size_t(d);
  t.bytes.resize(n * 4);
  for (size_t i = 0; i < n; ++i) {
    float v = rng() % 2 ? 0.5f : 0.0f;
    std::memcpy(t.bytes.data() + 4 * i, &v, 4);
  }
  return t;
}

void *toDevice(const HostTensor &t, std::vector<std::unique_ptr<DeviceBuffer>> &keep) {
  keep.push_back(std::make_unique<DeviceBuffer>(t.bytes.size()));
  EXPECT_EQ(cudaMemcpy(keep.back()->data, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  return keep.back()->data;
}

} // namespace

// The MoE token exchange of an ep group of one, both ways, against the CPU backend's with the
// same masks: the rows routed (the counts to itself, then the rows, over NCCL), the rest 0.
TEST_F(NcclAsyncGpu, MoeAllToAllOfOneRankMatchesTheCpuBackend) {
  comm::Mesh mesh{{"ep"}, {1}};
  auto nccl = make(mesh);
  ASSERT_TRUE(nccl);
  auto cpuComm = comm::makeSelfCommunicator(mesh);
  std::mt19937 rng(3);
  const int64_t E = 4, T = 6, h = 8;
  // A group of one holds every expert: the expert mask is the token mask (the same routing).
  HostTensor tokenMask = routingMask({T, E}, rng), expertMask = tokenMask;
  std::vector<uint32_t> ep = {0};
  for (int64_t dim : {0, 1}) {
    HostTensor x = HostTensor::zeros(DType::f32, {E, T, h});
    std::vector<float> values = randomFloats(size_t(E * T * h), uint32_t(20 + dim));
    std::memcpy(x.bytes.data(), values.data(), x.bytes.size());
    HostTensor want = HostTensor::zeros(DType::f32, {E, T, h});
    Status onCpu = commops::moeAllToAll(*cpuComm, ep, dim, cpu::refOf(x), cpu::refOf(tokenMask),
                                        cpu::refOf(expertMask), cpu::refOf(want));
    ASSERT_TRUE(onCpu.isOk()) << onCpu.message();
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    void *dx = toDevice(x, keep), *dt = toDevice(tokenMask, keep), *de = toDevice(expertMask, keep);
    DeviceBuffer out(x.bytes.size());
    CUDA_OK(cudaMemset(out.data, 0x7f, x.bytes.size())); // every row is written: routed or 0
    Status onGpu = devcomm::moeAllToAll(
        *nccl, ctx_, ep, dim, {DType::f32, x.shape, dx}, {DType::f32, tokenMask.shape, dt},
        {DType::f32, expertMask.shape, de}, {DType::f32, x.shape, out.data});
    ASSERT_TRUE(onGpu.isOk()) << onGpu.message();
    std::vector<float> got = download<float>(out.data, size_t(E * T * h));
    std::vector<float> expected(got.size());
    std::memcpy(expected.data(), want.bytes.data(), want.bytes.size());
    EXPECT_EQ(got, expected) << "dim " << dim;
  }
}
