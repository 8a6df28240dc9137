// The cut analysis of mega-pipeline-split (CutPoints.h).
#include "passes/schedule/CutPoints.h"

#include "ir/MegaDialect.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace mlir;

namespace megac::passes {

int64_t tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * ((bits + 7) / 8);
}

CutPoints CutPoints::analyze(func::FuncOp f, ArrayRef<Operation *> ops, ValueRange outputs) {
  CutPoints cuts;
  Block &block = f.getBody().front();
  for (Operation *op : ops) {
    cuts.index[op] = cuts.ops.size();
    cuts.ops.push_back(op);
  }
  DenseSet<Value> returned(outputs.begin(), outputs.end());
  unsigned n = cuts.ops.size();
  auto isParam = [&](Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    return arg && arg.getOwner() == &block && f.getArgAttr(arg.getArgNumber(), mega::kParamAttr);
  };
  // What each value depends on: parameters, data inputs, activations (values computed from
  // both, or from other activations). Values without activation that do not mix parameters
  // and data are recomputed where needed.
  enum : unsigned { onParam = 1, onData = 2, onActivation = 4 };
  DenseMap<Value, unsigned> deps;
  auto depsOf = [&](Value v) -> unsigned {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return arg.getOwner() == &block ? unsigned(isParam(v) ? onParam : onData) : 0u;
    return deps.lookup(v);
  };
  for (Operation *op : cuts.ops) {
    unsigned d = 0;
    for (Value v : op->getOperands())
      d |= depsOf(v);
    if ((d & onParam) && (d & onData))
      d |= onActivation;
    for (Value r : op->getResults()) {
      deps[r] = d;
      if (!(d & onActivation))
        cuts.invariant.insert(r);
    }
  }

  // Reads of parameters (directly or through recomputed values) on each side of a cut.
  int64_t firstParamOp = n, lastParamOp = -1;
  for (auto [i, op] : llvm::enumerate(cuts.ops)) {
    if (op->getNumResults() > 0 && cuts.invariant.contains(op->getResult(0)))
      continue;
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return (depsOf(v) & (onParam | onActivation)) == onParam; })) {
      firstParamOp = std::min<int64_t>(firstParamOp, i);
      lastParamOp = i;
    }
  }

  // Crossing bytes by a difference array: a value defined at i and last used at u crosses
  // positions i+1..u.
  SmallVector<int64_t> delta(n + 2, 0);
  for (auto [i, op] : llvm::enumerate(cuts.ops))
    for (Value r : op->getResults()) {
      if (cuts.invariant.contains(r))
        continue;
      unsigned last = returned.contains(r) ? n : i;
      for (Operation *user : r.getUsers()) {
        auto it = cuts.index.find(block.findAncestorOpInBlock(*user));
        if (it != cuts.index.end())
          last = std::max(last, it->second);
      }
      cuts.lastUse_[r] = last;
      if (last > i) {
        delta[i + 1] += tensorBytes(r.getType());
        delta[last + 1] -= tensorBytes(r.getType());
      }
    }
  cuts.crossingBytes.assign(n + 1, 0);
  int64_t running = 0;
  for (unsigned k = 0; k <= n; ++k) {
    running += delta[k];
    cuts.crossingBytes[k] = running;
  }
  for (unsigned k = 1; k < n; ++k)
    if (static_cast<int64_t>(k) > firstParamOp && static_cast<int64_t>(k) <= lastParamOp &&
        cuts.crossingBytes[k] > 0) {
      if (cuts.eligible.empty() || cuts.crossingBytes[k] < cuts.minBytes)
        cuts.minBytes = cuts.crossingBytes[k];
      cuts.eligible.push_back(k);
    }
  return cuts;
}

SmallVector<Value> CutPoints::crossing(unsigned k) const {
  SmallVector<Value> out;
  for (unsigned i = 0; i < k && i < ops.size(); ++i)
    for (Value r : ops[i]->getResults()) {
      auto it = lastUse_.find(r);
      if (it != lastUse_.end() && it->second >= k)
        out.push_back(r);
    }
  return out;
}

SmallVector<unsigned> CutPoints::candidates(int64_t factor) const {
  SmallVector<unsigned> out;
  for (unsigned k : eligible)
    if (crossingBytes[k] <= factor * minBytes)
      out.push_back(k);
  return out;
}

SmallVector<unsigned> CutPoints::layerCuts(int64_t factor) const {
  auto real = [&](unsigned i) {
    return ops[i]->getNumResults() == 0 || !invariant.contains(ops[i]->getResult(0));
  };
  // Drop positions with nothing but invariant ops since the previous one (equivalent cuts).
  SmallVector<unsigned> cuts;
  unsigned prev = 0;
  for (unsigned k : candidates(factor)) {
    bool any = false;
    for (unsigned i = prev; i < k && !any; ++i)
      any = real(i);
    if (!any && !cuts.empty())
      continue;
    cuts.push_back(k);
    prev = k;
  }
  // Segment j lies between cuts j-1 and j (segment 0 starts at 0, the last ends at N); its
  // signature is its ops' names and result types.
  unsigned m = cuts.size() + 1;
  SmallVector<std::string> sig(m);
  for (unsigned j = 0; j < m; ++j) {
    unsigned begin = j == 0 ? 0 : cuts[j - 1], end = j + 1 < m ? cuts[j] : ops.size();
    llvm::raw_string_ostream os(sig[j]);
    for (unsigned i = begin; i < end; ++i)
      if (real(i)) {
        os << ops[i]->getName() << ":";
        for (mlir::Type t : ops[i]->getResultTypes())
          os << t << ",";
        os << ";";
      }
  }
  // Repeatedly take the repeating region (a primitive period T, R >= 2 whole units) covering the
  // most segments, shortest period and earliest first, among segments not yet in a region; drop
  // the cuts inside its units.
  SmallVector<bool> used(m, false), drop(cuts.size(), false);
  while (true) {
    unsigned bestT = 0, bestA = 0, bestR = 0;
    for (unsigned t = 1; 2 * t <= m; ++t)
      for (unsigned a = 0; a + 2 * t <= m; ++a) {
        // A unit that repeats a shorter block is that block's period, not a layer.
        bool primitive = true;
        for (unsigned d = 1; d < t && primitive; ++d)
          if (t % d == 0)
            primitive = !llvm::all_of(llvm::seq(d, t),
                                      [&](unsigned i) { return sig[a + i] == sig[a + i - d]; });
        if (!primitive)
          continue;
        auto sameUnit = [&](unsigned x, unsigned y) {
          for (unsigned i = 0; i < t; ++i)
            if (used[x + i] || used[y + i] || sig[x + i] != sig[y + i])
              return false;
          return true;
        };
        unsigned r = 1;
        while (a + (r + 1) * t <= m && sameUnit(a, a + r * t))
          ++r;
        if (r >= 2 && r * t > bestR * bestT) {
          bestT = t;
          bestA = a;
          bestR = r;
        }
      }
    if (!bestR)
      break;
    for (unsigned u = 0; u < bestR; ++u)
      for (unsigned i = 1; i < bestT; ++i)
        drop[bestA + u * bestT + i - 1] = true; // the cut before segment bestA + u*T + i
    for (unsigned j = bestA; j < bestA + bestR * bestT; ++j)
      used[j] = true;
  }
  SmallVector<unsigned> out;
  for (auto [j, k] : llvm::enumerate(cuts))
    if (!drop[j])
      out.push_back(k);
  return out;
}

} // namespace megac::passes
