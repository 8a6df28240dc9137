// The plan validator: megac's own checks of a verified FlatBuffer (every index, size, attribute,
// in-place write and rank entry), so the executor can index buffers and read attributes without
// checking again. Internal to the plan loader (runtime/plan/PlanLoader.h is the public API).
//
// One class, its members defined in three files:
//   PlanValidator.cpp             the mesh, rank table and pipeline; mesh axes and shardings
//   PlanValidatorProgram.cpp      each program's buffers, persistent values, schedule, ports
//   PlanValidatorInstruction.cpp  each instruction's signature, writes and attributes
#pragma once

#include "runtime/plan/plan_generated.h"
#include "support/Status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace megac::runtime {

class PlanValidator {
public:
  /// `source` names the plan in errors: "'path'" or "(from memory)".
  PlanValidator(const megac::plan::Plan &plan, std::string source)
      : plan_(plan), source_(std::move(source)) {}

  /// The first problem found, as "plan SOURCE: WHERE: WHAT"; ok when there is none.
  Status run();

  /// Whether the validator has a rule for `op`: its signature (Opcodes.def) and a check of the
  /// contents of its attrs member.
  static bool hasRule(megac::plan::Opcode op);

private:
  /// What a buffer holds for the whole program, or `temporary` (a function's value).
  enum class Kind : uint8_t { temporary, parameter, state, constant };

  template <typename T> static size_t sizeOf(const flatbuffers::Vector<T> *v) {
    return v ? v->size() : 0;
  }

  // --- The plan as a whole (PlanValidator.cpp) ---
  Status planError(const std::string &what) const;
  Status ranks();
  /// Plan.pipeline: positive sizes, and stages matching the mesh's "pp" axis when it has one.
  Status pipeline() const;

  size_t meshRank() const { return plan_.mesh() ? sizeOf(plan_.mesh()->axis_sizes()) : 0; }
  int64_t axisSize(uint32_t a) const { return plan_.mesh()->axis_sizes()->Get(a); }

  /// Mesh axis indices: each < the mesh's rank, distinct and, unless `anyOrder` (a dim's
  /// split, whose list order is its major-first order: a ZeRO-1 moment is the dp slice of a tp
  /// shard, [tp, dp]), in mesh order.
  template <typename Error>
  Status meshAxes(const flatbuffers::Vector<uint32_t> *axes, const std::string &which,
                  bool required, Error error, bool anyOrder = false) const {
    if (required && sizeOf(axes) == 0)
      return error(which + " is empty (give the mesh axes of the group)");
    uint32_t previous = 0;
    for (size_t k = 0; k < sizeOf(axes); ++k) {
      uint32_t a = axes->Get(flatbuffers::uoffset_t(k));
      if (a >= meshRank())
        return error(which + " names mesh axis " + std::to_string(a) + ", but the mesh has " +
                     std::to_string(meshRank()) + " axes");
      if (anyOrder) {
        for (size_t j = 0; j < k; ++j)
          if (axes->Get(flatbuffers::uoffset_t(j)) == a)
            return error(which + " must list distinct mesh axes");
      } else if (k > 0 && a <= previous) {
        return error(which + " must list distinct mesh axes in mesh order (major first)");
      }
      previous = a;
    }
    return Status::ok();
  }

  /// The product of the mesh axis sizes listed (the group size over those axes).
  int64_t groupSize(const flatbuffers::Vector<uint32_t> *axes) const;

  /// A parameter's or state buffer's DimShardings: dims in range and distinct, axes valid and
  /// unused by other dims, and each sharded dim's global size = local size * group size, or for
  /// a padded split padded_size = ceil(global / group size) * group size = local * group size.
  Status shardings(const flatbuffers::Vector<flatbuffers::Offset<megac::plan::DimSharding>> *list,
                   const flatbuffers::Vector<int64_t> *global, const megac::plan::Buffer &buf,
                   const std::string &which) const;

  // --- One program: buffers, persistent values, schedule, ports (PlanValidatorProgram.cpp) ---
  Status program(const megac::plan::Program &prog, size_t p);
  Status progError(const std::string &what) const;
  std::string bufferName(size_t b) const;
  /// Checks a buffer index, naming what refers to it.
  Status bufferIndex(uint32_t b, const std::string &who) const;

