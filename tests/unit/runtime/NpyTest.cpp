// .npy reading and writing: round trips per dtype, hand-made headers of each version, files
// written and read by numpy itself, and the errors for what is not supported.
#include "runtime/io/Npy.h"
#include "support/Float16.h"

#include "TestUtil.h"

#include <fstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::testing;

namespace {

void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// A .npy file of format version `major` with the given header dict and data bytes.
std::string npyBytes(int major, const std::string &dict, const std::string &data) {
  std::string header = dict;
  size_t fixed = major == 1 ? 10 : 12;
  while ((fixed + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < fixed - 8; ++i)
    out += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

template <typename T> std::string rawBytes(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}

/// Runs a Python snippet with numpy; returns false (and says why) when numpy is unusable.
bool havePythonNumpy(std::string &why) {
  std::string cmd = std::string(MEGAC_TEST_PYTHON) + " -c 'import numpy' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    why = std::string(MEGAC_TEST_PYTHON) + " with numpy is not available";
    return false;
  }
  return true;
}

int runPython(const std::string &script, const TempDir &dir) {
  std::string path = dir.file("script.py");
  writeBytes(path, script);
  return std::system((std::string(MEGAC_TEST_PYTHON) + " " + path).c_str());
}

} // namespace

TEST(Npy, RoundTripsEveryDtype) {
  TempDir dir;
  std::vector<std::vector<int64_t>> shapes = {{}, {5}, {2, 3, 4}, {0, 3}};
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::i64, DType::i32, DType::i1}) {
    for (const auto &shape : shapes) {
      HostTensor t = HostTensor::zeros(dtype, shape);
      for (size_t i = 0; i < t.bytes.size(); ++i)
        t.bytes[i] = dtype == DType::i1 ? (i % 3 == 0) : static_cast<uint8_t>(i * 37 + 11);
      std::string path = dir.file(std::string("t_") + dtypeName(dtype) + ".npy");
      ASSERT_TRUE(writeNpy(path, t).isOk());
      auto back = readNpy(path);
      ASSERT_TRUE(back.isOk()) << back.status().message();
      EXPECT_EQ(back->dtype, dtype);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->bytes, t.bytes) << dtypeName(dtype) << " " << shapeString(shape);
    }
  }
}

