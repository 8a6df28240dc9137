// The timed pipeline schedule and its SVG and Chrome-trace renderings (Timeline.h).
#include "planner/Timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace megac::planner {

namespace {

/// The duration of `chunk` from a per-chunk list or a single value.
double durationOf(const std::vector<double> &list, int64_t chunk) {
  return list.size() == 1 ? list[0] : list[static_cast<size_t>(chunk)];
}

std::string checkDurations(const std::vector<double> &list, const char *kind, int64_t chunks) {
  if (list.size() != 1 && static_cast<int64_t>(list.size()) != chunks)
    return std::string(kind) + " durations: need 1 or " + std::to_string(chunks) +
           " (one per chunk), got " + std::to_string(list.size());
  for (size_t c = 0; c < list.size(); ++c)
    if (!std::isfinite(list[c]) || list[c] < 0)
      return std::string(kind) + " duration of chunk " + std::to_string(c) +
             " must be finite and >= 0, got " + std::to_string(list[c]);
  return {};
}

} // namespace

// The per-chunk durations as the simulator's costs; simulateSchedule times every step.
Timeline simulateTimeline(const PipelineShape &shape,
                          const std::vector<std::vector<ScheduleStep>> &steps,
                          const StepDurations &durations, std::string name) {
  Timeline tl;
  tl.name = std::move(name);
  tl.shape = shape;
  if (static_cast<int64_t>(steps.size()) != shape.stages) {
    tl.error = "the schedule has " + std::to_string(steps.size()) + " stages, the shape " +
               std::to_string(shape.stages);
    return tl;
  }
  for (int64_t s = 0; s < shape.stages; ++s)
    if (!schedule::checkStageSchedule(shape, s, steps[s], &tl.error))
      return tl;
  const int64_t chunks = shape.stages * shape.virtualStages;
  for (std::string e : {checkDurations(durations.forward, "forward", chunks),
                        checkDurations(durations.backward, "backward", chunks),
                        checkDurations(durations.weight, "weight-gradient", chunks)})
    if (!e.empty()) {
      tl.error = e;
      return tl;
    }
  if (!std::isfinite(durations.sendLatency) || durations.sendLatency < 0) {
    tl.error = "send latency must be finite and >= 0, got " + std::to_string(durations.sendLatency);
    return tl;
  }
  schedule::PipelineCosts costs;
  costs.transfer = durations.sendLatency;
  costs.chunks.clear();
  bool uniform = durations.forward.size() == 1 && durations.backward.size() == 1 &&
                 durations.weight.size() == 1;
  for (int64_t c = 0; c < (uniform ? 1 : chunks); ++c) {
    double f = durationOf(durations.forward, c), b = durationOf(durations.backward, c);
    double w = durationOf(durations.weight, c);
    if (w > b) {
      tl.error = "weight-gradient duration of chunk " + std::to_string(c) + " (" +
                 std::to_string(w) + ") exceeds its whole backward (" + std::to_string(b) + ")";
      return tl;
    }
    costs.chunks.push_back({f, b - w, w});
  }
  ScheduleSimulation sim = simulateSchedule(shape, steps, costs, /*keepSteps=*/true);
  if (!sim.error.empty()) {
    tl.error = sim.error;
    return tl;
  }
  tl.steps = std::move(sim.timed);
  tl.makespan = sim.makespan;
  tl.bubbleFraction = sim.bubbleFraction;
  return tl;
}

Timeline scheduleTimeline(ScheduleKind kind, const PipelineShape &shape,
                          const StepDurations &durations) {
  std::string error;
  auto steps = buildSchedule(kind, shape, &error);
  if (!steps) {
    Timeline tl;
    tl.name = scheduleName(kind);
    tl.shape = shape;
    tl.error = error;
    return tl;
  }
  return simulateTimeline(shape, *steps, durations, scheduleName(kind));
}

// ---- Rendering ----

