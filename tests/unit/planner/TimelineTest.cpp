// The timed pipeline schedule (planner/Timeline.h): its times against simulateSchedule and
// closed forms, the SVG's structure (well-formed XML, one block per step on its stage's row, no
// overlaps) and the Chrome trace's events.
#include "planner/Timeline.h"

#include "support/Json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

namespace megac::planner {
namespace {

// ---- A small XML reader: enough to check that the SVG is well-formed ----

struct Element {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text; // character data directly inside, entities decoded
  int parent = -1;
};

/// Parses `xml` (a prolog, one root element, no DTD) into its elements in document order;
/// returns an error message, or empty when well-formed.
std::string parseXml(const std::string &xml, std::vector<Element> &out) {
  size_t i = 0, n = xml.size();
  std::vector<int> open;
  bool rootSeen = false;
  auto isNameChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':' ||
           c == '.';
  };
  auto decode = [](const std::string &raw, std::string &decoded) -> bool {
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '<')
        return false;
      if (raw[k] != '&') {
        decoded += raw[k];
        continue;
      }
      size_t semi = raw.find(';', k);
      if (semi == std::string::npos)
        return false;
      std::string entity = raw.substr(k + 1, semi - k - 1);
      static const std::map<std::string, char> named = {
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      if (auto it = named.find(entity); it != named.end())
        decoded += it->second;
      else if (entity.size() < 2 || entity[0] != '#')
        return false;
      k = semi;
    }
    return true;
  };
  while (i < n) {
    if (xml[i] != '<') {
      size_t next = xml.find('<', i);
      std::string raw = xml.substr(i, next == std::string::npos ? n - i : next - i);
      std::string decoded;
      if (!decode(raw, decoded))
        return "bad character data at " + std::to_string(i);
      if (open.empty()) {
        if (raw.find_first_not_of(" \t\r\n") != std::string::npos)
          return "text outside the root element at " + std::to_string(i);
      } else {
        out[open.back()].text += decoded;
      }
      i = next == std::string::npos ? n : next;
      continue;
    }
    if (xml.compare(i, 5, "<?xml") == 0) {
      if (i != 0)
        return "the XML declaration is not at the start";
      size_t end = xml.find("?>", i);
      if (end == std::string::npos)
        return "unterminated XML declaration";
      i = end + 2;
      continue;
    }
    if (xml.compare(i, 4, "<!--") == 0) {
      size_t end = xml.find("-->", i);
      if (end == std::string::npos)
        return "unterminated comment";
      i = end + 3;
      continue;
    }
    if (xml.compare(i, 2, "</") == 0) {
      size_t j = i + 2;
      while (j < n && isNameChar(xml[j]))
        ++j;
      std::string name = xml.substr(i + 2, j - i - 2);
      while (j < n && std::isspace(static_cast<unsigned char>(xml[j])))
        ++j;
      if (j >= n || xml[j] != '>')
        return "bad end tag at " + std::to_string(i);
      if (open.empty() || out[open.back()].name != name)
        return "end tag </" + name + "> does not match at " + std::to_string(i);
      open.pop_back();
      i = j + 1;
      continue;
    }
    // A start tag.
    size_t j = i + 1;
    while (j < n && isNameChar(xml[j]))
      ++j;
    Element e;
    e.name = xml.substr(i + 1, j - i - 1);
    if (e.name.empty())
      return "bad tag at " + std::to_string(i);
    if (open.empty() && rootSeen)
      return "a second root element at " + std::to_string(i);
    bool selfClosing = false;
    for (;;) {
      size_t ws = j;
      while (j < n && std::isspace(static_cast<unsigned char>(xml[j])))
        ++j;
      if (j >= n)
        return "unterminated tag <" + e.name + ">";
      if (xml[j] == '>') {
        ++j;
        break;
      }
      if (xml.compare(j, 2, "/>") == 0) {
        selfClosing = true;
        j += 2;
        break;
      }
      if (ws == j)
        return "no space before an attribute of <" + e.name + "> at " + std::to_string(j);
      size_t k = j;
      while (k < n && isNameChar(xml[k]))
        ++k;
      std::string attr = xml.substr(j, k - j);
      if (attr.empty() || k + 1 >= n || xml[k] != '=' || xml[k + 1] != '"')
        return "bad attribute in <" + e.name + "> at " + std::to_string(j);
      size_t close = xml.find('"', k + 2);
      if (close == std::string::npos)
        return "unterminated attribute value in <" + e.name + ">";
      std::string value;
      if (!decode(xml.substr(k + 2, close - k - 2), value))
        return "bad attribute value in <" + e.name + "> at " + std::to_string(k);
      if (!e.attrs.emplace(attr, value).second)
        return "duplicate attribute '" + attr + "' in <" + e.name + ">";
      j = close + 1;
    }
    e.parent = open.empty() ? -1 : open.back();
    out.push_back(std::move(e));
    rootSeen = true;
    if (!selfClosing)
      open.push_back(static_cast<int>(out.size()) - 1);
    i = j;
  }
  if (!open.empty())
    return "unclosed element <" + out[open.back()].name + ">";
  if (!rootSeen)
    return "no root element";
  return {};
}

