// Ring attention over the cp group (RingAttention.h): blocks travel to the next member and come
// from the previous one; the block computation runs on a helper thread while this thread
// receives the next block (the computing thread makes no communicator call).
#include "runtime/exec/RingAttention.h"

#include "runtime/cpu/RingAttention.h"

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

/// Tensors packed back to back in one buffer: what travels in one message.
class Packed {
public:
  explicit Packed(std::vector<TensorRef> like) : refs_(std::move(like)) {
    size_t bytes = 0;
    for (const TensorRef &r : refs_)
      bytes += r.byteSize();
    bytes_.assign(bytes, 0);
    uint8_t *at = bytes_.data();
    for (TensorRef &r : refs_) {
      r.data = at;
      at += r.byteSize();
    }
  }
  void fill(std::initializer_list<const TensorRef *> from) {
    size_t i = 0;
    for (const TensorRef *t : from)
      std::memcpy(refs_[i++].data, t->data, t->byteSize());
  }
  const TensorRef &operator[](size_t i) const { return refs_[i]; }
  void *data() { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  void zero() { std::fill(bytes_.begin(), bytes_.end(), uint8_t(0)); }
  void swap(Packed &other) {
    refs_.swap(other.refs_);
    bytes_.swap(other.bytes_);
  }

private:
  std::vector<TensorRef> refs_;
  std::vector<uint8_t> bytes_;
};

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

/// The forward ring into `out` (normalized) with its row statistics.
Status forwardRing(comm::Communicator &comm, const Ring &ring, const TensorRef &q,
                   const TensorRef &k, const TensorRef &v, const TensorRef &qpos,
                   const TensorRef &kpos, double scale, const TensorRef &out,
                   cpu::RingRowStats &stats) {
  RETURN_IF_ERROR(cpu::ringAttentionBegin(q, out, stats));
  Packed block({kpos, k, v}), incoming({kpos, k, v}); // positions first: 8-byte aligned
  block.fill({&kpos, &k, &v});
  RETURN_IF_ERROR(circulate(comm, ring, block, incoming, [&](const Packed &b, size_t) {
    return cpu::ringAttentionBlock(q, b[1], b[2], qpos, b[0], scale, out, stats);
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
                     const TensorRef &k, const TensorRef &v, const TensorRef &queryPositions,
                     const TensorRef &keyPositions, double scale, const TensorRef &out) {
  RETURN_IF_ERROR(expectFloat("RingAttention", q));
  ASSIGN_OR_RETURN(Ring ring, ringOf(comm, axes));
  cpu::RingRowStats stats;
  return forwardRing(comm, ring, q, k, v, queryPositions, keyPositions, scale, out, stats);
}

Status ringAttentionGrad(comm::Communicator &comm, std::span<const uint32_t> axes,
                         const TensorRef &dout, const TensorRef &q, const TensorRef &k,
                         const TensorRef &v, const TensorRef &queryPositions,
                         const TensorRef &keyPositions, double scale, const TensorRef &dq,
                         const TensorRef &dk, const TensorRef &dv) {
  RETURN_IF_ERROR(expectFloat("RingAttentionGrad", q));
  ASSIGN_OR_RETURN(Ring ring, ringOf(comm, axes));
  // The row statistics and the output (for delta) by one more forward ring: the forward's
  // are not kept (the op has one result), as Attention's backward recomputes probabilities.
  Packed recomputed({dout});
  cpu::RingRowStats stats;
  RETURN_IF_ERROR(
      forwardRing(comm, ring, q, k, v, queryPositions, keyPositions, scale, recomputed[0], stats));
  std::vector<double> delta;
  RETURN_IF_ERROR(cpu::ringAttentionDelta(dout, recomputed[0], delta));
  std::memset(dq.data, 0, dq.byteSize());
  Packed block({keyPositions, k, v}), incoming({keyPositions, k, v});
  block.fill({&keyPositions, &k, &v});
  // dk and dv of the block held travel with it, one message behind (sent once computed).
  Packed grads({dk, dv}), incomingGrads({dk, dv});
  grads.zero();
  RETURN_IF_ERROR(circulate(
      comm, ring, block, incoming,
      [&](const Packed &b, size_t) {
        return cpu::ringAttentionGradBlock(dout, q, b[1], b[2], queryPositions, b[0], scale, stats,
                                           delta, dq, grads[0], grads[1]);
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
  return Status::ok();
}

} // namespace megac::runtime::commops
