// exportOnnxWeights on a model built here: parameters get the new values in their own dtype and
// storage field (float_data stays float_data, f16 raw stays f16 raw), constants and the graph
// are untouched, and every tensor that does not map is refused by name with nothing written.
#include "frontends/onnx/OnnxExport.h"

#include "support/Float16.h"

#include "onnx/onnx_pb.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

using namespace megac;
using namespace megac::onnx_import;

namespace {

void addInit(onnx::GraphProto &g, const std::string &name, int type, std::vector<int64_t> dims,
             const std::string &raw) {
  auto *t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims)
    t->add_dims(d);
  t->set_raw_data(raw);
}

template <typename T> std::string bytesOf(std::vector<T> values) {
  return std::string(reinterpret_cast<const char *>(values.data()), values.size() * sizeof(T));
}

void setType(onnx::ValueInfoProto *v, const std::vector<std::string> &dims) {
  auto *tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (const std::string &d : dims) {
    auto *dim = tt->mutable_shape()->add_dim();
    if (d.find_first_not_of("0123456789") == std::string::npos)
      dim->set_dim_value(std::stoll(d));
    else
      dim->set_dim_param(d);
  }
}

/// y = (x @ W + B + float(H)) * S: W f32 [2, 2] in float_data, B f32 [2] raw, H f16 [2] raw,
/// S a one-element constant (never a parameter).
onnx::ModelProto makeModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("export-test");
  auto *op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  onnx::GraphProto &g = *m.mutable_graph();
  g.set_name("g");
  setType(g.add_input(), {"batch", "2"});
  g.mutable_input(0)->set_name("x");
  setType(g.add_output(), {"batch", "2"});
  g.mutable_output(0)->set_name("y");
  auto *w = g.add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->add_dims(2);
  for (float v : {1.f, 2.f, 3.f, 4.f})
    w->add_float_data(v);
  addInit(g, "B", onnx::TensorProto::FLOAT, {2}, bytesOf(std::vector<float>{0.5f, -0.5f}));
  addInit(g, "H", onnx::TensorProto::FLOAT16, {2},
          bytesOf(std::vector<uint16_t>{floatToHalf(1.f), floatToHalf(2.f)}));
  addInit(g, "S", onnx::TensorProto::FLOAT, {}, bytesOf(std::vector<float>{3.f}));
  auto node = [&](const std::string &type, std::vector<std::string> in, std::string out) {
    auto *n = g.add_node();
    n->set_op_type(type);
    n->set_name(out);
    for (auto &i : in)
      n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("MatMul", {"x", "W"}, "xw");
  node("Add", {"xw", "B"}, "xwb");
  auto *cast = node("Cast", {"H"}, "h32");
  auto *to = cast->add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  node("Add", {"xwb", "h32"}, "sum");
  node("Mul", {"sum", "S"}, "y");
  return m;
}

HostTensor tensor(DType dtype, std::vector<int64_t> shape, std::vector<double> values) {
  HostTensor t = HostTensor::zeros(dtype, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::f64)
      t.data<double>()[i] = values[i];
    else
      t.data<float>()[i] = float(values[i]);
  }
  return t;
}

class OnnxExportTest : public ::testing::Test {
protected:
  void SetUp() override {
    dir = std::filesystem::path(::testing::TempDir()) /
          ("onnx_export_" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir);
    source = (dir / "model.onnx").string();
    output = (dir / "trained.onnx").string();
    std::filesystem::remove(output);
    std::ofstream(source, std::ios::binary) << makeModel().SerializeAsString();
    options.inputShapes["x"] = {1, 2};
    weights["W"] = tensor(DType::f64, {2, 2}, {10, 20, 30, 40.1});
    weights["B"] = tensor(DType::f32, {2}, {7, 8});
    weights["H"] = tensor(DType::f32, {2}, {-1.5, 0.1});
  }
  onnx::ModelProto written() {
    onnx::ModelProto m;
    std::ifstream in(output, std::ios::binary);
    EXPECT_TRUE(m.ParseFromIstream(&in));
    return m;
  }
  std::string refused() {
    auto result = exportOnnxWeights(source, options, weights, output);
    EXPECT_FALSE(result.isOk());
    EXPECT_FALSE(std::filesystem::exists(output)) << "nothing is written when export refuses";
    return result.isOk() ? "" : result.status().message();
  }

