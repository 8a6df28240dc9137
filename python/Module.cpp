// The megac._megac extension (pybind11): a model source (driver::ModelSource) and its counts
// (planner::ModelStats), the planner's layout search (driver/PlanSearch.h) as `megac plan
// --cluster` runs it, and a driver::TrainSession configured by the CLI's own run flags, stepping
// on its data or on a numpy batch and resuming from checkpoints with the GIL released. megac's
// errors raise megac.MegacError carrying megac's message. python/megac/__init__.py is the API
// over it.
#include "tools/megac/Cli.h"
#include "tools/megac/ExitFlags.h"
#include "tools/megac/RunFlags.h"

#include "driver/ModelSource.h"
#include "driver/PlanSearch.h"
#include "driver/TrainSession.h"
#include "parallel/PipelineSchedule.h"
#include "planner/ModelStats.h"
#include "support/Float16.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <unistd.h>

namespace py = pybind11;

namespace megac::python {

/// What megac.MegacError is raised from: megac's one-line message.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T> T check(StatusOr<T> value) {
  if (!value.isOk())
    throw Error(value.status().message());
  return std::move(value).value();
}

void check(const Status &status) {
  if (!status.isOk())
    throw Error(status.message());
}

/// The CLI's flag parser prints its errors ("megac train: error: unknown option --x") on stderr;
/// this holds stderr in a temporary file while it runs, so the message becomes the exception's.
class CapturedStderr {
public:
  CapturedStderr() {
    std::fflush(stderr);
    file_ = std::tmpfile();
    saved_ = dup(STDERR_FILENO);
    if (file_ && saved_ >= 0)
      dup2(fileno(file_), STDERR_FILENO);
  }
  ~CapturedStderr() { restore(); }
  /// Restores stderr and returns what was written, without the trailing newline.
  std::string restore() {
    if (!file_ || saved_ < 0)
      return text_;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
    std::rewind(file_);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, file_)) > 0)
      text_.append(buf, n);
    std::fclose(file_);
    file_ = nullptr;
    while (!text_.empty() && text_.back() == '\n')
      text_.pop_back();
    return text_;
  }

private:
  std::FILE *file_ = nullptr;
  int saved_ = -1;
  std::string text_;
};

/// megac.Model: a zoo spec (or hf:PATH) or an ONNX file with bound input shapes.
struct Model {
  std::optional<std::string> spec, file;
  driver::InputShapes inputShapes;
  driver::ModelSource source;

  static Model fromSpec(const std::string &spec) {
    Model m;
    m.spec = spec;
    m.source = check(driver::ModelSource::parse(spec, std::nullopt));
    return m;
  }
  static Model fromOnnx(const std::string &path, const driver::InputShapes &shapes) {
    if (!std::filesystem::is_regular_file(path))
      throw Error("cannot open the ONNX model " + path + ": no such file");
    Model m;
    m.file = path;
    m.inputShapes = shapes;
    m.source = check(driver::ModelSource::parse(std::nullopt, path));
    return m;
  }
  /// `megac describe`'s counts of the forward graph, as a dict.
  py::dict describe() const {
    mlir::MLIRContext ctx;
    std::string diagnostics;
    llvm::raw_string_ostream stream(diagnostics);
    StatusOr<driver::LoadedModel> loaded = driver::loadModel(ctx, source, inputShapes, stream);
    if (!loaded.isOk())
      throw Error(loaded.status().message() + (diagnostics.empty() ? "" : "\n" + stream.str()));
    planner::ModelStatsResult result = planner::computeModelStats(*loaded->module);
    if (!result.stats)
      throw Error(result.error);
    const planner::ModelStats &s = *result.stats;
    py::dict d;
    d["model"] = loaded->description;
    d["parameters"] = s.parameters;
    d["active_parameters"] = s.activeParameters;
    d["parameter_tensors"] = s.parameterTensors;
    d["parameter_bytes"] = s.parameterBytes;
    d["tokens"] = s.tokens;
    d["forward_flops"] = s.forwardFlops;
    d["forward_matmul_flops"] = s.forwardMatmulFlops;
    d["training_flops"] = s.trainingFlops();
    d["training_flops_per_token"] = s.tokens ? double(s.trainingFlops()) / double(s.tokens) : 0.0;
    py::dict ops;
    for (const auto &[name, count] : s.opHistogram)
      ops[py::str(name)] = count;
    d["ops"] = ops;
    return d;
  }
};

