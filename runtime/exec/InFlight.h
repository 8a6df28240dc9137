// The asynchronous collectives a function has started and not completed (plan opcodes
// AllReduceStart, AllGatherStart, ReduceScatterStart, CollectiveDone), keyed by the start's
// output buffer, which the CollectiveDone reads. A function ends with none in flight.
#pragma once

#include "runtime/comm/Communicator.h"

#include <map>
#include <memory>
#include <string>

namespace megac::runtime::exec {

class InFlight {
public:
  Status add(uint32_t buffer, std::unique_ptr<comm::CommHandle> handle) {
    if (!handles_.emplace(buffer, std::move(handle)).second)
      return Status::error("a collective into buffer " + std::to_string(buffer) +
                           " is already in flight");
    return Status::ok();
  }
  /// Waits for the collective writing `buffer` (its output is written then).
  Status complete(uint32_t buffer) {
    auto it = handles_.find(buffer);
    if (it == handles_.end())
      return Status::error("CollectiveDone of buffer " + std::to_string(buffer) +
                           ", which no start of this run writes");
    std::unique_ptr<comm::CommHandle> handle = std::move(it->second);
    handles_.erase(it);
    return handle->wait();
  }
  /// Waits for every collective still in flight (a function that failed midway, or a plan
  /// the validator did not see); returns the first error.
  Status completeAll() {
    Status first = Status::ok();
    for (auto &[buffer, handle] : handles_)
      if (Status s = handle->wait(); !s.isOk() && first.isOk())
        first = s;
    handles_.clear();
    return first;
  }
  bool empty() const { return handles_.empty(); }
  size_t size() const { return handles_.size(); }

private:
  std::map<uint32_t, std::unique_ptr<comm::CommHandle>> handles_;
};

} // namespace megac::runtime::exec
