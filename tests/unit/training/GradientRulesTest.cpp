// Every gradient rule against central differences: a tiny f64 function applies one op to
// parameters, loss = sum(op(...) * fixed random weights), mega-training-autodiff builds the
// backward pass, codegen compiles it and the CPU runtime runs it.
#include "tests/unit/training/TrainingHarness.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <sstream>

namespace megac::training_test {
namespace {

/// How parameter values are drawn: where an op is smooth (log needs x > 0, abs and relu a
/// distance from their kink).
enum class Domain { any, positive, awayFromZero };

struct RuleCase {
  std::string name;
  /// The function's parameters, "%x: tensor<2x3xf64>" each (named after the SSA name).
  std::vector<std::string> params;
  /// Ops computing %out from the parameters.
  std::string body;
  /// The type of %out, e.g. "tensor<2x3xf64>".
  std::string outType;
  Domain domain = Domain::any;
  /// Central-difference step and the relative tolerance on the gradient's 2-norm.
  double h = 1e-5;
  double tolerance = 1e-6;
};

std::ostream &operator<<(std::ostream &os, const RuleCase &c) { return os << c.name; }

/// Shape of "tensor<2x3xf64>" ({} for "tensor<f64>").
std::vector<int64_t> shapeOf(const std::string &type) {
  std::string dims = type.substr(type.find('<') + 1);
  std::vector<int64_t> shape;
  size_t pos = 0;
  while (true) {
    size_t x = dims.find('x', pos);
    if (x == std::string::npos || !std::isdigit(static_cast<unsigned char>(dims[pos])))
      break;
    shape.push_back(std::stoll(dims.substr(pos, x - pos)));
    pos = x + 1;
  }
  return shape;
}

/// A nested dense literal "[[a, b], [c, d]]" of `shape` from the values in order.
void writeDense(std::ostream &os, const std::vector<int64_t> &shape, size_t dim,
                const std::vector<double> &values, size_t &next) {
  if (dim == shape.size()) {
    os << values[next++];
    return;
  }
  os << "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i)
      os << ", ";
    writeDense(os, shape, dim + 1, values, next);
  }
  os << "]";
}

/// @forward_backward(params) -> loss = sum(out * w), w fixed random weights.
std::string buildModule(const RuleCase &c, std::mt19937 &rng) {
  std::vector<int64_t> shape = shapeOf(c.outType);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::uniform_real_distribution<double> weight(-1.0, 1.0);
  std::vector<double> w(n);
  for (double &v : w)
    v = weight(rng);
  std::ostringstream os;
  os.precision(17);
  os << "func.func @forward_backward(";
  for (size_t i = 0; i < c.params.size(); ++i) {
    const std::string &p = c.params[i];
    std::string name = p.substr(1, p.find(':') - 1);
    os << (i ? ", " : "") << p << " {mega.param = \"" << name << "\"}";
  }
  os << ") -> (tensor<f64> {mega.output = \"loss\"}) {\n" << c.body << "\n";
  os << "  %__w = mega.constant dense<";
  size_t next = 0;
  writeDense(os, shape, 0, w, next);
  os << "> : " << c.outType << "\n";
  os << "  %__p = mega.mul %out, %__w : " << c.outType << "\n";
  if (shape.empty()) {
    os << "  return %__p : tensor<f64>\n}\n";
    return os.str();
  }
  os << "  %__l = mega.reduce sum %__p over [";
  for (size_t d = 0; d < shape.size(); ++d)
    os << (d ? ", " : "") << d;
  os << "] : " << c.outType << " -> tensor<f64>\n  return %__l : tensor<f64>\n}\n";
  return os.str();
}

class GradientRule : public ::testing::TestWithParam<RuleCase> {};

TEST_P(GradientRule, MatchesCentralDifferences) {
  const RuleCase &c = GetParam();
  std::mt19937 rng(1234);
  Harness harness;
  std::string ir = buildModule(c, rng);
  auto module = harness.parse(ir);
  ASSERT_TRUE(module);
  ASSERT_TRUE(harness.runPasses(
      *module, [](mlir::PassManager &pm) { pm.addPass(passes::createTrainingAutodiff()); }))
      << harness.diagnostics() << ir;

  std::uniform_real_distribution<double> unit(-1.0, 1.0), magnitude(0.3, 1.0), pos(0.5, 2.0);
  std::function<double()> sample = [&]() -> double {
    switch (c.domain) {
    case Domain::any:
      return unit(rng);
    case Domain::positive:
      return pos(rng);
    case Domain::awayFromZero:
      return (unit(rng) < 0 ? -1 : 1) * magnitude(rng);
    }
    return 0;
  };
  auto fb = module->lookupSymbol<mlir::func::FuncOp>("forward_backward");
  ASSERT_TRUE(fb);
  TensorMap weights = sampleParameters(fb, sample);
  Compiled compiled = harness.compile(*module, weights);
  ASSERT_TRUE(compiled.executor) << ir;
  expectGradientsMatchDifferences(*compiled.executor, c.h, c.tolerance);
}

std::string unary(const std::string &op) { return "  %out = mega." + op + " %x : tensor<2x3xf64>"; }
std::string binary(const std::string &op) {
  return "  %out = mega." + op + " %x, %y : tensor<2x3xf64>";
}
const std::string kX = "%x: tensor<2x3xf64>";
const std::string kY = "%y: tensor<2x3xf64>";
const std::string kT23 = "tensor<2x3xf64>";

std::vector<RuleCase> elementwiseCases() {
  std::vector<RuleCase> cases;
  for (const char *op : {"add", "sub", "mul", "min", "max"})
    cases.push_back({op, {kX, kY}, binary(op), kT23});
  cases.push_back({"div", {kX, kY}, binary("div"), kT23, Domain::positive});
  cases.push_back({"pow", {kX, kY}, binary("pow"), kT23, Domain::positive});
  for (const char *op : {"neg", "exp", "tanh", "erf", "sigmoid", "sin", "cos"})
    cases.push_back({op, {kX}, unary(op), kT23});
  for (const char *op : {"log", "sqrt", "rsqrt"})
    cases.push_back({op, {kX}, unary(op), kT23, Domain::positive});
  for (const char *op : {"abs", "relu"})
    cases.push_back({op, {kX}, unary(op), kT23, Domain::awayFromZero});
  cases.push_back({"where",
                   {kX, kY},
                   "  %c = mega.constant dense<[[true, false, true], [false, false, true]]> : "
                   "tensor<2x3xi1>\n"
                   "  %out = mega.where %c, %x, %y : tensor<2x3xi1>, tensor<2x3xf64>",
                   kT23});
  // x used three times, once through both operands of one op: gradients add up.
  cases.push_back({"accumulation",
                   {kX, kY},
                   "  %a = mega.mul %x, %x : tensor<2x3xf64>\n"
                   "  %b = mega.mul %a, %y : tensor<2x3xf64>\n"
                   "  %out = mega.sub %b, %x : tensor<2x3xf64>",
                   kT23});
  return cases;
}

std::vector<RuleCase> shapeCases() {
  return {
      {"matmul_batch_broadcast_rhs",
       {"%a: tensor<2x3x4xf64>", "%b: tensor<4x5xf64>"},
       "  %out = mega.matmul %a, %b : tensor<2x3x4xf64>, tensor<4x5xf64> -> tensor<2x3x5xf64>",
       "tensor<2x3x5xf64>"},
      {"matmul_batch_broadcast_both",
       {"%a: tensor<1x3x2xf64>", "%b: tensor<2x1x2x4xf64>"},
       "  %out = mega.matmul %a, %b : tensor<1x3x2xf64>, tensor<2x1x2x4xf64> -> "
       "tensor<2x1x3x4xf64>",
       "tensor<2x1x3x4xf64>"},
      {"broadcast",
       {"%x: tensor<3x1xf64>"},
       "  %out = mega.broadcast %x : tensor<3x1xf64> -> tensor<2x3x4xf64>",
       "tensor<2x3x4xf64>"},
      {"reshape",
       {"%x: tensor<2x6xf64>"},
       "  %out = mega.reshape %x : tensor<2x6xf64> -> tensor<3x4xf64>",
       "tensor<3x4xf64>"},
      {"transpose",
       {"%x: tensor<2x3x4xf64>"},
       "  %out = mega.transpose %x [2, 0, 1] : tensor<2x3x4xf64> -> tensor<4x2x3xf64>",
       "tensor<4x2x3xf64>"},
      {"slice_strided",
       {"%x: tensor<6x5xf64>"},
       "  %out = mega.slice %x [1, 0] to [6, 5] step [2, 3] : tensor<6x5xf64> -> tensor<3x2xf64>",
       "tensor<3x2xf64>"},
      {"concat",
       {"%x: tensor<2x1xf64>", "%y: tensor<2x3xf64>", "%z: tensor<2x2xf64>"},
       "  %out = mega.concat %x, %y, %z axis 1 : (tensor<2x1xf64>, tensor<2x3xf64>, "
       "tensor<2x2xf64>) -> tensor<2x6xf64>",
       "tensor<2x6xf64>"},
      // Through f32 and back: the loss is linear in x, so a large step is exact but for the
      // f32 rounding of x +- h (~6e-8 relative), which a small step would magnify.
      {"cast",
       {kX},
       "  %h = mega.cast %x : tensor<2x3xf64> -> tensor<2x3xf32>\n"
       "  %out = mega.cast %h : tensor<2x3xf32> -> tensor<2x3xf64>",
       kT23,
       Domain::any,
       0.25,
       1e-6},
      {"reduce_sum_keep_dims",
       {"%x: tensor<2x3x4xf64>"},
       "  %out = mega.reduce sum %x over [0, 2] keep_dims : tensor<2x3x4xf64> -> "
       "tensor<1x3x1xf64>",
       "tensor<1x3x1xf64>"},
      {"reduce_mean",
       {"%x: tensor<2x3x4xf64>"},
       "  %out = mega.reduce mean %x over [-2] : tensor<2x3x4xf64> -> tensor<2x4xf64>",
       "tensor<2x4xf64>"},
      // Random values have no ties, where max and min are not differentiable.
      {"reduce_max",
       {"%x: tensor<2x3x4xf64>"},
       "  %out = mega.reduce max %x over [1] : tensor<2x3x4xf64> -> tensor<2x4xf64>",
       "tensor<2x4xf64>"},
      {"reduce_min_all",
       {"%x: tensor<2x3xf64>"},
       "  %out = mega.reduce min %x over [0, 1] : tensor<2x3xf64> -> tensor<f64>",
       "tensor<f64>"},
      {"softmax",
       {"%x: tensor<2x3x4xf64>"},
       "  %out = mega.softmax %x axis 1 : tensor<2x3x4xf64>",
       "tensor<2x3x4xf64>"},
      {"gather_rows",
       {"%t: tensor<5x3xf64>"},
       "  %ids = mega.constant dense<[[1, 4], [1, 0]]> : tensor<2x2xi64>\n"
       "  %out = mega.gather %t[%ids] axis 0 : tensor<5x3xf64>, tensor<2x2xi64> -> "
       "tensor<2x2x3xf64>",
       "tensor<2x2x3xf64>"},
      {"gather_vector",
       {"%t: tensor<5xf64>"},
       "  %ids = mega.constant dense<[3, 3, 0]> : tensor<3xi64>\n"
       "  %out = mega.gather %t[%ids] axis 0 : tensor<5xf64>, tensor<3xi64> -> tensor<3xf64>",
       "tensor<3xf64>"},
      {"gather_rank3",
       {"%t: tensor<4x2x3xf64>"},
       "  %ids = mega.constant dense<[2, 0, 2]> : tensor<3xi32>\n"
       "  %out = mega.gather %t[%ids] axis -3 : tensor<4x2x3xf64>, tensor<3xi32> -> "
       "tensor<3x2x3xf64>",
       "tensor<3x2x3xf64>"},
      // Falcon's pick of q, k or v out of a fused projection: a scalar index on a middle axis.
      {"gather_axis2_scalar",
       {"%t: tensor<2x3x4x2xf64>"},
       "  %ids = mega.constant dense<1> : tensor<i64>\n"
       "  %out = mega.gather %t[%ids] axis 2 : tensor<2x3x4x2xf64>, tensor<i64> -> "
       "tensor<2x3x2xf64>",
       "tensor<2x3x2xf64>"},
      {"gather_axis1_repeated_negative",
       {"%t: tensor<2x4x3xf64>"},
       "  %ids = mega.constant dense<[[3, -1], [0, 2]]> : tensor<2x2xi64>\n"
       "  %out = mega.gather %t[%ids] axis 1 : tensor<2x4x3xf64>, tensor<2x2xi64> -> "
       "tensor<2x2x2x3xf64>",
       "tensor<2x2x2x3xf64>"},
      {"gather_last_axis",
       {"%t: tensor<2x5xf64>"},
       "  %ids = mega.constant dense<[4, 0, 4]> : tensor<3xi32>\n"
       "  %out = mega.gather %t[%ids] axis -1 : tensor<2x5xf64>, tensor<3xi32> -> tensor<2x3xf64>",
       "tensor<2x3xf64>"},
      {"gather_elements_repeated",
       {"%t: tensor<3x4xf64>"},
       "  %ids = mega.constant dense<[[3, 3], [0, -1], [1, 2]]> : tensor<3x2xi64>\n"
       "  %out = mega.gather_elements %t[%ids] axis 1 : tensor<3x4xf64>, tensor<3x2xi64> -> "
       "tensor<3x2xf64>",
       "tensor<3x2xf64>"},
      {"scatter_elements",
       {"%d: tensor<3x4xf64>", "%u: tensor<2x4xf64>"},
       "  %ids = mega.constant dense<[[2, 0, 1, 2], [0, 1, 2, 1]]> : tensor<2x4xi64>\n"
       "  %out = mega.scatter_elements %u into %d[%ids] axis 0 : tensor<3x4xf64>, "
       "tensor<2x4xi64>, tensor<2x4xf64>",
       "tensor<3x4xf64>"},
      {"scatter_elements_add",
       {"%d: tensor<2x3xf64>", "%u: tensor<2x3xf64>"},
       "  %ids = mega.constant dense<[[1, 1, 0], [2, 0, 0]]> : tensor<2x3xi64>\n"
       "  %out = mega.scatter_elements %u into %d[%ids] axis 1 {accumulate = true} : "
       "tensor<2x3xf64>, tensor<2x3xi64>, tensor<2x3xf64>",
       "tensor<2x3xf64>"},
      {"scatter_nd",
       {"%d: tensor<4x2x3xf64>", "%u: tensor<2x3xf64>"},
       "  %ids = mega.constant dense<[[3, 1], [-4, 0]]> : tensor<2x2xi64>\n"
       "  %out = mega.scatter_nd %u into %d[%ids] : tensor<4x2x3xf64>, tensor<2x2xi64>, "
       "tensor<2x3xf64>",
       "tensor<4x2x3xf64>"},
      {"scatter_nd_add",
       {"%d: tensor<4x3xf64>", "%u: tensor<3x3xf64>"},
       "  %ids = mega.constant dense<[[2], [0], [2]]> : tensor<3x1xi32>\n"
       "  %out = mega.scatter_nd %u into %d[%ids] {accumulate = true} : tensor<4x3xf64>, "
       "tensor<3x1xi32>, tensor<3x3xf64>",
       "tensor<4x3xf64>"},
      {"cumsum",
       {"%x: tensor<2x5x3xf64>"},
       "  %out = mega.cumsum %x axis 1 : tensor<2x5x3xf64>",
       "tensor<2x5x3xf64>"},
      {"cumsum_exclusive_reverse",
       {"%x: tensor<3x4xf64>"},
       "  %out = mega.cumsum %x axis -1 {exclusive = true, reverse = true} : tensor<3x4xf64>",
       "tensor<3x4xf64>"},
  };
}

const std::string kMoeMask =
    "  %mask = mega.constant dense<[[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], "
    "[1.0, 0.0, 0.0, 1.0]]> : tensor<3x4xf64>\n";

std::vector<RuleCase> coarseCases() {
  return {
      {"linear",
       {"%x: tensor<2x3x4xf64>", "%w: tensor<5x4xf64>", "%b: tensor<5xf64>"},
       "  %out = mega.linear %x, %w, %b : (tensor<2x3x4xf64>, tensor<5x4xf64>, tensor<5xf64>) "
       "-> tensor<2x3x5xf64>",
       "tensor<2x3x5xf64>"},
      {"linear_vector_no_bias",
       {"%x: tensor<4xf64>", "%w: tensor<3x4xf64>"},
       "  %out = mega.linear %x, %w : (tensor<4xf64>, tensor<3x4xf64>) -> tensor<3xf64>",
       "tensor<3xf64>"},
      {"embedding",
       {"%t: tensor<6x3xf64>"},
       "  %ids = mega.constant dense<[[5, 0, 5], [2, 5, 1]]> : tensor<2x3xi64>\n"
       "  %out = mega.embedding %t[%ids] : tensor<6x3xf64>, tensor<2x3xi64> -> "
       "tensor<2x3x3xf64>",
       "tensor<2x3x3xf64>"},
      {"layer_norm",
       {"%x: tensor<2x3x5xf64>", "%g: tensor<5xf64>", "%b: tensor<5xf64>"},
       "  %out = mega.layer_norm %x, %g, %b eps 1.0e-05 : (tensor<2x3x5xf64>, tensor<5xf64>, "
       "tensor<5xf64>) -> tensor<2x3x5xf64>",
       "tensor<2x3x5xf64>"},
      {"layer_norm_no_bias",
       {"%x: tensor<3x4xf64>", "%g: tensor<4xf64>"},
       "  %out = mega.layer_norm %x, %g eps 1.0e-05 : (tensor<3x4xf64>, tensor<4xf64>) -> "
       "tensor<3x4xf64>",
       "tensor<3x4xf64>"},
      {"rms_norm",
       {"%x: tensor<2x3x5xf64>", "%g: tensor<5xf64>"},
       "  %out = mega.rms_norm %x, %g eps 1.0e-06 : (tensor<2x3x5xf64>, tensor<5xf64>) -> "
       "tensor<2x3x5xf64>",
       "tensor<2x3x5xf64>"},
      {"attention_causal_mask_gqa",
       {"%q: tensor<2x3x4x2xf64>", "%k: tensor<2x3x2x2xf64>", "%v: tensor<2x3x2x3xf64>",
        "%m: tensor<2x1x3x3xf64>"},
       "  %out = mega.attention %q, %k, %v mask %m causal : (tensor<2x3x4x2xf64>, "
       "tensor<2x3x2x2xf64>, tensor<2x3x2x3xf64>, tensor<2x1x3x3xf64>) -> tensor<2x3x4x3xf64>",
       "tensor<2x3x4x3xf64>"},
      {"attention_cross_scaled",
       {"%q: tensor<1x2x2x3xf64>", "%k: tensor<1x4x2x3xf64>", "%v: tensor<1x4x2x3xf64>"},
       "  %out = mega.attention %q, %k, %v {scale = 0.7 : f64} : (tensor<1x2x2x3xf64>, "
       "tensor<1x4x2x3xf64>, tensor<1x4x2x3xf64>) -> tensor<1x2x2x3xf64>",
       "tensor<1x2x2x3xf64>"},
      {"gelu", {kX}, "  %out = mega.gelu none %x : tensor<2x3xf64>", kT23},
      {"gelu_tanh", {kX}, "  %out = mega.gelu tanh %x : tensor<2x3xf64>", kT23},
      {"silu", {kX}, "  %out = mega.silu %x : tensor<2x3xf64>", kT23},
      // Tables [s, d] broadcast over batch and heads, with unequal halves (the general rule).
      {"rope",
       {"%x: tensor<2x3x4x6xf64>", "%c: tensor<4x6xf64>", "%s: tensor<4x6xf64>"},
       "  %out = mega.rope %x, %c, %s : (tensor<2x3x4x6xf64>, tensor<4x6xf64>, "
       "tensor<4x6xf64>) -> tensor<2x3x4x6xf64>",
       "tensor<2x3x4x6xf64>"},
      // Per-sequence tables [b, 1, s, d] (Hugging Face's layout after unsqueeze(1)).
      {"rope_per_batch",
       {"%x: tensor<2x3x4x4xf64>", "%c: tensor<2x1x4x4xf64>", "%s: tensor<2x1x4x4xf64>"},
       "  %out = mega.rope %x, %c, %s : (tensor<2x3x4x4xf64>, tensor<2x1x4x4xf64>, "
       "tensor<2x1x4x4xf64>) -> tensor<2x3x4x4xf64>",
       "tensor<2x3x4x4xf64>"},
      {"cross_entropy",
       {"%z: tensor<2x3x5xf64>"},
       "  %labels = mega.constant dense<[[4, -100, 0], [2, 2, -100]]> : tensor<2x3xi64>\n"
       "  %out = mega.cross_entropy %z, %labels {ignore_index = -100 : i64} : "
       "tensor<2x3x5xf64>, tensor<2x3xi64> -> tensor<2x3xf64>",
       "tensor<2x3xf64>"},
      // Mixture of experts: routing weights w = wp * mask keep their zeros under perturbation
      // (an entry's activity is fixed); 3 tokens, 4 experts, 2 per token.
      {"moe_dispatch",
       {"%x: tensor<3x2xf64>", "%wp: tensor<3x4xf64>"},
       kMoeMask + "  %w = mega.mul %wp, %mask : tensor<3x4xf64>\n"
       "  %out = mega.moe_dispatch %x, %w : (tensor<3x2xf64>, tensor<3x4xf64>) -> "
       "tensor<4x3x2xf64>",
       "tensor<4x3x2xf64>"},
      {"moe_dispatch_two_token_dims",
       {"%x: tensor<1x3x2xf64>", "%wp: tensor<1x3x4xf64>"},
       "  %mask = mega.constant dense<[[[1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0], "
       "[1.0, 0.0, 0.0, 1.0]]]> : tensor<1x3x4xf64>\n"
       "  %w = mega.mul %wp, %mask : tensor<1x3x4xf64>\n"
       "  %out = mega.moe_dispatch %x, %w : (tensor<1x3x2xf64>, tensor<1x3x4xf64>) -> "
       "tensor<4x1x3x2xf64>",
       "tensor<4x1x3x2xf64>"},
      {"moe_combine",
       {"%y: tensor<4x3x2xf64>", "%wp: tensor<3x4xf64>"},
       kMoeMask + "  %w = mega.mul %wp, %mask : tensor<3x4xf64>\n"
       "  %out = mega.moe_combine %y, %w : (tensor<4x3x2xf64>, tensor<3x4xf64>) -> "
       "tensor<3x2xf64>",
       "tensor<3x2xf64>"},
      {"moe_matmul",
       {"%x: tensor<4x3x2xf64>", "%W: tensor<4x5x2xf64>"},
       kMoeMask + "  %out = mega.moe_matmul %x, %W, %mask topk 2 : (tensor<4x3x2xf64>, "
       "tensor<4x5x2xf64>, tensor<3x4xf64>) -> tensor<4x3x5xf64>",
       "tensor<4x3x5xf64>"},
      {"moe_matmul_transposed",
       {"%x: tensor<4x3x2xf64>", "%W: tensor<4x2x5xf64>"},
       kMoeMask + "  %out = mega.moe_matmul %x, %W, %mask topk 2 {transpose_weight = true} : "
       "(tensor<4x3x2xf64>, tensor<4x2x5xf64>, tensor<3x4xf64>) -> tensor<4x3x5xf64>",
       "tensor<4x3x5xf64>"},
      // The choice has no gradient; what it selects does.
      {"topk_mask",
       {"%x: tensor<3x4xf64>"},
       "  %m = mega.topk_mask %x k 2 : tensor<3x4xf64>\n"
       "  %out = mega.mul %m, %x : tensor<3x4xf64>",
       "tensor<3x4xf64>"},
      // A constant aux term: identity on the input (its seeding: AuxLossJoinsTheObjective).
      {"add_aux_loss",
       {kX},
       "  %a = mega.constant dense<0.5> : tensor<f64>\n"
       "  %out = mega.add_aux_loss %x, %a : tensor<2x3xf64>, tensor<f64>",
       kT23},
      // A whole MoE layer: router softmax, top-2, renormalised gates, dispatch, one expert
      // matrix per expert, combine: the gradient reaches the router logits through the gates.
      {"moe_layer",
       {"%x: tensor<3x2xf64>", "%l: tensor<3x4xf64>", "%W: tensor<4x5x2xf64>"},
       "  %p = mega.softmax %l axis -1 : tensor<3x4xf64>\n"
       "  %m = mega.topk_mask %p k 2 : tensor<3x4xf64>\n"
       "  %c = mega.mul %p, %m : tensor<3x4xf64>\n"
       "  %s = mega.reduce sum %c over [1] keep_dims : tensor<3x4xf64> -> tensor<3x1xf64>\n"
       "  %sb = mega.broadcast %s : tensor<3x1xf64> -> tensor<3x4xf64>\n"
       "  %g = mega.div %c, %sb : tensor<3x4xf64>\n"
       "  %d = mega.moe_dispatch %x, %m : (tensor<3x2xf64>, tensor<3x4xf64>) -> "
       "tensor<4x3x2xf64>\n"
       "  %h = mega.moe_matmul %d, %W, %m topk 2 : (tensor<4x3x2xf64>, tensor<4x5x2xf64>, "
       "tensor<3x4xf64>) -> tensor<4x3x5xf64>\n"
       "  %out = mega.moe_combine %h, %g : (tensor<4x3x5xf64>, tensor<3x4xf64>) -> "
       "tensor<3x5xf64>",
       "tensor<3x5xf64>"},
      // A GELU expert MLP (the grouped form of GPT's MLP): up, gelu, down per expert.
      {"moe_gelu_experts",
       {"%x: tensor<3x2xf64>", "%W1: tensor<4x5x2xf64>", "%W2: tensor<4x2x5xf64>"},
       kMoeMask + "  %d = mega.moe_dispatch %x, %mask : (tensor<3x2xf64>, tensor<3x4xf64>) -> "
       "tensor<4x3x2xf64>\n"
       "  %u = mega.moe_matmul %d, %W1, %mask topk 2 : (tensor<4x3x2xf64>, tensor<4x5x2xf64>, "
       "tensor<3x4xf64>) -> tensor<4x3x5xf64>\n"
       "  %g = mega.gelu none %u : tensor<4x3x5xf64>\n"
       "  %y = mega.moe_matmul %g, %W2, %mask topk 2 : (tensor<4x3x5xf64>, tensor<4x2x5xf64>, "
       "tensor<3x4xf64>) -> tensor<4x3x2xf64>\n"
       "  %out = mega.moe_combine %y, %mask : (tensor<4x3x2xf64>, tensor<3x4xf64>) -> "
       "tensor<3x2xf64>",
       "tensor<3x2xf64>"},
      {"dropout",
       {"%x: tensor<4x5xf64>"},
       "  %seed = mega.constant dense<7> : tensor<i64>\n"
       "  %out = mega.dropout %x, %seed ratio 3.0e-01 stream 2 : tensor<4x5xf64>, tensor<i64>",
       "tensor<4x5xf64>"},
  };
}

// mega.add_aux_loss adds its scalar to the objective where it stands: the gradient the step
// accumulates is that of loss + aux (Megatron's MoEAuxLossAutoScaler), though only the loss is
// the seeded output; the "total" output spells the objective out for the differences.
TEST(GradientRules, AuxLossJoinsTheObjective) {
  Harness harness;
  const std::string ir = R"(
func.func @forward_backward(%x: tensor<2x3xf64> {mega.param = "x"})
    -> (tensor<f64> {mega.output = "loss"}, tensor<f64> {mega.output = "total"}) {
  %sq = mega.mul %x, %x : tensor<2x3xf64>
  %e = mega.exp %x : tensor<2x3xf64>
  %t = mega.mul %sq, %e : tensor<2x3xf64>
  %a = mega.reduce sum %t over [0, 1] : tensor<2x3xf64> -> tensor<f64>
  %y = mega.add_aux_loss %x, %a : tensor<2x3xf64>, tensor<f64>
  %w = mega.constant dense<[[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]]> : tensor<2x3xf64>
  %p = mega.mul %y, %w : tensor<2x3xf64>
  %l = mega.reduce sum %p over [0, 1] : tensor<2x3xf64> -> tensor<f64>
  %total = mega.add %l, %a : tensor<f64>
  return %l, %total : tensor<f64>, tensor<f64>
}
)";
  auto module = harness.parse(ir);
  ASSERT_TRUE(module);
  ASSERT_TRUE(harness.runPasses(
      *module, [](mlir::PassManager &pm) { pm.addPass(passes::createTrainingAutodiff()); }))
      << harness.diagnostics();
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  auto fb = module->lookupSymbol<mlir::func::FuncOp>("forward_backward");
  ASSERT_TRUE(fb);
  TensorMap weights = sampleParameters(fb, [&] { return unit(rng); });
  Compiled compiled = harness.compile(*module, weights);
  ASSERT_TRUE(compiled.executor);
  expectGradientsMatchDifferences(*compiled.executor, 1e-5, 1e-6, "forward_backward", "total");
}