namespace {

/// Text for XML content and attribute values.
std::string xmlEscape(const std::string &text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    default:
      out += ch;
    }
  }
  return out;
}

std::string jsonString(const std::string &text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

/// A number with up to `digits` significant digits, no exponent for ordinary sizes.
std::string num(double value, int digits = 6) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, value);
  return buf;
}

/// Pixel coordinates: one decimal.
std::string px(double value) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.1f", value);
  return buf;
}

/// "#rrggbb" of an HSL colour (h in degrees, s and l in [0, 1]).
std::string hsl(double h, double s, double l) {
  auto channel = [&](double n) {
    double k = std::fmod(n + h / 30.0, 12.0);
    double a = s * std::min(l, 1 - l);
    double v = l - a * std::max(-1.0, std::min({k - 3, 9 - k, 1.0}));
    return static_cast<int>(std::lround(v * 255));
  };
  char buf[8];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x", channel(0), channel(8), channel(4));
  return buf;
}

/// The lightness of virtual stage j's shade: darkest first, so chunk order reads dark to light.
double shadeLightness(int64_t j, int64_t virtualStages) {
  if (virtualStages <= 1)
    return 0.45;
  return 0.38 + 0.34 * double(j) / double(virtualStages - 1);
}

std::string stepColour(StepKind kind, int64_t j, int64_t virtualStages) {
  double l = shadeLightness(j, virtualStages);
  if (kind == StepKind::forward)
    return hsl(212, 0.62, l);
  return kind == StepKind::backwardWeight ? hsl(140, 0.5, l) : hsl(26, 0.85, l);
}

/// The step's kind as `megac train --trace` names its category.
const char *kindName(StepKind kind) {
  switch (kind) {
  case StepKind::forward:
    return "forward";
  case StepKind::backward:
    return "backward";
  case StepKind::backwardInput:
    return "backward_input";
  case StepKind::backwardWeight:
    return "backward_weight";
  }
  return "backward";
}

std::string textColour(int64_t j, int64_t virtualStages) {
  return shadeLightness(j, virtualStages) < 0.56 ? "#ffffff" : "#1a1a1a";
}

/// A time unit for the axis: the scale from seconds and its name.
std::pair<double, const char *> timeUnit(double makespan) {
  if (makespan >= 1)
    return {1, "s"};
  if (makespan >= 1e-3)
    return {1e3, "ms"};
  return {1e6, "\xC2\xB5s"};
}

/// A round tick spacing (1, 2 or 5 times a power of ten) giving about `target` ticks.
double tickSpacing(double span, int target) {
  double raw = span / target;
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw)
      return m * power;
  return 10 * power;
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", fraction * 100);
  return buf;
}

} // namespace