TEST(XmlCheckerTest, RejectsMalformedDocuments) {
  std::vector<Element> e;
  EXPECT_EQ(parseXml("<svg><g><rect x=\"1\"/></g></svg>", e), "");
  for (const char *bad :
       {"<svg><g></svg>", "<svg></svg><svg></svg>", "<svg x=1></svg>", "<svg>a < b</svg>",
        "<svg>&nbsp;</svg>", "<svg", "<svg x=\"1\" x=\"2\"/>", "<svg><g></g>"}) {
    std::vector<Element> elements;
    EXPECT_NE(parseXml(bad, elements), "") << bad;
  }
}

// ---- Times ----

PipelineShape interleavedShape() { return {4, 2, 8}; }

TEST(TimelineTest, MatchesSimulateScheduleWithUniformDurations) {
  struct Case {
    ScheduleKind kind;
    PipelineShape shape;
  };
  for (Case c :
       {Case{ScheduleKind::gpipe, {4, 1, 8}}, Case{ScheduleKind::oneFOneB, {4, 1, 8}},
        Case{ScheduleKind::oneFOneB, {3, 1, 2}}, Case{ScheduleKind::interleaved, {4, 2, 8}},
        Case{ScheduleKind::interleaved, {2, 3, 4}}}) {
    auto steps = buildSchedule(c.kind, c.shape, nullptr);
    ASSERT_TRUE(steps);
    ScheduleSimulation sim = simulateSchedule(c.shape, *steps, 1.0, 2.0);
    Timeline tl = simulateTimeline(c.shape, *steps, {{1.0}, {2.0}, 0.0}, scheduleName(c.kind));
    ASSERT_EQ(tl.error, "");
    EXPECT_DOUBLE_EQ(tl.makespan, sim.makespan) << scheduleName(c.kind);
    EXPECT_DOUBLE_EQ(tl.bubbleFraction, sim.bubbleFraction) << scheduleName(c.kind);
    EXPECT_EQ(static_cast<int64_t>(tl.steps.size()),
              2 * c.shape.stages * c.shape.virtualStages * c.shape.microBatches);
  }
}

TEST(TimelineTest, OneFOneBBubbleClosedForm) {
  // 4 stages, 8 micro-batches, backward = 2 x forward: bubble (p-1)/(m+p-1) = 3/11.
  Timeline tl = scheduleTimeline(ScheduleKind::oneFOneB, {4, 1, 8}, {{1.0}, {2.0}, 0.0});
  ASSERT_EQ(tl.error, "");
  EXPECT_DOUBLE_EQ(tl.makespan, (8 + 3) * 3.0);
  EXPECT_NEAR(tl.bubbleFraction, 3.0 / 11.0, 1e-12);
}

