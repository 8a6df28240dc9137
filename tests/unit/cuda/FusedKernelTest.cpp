// Fused kernels on a device against the CPU reference kernels run one instruction at a time on a
// host copy of the same arena: bit-exact where both sides round correctly (+ - * /, sqrt, min,
// max, compare, where, casts, bf16/f16 rounding points), within stated tolerances where CUDA's
// libm differs from glibc's (exp, log, tanh, erf, pow, gelu, silu); and bit for bit against the
// unfused CUDA kernels (runtime/cuda/kernels/Elementwise.cu), the header's promise. Also the
// cubin cache and launch errors.
#include "runtime/cuda/CudaDispatch.h"
#include "runtime/cuda/Fusion.h"
#include "runtime/cuda/Kernels.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/unit/cuda/FusionPlans.h"
#include "tests/unit/runtime/TestUtil.h"

#include <cuda.h> // CUDA_VERSION: the toolkit whose nvcc compiled the unfused kernels
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nvrtc.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::testing;

namespace {

#define CUDA_OK(expr)                                                                              \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);                         \
  } while (0)

double valueAt(const uint8_t *p, DType dtype, int64_t i) {
  switch (dtype) {
  case DType::f64:
    return reinterpret_cast<const double *>(p)[i];
  case DType::f32:
    return reinterpret_cast<const float *>(p)[i];
  case DType::bf16:
    return bf16ToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  case DType::f16:
    return halfToFloat(reinterpret_cast<const uint16_t *>(p)[i]);
  default:
    return p[i];
  }
}

/// |got - want| <= atol + rtol |want|; rtol = atol = 0 asks for the same bits (NaN: any NaN).
struct Tolerance {
  double rtol = 0, atol = 0;
  /// With a tolerance: at least this fraction of the elements must still be bit-exact.
  double exactFraction = 0;
};

void expectMatches(const fb::Program &program, uint32_t b, const std::vector<uint8_t> &got,
                   const std::vector<uint8_t> &want, Tolerance tol) {
  const fb::Buffer *buf = program.buffers()->Get(b);
  DType dtype = static_cast<DType>(buf->dtype());
  size_t size = dtypeSize(dtype);
  int64_t n = static_cast<int64_t>(buf->bytes() / size);
  const uint8_t *g = got.data() + buf->offset(), *w = want.data() + buf->offset();
  int64_t exact = 0, reported = 0;
  for (int64_t i = 0; i < n; ++i) {
    double gv = valueAt(g, dtype, i), wv = valueAt(w, dtype, i);
    bool same =
        std::memcmp(g + i * size, w + i * size, size) == 0 || (std::isnan(gv) && std::isnan(wv));
    exact += same;
    bool ok = same || (tol.rtol + tol.atol > 0 &&
                       std::fabs(gv - wv) <= tol.atol + tol.rtol * std::fabs(wv));
    if (!ok && reported++ < 5)
      ADD_FAILURE() << buf->name()->str() << " (" << dtypeName(dtype) << ") element " << i
                    << ": fused " << gv << ", reference " << wv << " (rtol " << tol.rtol
                    << ", atol " << tol.atol << ")";
  }
  EXPECT_GE(double(exact), tol.exactFraction * double(n))
      << buf->name()->str() << ": only " << exact << " of " << n << " elements are bit-exact";
}

// ---- Running a plan fused on the device and unfused on the host -----------------------------

/// Loads `spec`, expects its function 0 to be exactly one fused group, runs it on the device
/// and the CPU reference on the host from the same inputs, and compares every stored buffer.
void checkFused(const PlanSpec &spec, Tolerance tol,
                const std::map<std::string, InputRange> &ranges = {},
                const std::string &cacheDir = "") {
  auto loaded = loadPlanFromBytes(spec.build());
  ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
  const fb::Program &program = *loaded->plan().programs()->Get(0);
  const fb::Function &fn = *program.functions()->Get(0);
  std::vector<FusedGroup> groups = findFusionGroups(program, 0);
  ASSERT_EQ(groups.size(), 1u);
  const FusedGroup &group = groups[0];
  ASSERT_EQ(group.count, fn.instructions()->size()) << "the whole function should fuse";

  std::vector<uint8_t> arena(program.arena_bytes());
  fillInputs(program, arena, ranges);
  std::vector<uint8_t> want = arena;
  for (const fb::Instruction *inst : *fn.instructions()) {
    Status s = runReference(program, *inst, want.data());
    ASSERT_TRUE(s.isOk()) << s.message();
  }

  auto kernel = compileFusedKernel(group, cacheDir);
  ASSERT_TRUE(kernel.isOk()) << kernel.status().message() << "\n" << group.source;
  uint8_t *device = nullptr;
  CUDA_OK(cudaMalloc(&device, arena.size()));
  CUDA_OK(cudaMemcpy(device, arena.data(), arena.size(), cudaMemcpyHostToDevice));
  std::vector<void *> pointers;
  for (uint32_t b : group.inputs)
    pointers.push_back(device + program.buffers()->Get(b)->offset());
  for (uint32_t b : group.outputs)
    pointers.push_back(device + program.buffers()->Get(b)->offset());
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  Status launched = kernel.value()->launch(pointers, group.elements, stream);
  EXPECT_TRUE(launched.isOk()) << launched.message();
  CUDA_OK(cudaStreamSynchronize(stream));
  CUDA_OK(cudaGetLastError());
  std::vector<uint8_t> got(arena.size());
  CUDA_OK(cudaMemcpy(got.data(), device, arena.size(), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(device));
  ASSERT_FALSE(group.outputs.empty());
  for (uint32_t b : group.outputs)
    expectMatches(program, b, got, want, tol);
}

} // namespace

