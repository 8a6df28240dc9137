// Ring attention over the cp group (RingAttention.h): blocks travel to the next member and come
// from the previous one; the block computation runs on a helper thread while this thread
// receives the next block (the computing thread makes no communicator call).
#include "runtime/exec/RingAttention.h"

#include "runtime/cpu/RingAttention.h"
#include "runtime/plan/RingScratch.h"

#include <cstring>
#include <functional>
#include <future>
#include <vector>

namespace megac::runtime::commops {

namespace {

/// Tags of the ring's messages (within MPI's smallest tag bound, 32767). Peers on the cp ring
/// differ from pipeline peers (another mesh coordinate), and messages between one pair with one
/// tag arrive in the order sent, so fixed tags suffice.
constexpr int kBlockTag = 32001, kGradTag = 32002;

/// Tensors packed back to back in one region of the ring's scratch: what travels in one
/// message.
class Packed {
public:
  Packed(std::vector<TensorRef> like, uint8_t *at) : refs_(std::move(like)), base_(at) {
    for (TensorRef &r : refs_) {
      r.data = at;
      at += r.byteSize();
    }
    bytes_ = static_cast<size_t>(at - base_);
  }
  void fill(std::initializer_list<const TensorRef *> from) {
    size_t i = 0;
    for (const TensorRef *t : from)
      std::memcpy(refs_[i++].data, t->data, t->byteSize());
  }
  const TensorRef &operator[](size_t i) const { return refs_[i]; }
  void *data() { return base_; }
  size_t size() const { return bytes_; }
  void zero() { std::memset(base_, 0, bytes_); }
  void swap(Packed &other) {
    refs_.swap(other.refs_);
    std::swap(base_, other.base_);
    std::swap(bytes_, other.bytes_);
  }

private:
  std::vector<TensorRef> refs_;
  uint8_t *base_;
  size_t bytes_ = 0;
};

/// The plan's scratch of one ring call (runtime/plan/RingScratch.h), checked to hold it.
StatusOr<plan::RingScratchLayout> scratchLayout(const char *name, const TensorRef &q,
                                                const TensorRef &k, const TensorRef &v,
                                                const TensorRef *keyMask, const TensorRef &scratch,
                                                bool backward) {
  for (const TensorRef *t : {&q, &k, &v})
    if (t->shape.size() != 4)
      return Status::error(std::string(name) + ": q, k and v must be [b, s, h, d], not " +
                           shapeString(t->shape));
  if (keyMask && (keyMask->dtype != q.dtype || keyMask->numElements() != k.shape[0] * k.shape[1]))
    return Status::error(std::string(name) + ": the key mask " + shapeString(keyMask->shape) + " " +
                         dtypeName(keyMask->dtype) + " is not one " + dtypeName(q.dtype) +
                         " value per key of k " + shapeString(k.shape));
  plan::RingDims dims{
      q.shape[0],        q.shape[1], q.shape[2], q.shape[3],
      k.shape[1],        k.shape[2], v.shape[3], static_cast<int64_t>(dtypeSize(q.dtype)),
      keyMask != nullptr};
  plan::RingScratchLayout layout = plan::ringScratchLayout(dims, backward);
  if (scratch.byteSize() < layout.bytes)
    return Status::error(std::string(name) + ": its scratch buffer holds " +
                         std::to_string(scratch.byteSize()) + " bytes, the ring needs " +
                         std::to_string(layout.bytes) +
                         " (a plan compiled before the ring's scratch: recompile it)");
  return layout;
}

/// The row statistics in the scratch.
cpu::RingRowStats statsIn(uint8_t *base, const plan::RingScratchLayout &l) {
  auto rows = static_cast<size_t>(l.rows);
  return cpu::RingRowStats({reinterpret_cast<double *>(base + l.max), rows},
                           {reinterpret_cast<double *>(base + l.sum), rows});
}

struct Ring {
  size_t size = 1;
  int next = 0, prev = 0;
};

StatusOr<Ring> ringOf(const comm::Communicator &comm, std::span<const uint32_t> axes) {
  const comm::Mesh &mesh = comm.mesh();
  for (uint32_t axis : axes)
    if (axis >= mesh.axisSizes.size())
      return Status::error("RingAttention: mesh axis " + std::to_string(axis) +
                           " is not an axis of the plan's mesh of " +
                           std::to_string(mesh.axisSizes.size()));
  std::vector<int64_t> members = mesh.groupOf(comm.rank(), axes);
  auto index = static_cast<size_t>(mesh.indexInGroup(comm.rank(), axes));
  Ring ring;
  ring.size = members.size();
  ring.next = static_cast<int>(members[(index + 1) % ring.size]);
  ring.prev = static_cast<int>(members[(index + ring.size - 1) % ring.size]);
  return ring;
}

/// g steps over the blocks: at each but the last, `block` is posted to the next member, then
/// `compute` runs on the block here while the previous member's block is received.
Status circulate(comm::Communicator &comm, const Ring &ring, Packed &block, Packed &incoming,
                 const std::function<Status(const Packed &, size_t step)> &compute,
                 const std::function<Status(size_t step)> &afterCompute = {}) {
  for (size_t step = 0; step < ring.size; ++step) {
    bool last = step + 1 == ring.size;
    if (!last)
      RETURN_IF_ERROR(comm.send(ring.next, kBlockTag, block.data(), block.size()));
    if (last) {
      RETURN_IF_ERROR(compute(block, step));
    } else {
      std::future<Status> computed =
          std::async(std::launch::async, [&] { return compute(block, step); });
      Status received = comm.recv(ring.prev, kBlockTag, incoming.data(), incoming.size());
      Status done = computed.get();
      RETURN_IF_ERROR(received);
      RETURN_IF_ERROR(done);
    }
    if (afterCompute)
      RETURN_IF_ERROR(afterCompute(step));
    if (!last)
      block.swap(incoming);
  }
  return Status::ok();
}

/// What travels with each block: key positions (first: 8-byte aligned), the key mask if any,
/// k and v; `at` the index of each in a Packed of them.
struct BlockParts {
  std::vector<TensorRef> like;
  std::vector<const TensorRef *> from;
  size_t k = 1, v = 2, mask = 0; // mask: 0 when there is none