TEST(TimelineTest, SendLatencyDelaysCrossStageInputs) {
  // 2 stages, 1 micro-batch: F on stage 0 [0, 1], F on stage 1 [1 + L, 2 + L], B on stage 1
  // [2 + L, 4 + L], B on stage 0 [4 + 2L, 6 + 2L].
  const double L = 0.25;
  Timeline tl = scheduleTimeline(ScheduleKind::oneFOneB, {2, 1, 1}, {{1.0}, {2.0}, L});
  ASSERT_EQ(tl.error, "");
  ASSERT_EQ(tl.steps.size(), 4u);
  auto find = [&](int64_t stage, StepKind kind) {
    for (const TimedStep &t : tl.steps)
      if (t.stage == stage && t.step.kind == kind)
        return t;
    ADD_FAILURE() << "no step";
    return TimedStep{};
  };
  TimedStep f0 = find(0, StepKind::forward), f1 = find(1, StepKind::forward);
  TimedStep b0 = find(0, StepKind::backward), b1 = find(1, StepKind::backward);
  EXPECT_DOUBLE_EQ(f0.end, 1.0);
  EXPECT_DOUBLE_EQ(f1.start, 1 + L);
  EXPECT_EQ(f1.producerStage, 0);
  EXPECT_DOUBLE_EQ(f1.inputSent, 1.0);
  EXPECT_DOUBLE_EQ(b1.start, 2 + L);
  EXPECT_EQ(b1.producerStage, -1);
  EXPECT_DOUBLE_EQ(b0.start, 4 + 2 * L);
  EXPECT_EQ(b0.producerStage, 1);
  EXPECT_DOUBLE_EQ(tl.makespan, 6 + 2 * L);
  EXPECT_NEAR(tl.bubbleFraction, (2 * (6 + 2 * L) - 6) / (2 * (6 + 2 * L)), 1e-12);
}

TEST(TimelineTest, PerChunkDurations) {
  // One stage, two chunks (interleaved, p = 1): chunk 1 takes 3 forward, 5 backward; nothing
  // waits, so the makespan is the sum and there is no bubble.
  Timeline tl = scheduleTimeline(ScheduleKind::interleaved, {1, 2, 2}, {{1.0, 3.0}, {2.0, 5.0}});
  ASSERT_EQ(tl.error, "");
  EXPECT_DOUBLE_EQ(tl.makespan, 2 * (1 + 3 + 2 + 5));
  EXPECT_DOUBLE_EQ(tl.bubbleFraction, 0);
  for (const TimedStep &t : tl.steps)
    EXPECT_DOUBLE_EQ(t.end - t.start, t.step.kind == StepKind::forward
                                          ? (t.step.chunk == 0 ? 1.0 : 3.0)
                                          : (t.step.chunk == 0 ? 2.0 : 5.0));
}

TEST(TimelineTest, SplitSchedulesRunBAndWFromTheWeightShare) {
  // zb-h1, 2 stages, 2 micro-batches, backward 3 of which W 1: B steps last 2, W steps 1, and
  // the timeline is the simulator's at F = 1, B = 2, W = 1.
  PipelineShape shape{2, 1, 2};
  auto steps = buildSchedule(ScheduleKind::zbH1, shape, nullptr);
  ASSERT_TRUE(steps);
  Timeline tl = simulateTimeline(shape, *steps, {{1.0}, {3.0}, 0.0, {1.0}}, "zb-h1");
  ASSERT_EQ(tl.error, "");
  ScheduleSimulation sim = simulateSchedule(shape, *steps, schedule::StepCosts{1, 2, 1});
  EXPECT_DOUBLE_EQ(tl.makespan, sim.makespan);
  for (const TimedStep &t : tl.steps)
    EXPECT_DOUBLE_EQ(t.end - t.start, t.step.kind == StepKind::forward         ? 1.0
                                      : t.step.kind == StepKind::backwardInput ? 2.0
                                                                               : 1.0);
  std::string svg = timelineSvg(tl);
  EXPECT_NE(svg.find("W (weight gradients)"), std::string::npos);
  EXPECT_NE(svg.find("block backward_weight"), std::string::npos);
  EXPECT_NE(simulateTimeline(shape, *steps, {{1.0}, {3.0}, 0.0, {4.0}}).error.find("exceeds"),
            std::string::npos);
}

