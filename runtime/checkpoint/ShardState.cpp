// Gathering sharded training state to whole tensors and back (ShardState.h).
#include "runtime/checkpoint/ShardState.h"

#include <cstring>

namespace megac::runtime::checkpoint {

namespace {

// Tags of the gather's messages (sent at a step boundary, when no other message is in flight).
constexpr int kSizeTag = 0x434b0001;
constexpr int kDataTag = 0x434b0002;

int64_t product(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// Calls `row(wholeElement, shardElement, elements)` for every contiguous row of the box.
template <typename F>
void forEachRow(std::span<const int64_t> global, std::span<const int64_t> offset,
                std::span<const int64_t> shape, F row) {
  size_t rank = shape.size();
  int64_t count = product(shape);
  if (count == 0)
    return;
  if (rank == 0) {
    row(0, 0, 1);
    return;
  }
  int64_t rowLen = shape[rank - 1];
  std::vector<int64_t> index(rank, 0); // over every dim but the last
  for (int64_t r = 0; r < count / rowLen; ++r) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d)
      at = at * global[d] + offset[d] + (d + 1 < rank ? index[d] : 0);
    row(at, r * rowLen, rowLen);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// A shard's place in its whole tensor. A state buffer the plan does not describe (no global
/// shape) but that is shaped like its parameter's shard ("adam.m.<p>") lies where the shard
/// does.
StatusOr<ShardInfo> stateShardOf(const Executor &executor, const std::string &name) {
  ASSIGN_OR_RETURN(ShardInfo info, executor.stateShard(name));
  bool whole = info.globalShape == info.shape;
  for (size_t dot = name.find('.'); whole && dot != std::string::npos;
       dot = name.find('.', dot + 1)) {
    StatusOr<ShardInfo> param = executor.parameterShard(name.substr(dot + 1));
    if (param.isOk() && param->shape == info.shape && param->globalShape != param->shape)
      return param;
  }
  return info;
}

// The gather's wire format, per tensor: kind (0 parameter, 1 state), name, dtype, rank, global
// shape, offset, shape, then the shard's bytes.
void putU64(std::vector<uint8_t> &out, uint64_t v) {
  uint8_t b[8];
  std::memcpy(b, &v, 8);
  out.insert(out.end(), b, b + 8);
}

struct Reader {
  const std::vector<uint8_t> &in;
  size_t at = 0;
  bool ok = true;
  uint64_t u64() {
    if (at + 8 > in.size()) {
      ok = false;
      return 0;
    }
    uint64_t v;
    std::memcpy(&v, in.data() + at, 8);
    at += 8;
    return v;
  }
  std::vector<uint8_t> bytes(uint64_t n) {
    if (!ok || n > in.size() - at) {
      ok = false;
      return {};
    }
    std::vector<uint8_t> out(in.begin() + at, in.begin() + at + n);
    at += n;
    return out;
  }
};

void putShard(std::vector<uint8_t> &out, uint64_t kind, const std::string &name,
              const ShardInfo &info, const HostTensor &value) {
  putU64(out, kind);
  putU64(out, name.size());
  out.insert(out.end(), name.begin(), name.end());
  putU64(out, static_cast<uint64_t>(value.dtype));
  putU64(out, info.globalShape.size());
  for (const auto *dims : {&info.globalShape, &info.offset, &info.shape})
    for (int64_t d : *dims)
      putU64(out, static_cast<uint64_t>(d));
  putU64(out, value.bytes.size());
  out.insert(out.end(), value.bytes.begin(), value.bytes.end());
}

/// Adds one rank's shards (in the wire format) to the whole tensors.
Status addShards(const std::vector<uint8_t> &blob, int from, WholeState &whole) {
  Reader r{blob};
  while (r.ok && r.at < blob.size()) {
    uint64_t kind = r.u64();
    std::vector<uint8_t> nameBytes = r.bytes(r.u64());
    std::string name(nameBytes.begin(), nameBytes.end());
    DType dtype = static_cast<DType>(r.u64());
    uint64_t rank = r.u64();
    if (!r.ok || rank > 16 || kind > 1 || static_cast<uint64_t>(dtype) > 6)
      break;
    std::vector<int64_t> global(rank), offset(rank), shape(rank);
    for (auto *dims : {&global, &offset, &shape})
      for (int64_t &d : *dims)
        d = static_cast<int64_t>(r.u64());
    HostTensor shard{dtype, shape, r.bytes(r.u64())};
    if (!r.ok || shard.bytes.size() != size_t(product(shape)) * dtypeSize(dtype))
      break;
    for (size_t d = 0; d < rank; ++d)
      if (offset[d] < 0 || shape[d] < 0 || offset[d] + shape[d] > global[d])
        return Status::error("rank " + std::to_string(from) + "'s shard of '" + name +
                             "' lies outside its global shape " + shapeString(global));
    TensorMap &map = kind == 0 ? whole.parameters : whole.optimizer;
    auto it = map.find(name);
    if (it == map.end())
      it = map.emplace(name, HostTensor::zeros(dtype, global)).first;
    else if (it->second.dtype != dtype || it->second.shape != global)
      return Status::error("rank " + std::to_string(from) + "'s shard of '" + name + "' is " +
                           dtypeName(dtype) + " " + shapeString(global) + ", another rank's " +
                           dtypeName(it->second.dtype) + " " + shapeString(it->second.shape));
    insertBox(it->second, shard, offset);
  }
  if (!r.ok || r.at != blob.size())
    return Status::error("the checkpoint shards received from rank " + std::to_string(from) +
                         " are malformed");
  return Status::ok();
}

} // namespace

bool isCheckpointedState(std::string_view name) { return !name.starts_with("grad."); }

HostTensor extractBox(const HostTensor &whole, std::span<const int64_t> offset,
                      std::span<const int64_t> shape) {
  HostTensor out = HostTensor::zeros(whole.dtype, {shape.begin(), shape.end()});
  size_t elem = dtypeSize(whole.dtype);
  forEachRow(whole.shape, offset, shape, [&](int64_t w, int64_t s, int64_t n) {
    std::memcpy(out.bytes.data() + s * elem, whole.bytes.data() + w * elem, n * elem);
  });
  return out;
}

void insertBox(HostTensor &whole, const HostTensor &shard, std::span<const int64_t> offset) {
  size_t elem = dtypeSize(whole.dtype);
  forEachRow(whole.shape, offset, shard.shape, [&](int64_t w, int64_t s, int64_t n) {
    std::memcpy(whole.bytes.data() + w * elem, shard.bytes.data() + s * elem, n * elem);
  });
}

StatusOr<WholeState> gatherWholeState(const Executor &executor, comm::Communicator &comm,
                                      int root) {
  std::vector<uint8_t> mine;
  for (const std::string &name : executor.parameterNames()) {
    ASSIGN_OR_RETURN(ShardInfo info, executor.parameterShard(name));
    ASSIGN_OR_RETURN(HostTensor value, executor.parameter(name));
    putShard(mine, 0, name, info, value);
  }
  for (const std::string &name : executor.stateNames()) {
    if (!isCheckpointedState(name))
      continue;
    ASSIGN_OR_RETURN(ShardInfo info, stateShardOf(executor, name));
    ASSIGN_OR_RETURN(HostTensor value, executor.state(name));
    putShard(mine, 1, name, info, value);
  }
  WholeState whole;
  if (comm.rank() != root) {
    uint64_t size = mine.size();
    RETURN_IF_ERROR(comm.send(root, kSizeTag, &size, sizeof(size)))
        << " (sending checkpoint shards)";
    RETURN_IF_ERROR(comm.send(root, kDataTag, mine.data(), mine.size()))
        << " (sending checkpoint shards)";
    RETURN_IF_ERROR(comm.flushSends());
    return whole;
  }
  for (int r = 0; r < comm.size(); ++r) {
    if (r == root) {
      RETURN_IF_ERROR(addShards(mine, r, whole));
      continue;
    }
    uint64_t size = 0;
    RETURN_IF_ERROR(comm.recv(r, kSizeTag, &size, sizeof(size)))
        << " (receiving checkpoint shards)";
    std::vector<uint8_t> blob(size);
    RETURN_IF_ERROR(comm.recv(r, kDataTag, blob.data(), blob.size()))
        << " (receiving checkpoint shards)";
    RETURN_IF_ERROR(addShards(blob, r, whole));
  }
  return whole;
}

Status setStateFromWhole(Executor &executor, const WholeState &whole) {
  auto shardOf = [](const TensorMap &map, const std::string &name, const ShardInfo &info,
                    DType dtype, const char *what) -> StatusOr<HostTensor> {
    auto it = map.find(name);
    if (it == map.end())
      return Status::error("the checkpoint has no " + std::string(what) + " '" + name + "'");
    const HostTensor &t = it->second;
    if (t.shape != info.globalShape || t.dtype != dtype)
      return Status::error("the checkpoint's " + std::string(what) + " '" + name + "' is " +
                           dtypeName(t.dtype) + " " + shapeString(t.shape) + "; this run's is " +
                           dtypeName(dtype) + " " + shapeString(info.globalShape));
    return extractBox(t, info.offset, info.shape);
  };
  for (const std::string &name : executor.parameterNames()) {
    ASSIGN_OR_RETURN(ShardInfo info, executor.parameterShard(name));
    ASSIGN_OR_RETURN(HostTensor current, executor.parameter(name));
    ASSIGN_OR_RETURN(HostTensor shard,
                     shardOf(whole.parameters, name, info, current.dtype, "parameter"));
    RETURN_IF_ERROR(executor.setParameter(name, shard));
  }
  for (const std::string &name : executor.stateNames()) {
    if (!isCheckpointedState(name))
      continue;
    ASSIGN_OR_RETURN(ShardInfo info, stateShardOf(executor, name));
    ASSIGN_OR_RETURN(HostTensor current, executor.state(name));
    ASSIGN_OR_RETURN(HostTensor shard,
                     shardOf(whole.optimizer, name, info, current.dtype, "optimizer state"));
    RETURN_IF_ERROR(executor.setState(name, shard));
  }
  return Status::ok();
}

} // namespace megac::runtime::checkpoint
