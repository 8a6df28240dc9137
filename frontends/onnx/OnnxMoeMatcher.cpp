// Matching the mixture-of-experts block on the ONNX graph: MoeMatcher's router, experts,
// routing weights and accumulation, and the region of nodes the raised block replaces.
#include "frontends/onnx/OnnxMoeMatcher.h"

#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace megac::onnx_import {

std::optional<ConstTensor> MoeMatcher::constant(const std::string &name) {
  auto v = g_.values.find(name);
  if (v != g_.values.end()) {
    if (!v->second.isConstant())
      return std::nullopt;
    const ConstTensor *c = g_.constantOf(v->second, UnknownLoc::get(&g_.ctx), name);
    if (!c)
      return std::nullopt;
    return *c;
  }
  if (auto it = decoded_.find(name); it != decoded_.end())
    return it->second;
  int d = defOp(name, "Constant");
  if (d < 0)
    return std::nullopt;
  const auto *value = attr(node(d), "value");
  if (value && value->has_t()) {
    auto t = decodeTensor(value->t(), nodeLocation(g_.ctx, node(d), d), "Constant");
    if (failed(t))
      return std::nullopt;
    return decoded_[name] = *t;
  }
  if (const auto *i = attr(node(d), "value_int"))
    return decoded_[name] = ConstTensor::fromInts(ElemType::i64, {}, {i->i()});
  if (const auto *is = attr(node(d), "value_ints"))
    return decoded_[name] =
               ConstTensor::fromInts(ElemType::i64, {int64_t(is->ints_size())},
                                     std::vector<int64_t>(is->ints().begin(), is->ints().end()));
  return std::nullopt;
}

std::optional<std::vector<int64_t>> MoeMatcher::axes(const onnx::NodeProto &n, int64_t inputSince) {
  if (opset_ < inputSince) {
    const auto *a = attr(n, "axes");
    if (!a)
      return std::nullopt;
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  }
  if (n.input_size() < 2 || n.input(1).empty())
    return std::nullopt;
  return ints(n.input(1));
}

bool MoeMatcher::hasAxis(const onnx::NodeProto &n, int64_t axis, int64_t rank) {
  auto a = axes(n, 13);
  return a && a->size() == 1 && ((*a)[0] == axis || (*a)[0] + rank == axis);
}

bool MoeMatcher::isZeros(const std::string &value) {
  if (auto c = constant(value))
    return c->numElements() > 0 && c->isSplat() && c->getDouble(0) == 0;
  int d = defOp(value, "ConstantOfShape");
  if (d < 0)
    return false;
  const auto *v = attr(node(d), "value");
  if (!v)
    return true; // ConstantOfShape's default is a float 0
  if (!v->has_t())
    return false;
  auto t = decodeTensor(v->t(), nodeLocation(g_.ctx, node(d), d), "ConstantOfShape value");
  return succeeded(t) && t->numElements() == 1 && t->getDouble(0) == 0;
}

bool MoeMatcher::isInitializer(const std::string &value) const {
  if (def(value) >= 0)
    return false;
  for (const auto &init : graph_.initializer())
    if (init.name() == value)
      return true;
  return false;
}

LogicalResult MoeMatcher::refuse(int at, const Twine &why) {
  const onnx::NodeProto &n = node(at);
  emitError(nodeLocation(g_.ctx, n, at))
      << "cannot raise the mixture-of-experts block of TopK node '" << topk().name()
      << "' (megac raises transformers' MixtralSparseMoeBlock as torch.onnx exports it): node '"
      << (n.name().empty() ? "<unnamed>" : n.name()) << "' (" << n.op_type() << ") " << why;
  return failure();
}