  const megac::plan::Buffer &buffer(uint32_t b) const { return *prog_->buffers()->Get(b); }
  size_t rankOf(uint32_t b) const { return sizeOf(buffer(b).shape()); }

  Status buffers();
  Status parameters();
  /// Marks buffer b as persistent storage of `kind`; each buffer holds one persistent value.
  Status claimPersistent(uint32_t b, Kind kind, const std::string &who);
  static const char *kindName(Kind kind);
  bool overlap(uint32_t a, uint32_t b) const;
  Status state();
  /// Program.schedule: every step's function exists; chunks and micro-batches are in range.
  Status schedule() const;
  Status constants();
  /// Persistent buffers keep their bytes across runs, so no two may share any.
  Status persistentDisjoint();
  /// The persistent buffer whose bytes b overlaps, if any (b itself when it is persistent).
  std::optional<uint32_t> persistentOverlap(uint32_t b) const;
  Status functions();
  /// Every asynchronous collective of `fn` started once and completed by one later
  /// CollectiveDone, its bytes unread in between.
  Status inFlight(const megac::plan::Function &fn) const;
  Status fnError(const std::string &what) const;
  /// Input names are unique in a function; one name in several functions is one input, so it
  /// has one dtype and shape. Inputs are copied in on each run: never into persistent bytes.
  Status inputPorts(const megac::plan::Function &fn);
  Status outputPorts(const megac::plan::Function &fn, std::set<std::string> &programNames);

  // --- One instruction (PlanValidatorInstruction.cpp) ---
  Status instError(size_t i, const std::string &what) const;
  Status instruction(const megac::plan::Instruction &inst, size_t i);
  /// What an instruction may write: never a constant; a parameter, state buffer or an input's
  /// own buffer only in place (writesInPlace); no persistent bytes through another buffer; and
  /// its outputs are disjoint.
  Status writes(const megac::plan::Instruction &inst, size_t i);
  /// The oldest plan format version that may hold `op`: 3 for the Collective and PointToPoint
  /// opcodes, 4 for those whose meaning a version-3 reader lacks (plan.fbs FormatVersion), 2
  /// for the rest.
  static uint32_t minimumVersion(megac::plan::Opcode op);
  /// Attribute contents that need only the buffers' ranks (`inRank`: input 0's); kernels check
  /// the rest. One check per attrs member of the Instruction.attrs union.
  using AttrsCheck = Status (PlanValidator::*)(const megac::plan::Instruction &inst, size_t i,
                                               size_t inRank);
  /// The check of `attrs`' contents; null for a member this validator does not know.
  static AttrsCheck attrsCheck(megac::plan::Attrs attrs);
  Status axisInRange(size_t i, int64_t axis, size_t rank, const char *of) const;
  Status noAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status compareAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status transposeAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status sliceAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status axisAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status reduceAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status normAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  Status attentionAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// CrossEntropyAttrs and EmbeddingAttrs: their vocab_axes.
  Status vocabAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// A collective's group, dims and the shapes they imply (input and output of one dtype).
  Status collectiveAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// Send/Recv: the axis exists, and every rank running this program has its peer in the mesh.
  Status p2pAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// CumSumAttrs and ScatterAttrs: the axis is in range (ScatterND's is 0).
  Status indexAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// TopKAttrs: k in [1, the input's last dim]; MoeMatmulAttrs: nothing to check.
  Status moeAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);
  /// The attribute tables of the training opcodes (and Dropout's shard fields).
  Status trainingAttrs(const megac::plan::Instruction &inst, size_t i, size_t inRank);

  const megac::plan::Plan &plan_;
  std::string source_;
  const megac::plan::Program *prog_ = nullptr;
  size_t progIndex_ = 0;
  size_t fnIndex_ = 0;
  size_t numBuffers_ = 0;
  std::vector<Kind> kind_;                 // per buffer
  std::vector<uint32_t> persistent_;       // non-empty persistent buffers, by offset
  std::set<std::string> persistentNames_;  // parameters and state
  std::map<std::string, uint32_t> inputs_; // input name -> its first port's buffer
};

} // namespace megac::runtime