TEST(TimelineTest, ErrorsNameTheProblem) {
  EXPECT_NE(scheduleTimeline(ScheduleKind::interleaved, {4, 2, 6}, {}).error.find("divisible"),
            std::string::npos);
  EXPECT_NE(scheduleTimeline(ScheduleKind::interleaved, {4, 2, 8}, {{1, 2, 3}, {2}})
                .error.find("need 1 or 8"),
            std::string::npos);
  EXPECT_NE(scheduleTimeline(ScheduleKind::oneFOneB, {2, 1, 2}, {{-1}, {2}}).error.find(">= 0"),
            std::string::npos);
  auto steps = *buildSchedule(ScheduleKind::oneFOneB, {2, 1, 2}, nullptr);
  std::swap(steps[1][0], steps[1][1]); // a backward before its forward
  EXPECT_NE(simulateTimeline({2, 1, 2}, steps, {}).error.find("before its forward"),
            std::string::npos);
}

// ---- The SVG ----

struct Block {
  std::string kind;
  int64_t stage, chunk, microBatch;
  double x, width;
  std::string label;
};

std::vector<Block> blocksOf(const std::vector<Element> &elements) {
  std::vector<Block> blocks;
  for (size_t i = 0; i < elements.size(); ++i) {
    const Element &e = elements[i];
    auto cls = e.attrs.find("class");
    if (e.name != "rect" || cls == e.attrs.end() || !cls->second.starts_with("block "))
      continue;
    Block b{cls->second.substr(6),
            std::stoll(e.attrs.at("data-stage")),
            std::stoll(e.attrs.at("data-chunk")),
            std::stoll(e.attrs.at("data-micro-batch")),
            std::stod(e.attrs.at("x")),
            std::stod(e.attrs.at("width")),
            {}};
    // The label: a <text> sibling in the block's group.
    for (size_t k = i + 1; k < elements.size() && elements[k].parent == e.parent; ++k)
      if (elements[k].name == "text")
        b.label = elements[k].text;
    blocks.push_back(b);
  }
  return blocks;
}

