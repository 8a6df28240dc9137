// The graph DSL: builds mega IR, checking shapes with ir/ShapeRules before each op is made;
// here the signature, constants, elementwise and data-movement ops, and the operators (the
// coarse ops are in GraphBuilderCoarse.cpp).
#include "frontends/dsl/GraphBuilderImpl.h"
#include "support/DTypeName.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

using namespace mlir;

namespace megac::dsl {

const char *dtypeName(DType dtype) { return dtypeNameOr(dtype, "?"); }

// Defined in the operators' file: their Loc::current() is this __FILE__.
Location GraphBuilder::Impl::location(const Loc &loc) {
  bool fromOperator = std::string_view(loc.file_name()) == __FILE__;
  Location fileLoc = fromOperator
                         ? Location(UnknownLoc::get(&ctx))
                         : FileLineColLoc::get(&ctx, loc.file_name(), loc.line(), loc.column());
  std::string path = self.scopePath();
  return path.empty() ? fileLoc : Location(NameLoc::get(StringAttr::get(&ctx, path), fileLoc));
}

//===----------------------------------------------------------------------===//
// Scopes, signature, errors
//===----------------------------------------------------------------------===//

GraphBuilder::GraphBuilder(MLIRContext &ctx, std::string_view functionName)
    : impl_(new Impl(*this, ctx, functionName)) {}
GraphBuilder::~GraphBuilder() { delete impl_; }

GraphBuilder::Scope GraphBuilder::scope(std::string_view name) {
  impl_->scopes.emplace_back(name);
  return Scope(this);
}
GraphBuilder::Scope::~Scope() {
  if (builder_)
    builder_->impl_->scopes.pop_back();
}
GraphBuilder::Scope::Scope(Scope &&other) noexcept : builder_(other.builder_) {
  other.builder_ = nullptr;
}

std::string GraphBuilder::scopePath() const {
  std::string path;
  for (const std::string &s : impl_->scopes)
    path += (path.empty() ? "" : ".") + s;
  return path;
}

bool GraphBuilder::failed() const { return !impl_->error.empty(); }
const std::string &GraphBuilder::error() const { return impl_->error; }
void GraphBuilder::fail(std::string message, Loc loc) { impl_->fail(message, loc); }

Tensor GraphBuilder::parameter(std::string_view name, Shape shape, DType dtype, Init init,
                               Loc loc) {
  Impl &I = *impl_;
  if (failed())
    return {};
  std::string path = scopePath();
  std::string full = path.empty() ? std::string(name) : path + "." + std::string(name);
  if (!isFloat(dtype))
    return I.fail("parameter " + full + " must have a floating-point type", loc), Tensor{};
  for (int64_t d : shape)
    if (d < 1)
      return I.fail("parameter " + full + " has non-positive dim in " + rules::str(dims(shape)),
                    loc),
             Tensor{};
  for (const std::string &existing : I.argNames)
    if (existing == full)
      return I.fail("parameter " + full + " is declared twice", loc), Tensor{};
  if (init.kind == Init::Kind::normal && !(init.stddev > 0))
    return I.fail("parameter " + full + " needs a positive init std", loc), Tensor{};
  auto kind = init.kind == Init::Kind::normal  ? mega::InitKind::normal
              : init.kind == Init::Kind::zeros ? mega::InitKind::zeros
                                               : mega::InitKind::ones;
  auto initAttr = mega::InitAttr::get(&I.ctx, kind, llvm::APFloat(init.stddev));
  Type type = I.tensorType(shape, dtype);
  Value arg = I.func.getBody().front().addArgument(type, I.location(loc));
  I.argTypes.push_back(type);
  I.argNames.push_back(full);
  I.argAttrs.push_back(
      I.b.getDictionaryAttr({I.b.getNamedAttr(mega::kParamAttr, I.b.getStringAttr(full)),
                             I.b.getNamedAttr(mega::kInitAttr, initAttr)}));
  return I.wrap(arg, shape, dtype);
}

Tensor GraphBuilder::stackedParameter(std::string_view name, Shape shape, DType dtype, Init init,
                                      const std::vector<std::string> &members, Loc loc) {
  Impl &I = *impl_;
  if (!shape.empty() && shape[0] != static_cast<int64_t>(members.size()))
    return I.fail("parameter " + std::string(name) + " stacks " + std::to_string(members.size()) +
                      " tensors on a dim of " + std::to_string(shape[0]),
                  loc),
           Tensor{};
  Tensor t = parameter(name, shape, dtype, init, loc);
  if (!t.valid())
    return t;
  std::string path = scopePath();
  llvm::SmallVector<mlir::Attribute> names;
  for (const std::string &m : members)
    names.push_back(I.b.getStringAttr(path.empty() ? m : path + "." + m));
  mlir::NamedAttrList attrs(I.argAttrs.back());
  attrs.set(mega::kSourceStackAttr, I.b.getArrayAttr(names));
  I.argAttrs.back() = attrs.getDictionary(&I.ctx);
  return t;
}

Tensor GraphBuilder::input(std::string_view name, Shape shape, DType dtype, Loc loc) {
  Impl &I = *impl_;
  if (failed())
    return {};
  for (int64_t d : shape)
    if (d < 1)
      return I.fail("input " + std::string(name) + " has non-positive dim in " +
                        rules::str(dims(shape)),
                    loc),
             Tensor{};
  Type type = I.tensorType(shape, dtype);
  Value arg = I.func.getBody().front().addArgument(type, I.location(loc));
  I.argTypes.push_back(type);
  I.argNames.push_back(std::string(name));
  I.argAttrs.push_back(
      I.b.getDictionaryAttr({I.b.getNamedAttr(mega::kInputAttr, I.b.getStringAttr(name))}));
  return I.wrap(arg, shape, dtype);
}

void GraphBuilder::output(std::string_view name, const Tensor &value, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&value}, loc))
    return;
  I.outputs.push_back(I.value(value));
  I.outputAttrs.push_back(
      I.b.getDictionaryAttr({I.b.getNamedAttr(mega::kOutputAttr, I.b.getStringAttr(name))}));
}