LogicalResult MoeMatcher::matchRouter(MoeBlock &b) {
  const onnx::NodeProto &k = topk();
  if (k.input_size() < 2 || k.output_size() < 2 || k.output(1).empty())
    return refuse(topk_, "needs the values and indices outputs");
  b.probs = k.input(0);
  auto p = g_.values.find(b.probs);
  if (p == g_.values.end() || p->second.shape.size() != 2 || !isFloatType(p->second.type))
    return refuse(topk_, "takes router probabilities that are not a float [tokens, experts] "
                         "matrix");
  tokens_ = p->second.shape[0];
  b.experts = p->second.shape[1];
  int64_t axis = attrInt(k, "axis", -1);
  if (axis != -1 && axis != 1)
    return refuse(topk_, "picks along axis " + Twine(axis) + ", not the experts (last) axis");
  if (attrInt(k, "largest", 1) != 1)
    return refuse(topk_, "picks the smallest entries; a router picks the largest");
  auto kk = ints(k.input(1));
  if (!kk || kk->size() != 1 || (*kk)[0] < 1 || (*kk)[0] > b.experts)
    return refuse(topk_, "needs a constant k between 1 and the " + Twine(b.experts) + " experts");
  b.k = (*kk)[0];

  // The expert mask: Transpose(OneHot(indices), perm [2, 1, 0]).
  const std::vector<int> &idxUses = uses(k.output(1));
  if (idxUses.size() != 1 || node(idxUses[0]).op_type() != "OneHot")
    return refuse(idxUses.empty() ? topk_ : idxUses[0],
                  "is not the one use of the router's indices (the OneHot of the expert mask)");
  int onehot = idxUses[0];
  const onnx::NodeProto &oh = node(onehot);
  auto depth = ints(oh.input(1));
  auto ohValues = oh.input_size() > 2 ? constant(oh.input(2)) : std::nullopt;
  if (!depth || depth->size() != 1 || (*depth)[0] != b.experts)
    return refuse(onehot, "needs the constant depth " + Twine(b.experts) + " (the experts)");
  if (!ohValues || ohValues->numElements() != 2 || ohValues->getDouble(0) != 0 ||
      ohValues->getDouble(1) != 1)
    return refuse(onehot, "needs the values [0, 1]");
  if (int64_t a = attrInt(oh, "axis", -1); a != -1 && a != 2)
    return refuse(onehot, "needs axis -1");
  const std::vector<int> &ohUses = uses(oh.output(0));
  if (ohUses.size() != 1 || node(ohUses[0]).op_type() != "Transpose")
    return refuse(onehot, "must feed one Transpose (expert_mask.permute(2, 1, 0))");
  int mask = ohUses[0];
  const auto *perm = attr(node(mask), "perm");
  if (!perm || std::vector<int64_t>(perm->ints().begin(), perm->ints().end()) !=
                   std::vector<int64_t>{2, 1, 0})
    return refuse(mask, "needs perm [2, 1, 0]");
  mask_ = node(mask).output(0);

  // The renormalised gates G: every expert must read the same G (checked per expert).
  std::string gates;
  b.expert.assign(b.experts, MoeExpert());
  for (int selector : uses(node(mask).output(0)))
    if (failed(matchExpert(b, selector, gates)))
      return failure();
  for (int64_t e = 0; e < b.experts; ++e)
    if (b.expert[e].index < 0)
      return refuse(mask, "selects no tokens for expert " + Twine(e) + " of " + Twine(b.experts) +
                              " (every expert needs its Gather, NonZero and MLP)");

  // G = Cast?(Div(vals, ReduceSum(vals, axes [-1], keepdims 1))), or Cast?(vals).
  std::string v = gates;
  for (int c = defOp(v, "Cast"); c >= 0 && isFloatType(ElemType(attrInt(node(c), "to", 0)));
       c = defOp(v, "Cast"))
    v = node(c).input(0);
  if (v == k.output(0)) {
    b.renormalize = false;
    return success();
  }
  int div = defOp(v, "Div");
  if (div < 0 || node(div).input(0) != k.output(0))
    return refuse(def(v) >= 0 ? def(v) : topk_,
                  "computes the routing weights; megac raises only the top-k probabilities, "
                  "renormalised (vals / vals.sum(-1, keepdim=True)) or not");
  int sum = defOp(node(div).input(1), "ReduceSum");
  if (sum < 0 || node(sum).input(0) != k.output(0) || attrInt(node(sum), "keepdims", 1) != 1 ||
      !hasAxis(node(sum), 1, 2))
    return refuse(div, "does not divide the top-k probabilities by their sum over the last axis "
                       "(keepdims)");
  b.renormalize = true;
  return success();
}