TEST(Npy, HeaderIsPaddedTo64Bytes) {
  TempDir dir;
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), f32({3}, {1, 2, 3})).isOk());
  std::ifstream f(dir.file("a.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  // The dict needs more than 64 bytes with the 10-byte preamble: numpy pads it to 128.
  ASSERT_EQ(bytes.size(), 128u + 12u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(bytes[127], '\n');
  EXPECT_NE(bytes.find("'shape': (3,)"), std::string::npos);
}

TEST(Npy, Bf16IsWrittenAsFloat32) {
  TempDir dir;
  std::vector<uint16_t> bits = {floatToBf16(1.5f), floatToBf16(-3.25f), floatToBf16(1e-3f)};
  ASSERT_TRUE(writeNpy(dir.file("b.npy"), makeTensor(DType::bf16, {3}, bits)).isOk());
  auto back = readNpy(dir.file("b.npy"));
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->dtype, DType::f32);
  std::vector<float> want = {bf16ToFloat(bits[0]), bf16ToFloat(bits[1]), bf16ToFloat(bits[2])};
  EXPECT_EQ(valuesOf<float>(*back), want);
}

TEST(Npy, ReadsHandMadeFilesOfEachVersion) {
  TempDir dir;
  std::vector<int32_t> data = {7, -8, 9, 10, 11, 12};
  for (int major : {1, 2, 3}) {
    std::string path = dir.file("v" + std::to_string(major) + ".npy");
    // Double quotes, no trailing comma, extra spaces: still a valid Python literal.
    writeBytes(path, npyBytes(major, "{\"descr\": '<i4', 'shape': (2, 3),'fortran_order':False}",
                              rawBytes(data)));
    auto t = readNpy(path);
    ASSERT_TRUE(t.isOk()) << t.status().message();
    EXPECT_EQ(t->dtype, DType::i32);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(valuesOf<int32_t>(*t), data);
  }
}

TEST(Npy, RejectsFortranOrderNamingTheFile) {
  TempDir dir;
  std::string path = dir.file("fortran.npy");
  writeBytes(path, npyBytes(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
                            rawBytes(std::vector<float>{1, 2})));
  auto t = readNpy(path);
  ASSERT_FALSE(t.isOk());
  EXPECT_NE(t.status().message().find("fortran_order"), std::string::npos);
  EXPECT_NE(t.status().message().find(path), std::string::npos);
}

TEST(Npy, RejectsUnsupportedDtypesByName) {
  TempDir dir;
  for (const char *descr : {"|u1", "|i1", "<u2", ">f4", "<c8"}) {
    std::string path = dir.file("bad.npy");
    writeBytes(path, npyBytes(1,
                              std::string("{'descr': '") + descr +
                                  "', 'fortran_order': False, 'shape': (4,), }",
                              std::string(32, '\0')));
    auto t = readNpy(path);
    ASSERT_FALSE(t.isOk()) << descr;
    EXPECT_NE(t.status().message().find(std::string("'") + descr + "'"), std::string::npos)
        << t.status().message();
    EXPECT_NE(t.status().message().find(path), std::string::npos);
  }
}

TEST(Npy, RejectsTruncatedAndMalformedFiles) {
  TempDir dir;
  std::string good = npyBytes(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }",
                              rawBytes(std::vector<double>{1, 2, 3}));
  std::string path = dir.file("x.npy");
  for (size_t len = 0; len < good.size(); ++len) { // every prefix is an error, never a crash
    writeBytes(path, good.substr(0, len));
    auto t = readNpy(path);
    ASSERT_FALSE(t.isOk()) << "prefix of " << len << " bytes accepted";
    EXPECT_NE(t.status().message().find(path), std::string::npos);
  }
  writeBytes(path, good + "extra");
  EXPECT_FALSE(readNpy(path).isOk());
  writeBytes(path, "PK\x03\x04 not an npy file");
  auto bad = readNpy(path);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("magic"), std::string::npos);
  for (const char *dict :
       {"{'descr': '<f8', 'shape': (3,), }",
        "{'descr': '<f8', 'fortran_order': False, 'shape': (3,-1), }",
        "{'descr': '<f8', 'fortran_order': maybe, 'shape': (3,), }", "['descr']"}) {
    writeBytes(path, npyBytes(1, dict, rawBytes(std::vector<double>{1, 2, 3})));
    EXPECT_FALSE(readNpy(path).isOk()) << dict;
  }
  auto missing = readNpy(dir.file("nope.npy"));
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("nope.npy"), std::string::npos);
}