Operation *GraphBuilder::finish() {
  Impl &I = *impl_;
  if (failed())
    return nullptr;
  if (I.outputs.empty()) {
    I.fail("the graph has no outputs; call output()", Loc::current());
    return nullptr;
  }
  func::ReturnOp::create(I.b, I.func.getLoc(), I.outputs);
  SmallVector<Type> resultTypes;
  for (Value v : I.outputs)
    resultTypes.push_back(v.getType());
  I.func.setFunctionType(I.b.getFunctionType(I.argTypes, resultTypes));
  I.func.setAllArgAttrs(I.argAttrs);
  I.func.setAllResultAttrs(I.outputAttrs);

  // The shape rules ran before each op; this catches what only a verifier sees.
  std::string diagnostics;
  {
    ScopedDiagnosticHandler handler(&I.ctx, [&](Diagnostic &diag) {
      llvm::raw_string_ostream os(diagnostics);
      os << diag.getLocation() << ": " << diag.str();
      return success();
    });
    if (mlir::failed(verify(*I.module))) {
      I.error = "the built graph does not verify: " + diagnostics;
      return nullptr;
    }
  }
  return I.module.release().getOperation();
}

//===----------------------------------------------------------------------===//
// Constants and elementwise
//===----------------------------------------------------------------------===//

Tensor GraphBuilder::splat(double value, Shape shape, DType dtype, Loc loc) {
  Impl &I = *impl_;
  if (failed())
    return {};
  RankedTensorType type = I.tensorType(shape, dtype);
  Attribute element;
  if (isFloat(dtype))
    element = FloatAttr::get(type.getElementType(), value);
  else
    element = IntegerAttr::get(type.getElementType(), static_cast<int64_t>(value));
  auto op = mega::ConstantOp::create(I.b, I.location(loc), DenseElementsAttr::get(type, element));
  return I.wrap(op.getResult(), shape, dtype);
}

