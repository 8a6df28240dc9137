// Saving and loading a job's sharded state as per-rank shard files (ShardState.h).
#include "runtime/checkpoint/ShardState.h"

#include "runtime/checkpoint/ShardFiles.h"
#include "runtime/exec/Parameters.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

namespace megac::runtime::checkpoint {

namespace {

// Tags of the save's and load's messages (exchanged at a step boundary, when no other message
// is in flight); every message is a size then the bytes.
constexpr int kSizeTag = 0x434b0011;
constexpr int kDataTag = 0x434b0012;

/// A shard this rank holds: parameter (kind 0) or optimizer state (kind 1).
struct Held {
  int kind = 0;
  std::string name;
  DType dtype = DType::f32;
  ShardInfo info;
};

/// A byte message: integers, strings and shapes in order.
struct Writer {
  std::vector<uint8_t> out;
  void u64(uint64_t v) {
    uint8_t b[8];
    std::memcpy(b, &v, 8);
    out.insert(out.end(), b, b + 8);
  }
  void str(const std::string &s) {
    u64(s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  void dims(const std::vector<int64_t> &d) {
    u64(d.size());
    for (int64_t x : d)
      u64(static_cast<uint64_t>(x));
  }
};

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
  std::string str() {
    uint64_t n = u64();
    if (!ok || n > in.size() - at) {
      ok = false;
      return {};
    }
    std::string s(in.begin() + at, in.begin() + at + n);
    at += n;
    return s;
  }
  std::vector<int64_t> dims() {
    uint64_t n = u64();
    if (n > 64)
      ok = false;
    std::vector<int64_t> d;
    for (uint64_t i = 0; ok && i < n; ++i)
      d.push_back(static_cast<int64_t>(u64()));
    return d;
  }
};

Status sendBlob(comm::Communicator &comm, int peer, const std::vector<uint8_t> &blob) {
  uint64_t size = blob.size();
  RETURN_IF_ERROR(comm.send(peer, kSizeTag, &size, sizeof(size)));
  RETURN_IF_ERROR(comm.send(peer, kDataTag, blob.data(), blob.size()));
  return comm.flushSends();
}

StatusOr<std::vector<uint8_t>> recvBlob(comm::Communicator &comm, int peer) {
  uint64_t size = 0;
  RETURN_IF_ERROR(comm.recv(peer, kSizeTag, &size, sizeof(size)));
  std::vector<uint8_t> blob(size);
  RETURN_IF_ERROR(comm.recv(peer, kDataTag, blob.data(), blob.size()));
  return blob;
}

/// Rank 0 sends `blob` to every other rank; the others receive it.
StatusOr<std::vector<uint8_t>> broadcast(comm::Communicator &comm, std::vector<uint8_t> blob) {
  if (comm.rank() != 0)
    return recvBlob(comm, 0);
  for (int r = 1; r < comm.size(); ++r)
    RETURN_IF_ERROR(sendBlob(comm, r, blob));
  return blob;
}

/// The shape of the buffer holding a shard: its box, or the box and its padding.
const std::vector<int64_t> &bufferShapeOf(const ShardInfo &info) {
  return info.bufferShape.empty() ? info.shape : info.bufferShape;
}

bool emptyBox(const ShardInfo &info) {
  return std::find(info.shape.begin(), info.shape.end(), 0) != info.shape.end();
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
    if (param.isOk() && bufferShapeOf(*param) == info.shape && param->globalShape != info.shape)
      return param;
  }
  return info;
}

StatusOr<HostTensor> valueOf(const Executor &executor, int kind, const std::string &name) {
  return kind == 0 ? executor.parameter(name) : executor.state(name);
}

/// The parameters and checkpointed state buffers this rank holds, with their places; with
/// `dtypes`, their dtypes too (the executor tells them only with a copy of the value).
StatusOr<std::vector<Held>> heldShards(const Executor &executor, bool dtypes) {
  std::vector<Held> out;
  for (const std::string &name : executor.parameterNames()) {
    ASSIGN_OR_RETURN(ShardInfo info, executor.parameterShard(name));
    out.push_back({0, name, DType::f32, std::move(info)});
  }
  for (const std::string &name : executor.stateNames()) {
    if (!isCheckpointedState(name))
      continue;
    ASSIGN_OR_RETURN(ShardInfo info, stateShardOf(executor, name));
    out.push_back({1, name, DType::f32, std::move(info)});
  }
  for (Held &h : out)
    if (dtypes) {
      ASSIGN_OR_RETURN(HostTensor value, valueOf(executor, h.kind, h.name));
      h.dtype = value.dtype;
    }
  return out;
}

std::vector<uint8_t> encodeHeld(const std::vector<Held> &held) {
  Writer w;
  w.u64(held.size());
  for (const Held &h : held) {
    w.u64(h.kind);
    w.str(h.name);
    w.u64(static_cast<uint64_t>(h.dtype));
    w.dims(h.info.globalShape);
    w.dims(h.info.offset);
    w.dims(h.info.shape);
  }
  return w.out;
}

StatusOr<std::vector<Held>> decodeHeld(const std::vector<uint8_t> &blob, int from) {
  Reader r{blob};
  std::vector<Held> out;
  uint64_t n = r.u64();
  for (uint64_t i = 0; r.ok && i < n; ++i) {
    Held h;
    uint64_t kind = r.u64();
    h.name = r.str();
    uint64_t dtype = r.u64();
    h.kind = kind <= 1 ? int(kind) : 0;
    h.dtype = dtype <= uint64_t(DType::i1) ? static_cast<DType>(dtype) : DType::f32;
    h.info.globalShape = r.dims();
    h.info.offset = r.dims();
    h.info.shape = r.dims();
    bool fits = h.info.offset.size() == h.info.globalShape.size() &&
                h.info.shape.size() == h.info.globalShape.size() && kind <= 1 &&
                dtype <= uint64_t(DType::i1);
    for (size_t d = 0; fits && d < h.info.shape.size(); ++d)
      fits = h.info.offset[d] >= 0 && h.info.shape[d] >= 0 &&
             h.info.offset[d] + h.info.shape[d] <= h.info.globalShape[d];
    if (!fits)
      r.ok = false;
    out.push_back(std::move(h));
  }
  if (!r.ok || r.at != blob.size())
    return Status::error("the checkpoint box list received from rank " + std::to_string(from) +
                         " is malformed");
  return out;
}

/// Rank 0's part of a save's first phase: each distinct box's writer (the lowest rank holding
/// it), the tensor tables, and per rank a flag per held shard (1: write it).
Status planWriters(const std::vector<std::vector<Held>> &all, TensorTable tables[2],
                   std::vector<std::vector<uint8_t>> &writes) {
  std::map<std::tuple<int, std::string, std::vector<int64_t>, std::vector<int64_t>>, int> owner;
  writes.assign(all.size(), {});
  for (size_t r = 0; r < all.size(); ++r) {
    for (const Held &h : all[r]) {
      TensorTable &table = tables[h.kind];
      auto [it, fresh] = table.try_emplace(h.name, TensorRecord{h.dtype, h.info.globalShape, {}});
      if (!fresh && (it->second.dtype != h.dtype || it->second.shape != h.info.globalShape))
        return Status::error("rank " + std::to_string(r) + "'s shard of '" + h.name + "' is " +
                             dtypeName(h.dtype) + " " + shapeString(h.info.globalShape) +
                             ", another rank's " + dtypeName(it->second.dtype) + " " +
                             shapeString(it->second.shape));
      // An empty box (a late rank's padded ZeRO-3 shard: padding only) has nothing to write.
      bool first = !emptyBox(h.info) &&
                   owner.try_emplace({h.kind, h.name, h.info.offset, h.info.shape}, int(r)).second;
      writes[r].push_back(first);
      if (first)
        it->second.shards.push_back(
            {rankFileName(h.kind == 1, int(r)), h.info.offset, h.info.shape});
    }
  }
  return Status::ok();
}

/// Writes this rank's files (the shards flagged in `writes`) into `tmp`; returns their table.
StatusOr<FileTable> writeRankFiles(const Executor &executor, int rank, const std::string &tmp,
                                   const std::vector<Held> &held,
                                   const std::vector<uint8_t> &writes, int64_t step) {
  std::map<std::string, std::string> info = {
      {"producer", "megac train"}, {"step", std::to_string(step)}, {"rank", std::to_string(rank)}};
  FileTable files;
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<ShardToWrite> tensors;
    for (size_t i = 0; i < held.size(); ++i)
      if (held[i].kind == kind && writes[i]) {
        const Held &h = held[i];
        // A padded shard writes its box only, the buffer's leading part.
        tensors.push_back(
            {h.name, h.dtype, h.info.shape, [&executor, &h]() -> StatusOr<HostTensor> {
               ASSIGN_OR_RETURN(HostTensor value, valueOf(executor, h.kind, h.name));
               return boxOfBuffer(std::move(value), h.info.shape);
             }});
      }
    if (tensors.empty())
      continue;
    std::string file = rankFileName(kind == 1, rank);
    ASSIGN_OR_RETURN(files[file], writeShardFile(tmp + "/" + file, tensors, info));
  }
  return files;
}

/// A verdict message: a code (0 ok) and a message.
std::vector<uint8_t> encodeVerdict(uint64_t code, const std::string &message) {
  Writer w;
  w.u64(code);
  w.str(message);
  return w.out;
}

std::pair<uint64_t, std::string> decodeVerdict(const std::vector<uint8_t> &blob) {
  Reader r{blob};
  uint64_t code = r.u64();
  std::string message = r.str();
  if (!r.ok)
    return {2, "a checkpoint message between ranks is malformed"};
  return {code, message};
}

/// A save's first phase on every rank: the box lists go to rank 0, which fills `tables` (its
/// own only), creates the temporary folder (`tmp`: rank 0's name, unique to its process) and
/// tells each rank which of its shards it writes (a flag per held shard) and where, or the error
/// that stops the save everywhere.
StatusOr<std::vector<uint8_t>> agreeOnWriters(comm::Communicator &comm,
                                              const std::vector<Held> &held, const std::string &dir,
                                              int64_t step, TensorTable tables[2],
                                              std::string &tmp) {
  std::vector<uint8_t> writes;
  if (comm.rank() != 0) {
    RETURN_IF_ERROR(sendBlob(comm, 0, encodeHeld(held))) << " (sending checkpoint boxes)";
    ASSIGN_OR_RETURN(std::vector<uint8_t> reply, recvBlob(comm, 0));
    auto [code, message] = decodeVerdict(reply);
    if (code != 0)
      return Status::error(message);
    Reader r{reply};
    r.u64();
    r.str();
    std::string flags = r.str();
    tmp = r.str();
    if (!r.ok)
      return Status::error("the checkpoint writer plan from rank 0 is malformed");
    writes.assign(flags.begin(), flags.end());
  } else {
    std::vector<std::vector<Held>> all(comm.size());
    all[0] = held;
    for (int r = 1; r < comm.size(); ++r) {
      ASSIGN_OR_RETURN(std::vector<uint8_t> blob, recvBlob(comm, r));
      ASSIGN_OR_RETURN(all[r], decodeHeld(blob, r));
    }
    std::vector<std::vector<uint8_t>> plan;
    Status status = planWriters(all, tables, plan);
    if (status.isOk()) {
      StatusOr<std::string> begun = beginSave(dir, step);
      status = begun.status();
      if (begun.isOk())
        tmp = *begun;
    }
    for (int r = 1; r < comm.size(); ++r) {
      Writer w{encodeVerdict(status.isOk() ? 0 : 1, status.isOk() ? "" : status.message())};
      w.str(status.isOk() ? std::string(plan[r].begin(), plan[r].end()) : "");
      w.str(tmp);
      RETURN_IF_ERROR(sendBlob(comm, r, w.out));
    }
    RETURN_IF_ERROR(status);
    writes = plan[0];
  }
  if (writes.size() != held.size())
    return Status::error("the checkpoint writer plan from rank 0 does not match this rank's " +
                         std::to_string(held.size()) + " shards");
  return writes;
}

/// Adds rank `from`'s file table (its phase 2 message) to `files`; its error, if it sent one.
Status addFileTable(const std::vector<uint8_t> &blob, int from, FileTable &files) {
  auto [code, message] = decodeVerdict(blob);
  if (code != 0)
    return Status::error("rank " + std::to_string(from) + ": " + message);
  Reader rd{blob};
  rd.u64();
  rd.str();
  while (rd.ok && rd.at < blob.size()) {
    std::string name = rd.str();
    uint64_t bytes = rd.u64();
    uint32_t crc = static_cast<uint32_t>(rd.u64());
    files[name] = {bytes, crc};
  }
  if (!rd.ok)
    return Status::error("the checkpoint file table from rank " + std::to_string(from) +
                         " is malformed");
  return Status::ok();
}

// A load attempt's outcome on one rank.
constexpr uint64_t kLoaded = 0, kRefused = 1, kFatal = 2;

/// Sets this rank's shards from the checkpoint in `stepDir`.
std::pair<uint64_t, std::string> loadFrom(Executor &executor, const std::string &stepDir,
                                          CheckpointMeta &meta, CheckpointParts parts) {
  StatusOr<CheckpointIndex> index = readCheckpointIndex(stepDir);
  if (!index.isOk())
    return {kRefused, index.status().message()};
  meta = index->meta;
  ShardReader reader(*index);
  std::string where = " (loading " + stepDir + ")";
  StatusOr<std::vector<Held>> held = heldShards(executor, false);
  if (!held.isOk())
    return {kFatal, held.status().message()};
  for (const Held &h : *held) {
    if (h.kind != 0 && parts == CheckpointParts::parametersOnly)
      continue;
    const TensorTable &table = h.kind == 0 ? index->parameters : index->optimizer;
    const char *what = h.kind == 0 ? "parameter" : "optimizer state";
    auto it = table.find(h.name);
    if (it == table.end())
      return {kFatal, "the checkpoint has no " + std::string(what) + " '" + h.name + "'" + where};
    auto mismatch = [&](DType runs) -> std::pair<uint64_t, std::string> {
      return {kFatal, "the checkpoint's " + std::string(what) + " '" + h.name + "' is " +
                          dtypeName(it->second.dtype) + " " + shapeString(it->second.shape) +
                          "; this run's is " + dtypeName(runs) + " " +
                          shapeString(h.info.globalShape) + where};
    };
    if (it->second.shape != h.info.globalShape)
      return mismatch(it->second.dtype);
    // A padded shard (ZeRO-3) reads its box and zeros the padding past it.
    StatusOr<HostTensor> box = emptyBox(h.info)
                                   ? HostTensor::zeros(it->second.dtype, h.info.shape)
                                   : reader.readBox(table, h.name, {h.info.offset, h.info.shape});
    if (!box.isOk())
      return {kRefused, box.status().message()};
    HostTensor value = bufferOfBox(std::move(*box), bufferShapeOf(h.info));
    Status set =
        h.kind == 0 ? executor.setParameter(h.name, value) : executor.setState(h.name, value);
    if (!set.isOk()) { // a dtype this run does not have, named as such
      StatusOr<HostTensor> current = valueOf(executor, h.kind, h.name);
      if (current.isOk() && current->dtype != it->second.dtype)
        return mismatch(current->dtype);
      return {kFatal, set.message() + where};
    }
  }
  return {kLoaded, ""};
}

} // namespace

