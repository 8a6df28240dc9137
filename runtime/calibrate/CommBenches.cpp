// Collectives and point-to-point transfers over every rank of the job, by message size, through
// the executor's communication opcodes (the MPI communicator on CPU ranks, NCCL on GPUs).
#include "runtime/calibrate/Benches.h"

#include <algorithm>

namespace megac::runtime::calibrate {
namespace {

AttrsFn collective() {
  return [](flatbuffers::FlatBufferBuilder &b) {
    std::vector<uint32_t> axes = {0};
    return fb::CreateCollectiveAttrsDirect(b, &axes, fb::ReduceKind::sum, 0, 0).Union();
  };
}
AttrsFn p2p(int64_t shift, int64_t tag) {
  return [=](flatbuffers::FlatBufferBuilder &b) {
    return fb::CreateP2PAttrs(b, 0, shift, tag).Union();
  };
}

/// Adds "one.<size>" (the instructions once) and, with repeats, "many.<size>" (them `repeat`
/// times) to `p`.
void addFunctions(BenchProgram &p, size_t size, const std::vector<BenchInstruction> &body,
                  int repeat) {
  p.function("one." + std::to_string(size), body);
  if (repeat > 1) {
    std::vector<BenchInstruction> many;
    for (int i = 0; i < repeat; ++i)
      many.insert(many.end(), body.begin(), body.end());
    p.function("many." + std::to_string(size), many);
  }
}

/// One plan for `op` at every size: function "one.<i>" moves about sizes[i] bytes, which
/// become the exact sizes. Every size's buffers share the same arena bytes (inputs from 0,
/// outputs after the largest input), so one executor (one NCCL communicator) serves them all.
/// The data are whatever the arena holds (zeros): the values do not change a transfer's time.
BenchPlan commPlan(const std::string &op, int ranks, std::vector<double> &sizes, int repeat) {
  using O = fb::Opcode;
  const bool p2pOp = op == "send_recv";
  // send_recv: pairs (0, 1), (2, 3), ... exchange one message each way; an odd last rank idles.
  BenchPlan plan(ranks, p2pOp ? 3 : 1);
  if (p2pOp)
    for (int r = 0; r < ranks; ++r)
      plan.assign(r, r % 2 == 1 ? 1 : (r + 1 < ranks ? 0 : 2));
  struct Counts {
    int64_t in, out;
  };
  std::vector<Counts> counts;
  int64_t largestIn = 0;
  for (double &bytes : sizes) {
    const int64_t count = std::max<int64_t>(1, int64_t(bytes / 4));
    const int64_t perRank = std::max<int64_t>(1, count / ranks);
    Counts c = {count, count};
    if (op == "all_to_all") // one piece of perRank elements to each member, as many back
      c = {perRank * ranks, perRank * ranks};
    else if (op == "all_gather")
      c = {perRank, perRank * ranks};
    else if (op == "reduce_scatter")
      c = {perRank * ranks, perRank};
    bytes = 4.0 * double(std::max(c.in, c.out)); // the whole buffer
    counts.push_back(c);
    largestIn = std::max(largestIn, c.in);
  }
  const uint64_t outAt = (uint64_t(largestIn) * 4 + 63) / 64 * 64;
  for (int role = 0; role < (p2pOp ? 3 : 1); ++role) {
    BenchProgram &p = plan.program(role);
    for (size_t i = 0; i < counts.size(); ++i) {
      uint32_t x = p.tempAt(DType::f32, {counts[i].in}, 0);
      uint32_t y = p.tempAt(DType::f32, {counts[i].out}, outAt);
      std::vector<BenchInstruction> body;
      if (op == "all_reduce")
        body = {{O::AllReduce, {x}, {y}, fb::Attrs::CollectiveAttrs, collective()}};
      else if (op == "all_gather")
        body = {{O::AllGather, {x}, {y}, fb::Attrs::CollectiveAttrs, collective()}};
      else if (op == "reduce_scatter")
        body = {{O::ReduceScatter, {x}, {y}, fb::Attrs::CollectiveAttrs, collective()}};
      else if (op == "all_to_all") // split dim 0 over the ranks, concatenate the pieces on dim 0
        body = {{O::AllToAll, {x}, {y}, fb::Attrs::CollectiveAttrs, collective()}};
      else if (role == 0) // send tag 1 to the odd partner, receive its tag 2
        body = {{O::Send, {x}, {}, fb::Attrs::P2PAttrs, p2p(1, 1)},
                {O::Recv, {}, {y}, fb::Attrs::P2PAttrs, p2p(1, 2)}};
      else if (role == 1)
        body = {{O::Recv, {}, {y}, fb::Attrs::P2PAttrs, p2p(-1, 1)},
                {O::Send, {x}, {}, fb::Attrs::P2PAttrs, p2p(-1, 2)}};
      addFunctions(p, i, body, repeat);
    }
  }
  return plan;
}

} // namespace

Status benchCollectives(const BenchContext &ctx, Results &out) {
  Sync &sync = *ctx.sync;
  const int ranks = sync.ranks();
  if (ranks < 2)
    return Status::ok();
  TimingPolicy policy = ctx.policy;
  policy.batches = 9; // a median over more repetitions: collectives are noisier than kernels
  // all_to_all: expert parallelism's token exchange (MoeAllToAll moves its rows the same way).
  for (const char *op : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv"}) {
    // Latency-bound to bandwidth-bound: 4 B to 64 MiB (quick: to 4 MiB).
    std::vector<double> sizes;
    for (double b = 4; b <= double(ctx.quick ? 4 << 20 : 64 << 20); b *= ctx.quick ? 16 : 4)
      sizes.push_back(b);
    BenchPlan plan = commPlan(op, ranks, sizes, ctx.repeat);
    StatusOr<std::unique_ptr<Executor>> executor =
        loadBench(plan, ctx.backend, ctx.allowTf32, sync.rank(), sync.world());
    if (!executor.isOk())
      return Status::error(std::string("calibrate: ") + op + ": " + executor.status().message());
    Executor &e = **executor;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string one = "one." + std::to_string(i), many = "many." + std::to_string(i);
      const std::string where =
          std::string("calibrate: ") + op + " of " + std::to_string(int64_t(sizes[i])) + " bytes: ";
      StatusOr<double> t1 = timeCall(
          sync, [&] { return e.run(one); }, policy);
      if (!t1.isOk())
        return Status::error(where + t1.status().message());
      double seconds = *t1;
      if (ctx.repeat > 1) { // a GPU run synchronizes: take the difference per call
        StatusOr<double> tn = timeCall(
            sync, [&] { return e.run(many); }, policy);
        if (!tn.isOk())
          return Status::error(where + tn.status().message());
        double per = (*tn - *t1) / (ctx.repeat - 1);
        seconds = per > 0 ? per : *tn / ctx.repeat;
      }
      if (std::string(op) == "send_recv")
        seconds /= 2; // one round trip per run
      out.comm.push_back({op, ranks, sizes[i], seconds});
    }
  }
  return Status::ok();
}

} // namespace megac::runtime::calibrate