template <typename T, typename ElementsFn>
Tensor GraphBuilder::Impl::constant(const std::vector<T> &values, const Shape &shape, DType dtype,
                                    const Loc &loc, bool typeOk, const char *typeError,
                                    ElementsFn elements) {
  if (!typeOk)
    return fail(typeError, loc), Tensor{};
  if (static_cast<int64_t>(values.size()) != rules::numElements(dims(shape)))
    return fail("constant has " + std::to_string(values.size()) + " values for shape " +
                    rules::str(dims(shape)),
                loc),
           Tensor{};
  RankedTensorType type = tensorType(shape, dtype);
  auto op =
      mega::ConstantOp::create(b, location(loc), DenseElementsAttr::get(type, elements(type)));
  return wrap(op.getResult(), shape, dtype);
}

Tensor GraphBuilder::constant(const std::vector<int64_t> &values, Shape shape, DType dtype,
                              Loc loc) {
  if (failed())
    return {};
  return impl_->constant(values, shape, dtype, loc, isInt(dtype),
                         "integer constants need an integer type", [&](RankedTensorType type) {
                           SmallVector<APInt> ints;
                           unsigned width = type.getElementType().getIntOrFloatBitWidth();
                           for (int64_t v : values)
                             ints.emplace_back(width, static_cast<uint64_t>(v), /*isSigned=*/true);
                           return ints;
                         });
}

Tensor GraphBuilder::constant(const std::vector<double> &values, Shape shape, DType dtype,
                              Loc loc) {
  if (failed())
    return {};
  return impl_->constant(values, shape, dtype, loc, isFloat(dtype),
                         "floating-point constants need a float type", [&](RankedTensorType type) {
                           const llvm::fltSemantics &semantics =
                               mlir::cast<FloatType>(type.getElementType()).getFloatSemantics();
                           SmallVector<APFloat> floats;
                           floats.reserve(values.size());
                           for (double v : values) {
                             APFloat f(v);
                             bool lost = false;
                             f.convert(semantics, APFloat::rmNearestTiesToEven, &lost);
                             floats.push_back(f);
                           }
                           return floats;
                         });
}

Tensor GraphBuilder::add(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::AddOp>(a, b, "add", loc);
}
Tensor GraphBuilder::sub(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::SubOp>(a, b, "sub", loc);
}
Tensor GraphBuilder::mul(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::MulOp>(a, b, "mul", loc);
}
Tensor GraphBuilder::div(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::DivOp>(a, b, "div", loc);
}
Tensor GraphBuilder::pow(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::PowOp>(a, b, "pow", loc, /*floatOnly=*/true);
}
Tensor GraphBuilder::minimum(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::MinOp>(a, b, "min", loc);
}
Tensor GraphBuilder::maximum(const Tensor &a, const Tensor &b, Loc loc) {
  return impl_->binary<mega::MaxOp>(a, b, "max", loc);
}
Tensor GraphBuilder::neg(const Tensor &x, Loc loc) {
  return impl_->unary<mega::NegOp>(x, "neg", loc);
}
Tensor GraphBuilder::exp(const Tensor &x, Loc loc) {
  return impl_->unary<mega::ExpOp>(x, "exp", loc);
}
Tensor GraphBuilder::log(const Tensor &x, Loc loc) {
  return impl_->unary<mega::LogOp>(x, "log", loc);
}
Tensor GraphBuilder::tanh(const Tensor &x, Loc loc) {
  return impl_->unary<mega::TanhOp>(x, "tanh", loc);
}
Tensor GraphBuilder::sqrt(const Tensor &x, Loc loc) {
  return impl_->unary<mega::SqrtOp>(x, "sqrt", loc);
}
Tensor GraphBuilder::relu(const Tensor &x, Loc loc) {
  return impl_->unary<mega::ReluOp>(x, "relu", loc);
}
Tensor GraphBuilder::sigmoid(const Tensor &x, Loc loc) {
  return impl_->unary<mega::SigmoidOp>(x, "sigmoid", loc);
}

Tensor GraphBuilder::compare(Compare predicate, const Tensor &a0, const Tensor &b0, Loc loc) {
  Impl &I = *impl_;
  Tensor a = a0, b = b0;
  if (!I.usable({&a, &b}, loc) || !I.broadcastPair(a, b, "compare", loc))
    return {};
  auto op = mega::CompareOp::create(
      I.b, I.location(loc), static_cast<mega::ComparePredicate>(predicate), I.value(a), I.value(b));
  return I.wrap(op.getResult(), a.shape(), DType::i1);
}

