// The executed counterpart of the planned timeline (runtime/exec/Trace.h), on one rank: the
// recorder's on/off switch, what the tracing communicator records, and the gathered Chrome trace.
#include "runtime/exec/Trace.h"

#include "runtime/comm/Communicator.h"
#include "support/Files.h"
#include "support/Json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

namespace megac::runtime {
namespace {

using json::Value;

comm::Mesh mesh() { return {{"pp", "dp", "tp"}, {1, 1, 1}}; }

/// The "X" events of a Chrome trace document.
std::vector<Value> completeEvents(const Value &doc) {
  std::vector<Value> out;
  for (const Value &e : doc.find("traceEvents")->items)
    if (e.find("ph")->string == "X")
      out.push_back(e);
  return out;
}

StatusOr<Value> gathered(const Trace &trace, comm::Communicator &comm, const std::string &other) {
  std::string path = (std::filesystem::temp_directory_path() /
                      ("megac_timeline_trace_test_" + std::to_string(::getpid()) + ".json"))
                         .string();
  RETURN_IF_ERROR(
      writeGatheredTrace(comm, trace, {"rank 0 (pp 0, dp 0, tp 0)", 1234}, path, other));
  ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, readFileBytes(path, "trace"));
  std::filesystem::remove(path);
  return json::parse(std::string(bytes.begin(), bytes.end()));
}

TEST(TraceTest, RecordsOnlyWhileStarted) {
  Trace trace;
  auto self = comm::makeSelfCommunicator(mesh());
  auto comm = makeTracingCommunicator(*self, trace);
  float data[4] = {1, 2, 3, 4};
  uint32_t pp[] = {0};
  auto now = Trace::Clock::now();
  trace.add(TraceLane::kernels, "MatMul", "kernel", now, now);
  ASSERT_TRUE(comm->allReduce(pp, data, 4, DType::f32, comm::ReduceKind::sum).isOk());
  EXPECT_EQ(trace.size(), 0u);
  trace.start();
  ASSERT_TRUE(comm->allReduce(pp, data, 4, DType::f32, comm::ReduceKind::sum).isOk());
  trace.stop();
  ASSERT_TRUE(comm->barrier().isOk());
  EXPECT_EQ(trace.size(), 1u);
}

TEST(TraceTest, GathersOneRankIntoAChromeTrace) {
  Trace trace;
  auto self = comm::makeSelfCommunicator(mesh());
  auto comm = makeTracingCommunicator(*self, trace);
  trace.start();
  auto stepStart = Trace::Clock::now();
  auto functionStart = Trace::Clock::now();
  trace.setFunction("apply_gradients");
  auto kernelStart = Trace::Clock::now();
  trace.add(TraceLane::kernels, "AdamW", "kernel", kernelStart, Trace::Clock::now(),
            "\"function\": \"apply_gradients\", \"index\": 3");
  double loss[1] = {2.5};
  uint32_t dpTp[] = {1, 2};
  ASSERT_TRUE(comm->allReduce(dpTp, loss, 1, DType::f64, comm::ReduceKind::sum).isOk());
  trace.setFunction("");
  trace.add(TraceLane::kernels, "apply_gradients", "function", functionStart, Trace::Clock::now());
  int64_t payload = 7, back = 0;
  ASSERT_TRUE(comm->send(0, 5, &payload, sizeof(payload)).isOk());
  ASSERT_TRUE(comm->recv(0, 5, &back, sizeof(back)).isOk());
  EXPECT_EQ(back, 7);
  trace.add(TraceLane::pipeline, "step 2", "step", stepStart, Trace::Clock::now(), "\"step\": 2");
  EXPECT_FALSE(gathered(trace, *comm, "").isOk()); // still recording
  trace.stop();

  auto doc = gathered(trace, *comm, "\"traced_steps\": [2, 2]");
  ASSERT_TRUE(doc.isOk()) << doc.status().message();
  const Value *other = doc->find("otherData");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->find("ranks")->integer, 1);
  ASSERT_EQ(other->find("arena_bytes")->items.size(), 1u);
  EXPECT_EQ(other->find("arena_bytes")->items[0].integer, 1234);
  EXPECT_GT(other->find("peak_rss_bytes")->items[0].integer, 0);
  EXPECT_EQ(other->find("traced_steps")->items.size(), 2u);

  std::vector<Value> events = completeEvents(*doc);
  ASSERT_EQ(events.size(), 6u); // AdamW, AllReduce, apply_gradients, Send, Recv, step 2
  auto named = [&](const std::string &name) -> const Value & {
    for (const Value &e : events)
      if (e.find("name")->string == name)
        return e;
    ADD_FAILURE() << "no event " << name;
    return events.front();
  };
  const Value &reduce = named("AllReduce");
  EXPECT_EQ(reduce.find("tid")->integer, int(TraceLane::communication));
  EXPECT_EQ(reduce.find("args")->find("group")->string, "[dp, tp] (ranks 0)");
  EXPECT_EQ(reduce.find("args")->find("bytes")->integer, 8);
  EXPECT_EQ(reduce.find("args")->find("function")->string, "apply_gradients");
  const Value &send = named("Send");
  EXPECT_EQ(send.find("args")->find("peer")->integer, 0);
  EXPECT_EQ(send.find("args")->find("tag")->integer, 5);
  EXPECT_EQ(send.find("args")->find("bytes")->integer, 8);
  EXPECT_EQ(send.find("args")->find("function"), nullptr); // outside a function
  EXPECT_EQ(named("step 2").find("tid")->integer, int(TraceLane::pipeline));
  // Nesting on the kernels lane: the instruction lies inside its function.
  const Value &kernel = named("AdamW"), &function = named("apply_gradients");
  EXPECT_EQ(kernel.find("tid")->integer, int(TraceLane::kernels));
  EXPECT_LE(function.find("ts")->number, kernel.find("ts")->number);
  EXPECT_GE(function.find("ts")->number + function.find("dur")->number,
            kernel.find("ts")->number + kernel.find("dur")->number);
  for (const Value &e : events) {
    EXPECT_EQ(e.find("pid")->integer, 0);
    EXPECT_GE(e.find("ts")->number, 0);
    EXPECT_GE(e.find("dur")->number, 0);
  }
  std::vector<std::string> lanes;
  for (const Value &e : doc->find("traceEvents")->items)
    if (e.find("ph")->string == "M" && e.find("name")->string == "thread_name")
      lanes.push_back(e.find("args")->find("name")->string);
  EXPECT_EQ(lanes, (std::vector<std::string>{"kernels", "communication", "pipeline"}));
}

} // namespace
} // namespace megac::runtime