std::string timelineSvg(const Timeline &tl, const std::string &subtitle) {
  const PipelineShape &shape = tl.shape;
  const int64_t p = shape.stages, v = shape.virtualStages;
  const double left = 90, right = 90, rowHeight = 34, rowGap = 10;
  const double titleHeight = subtitle.empty() ? 58 : 76, legendHeight = 30;
  // The shortest block gets about 22 px, the plot 900..3000 px wide.
  double shortest = tl.makespan;
  for (const TimedStep &t : tl.steps)
    if (t.end > t.start)
      shortest = std::min(shortest, t.end - t.start);
  double plotWidth = 900;
  if (tl.makespan > 0 && shortest > 0)
    plotWidth = std::clamp(22.0 * tl.makespan / shortest, 900.0, 3000.0);
  const double scale = tl.makespan > 0 ? plotWidth / tl.makespan : 0;
  const double top = titleHeight + legendHeight;
  const double rowsBottom = top + p * (rowHeight + rowGap) - rowGap;
  const double width = left + plotWidth + right, height = rowsBottom + 52;
  auto xOf = [&](double t) { return left + t * scale; };
  auto rowTop = [&](int64_t s) { return top + s * (rowHeight + rowGap); };

  // A schedule has whole backwards or split ones (B and W).
  const bool split = std::any_of(tl.steps.begin(), tl.steps.end(), [](const TimedStep &t) {
    return t.step.kind == StepKind::backwardWeight;
  });
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << px(width) << "\" height=\""
    << px(height) << "\" viewBox=\"0 0 " << px(width) << " " << px(height)
    << "\" font-family=\"Helvetica, Arial, sans-serif\">\n";
  o << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" << px(width) << "\" height=\""
    << px(height) << "\" fill=\"#ffffff\"/>\n";

  // Title: schedule, shape, step time and bubble.
  auto [unitScale, unitName] = timeUnit(tl.makespan);
  std::string title = (tl.name.empty() ? std::string("pipeline schedule") : tl.name) + ": " +
                      std::to_string(p) + " stages, " +
                      (v > 1 ? std::to_string(v) + " virtual stages, " : std::string()) +
                      std::to_string(shape.microBatches) + " micro-batches \xE2\x80\x94 bubble " +
                      percent(tl.bubbleFraction) + ", pipeline time " +
                      num(tl.makespan * unitScale, 4) + " " + unitName;
  o << "<text class=\"title\" x=\"" << px(left) << "\" y=\"26\" font-size=\"17\" "
    << "font-weight=\"bold\" fill=\"#1a1a1a\">" << xmlEscape(title) << "</text>\n";
  if (!subtitle.empty())
    o << "<text class=\"subtitle\" x=\"" << px(left) << "\" y=\"46\" font-size=\"13\" "
      << "fill=\"#444444\">" << xmlEscape(subtitle) << "</text>\n";
  o << "<text x=\"" << px(left) << "\" y=\"" << px(titleHeight - 10)
    << "\" font-size=\"11\" fill=\"#666666\">"
    << xmlEscape(std::string(split ? "blocks: F (forward) / B (input gradients) / W (weight "
                                     "gradients)"
                                   : "blocks: F (forward) / B (backward)") +
                 " of the micro-batch written in them; grey: the stage is idle (bubble); thin "
                 "lines: activations and gradients sent between stages")
    << "</text>\n";

  // Legend: forward and backward per virtual stage, then idle.
  o << "<g class=\"legend\" font-size=\"12\" fill=\"#1a1a1a\">\n";
  double lx = left, ly = titleHeight;
  auto swatch = [&](const std::string &fill, const std::string &label) {
    o << "<rect x=\"" << px(lx) << "\" y=\"" << px(ly) << "\" width=\"14\" height=\"14\" fill=\""
      << fill << "\" stroke=\"#555555\" stroke-width=\"0.5\"/>";
    o << "<text x=\"" << px(lx + 19) << "\" y=\"" << px(ly + 11.5) << "\">" << xmlEscape(label)
      << "</text>\n";
    lx += 19 + 7.0 * double(label.size()) + 18;
  };
  std::vector<StepKind> kinds{StepKind::forward, StepKind::backward};
  if (split)
    kinds = {StepKind::forward, StepKind::backwardInput, StepKind::backwardWeight};
  for (StepKind kind : kinds)
    for (int64_t j = 0; j < v; ++j) {
      std::string label = kind == StepKind::forward          ? "forward"
                          : kind == StepKind::backwardInput  ? "B (input gradients)"
                          : kind == StepKind::backwardWeight ? "W (weight gradients)"
                                                             : "backward";
      if (v > 1)
        label += p > 1 ? ", chunks " + std::to_string(j * p) + "\xE2\x80\x93" +
                             std::to_string(j * p + p - 1)
                       : ", chunk " + std::to_string(j);
      swatch(stepColour(kind, j, v), label);
    }
  swatch("#ececec", "idle");
  o << "</g>\n";

  // Rows: an idle-coloured band per stage (gaps in the blocks show it), the stage's name and
  // its own idle share on the right.
  std::vector<double> stageBusy(p, 0);
  for (const TimedStep &t : tl.steps)
    stageBusy[t.stage] += t.end - t.start;
  for (int64_t s = 0; s < p; ++s) {
    double y = rowTop(s);
    o << "<rect class=\"row\" x=\"" << px(left) << "\" y=\"" << px(y) << "\" width=\""
      << px(plotWidth) << "\" height=\"" << px(rowHeight) << "\" fill=\"#ececec\"/>\n";
    o << "<text x=\"" << px(left - 10) << "\" y=\"" << px(y + rowHeight / 2 + 4)
      << "\" font-size=\"13\" text-anchor=\"end\" fill=\"#1a1a1a\">stage " << s << "</text>\n";
    double idle = tl.makespan > 0 ? 1 - stageBusy[s] / tl.makespan : 0;
    o << "<text x=\"" << px(left + plotWidth + 8) << "\" y=\"" << px(y + rowHeight / 2 + 4)
      << "\" font-size=\"11\" fill=\"#666666\">idle " << percent(idle) << "</text>\n";
  }

  // Sends between stages: from the producer's end on its row to the arrival on the consumer's.
  o << "<g class=\"sends\" stroke=\"#555555\" stroke-width=\"0.8\" stroke-opacity=\"0.45\">\n";
  for (const TimedStep &t : tl.steps) {
    if (t.producerStage < 0)
      continue;
    bool down = t.producerStage < t.stage;
    double y0 = rowTop(t.producerStage) + (down ? rowHeight : 0);
    double y1 = rowTop(t.stage) + (down ? 0 : rowHeight);
    o << "<line class=\"send\" x1=\"" << px(xOf(t.inputSent)) << "\" y1=\"" << px(y0) << "\" x2=\""
      << px(xOf(t.inputReady)) << "\" y2=\"" << px(y1) << "\"/>\n";
  }
  o << "</g>\n";

  // Blocks.
  o << "<g class=\"blocks\" font-size=\"12\" text-anchor=\"middle\">\n";
  for (const TimedStep &t : tl.steps) {
    const ScheduleStep &s = t.step;
    int64_t j = s.chunk / p;
    double x = xOf(t.start), w = (t.end - t.start) * scale, y = rowTop(t.stage);
    const char *kind = kindName(s.kind);
    o << "<g><title>" << xmlEscape(stepLabel(s)) << " on stage " << t.stage << ": "
      << num(t.start * unitScale, 5) << "\xE2\x80\x93" << num(t.end * unitScale, 5) << " "
      << unitName << "</title>";
    o << "<rect class=\"block " << kind << "\" data-stage=\"" << t.stage << "\" data-chunk=\""
      << s.chunk << "\" data-micro-batch=\"" << s.microBatch << "\" x=\"" << px(x) << "\" y=\""
      << px(y) << "\" width=\"" << px(w) << "\" height=\"" << px(rowHeight) << "\" fill=\""
      << stepColour(s.kind, j, v) << "\" stroke=\"#ffffff\" stroke-width=\"1\"/>";
    if (w >= 9) {
      double size = std::min(12.0, w * 0.55);
      o << "<text x=\"" << px(x + w / 2) << "\" y=\"" << px(y + rowHeight / 2 + size * 0.36)
        << "\" font-size=\"" << px(size) << "\" fill=\"" << textColour(j, v) << "\">"
        << s.microBatch << "</text>";
    }
    o << "</g>\n";
  }
  o << "</g>\n";

  // Time axis.
  o << "<g class=\"axis\" font-size=\"11\" fill=\"#444444\" stroke=\"#444444\">\n";
  o << "<line x1=\"" << px(left) << "\" y1=\"" << px(rowsBottom + 6) << "\" x2=\""
    << px(left + plotWidth) << "\" y2=\"" << px(rowsBottom + 6) << "\" stroke-width=\"1\"/>\n";
  if (tl.makespan > 0) {
    double spacing = tickSpacing(tl.makespan * unitScale, 12) / unitScale;
    for (int64_t i = 0; i * spacing <= tl.makespan * (1 + 1e-9); ++i) {
      double x = xOf(i * spacing);
      o << "<line x1=\"" << px(x) << "\" y1=\"" << px(rowsBottom + 6) << "\" x2=\"" << px(x)
        << "\" y2=\"" << px(rowsBottom + 11) << "\" stroke-width=\"1\"/>";
      o << "<text x=\"" << px(x) << "\" y=\"" << px(rowsBottom + 24)
        << "\" text-anchor=\"middle\" stroke=\"none\">" << num(i * spacing * unitScale, 4)
        << "</text>\n";
    }
  }
  o << "<text x=\"" << px(left + plotWidth / 2) << "\" y=\"" << px(rowsBottom + 42)
    << "\" text-anchor=\"middle\" stroke=\"none\">time (" << unitName << ")</text>\n";
  o << "</g>\n";
  o << "</svg>\n";
  return o.str();
}