Tensor GraphBuilder::where(const Tensor &cond0, const Tensor &a0, const Tensor &b0, Loc loc) {
  Impl &I = *impl_;
  Tensor cond = cond0, a = a0, b = b0;
  if (!I.usable({&cond, &a, &b}, loc) || !I.broadcastPair(a, b, "where", loc))
    return {};
  if (cond.dtype() != DType::i1)
    return I.fail("where: the condition must be i1", loc), Tensor{};
  rules::Result r = rules::broadcast(dims(cond.shape()), dims(a.shape()));
  if (!I.check(r, loc))
    return {};
  if (cond.shape() != r.shape)
    cond = broadcast(cond, r.shape, loc);
  if (a.shape() != r.shape) {
    a = broadcast(a, r.shape, loc);
    b = broadcast(b, r.shape, loc);
  }
  if (failed())
    return {};
  auto op = mega::WhereOp::create(I.b, I.location(loc), I.value(cond), I.value(a), I.value(b));
  return I.wrap(op.getResult(), r.shape, a.dtype());
}

//===----------------------------------------------------------------------===//
// Shapes and data movement
//===----------------------------------------------------------------------===//

Tensor GraphBuilder::matmul(const Tensor &a, const Tensor &b, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&a, &b}, loc))
    return {};
  if (a.dtype() != b.dtype() || !isFloat(a.dtype()))
    return I.fail("matmul needs two floating-point operands of one type", loc), Tensor{};
  rules::Result r = rules::matmul(dims(a.shape()), dims(b.shape()));
  if (!I.check(r, loc))
    return {};
  auto op = mega::MatmulOp::create(I.b, I.location(loc), I.tensorType(r.shape, a.dtype()),
                                   I.value(a), I.value(b));
  return I.wrap(op.getResult(), r.shape, a.dtype());
}

Tensor GraphBuilder::reshape(const Tensor &x, Shape shape, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (rules::numElements(dims(shape)) != rules::numElements(dims(x.shape())))
    return I.fail("cannot reshape " + rules::str(dims(x.shape())) + " to " +
                      rules::str(dims(shape)) + ": element counts differ",
                  loc),
           Tensor{};
  auto op =
      mega::ReshapeOp::create(I.b, I.location(loc), I.tensorType(shape, x.dtype()), I.value(x));
  return I.wrap(op.getResult(), shape, x.dtype());
}

Tensor GraphBuilder::transpose(const Tensor &x, std::vector<int64_t> perm, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  rules::Result r = rules::transpose(dims(x.shape()), dims(perm));
  if (!I.check(r, loc))
    return {};
  auto op = mega::TransposeOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                      I.value(x), perm);
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::slice(const Tensor &x, std::vector<int64_t> starts,
                           std::vector<int64_t> limits, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  std::vector<int64_t> strides(x.rank(), 1);
  rules::Result r = rules::slice(dims(x.shape()), dims(starts), dims(limits), dims(strides));
  if (!I.check(r, loc))
    return {};
  auto op = mega::SliceOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                  I.value(x), starts, limits, strides);
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::concat(const std::vector<Tensor> &inputs, int64_t axis, Loc loc) {
  Impl &I = *impl_;
  if (inputs.empty())
    return I.fail("concat needs at least one input", loc), Tensor{};
  std::vector<rules::Shape> shapes;
  SmallVector<Value> values;
  for (const Tensor &t : inputs) {
    if (!I.usable({&t}, loc))
      return {};
    if (t.dtype() != inputs.front().dtype())
      return I.fail("concat inputs have different element types", loc), Tensor{};
    shapes.push_back(t.shape());
    values.push_back(I.value(t));
  }
  rules::Result r = rules::concat(shapes, axis);
  if (!I.check(r, loc))
    return {};
  auto op = mega::ConcatOp::create(I.b, I.location(loc),
                                   I.tensorType(r.shape, inputs.front().dtype()), values, axis);
  return I.wrap(op.getResult(), r.shape, inputs.front().dtype());
}