/// megac.plan's search: a driver::PlanSearchRequest made from the keyword arguments (the flags of
/// `megac plan --cluster`, checked as the CLI checks them), run once for each view of the result
/// (the search is deterministic: the cost model, no measurement).
class PlanSearch {
public:
  PlanSearch(const Model &model, const std::string &cluster, int64_t globalBatch,
             const py::dict &pins) {
    driver::PlanSearchRequest &r = request_;
    r.model = model.source;
    std::string why;
    std::optional<planner::Cluster> parsed = planner::parseCluster(cluster, &why);
    if (!parsed)
      throw Error("cluster: " + why);
    r.cluster = *parsed;
    r.clusterSpec = cluster;
    if (globalBatch < 1)
      throw Error("global_batch: " + std::to_string(globalBatch) +
                  " is not a batch (samples per optimizer step, >= 1)");
    r.globalBatch = globalBatch;
    std::optional<std::string> stack;
    for (const auto &[key, value] : pins) {
      std::string name = py::str(key);
      if (value.is_none())
        continue;
      auto count = [&](int64_t least) {
        if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value))
          throw Error(name + ": " + std::string(py::str(py::repr(value))) + " is not an integer");
        int64_t n = value.cast<int64_t>();
        if (n < least)
          throw Error(name + ": " + std::to_string(n) + " is below " + std::to_string(least));
        return n;
      };
      auto text = [&]() {
        if (!py::isinstance<py::str>(value))
          throw Error(name + ": " + std::string(py::str(py::repr(value))) + " is not a string");
        return value.cast<std::string>();
      };
      planner::Pins &p = r.pins;
      if (name == "tp")
        p.tp = count(1);
      else if (name == "pp")
        p.pp = count(1);
      else if (name == "dp")
        p.dp = count(1);
      else if (name == "ep")
        p.ep = count(1);
      else if (name == "cp")
        p.cp = count(1);
      else if (name == "vpp")
        p.vpp = count(1);
      else if (name == "micro_batch")
        p.microBatch = count(1);
      else if (name == "seq")
        r.seq = count(1);
      else if (name == "top")
        r.top = int(count(1));
      else if (name == "zero") {
        int64_t z = count(0);
        if (z > 3)
          throw Error("zero: " + std::to_string(z) + " is not 0, 1, 2 or 3");
        p.zero = int(z);
      } else if (name == "sequence_parallel") {
        if (!py::isinstance<py::bool_>(value))
          throw Error("sequence_parallel: give True or False");
        p.sequenceParallel = value.cast<bool>();
      } else if (name == "recompute") {
        std::string v = text();
        if (!(p.recompute = parseRecompute(v)))
          throw Error("recompute: '" + v + "' is not none, selective or full");
      } else if (name == "precision") {
        std::string v = text();
        std::optional<Precision> precision = parsePrecision(v);
        if (v == "fp64" || !precision)
          throw Error("precision: '" + v + "' is not bf16, fp16 or fp32");
        p.precision = *precision;
      } else if (name == "dropout") {
        if (!py::isinstance<py::float_>(value) && !py::isinstance<py::int_>(value))
          throw Error("dropout: " + std::string(py::str(py::repr(value))) + " is not a number");
        double d = value.cast<double>();
        if (!(d >= 0 && d < 1))
          throw Error("dropout: " + std::to_string(d) + " is not a probability in [0, 1)");
        r.dropout = d;
      } else if (name == "schedule") {
        std::string v = text();
        std::optional<schedule::ScheduleKind> kind =
            v == "interleaved" ? schedule::ScheduleKind::interleaved
                               : schedule::parseScheduleKind(v);
        if (!kind)
          throw Error("schedule: '" + v + "' is not 1f1b, interleaved, zb-h1, zb-h2 or zbv");
        p.schedule = kind;
      } else if (name == "cp_comm_type") {
        std::string v = text();
        if (v != "all_gather" && v != "p2p")
          throw Error("cp_comm_type: '" + v + "' is not all_gather or p2p");
        p.cpRing = v == "p2p";
      } else if (name == "reshard_after_forward") {
        if (!py::isinstance<py::bool_>(value))
          throw Error("reshard_after_forward: give True or False");
        p.reshardAfterForward = value.cast<bool>();
      } else if (name == "stack") {
        stack = text();
      } else {
        throw Error("megac.plan: unknown keyword '" + name +
                    "' (the pins are tp, pp, dp, ep, cp, vpp, micro_batch, zero, "
                    "sequence_parallel, recompute, precision, schedule, cp_comm_type, "
                    "reshard_after_forward; also seq, dropout, stack, top)");
      }
    }
    // An ONNX model's sequence length: its input_ids binding, as --seq would give it.
    if (!r.seq && model.file)
      if (auto it = model.inputShapes.find("input_ids");
          it != model.inputShapes.end() && it->second.size() == 2)
        r.seq = it->second[1];
    StatusOr<planner::StackProfile> profile = driver::resolveStack(stack, r.cluster);
    if (!profile.isOk())
      throw Error("stack: " + profile.status().message());
    r.stack = *profile;
  }

  /// `megac plan --json`'s object: the layouts, best first, with their costs.
  std::string json() {
    driver::PlanSearchRequest r = request_;
    r.json = true;
    r.compile = false;
    return run(r).second;
  }
  /// What `megac plan` (explain: `megac plan --explain`) prints, and whether a layout fits.
  std::pair<bool, std::string> report(bool explain) {
    driver::PlanSearchRequest r = request_;
    r.explain = explain;
    return run(r);
  }
  /// #1's pipeline as `megac plan --timeline` (svg) or `--trace` (Chrome trace JSON) writes it.
  void draw(const std::string &path, bool svg) {
    driver::PlanSearchRequest r = request_;
    r.json = true;
    r.compile = false;
    (svg ? r.timelinePath : r.tracePath) = path;
    if (!run(r).first)
      throw Error("no layout fits, so there is no pipeline to draw (see the plan's report)");
  }