TEST(TimelineSvgTest, InterleavedFourStagesIsWellFormedWithOneBlockPerStep) {
  PipelineShape shape = interleavedShape();
  // Forward 1 ms, backward 2 ms per chunk, 0.1 ms per transfer between stages.
  Timeline tl = scheduleTimeline(ScheduleKind::interleaved, shape, {{1e-3}, {2e-3}, 1e-4});
  ASSERT_EQ(tl.error, "");
  std::string svg = timelineSvg(tl, "tp 1, pp 4, vpp 2, dp 1 (example)");
  {
    std::ofstream out(std::string(MEGAC_TIMELINE_OUT_DIR) + "/interleaved_pp4_vpp2_m8.svg");
    out << svg;
  }
  std::vector<Element> elements;
  ASSERT_EQ(parseXml(svg, elements), "");
  ASSERT_FALSE(elements.empty());
  EXPECT_EQ(elements[0].name, "svg");
  EXPECT_EQ(elements[0].attrs["xmlns"], "http://www.w3.org/2000/svg");

  // Title: the schedule's name and bubble fraction.
  std::string title;
  for (const Element &e : elements)
    if (e.attrs.count("class") && e.attrs.at("class") == "title")
      title = e.text;
  EXPECT_NE(title.find("interleaved-1f1b"), std::string::npos) << title;
  char bubble[32];
  std::snprintf(bubble, sizeof(bubble), "bubble %.1f%%", tl.bubbleFraction * 100);
  EXPECT_NE(title.find(bubble), std::string::npos) << title;

  // Exactly one forward and one backward block per (chunk, micro-batch), on stage chunk % p,
  // labelled with the micro-batch.
  std::vector<Block> blocks = blocksOf(elements);
  const int64_t chunks = shape.stages * shape.virtualStages;
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), 2 * chunks * shape.microBatches);
  std::set<std::tuple<std::string, int64_t, int64_t>> seen;
  for (const Block &b : blocks) {
    EXPECT_TRUE(b.kind == "forward" || b.kind == "backward") << b.kind;
    EXPECT_TRUE(seen.insert({b.kind, b.chunk, b.microBatch}).second)
        << b.kind << " chunk " << b.chunk << " micro-batch " << b.microBatch << " twice";
    EXPECT_EQ(b.stage, b.chunk % shape.stages);
    EXPECT_EQ(b.label, std::to_string(b.microBatch));
    EXPECT_GT(b.width, 0);
  }
  for (const char *kind : {"forward", "backward"})
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t m = 0; m < shape.microBatches; ++m)
        EXPECT_TRUE(seen.count({kind, c, m})) << kind << " c" << c << " m" << m << " missing";

  // Blocks on a row do not overlap (coordinates are rounded to 0.1 px).
  for (int64_t s = 0; s < shape.stages; ++s) {
    std::vector<Block> row;
    for (const Block &b : blocks)
      if (b.stage == s)
        row.push_back(b);
    std::sort(row.begin(), row.end(), [](const Block &a, const Block &b) { return a.x < b.x; });
    for (size_t i = 1; i < row.size(); ++i)
      EXPECT_LE(row[i - 1].x + row[i - 1].width, row[i].x + 0.15)
          << "stage " << s << ": blocks " << i - 1 << " and " << i << " overlap";
  }
  // The interleaved warm-up leaves stage 3 idle at the start: a visible gap before its first
  // block, and (with backward = 2 x forward) a bubble below 1F1B's 3/11.
  double firstOnLast = 1e30, rowLeft = 1e30;
  for (const Block &b : blocks) {
    rowLeft = std::min(rowLeft, b.x);
    if (b.stage == 3)
      firstOnLast = std::min(firstOnLast, b.x);
  }
  EXPECT_GT(firstOnLast, rowLeft + 10);
  EXPECT_LT(tl.bubbleFraction, 3.0 / 11.0);
  EXPECT_GT(tl.bubbleFraction, 0.0);

  // Sends: one line per cross-stage input (every chunk boundary, both directions).
  size_t sends = 0;
  for (const Element &e : elements)
    sends += e.name == "line" && e.attrs.count("class") && e.attrs.at("class") == "send";
  EXPECT_EQ(static_cast<int64_t>(sends), 2 * (chunks - 1) * shape.microBatches);
}

TEST(TimelineSvgTest, EverySchedulePp4M8) {
  // docs/pipeline.md's drawings (copied from the build's tests/unit/planner into docs/pipeline/):
  // every schedule at p = 4, m = 8, F = 1 ms, whole backward 2 ms of which W 1 ms, 0.1 ms per
  // transfer. Each is well formed, has one block per step, and its blocks are the simulator's.
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::oneFOneB, ScheduleKind::interleaved,
                            ScheduleKind::zbH1, ScheduleKind::zbH2, ScheduleKind::zbv}) {
    int64_t v = kind == ScheduleKind::interleaved || kind == ScheduleKind::zbv ? 2 : 1;
    PipelineShape shape{4, v, 8, schedule::placementOf(kind)};
    // A chunk of a two-chunk stage holds half its layers.
    StepDurations d{{1e-3 / double(v)}, {2e-3 / double(v)}, 1e-4, {1e-3 / double(v)}};
    Timeline tl = scheduleTimeline(kind, shape, d);
    ASSERT_EQ(tl.error, "") << scheduleName(kind);
    std::string svg = timelineSvg(tl, "F 1 ms, B 1 ms, W 1 ms per stage and micro-batch (1F1B, "
                                      "GPipe, interleaved: B + W as one backward), 0.1 ms sends");
    std::ofstream(std::string(MEGAC_TIMELINE_OUT_DIR) + "/" + scheduleName(kind) + "_pp4_m8.svg")
        << svg;
    std::vector<Element> elements;
    ASSERT_EQ(parseXml(svg, elements), "") << scheduleName(kind);
    std::vector<Block> blocks = blocksOf(elements);
    int64_t stepsPerPair = schedule::splitsBackward(kind) ? 3 : 2;
    EXPECT_EQ(int64_t(blocks.size()), stepsPerPair * 4 * v * 8) << scheduleName(kind);
    int64_t weights = std::count_if(blocks.begin(), blocks.end(),
                                    [](const Block &b) { return b.kind == "backward_weight"; });
    EXPECT_EQ(weights, schedule::splitsBackward(kind) ? 4 * v * 8 : 0) << scheduleName(kind);
  }
}

