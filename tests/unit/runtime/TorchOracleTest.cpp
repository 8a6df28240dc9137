// The CPU reference kernels against PyTorch (f32, 1e-5 relative): inputs go out as .npy, a
// Python script computes torch's answers, and they come back as .npy. Skips when torch is absent.
#include "runtime/cpu/Kernels.h"
#include "runtime/io/Npy.h"

#include "TestUtil.h"

#include <fstream>

using namespace megac;
using namespace megac::runtime;
using namespace megac::runtime::cpu;
using namespace megac::runtime::testing;

namespace {

const char *kScript = R"(
import sys, numpy as np, torch, torch.nn.functional as F
d = sys.argv[1]
ld = lambda n: torch.from_numpy(np.load(d + '/' + n + '.npy'))
sv = lambda n, t: np.save(d + '/' + n + '.want.npy', t.detach().contiguous().numpy())
x, w, b = ld('x'), ld('w'), ld('b')
sv('gelu', F.gelu(x))
sv('gelu_tanh', F.gelu(x, approximate='tanh'))
sv('layer_norm', F.layer_norm(x, (x.shape[-1],), w, b, 1e-5))
sv('rms_norm', x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
sv('silu', F.silu(x))
sv('softmax', torch.softmax(x, dim=1))
rot = lambda t: torch.cat((-t[..., t.shape[-1] // 2:], t[..., :t.shape[-1] // 2]), -1)
rx, rc, rs = ld('rope_x'), ld('rope_cos'), ld('rope_sin')
sv('rope', rx * rc + rot(rx) * rs)
sv('linear', F.linear(x, ld('lin_w'), ld('lin_b')))
sv('cross_entropy', F.cross_entropy(ld('logits'), ld('labels'), ignore_index=-100,
                                    reduction='none'))
q, k, v, mask = ld('q'), ld('k'), ld('v'), ld('mask')
B, S, H, D = q.shape
T, HK = k.shape[1], k.shape[2]
k = k.repeat_interleave(H // HK, dim=2)
v = v.repeat_interleave(H // HK, dim=2)
scores = torch.einsum('bshd,bthd->bhst', q, k) * D ** -0.5 + mask
keep = torch.ones(S, T, dtype=torch.bool).tril(diagonal=T - S)
scores = scores.masked_fill(~keep, float('-inf'))
sv('attention', torch.einsum('bhst,bthd->bshd', torch.softmax(scores, -1), v))
)";

} // namespace

TEST(TorchOracle, KernelsMatchPyTorchInFloat32) {
  std::string probe = std::string(MEGAC_TEST_PYTHON) + " -c 'import torch' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0)
    GTEST_SKIP() << MEGAC_TEST_PYTHON << " with torch is not available";
  TempDir dir;
  auto save = [&](const char *name, const HostTensor &t) {
    ASSERT_TRUE(writeNpy(dir.file(std::string(name) + ".npy"), t).isOk());
  };
  const int64_t N = 16, V = 9;
  HostTensor x = f32({2, 5, N}, randomValues(2 * 5 * N, 1, -3, 3));
  HostTensor w = f32({N}, randomValues(N, 2, 0.5, 1.5)), b = f32({N}, randomValues(N, 3));
  HostTensor linW = f32({7, N}, randomValues(7 * N, 4)), linB = f32({7}, randomValues(7, 5));
  HostTensor logits = f32({6, V}, randomValues(6 * V, 6, -5, 5));
  HostTensor labels = i64({6}, {0, 8, -100, 3, 3, 1});
  // GQA (4 query heads on 2 kv heads), causal with 3 queries over 5 keys, an additive mask.
  HostTensor q = f32({2, 3, 4, 8}, randomValues(2 * 3 * 4 * 8, 7, -2, 2));
  HostTensor k = f32({2, 5, 2, 8}, randomValues(2 * 5 * 2 * 8, 8, -2, 2));
  HostTensor v = f32({2, 5, 2, 8}, randomValues(2 * 5 * 2 * 8, 9, -2, 2));
  HostTensor mask = f32({3, 5}, randomValues(15, 10, -1, 0));
  // Rope on [b, h, s, d] with per-sequence tables [b, 1, s, d] (Hugging Face's layout).
  HostTensor ropeX = f32({2, 3, 4, 8}, randomValues(2 * 3 * 4 * 8, 11, -2, 2));
  HostTensor ropeCos = f32({2, 1, 4, 8}, randomValues(2 * 4 * 8, 12, -1, 1));
  HostTensor ropeSin = f32({2, 1, 4, 8}, randomValues(2 * 4 * 8, 13, -1, 1));
  for (auto [name, t] : {std::pair{"x", &x},
                         {"w", &w},
                         {"b", &b},
                         {"lin_w", &linW},
                         {"lin_b", &linB},
                         {"logits", &logits},
                         {"labels", &labels},
                         {"q", &q},
                         {"k", &k},
                         {"v", &v},
                         {"mask", &mask},
                         {"rope_x", &ropeX},
                         {"rope_cos", &ropeCos},
                         {"rope_sin", &ropeSin}})
    save(name, *t);
  std::ofstream(dir.file("oracle.py")) << kScript;
  std::string cmd = std::string(MEGAC_TEST_PYTHON) + " " + dir.file("oracle.py") + " " + dir.path();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "the torch oracle script failed";

  auto check = [&](const char *name, std::vector<int64_t> shape, auto kernel) {
    HostTensor got = HostTensor::zeros(DType::f32, shape);
    Status s = kernel(refOf(got));
    ASSERT_TRUE(s.isOk()) << name << ": " << s.message();
    auto want = readNpy(dir.file(std::string(name) + ".want.npy"));
    ASSERT_TRUE(want.isOk()) << want.status().message();
    ASSERT_EQ(want->shape, shape) << name;
    // f32 against torch's f32: 1e-5 relative, plus 1e-6 absolute for values near zero.
    expectClose(valuesOf<float>(got), valuesOf<float>(*want), 1e-5, 1e-6, name);
  };
  std::vector<int64_t> xs = x.shape;
  TensorRef rb = refOf(b), rlb = refOf(linB);
  check("gelu", xs, [&](TensorRef o) { return gelu(refOf(x), false, o); });
  check("gelu_tanh", xs, [&](TensorRef o) { return gelu(refOf(x), true, o); });
  check("layer_norm", xs, [&](TensorRef o) { return layerNorm(refOf(x), refOf(w), &rb, 1e-5, o); });
  check("rms_norm", xs, [&](TensorRef o) { return rmsNorm(refOf(x), refOf(w), 1e-6, o); });
  check("silu", xs, [&](TensorRef o) { return silu(refOf(x), o); });
  check("softmax", xs, [&](TensorRef o) { return softmax(refOf(x), 1, o); });
  check("rope", {2, 3, 4, 8},
        [&](TensorRef o) { return rope(refOf(ropeX), refOf(ropeCos), refOf(ropeSin), o); });
  check("linear", {2, 5, 7}, [&](TensorRef o) { return linear(refOf(x), refOf(linW), &rlb, o); });
  check("cross_entropy", {6},
        [&](TensorRef o) { return crossEntropy(refOf(logits), refOf(labels), int64_t(-100), o); });
  TensorRef rm = refOf(mask);
  check("attention", {2, 3, 4, 8}, [&](TensorRef o) {
    return attention(refOf(q), refOf(k), refOf(v), &rm, true, 1 / std::sqrt(8.0), o);
  });
}