private:
  std::pair<bool, std::string> run(const driver::PlanSearchRequest &r) {
    std::string text, diagnostics;
    llvm::raw_string_ostream stream(diagnostics);
    StatusOr<bool> found = Status::error("unreachable");
    {
      py::gil_scoped_release release;
      found = driver::searchLayouts(
          r, [&text](const std::string &piece) { text += piece; }, stream);
    }
    if (!found.isOk())
      throw Error(found.status().message() + (diagnostics.empty() ? "" : "\n" + stream.str()));
    return {*found, text};
  }
  driver::PlanSearchRequest request_;
};

/// A HostTensor as a new numpy array (bf16 widened to float32, which holds it exactly).
py::array toNumpy(const HostTensor &t) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  auto copy = [&](auto tag) {
    using T = decltype(tag);
    py::array_t<T> a(shape);
    std::memcpy(a.mutable_data(), t.bytes.data(), t.bytes.size());
    return py::array(a);
  };
  switch (t.dtype) {
  case DType::f64:
    return copy(double());
  case DType::f32:
    return copy(float());
  case DType::i64:
    return copy(int64_t());
  case DType::i32:
    return copy(int32_t());
  case DType::i1:
    return copy(bool());
  case DType::f16: {
    py::array a(py::dtype("float16"), shape);
    std::memcpy(a.mutable_data(), t.bytes.data(), t.bytes.size());
    return a;
  }
  case DType::bf16: {
    py::array_t<float> a(shape);
    const auto *bits = t.data<uint16_t>();
    float *out = a.mutable_data();
    for (int64_t i = 0; i < t.numElements(); ++i)
      out[i] = bf16ToFloat(bits[i]);
    return a;
  }
  }
  throw Error("a parameter has an unknown dtype");
}