FailureOr<MoeWeight> MoeMatcher::linearWeight(int mm, int64_t out, int64_t in) {
  MoeWeight w{node(mm).input(1), true};
  int at = mm;
  if (int t = defOp(w.name, "Transpose"); t >= 0) {
    const auto *perm = attr(node(t), "perm");
    if (perm && (perm->ints_size() != 2 || perm->ints(0) != 1 || perm->ints(1) != 0))
      return refuse(t, "transposes an expert's weight with a perm other than [1, 0]");
    w = {node(t).input(0), false};
    at = t;
  }
  auto info = g_.values.find(w.name);
  if (!isInitializer(w.name) || info == g_.values.end() || info->second.shape.size() != 2)
    return refuse(at, "takes '" + w.name +
                          "', which is not an initializer matrix (an expert's weight)");
  Shape s = info->second.shape; // as [out, in]
  if (w.transposed)
    std::swap(s[0], s[1]);
  if ((out >= 0 && s[0] != out) || s[1] != in)
    return refuse(at, "takes '" + w.name + "' of shape " + shapeStr(info->second.shape) +
                          ", which does not fit the block's hidden size " + Twine(hidden_) +
                          " and ffn size " + Twine(ffn_));
  return w;
}

LogicalResult MoeMatcher::matchExpert(MoeBlock &b, int selector, std::string &gates) {
  const onnx::NodeProto &sel = node(selector);
  auto e = sel.op_type() == "Gather" && sel.input(0) == mask_ ? ints(sel.input(1)) : std::nullopt;
  if (sel.op_type() != "Gather" || attrInt(sel, "axis", 0) != 0 || !e || e->size() != 1)
    return refuse(selector, "uses the expert mask; megac expects one Gather(mask, e, axis 0) per "
                            "expert with a constant scalar e");
  int64_t index = (*e)[0] < 0 ? (*e)[0] + b.experts : (*e)[0];
  if (index < 0 || index >= b.experts || b.expert[index].index >= 0)
    return refuse(selector,
                  "selects expert " + Twine((*e)[0]) + ", out of range or selected twice");
  MoeExpert &ex = b.expert[index];
  ex.index = index;

  // torch.where(expert_mask[e]) -> slot, tok.
  auto single = [&](const std::string &v, const char *op) -> int {
    const auto &u = uses(v);
    return u.size() == 1 && node(u[0]).op_type() == op ? u[0] : -1;
  };
  std::string v = sel.output(0);
  if (int c = single(v, "Cast"); c >= 0 && attrInt(node(c), "to", 0) == int(ElemType::boolean))
    v = node(c).output(0);
  int nz = single(v, "NonZero");
  int tr = nz >= 0 ? single(node(nz).output(0), "Transpose") : -1;
  int split = tr >= 0 ? single(node(tr).output(0), "Split") : -1;
  if (split < 0 || node(split).output_size() != 2 || attrInt(node(split), "axis", 0) != 1)
    return refuse(selector, "(expert " + Twine(index) +
                                ") must feed NonZero -> Transpose -> Split into (slot, token) "
                                "columns (torch.where)");
  const auto *trPerm = attr(node(tr), "perm");
  if (trPerm && (trPerm->ints_size() != 2 || trPerm->ints(0) != 1 || trPerm->ints(1) != 0))
    return refuse(tr, "needs perm [1, 0]");
  std::string cols[2];
  for (int i = 0; i < 2; ++i) {
    int sq = single(node(split).output(i), "Squeeze");
    if (sq < 0 || !hasAxis(node(sq), 1, 2))
      return refuse(split, "output " + Twine(i) + " must feed one Squeeze of axis 1");
    cols[i] = node(sq).output(0);
  }
  const std::string &slot = cols[0], &tok = cols[1];

  // The expert's input rows: Reshape(Gather(Unsqueeze(x, [0]), tok, axis 1)).
  int gather = -1;
  for (int u : usesOp(tok, "Gather"))
    if (node(u).input(1) == tok)
      gather = u;
  if (gather < 0 || attrInt(node(gather), "axis", 0) != 1)
    return refuse(split, "(expert " + Twine(index) +
                             "): the selected tokens are not gathered along axis 1 of "
                             "hidden_states[None]");
  int unsq = defOp(node(gather).input(0), "Unsqueeze");
  if (unsq < 0 || !hasAxis(node(unsq), 0, 3))
    return refuse(gather, "gathers from a value that is not Unsqueeze(hidden_states, axes [0])");
  const std::string &x = node(unsq).input(0);
  auto xInfo = g_.values.find(x);
  if (xInfo == g_.values.end() || xInfo->second.shape.size() != 2 ||
      xInfo->second.shape[0] != tokens_ || !isFloatType(xInfo->second.type))
    return refuse(unsq, "takes '" + x + "', which is not the float [" + Twine(tokens_) +
                            ", hidden] token matrix the router sees");
  if (b.tokens.empty()) {
    b.tokens = x;
    hidden_ = xInfo->second.shape[1];
  } else if (b.tokens != x) {
    return refuse(unsq, "takes '" + x + "', but another expert takes '" + b.tokens + "'");
  }
  int reshape = single(node(gather).output(0), "Reshape");
  if (reshape < 0)
    return refuse(gather, "must feed one Reshape to [tokens, hidden]");
  const std::string &h = node(reshape).output(0);

  // The MLP: MatMul(silu(MatMul(h, W1^T)) * MatMul(h, W3^T), W2^T).
  std::vector<int> mms;
  for (int u : uses(h))
    if (node(u).op_type() == "MatMul" && node(u).input(0) == h)
      mms.push_back(u);
  if (mms.size() != 2 || uses(h).size() != 2)
    return refuse(reshape, "(expert " + Twine(index) +
                               ") must feed exactly the two MatMuls of w1 and w3 (an expert "
                               "MLP act(w1(x)) * w3(x))");
  int gateMm = -1, upMm = -1, act = -1;
  for (int i = 0; i < 2; ++i) {
    const std::string &a = node(mms[i]).output(0);
    for (int s : usesOp(a, "Sigmoid"))
      for (int m : usesOp(node(s).output(0), "Mul")) {
        const auto &in = node(m).input();
        if ((in[0] == a && in[1] == node(s).output(0)) ||
            (in[1] == a && in[0] == node(s).output(0))) {
          gateMm = mms[i];
          upMm = mms[1 - i];
          act = m;
        }
      }
  }
  if (act < 0)
    return refuse(mms[0], "(expert " + Twine(index) +
                              "): neither w1 nor w3 output goes through SiLU (x * Sigmoid(x)); "
                              "megac raises Mixtral's SiLU experts only");
  int prod = -1;
  for (int m : usesOp(node(act).output(0), "Mul")) {
    const auto &in = node(m).input();
    const std::string &up = node(upMm).output(0);
    if ((in[0] == node(act).output(0) && in[1] == up) ||
        (in[1] == node(act).output(0) && in[0] == up))
      prod = m;
  }
  if (prod < 0)
    return refuse(act, "(expert " + Twine(index) + ") is not multiplied by the w3 output");
  int down = single(node(prod).output(0), "MatMul");
  if (down < 0 || node(down).input(0) != node(prod).output(0))
    return refuse(prod, "(expert " + Twine(index) + ") must feed the one MatMul of w2");
  auto w1 = linearWeight(gateMm, ffn_, hidden_);
  if (failed(w1))
    return failure();
  if (ffn_ < 0)
    ffn_ = g_.values.at(w1->name).shape[w1->transposed ? 1 : 0];
  auto w3 = linearWeight(upMm, ffn_, hidden_);
  auto w2 = succeeded(w3) ? linearWeight(down, hidden_, ffn_) : FailureOr<MoeWeight>();
  if (failed(w3) || failed(w2))
    return failure();
  ex.w1 = *w1;
  ex.w3 = *w3;
  ex.w2 = *w2;

  // Weighted by the token's routing weight: Mul(y, r), then Cast?.
  const std::string &y = node(down).output(0);
  int weighted = single(y, "Mul");
  if (weighted < 0)
    return refuse(down, "(expert " + Twine(index) + ") must feed one Mul by the routing weight");
  const auto &wIn = node(weighted).input();
  if (failed(matchWeight(b, wIn[0] == y ? wIn[1] : wIn[0], slot, tok, gates)))
    return failure();
  std::string z = node(weighted).output(0);
  for (int c = single(z, "Cast"); c >= 0 && isFloatType(ElemType(attrInt(node(c), "to", 0)));
       c = single(z, "Cast"))
    z = node(c).output(0);

  // index_add_: ScatterElements(zeros, Expand?(Unsqueeze(tok, [1])), Expand?(z), axis 0).
  std::string updates = z;
  if (int expand = single(z, "Expand"); expand >= 0 && node(expand).input(0) == z)
    updates = node(expand).output(0);
  int scatter = -1;
  for (int u : usesOp(updates, "ScatterElements"))
    if (node(u).input_size() == 3 && node(u).input(2) == updates)
      scatter = u;
  if (scatter < 0 || attrInt(node(scatter), "axis", 0) != 0)
    return refuse(weighted, "(expert " + Twine(index) +
                                "): the weighted rows are not scattered into the tokens' rows "
                                "(ScatterElements along axis 0, index_add_)");
  std::string idx = node(scatter).input(1);
  if (int expand = defOp(idx, "Expand"); expand >= 0)
    idx = node(expand).input(0);
  int iu = defOp(idx, "Unsqueeze");
  if (iu < 0 || node(iu).input(0) != tok || !hasAxis(node(iu), 1, 2))
    return refuse(scatter, "(expert " + Twine(index) +
                               ") scatters to rows that are not the expert's selected tokens");
  std::string reduction = attrString(node(scatter), "reduction");
  const std::string &data = node(scatter).input(0);
  if (isZeros(data) && (reduction.empty() || reduction == "none" || reduction == "add")) {
    int add = single(node(scatter).output(0), "Add");
    if (add < 0)
      return refuse(scatter, "(expert " + Twine(index) +
                                 ") must feed one Add into the block's accumulated output");
    const auto &in = node(add).input();
    ex.step = add;
    ex.previous = in[0] == node(scatter).output(0) ? in[1] : in[0];
    ex.result = node(add).output(0);
  } else if (reduction == "add") {
    ex.step = scatter;
    ex.previous = data;
    ex.result = node(scatter).output(0);
  } else {
    return refuse(scatter, "(expert " + Twine(index) + ") scatters with reduction '" + reduction +
                               "' into a value that is not zeros");
  }
  return success();
}