Tensor GraphBuilder::broadcast(const Tensor &x, Shape shape, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (!I.check(rules::checkBroadcastsTo(dims(x.shape()), dims(shape)), loc))
    return {};
  auto op =
      mega::BroadcastOp::create(I.b, I.location(loc), I.tensorType(shape, x.dtype()), I.value(x));
  return I.wrap(op.getResult(), shape, x.dtype());
}

Tensor GraphBuilder::cast(const Tensor &x, DType dtype, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (x.dtype() == dtype)
    return x;
  auto op = mega::CastOp::create(I.b, I.location(loc), I.tensorType(x.shape(), dtype), I.value(x));
  return I.wrap(op.getResult(), x.shape(), dtype);
}

Tensor GraphBuilder::gather(const Tensor &data, const Tensor &indices, int64_t axis, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&data, &indices}, loc))
    return {};
  if (!isInt(indices.dtype()))
    return I.fail("gather indices must be i32 or i64", loc), Tensor{};
  rules::Result r = rules::gather(dims(data.shape()), dims(indices.shape()), axis);
  if (!I.check(r, loc))
    return {};
  auto op = mega::GatherOp::create(I.b, I.location(loc), I.tensorType(r.shape, data.dtype()),
                                   I.value(data), I.value(indices), axis);
  return I.wrap(op.getResult(), r.shape, data.dtype());
}

Tensor GraphBuilder::reduce(ReduceKind kind, const Tensor &x, std::vector<int64_t> axes,
                            bool keepDims, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  rules::Result r = rules::reduce(dims(x.shape()), dims(axes), keepDims);
  if (!I.check(r, loc))
    return {};
  auto op = mega::ReduceOp::create(I.b, I.location(loc), I.tensorType(r.shape, x.dtype()),
                                   static_cast<mega::ReduceKind>(kind), I.value(x), axes, keepDims);
  return I.wrap(op.getResult(), r.shape, x.dtype());
}

Tensor GraphBuilder::softmax(const Tensor &x, int64_t axis, Loc loc) {
  Impl &I = *impl_;
  if (!I.usable({&x}, loc))
    return {};
  if (!rules::normalizeAxis(axis, x.rank()))
    return I.fail("softmax axis " + std::to_string(axis) + " is out of range for " +
                      rules::str(dims(x.shape())),
                  loc),
           Tensor{};
  auto op = mega::SoftmaxOp::create(I.b, I.location(loc), I.value(x), axis);
  return I.wrap(op.getResult(), x.shape(), x.dtype());
}

//===----------------------------------------------------------------------===//
// Operators
//===----------------------------------------------------------------------===//

namespace {
GraphBuilder *builderOf(const Tensor &a, const Tensor &b) {
  return a.builder() ? a.builder() : b.builder();
}
Tensor scalarLike(const Tensor &x, double s) {
  return x.builder() ? x.builder()->splat(s, {}, x.dtype()) : Tensor{};
}
} // namespace

Tensor operator+(const Tensor &a, const Tensor &b) {
  GraphBuilder *g = builderOf(a, b);
  return g ? g->add(a, b) : Tensor{};
}
Tensor operator-(const Tensor &a, const Tensor &b) {
  GraphBuilder *g = builderOf(a, b);
  return g ? g->sub(a, b) : Tensor{};
}
Tensor operator*(const Tensor &a, const Tensor &b) {
  GraphBuilder *g = builderOf(a, b);
  return g ? g->mul(a, b) : Tensor{};
}
Tensor operator/(const Tensor &a, const Tensor &b) {
  GraphBuilder *g = builderOf(a, b);
  return g ? g->div(a, b) : Tensor{};
}
Tensor operator-(const Tensor &x) { return x.builder() ? x.builder()->neg(x) : Tensor{}; }
Tensor operator*(const Tensor &x, double s) { return x * scalarLike(x, s); }
Tensor operator*(double s, const Tensor &x) { return scalarLike(x, s) * x; }
Tensor operator+(const Tensor &x, double s) { return x + scalarLike(x, s); }
Tensor operator-(double s, const Tensor &x) { return scalarLike(x, s) - x; }

} // namespace megac::dsl