/// megac.TrainSession's core: `args` are `megac train`'s arguments after the command (the
/// Python layer turns keyword arguments into flags).
class Session {
public:
  explicit Session(const std::vector<std::string> &args) {
    cli::Flags flags("megac.TrainSession", "the keyword arguments of megac.TrainSession are the "
                                           "flags of `megac train --help`");
    cli::RunFlags run;
    cli::ExitFlags exitFlags;
    run.declare(flags);
    exitFlags.declare(flags);
    std::vector<std::string> argvText = {"megac", "train"};
    argvText.insert(argvText.end(), args.begin(), args.end());
    std::vector<char *> argv;
    for (std::string &a : argvText)
      argv.push_back(a.data());
    CapturedStderr captured;
    std::optional<int> exit = flags.parse(int(argv.size()), argv.data(), 2);
    std::string printed = captured.restore();
    if (exit)
      throw Error(printed.empty() ? "bad arguments" : printed);
    if (std::string e = run.configure(flags, /*planOnly=*/false); !e.empty())
      throw Error(e);
    driver::RunConfig &c = run.config;
    if (std::string e = exitFlags.configure(flags, c); !e.empty())
      throw Error(e);
    if (c.exec.ranks > 1 && driver::launchedRanks() != c.exec.ranks)
      throw Error("ranks=" + std::to_string(c.exec.ranks) + " needs the script launched as " +
                  std::to_string(c.exec.ranks) + " ranks: mpirun -np " +
                  std::to_string(c.exec.ranks) + " python SCRIPT.py");
    c.exec.exitOnSignal = false; // Python owns the process's signals
    cli::setThreads(c.exec.threads, c.exec.ranks);
    driver::SessionHooks hooks;
    hooks.warn = [](const std::string &line) {
      std::fprintf(stderr, "megac: warning: %s\n", line.c_str());
    };
    session_ = std::make_unique<driver::TrainSession>(std::move(c), hooks);
    {
      py::gil_scoped_release release;
      check(session_->open());
    }
    const driver::RunConfig &config = session_->config();
    if (session_->root())
      check(logs_.open(config.log.jsonPath, config.log.tensorboardDir));
    if (config.checkpoint.loadDir) // load=DIR resumes as `megac train --load DIR` does
      resumed_ = resume(*config.checkpoint.loadDir);
  }

  /// Resumes from the newest usable checkpoint under `path` (None: load='s folder), as `megac
  /// train --load` does; returns what it resumed from.
  py::dict load(const std::optional<std::string> &path) {
    driver::TrainSession &s = open();
    std::optional<std::string> dir = path ? path : s.config().checkpoint.loadDir;
    if (!dir)
      throw Error("load: give the checkpoint folder, load(path), or load=DIR to TrainSession");
    resumed_ = resume(*dir);
    return resumed();
  }

  /// What the session resumed from last: {path, step, layout}; None before any load.
  py::object resumed() const {
    if (!resumed_)
      return py::none();
    py::dict d;
    d["path"] = resumed_->path;
    d["step"] = resumed_->step;
    d["layout"] = resumed_->layout;
    return d;
  }

  /// One step on the configured data (`batch` None) or on an integer array [rows, S + 1]; the
  /// step's JSON log line.
  std::string step(const py::object &batch) {
    driver::TrainSession &s = open();
    StatusOr<driver::StepRecord> record = Status::error("unreachable");
    if (batch.is_none()) {
      py::gil_scoped_release release;
      record = s.step();
    } else {
      py::array array = py::array::ensure(batch);
      if (!array)
        throw Error("the batch must be a numpy array (or convertible to one) of token ids");
      char kind = array.dtype().kind();
      if (kind != 'i' && kind != 'u')
        throw Error("the batch must hold integer token ids, not " +
                    std::string(py::str(array.dtype())) + " (convert with .astype(numpy.int64))");
      auto tokens = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
      std::vector<int64_t> shape(tokens.shape(), tokens.shape() + tokens.ndim());
      std::span<const int64_t> data(tokens.data(), size_t(tokens.size()));
      py::gil_scoped_release release;
      record = s.step(data, shape);
    }
    check(record.status());
    if (s.root())
      check(logs_.step(*record));
    return driver::stepRecordJson(*record);
  }

  /// Every parameter, gathered whole on rank 0 (other ranks: an empty dict).
  py::dict parameters() {
    driver::TrainSession &s = open();
    TensorMap weights;
    {
      py::gil_scoped_release release;
      weights = check(s.parameters());
    }
    py::dict out;
    for (const auto &[name, tensor] : weights)
      out[py::str(name)] = toNumpy(tensor);
    return out;
  }

  /// A checkpoint of the steps done in save=DIR; returns its folder.
  std::string save() {
    driver::TrainSession &s = open();
    {
      py::gil_scoped_release release;
      check(s.save());
    }
    return s.savedPath();
  }

