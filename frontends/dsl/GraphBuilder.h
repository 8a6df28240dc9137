// The graph DSL: a C++ builder of mega IR that reads like the model and checks shapes as it goes.
//
//   GraphBuilder b(ctx, "gpt");
//   Tensor ids = b.input("input_ids", {batch, seq}, DType::i64);
//   Tensor x = b.embedding(b.parameter("wte", {vocab, hidden}, DType::f32, Init::normal(0.02)),
//   ids); { auto s = b.scope("h0"); x = x + b.attention(q, k, v, {.causal = true}); }
//   b.output("logits", logits);
//   mlir::Operation *module = b.finish();   // nullptr and b.error() on failure
//
// The header is MLIR-free so model files compile fast; tensors are handles into the builder.
// The first error (a shape mismatch, say) is recorded with the file:line of the offending call
// and the scope path; every later call returns an invalid tensor, so model code needs no checks.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace mlir {
class MLIRContext;
class Operation;
} // namespace mlir

namespace megac::dsl {

using Shape = std::vector<int64_t>;
using Loc = std::source_location;

enum class DType { f64, f32, bf16, f16, i64, i32, i1 };
const char *dtypeName(DType dtype);

/// How a parameter's initial values are drawn (see runtime/init/ParamInit.h).
struct Init {
  enum class Kind { normal, zeros, ones } kind = Kind::zeros;
  double stddev = 0.0;
  static Init normal(double stddev) { return {Kind::normal, stddev}; }
  static Init zeros() { return {Kind::zeros, 0.0}; }
  static Init ones() { return {Kind::ones, 0.0}; }
};

enum class ReduceKind { sum, mean, max, min };
enum class Compare { eq, ne, lt, le, gt, ge };
enum class Gelu { erf, tanh };

class GraphBuilder;

/// A value in the graph under construction: its shape and element type, and a handle.
class Tensor {
public:
  Tensor() = default;
  bool valid() const { return value_ != nullptr; }
  const Shape &shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  /// Size of dim `i`; negative counts from the end.
  int64_t dim(int64_t i) const { return shape_[i < 0 ? i + rank() : i]; }
  DType dtype() const { return dtype_; }
  GraphBuilder *builder() const { return builder_; }

private:
  friend class GraphBuilder;
  GraphBuilder *builder_ = nullptr;
  void *value_ = nullptr; // an mlir::Value's opaque pointer
  Shape shape_;
  DType dtype_ = DType::f32;
};

struct AttentionOptions {
  bool causal = false;
  /// Additive mask or bias, broadcastable to [batch, heads, seq, kv_seq].
  std::optional<Tensor> mask;
  /// Defaults to 1/sqrt(head_dim).
  std::optional<double> scale;
};

class GraphBuilder {
public:
  GraphBuilder(mlir::MLIRContext &ctx, std::string_view functionName);
  ~GraphBuilder();
  GraphBuilder(const GraphBuilder &) = delete;
  GraphBuilder &operator=(const GraphBuilder &) = delete;

  /// Names parameters and locations inside it: `auto s = b.scope("h3");` makes "h3.attn.q.weight".
  class Scope {
  public:
    ~Scope();
    Scope(Scope &&other) noexcept;
    Scope(const Scope &) = delete;

  private:
    friend class GraphBuilder;
    explicit Scope(GraphBuilder *b) : builder_(b) {}
    GraphBuilder *builder_;
  };
  [[nodiscard]] Scope scope(std::string_view name);
  /// "h3.attn" inside scopes h3 and attn.
  std::string scopePath() const;

  // Function signature.
  Tensor parameter(std::string_view name, Shape shape, DType dtype, Init init,
                   Loc loc = Loc::current());
  /// A parameter the model's own files hold as separate tensors stacked along dim 0 (a mixture
  /// of experts' per-expert weights): `members` are their names in this scope, one per row.
  Tensor stackedParameter(std::string_view name, Shape shape, DType dtype, Init init,
                          const std::vector<std::string> &members, Loc loc = Loc::current());
  Tensor input(std::string_view name, Shape shape, DType dtype, Loc loc = Loc::current());
  void output(std::string_view name, const Tensor &value, Loc loc = Loc::current());

  // Constants.
  Tensor splat(double value, Shape shape, DType dtype, Loc loc = Loc::current());
  Tensor constant(const std::vector<int64_t> &values, Shape shape, DType dtype,
                  Loc loc = Loc::current());
  /// A floating-point constant (tables such as rotary cos/sin), rounded to `dtype`.
  Tensor constant(const std::vector<double> &values, Shape shape, DType dtype,
                  Loc loc = Loc::current());

