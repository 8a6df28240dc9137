// bench-train-step: times the optimizer steps of a compiled one-rank training plan (`megac
// compile --model gpt:... --ranks 1 ... -o step.mplan`) on the CPU or CUDA backend and prints
// ms/step, tokens/s, model TFLOP/s and MFU. Runtime only (no MLIR), so it runs on a machine
// that has CUDA but no compiler toolchain for megac (scripts/device-check.sh carries it).
//
//   bench-train-step --plan step.mplan [--backend cpu|cuda] [--steps 10] [--warmup 2]
//                    [--accumulate M] [--lr 1e-4] [--seed 0] [--allow-tf32]
//                    [--gpt LAYERS,HIDDEN,SEQ,VOCAB] [--peak-tflops P] [--label NAME]
//                    [--json FILE] [--profile]
//
// Tokens are uniform random ids (seeded) over the plan's vocabulary (the labels' range is the
// logits' last dim, read from --gpt, else 256). Model FLOPs per step are Korthikanti et al.'s
// 72·B·l·s·h²·(1 + s/(6h) + V/(12·h·l)) (no recompute counted, REFERENCE.md) when --gpt is
// given; MFU divides by the device's dense bf16 peak (cuda) or --peak-tflops. Never fails on
// time; exits non-zero only when a step fails.
//
// --profile (cuda only) sets MEGAC_CUDA_PROFILE=1 for the executor: every launch step is timed
// with CUDA events, the sums of the warm-up steps are dropped, and at exit stderr gets the GPU
// time per opcode over the timed steps' function runs (runtime/cuda/ExecutorSupport.h,
// KernelProfile). The events cost a little time per launch: compare ms/step without it.
#include "runtime/cuda/CudaExecutor.h"
#include "runtime/cuda/Device.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace megac;
using namespace megac::runtime;

namespace {

struct Options {
  std::string plan, label = "train-step", json;
  Backend backend = Backend::cpu;
  bool allowTf32 = false, profile = false;
  int64_t steps = 10, warmup = 2, accumulate = 1;
  double lr = 1e-4, peakTflops = 0;
  uint64_t seed = 0;
  int64_t layers = 0, hidden = 0, seq = 0, vocab = 0; // --gpt
};

[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "bench-train-step: %s\n", message.c_str());
  std::exit(1);
}

Options parse(int argc, char **argv) {
  Options o;
  o.backend = cuda::usableDevices().isOk() ? Backend::cuda : Backend::cpu;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--plan")
      o.plan = value();
    else if (a == "--backend") {
      std::string b = value();
      if (b != "cpu" && b != "cuda")
        die("--backend: '" + b + "' is not cpu or cuda");
      o.backend = b == "cuda" ? Backend::cuda : Backend::cpu;
    } else if (a == "--steps")
      o.steps = std::atoll(value().c_str());
    else if (a == "--warmup")
      o.warmup = std::atoll(value().c_str());
    else if (a == "--accumulate")
      o.accumulate = std::atoll(value().c_str());
    else if (a == "--lr")
      o.lr = std::atof(value().c_str());
    else if (a == "--seed")
      o.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--peak-tflops")
      o.peakTflops = std::atof(value().c_str());
    else if (a == "--label")
      o.label = value();
    else if (a == "--json")
      o.json = value();
    else if (a == "--allow-tf32")
      o.allowTf32 = true;
    else if (a == "--profile")
      o.profile = true;
    else if (a == "--gpt") {
      std::string v = value();
      if (std::sscanf(v.c_str(), "%lld,%lld,%lld,%lld", (long long *)&o.layers,
                      (long long *)&o.hidden, (long long *)&o.seq, (long long *)&o.vocab) != 4)
        die("--gpt: '" + v + "' is not LAYERS,HIDDEN,SEQ,VOCAB");
    } else if (a == "--help") {
      std::puts("usage: bench-train-step --plan step.mplan [--backend cpu|cuda] [--steps 10]\n"
                "         [--warmup 2] [--accumulate M] [--lr 1e-4] [--seed 0] [--allow-tf32]\n"
                "         [--gpt LAYERS,HIDDEN,SEQ,VOCAB] [--peak-tflops P] [--label NAME]\n"
                "         [--json FILE] [--profile]");
      std::exit(0);
    } else
      die("unknown argument '" + a + "' (--help lists them)");
  }
  if (o.plan.empty())
    die("--plan FILE.mplan is required (compile one with `megac compile --model gpt:... "
        "--ranks 1 -o FILE.mplan`)");
  if (o.steps < 1 || o.warmup < 0 || o.accumulate < 1)
    die("--steps and --accumulate must be >= 1, --warmup >= 0");
  if (o.profile && o.backend != Backend::cuda)
    die("--profile times CUDA kernels: it needs --backend cuda");
  return o;
}