bool isCheckpointedState(std::string_view name) {
  // Gradient accumulators are zeroed every step; ZeRO's pending parameter shards
  // (mega-training-defer-parameter-gather) are gathered into the parameters before a save.
  return !name.starts_with("grad.") && !name.starts_with("zero.gather.");
}

Status saveShardedCheckpoint(const Executor &executor, comm::Communicator &comm,
                             const std::string &dir, const CheckpointMeta &meta) {
  const int me = comm.rank();
  ASSIGN_OR_RETURN(std::vector<Held> held, heldShards(executor, true));
  // Phase 1: the box lists to rank 0, which picks the writers and creates step-N.tmp.
  TensorTable tables[2];
  std::string tmp;
  ASSIGN_OR_RETURN(std::vector<uint8_t> writes,
                   agreeOnWriters(comm, held, dir, meta.step, tables, tmp));
  // Phase 2: every rank writes its files; their sizes and CRC32s (or an error) go to rank 0.
  StatusOr<FileTable> mine = writeRankFiles(executor, me, tmp, held, writes, meta.step);
  if (me != 0) {
    Writer w{encodeVerdict(mine.isOk() ? 0 : 1, mine.isOk() ? "" : mine.status().message())};
    if (mine.isOk())
      for (const auto &[name, rec] : *mine) {
        w.str(name);
        w.u64(rec.bytes);
        w.u64(rec.crc32);
      }
    RETURN_IF_ERROR(sendBlob(comm, 0, w.out)) << " (sending checkpoint file sizes)";
    // Phase 3: rank 0's verdict on the whole save.
    ASSIGN_OR_RETURN(std::vector<uint8_t> verdict, recvBlob(comm, 0));
    auto [code, message] = decodeVerdict(verdict);
    return code == 0 ? Status::ok() : Status::error(message);
  }
  FileTable files = mine.isOk() ? *mine : FileTable{};
  Status status = mine.status();
  for (int r = 1; r < comm.size(); ++r) {
    ASSIGN_OR_RETURN(std::vector<uint8_t> blob, recvBlob(comm, r));
    Status theirs = addFileTable(blob, r, files);
    if (status.isOk())
      status = theirs;
  }
  if (status.isOk())
    status = commitSave(dir, tmp, meta, tables[0], tables[1], files);
  std::vector<uint8_t> verdict =
      encodeVerdict(status.isOk() ? 0 : 1, status.isOk() ? "" : status.message());
  for (int r = 1; r < comm.size(); ++r)
    RETURN_IF_ERROR(sendBlob(comm, r, verdict));
  return status;
}