TEST(FusedKernel, F32SimpleOpsAreBitExact) {
  checkFused(simpleOps(DType::f32), {}, simpleRanges());
}
TEST(FusedKernel, F64SimpleOpsAreBitExact) {
  checkFused(simpleOps(DType::f64), {}, simpleRanges());
}
// bf16/f16: each op computes in f32 and rounds to the half type, on both sides.
TEST(FusedKernel, Bf16SimpleOpsAreBitExact) {
  checkFused(simpleOps(DType::bf16), {}, simpleRanges());
}
TEST(FusedKernel, F16SimpleOpsAreBitExact) {
  checkFused(simpleOps(DType::f16), {}, simpleRanges());
}

// CUDA's single-precision functions are within 2 ulp (expf, tanhf, erff; logf 1) and powf 4 ulp
// of the exact result (CUDA C++ Programming Guide, "Mathematical Functions"); glibc's are
// within 1. With at most three such ops in a row on inputs in [-1, 1) (condition numbers <= 3)
// the results differ by at most ~30 ulp of f32 (3.6e-6 relative): rtol 1e-5, and atol 1e-6 for
// results that pass near 0 (log(exp(x)) for x near 0 carries exp's absolute error ~2.4e-7).
// GeluGrad computes in double on both sides, so it differs only by the final rounding. The
// comparison is with glibc, not with the unfused CUDA kernels, so no bit-exact share is asked.
TEST(FusedKernel, F32TranscendentalsAreClose) {
  checkFused(transcendentals(DType::f32), {1e-5, 1e-6});
}
// Double: CUDA within 2 ulp (exp/log 1), glibc within 1; same chain: rtol 1e-13, atol 1e-15.
TEST(FusedKernel, F64TranscendentalsAreClose) {
  checkFused(transcendentals(DType::f64), {1e-13, 1e-15});
}
// bf16 keeps 8 bits: the f32 values above differ by a few f32 ulp (of 2^16 per bf16 ulp), so the
// rounded bf16 differs only where they straddle a rounding boundary (~1e-4 of the elements),
// by one bf16 ulp (<= 2^-7 relative); a later op (condition <= 1 here) carries that on and
// rounds again (another <= 2^-7): rtol 2^-5, and atol 2^-7 for log(exp(x)) near 0, which
// inherits exp's one-ulp flip near 1 as an absolute error. Almost every element must still be
// bit-exact (>= 99%): a kernel that kept intermediates in f32 instead of rounding them to bf16
// where the unfused kernels store them would fail that.
TEST(FusedKernel, Bf16TranscendentalsAreCloseAndMostlyExact) {
  checkFused(transcendentals(DType::bf16), {1.0 / 32, 1.0 / 128, 0.99});
}

// SwiGLU's silu(gate) * up, one fused kernel: CUDA's expf within 2 ulp of the exact result,
// glibc's within 1; x / (1 + e^-x) has condition <= 1 in e^-x and the product rounds once more:
// a few f32 ulp apart (rtol 1e-5; atol 1e-6 for products near 0). f64: CUDA's exp within 1 ulp
// (rtol 1e-13). bf16: the f32 values round to the same bf16 but where they straddle a rounding
// boundary, by one bf16 ulp (2^-7), twice at most (silu, then the product): rtol 2^-5, almost
// every element bit-exact. The device-check script runs these (scripts/device-check.sh).
TEST(FusedKernel, F32SwigluIsClose) {
  checkFused(swiglu(DType::f32), {1e-5, 1e-6}, swigluRanges());
}
TEST(FusedKernel, F64SwigluIsClose) {
  checkFused(swiglu(DType::f64), {1e-13, 1e-15}, swigluRanges());
}
TEST(FusedKernel, Bf16SwigluIsCloseAndMostlyExact) {
  checkFused(swiglu(DType::bf16), {1.0 / 32, 1.0 / 128, 0.99}, swigluRanges());
}