LogicalResult MoeMatcher::matchWeight(MoeBlock &b, const std::string &r, const std::string &slot,
                                      const std::string &tok, std::string &gates) {
  // r = Reshape*(Gather(Flatten(Unsqueeze(G, [2]), axis 2), slot + tok * k, axis 0)):
  // routing_weights[top_x, idx, None].
  std::string v = r;
  for (int rs = defOp(v, "Reshape"); rs >= 0; rs = defOp(v, "Reshape"))
    v = node(rs).input(0);
  int gather = defOp(v, "Gather");
  int flat = gather >= 0 ? defOp(node(gather).input(0), "Flatten") : -1;
  int unsq = flat >= 0 ? defOp(node(flat).input(0), "Unsqueeze") : -1;
  int at = def(r) >= 0 ? def(r) : topk_;
  if (unsq < 0 || attrInt(node(gather), "axis", 0) != 0 || attrInt(node(flat), "axis", 1) != 2 ||
      !hasAxis(node(unsq), 2, 3))
    return refuse(at, "is not routing_weights[top_x, idx, None] (Gather of the flattened "
                      "routing weights); megac cannot tell which weight scales the expert");
  const std::string &g = node(unsq).input(0);
  if (gates.empty())
    gates = g;
  else if (gates != g)
    return refuse(unsq, "reads routing weights '" + g + "', another expert '" + gates + "'");
  // The flat index slot + tok * k, with k a constant or the dim 1 of Unsqueeze(G, [2]).
  int add = defOp(node(gather).input(1), "Add");
  std::string other;
  if (add >= 0)
    for (int i = 0; i < 2; ++i)
      if (node(add).input(1 - i) == slot)
        if (int m = defOp(node(add).input(i), "Mul"); m >= 0) {
          const auto &in = node(m).input();
          other = in[0] == tok ? in[1] : in[1] == tok ? in[0] : std::string();
        }
  bool kOk = false;
  if (!other.empty()) {
    if (auto kk = ints(other); kk && kk->size() == 1 && (*kk)[0] == b.k) {
      kOk = true;
    } else if (int kg = defOp(other, "Gather"); kg >= 0) {
      auto dim = ints(node(kg).input(1));
      int shape = defOp(node(kg).input(0), "Shape");
      int su = shape >= 0 ? defOp(node(shape).input(0), "Unsqueeze") : -1;
      kOk = dim && dim->size() == 1 && (*dim)[0] == 1 && su >= 0 && node(su).input(0) == g &&
            hasAxis(node(su), 2, 3);
    }
  }
  if (!kOk)
    return refuse(gather, "indexes the routing weights at something other than "
                          "slot + token * k (routing_weights[top_x, idx])");
  return success();
}