  // Elementwise. Operands of different shapes are broadcast (explicitly, in the IR).
  Tensor add(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor sub(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor mul(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor div(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor pow(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor minimum(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor maximum(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor neg(const Tensor &x, Loc loc = Loc::current());
  Tensor exp(const Tensor &x, Loc loc = Loc::current());
  Tensor log(const Tensor &x, Loc loc = Loc::current());
  Tensor tanh(const Tensor &x, Loc loc = Loc::current());
  Tensor sqrt(const Tensor &x, Loc loc = Loc::current());
  Tensor relu(const Tensor &x, Loc loc = Loc::current());
  Tensor sigmoid(const Tensor &x, Loc loc = Loc::current());
  Tensor compare(Compare predicate, const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b, Loc loc = Loc::current());

  // Shapes and data movement.
  Tensor matmul(const Tensor &a, const Tensor &b, Loc loc = Loc::current());
  Tensor reshape(const Tensor &x, Shape shape, Loc loc = Loc::current());
  Tensor transpose(const Tensor &x, std::vector<int64_t> perm, Loc loc = Loc::current());
  Tensor slice(const Tensor &x, std::vector<int64_t> starts, std::vector<int64_t> limits,
               Loc loc = Loc::current());
  Tensor concat(const std::vector<Tensor> &inputs, int64_t axis, Loc loc = Loc::current());
  Tensor broadcast(const Tensor &x, Shape shape, Loc loc = Loc::current());
  Tensor cast(const Tensor &x, DType dtype, Loc loc = Loc::current());
  Tensor gather(const Tensor &data, const Tensor &indices, int64_t axis, Loc loc = Loc::current());
  Tensor reduce(ReduceKind kind, const Tensor &x, std::vector<int64_t> axes, bool keepDims,
                Loc loc = Loc::current());
  Tensor softmax(const Tensor &x, int64_t axis, Loc loc = Loc::current());

  // Coarse ops.
  Tensor linear(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                Loc loc = Loc::current());
  Tensor embedding(const Tensor &table, const Tensor &ids, Loc loc = Loc::current());
  Tensor layerNorm(const Tensor &x, const Tensor &weight, std::optional<Tensor> bias,
                   double epsilon = 1e-5, Loc loc = Loc::current());
  Tensor rmsNorm(const Tensor &x, const Tensor &weight, double epsilon = 1e-6,
                 Loc loc = Loc::current());
  Tensor attention(const Tensor &q, const Tensor &k, const Tensor &v,
                   const AttentionOptions &options = {}, Loc loc = Loc::current());
  Tensor gelu(const Tensor &x, Gelu approximation = Gelu::erf, Loc loc = Loc::current());
  Tensor crossEntropy(const Tensor &logits, const Tensor &labels, Loc loc = Loc::current());
  /// Cumulative sum along `axis` (mega.cumsum).
  Tensor cumsum(const Tensor &x, int64_t axis, Loc loc = Loc::current());

  // Mixture of experts (ir/MegaMoeOps.td): tokens t... are leading dims, routing weights
  // [t..., E] (non-zero = routed), routed tensors [E, t..., h].
  /// 1 at the k largest entries of each last-dim row, 0 elsewhere (ties: lower index).
  Tensor topkMask(const Tensor &x, int64_t k, Loc loc = Loc::current());
  /// x [t..., h] -> [E, t..., h]: token t's copy for each expert it is routed to, times w.
  Tensor moeDispatch(const Tensor &x, const Tensor &weights, Loc loc = Loc::current());
  /// y [E, t..., h] -> [t..., h]: the routed rows of each token summed, weighted by w.
  Tensor moeCombine(const Tensor &y, const Tensor &weights, Loc loc = Loc::current());
  /// Each expert's nn.Linear (weight [E, out, in]) on its routed rows; `topk` routed experts
  /// per token (the cost).
  Tensor moeMatmul(const Tensor &x, const Tensor &weight, const Tensor &weights, int64_t topk,
                   Loc loc = Loc::current());

  /// True once an error has been recorded.
  bool failed() const;
  /// "file.cpp:42: in h3.attn: matmul contraction dims differ: ..." (empty if none).
  const std::string &error() const;
  /// Records an error at `loc` (for checks a model makes itself).
  void fail(std::string message, Loc loc = Loc::current());

  /// Completes the function (inputs, parameters, outputs) and verifies it. Returns the new
  /// builtin.module, owned by the caller, or nullptr with error() set.
  mlir::Operation *finish();

private:
  struct Impl;
  Impl *impl_;
  friend struct Impl;
};

Tensor operator+(const Tensor &a, const Tensor &b);
Tensor operator-(const Tensor &a, const Tensor &b);
Tensor operator*(const Tensor &a, const Tensor &b);
Tensor operator/(const Tensor &a, const Tensor &b);
Tensor operator-(const Tensor &x);
Tensor operator*(const Tensor &x, double s);
Tensor operator*(double s, const Tensor &x);
Tensor operator+(const Tensor &x, double s);
Tensor operator-(double s, const Tensor &x);

} // namespace megac::dsl
