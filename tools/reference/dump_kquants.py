#!/usr/bin/env python3
"""Writes tests/data/gguf/kquants.bin: fixed f32 inputs and the bytes ggml's own reference
K quantizers (quantize_row_q2_K_ref .. quantize_row_q6_K_ref, no importance matrix) write for
them, with the gguf package's dequantization of those bytes. tests/unit/test_quant_kquants.cpp
checks that fluxrt's quantize_row_ref writes the same bytes and dequantize_row_ref reads the same
values.

PyPI has no K quantizer (gguf.quants only dequantizes the K types), so this script compiles
ggml's C file from a source checkout given on the command line: a llama.cpp checkout (its ggml/
folder is used) or a ggml one. It builds ggml-quants.c with stubs for the four ggml functions
the file calls but the quantizers never reach into a shared library, and calls it through ctypes:

    python tools/reference/dump_kquants.py --ggml ~/src/llama.cpp   (gguf==0.19.0, numpy from PyPI)
    (gguf==0.19.0, numpy==2.4.6; ggml-org/ggml d99724f2b141, any x86-64 gcc)

The library is compiled with -O2 -ffp-contract=off: f32 arithmetic as written, no fused
multiply-add. These are the bytes of a stock x86-64 llama.cpp build (ggml-quants.c is part of
ggml-base, which gets no -march flags, so no FMA) and of any build with -ffp-contract=off. Where
multiply-adds may be fused (arm64, where FMA is baseline, or -march=native in the C flags), some
groups' searches round differently and pick another grid. --compare-fma also builds such a library
(-march=native -ffp-contract=fast) and reports how many blocks differ (nothing is written from it).

Binary layout (little-endian): b"FXKQ", u32 version (1), u32 case count; per case: u32 name
length, the name (ASCII), u32 n, f32[n] input; then for each of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K:
u32 ggml type id, u32 byte count, the bytes, f32[n] gguf.quants.dequantize of them.
"""
import argparse
import ctypes
import os
import struct
import subprocess
import tempfile

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "gguf", "kquants.bin")
TYPES = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]

