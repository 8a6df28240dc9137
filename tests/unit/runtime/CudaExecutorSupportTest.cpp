// The CUDA executor's host-side decisions, on the CPU: the device each launcher's local rank
// picks and the refusal of more local ranks than devices; the exact error that
// MEGAC_CUDA_SYNC_EACH=1 gives for a failing instruction of a fake plan and a fake CUDA error.
#include "runtime/cuda/ExecutorSupport.h"

#include "PlanBuilder.h"

#include <gtest/gtest.h>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cuda;
using namespace megac::runtime::testing;

namespace {

int deviceOf(const LauncherEnv &env, int rank, int devices) {
  StatusOr<int> device = deviceForLocalRank(env, rank, devices);
  EXPECT_TRUE(device.isOk()) << device.status().message();
  return device.isOk() ? *device : -1;
}

std::string refusal(const LauncherEnv &env, int rank, int devices) {
  StatusOr<int> device = deviceForLocalRank(env, rank, devices);
  EXPECT_FALSE(device.isOk()) << "chose device " << (device.isOk() ? *device : -1);
  return device.isOk() ? std::string() : device.status().message();
}

} // namespace

TEST(DeviceForLocalRank, EachLauncher) {
  // World rank 13 on a node of 8 GPUs: the local rank, not the world rank, picks the device.
  EXPECT_EQ(
      deviceOf({{"OMPI_COMM_WORLD_LOCAL_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}, 13, 8),
      5);
  EXPECT_EQ(deviceOf({{"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "4"}}, 13, 8), 3);
  EXPECT_EQ(deviceOf({{"LOCAL_RANK", "6"}, {"LOCAL_WORLD_SIZE", "8"}}, 13, 8), 6);
  EXPECT_EQ(deviceOf({{"SLURM_LOCALID", "2"}, {"SLURM_NTASKS_PER_NODE", "4"}}, 13, 8), 2);
  EXPECT_EQ(deviceOf({{"SLURM_LOCALID", "7"}, {"SLURM_TASKS_PER_NODE", "8(x2)"}}, 13, 8), 7);
  // No size variable: the local rank alone.
  EXPECT_EQ(deviceOf({{"LOCAL_RANK", "1"}}, 13, 2), 1);
  // No launcher: the world rank (one process, or ranks of one node).
  EXPECT_EQ(deviceOf({}, 0, 1), 0);
  EXPECT_EQ(deviceOf({}, 3, 4), 3);
}

TEST(DeviceForLocalRank, InnerLauncherBeatsOuter) {
  // Open MPI first; Slurm last: srun's one task per node passes SLURM_LOCALID=0 to everything
  // that Hydra's proxy or torchrun starts under it.
  EXPECT_EQ(deviceOf({{"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"MPI_LOCALRANKID", "2"},
                      {"LOCAL_RANK", "3"},
                      {"SLURM_LOCALID", "0"}},
                     1, 8),
            1);
  EXPECT_EQ(deviceOf({{"MPI_LOCALRANKID", "2"}, {"LOCAL_RANK", "3"}, {"SLURM_LOCALID", "0"}}, 9, 8),
            2);
  EXPECT_EQ(deviceOf({{"LOCAL_RANK", "3"},
                      {"LOCAL_WORLD_SIZE", "8"},
                      {"SLURM_LOCALID", "0"},
                      {"SLURM_NTASKS_PER_NODE", "1"}},
                     11, 8),
            3);
}

TEST(DeviceForLocalRank, SlurmTasksPerNodeList) {
  // "3(x2),5": three tasks on nodes 0 and 1, five on node 2, which has 4 GPUs.
  LauncherEnv env{{"SLURM_LOCALID", "1"}, {"SLURM_TASKS_PER_NODE", "3(x2),5"}};
  env["SLURM_NODEID"] = "1";
  EXPECT_EQ(deviceOf(env, 4, 4), 1);
  env["SLURM_NODEID"] = "2";
  EXPECT_EQ(refusal(env, 7, 4),
            "rank 7: 5 ranks on this node (SLURM_TASKS_PER_NODE=3(x2),5 at SLURM_NODEID=2) but 4 "
            "visible CUDA devices (local rank 1 from SLURM_LOCALID=1); each rank needs a GPU of "
            "its own (NCCL refuses two ranks on one device): start at most 4 ranks per node, or "
            "make more devices visible");
  // Unequal counts and no node id: the size is unknown, so only the local rank is checked.
  env.erase("SLURM_NODEID");
  EXPECT_EQ(deviceOf(env, 7, 4), 1);
}

TEST(DeviceForLocalRank, RefusesMoreLocalRanksThanDevices) {
  EXPECT_EQ(
      refusal({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "8"}}, 0, 4),
      "rank 0: 8 ranks on this node (OMPI_COMM_WORLD_LOCAL_SIZE=8) but 4 visible CUDA "
      "devices (local rank 0 from OMPI_COMM_WORLD_LOCAL_RANK=0); each rank needs a GPU of "
      "its own (NCCL refuses two ranks on one device): start at most 4 ranks per node, or "
      "make more devices visible");
  // Every rank of the node refuses, not just those past the last device.
  EXPECT_NE(refusal({{"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}}, 0, 1), "");
  EXPECT_EQ(refusal({{"LOCAL_RANK", "2"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}, 2, 2),
            "rank 2: at least 3 ranks on this node but 2 visible CUDA devices (local rank 2 from "
            "LOCAL_RANK=2); each rank needs a GPU of its own (NCCL refuses two ranks on one "
            "device): start at most 2 ranks per node, or make more devices visible "
            "(CUDA_VISIBLE_DEVICES=0,1)");
  EXPECT_EQ(refusal({}, 5, 4),
            "rank 5: no launcher's local-rank variable is set (OMPI_COMM_WORLD_LOCAL_RANK, "
            "MPI_LOCALRANKID, LOCAL_RANK, SLURM_LOCALID), and the world rank is not below the 4 "
            "visible CUDA devices: start the ranks with a launcher that sets one, or make more "
            "devices visible");
  EXPECT_EQ(refusal({}, 0, 0), "no CUDA device is visible");
}

TEST(DeviceForLocalRank, OneDeviceGivenThroughCudaVisibleDevices) {
  // Slurm's --gpus-per-task=1: each task sees only its own GPU, as device 0.
  EXPECT_EQ(
      deviceOf(
          {{"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "4"}, {"CUDA_VISIBLE_DEVICES", "3"}},
          3, 1),
      0);
  // Without CUDA_VISIBLE_DEVICES one device for four ranks is refused.
  EXPECT_NE(refusal({{"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "4"}}, 3, 1), "");
}

TEST(DeviceForLocalRank, MalformedVariables) {
  EXPECT_EQ(refusal({{"OMPI_COMM_WORLD_LOCAL_RANK", "one"}}, 0, 8),
            "OMPI_COMM_WORLD_LOCAL_RANK='one' is not a local rank (a non-negative integer) (it is "
            "read to choose this process's CUDA device)");
  EXPECT_NE(refusal({{"LOCAL_RANK", "-1"}}, 0, 8), "");
  EXPECT_NE(refusal({{"LOCAL_RANK", "1x"}}, 0, 8), "");
  EXPECT_NE(refusal({{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "0"}}, 0, 8), "");
  EXPECT_EQ(refusal({{"MPI_LOCALRANKID", "4"}, {"MPI_LOCALNRANKS", "4"}}, 4, 8),
            "rank 4: local rank 4 (MPI_LOCALRANKID=4) is not below the ranks on the node "
            "(MPI_LOCALNRANKS=4): the launcher's variables disagree");
}

TEST(SyncEach, Requested) {
  auto requested = [](const char *value) {
    StatusOr<bool> on = syncEachRequested(value);
    EXPECT_TRUE(on.isOk()) << on.status().message();
    return on.isOk() && on.value();
  };
  EXPECT_FALSE(requested(nullptr));
  EXPECT_FALSE(requested(""));
  EXPECT_FALSE(requested("0"));
  EXPECT_TRUE(requested("1"));
  StatusOr<bool> bad = syncEachRequested("yes");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(), "MEGAC_CUDA_SYNC_EACH='yes' is not 0 or 1 (1: synchronize "
                                    "after every instruction and name the one that fails)");
}

TEST(SyncEach, FailureNamesTheInstructionItsOpcodeAndLocation) {
  // A fake instruction table: forward's instruction 2 is the MatMul of model.onnx's attention.
  PlanSpec plan;
  ProgramSpec &p = plan.program();
  p.name = "stage0";
  uint32_t a = p.input("a", DType::f32, {2, 2});
  uint32_t b = p.buffer("b", DType::f32, {2, 2});
  uint32_t c = p.buffer("c", DType::f32, {2, 2});
  p.functions[0].name = "forward";
  p.inst(fb::Opcode::Relu, {a}, b, "model.onnx:node/attn/Relu");
  p.inst(fb::Opcode::Add, {a, b}, c, "model.onnx:node/attn/Add");
  p.inst(fb::Opcode::MatMul, {b, c}, a, "model.onnx:node/attn/MatMul");
  p.inst(fb::Opcode::Neg, {a}, b); // no location
  std::vector<uint8_t> bytes = plan.build();
  const fb::Program &program = *fb::GetPlan(bytes.data())->programs()->Get(0);

  EXPECT_EQ(syncEachFailure(program, 0, 0, 2, 1, StepKind::single, "cudaErrorIllegalAddress",
                            "an illegal memory access was encountered", 0),
            "program 'stage0', function 'forward', instruction 2 (MatMul at "
            "'model.onnx:node/attn/MatMul') failed on CUDA device 0: cudaErrorIllegalAddress: an "
            "illegal memory access was encountered (MEGAC_CUDA_SYNC_EACH=1 synchronized after "
            "every instruction before it)");
  EXPECT_EQ(syncEachFailure(program, 0, 0, 0, 2, StepKind::fused, "cudaErrorLaunchFailure",
                            "unspecified launch failure", 3),
            "program 'stage0', function 'forward', instruction 0 (Relu at "
            "'model.onnx:node/attn/Relu') (fused with the 1 instructions after it) failed on CUDA "
            "device 3: cudaErrorLaunchFailure: unspecified launch failure (MEGAC_CUDA_SYNC_EACH=1 "
            "synchronized after every instruction before it; MEGAC_NO_FUSION=1 runs the fused "
            "instructions one by one)");
  EXPECT_EQ(syncEachFailure(program, 0, 0, 3, 1, StepKind::single, "cudaErrorIllegalAddress",
                            "an illegal memory access was encountered", 1),
            "program 'stage0', function 'forward', instruction 3 (Neg) failed on CUDA device 1: "
            "cudaErrorIllegalAddress: an illegal memory access was encountered "
            "(MEGAC_CUDA_SYNC_EACH=1 synchronized after every instruction before it)");
  EXPECT_EQ(describeStep(program, 0, 0, 1, 3, StepKind::adamw),
            "program 'stage0', function 'forward', instruction 1 (Add at "
            "'model.onnx:node/attn/Add') (with the 2 AdamW instructions after it)");
}

TEST(CudaProfile, RequestedByZeroOrOne) {
  EXPECT_FALSE(profileRequested(nullptr).value());
  EXPECT_FALSE(profileRequested("").value());
  EXPECT_FALSE(profileRequested("0").value());
  EXPECT_TRUE(profileRequested("1").value());
  StatusOr<bool> bad = profileRequested("yes");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(),
            "MEGAC_CUDA_PROFILE='yes' is not 0 or 1 (1: time every launch step with CUDA events "
            "and print the GPU time per opcode when the executor is destroyed)");
}

TEST(CudaProfile, KeysNameTheOpcodeOrTheLaunch) {
  EXPECT_EQ(profileKey(fb::Opcode::MatMul, StepKind::single), "MatMul");
  EXPECT_EQ(profileKey(fb::Opcode::Relu, StepKind::fused), "fused elementwise");
  EXPECT_EQ(profileKey(fb::Opcode::AdamW, StepKind::adamw), "AdamW (multi-tensor)");
  EXPECT_EQ(profileKey(fb::Opcode::AdamW, StepKind::single), "AdamW");
}

TEST(CudaProfile, TableSumsByKeyLargestFirst) {
  KernelProfile profile;
  EXPECT_TRUE(profile.empty());
  profile.add("Relu", 0.5); // reset below forgets it
  profile.countRun();
  profile.reset();
  EXPECT_TRUE(profile.empty());
  EXPECT_EQ(profile.runs(), 0u);
  // Two runs: MatMul 3 calls (6 ms), fused 2 calls (3 ms), AdamW (multi-tensor) 1 call (1 ms).
  for (int run = 0; run < 2; ++run) {
    profile.add("MatMul", 1.0);
    profile.add("fused elementwise", 1.5);
    profile.countRun();
  }
  profile.add("MatMul", 4.0);
  profile.add("AdamW (multi-tensor)", 1.0);
  EXPECT_EQ(profile.runs(), 2u);
  EXPECT_EQ(profile.format(3),
            "megac: CUDA profile of rank 3 over 2 function runs: 6 launch steps, 10.000 ms\n"
            "  key                     calls   total ms  % time    mean us\n"
            "  MatMul                      3      6.000    60.0   2000.000\n"
            "  fused elementwise           2      3.000    30.0   1500.000\n"
            "  AdamW (multi-tensor)        1      1.000    10.0   1000.000\n");
}