TEST(FusedKernel, LogicalOpsAndCastsAreBitExact) {
  checkFused(logicalOpsAndCasts(), {}, {{"d", {-3, 3}}});
}

TEST(FusedKernel, InPlaceAccumulationOverAGridStrideLoop) {
  // More elements than 65535 * 4 blocks of 256 threads cover: threads loop.
  checkFused(accumulateInPlace(65535LL * 4 * 256 + 777), {});
}

TEST(FusedKernel, SecondCompileLoadsTheCachedCubin) {
  TempDir dir;
  std::string cache = dir.path() + "/nvrtc";
  auto cubins = [&] {
    std::vector<std::filesystem::path> files;
    for (const auto &entry : std::filesystem::directory_iterator(cache))
      files.push_back(entry.path());
    return files;
  };
  checkFused(simpleOps(DType::f32), {}, simpleRanges(), cache);
  auto files = cubins();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].extension(), ".cubin");
  struct stat first {};
  ASSERT_EQ(stat(files[0].c_str(), &first), 0);
  // The second compile reads the file and leaves it alone (a rewrite is a new inode: rename).
  checkFused(simpleOps(DType::f32), {}, simpleRanges(), cache);
  struct stat second {};
  ASSERT_EQ(stat(files[0].c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino);
  EXPECT_EQ(cubins().size(), 1u);
  // A damaged cache file is recompiled and replaced.
  std::ofstream(files[0], std::ios::binary | std::ios::trunc) << "not a cubin";
  checkFused(simpleOps(DType::f32), {}, simpleRanges(), cache);
  std::ifstream in(files[0], std::ios::binary);
  std::string head(4, '\0');
  in.read(head.data(), 4);
  EXPECT_EQ(head, "\x7f"
                  "ELF");
  EXPECT_GT(std::filesystem::file_size(files[0]), 100u);
}

TEST(FusedKernel, LaunchChecksItsArgumentsAndCompileErrorsCarryTheLog) {
  auto groups = [] {
    PlanSpec spec = simpleOps(DType::f32);
    auto loaded = loadPlanFromBytes(spec.build());
    EXPECT_TRUE(loaded.isOk());
    return findFusionGroups(*loaded->plan().programs()->Get(0), 0);
  }();
  ASSERT_EQ(groups.size(), 1u);
  auto kernel = compileFusedKernel(groups[0], "");
  ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
  Status wrong = kernel.value()->launch({nullptr}, 4, nullptr);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_NE(wrong.message().find("buffers given"), std::string::npos) << wrong.message();
  std::vector<void *> none(groups[0].inputs.size() + groups[0].outputs.size(), nullptr);
  EXPECT_TRUE(kernel.value()->launch(none, 0, nullptr).isOk()); // nothing to do
  FusedGroup broken = groups[0];
  broken.source += "\nthis does not compile;\n";
  auto failed = compileFusedKernel(broken, "");
  ASSERT_FALSE(failed.isOk());
  EXPECT_NE(failed.status().message().find(broken.kernelName), std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("error"), std::string::npos)
      << failed.status().message();
}

namespace {

/// One instruction through the unfused CUDA kernel (the CUDA executor's dispatch), on a device
/// arena.
Status runUnfused(const cuda::Context &ctx, const fb::Program &program, const fb::Instruction &inst,
                  uint8_t *deviceArena) {
  std::vector<cpu::TensorRef> in, out;
  for (uint32_t b : *inst.inputs())
    in.push_back(arenaRef(program, b, deviceArena));
  for (uint32_t b : *inst.outputs())
    out.push_back(arenaRef(program, b, deviceArena));
  static const comm::Mesh oneRank;
  return cuda::exec::dispatch(inst, in, out, ctx, nullptr, oneRank, 0);
}

/// NVRTC compiles the fused kernels on the GPU machine with its own libdevice; nvcc compiled the
/// unfused ones here. When the two are different CUDA releases (the machine's libnvrtc is not
/// staged), their transcendentals (expf, tanhf, erff, powf: within 2-4 ulp of exact in each) may
/// differ in the last bits, while correctly rounded ops (+ - * /, sqrt, min, max, casts) cannot.
/// Returns "" when they are the same release, else what differs.
std::string nvrtcToolkitSkew() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "nvrtcVersion failed";
  int toolkitMajor = CUDA_VERSION / 1000, toolkitMinor = (CUDA_VERSION % 1000) / 10;
  if (major == toolkitMajor && minor == toolkitMinor)
    return "";
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor) + ", nvcc's toolkit " +
         std::to_string(toolkitMajor) + "." + std::to_string(toolkitMinor);
}

