// Assembling whole parameters and gradients from the ranks' shards (ShardGather.h).
#include "runtime/exec/ShardGather.h"

#include "runtime/exec/Parameters.h"
#include "runtime/plan/plan_generated.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

namespace megac::runtime {

namespace fb = megac::plan;

namespace {

/// Copies a row of `bytes`, or with `add` (f32/f64) adds it elementwise.
void putRow(uint8_t *dst, const uint8_t *src, size_t bytes, DType dtype, bool add) {
  if (add && dtype == DType::f64)
    for (size_t i = 0; i < bytes / 8; ++i)
      reinterpret_cast<double *>(dst)[i] += reinterpret_cast<const double *>(src)[i];
  else if (add && dtype == DType::f32)
    for (size_t i = 0; i < bytes / 4; ++i)
      reinterpret_cast<float *>(dst)[i] += reinterpret_cast<const float *>(src)[i];
  else
    std::memcpy(dst, src, bytes);
}

/// Copies (or adds) `shard` (row-major, `shape`) into the box at `offset` of `whole` (row-major,
/// `global`).
void insertBox(uint8_t *whole, std::span<const int64_t> global, const uint8_t *shard,
               std::span<const int64_t> shape, std::span<const int64_t> offset, DType dtype,
               bool add) {
  size_t elem = dtypeSize(dtype);
  size_t rank = shape.size();
  int64_t count = 1;
  for (int64_t d : shape)
    count *= d;
  if (count == 0)
    return;
  if (rank == 0) {
    putRow(whole, shard, elem, dtype, add);
    return;
  }
  size_t rowBytes = static_cast<size_t>(shape[rank - 1]) * elem;
  std::vector<int64_t> index(rank, 0); // over every dim but the last
  for (int64_t row = 0; row < count / shape[rank - 1]; ++row) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d)
      at = at * global[d] + offset[d] + (d + 1 < rank ? index[d] : 0);
    putRow(whole + static_cast<size_t>(at) * elem, shard + row * rowBytes, rowBytes, dtype, add);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// One tensor to assemble: a parameter or gradient of program `program`. Items of one name
/// from several programs (a parameter tied across pipeline stages) are summed.
struct Item {
  std::string name;  // the key in the result
  std::string local; // the parameter or state name in the program
  size_t program = 0;
  uint32_t buffer = 0;
  std::vector<int64_t> globalShape;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> sharding;
  std::vector<int64_t> baseOffset;
};

StatusOr<TensorMap> assemble(const LoadedPlan &plan, const std::vector<Item> &items,
                             const std::map<std::string, HostTensor> &mine,
                             comm::Communicator &comm, int root) {
  const fb::Plan &p = plan.plan();
  comm::Mesh mesh = meshOf(plan);
  int me = comm.rank();
  TensorMap out;
  for (size_t k = 0; k < items.size(); ++k) {
    const Item &item = items[k];
    const fb::Program &program = *p.programs()->Get(uint32_t(item.program));
    const fb::Buffer &buf = *program.buffers()->Get(item.buffer);
    std::span<const int64_t> shape(buf.shape()->data(), buf.shape()->size());
    DType dtype = static_cast<DType>(buf.dtype());
    bool add = out.count(item.name) > 0;
    if (me == root && !add)
      out.emplace(item.name, HostTensor::zeros(dtype, item.globalShape));
    HostTensor *whole = me == root ? &out.at(item.name) : nullptr;
    std::set<std::vector<int64_t>> seen;
    for (uint32_t r = 0; r < p.ranks()->size(); ++r) {
      if (p.ranks()->Get(r)->role() != item.program)
        continue;
      // The rank's valid box: the buffer, or its leading rows under a padded split (ZeRO-3).
      ShardBox box = shardBox(mesh, r, shape, item.baseOffset, item.globalShape, item.sharding);
      if (!seen.insert(box.offset).second)
        continue; // a replica of a shard already taken from a lower rank
      int tag = static_cast<int>(k);
      bool padded = !std::equal(shape.begin(), shape.end(), box.shape.begin(), box.shape.end());
      if (int(r) == me && me == root) {
        const HostTensor &value = mine.at(item.local);
        HostTensor part = padded ? boxOfBuffer(value, box.shape) : HostTensor{};
        insertBox(whole->bytes.data(), item.globalShape,
                  padded ? part.bytes.data() : value.bytes.data(), box.shape, box.offset, dtype,
                  add);
      } else if (int(r) == me) {
        const HostTensor &value = mine.at(item.local);
        RETURN_IF_ERROR(comm.send(root, tag, value.bytes.data(), value.bytes.size()))
            << " (sending the shard of '" << item.name << "')";
      } else if (me == root) {
        HostTensor shard{dtype, {shape.begin(), shape.end()}, std::vector<uint8_t>(buf.bytes())};
        RETURN_IF_ERROR(comm.recv(int(r), tag, shard.bytes.data(), shard.bytes.size()))
            << " (receiving the shard of '" << item.name << "')";
        HostTensor value = boxOfBuffer(std::move(shard), box.shape);
        insertBox(whole->bytes.data(), item.globalShape, value.bytes.data(), box.shape, box.offset,
                  dtype, add);
      }
    }
  }
  RETURN_IF_ERROR(comm.flushSends());
  return out;
}

/// The parameters of every program; with `once`, each name only from the first program having
/// it (tied copies hold the same values).
std::vector<Item> parameterItems(const LoadedPlan &plan, bool once) {
  std::vector<Item> items;
  std::set<std::string> names;
  const fb::Plan &p = plan.plan();
  for (uint32_t prog = 0; prog < p.programs()->size(); ++prog) {
    const fb::Program &program = *p.programs()->Get(prog);
    if (!program.parameters())
      continue;
    for (const fb::Parameter *param : *program.parameters()) {
      if (!names.insert(param->name()->str()).second && once)
        continue;
      Item item;
      item.name = item.local = param->name()->str();
      item.program = prog;
      item.buffer = param->buffer();
      item.globalShape.assign(param->global_shape()->begin(), param->global_shape()->end());
      item.sharding = shardingOf(param->sharding());
      item.baseOffset.assign(param->shard_offset()->begin(), param->shard_offset()->end());
      items.push_back(std::move(item));
    }
  }
  return items;
}

} // namespace

StatusOr<TensorMap> gatherParameters(const LoadedPlan &plan, const Executor &executor,
                                     comm::Communicator &comm, int root) {
  std::map<std::string, HostTensor> mine;
  for (const std::string &name : executor.parameterNames()) {
    ASSIGN_OR_RETURN(HostTensor value, executor.parameter(name));
    mine.emplace(name, std::move(value));
  }
  return assemble(plan, parameterItems(plan, true), mine, comm, root);
}

StatusOr<TensorMap> gatherParameters(const LoadedPlan &plan, const Executor &executor,
                                     comm::Communicator &comm, const std::set<std::string> &names,
                                     int root) {
  std::map<std::string, HostTensor> mine;
  for (const std::string &name : executor.parameterNames()) {
    if (!names.count(name))
      continue;
    ASSIGN_OR_RETURN(HostTensor value, executor.parameter(name));
    mine.emplace(name, std::move(value));
  }
  std::vector<Item> items;
  for (Item &item : parameterItems(plan, true))
    if (names.count(item.name))
      items.push_back(std::move(item));
  return assemble(plan, items, mine, comm, root);
}

StatusOr<TensorMap> gatherGradients(const LoadedPlan &plan, const Executor &executor,
                                    comm::Communicator &comm, int root) {
  // This rank's accumulators, summed over their partial axes (every member of a group runs the
  // same program, so the all-reduces match up in plan order).
  std::map<std::string, HostTensor> mine;
  for (const std::string &name : executor.parameterNames()) {
    std::string grad = "grad." + name;
    StatusOr<HostTensor> value = executor.state(grad);
    if (!value.isOk())
      continue;
    ASSIGN_OR_RETURN(std::vector<uint32_t> axes, executor.statePartialAxes(grad));
    HostTensor &t = value.value();
    if (!axes.empty())
      RETURN_IF_ERROR(comm.allReduce(axes, t.bytes.data(), static_cast<size_t>(t.numElements()),
                                     t.dtype, comm::ReduceKind::sum))
          << " (summing the gradient of '" << name << "')";
    mine.emplace(grad, std::move(t));
  }
  // Gradients are laid out as their accumulators: the parameter's shard, or under ZeRO-2 its dp
  // shard (the state's own sharding); a parameter on several stages gets the sum of their
  // accumulators.
  std::vector<Item> items;
  const fb::Plan &p = plan.plan();
  for (Item item : parameterItems(plan, false)) {
    const fb::Program &program = *p.programs()->Get(uint32_t(item.program));
    if (!program.state())
      continue;
    for (const fb::StateBuffer *st : *program.state())
      if (st->name()->str() == "grad." + item.name) {
        item.local = st->name()->str();
        item.buffer = st->buffer();
        if (st->global_shape() && st->global_shape()->size() == item.globalShape.size())
          item.sharding = shardingOf(st->sharding());
        items.push_back(item);
      }
  }
  return assemble(plan, items, mine, comm, root);
}

} // namespace megac::runtime
