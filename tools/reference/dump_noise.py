#!/usr/bin/env python3
"""Dump torch.randn outputs drawn from seeded CPU generators, for tests/pipelines/test_noise.cpp.

Run with the reference venv:  /work/refenv/bin/python tools/reference/dump_noise.py
Writes tests/data/noise/randn.json.

Each case seeds one torch.Generator("cpu") (or a list of them, the way diffusers' randn_tensor
takes one generator per batch element) and records one or more consecutive draws from it, so
the test also checks that the generator state advances exactly as torch's does between calls
(including the cached second Box-Muller value of the scalar path used for fewer than 16
elements).

For each draw the JSON holds the shape, dtype, the element count, the FNV-1a 64-bit hash of the
whole contiguous little-endian buffer (as a hex string), and raw bit patterns: every element for
tensors of at most FULL_LIMIT elements, otherwise the first and last EDGE elements. The big
tensors are the shapes diffusers' FluxPipeline ([B, 16, 2*(H//16), 2*(W//16)]) and
Flux2KleinPipeline ([B, 128, H//16, W//16]) request from randn_tensor.

The file also records torch's CPU capability: the float32 Box-Muller differs between the AVX2
kernel and the scalar (DEFAULT) one, and the goldens are only valid for the AVX2 kernel, which
torch also uses on AVX-512 machines (normal_stub has no AVX-512 registration).
"""
import json
import os
import sys

import numpy as np
import torch
from diffusers.utils.torch_utils import randn_tensor

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "noise")

FULL_LIMIT = 1024
EDGE = 64

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
INT_VIEW = {"f32": np.uint32, "bf16": np.uint16, "f16": np.uint16, "f64": np.uint64}

SEEDS = [0, 42, 2**32 + 5, 2**63 - 1]


def fnv1a64(data: bytes) -> str:
    h = 0xCBF29CE484222325
    # Byte-wise on purpose: the C++ test computes the same definition (the tensors are <= 2 MiB).
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def bits_of(t: torch.Tensor, dtype_name: str) -> np.ndarray:
    t = t.contiguous()
    if dtype_name in ("bf16", "f16"):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy().view(INT_VIEW[dtype_name])


def record(t: torch.Tensor, dtype_name: str) -> dict:
    bits = bits_of(t, dtype_name).reshape(-1)
    rec = {
        "shape": list(t.shape),
        "dtype": dtype_name,
        "numel": int(bits.size),
        "fnv1a64": fnv1a64(bits.astype(bits.dtype.newbyteorder("<")).tobytes()),
    }
    if bits.size <= FULL_LIMIT:
        rec["bits"] = [int(v) for v in bits]
    else:
        rec["head"] = [int(v) for v in bits[:EDGE]]
        rec["tail"] = [int(v) for v in bits[-EDGE:]]
    return rec


def single(seed, draws):
    """One generator, consecutive torch.randn calls: draws = [(shape, dtype_name), ...]."""
    g = torch.Generator("cpu").manual_seed(seed)
    out = []
    for shape, dt in draws:
        out.append(record(torch.randn(shape, generator=g, dtype=DTYPES[dt]), dt))
    return {"kind": "single", "seed": str(seed), "draws": out}


def diffusers_batch(seeds, shape, dt):
    """diffusers.utils.torch_utils.randn_tensor with a list of generators (one per sample), or one."""
    if len(seeds) == 1:
        gens = torch.Generator("cpu").manual_seed(seeds[0])
    else:
        gens = [torch.Generator("cpu").manual_seed(s) for s in seeds]
    t = randn_tensor(tuple(shape), generator=gens, device=torch.device("cpu"), dtype=DTYPES[dt])
    return {"kind": "diffusers_list" if len(seeds) > 1 else "diffusers_single",
            "seeds": [str(s) for s in seeds], "draws": [record(t, dt)]}


def flux1_shape(batch, height, width):
    return [batch, 16, 2 * (height // 16), 2 * (width // 16)]


def klein_shape(batch, height, width):
    return [batch, 128, height // 16, width // 16]


def main():
    cases = []
    small_sizes = [1, 2, 3, 15, 16, 17, 31, 32, 33, 47, 100]
    for seed in SEEDS:
        for dt in DTYPES:
            for n in small_sizes:
                cases.append(single(seed, [([n], dt)]))
    # Shapes with several dimensions and a tail (numel % 16 != 0) in every dtype.
    for dt in DTYPES:
        cases.append(single(7, [([1, 3, 7, 11], dt)]))
        cases.append(single(7, [([2, 5, 40], dt)]))
    # Several consecutive draws from one generator: fill path, tail redraw and the scalar path's
    # cached second value must all leave the state where torch leaves it.
    cases.append(single(123, [([5], "f32"), ([5], "f32"), ([3], "f64"), ([17], "f32"), ([1], "bf16"),
                              ([40], "bf16"), ([16], "f16"), ([7], "f16"), ([33], "f64"), ([2], "f32")]))
    cases.append(single(2**32 + 5, [([1, 16, 8, 8], "bf16"), ([1, 16, 8, 8], "bf16"), ([9], "bf16"),
                                    ([1, 128, 4, 4], "f32")]))
    # The pipelines' shapes.
    for seed in [0, 42]:
        cases.append(single(seed, [(klein_shape(1, 1024, 1024), "bf16")]))
        cases.append(single(seed, [(flux1_shape(1, 1024, 1024), "bf16")]))
    cases.append(single(0, [(klein_shape(1, 1024, 1024), "f32")]))
    cases.append(single(0, [(klein_shape(1, 512, 512), "f16")]))
    cases.append(single(1, [(flux1_shape(1, 512, 768), "f32"), (flux1_shape(1, 512, 768), "bf16")]))
    cases.append(single(5, [(klein_shape(1, 336, 208), "bf16")]))  # 21 x 13 tokens: a tail
    cases.append(diffusers_batch([42], klein_shape(2, 512, 512), "bf16"))
    cases.append(diffusers_batch([42, 43], klein_shape(2, 512, 512), "bf16"))
    cases.append(diffusers_batch([0, 0, 7], flux1_shape(3, 256, 256), "bf16"))
    cases.append(diffusers_batch([9], flux1_shape(2, 256, 256), "f32"))

    doc = {
        "generator": "torch.Generator('cpu').manual_seed(seed); torch.randn(shape, generator=g, dtype=dtype)",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "hash": "FNV-1a 64 over the contiguous little-endian element bytes",
        "cases": cases,
    }
    if doc["cpu_capability"] not in ("AVX2", "AVX512"):
        sys.exit(f"torch runs the {doc['cpu_capability']} normal kernel here; the goldens need AVX2")
    os.makedirs(OUT_DIR, exist_ok=True)
    path = os.path.join(OUT_DIR, "randn.json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