LogicalResult MoeMatcher::matchAccumulation(MoeBlock &b) {
  // The steps must chain: zeros -> step -> step -> ... -> output. (A partial sum also feeds
  // shape arithmetic, Shape(Slice(acc)), which the block's region drops; region() refuses any
  // other use outside the block.)
  std::map<std::string, int64_t> byResult;
  for (const MoeExpert &e : b.expert)
    byResult[e.result] = e.index;
  const MoeExpert *first = nullptr;
  std::map<std::string, int64_t> next; // previous accumulator -> expert consuming it
  for (const MoeExpert &e : b.expert) {
    if (byResult.count(e.previous)) {
      if (!next.emplace(e.previous, e.index).second)
        return refuse(e.step, "adds to an accumulator another expert also adds to");
      continue;
    }
    if (first)
      return refuse(e.step, "starts a second sum of expert outputs (the experts of one block "
                            "must add into one accumulator)");
    if (!isZeros(e.previous))
      return refuse(e.step, "adds the first expert's output to '" + e.previous +
                                "', which is not zeros (torch.zeros of final_hidden_states)");
    first = &e;
  }
  if (!first)
    return refuse(b.expert[0].step, "accumulates in a cycle");
  const MoeExpert *e = first;
  for (int64_t n = 1; n < b.experts; ++n) {
    auto it = next.find(e->result);
    if (it == next.end())
      return refuse(e->step,
                    "ends the sum after " + Twine(n) + " of " + Twine(b.experts) + " experts");
    e = &b.expert[it->second];
  }
  b.output = e->result;
  return success();
}

