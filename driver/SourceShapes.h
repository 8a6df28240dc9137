// Parameters that megac holds in another shape than the model's own files: a fused
// projection's weight with its part dim (mega-split-fused-projections; [3h, in] held as
// [3, h, in], the same elements in the same order). MLIR-free: what the runtime side needs.
#pragma once

#include "support/HostTensor.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace megac::driver {

/// Parameter name -> the shape the model's files hold.
using SourceShapes = std::map<std::string, std::vector<int64_t>>;

/// `tensors` (whole parameters or gradients, by parameter name) given their source shapes: what
/// --save-weights and --save-grads write, so they compare with the model's own tensors.
inline void toSourceShapes(TensorMap &tensors, const SourceShapes &shapes) {
  for (const auto &[name, shape] : shapes)
    if (auto it = tensors.find(name); it != tensors.end())
      it->second.shape = shape;
}

} // namespace megac::driver
