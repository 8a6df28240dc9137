// Reading a TransformerShape off a forward graph (planner/ModelShape.h).
#include "planner/ModelShape.h"

#include "ir/MegaOps.h"
#include "planner/ModelStats.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <map>

namespace megac::planner {

namespace {

llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape();
}

} // namespace

ModelShapeResult computeModelShape(mlir::ModuleOp module, const std::string &name) {
  ModelStatsResult stats = computeModelStats(module);
  if (!stats.stats)
    return {std::nullopt, stats.error};
  mlir::func::FuncOp func = *module.getOps<mlir::func::FuncOp>().begin();

  TransformerShape shape;
  shape.name = name;
  shape.parameters = stats.stats->parameters;
  shape.experts = stats.stats->experts;
  shape.topk = stats.stats->topk;
  // Samples: the token input's leading dim; its other dims are the sequence.
  int64_t batch = 0, seq = 0;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto input = func.getArgAttrOfType<mlir::StringAttr>(i, mega::kInputAttr);
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(func.getArgument(i).getType());
    if (!input || !type || type.getRank() != 2 ||
        !mlir::isa<mlir::IntegerType>(type.getElementType()))
      continue;
    if (input.getValue() == "input_ids" || input.getValue() == "decoder_input_ids") {
      batch = type.getDimSize(0);
      seq += type.getDimSize(1);
    }
  }
  if (batch <= 0 || seq <= 0)
    return {std::nullopt, "the model has no input_ids [batch, seq] input to plan for"};
  shape.seq = seq;
  shape.forwardFlopsPerSample = double(stats.stats->forwardFlops) / double(batch);
  shape.forwardGemmFlopsPerSample = double(stats.stats->forwardMatmulFlops) / double(batch);

  // Blocks: one self-attention each (cross-attention, whose keys come from elsewhere with
  // another length or producer, belongs to a decoder block that has its own self-attention).
  int64_t selfAttention = 0, crossAttention = 0;
  std::map<int64_t, int64_t> linearOut; // output dim -> count, among linears reading [.., hidden]
  int64_t tableRows = 0, tableCols = 0, headCount = 0;
  mlir::Value table;
  bool tied = false, biases = false;
  func.walk([&](mlir::Operation *op) {
    // Any biased linear or LayerNorm bias: GPT/BERT-style blocks (T5 and Llama have neither).
    if (auto linear = mlir::dyn_cast<mega::LinearOp>(op))
      biases = biases || linear.getBias();
    else if (auto norm = mlir::dyn_cast<mega::LayerNormOp>(op))
      biases = biases || norm.getBias();
    else if (mlir::isa<mega::RopeOp>(op))
      shape.rope = true;
    else if (auto dropout = mlir::dyn_cast<mega::DropoutOp>(op))
      shape.dropout = std::max(shape.dropout, dropout.getRatio().convertToDouble());
    if (auto attention = mlir::dyn_cast<mega::AttentionOp>(op)) {
      auto q = shapeOf(attention.getQuery()), k = shapeOf(attention.getKey());
      shape.heads = q[2];
      shape.kvHeads = k[2];
      headCount = q[2] * q[3];
      bool cross = attention.getQuery().getDefiningOp() && attention.getKey().getDefiningOp() &&
                   q[1] != k[1];
      ++(cross ? crossAttention : selfAttention);
    } else if (auto embedding = mlir::dyn_cast<mega::EmbeddingOp>(op)) {
      auto tableShape = shapeOf(embedding.getTable());
      if (tableShape[0] > tableRows) {
        tableRows = tableShape[0];
        tableCols = tableShape[1];
        table = embedding.getTable();
      }
    }
  });
  shape.vocab = tableRows;
  shape.hidden = tableCols;
  shape.layers = selfAttention;
  if (shape.layers == 0 || shape.hidden == 0)
    return {std::nullopt, "the model has no attention blocks or no embedding table to plan for"};
  if (headCount != shape.hidden)
    shape.hidden = std::max(shape.hidden, headCount);
  // The MLP: the commonest output size of linears reading the hidden size, other than the
  // hidden size itself, a fused qkv (3h), grouped key/value projections or the LM head (the one
  // hidden -> vocabulary linear; an MLP as wide as the vocabulary still counts).
  int64_t kvDim = shape.kvHeads ? shape.hidden / shape.heads * shape.kvHeads : 0;
  func.walk([&](mega::LinearOp linear) {
    auto w = shapeOf(linear.getWeight());
    if (w[1] == shape.hidden && w[0] != shape.hidden && w[0] != 3 * shape.hidden && w[0] != kvDim &&
        (shape.experts == 0 || w[0] != shape.experts)) // not an MoE router
      ++linearOut[w[0]];
    if (w[0] == shape.vocab && w[1] == shape.hidden)
      tied = tied || linear.getWeight() == table; // the LM head reads the embedding table
  });
  if (auto head = linearOut.find(shape.vocab); head != linearOut.end() && --head->second == 0)
    linearOut.erase(head);
  int64_t ffnCount = 0;
  for (auto [dim, count] : linearOut)
    if (count > ffnCount) {
      shape.ffn = dim;
      ffnCount = count;
    }
  if (shape.ffn == 0)
    shape.ffn = 4 * shape.hidden;
  // Gated MLPs (SwiGLU) have two hidden -> ffn matrices per block.
  int64_t mlpBlocks = shape.layers;
  shape.gatedMlp = ffnCount >= 2 * mlpBlocks;
  if (shape.experts > 0) {
    // MoE blocks: each expert's MLP from the moe_matmul weights [E, out, in] (or [E, in, out]):
    // the inner size is the dim that is not the hidden size; SwiGLU experts have three.
    int64_t expertMatrices = 0;
    func.walk([&](mega::MoeMatmulOp moe) {
      auto w = shapeOf(moe.getWeight());
      if (w.size() != 3)
        return;
      ++expertMatrices;
      if (w[1] != shape.hidden)
        shape.ffn = w[1];
      else if (w[2] != shape.hidden)
        shape.ffn = w[2];
    });
    int64_t moeLayers = std::max<int64_t>(1, stats.stats->moeLayers);
    shape.gatedMlp = expertMatrices >= 3 * moeLayers;
  }
  shape.tiedEmbedding = tied;
  shape.biases = biases;
  (void)crossAttention;
  return {shape, {}};
}

} // namespace megac::planner