/// Two libdevice releases each within 2 ulp (powf 4) of the exact result differ by at most the
/// sum; the chains of the test plans have at most three such ops with condition <= 3, so the
/// bounds of the glibc comparisons above (derived for a 2-ulp and a 1-ulp library) hold with
/// room: f32 rtol 1e-5, f64 1e-13; half types one rounding flip of their ulp, twice, almost every
/// element still bit-exact.
Tolerance libdeviceSkewTolerance(DType dtype) {
  switch (dtype) {
  case DType::f32:
    return {1e-5, 1e-6};
  case DType::f64:
    return {1e-13, 1e-15};
  case DType::bf16:
    return {1.0 / 32, 1.0 / 128, 0.99};
  case DType::f16:
    return {1.0 / 256, 1.0 / 1024, 0.99};
  default:
    return {};
  }
}

} // namespace

// Same libdevice functions, same expressions, same rounding points, and no FMA across two ops:
// the fused kernel stores what the unfused kernels store, every bit (NaN: any NaN, as the
// unfused Cast keeps payloads and PTX cvt does not). Every test plan, transcendentals included,
// when NVRTC and nvcc are the same release; otherwise the plans with transcendentals are held to
// libdeviceSkewTolerance and the correctly rounded ones still to every bit.
TEST(FusedKernel, MatchesTheUnfusedCudaKernelsBitForBit) {
  const std::string skew = nvrtcToolkitSkew();
  if (!skew.empty())
    std::printf("note: %s: transcendentals compared within libdevice's ulp bounds\n",
                skew.c_str());
  int *errors = nullptr;
  CUDA_OK(cudaMalloc(&errors, sizeof(int)));
  CUDA_OK(cudaMemset(errors, 0, sizeof(int)));
  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  cuda::Context ctx;
  ctx.stream = stream;
  ctx.errors = errors;
  for (const NamedPlan &plan : fusionTestPlans(kN)) {
    SCOPED_TRACE(plan.name);
    auto loaded = loadPlanFromBytes(plan.spec.build());
    ASSERT_TRUE(loaded.isOk()) << loaded.status().message();
    const fb::Program &program = *loaded->plan().programs()->Get(0);
    const fb::Function &fn = *program.functions()->Get(0);
    std::vector<FusedGroup> groups = findFusionGroups(program, 0);
    ASSERT_EQ(groups.size(), 1u);
    const FusedGroup &group = groups[0];
    std::vector<uint8_t> arena(program.arena_bytes());
    fillInputs(program, arena, plan.ranges);
    uint8_t *unfused = nullptr, *fused = nullptr;
    CUDA_OK(cudaMalloc(&unfused, arena.size()));
    CUDA_OK(cudaMalloc(&fused, arena.size()));
    CUDA_OK(cudaMemcpy(unfused, arena.data(), arena.size(), cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(fused, arena.data(), arena.size(), cudaMemcpyHostToDevice));
    for (const fb::Instruction *inst : *fn.instructions()) {
      Status s = runUnfused(ctx, program, *inst, unfused);
      ASSERT_TRUE(s.isOk()) << s.message();
    }
    auto kernel = compileFusedKernel(group, "");
    ASSERT_TRUE(kernel.isOk()) << kernel.status().message();
    std::vector<void *> pointers;
    for (uint32_t b : group.inputs)
      pointers.push_back(fused + program.buffers()->Get(b)->offset());
    for (uint32_t b : group.outputs)
      pointers.push_back(fused + program.buffers()->Get(b)->offset());
    Status launched = kernel.value()->launch(pointers, group.elements, stream);
    ASSERT_TRUE(launched.isOk()) << launched.message();
    CUDA_OK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> want(arena.size()), got(arena.size());
    CUDA_OK(cudaMemcpy(want.data(), unfused, arena.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(got.data(), fused, arena.size(), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(unfused));
    CUDA_OK(cudaFree(fused));
    const bool correctlyRounded = plan.name.rfind("simple", 0) == 0 ||
                                  plan.name == "logical" || plan.name == "in place";
    for (uint32_t b : group.outputs) {
      Tolerance tol;
      if (!skew.empty() && !correctlyRounded)
        tol = libdeviceSkewTolerance(static_cast<DType>(program.buffers()->Get(b)->dtype()));
      expectMatches(program, b, got, want, tol);
    }
  }
  int deviceError = 0;
  CUDA_OK(cudaMemcpy(&deviceError, errors, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_EQ(deviceError, 0);
  CUDA_OK(cudaStreamDestroy(stream));
  CUDA_OK(cudaFree(errors));
}
