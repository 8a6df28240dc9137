// ZeRO-2/3 (docs/training-step.md): the shard of a parameter, its gradient accumulator and its
// optimizer state over dp, and the rewrites of the training functions that store them sharded
// (reduce-scattered accumulators, gathered parameters). mega-training-optimizer calls these.
#pragma once

#include "ir/MegaDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace megac::passes::zero {

using mlir::ArrayAttr;
using mlir::ArrayRef;
using mlir::Attribute;
using mlir::DictionaryAttr;
using mlir::LogicalResult;
using mlir::OpBuilder;
using mlir::RankedTensorType;
using mlir::SmallVector;
using mlir::StringRef;
namespace func = mlir::func;

/// One parameter of the step: its argument attributes (name, init), type and accumulator.
struct Param {
  StringRef name;
  DictionaryAttr attrs;
  RankedTensorType type;
};

/// The mesh of a partitioned step (docs/pipeline.md); `mesh` is null on one device.
struct Distribution {
  mega::MeshAttr mesh;
  int64_t stage = 0;
  int64_t zero = 0; // the ZeRO stage, 0..3 (docs/training-step.md)

  explicit operator bool() const { return static_cast<bool>(mesh); }
  int64_t size(StringRef axis) const {
    auto index = mesh.findAxis(axis);
    return index ? mesh.getAxisSizes()[*index] : 1;
  }
};

/// The strings of an array attribute (none for another attribute or null).
SmallVector<StringRef> stringsOf(Attribute attr);

/// The integers of a dense i64 array or an array of integer attributes.
SmallVector<int64_t> integersOf(Attribute attr);

/// The dim ZeRO shards a parameter on over dp, or -1 (kept whole, its gradient all-reduced):
/// ZeRO-1/2/3 shard a parameter's optimizer step (zero >= 2: and its accumulator; zero 3: and the
/// parameter) when its gradient is a partial sum over dp, on dim 0 under ZeRO-1/2 when dp divides
/// it, and under ZeRO-3 on the first dim dp divides (a [6, 16] weight at dp 4: dim 1), else on
/// dim 0 padded (zeroPadded: a bias of 6 at dp 4) unless another axis splits dim 0 already.
int64_t zeroDim(const Distribution &dist, const Param &p);

/// Whether ZeRO shards the parameter: zeroDim >= 0.
bool zeroSharded(const Distribution &dist, const Param &p);

/// ZeRO-3's padded shard of a parameter no dim of which dp divides (docs/training-step.md): dim 0
/// is stored as c = ceil(n0 / dp) rows per rank, rank r's rows [r*c, min((r+1)*c, n0)) then zero
/// rows; gathered as [dp*c, ...] and sliced to [n0, ...], the gradient padded with zero rows to
/// [dp*c, ...] and reduce-scattered. The padding stays zero through AdamW (zero gradient,
/// parameter and moments: a zero update, weight decay included) and adds 0 to the norm.
bool zeroPadded(const Distribution &dist, const Param &p);

/// ZeRO-2/3 shard parameters' gradients over dp: refuses a stage where none can be (under ZeRO-2
/// every parameter a scalar or with a dim 0 dp does not divide; under ZeRO-3, which pads dim 0,
/// every parameter a scalar or split on dim 0 by another axis with no dim dp divides).
LogicalResult checkShardable(func::FuncOp fb, const Distribution &dist, ArrayRef<Param> params);

/// ZeRO-2/3: each sharded parameter's accumulator `acc' = acc + g` in a training function becomes
/// its dp shard, `acc' = acc + reduce_scatter(g)`, the reduce-scatter right after g is computed so
/// the whole micro-batch gradient dies there (docs/training-step.md).
LogicalResult shardAccumulators(func::FuncOp f, const Distribution &dist, ArrayRef<Param> params);

/// ZeRO-3: a sharded parameter argument of `f` becomes its dp shard, all-gathered right before its
/// first use. Where `f` also runs the backward (ops no forward result depends on), the backward's
/// uses read a second all-gather placed before the first of them, so the forward's whole copy dies
/// after its last forward use (reshard after forward); the copy carries `mega.regather` so that CSE
/// keeps it. Without `reshard` every use reads the forward's gather, kept whole until the backward
/// is done with it. A cast of the parameter (mixed precision's bf16/fp16 copy) moves with the
/// gather: each half casts its own gathered copy right before its first use of the cast.
void gatherParameters(func::FuncOp f, const Distribution &dist, ArrayRef<Param> params,
                      bool reshard);

/// A sharded parameter's gradient accumulator: its dp shard under ZeRO-2/3.
RankedTensorType gradType(const Distribution &dist, const Param &p);

/// A parameter as stored: its dp shard under ZeRO-3.
RankedTensorType storedType(const Distribution &dist, const Param &p);

/// The parameter's mega.dim_axes (none: every dim whole) with dp added on its ZeRO dim, after the
/// axes already splitting it: a dp shard of the local tensor.
ArrayAttr dpShardDims(OpBuilder &b, const Distribution &dist, const Param &p);

/// A parameter argument's attributes: under ZeRO-3 a sharded one's dim_axes gain dp on its dim, so
/// codegen's parameter table records the shard's offset and checkpoints reshard.
DictionaryAttr storedAttrs(OpBuilder &b, const Distribution &dist, const Param &p);

/// A moment's type: the parameter's, or its dp shard under ZeRO-1.
RankedTensorType momentType(const Distribution &dist, const Param &p);

/// A state argument's attributes in a partitioned step: its name, global shape and split (the
/// parameter's, plus dp on the ZeRO dim for ZeRO moments and ZeRO-2/3 accumulators), and for
/// accumulators the axes the gradient is a partial sum over (not dp once reduce-scattered).
DictionaryAttr stateAttrs(OpBuilder &b, const Distribution &dist, const Param &p, StringRef prefix);

/// A ZeRO gradient's dp shard type: its ZeRO dim (dim 0 under ZeRO-1/2) divided by dp, rounded
/// up for a padded one (ZeRO-3).
RankedTensorType dpShard(const Distribution &dist, const Param &p);

} // namespace megac::passes::zero