StatusOr<LoadedCheckpoint> loadShardedCheckpoint(Executor &executor, comm::Communicator &comm,
                                                 const std::string &dir,
                                                 std::vector<std::string> *refused,
                                                 CheckpointParts parts) {
  const int me = comm.rank(), size = comm.size();
  // The candidates, as rank 0 finds them, so every rank tries the same steps in the same order.
  std::vector<std::string> problems;
  Writer list;
  if (me == 0) {
    StatusOr<std::vector<int64_t>> candidates = checkpointCandidates(dir, problems);
    list.out = encodeVerdict(candidates.isOk() ? 0 : 1,
                             candidates.isOk() ? "" : candidates.status().message());
    for (int64_t step : candidates.isOk() ? *candidates : std::vector<int64_t>{})
      list.u64(static_cast<uint64_t>(step));
  }
  ASSIGN_OR_RETURN(std::vector<uint8_t> blob, broadcast(comm, std::move(list.out)));
  auto [code, message] = decodeVerdict(blob);
  if (code != 0)
    return Status::error(message);
  std::vector<int64_t> candidates;
  Reader rd{blob};
  rd.u64();
  rd.str();
  while (rd.ok && rd.at < blob.size())
    candidates.push_back(static_cast<int64_t>(rd.u64()));

  // Each candidate: every rank's outcome to rank 0; the first fatal, else the first refusal,
  // decides for all; pickCheckpoint (rank 0's lines in `refused`) moves on or stops.
  LoadedCheckpoint loaded;
  auto agree = [&](const std::string &stepDir) -> StatusOr<CandidateOutcome> {
    loaded = LoadedCheckpoint{{}, stepDir};
    auto [mineCode, mineMessage] = loadFrom(executor, loaded.path, loaded.meta, parts);
    std::vector<uint8_t> verdict;
    if (me != 0) {
      RETURN_IF_ERROR(sendBlob(comm, 0, encodeVerdict(mineCode, mineMessage)));
    } else {
      std::pair<uint64_t, std::string> worst{mineCode, mineMessage};
      for (int r = 1; r < size; ++r) {
        ASSIGN_OR_RETURN(std::vector<uint8_t> theirs, recvBlob(comm, r));
        auto outcome = decodeVerdict(theirs);
        if (outcome.first > worst.first)
          worst = outcome;
      }
      verdict = encodeVerdict(worst.first, worst.second);
    }
    ASSIGN_OR_RETURN(verdict, broadcast(comm, std::move(verdict)));
    auto [agreed, why] = decodeVerdict(verdict);
    CandidateOutcome::Kind kind = agreed == kLoaded    ? CandidateOutcome::loaded
                                  : agreed == kRefused ? CandidateOutcome::refused
                                                       : CandidateOutcome::fatal;
    return CandidateOutcome{kind, why};
  };
  RETURN_IF_ERROR(
      pickCheckpoint(dir, candidates, problems, me == 0 ? refused : nullptr, agree).status());
  return loaded;
}

} // namespace megac::runtime::checkpoint