TEST(TimelineSvgTest, EscapesTheSubtitle) {
  Timeline tl = scheduleTimeline(ScheduleKind::oneFOneB, {2, 1, 2}, {});
  std::string svg = timelineSvg(tl, "a <b> & \"c\"");
  std::vector<Element> elements;
  ASSERT_EQ(parseXml(svg, elements), "");
  bool found = false;
  for (const Element &e : elements)
    found = found || (e.attrs.count("class") && e.attrs.at("class") == "subtitle" &&
                      e.text == "a <b> & \"c\"");
  EXPECT_TRUE(found);
}

// ---- The Chrome trace ----

TEST(ChromeTraceTest, InterleavedIsValidJsonWithOneEventPerStep) {
  PipelineShape shape = interleavedShape();
  Timeline tl = scheduleTimeline(ScheduleKind::interleaved, shape, {{1e-3}, {2e-3}, 1e-4});
  ASSERT_EQ(tl.error, "");
  std::string text = chromeTrace(tl);
  {
    std::ofstream out(std::string(MEGAC_TIMELINE_OUT_DIR) + "/interleaved_pp4_vpp2_m8.json");
    out << text;
  }
  auto parsed = json::parse(text);
  ASSERT_TRUE(parsed.isOk()) << parsed.status().message();
  const json::Value *events = parsed->find("traceEvents");
  ASSERT_TRUE(events && events->kind == json::Value::Kind::array);
  const int64_t chunks = shape.stages * shape.virtualStages;
  int64_t steps = 0, transfers = 0;
  std::set<std::string> names;
  for (const json::Value &e : events->items) {
    if (e.find("ph")->string != "X")
      continue;
    int64_t pid = e.find("pid")->integer, tid = e.find("tid")->integer;
    EXPECT_GE(e.find("dur")->number, 0);
    if (tid == 1) {
      ++transfers;
      EXPECT_NEAR(e.find("dur")->number, 100.0, 1e-6); // 0.1 ms in microseconds
      continue;
    }
    ++steps;
    EXPECT_EQ(tid, 2); // the pipeline lane, as in `megac train --trace`
    const json::Value *args = e.find("args");
    int64_t chunk = args->find("chunk")->integer, mb = args->find("micro_batch")->integer;
    bool forward = args->find("kind")->string == "forward";
    EXPECT_EQ(pid, chunk % shape.stages);
    EXPECT_EQ(e.find("name")->string,
              (forward ? "F" : "B") + std::to_string(mb) + " c" + std::to_string(chunk));
    EXPECT_NEAR(e.find("dur")->number, forward ? 1000.0 : 2000.0, 1e-6);
    names.insert(e.find("name")->string);
  }
  EXPECT_EQ(steps, 2 * chunks * shape.microBatches);
  EXPECT_EQ(static_cast<int64_t>(names.size()), steps);
  EXPECT_EQ(transfers, 2 * (chunks - 1) * shape.microBatches);
  const json::Value *other = parsed->find("otherData");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->find("schedule")->string, "interleaved-1f1b");
  EXPECT_NEAR(other->find("bubble_fraction")->number, tl.bubbleFraction, 1e-8);
}

} // namespace
} // namespace megac::planner
