// Internal to the graph DSL: the builder's state (GraphBuilder::Impl: the module being built,
// the signature, the first error) and the checks and op makers GraphBuilder*.cpp share.
#pragma once

#include "frontends/dsl/GraphBuilder.h"

#include "ir/MegaOps.h"
#include "ir/ShapeRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <type_traits>
#include <vector>

namespace megac::dsl {

namespace rules = mega::shape;

inline bool isFloat(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16;
}
inline bool isInt(DType t) { return t == DType::i64 || t == DType::i32; }
inline rules::Dims dims(const Shape &s) { return {s.data(), s.size()}; }

struct GraphBuilder::Impl {
  GraphBuilder &self;
  mlir::MLIRContext &ctx;
  mlir::OpBuilder b;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  mlir::func::FuncOp func;
  std::vector<std::string> scopes;
  std::vector<mlir::Type> argTypes;
  std::vector<mlir::DictionaryAttr> argAttrs;
  std::vector<mlir::Value> outputs;
  std::vector<mlir::DictionaryAttr> outputAttrs;
  std::vector<std::string> argNames;
  std::string error;

  Impl(GraphBuilder &self, mlir::MLIRContext &ctx, std::string_view name)
      : self(self), ctx(ctx), b(&ctx) {
    ctx.loadDialect<mega::MegaDialect, mlir::func::FuncDialect>();
    module = mlir::ModuleOp::create(mlir::UnknownLoc::get(&ctx));
    b.setInsertionPointToEnd(module->getBody());
    func =
        mlir::func::FuncOp::create(b, mlir::UnknownLoc::get(&ctx), name, b.getFunctionType({}, {}));
    b.setInsertionPointToEnd(func.addEntryBlock());
  }

  mlir::Type elementType(DType t) {
    switch (t) {
    case DType::f64:
      return b.getF64Type();
    case DType::f32:
      return b.getF32Type();
    case DType::bf16:
      return b.getBF16Type();
    case DType::f16:
      return b.getF16Type();
    case DType::i64:
      return b.getI64Type();
    case DType::i32:
      return b.getI32Type();
    case DType::i1:
      return b.getI1Type();
    }
    return {};
  }
  mlir::RankedTensorType tensorType(const Shape &shape, DType t) {
    return mlir::RankedTensorType::get(shape, elementType(t));
  }

  /// file:line:col of the DSL call, named by the scope path. Operators (x + y) cannot see
  /// their caller, so their ops carry the scope path alone.
  mlir::Location location(const Loc &loc);

  void fail(const std::string &message, const Loc &loc) {
    if (!error.empty())
      return;
    std::string file = loc.file_name();
    std::string path = self.scopePath();
    error = file + ":" + std::to_string(loc.line()) + ": " +
            (path.empty() ? "" : "in " + path + ": ") + message;
  }

  /// True when all tensors are usable; records an error for ones from another builder.
  bool usable(std::initializer_list<const Tensor *> tensors, const Loc &loc) {
    if (!error.empty())
      return false;
    for (const Tensor *t : tensors) {
      if (!t->valid()) {
        fail("an operand is an invalid (default-constructed) tensor", loc);
        return false;
      }
      if (t->builder_ != &self) {
        fail("an operand belongs to another GraphBuilder", loc);
        return false;
      }
    }
    return true;
  }

  mlir::Value value(const Tensor &t) { return mlir::Value::getFromOpaquePointer(t.value_); }

  Tensor wrap(mlir::Value v, const Shape &shape, DType dtype) {
    Tensor t;
    t.builder_ = &self;
    t.value_ = v.getAsOpaquePointer();
    t.shape_ = shape;
    t.dtype_ = dtype;
    return t;
  }
  /// An OpTy of `operands` once the shape rule's answer `r` holds: its result has r's shape and
  /// `dtype`.
  template <typename OpTy, typename... Operands>
  Tensor makeChecked(const rules::Result &r, DType dtype, const Loc &loc, Operands &&...operands) {
    if (!check(r, loc))
      return {};
    auto op = OpTy::create(b, location(loc), tensorType(r.shape, dtype),
                           std::forward<Operands>(operands)...);
    return wrap(op.getResult(), r.shape, dtype);
  }
  /// moe_dispatch and moe_combine: `a` and `weights` of one floating type, shaped by `rule`
  /// (defined in GraphBuilderCoarse.cpp).
  template <typename OpTy>
  Tensor moePair(const char *op, const Tensor &a, const Tensor &weights,
                 rules::Result (*rule)(rules::Dims, rules::Dims), const Loc &loc);
  /// A constant of `values` once `typeOk` holds (else `typeError`) and their count fits `shape`;
  /// `elements(type)` turns them into the attribute's elements (defined in GraphBuilder.cpp).
  template <typename T, typename ElementsFn>
  Tensor constant(const std::vector<T> &values, const Shape &shape, DType dtype, const Loc &loc,
                  bool typeOk, const char *typeError, ElementsFn elements);
  Tensor wrap(mlir::Value v, DType dtype) {
    auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
    return wrap(v, Shape(type.getShape().begin(), type.getShape().end()), dtype);
  }

  /// Uses a shape rule's answer, or records its error.
  bool check(const rules::Result &r, const Loc &loc) {
    if (!r.ok())
      fail(r.error, loc);
    return r.ok();
  }
  bool check(const std::string &why, const Loc &loc) {
    if (!why.empty())
      fail(why, loc);
    return why.empty();
  }

  /// Brings `a` and `b` to their common broadcast shape.
  bool broadcastPair(Tensor &a, Tensor &b, const char *op, const Loc &loc) {
    if (a.dtype() != b.dtype()) {
      fail(std::string(op) + ": element types differ (" + dtypeName(a.dtype()) + " vs " +
               dtypeName(b.dtype()) + "); cast one first",
           loc);
      return false;
    }
    rules::Result r = rules::broadcast(dims(a.shape()), dims(b.shape()));
    if (!check(r.ok() ? r : rules::Result::fail(std::string(op) + ": " + r.error), loc))
      return false;
    if (a.shape() != r.shape)
      a = self.broadcast(a, r.shape, loc);
    if (b.shape() != r.shape)
      b = self.broadcast(b, r.shape, loc);
    return error.empty();
  }

  template <typename OpTy>
  Tensor binary(Tensor a, Tensor b, const char *op, const Loc &loc, bool floatOnly = false) {
    if (!usable({&a, &b}, loc) || !broadcastPair(a, b, op, loc))
      return {};
    if (floatOnly && !isFloat(a.dtype()))
      return fail(std::string(op) + " needs floating-point operands", loc), Tensor{};
    if (a.dtype() == DType::i1)
      return fail(std::string(op) + " does not take i1 operands", loc), Tensor{};
    auto op_ = OpTy::create(this->b, location(loc), value(a), value(b));
    return wrap(op_.getResult(), a.shape(), a.dtype());
  }

  template <typename OpTy> Tensor unary(const Tensor &x, const char *op, const Loc &loc) {
    if (!usable({&x}, loc))
      return {};
    if (!isFloat(x.dtype()) && !std::is_same_v<OpTy, mega::NegOp>)
      return fail(std::string(op) + " needs a floating-point operand", loc), Tensor{};
    auto op_ = OpTy::create(b, location(loc), value(x));
    return wrap(op_.getResult(), x.shape(), x.dtype());
  }
};

} // namespace megac::dsl