template <typename T> T check(StatusOr<T> value, const char *what) {
  if (!value.isOk())
    die(std::string(what) + ": " + value.status().message());
  return std::move(value).value();
}

void check(const Status &status, const char *what) {
  if (!status.isOk())
    die(std::string(what) + ": " + status.message());
}

HostTensor scalar(DType dtype, double value) {
  HostTensor t = HostTensor::zeros(dtype, {});
  if (dtype == DType::f64)
    *t.data<double>() = value;
  else if (dtype == DType::f32)
    *t.data<float>() = float(value);
  else if (dtype == DType::i64)
    *t.data<int64_t>() = int64_t(value);
  else if (dtype == DType::i32)
    *t.data<int32_t>() = int32_t(value);
  else
    die(std::string("a scalar input of dtype ") + dtypeName(dtype) + " is not supported");
  return t;
}

/// Token ids of `info`'s dtype and shape, uniform in [0, vocab).
HostTensor randomIds(const TensorInfo &info, int64_t vocab, std::mt19937_64 &rng) {
  HostTensor t = HostTensor::zeros(info.dtype, info.shape);
  std::uniform_int_distribution<int64_t> id(0, vocab - 1);
  for (int64_t i = 0; i < t.numElements(); ++i) {
    if (info.dtype == DType::i64)
      t.data<int64_t>()[i] = id(rng);
    else if (info.dtype == DType::i32)
      t.data<int32_t>()[i] = int32_t(id(rng));
    else
      die("input_ids must be i64 or i32");
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  LoadedPlan plan = check(loadPlanFile(o.plan), "loading the plan");
  ExecutorOptions options;
  options.backend = o.backend;
  options.allowTf32 = o.allowTf32;
  if (o.profile)
    setenv("MEGAC_CUDA_PROFILE", "1", 1); // read by the CUDA executor at its creation
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Executor> executor =
      check(Executor::create(plan, options), "creating the executor");
  double setupSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TensorInfo ids = check(executor->inputInfo("input_ids"), "the plan's input_ids");
  TensorInfo labels = check(executor->inputInfo("labels"), "the plan's labels");
  TensorInfo lr = check(executor->inputInfo("lr"), "the plan's lr");
  TensorInfo step = check(executor->inputInfo("step"), "the plan's step");
  if (ids.shape.size() != 2)
    die("input_ids is not [batch, seq]");
  int64_t microBatch = ids.shape[0], seq = ids.shape[1];
  int64_t vocab = o.vocab > 0 ? o.vocab : 256;
  int64_t tokensPerStep = microBatch * seq * o.accumulate;
  std::vector<std::string> inputs = executor->inputNames("forward_backward");
  bool normalizer = std::find(inputs.begin(), inputs.end(), "loss_normalizer") != inputs.end();
  // A plan compiled with --overlap on at pp 1 over several ranks runs the last micro-batch and
  // the update as one function (docs/training-step.md "Overlap"); its outputs are "last.*".
  std::vector<std::string> functions = executor->functionNames();
  bool fused =
      std::find(functions.begin(), functions.end(), "forward_backward_apply") != functions.end();
  // ZeRO-1/2 with --overlap on: the update defers its parameter gathers into the next step's
  // first micro-batch, which runs the "gather_" copy (outputs "gathered.*").
  bool defers =
      std::find(functions.begin(), functions.end(), "gather_parameters") != functions.end();
  bool pending = false;
  std::string device = "cpu";
  if (o.backend == Backend::cuda)
    device = check(cuda::describeDevice(0), "the device");
  std::printf("%s: %s on %s; micro-batch %lld x %lld tokens, %lld per step; arena %.1f MiB; "
              "set up in %.2f s\n",
              o.label.c_str(), o.plan.c_str(), device.c_str(), (long long)microBatch,
              (long long)seq, (long long)tokensPerStep, executor->arenaBytes() / 1048576.0,
              setupSeconds);

  std::mt19937_64 rng(o.seed);
  std::vector<double> seconds;
  double firstLoss = 0, lastLoss = 0;
  for (int64_t s = 1; s <= o.warmup + o.steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    check(executor->zeroState("grad."), "zeroing the gradients");
    double loss = 0;
    check(executor->setInput("lr", scalar(lr.dtype, o.lr)), "lr");
    check(executor->setInput("step", scalar(step.dtype, double(s))), "step");
    for (int64_t m = 0; m < o.accumulate; ++m) {
      bool last = fused && m + 1 == o.accumulate;
      HostTensor x = randomIds(ids, vocab, rng);
      HostTensor y = randomIds(labels, vocab, rng);
      check(executor->setInput("input_ids", x), "input_ids");
      check(executor->setInput("labels", y), "labels");
      if (normalizer)
        check(executor->setInput(
                  "loss_normalizer",
                  scalar(check(executor->inputInfo("loss_normalizer"), "normalizer").dtype,
                         1.0 / double(tokensPerStep))),
              "loss_normalizer");
      bool gathers = m == 0 && pending;
      std::string prefix = std::string(gathers ? "gathered." : "") + (last ? "last." : "");
      std::string function = std::string(gathers ? "gather_" : "") +
                             (last ? "forward_backward_apply" : "forward_backward");
      check(executor->run(function), function.c_str());
      HostTensor l = check(executor->output(prefix + "loss"), "the loss");
      if (last) {
        check(executor->output(prefix + "grad_norm"), "grad_norm"); // waits for the update
        pending = defers;
      } else if (gathers) {
        pending = false;
      }
      loss += l.dtype == DType::f64 ? *l.data<double>() : double(*l.data<float>());
    }
    if (!fused)
      check(executor->run("apply_gradients"), "apply_gradients");
    // The grad norm is a host copy: it waits for the optimizer to finish on the device.
    if (!fused)
      check(executor->output("grad_norm"), "grad_norm");
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!std::isfinite(loss))
      die("step " + std::to_string(s) + ": the loss is not finite");
    if (s == 1)
      firstLoss = loss;
    lastLoss = loss;
    if (s > o.warmup)
      seconds.push_back(t);
    if (o.profile && s == o.warmup)
      check(cuda::resetCudaProfile(*executor), "--profile");
  }
  double stepSeconds = median(seconds);
  double tokensPerSecond = double(tokensPerStep) / stepSeconds;
  double flops = 0;
  if (o.layers > 0) {
    double B = double(tokensPerStep) / double(o.seq), l = double(o.layers), h = double(o.hidden),
           S = double(o.seq), V = double(o.vocab);
    flops = 72.0 * B * l * S * h * h * (1 + S / (6 * h) + V / (12 * h * l));
  }
  double peak = o.peakTflops > 0 ? o.peakTflops * 1e12
                                 : (o.backend == Backend::cuda ? cuda::peakBf16Flops(0) : 0.0);
  double tflops = flops / stepSeconds / 1e12;
  std::printf("%s: %.2f ms/step (median of %lld), %.0f tokens/s", o.label.c_str(),
              stepSeconds * 1e3, (long long)o.steps, tokensPerSecond);
  if (flops > 0)
    std::printf(", %.3g model TFLOP/s", tflops);
  if (flops > 0 && peak > 0)
    std::printf(", MFU %.1f%% of %.4g TFLOP/s", 100.0 * flops / stepSeconds / peak, peak / 1e12);
  std::printf("; loss %.4f -> %.4f\n", firstLoss, lastLoss);
  if (!o.json.empty()) {
    std::ofstream out(o.json, std::ios::app);
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"label\": \"%s\", \"backend\": \"%s\", \"ms_per_step\": %.4f, "
                  "\"tokens_per_s\": %.1f, \"model_tflops\": %.3f, \"mfu\": %.4f, "
                  "\"first_loss\": %.6f, \"last_loss\": %.6f}\n",
                  o.label.c_str(), backendName(o.backend), stepSeconds * 1e3, tokensPerSecond,
                  tflops, peak > 0 ? flops / stepSeconds / peak : 0.0, firstLoss, lastLoss);
    out << line;
  }
  return 0;
}
