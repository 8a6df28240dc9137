// Parameters that megac holds in another shape than the model's own files: a fused
// projection's weight with its part dim (mega-split-fused-projections; [3h, in] held as
// [3, h, in], the same elements in the same order), and per-expert tensors held stacked (a
// mixture of experts' grouped weights). MLIR-free: what the runtime side needs.
#pragma once

#include "support/HostTensor.h"

#include <cstdint>
#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace megac::driver {

/// Where megac's parameters differ from the model's own files.
struct SourceShapes {
  /// Parameter name -> the shape the model's files hold (the same elements in the same order).
  std::map<std::string, std::vector<int64_t>> shapes;
  /// Parameter name -> the files' tensors it stacks along dim 0, in order (each layer's experts
  /// of a mixture of experts: megac's `experts.w1.weight [E, ffn, h]` is transformers'
  /// `experts.{e}.w1.weight [ffn, h]`, e = 0..E-1).
  std::map<std::string, std::vector<std::string>> stacks;
};

/// `tensors` (whole parameters or gradients, by parameter name) as the model's files hold them:
/// what --save-weights and --save-grads write, so they compare with (and load into) the model's
/// own tensors. A stacked parameter becomes its members, split along dim 0.
inline void toSourceShapes(TensorMap &tensors, const SourceShapes &source) {
  for (const auto &[name, shape] : source.shapes)
    if (auto it = tensors.find(name); it != tensors.end())
      it->second.shape = shape;
  for (const auto &[name, members] : source.stacks) {
    auto it = tensors.find(name);
    if (it == tensors.end() || it->second.shape.empty() ||
        it->second.shape[0] != static_cast<int64_t>(members.size()))
      continue;
    const HostTensor &stacked = it->second;
    std::vector<int64_t> shape(stacked.shape.begin() + 1, stacked.shape.end());
    size_t bytes = stacked.bytes.size() / members.size();
    for (size_t e = 0; e < members.size(); ++e) {
      HostTensor member = HostTensor::zeros(stacked.dtype, shape);
      std::copy(stacked.bytes.begin() + long(e * bytes), stacked.bytes.begin() + long((e + 1) * bytes),
                member.bytes.begin());
      tensors[members[e]] = std::move(member);
    }
    tensors.erase(name);
  }
}

} // namespace megac::driver