  BlockParts(const TensorRef &kpos, const TensorRef *mask, const TensorRef &kk,
             const TensorRef &vv) {
    like = {kpos};
    from = {&kpos};
    if (mask) {
      like.push_back(*mask);
      from.push_back(mask);
      this->mask = 1, k = 2, v = 3;
    }
    like.insert(like.end(), {kk, vv});
    from.insert(from.end(), {&kk, &vv});
  }
  const TensorRef *maskIn(const Packed &b) const { return mask ? &b[mask] : nullptr; }
};

void fill(Packed &block, const BlockParts &parts) {
  std::vector<const TensorRef *> from = parts.from;
  for (size_t i = 0; i < from.size(); ++i)
    std::memcpy(block[i].data, from[i]->data, from[i]->byteSize());
}

/// The forward ring into `out` (normalized) with its row statistics; its blocks in the scratch.
Status forwardRing(comm::Communicator &comm, const Ring &ring, const TensorRef &q,
                   const TensorRef &k, const TensorRef &v, const TensorRef *keyMask,
                   const TensorRef &qpos, const TensorRef &kpos, double scale, const TensorRef &out,
                   cpu::RingRowStats &stats, uint8_t *base, const plan::RingScratchLayout &l) {
  RETURN_IF_ERROR(cpu::ringAttentionBegin(q, out, stats));
  BlockParts parts(kpos, keyMask, k, v);
  Packed block(parts.like, base + l.blocks[0]), incoming(parts.like, base + l.blocks[1]);
  fill(block, parts);
  RETURN_IF_ERROR(circulate(comm, ring, block, incoming, [&](const Packed &b, size_t) {
    return cpu::ringAttentionBlock(q, b[parts.k], b[parts.v], qpos, b[0], scale, out, stats,
                                   parts.maskIn(b));
  }));
  return cpu::ringAttentionEnd(out, stats);
}

Status expectFloat(const char *name, const TensorRef &t) {
  if (t.dtype != DType::f32 && t.dtype != DType::f64)
    return Status::error(std::string(name) + ": " + dtypeName(t.dtype) +
                         " is not supported (f32, f64; half types compute in f32)");
  return Status::ok();
}

} // namespace

Status ringAttention(comm::Communicator &comm, std::span<const uint32_t> axes, const TensorRef &q,
                     const TensorRef &k, const TensorRef &v, const TensorRef *keyMask,
                     const TensorRef &queryPositions, const TensorRef &keyPositions, double scale,
                     const TensorRef &out, const TensorRef &scratch) {
  RETURN_IF_ERROR(expectFloat("RingAttention", q));
  ASSIGN_OR_RETURN(plan::RingScratchLayout layout,
                   scratchLayout("RingAttention", q, k, v, keyMask, scratch, false));
  ASSIGN_OR_RETURN(Ring ring, ringOf(comm, axes));
  auto *base = static_cast<uint8_t *>(scratch.data);
  cpu::RingRowStats stats = statsIn(base, layout);
  return forwardRing(comm, ring, q, k, v, keyMask, queryPositions, keyPositions, scale, out, stats,
                     base, layout);
}

Status ringAttentionGrad(comm::Communicator &comm, std::span<const uint32_t> axes,
                         const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef *keyMask,
                         const TensorRef &queryPositions, const TensorRef &keyPositions,
                         double scale, const TensorRef &dq, const TensorRef &dk,
                         const TensorRef &dv, const TensorRef *dKeyMask, const TensorRef &scratch) {
  RETURN_IF_ERROR(expectFloat("RingAttentionGrad", q));
  if (bool(keyMask) != bool(dKeyMask))
    return Status::error("RingAttentionGrad: there is a key mask gradient exactly when there is "
                         "a key mask");
  ASSIGN_OR_RETURN(plan::RingScratchLayout layout,
                   scratchLayout("RingAttentionGrad", q, k, v, keyMask, scratch, true));
  ASSIGN_OR_RETURN(Ring ring, ringOf(comm, axes));
  auto *base = static_cast<uint8_t *>(scratch.data);
  // The row statistics and the output (for delta) by one more forward ring: the forward's
  // are not kept (the op has one result), as Attention's backward recomputes probabilities.
  Packed recomputed({dout}, base + layout.output);
  cpu::RingRowStats stats = statsIn(base, layout);
  RETURN_IF_ERROR(forwardRing(comm, ring, q, k, v, keyMask, queryPositions, keyPositions, scale,
                              recomputed[0], stats, base, layout));
  std::span<double> delta(reinterpret_cast<double *>(base + layout.delta),
                          static_cast<size_t>(layout.rows));
  RETURN_IF_ERROR(cpu::ringAttentionDelta(dout, recomputed[0], delta));
  std::memset(dq.data, 0, dq.byteSize());
  BlockParts parts(keyPositions, keyMask, k, v);
  Packed block(parts.like, base + layout.blocks[0]), incoming(parts.like, base + layout.blocks[1]);
  fill(block, parts);
  // dk and dv (and the key mask's gradient) of the block held travel with it, one message
  // behind (sent once computed).
  std::vector<TensorRef> gradLike{dk, dv};
  if (dKeyMask)
    gradLike.push_back(*dKeyMask);
  Packed grads(gradLike, base + layout.gradBlocks[0]),
      incomingGrads(gradLike, base + layout.gradBlocks[1]);
  grads.zero();
  RETURN_IF_ERROR(circulate(
      comm, ring, block, incoming,
      [&](const Packed &b, size_t) {
        return cpu::ringAttentionGradBlock(dout, q, b[parts.k], b[parts.v], queryPositions, b[0],
                                           scale, stats, delta, dq, grads[0], grads[1],
                                           parts.maskIn(b), dKeyMask ? &grads[2] : nullptr);
      },
      [&](size_t) -> Status {
        if (ring.size == 1)
          return Status::ok();
        RETURN_IF_ERROR(comm.send(ring.next, kGradTag, grads.data(), grads.size()));
        RETURN_IF_ERROR(comm.recv(ring.prev, kGradTag, incomingGrads.data(), incomingGrads.size()));
        grads.swap(incomingGrads);
        return Status::ok();
      }));
  // After g transfers the accumulators held are this rank's own block's.
  std::memcpy(dk.data, grads[0].data, dk.byteSize());
  std::memcpy(dv.data, grads[1].data, dv.byteSize());
  if (dKeyMask)
    std::memcpy(dKeyMask->data, grads[2].data, dKeyMask->byteSize());
  return Status::ok();
}

} // namespace megac::runtime::commops
