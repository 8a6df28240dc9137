// Test harness for passes/training: parse a module, run training passes, compile it with
// codegen, execute it on the CPU runtime, and compare gradients with central differences.
#pragma once

#include "codegen/PlanWriter.h"
#include "ir/MegaDialect.h"
#include "ir/MegaOps.h"
#include "passes/training/Passes.h"
#include "runtime/exec/Executor.h"
#include "runtime/plan/PlanLoader.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace megac::training_test {

using runtime::Executor;

/// A compiled plan and an executor over it (the executor refers to the plan).
struct Compiled {
  std::unique_ptr<runtime::LoadedPlan> plan;
  std::unique_ptr<Executor> executor;
};

/// Owns an MLIR context with the dialects megac uses and collects its diagnostics.
class Harness {
public:
  Harness() {
    ctx_.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
    handler_ = std::make_unique<mlir::ScopedDiagnosticHandler>(&ctx_, [this](mlir::Diagnostic &d) {
      diagnostics_ += d.str() + "\n";
      return mlir::success();
    });
  }

  mlir::MLIRContext &context() { return ctx_; }
  /// Every diagnostic so far, one per line.
  const std::string &diagnostics() const { return diagnostics_; }

  mlir::OwningOpRef<mlir::ModuleOp> parse(const std::string &ir) {
    auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx_);
    EXPECT_TRUE(module) << "cannot parse:\n" << ir << "\n" << diagnostics_;
    return module;
  }

  /// Runs the passes `build` adds; false (with the diagnostics recorded) on failure.
  bool runPasses(mlir::ModuleOp module, const std::function<void(mlir::PassManager &)> &build) {
    mlir::PassManager pm(&ctx_);
    build(pm);
    return mlir::succeeded(pm.run(module));
  }

  /// Lowers every function of `module` into one plan and loads it with these parameter values;
  /// null executor on failure.
  Compiled compile(mlir::ModuleOp module, const TensorMap &weights) {
    Compiled out;
    mlir::FailureOr<std::vector<uint8_t>> bytes = codegen::writePlan(module, {});
    if (mlir::failed(bytes)) {
      ADD_FAILURE() << "codegen failed:\n" << diagnostics_;
      return out;
    }
    auto plan = runtime::loadPlanFromBytes(std::move(*bytes));
    if (!plan.isOk()) {
      ADD_FAILURE() << "cannot load the plan: " << plan.status().message();
      return out;
    }
    out.plan = std::make_unique<runtime::LoadedPlan>(std::move(plan).value());
    runtime::ExecutorOptions options;
    options.weights = &weights;
    auto executor = Executor::create(*out.plan, options);
    if (!executor.isOk()) {
      ADD_FAILURE() << "cannot create the executor: " << executor.status().message();
      return out;
    }
    out.executor = std::move(executor).value();
    return out;
  }

private:
  mlir::MLIRContext ctx_;
  std::string diagnostics_;
  std::unique_ptr<mlir::ScopedDiagnosticHandler> handler_;
};

inline HostTensor f64Tensor(std::vector<int64_t> shape, const std::vector<double> &values) {
  HostTensor t = HostTensor::zeros(DType::f64, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(t.numElements()), values.size());
  std::copy(values.begin(), values.end(), t.data<double>());
  return t;
}

inline std::vector<double> valuesOf(const HostTensor &t) {
  EXPECT_EQ(t.dtype, DType::f64);
  const double *p = t.data<double>();
  return std::vector<double>(p, p + t.numElements());
}

/// Values for every `mega.param` argument of `function` (f64), drawn by `sample`.
inline TensorMap sampleParameters(mlir::func::FuncOp function,
                                  const std::function<double()> &sample) {
  TensorMap weights;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto name = function.getArgAttrOfType<mlir::StringAttr>(i, mega::kParamAttr);
    if (!name)
      continue;
    auto type = mlir::cast<mlir::RankedTensorType>(function.getArgumentTypes()[i]);
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    std::vector<double> values(type.getNumElements());
    for (double &v : values)
      v = sample();
    weights[name.str()] = f64Tensor(shape, values);
  }
  return weights;
}

/// Reads a value the executor produced, failing the test on an error.
inline HostTensor expectValue(const StatusOr<HostTensor> &v, const std::string &what) {
  EXPECT_TRUE(v.isOk()) << what << ": " << v.status().message();
  return v.isOk() ? v.value() : HostTensor{};
}

inline void expectOk(const Status &s, const std::string &what) {
  EXPECT_TRUE(s.isOk()) << what << ": " << s.message();
}

/// The f64 scalar output `name` after running `function`.
inline double runScalar(Executor &ex, const std::string &function, const std::string &name) {
  expectOk(ex.run(function), "run " + function);
  std::vector<double> v = valuesOf(expectValue(ex.output(name), "output " + name));
  EXPECT_EQ(v.size(), 1u);
  return v.empty() ? NAN : v[0];
}

/// Compares d(loss)/d(param) accumulated by one run of @forward_backward (from zeroed
/// accumulators) with central differences of the loss, per parameter:
/// ||fd - grad||_2 <= tolerance * max(||grad||_2, 1e-3).
inline void expectGradientsMatchDifferences(Executor &ex, double h, double tolerance,
                                            const std::string &function = "forward_backward",
                                            const std::string &loss = "loss") {
  expectOk(ex.zeroState("grad."), "zeroState");
  runScalar(ex, function, loss);
  // Read every gradient before the difference runs add more to the accumulators.
  std::map<std::string, std::vector<double>> grads;
  for (const std::string &param : ex.parameterNames())
    grads[param] = valuesOf(expectValue(ex.state("grad." + param), "grad." + param));
  for (const std::string &param : ex.parameterNames()) {
    const std::vector<double> &grad = grads[param];
    HostTensor value = expectValue(ex.parameter(param), param);
    std::vector<double> x = valuesOf(value);
    ASSERT_EQ(grad.size(), x.size()) << param;
    std::vector<double> fd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<double> moved = x;
      moved[i] = x[i] + h;
      expectOk(ex.setParameter(param, f64Tensor(value.shape, moved)), "setParameter");
      double plus = runScalar(ex, function, loss);
      moved[i] = x[i] - h;
      expectOk(ex.setParameter(param, f64Tensor(value.shape, moved)), "setParameter");
      double minus = runScalar(ex, function, loss);
      fd[i] = (plus - minus) / (2 * h);
    }
    expectOk(ex.setParameter(param, value), "setParameter");
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      diff += (fd[i] - grad[i]) * (fd[i] - grad[i]);
      norm += grad[i] * grad[i];
    }
    double rel = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-3);
    std::ostringstream detail;
    for (size_t i = 0; i < x.size() && i < 12; ++i)
      detail << "  [" << i << "] grad " << grad[i] << " fd " << fd[i] << "\n";
    EXPECT_LE(rel, tolerance) << "parameter '" << param << "': relative error " << rel << "\n"
                              << detail.str();
  }
}

} // namespace megac::training_test
