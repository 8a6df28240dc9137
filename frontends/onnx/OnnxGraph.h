// Internal to frontends/onnx: the graph importer's value table and the per-node context that
// the op handlers (OnnxOps.cpp) build mega IR through.
#pragma once

#include "frontends/onnx/ConstTensor.h"
#include "frontends/onnx/OnnxImporter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include "onnx/onnx_pb.h"

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace megac::onnx_import {

/// One ONNX value: known at import time (`constant`, or an undecoded `initializer`), or a
/// run-time mega value. A constant gets a `value` once something needs it as an operand.
/// A sequence value (SplitToSequence, SequenceInsert, ...) is a list of tensor values, known at
/// import time; sequence ops rearrange it and no IR sees it.
struct ValueInfo {
  std::shared_ptr<const ConstTensor> constant;
  const onnx::TensorProto *initializer = nullptr;
  mlir::Value value;
  ElemType type = ElemType::undefined;
  Shape shape;
  std::shared_ptr<const std::vector<ValueInfo>> sequence;
  bool isConstant() const { return constant || initializer; }
};

class GraphImporter;

/// What a handler sees of the node it converts. Errors go through fail(), which names the op
/// type, the node and the opset at the node's location.
class NodeContext {
public:
  NodeContext(GraphImporter &g, const onnx::NodeProto &node, int64_t index, int64_t opset);

  const onnx::NodeProto &node() const { return node_; }
  const std::string &opType() const { return node_.op_type(); }
  int64_t opset() const { return opset_; }
  mlir::Location loc() const { return loc_; }
  mlir::OpBuilder &builder();
  mlir::MLIRContext *context();

  /// Emits "<OpType> (node 'n', opset 17): <message>" at the node and returns failure.
  mlir::LogicalResult fail(const llvm::Twine &message);

  // Inputs. Optional inputs are absent when missing or named "".
  int numInputs() const { return node_.input_size(); }
  bool hasInput(int i) const;
  ValueInfo &input(int i);
  const Shape &shape(int i) { return input(i).shape; }
  ElemType type(int i) { return input(i).type; }
  int64_t rank(int i) { return int64_t(input(i).shape.size()); }
  /// The constant value of input i, or nullptr when it is computed at run time (or failed to
  /// decode: then an error has been emitted and failed() is set).
  const ConstTensor *constant(int i);
  /// Input i as a mega value (materializing constants).
  mlir::FailureOr<mlir::Value> value(int i);
  /// Input i broadcast to `shape` (splat constants are materialized at that shape).
  mlir::FailureOr<mlir::Value> valueAs(int i, const Shape &shape);
  /// A constant integer input, e.g. Reshape's shape; errors name `what` when it is missing,
  /// computed at run time or not integer.
  mlir::FailureOr<std::vector<int64_t>> intsInput(int i, const char *what);
  /// A constant scalar input as a double.
  mlir::FailureOr<double> scalarInput(int i, const char *what);
  /// Input i's constant; errors name `what` when it is missing or computed at run time.
  mlir::FailureOr<const ConstTensor *> constantInput(int i, const char *what);

  // Attributes.
  const onnx::AttributeProto *attr(const std::string &name) const;
  int64_t attrInt(const std::string &name, int64_t fallback) const;
  double attrFloat(const std::string &name, double fallback) const;
  std::optional<std::vector<int64_t>> attrInts(const std::string &name) const;
  std::string attrString(const std::string &name, const std::string &fallback) const;

  // Outputs.
  int numOutputs() const { return node_.output_size(); }
  bool hasOutput(int i) const;
  void setOutput(int i, mlir::Value v);
  void setOutput(int i, ConstTensor t);
  /// Output i is `info` itself (a sequence, or a tensor taken out of one).
  void setOutputInfo(int i, ValueInfo info);
  /// The tensors of sequence input i, or an error when it is a tensor.
  mlir::FailureOr<const std::vector<ValueInfo> *> sequence(int i);

  // Building.
  mlir::Type elementType(ElemType t);
  mlir::RankedTensorType tensorType(const Shape &shape, ElemType t);
  mlir::Value materialize(const ConstTensor &t);
  mlir::Value splat(double v, ElemType t, const Shape &shape);
  mlir::Value broadcast(mlir::Value v, const Shape &shape);
  mlir::Value reshape(mlir::Value v, const Shape &shape);
  mlir::Value transpose(mlir::Value v, const std::vector<int64_t> &perm);
  mlir::Value cast(mlir::Value v, ElemType to);

  /// Normalizes axis for `rank`, or emits an error naming `what`.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank, const char *what);

  bool failed() const { return failed_; }

private:
  GraphImporter &g_;
  const onnx::NodeProto &node_;
  int64_t opset_;
  mlir::Location loc_;
  bool failed_ = false;
};

/// Converts one node whose inputs may be run-time values.
using OpHandler = std::function<mlir::LogicalResult(NodeContext &)>;
/// Folds one node whose inputs are all constants (Shape/Size need only static shapes).
using FoldHandler = std::function<mlir::LogicalResult(NodeContext &)>;

const std::map<std::string, OpHandler> &opHandlers();
const std::map<std::string, FoldHandler> &foldHandlers();
/// Ops whose fold needs only input shapes (Shape, Size), not values.
bool foldsOnShapes(const std::string &opType);

// Shape-determining arguments of ops, shared by their fold and run-time forms (OnnxShapes.cpp).
// Each reads attributes or constant inputs as the node's opset defines them and validates
// them against input 0's shape, emitting located errors.

/// Reshape's result shape (-1 inferred, 0 copied unless allowzero).
mlir::FailureOr<Shape> reshapeTarget(NodeContext &c);
mlir::FailureOr<Shape> flattenTarget(NodeContext &c);
mlir::FailureOr<Shape> squeezeTarget(NodeContext &c);
mlir::FailureOr<Shape> unsqueezeTarget(NodeContext &c);
/// Expand's result: input 0's shape broadcast with the `shape` input.
mlir::FailureOr<Shape> expandTarget(NodeContext &c);
mlir::FailureOr<std::vector<int64_t>> transposePerm(NodeContext &c);
/// One normalized entry per dim of input 0.
mlir::FailureOr<std::vector<SliceDim>> sliceDims(NodeContext &c);
/// Split's axis (normalized) and the size of each output along it.
mlir::FailureOr<std::pair<int64_t, std::vector<int64_t>>> splitSizes(NodeContext &c);
/// Trilu's diagonal offset: the optional `k` input, else 0.
mlir::FailureOr<int64_t> triluOffset(NodeContext &c);
/// The slice of `shape` each Split output k takes: sizes[k] along `axis`, after the earlier ones.
std::vector<std::vector<SliceDim>> splitSlices(const Shape &shape, int64_t axis,
                                               const std::vector<int64_t> &sizes);
/// A reduction's axes (normalized, sorted, unique; empty means none), and keepdims.
struct ReduceArgs {
  std::vector<int64_t> axes;
  bool keepDims = true;
};
mlir::FailureOr<ReduceArgs> reduceArgs(NodeContext &c);
/// Tile's repeats, one per dim, >= 0.
mlir::FailureOr<std::vector<int64_t>> tileRepeats(NodeContext &c);

/// Checks that a Dropout node is in inference mode, where it is the identity.
mlir::LogicalResult checkDropoutIsIdentity(NodeContext &c);

/// Checks a TensorProto's type, dims and data size; errors name it as `what`.
mlir::LogicalResult checkTensor(const onnx::TensorProto &t, mlir::Location loc,
                                const std::string &what);
/// ONNX TensorProto -> constant tensor (raw_data or typed fields); errors name the tensor.
mlir::FailureOr<ConstTensor> decodeTensor(const onnx::TensorProto &t, mlir::Location loc,
                                          const std::string &what);
/// ONNX TensorProto -> host tensor for a weight, reading raw_data directly.
/// Releases t's raw_data once copied.
mlir::FailureOr<megac::HostTensor> decodeWeight(onnx::TensorProto &t, mlir::Location loc);

class GraphImporter {
public:
  /// Weights' raw_data is released from `model` as it is copied out.
  GraphImporter(mlir::MLIRContext &ctx, onnx::ModelProto &model, int64_t opset);
  mlir::FailureOr<OnnxImport> run();

  mlir::MLIRContext &ctx;
  mlir::OpBuilder builder;
  std::map<std::string, ValueInfo> values;

  /// Decodes an initializer on first use.
  const ConstTensor *constantOf(ValueInfo &info, mlir::Location loc, const std::string &name);
  mlir::FailureOr<mlir::Value> materializeValue(ValueInfo &info, mlir::Location loc,
                                                const std::string &name);

private:
  mlir::LogicalResult declareValues();
  std::set<std::string> findParameters();
  mlir::LogicalResult importNode(const onnx::NodeProto &node, int64_t index);
  /// Loop with a constant trip count: the body imported once per iteration (OnnxLoop.cpp).
  mlir::LogicalResult importLoop(NodeContext &c, int64_t index);
  /// TopK as the router of a mixture-of-experts block (transformers' MixtralSparseMoeBlock):
  /// the whole block raised to mega's MoE ops, its nodes added to skipped_ (OnnxMoe.cpp).
  mlir::LogicalResult importMoeBlock(NodeContext &c, int64_t index);
  bool nodeFolds(const onnx::NodeProto &node, const std::set<std::string> &constants) const;

  onnx::GraphProto &graph_;
  int64_t opset_;
  /// Element counts of values from ONNX shape inference, where static.
  std::map<std::string, int64_t> inferredElements_;
  /// Nodes a raised block (a mixture of experts) replaced: left out of the import.
  std::set<int64_t> skipped_;
  mlir::OwningOpRef<mlir::ModuleOp> module_;
  mlir::func::FuncOp func_;
  std::vector<mlir::Type> argTypes_;
  std::vector<mlir::DictionaryAttr> argAttrs_;
  megac::TensorMap weights_;
};

/// The MLIR element type of a mega element type (null for types mega IR does not have).
mlir::Type elementTypeOf(mlir::MLIRContext &ctx, ElemType t);
/// The element type of a ranked tensor type, as ONNX numbers it (undefined if not mega's).
ElemType elemTypeOf(mlir::Type tensorType);

/// The location of a node: NameLoc("<node name>"(NameLoc("<OpType>"))).
mlir::Location nodeLocation(mlir::MLIRContext &ctx, const onnx::NodeProto &node, int64_t index);

} // namespace megac::onnx_import
