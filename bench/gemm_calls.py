"""Times the exact cblas_sgemm calls a mid GPT's training step issues (issue 30: shapes,
transposes, leading dims and beta as runtime/cpu/Nn.cpp passes them) and numpy's product of the
same shapes, on the OpenBLAS megac links (Debian's libopenblas.so.0), outside a step.

Per projection of bench/train_step.py's mid GPT (T = 1024 tokens, hidden 512, ffn 2048, vocab
8192): the forward Linear (x [T, in] times W [out, in] transposed: NoTrans/Trans, beta 0), the
input gradient (g [T, out] times W: NoTrans/NoTrans, beta 0) and the weight gradient accumulated
into its fp32 accumulator (g transposed times x: Trans/NoTrans, beta 1); with --numpy, numpy's
x @ W.T, g @ W and g.T @ x of the same arrays. Prints the best and median GFLOP/s of --repeats
calls each. Run it under the CPU lock: with another process on one of the two cores every rate
drops to the one-core rate (~32 GFLOP/s), which is what an unlocked run mostly measures.

usage: gemm_calls.py [--threads 2] [--repeats 9] [--numpy] [--only head]
"""
import argparse
import ctypes
import time

import numpy as np

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
TOKENS = 1024
# name: (out features, in features) of the mid GPT's weights (torch's [out, in] layout).
SHAPES = {"qkv": (1536, 512), "proj": (512, 512), "fc1": (2048, 512), "fc2": (512, 2048),
          "head": (8192, 512)}


def load_blas(threads):
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_set_num_threads(threads)
    c_int, c_float, ptr = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    blas.cblas_sgemm.argtypes = [c_int, c_int, c_int, c_int, c_int, c_int, c_float, ptr, c_int,
                                 ptr, c_int, c_float, ptr, c_int]
    return blas


def sgemm_call(blas, trans_a, trans_b, m, n, k, beta, rng):
    """A closure running C[m, n] = op(A) op(B) + beta C row-major with dense leading dims."""
    a = rng.standard_normal((k, m) if trans_a else (m, k), dtype=np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    args = (ROW_MAJOR, TRANS if trans_a else NO_TRANS, TRANS if trans_b else NO_TRANS, m, n, k,
            1.0, a.ctypes.data, a.shape[1], b.ctypes.data, b.shape[1], beta, c.ctypes.data, n)
    return lambda: blas.cblas_sgemm(*args), (a, b, c)


def rate(fn, flops, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    times.sort()
    return flops / times[0] / 1e9, flops / times[len(times) // 2] / 1e9


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--numpy", action="store_true")
    parser.add_argument("--only", choices=sorted(SHAPES))
    args = parser.parse_args()
    blas = load_blas(args.threads)
    rng = np.random.default_rng(0)
    print(f"cblas_sgemm (libopenblas.so.0), {args.threads} thread(s), T = {TOKENS}; "
          f"best / median of {args.repeats} (GFLOP/s)")
    for name, (out, inp) in SHAPES.items():
        if args.only and name != args.only:
            continue
        flops = 2.0 * TOKENS * out * inp
        calls = [("forward   NoTrans/Trans  beta 0", (False, True, TOKENS, out, inp, 0.0)),
                 ("input grad NoTrans/NoTrans beta 0", (False, False, TOKENS, inp, out, 0.0)),
                 ("weight grad Trans/NoTrans beta 1", (True, False, out, inp, TOKENS, 1.0))]
        for what, (ta, tb, m, n, k, beta) in calls:
            fn, keep = sgemm_call(blas, ta, tb, m, n, k, beta, rng)
            best, median = rate(fn, flops, args.repeats)
            print(f"  {name:5s} {what:34s} m {m:5d} n {n:5d} k {k:5d}  {best:6.1f} / {median:6.1f}")
        if args.numpy:
            x = rng.standard_normal((TOKENS, inp), dtype=np.float32)
            w = rng.standard_normal((out, inp), dtype=np.float32)
            g = rng.standard_normal((TOKENS, out), dtype=np.float32)
            for what, fn in (("numpy x @ W.T", lambda: x @ w.T), ("numpy g @ W", lambda: g @ w),
                             ("numpy g.T @ x", lambda: g.T @ x)):
                best, median = rate(fn, flops, args.repeats)
                print(f"  {name:5s} {what:34s} {'':23s}  {best:6.1f} / {median:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
