// Internal to frontends/onnx: helpers shared by the op handlers (OnnxOps*.cpp).
#pragma once

#include "frontends/onnx/OnnxGraph.h"

#include "ir/MegaOps.h"

namespace megac::onnx_import {

/// Builds mega ops at the node's location; operands of binary ops have the same type.
struct Emitter {
  NodeContext &c;

  template <typename OpTy> mlir::Value make(mlir::Value x) {
    return OpTy::create(c.builder(), c.loc(), x.getType(), x);
  }
  template <typename OpTy> mlir::Value make(mlir::Value a, mlir::Value b) {
    return OpTy::create(c.builder(), c.loc(), a.getType(), a, b);
  }
  /// A constant filled with `value`, with the type of `like`.
  mlir::Value splatLike(double value, mlir::Value like);
  mlir::Value compare(mega::ComparePredicate p, mlir::Value a, mlir::Value b);
  mlir::Value select(mlir::Value cond, mlir::Value a, mlir::Value b);
  /// Reduces over normalized axes (at least one).
  mlir::Value reduce(mega::ReduceKind kind, mlir::Value x, const std::vector<int64_t> &axes,
                     bool keepDims);

  static ElemType typeOf(mlir::Value v);
  static Shape shapeOf(mlir::Value v);
};

mlir::LogicalResult requireFloat(NodeContext &c, int i);
/// Any mega element type but BOOL.
mlir::LogicalResult requireNumeric(NodeContext &c, int i);
mlir::LogicalResult requireSameType(NodeContext &c, int i, int j);
/// The numpy broadcast of the given inputs' shapes (absent inputs skipped).
mlir::FailureOr<Shape> broadcastInputs(NodeContext &c, const std::vector<int> &inputs);

void addElementwiseHandlers(std::map<std::string, OpHandler> &handlers);
void addShapeHandlers(std::map<std::string, OpHandler> &handlers);
void addLossHandlers(std::map<std::string, OpHandler> &handlers);
void addIndexHandlers(std::map<std::string, OpHandler> &handlers);
void addSequenceHandlers(std::map<std::string, OpHandler> &handlers);

// Folds of the element-indexing ops (OnnxOpsIndex.cpp), listed in foldHandlers().
mlir::LogicalResult foldCumSum(NodeContext &c);
mlir::LogicalResult foldGatherElements(NodeContext &c);
mlir::LogicalResult foldScatterElements(NodeContext &c);
mlir::LogicalResult foldScatterNd(NodeContext &c);

} // namespace megac::onnx_import
