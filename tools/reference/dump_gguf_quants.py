#!/usr/bin/env python3
"""Writes tests/data/gguf/quants.gguf: for every GGUF tensor type fluxrt runs, a small tensor in
that type and, beside it, the gguf package's own numpy dequantization of it as F32 ("<TYPE>" and
"<TYPE>.expected"; for the types gguf quantizes also the input, "<TYPE>.source").
tests/io/test_gguf.cpp compares fluxrt's dequantization bit for bit.

Types gguf can quantize (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) are quantized from random
normal values by gguf.quants.quantize; gguf has no quantizer for the K types, so their blocks are
random bytes with finite f16 scale fields (every bit of every quant field is exercised). The
file is written by gguf.GGUFWriter, so it is also a real writer's file for the reader tests.
It also writes tests/data/gguf/seeds/small.gguf, a few-hundred-byte file with every kind of
metadata value, the seed of the fuzz_gguf_header libFuzzer target.

    /work/refenv/bin/python tools/reference/dump_gguf_quants.py  (gguf==0.19.0, numpy==2.4.6)
"""
import os

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "gguf", "quants.gguf")
ROWS = 3  # rows of each tensor; one row is COLS values
COLS = 512

QUANTIZED = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]
# Byte offsets of the f16 scale fields in each K block (the rest is random).
K_SCALES = {T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def random_f16(rng, n):
    # Positive and negative scales over a few binades, including f16 subnormals.
    mags = rng.choice([1e-5, 1e-3, 0.01, 0.1, 1.0], size=n) * rng.uniform(0.5, 2.0, size=n)
    return (mags * rng.choice([-1.0, 1.0], size=n)).astype(np.float16)


def main():
    rng = np.random.default_rng(26)
    writer = gguf.GGUFWriter(OUT, arch="fluxrt-test")
    writer.add_string("fluxrt.note", "dequantization goldens: <TYPE> and <TYPE>.expected")
    for qtype in QUANTIZED:
        x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
        x[0, :32] = 0.0       # an all-zero block (scale 0)
        x[1, 32:64] = 0.75    # a constant block
        x[2, :8] *= 50.0      # outliers
        q = gguf.quants.quantize(x, qtype)
        expected = gguf.quants.dequantize(q, qtype).astype(np.float32)
        writer.add_tensor(qtype.name, q, raw_dtype=qtype)
        writer.add_tensor(qtype.name + ".expected", expected)
        writer.add_tensor(qtype.name + ".source", x)  # what was quantized (the quantizer's golden)
    for qtype, offsets in K_SCALES.items():
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        blocks = rng.integers(0, 256, size=(ROWS * COLS // block, size), dtype=np.uint8)
        for off in offsets:
            blocks[:, off:off + 2] = random_f16(rng, blocks.shape[0]).view(np.uint8).reshape(-1, 2)
        q = blocks.reshape(ROWS, COLS // block * size)
        expected = gguf.quants.dequantize(q, qtype).astype(np.float32)
        assert np.isfinite(expected).all()
        writer.add_tensor(qtype.name, q, raw_dtype=qtype)
        writer.add_tensor(qtype.name + ".expected", expected)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(OUT, os.path.getsize(OUT), "bytes")


def write_seed():
    path = os.path.join(os.path.dirname(OUT), "seeds", "small.gguf")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(27)
    writer = gguf.GGUFWriter(path, arch="flux")
    writer.add_uint32("general.alignment", 32)
    writer.add_string("general.name", "seed")
    writer.add_bool("seed.flag", True)
    writer.add_float32("seed.f32", 0.5)
    writer.add_int64("seed.i64", -3)
    writer.add_array("seed.tokens", ["a", "bc", "d"])
    writer.add_array("seed.ids", [1, 2, 3])
    writer.add_tensor("a", np.arange(4, dtype=np.float32))
    writer.add_tensor("b", gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32), T.Q8_0),
                      raw_dtype=T.Q8_0)
    writer.add_tensor("c", rng.integers(0, 256, size=(1, 144), dtype=np.uint8), raw_dtype=T.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
    write_seed()