FailureOr<MoeBlock> MoeMatcher::match() {
  MoeBlock b;
  if (failed(matchRouter(b)) || failed(matchAccumulation(b)))
    return failure();
  return b;
}

FailureOr<std::set<int>> MoeMatcher::region(const MoeBlock &block) {
  // Forward from the router's outputs up to the block's output: every node computed from the
  // routing.
  int end = def(block.output);
  std::set<int> forward{topk_};
  std::vector<int> work{topk_};
  while (!work.empty()) {
    int n = work.back();
    work.pop_back();
    if (n == end)
      continue;
    for (const std::string &out : node(n).output()) {
      if (graphOutputs_.count(out))
        return refuse(n, "has its output '" + out +
                             "' computed from the routing as a graph output; megac computes "
                             "the block with its MoE ops and keeps only the block's output");
      for (int u : uses(out))
        if (forward.insert(u).second)
          work.push_back(u);
    }
  }
  // Backward from the block's output: the region must not leak.
  std::set<int> backward;
  work = {end};
  while (!work.empty()) {
    int n = work.back();
    work.pop_back();
    if (!backward.insert(n).second)
      continue;
    for (const std::string &in : node(n).input())
      if (int d = def(in); d >= 0 && forward.count(d))
        work.push_back(d);
  }
  for (int n : forward)
    if (!backward.count(n))
      return refuse(n, "uses the routing of the block outside it (only the block's output may "
                       "leave it: megac replaces the block by its MoE ops)");
  // Then the nodes after the router that only the region used (Unsqueeze(x), the experts'
  // Transposes, zeros and shape arithmetic), from the last back.
  std::set<int> skip = forward;
  for (int n = graph_.node_size() - 1; n > topk_; --n) {
    if (skip.count(n))
      continue;
    bool used = false, onlyRegion = true;
    for (const std::string &out : node(n).output()) {
      if (out.empty())
        continue;
      if (graphOutputs_.count(out))
        onlyRegion = false;
      for (int u : uses(out)) {
        used = true;
        onlyRegion = onlyRegion && skip.count(u);
      }
    }
    if (used && onlyRegion)
      skip.insert(n);
  }
  return skip;
}

} // namespace megac::onnx_import