  std::filesystem::path dir;
  std::string source, output;
  OnnxImportOptions options;
  TensorMap weights;
};

TEST_F(OnnxExportTest, ReplacesParametersInTheirOwnDtypeAndField) {
  auto result = exportOnnxWeights(source, options, weights, output);
  ASSERT_TRUE(result.isOk()) << result.status().message();
  EXPECT_EQ(result->replaced, 3);
  EXPECT_EQ(result->kept, 1);
  onnx::ModelProto got = written(), original = makeModel();
  const auto &inits = got.graph().initializer();
  ASSERT_EQ(inits.size(), 4);
  // W: an f64 tensor narrowed to the initializer's f32, still in float_data.
  EXPECT_EQ(inits[0].name(), "W");
  EXPECT_FALSE(inits[0].has_raw_data());
  ASSERT_EQ(inits[0].float_data_size(), 4);
  EXPECT_EQ(inits[0].float_data(3), 40.1f);
  EXPECT_EQ(inits[0].data_type(), onnx::TensorProto::FLOAT);
  // B: raw f32 bytes, exactly.
  EXPECT_EQ(inits[1].raw_data(), bytesOf(std::vector<float>{7.f, 8.f}));
  // H: f32 values rounded to the initializer's f16, raw.
  EXPECT_EQ(inits[2].data_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(inits[2].raw_data(),
            bytesOf(std::vector<uint16_t>{floatToHalf(-1.5f), floatToHalf(0.1f)}));
  // S (a one-element constant) and everything but the initializers' values: as they were.
  EXPECT_EQ(inits[3].SerializeAsString(), original.graph().initializer(3).SerializeAsString());
  got.mutable_graph()->clear_initializer();
  original.mutable_graph()->clear_initializer();
  EXPECT_EQ(got.SerializeAsString(), original.SerializeAsString());
}

TEST_F(OnnxExportTest, RefusesAMissingParameter) {
  weights.erase("B");
  std::string message = refused();
  EXPECT_NE(message.find("initializer 'B' [2] is a parameter"), std::string::npos) << message;
}

TEST_F(OnnxExportTest, RefusesATensorThatIsNoParameter) {
  weights["Z"] = tensor(DType::f32, {2}, {1, 2});
  std::string message = refused();
  EXPECT_NE(message.find("tensor 'Z' [2] is no parameter"), std::string::npos) << message;
  weights.erase("Z");
  weights["S"] = tensor(DType::f32, {}, {1});
  message = refused();
  EXPECT_NE(message.find("tensor 'S' [] is no parameter"), std::string::npos) << message;
}

TEST_F(OnnxExportTest, RefusesAnotherShape) {
  weights["W"] = tensor(DType::f32, {3, 2}, {1, 2, 3, 4, 5, 6});
  std::string message = refused();
  EXPECT_NE(message.find("initializer 'W' is [2, 2]"), std::string::npos) << message;
  EXPECT_NE(message.find("tensor is [3, 2]"), std::string::npos) << message;
}

TEST_F(OnnxExportTest, RefusesAFileThatIsNoModel) {
  std::ofstream(source, std::ios::binary) << "not a model";
  std::string message = refused();
  EXPECT_NE(message.find(source), std::string::npos) << message;
}

TEST_F(OnnxExportTest, ReadsInputDims) {
  auto dims = readOnnxInputDims(source);
  ASSERT_TRUE(dims.isOk()) << dims.status().message();
  ASSERT_EQ(dims->size(), 1u);
  EXPECT_EQ(dims->at("x"), (std::vector<int64_t>{-1, 2}));
}

} // namespace