std::string chromeTrace(const Timeline &tl) {
  const int64_t p = tl.shape.stages;
  std::ostringstream o;
  o << "{\"traceEvents\": [\n";
  bool first = true;
  auto event = [&](const std::string &json) {
    o << (first ? "" : ",\n") << json;
    first = false;
  };
  auto us = [](double seconds) { return num(seconds * 1e6, 12); };
  for (int64_t s = 0; s < p; ++s) {
    std::string pid = std::to_string(s);
    event("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid +
          ", \"args\": {\"name\": \"stage " + pid + "\"}}");
    event("{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
          ", \"args\": {\"sort_index\": " + pid + "}}");
    event("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid +
          ", \"tid\": 2, \"args\": {\"name\": \"pipeline\"}}");
    event("{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": " + pid +
          ", \"tid\": 2, \"args\": {\"sort_index\": -1}}");
    if (tl.shape.stages > 1 && !tl.steps.empty())
      event("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid +
            ", \"tid\": 1, \"args\": {\"name\": \"communication\"}}");
  }
  for (const TimedStep &t : tl.steps) {
    const ScheduleStep &s = t.step;
    const char *kind = kindName(s.kind);
    event("{\"name\": " + jsonString(stepLabel(s)) + ", \"cat\": \"" + kind +
          "\", \"ph\": \"X\", \"pid\": " + std::to_string(t.stage) +
          ", \"tid\": 2, \"ts\": " + us(t.start) + ", \"dur\": " + us(t.end - t.start) +
          ", \"args\": {\"kind\": \"" + kind + "\", \"chunk\": " + std::to_string(s.chunk) +
          ", \"micro_batch\": " + std::to_string(s.microBatch) + "}}");
  }
  // Transfers, when they take time: on the receiving stage, from the producer's end.
  for (const TimedStep &t : tl.steps) {
    if (t.producerStage < 0 || t.inputReady <= t.inputSent)
      continue;
    std::string what = t.step.kind == StepKind::forward ? "act " : "grad ";
    event("{\"name\": " + jsonString("recv " + what + stepLabel(t.step)) +
          ", \"cat\": \"comm\", \"ph\": \"X\", \"pid\": " + std::to_string(t.stage) +
          ", \"tid\": 1, \"ts\": " + us(t.inputSent) +
          ", \"dur\": " + us(t.inputReady - t.inputSent) +
          ", \"args\": {\"from_stage\": " + std::to_string(t.producerStage) + "}}");
  }
  o << "\n],\n\"displayTimeUnit\": \"ms\",\n";
  o << "\"otherData\": {\"source\": \"megac plan\", \"schedule\": " << jsonString(tl.name)
    << ", \"stages\": " << p << ", \"virtual_stages\": " << tl.shape.virtualStages
    << ", \"micro_batches\": " << tl.shape.microBatches
    << ", \"makespan_s\": " << num(tl.makespan, 9)
    << ", \"bubble_fraction\": " << num(tl.bubbleFraction, 9) << "}\n}\n";
  return o.str();
}

} // namespace megac::planner
