// safetensors reading and writing: round trips, the byte layout, files made by an independent
// Python writer, and truncated or corrupt files that must give errors naming file and tensor.
#include "runtime/io/Safetensors.h"
#include "support/Float16.h"

#include "TestUtil.h"

#include <fstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

std::string readAll(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void writeAll(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A file with the given JSON header and data section.
std::string fileBytes(const std::string &header, const std::string &data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

TensorMap sampleTensors() {
  TensorMap m;
  m["h0.attn.q.weight"] = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  m["f64"] = f64({2}, {0.1, -1e300});
  m["bf16"] = makeTensor(DType::bf16, {3}, std::vector<uint16_t>{floatToBf16(1.5f), 0, 0x8000});
  m["f16"] = makeTensor(DType::f16, {1, 1}, std::vector<uint16_t>{0x3c00});
  m["ids"] = i64({3}, {-1, 0, int64_t(1) << 50});
  m["i32"] = i32({}, {-5});
  m["mask"] = i1({2, 2}, {1, 0, 0, 1});
  m["empty"] = f32({0, 4}, {});
  return m;
}

} // namespace

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  TensorMap tensors = sampleTensors();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "quote \" and \\"}};
  ASSERT_TRUE(writeSafetensors(path, tensors, meta).isOk());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp")) << "the temp file was left behind";
  auto file = readSafetensorsFile(path);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_EQ(file->metadata, meta);
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (const auto &[name, t] : tensors) {
    const HostTensor &got = file->tensors.at(name);
    EXPECT_EQ(got.dtype, t.dtype) << name;
    EXPECT_EQ(got.shape, t.shape) << name;
    EXPECT_EQ(got.bytes, t.bytes) << name;
  }
  auto plain = readSafetensors(path);
  ASSERT_TRUE(plain.isOk());
  EXPECT_EQ(plain->size(), tensors.size());
}

TEST(Safetensors, LayoutFollowsTheFormat) {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  TensorMap m;
  m["b"] = f32({2}, {1, 2});
  m["a"] = i64({1}, {7});
  ASSERT_TRUE(writeSafetensors(path, m).isOk());
  std::string bytes = readAll(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(n % 8, 0u) << "the data section should start 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + n + 16);
  std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"a\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
                         0),
            0u)
      << header;
  int64_t a;
  std::memcpy(&a, bytes.data() + 8 + n, 8);
  EXPECT_EQ(a, 7);
}

TEST(Safetensors, ReadsAFileFromAnIndependentWriter) {
  std::string cmd = std::string(MEGAC_TEST_PYTHON) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0)
    GTEST_SKIP() << MEGAC_TEST_PYTHON << " with numpy is not available";
  TempDir dir;
  std::string path = dir.file("py.safetensors");
  // The format written by hand in Python (json + numpy), as the safetensors package does.
  std::string script = "import json, struct, numpy as np\n"
                       "w = np.arange(6, dtype='<f4').reshape(2, 3) * 0.5\n"
                       "ids = np.array([3, -1], dtype='<i8')\n"
                       "data = w.tobytes() + ids.tobytes()\n"
                       "h = {'__metadata__': {'format': 'pt'},\n"
                       "     'w': {'dtype': 'F32', 'shape': [2, 3], 'data_offsets': [0, 24]},\n"
                       "     'ids': {'dtype': 'I64', 'shape': [2], 'data_offsets': [24, 40]}}\n"
                       "hb = json.dumps(h).encode()\n"
                       "hb += b' ' * ((8 - len(hb) % 8) % 8)\n"
                       "open('" +
                       path + "', 'wb').write(struct.pack('<Q', len(hb)) + hb + data)\n";
  writeAll(dir.file("w.py"), script);
  ASSERT_EQ(std::system((std::string(MEGAC_TEST_PYTHON) + " " + dir.file("w.py")).c_str()), 0);
  auto file = readSafetensorsFile(path);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  EXPECT_EQ(file->metadata.at("format"), "pt");
  EXPECT_EQ(valuesOf<float>(file->tensors.at("w")),
            (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  EXPECT_EQ(valuesOf<int64_t>(file->tensors.at("ids")), (std::vector<int64_t>{3, -1}));
}

TEST(Safetensors, EveryTruncationIsAnErrorNamingTheFile) {
  TempDir dir;
  std::string good = dir.file("good.safetensors");
  ASSERT_TRUE(writeSafetensors(good, sampleTensors()).isOk());
  std::string bytes = readAll(good);
  std::string path = dir.file("cut.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    writeAll(path, bytes.substr(0, len));
    auto r = readSafetensors(path);
    // The last tensor's bytes end the file, so every cut loses bytes some tensor needs.
    ASSERT_FALSE(r.isOk()) << "a " << len << "-byte prefix was accepted";
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  }
}

TEST(Safetensors, CorruptHeadersGiveErrorsNamingTheTensor) {
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  std::string data(24, '\0');
  struct Case {
    const char *header;
    const char *expect; // a piece of the message
  };
  const Case cases[] = {
      {R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,48]}})", "'w'"},
      {R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", "needs 24"},
      {R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[8,4]}})", "'w'"},
      {R"({"w":{"dtype":"U8","shape":[24],"data_offsets":[0,24]}})", "'U8'"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,24]}})", "non-negative"},
      {R"({"w":{"dtype":"F32","shape":[6]}})", "data_offsets"},
      {R"({"w":{"shape":[6],"data_offsets":[0,24]}})", "dtype"},
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,24]}})",
       "more elements than a 64-bit count holds"},
      {R"({"w":[1,2]})", "'w'"},
      {R"({"__metadata__":{"a":1}})", "__metadata__"},
      {R"([1,2,3])", "not a JSON object"},
      {R"({"w":)", "JSON error"},
  };
  for (const Case &c : cases) {
    writeAll(path, fileBytes(c.header, data));
    auto r = readSafetensors(path);
    ASSERT_FALSE(r.isOk()) << c.header;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.header << " -> " << r.status().message();
    EXPECT_NE(r.status().message().find(path), std::string::npos);
  }
  // A header length beyond the file.
  std::string huge(8, '\xff');
  writeAll(path, huge + "{}");
  auto r = readSafetensors(path);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("header length"), std::string::npos);
  EXPECT_FALSE(readSafetensors(dir.file("missing.safetensors")).isOk());
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  TempDir dir;
  TensorMap m;
  HostTensor bad = f32({2, 2}, {1, 2, 3, 4});
  bad.bytes.resize(8);
  m["bad"] = bad;
  Status s = writeSafetensors(dir.file("x.safetensors"), m);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("'bad'"), std::string::npos);
  TensorMap reserved;
  reserved["__metadata__"] = f32({1}, {1});
  EXPECT_FALSE(writeSafetensors(dir.file("y.safetensors"), reserved).isOk());
  EXPECT_FALSE(writeSafetensors("/nonexistent-dir/z.safetensors", sampleTensors()).isOk());
}