  /// The mean loss of eval_iters batches of the validation ("val") or test ("test") data.
  double evaluate(const std::string &part) {
    driver::TrainSession &s = open();
    if (part != "val" && part != "test")
      throw Error("evaluate: part '" + part + "' is not val or test");
    double loss;
    {
      py::gil_scoped_release release;
      loss =
          check(s.evaluate(part == "test" ? driver::DataPart::test : driver::DataPart::validation));
    }
    if (s.root())
      check(logs_.evaluation(s.stepsDone(), part, loss));
    return loss;
  }

  /// Closes the logs and frees the session (its executor, its ranks' communicator).
  void stop() {
    if (!session_)
      return;
    Status closed = logs_.close();
    session_.reset();
    check(closed);
  }

  int64_t stepsDone() { return open().stepsDone(); }
  int64_t sequenceLength() { return open().sequenceLength(); }
  int64_t vocab() { return open().vocab(); }
  int rank() { return open().rank(); }
  int ranks() { return open().ranks(); }
  std::string description() { return open().description(); }
  int64_t globalBatch() { return open().config().data.batch.globalBatch; }
  int64_t totalSteps() { return open().config().lr.totalSteps; }

private:
  driver::TrainSession &open() {
    if (!session_)
      throw Error("the session is stopped");
    return *session_;
  }
  /// The checks `--load` gets when the run is configured (driver::finishRunConfig), then the load.
  driver::Resumed resume(const std::string &dir) {
    driver::TrainSession &s = open();
    const driver::RunConfig &c = s.config();
    if (!std::filesystem::is_directory(dir))
      throw Error("load: no checkpoint directory " + dir);
    if (c.log.tracePath)
      throw Error("load: trace= with a resumed run is not supported yet (the traced steps count "
                  "from step 1)");
    if (c.checkpoint.saveGrads)
      throw Error("load: save_grads= writes step 1's gradients; a resumed run does not run step 1");
    StatusOr<driver::Resumed> resumed = Status::error("unreachable");
    {
      py::gil_scoped_release release;
      resumed = s.load(dir);
    }
    return check(std::move(resumed));
  }
  std::unique_ptr<driver::TrainSession> session_;
  driver::RunLogs logs_;
  std::optional<driver::Resumed> resumed_;
};

} // namespace megac::python

PYBIND11_MODULE(_megac, m) {
  using namespace megac::python;
  m.doc() = "megac's driver: models, their counts, and training sessions (see the megac package)";
  py::register_exception<Error>(m, "MegacError", PyExc_RuntimeError);
  py::class_<Model>(m, "Model")
      .def_static("from_spec", &Model::fromSpec, py::arg("spec"))
      .def_static("from_onnx", &Model::fromOnnx, py::arg("path"),
                  py::arg("input_shapes") = megac::driver::InputShapes{})
      .def("describe", &Model::describe)
      .def_readonly("spec", &Model::spec)
      .def_readonly("file", &Model::file)
      .def_readonly("input_shapes", &Model::inputShapes);
  py::class_<PlanSearch>(m, "PlanSearch")
      .def(py::init<const Model &, const std::string &, int64_t, const py::dict &>(),
           py::arg("model"), py::arg("cluster"), py::arg("global_batch"), py::arg("pins"))
      .def("json", &PlanSearch::json)
      .def("report", &PlanSearch::report, py::arg("explain") = false)
      .def("draw", &PlanSearch::draw, py::arg("path"), py::arg("svg") = true);
  py::class_<Session>(m, "Session")
      .def(py::init<const std::vector<std::string> &>(), py::arg("args"))
      .def("step", &Session::step, py::arg("batch") = py::none())
      .def("parameters", &Session::parameters)
      .def("save", &Session::save)
      .def("evaluate", &Session::evaluate, py::arg("part") = "val")
      .def("load", &Session::load, py::arg("path") = py::none())
      .def_property_readonly("resumed", &Session::resumed)
      .def("stop", &Session::stop)
      .def_property_readonly("steps_done", &Session::stepsDone)
      .def_property_readonly("sequence_length", &Session::sequenceLength)
      .def_property_readonly("vocab", &Session::vocab)
      .def_property_readonly("rank", &Session::rank)
      .def_property_readonly("ranks", &Session::ranks)
      .def_property_readonly("description", &Session::description)
      .def_property_readonly("global_batch", &Session::globalBatch)
      .def_property_readonly("total_steps", &Session::totalSteps);
}