TEST(Npy, ReadsFilesWrittenByNumpy) {
  std::string why;
  if (!havePythonNumpy(why))
    GTEST_SKIP() << why;
  TempDir dir;
  std::string script = "import numpy as np\nd = '" + dir.path() + "/'\n" + R"(
np.save(d + 'f8.npy', np.arange(12, dtype='<f8').reshape(3, 4) / 8)
np.save(d + 'f4.npy', np.array([[1.5, -2.25], [3.0, 1e-7]], dtype='<f4'))
np.save(d + 'f2.npy', np.array([0.5, 65504, -1e-5], dtype='<f2'))
np.save(d + 'i8.npy', np.array([-(2**62), 5, 2**40], dtype='<i8'))
np.save(d + 'i4.npy', np.array(-7, dtype='<i4'))
np.save(d + 'b1.npy', np.array([True, False, True]))
np.save(d + 'fortran.npy', np.asfortranarray(np.ones((2, 3), dtype='<f4')))
np.save(d + 'u1.npy', np.zeros(3, dtype=np.uint8))
)";
  ASSERT_EQ(runPython(script, dir), 0);

  auto f8 = readNpy(dir.file("f8.npy"));
  ASSERT_TRUE(f8.isOk()) << f8.status().message();
  EXPECT_EQ(f8->shape, (std::vector<int64_t>{3, 4}));
  std::vector<double> want8;
  for (int i = 0; i < 12; ++i)
    want8.push_back(i / 8.0);
  EXPECT_EQ(valuesOf<double>(*f8), want8);

  auto f4 = readNpy(dir.file("f4.npy"));
  ASSERT_TRUE(f4.isOk());
  EXPECT_EQ(valuesOf<float>(*f4), (std::vector<float>{1.5f, -2.25f, 3.0f, 1e-7f}));

  auto f2 = readNpy(dir.file("f2.npy"));
  ASSERT_TRUE(f2.isOk());
  EXPECT_EQ(f2->dtype, DType::f16);
  std::vector<uint16_t> h = valuesOf<uint16_t>(*f2);
  EXPECT_EQ(halfToFloat(h[0]), 0.5f);
  EXPECT_EQ(halfToFloat(h[1]), 65504.0f);
  EXPECT_EQ(h[2], floatToHalf(-1e-5f));

  auto i8 = readNpy(dir.file("i8.npy"));
  ASSERT_TRUE(i8.isOk());
  EXPECT_EQ(valuesOf<int64_t>(*i8),
            (std::vector<int64_t>{-(int64_t(1) << 62), 5, int64_t(1) << 40}));

  auto i4 = readNpy(dir.file("i4.npy"));
  ASSERT_TRUE(i4.isOk());
  EXPECT_TRUE(i4->shape.empty());
  EXPECT_EQ(valuesOf<int32_t>(*i4), (std::vector<int32_t>{-7}));

  auto b1 = readNpy(dir.file("b1.npy"));
  ASSERT_TRUE(b1.isOk());
  EXPECT_EQ(b1->dtype, DType::i1);
  EXPECT_EQ(valuesOf<uint8_t>(*b1), (std::vector<uint8_t>{1, 0, 1}));

  EXPECT_FALSE(readNpy(dir.file("fortran.npy")).isOk());
  auto u1 = readNpy(dir.file("u1.npy"));
  ASSERT_FALSE(u1.isOk());
  EXPECT_NE(u1.status().message().find("'|u1'"), std::string::npos);
}

TEST(Npy, NumpyReadsWhatWeWrite) {
  std::string why;
  if (!havePythonNumpy(why))
    GTEST_SKIP() << why;
  TempDir dir;
  ASSERT_TRUE(writeNpy(dir.file("a.npy"), f64({2, 2}, {1.0, -2.5, 3.25, 1e300})).isOk());
  ASSERT_TRUE(writeNpy(dir.file("b.npy"), i1({3}, {1, 0, 1})).isOk());
  ASSERT_TRUE(writeNpy(dir.file("c.npy"), i64({}, {-42})).isOk());
  ASSERT_TRUE(writeNpy(dir.file("d.npy"),
                       makeTensor(DType::f16, {2}, std::vector<uint16_t>{0x3c00, 0xc000}))
                  .isOk());
  std::string script = "import numpy as np, sys\nd = '" + dir.path() + "/'\n" + R"(
a = np.load(d + 'a.npy'); b = np.load(d + 'b.npy'); c = np.load(d + 'c.npy'); e = np.load(d + 'd.npy')
ok = (a.dtype == np.float64 and a.tolist() == [[1.0, -2.5], [3.25, 1e300]]
      and b.dtype == np.bool_ and b.tolist() == [True, False, True]
      and c.dtype == np.int64 and c.shape == () and int(c) == -42
      and e.dtype == np.float16 and e.tolist() == [1.0, -2.0])
sys.exit(0 if ok else 1)
)";
  EXPECT_EQ(runPython(script, dir), 0) << "numpy did not read back the values written";
}