# The four ggml functions ggml-quants.c refers to outside the K reference quantizers.
STUBS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <stdint.h>
void ggml_abort(const char *file, int line, const char *fmt, ...) {
    fprintf(stderr, "ggml_abort %s:%d %s\n", file, line, fmt); abort();
}
size_t ggml_row_size(int type, int64_t ne) { (void)type; (void)ne; abort(); }
size_t ggml_type_size(int type) { (void)type; abort(); }
const char *ggml_type_name(int type) { (void)type; return "?"; }
"""


def find_sources(root):
    for sub in ("ggml", "."):
        base = os.path.join(root, sub)
        if os.path.exists(os.path.join(base, "src", "ggml-quants.c")):
            return os.path.join(base, "src"), os.path.join(base, "include")
    raise SystemExit(f"{root}: no ggml/src/ggml-quants.c or src/ggml-quants.c")


def build(src, inc, workdir, cc, flags, name):
    stub = os.path.join(workdir, "stubs.c")
    with open(stub, "w") as f:
        f.write(STUBS)
    lib = os.path.join(workdir, name)
    cmd = [cc, "-std=gnu11", "-shared", "-fPIC", *flags, f"-I{src}", f"-I{inc}",
           os.path.join(src, "ggml-quants.c"), stub, "-o", lib, "-lm"]
    subprocess.run(cmd, check=True)
    dll = ctypes.CDLL(lib)
    for t in TYPES:
        fn = getattr(dll, f"quantize_row_{t.name[:2].lower()}_K_ref")
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
        fn.restype = None
    return dll


def quantize(dll, t, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    block, size = gguf.GGML_QUANT_SIZES[t]
    out = np.zeros(x.size // block * size, dtype=np.uint8)
    getattr(dll, f"quantize_row_{t.name[:2].lower()}_K_ref")(x.ctypes.data, out.ctypes.data, x.size)
    return out


def cases():
    rng = np.random.default_rng(2025)
    normal = lambda n: rng.standard_normal(n).astype(np.float32)  # noqa: E731
    out = []
    out.append(("normal_256", normal(256)))
    out.append(("normal_512", normal(512)))
    # Weight-like values: the case the error bounds are measured on.
    out.append(("weights_2048", (0.02 * rng.standard_normal(2048)).astype(np.float32)))
    x = normal(512)
    x[rng.choice(512, 12, replace=False)] *= 50.0
    out.append(("outliers_512", x))
    out.append(("zero_256", np.zeros(256, np.float32)))
    x = np.full(512, 0.75, np.float32)
    x[256:] = -0.3
    out.append(("constant_512", x))
    out.append(("tiny_256", (1e-8 * rng.standard_normal(256)).astype(np.float32)))
    out.append(("below_eps_256", (1e-17 * rng.standard_normal(256)).astype(np.float32)))
    out.append(("large_256", (1e4 * rng.standard_normal(256)).astype(np.float32)))
    out.append(("positive_256", rng.uniform(0.1, 1.0, 256).astype(np.float32)))
    out.append(("negative_256", -rng.uniform(0.1, 1.0, 256).astype(np.float32)))
    out.append(("heavy_tail_512", rng.standard_t(2.0, 512).astype(np.float32)))
    # Values on a grid of halves and quarters: many exact ties for the rounding.
    out.append(("grid_256", ((rng.integers(-16, 17, 256)) * 0.25).astype(np.float32)))
    # Groups that differ inside one super-block: zeros, a constant, one spike, tiny, normal.
    x = normal(256)
    x[0:16] = 0.0
    x[16:32] = 0.5
    x[32:48] = 0.0
    x[40] = 3.0
    x[64:96] *= 1e-6
    x[128:160] = np.abs(x[128:160]) + 2.0
    out.append(("mixed_groups_256", x))
    return out


def rel_l2(x, y):
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    return float(np.sqrt(((x - y) ** 2).sum() / (x ** 2).sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ggml", required=True, help="a llama.cpp or ggml source checkout")
    ap.add_argument("--cc", default="cc")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--compare-fma", action="store_true",
                    help="also build with -march=native -ffp-contract=fast and count differing blocks")
    args = ap.parse_args()
    src, inc = find_sources(args.ggml)
    with tempfile.TemporaryDirectory() as tmp:
        dll = build(src, inc, tmp, args.cc, ["-O2", "-ffp-contract=off"], "libkq.so")
        fma = build(src, inc, tmp, args.cc, ["-O2", "-march=native", "-ffp-contract=fast"],
                    "libkq_fma.so") if args.compare_fma else None
        all_cases = cases()
        blob = bytearray(b"FXKQ" + struct.pack("<II", 1, len(all_cases)))
        for name, x in all_cases:
            blob += struct.pack("<I", len(name)) + name.encode() + struct.pack("<I", x.size)
            blob += x.astype("<f4").tobytes()
            for t in TYPES:
                q = quantize(dll, t, x)
                deq = gguf.quants.dequantize(q.reshape(1, -1), t).astype(np.float32).reshape(-1)
                blob += struct.pack("<II", int(t), q.size) + q.tobytes() + deq.astype("<f4").tobytes()
                if fma is not None:
                    block, size = gguf.GGML_QUANT_SIZES[t]
                    qf = quantize(fma, t, x)
                    diff = (q.reshape(-1, size) != qf.reshape(-1, size)).any(axis=1).sum()
                    if diff:
                        print(f"  {name} {t.name}: {diff} of {x.size // block} blocks differ with FMA")
                if name in ("weights_2048", "normal_512"):
                    print(f"{name} {t.name}: rel-L2 {rel_l2(x, deq):.5f}")
    with open(args.out, "wb") as f:
        f.write(blob)
    print(args.out, len(blob), "bytes")


if __name__ == "__main__":
    main()