// A new differentiable op needs a case above: every op with a rule appears in some case.
TEST(GradientRules, EveryRuleHasACase) {
  Harness harness;
  std::string all;
  for (const auto &cases : {elementwiseCases(), shapeCases(), coarseCases()})
    for (const RuleCase &c : cases)
      all += c.body + "\n";
  // Collectives' gradients need several ranks: the partition equivalence suite
  // (tests/e2e/partition_equivalence.py) checks them against one-rank training.
  const std::set<std::string> multiRank = {"mega.all_reduce", "mega.all_gather",
                                           "mega.reduce_scatter", "mega.shard_slice",
                                           "mega.copy_to_shards", "mega.moe_exchange"};
  int rules = 0;
  for (mlir::RegisteredOperationName op : harness.context().getRegisteredOperations()) {
    if (!op.hasInterface<mega::GradientOpInterface>() || multiRank.count(op.getStringRef().str()))
      continue;
    ++rules;
    EXPECT_NE(all.find(" " + op.getStringRef().str() + " "), std::string::npos)
        << op.getStringRef().str() << " has a gradient rule but no finite-difference case";
  }
  EXPECT_EQ(rules, 49);
}

INSTANTIATE_TEST_SUITE_P(Elementwise, GradientRule, ::testing::ValuesIn(elementwiseCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Shape, GradientRule, ::testing::ValuesIn(shapeCases()),
                         [](const auto &info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Coarse, GradientRule, ::testing::ValuesIn(coarseCases()),
                         [](const auto &info) { return info.param.name; });

} // namespace
} // namespace megac::training_test
