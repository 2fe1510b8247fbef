#!/usr/bin/env python3
"""Writes GGUF versions of the tiny FLUX.2 klein transformer (tests/data/models/
flux2-klein-tiny-bfl.safetensors) and of the tiny FLUX.1-dev transformer of the module goldens
(tests/data/flux1_transformer/flux1-dev-bfl.safetensors), BFL names, the way city96's /
ComfyUI-GGUF's files are laid out: general.architecture "flux", names as in the BFL checkpoint,
2-D weights quantized by gguf.quants.quantize where their rows are whole blocks (else F16), 1-D
tensors (norm scales, biases) F32.

  tests/data/gguf/flux2-klein-tiny-q8_0.gguf   Q8_0, plain BFL names
  tests/data/gguf/flux2-klein-tiny-q4_0.gguf   Q4_0, ComfyUI's "model.diffusion_model." prefix
  tests/data/gguf/flux1-dev-tiny-q8_0.gguf     Q8_0, plain BFL names
  tests/data/gguf/flux1-dev-tiny-q4_1.gguf     Q4_1, ComfyUI's "model.diffusion_model." prefix

tests/models/test_gguf_models.cpp loads them and compares with the model built from the same
weights dequantized by the gguf package's numpy code (checked bit for bit in tests/io).

    python tools/reference/make_tiny_gguf.py  (a venv with gguf==0.19.0, numpy==2.4.6 from PyPI)
"""
import json
import os
import struct

import gguf
import numpy as np
from gguf import GGMLQuantizationType as T

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data")
SOURCE = os.path.join(DATA, "models", "flux2-klein-tiny-bfl.safetensors")
SOURCE_FLUX1 = os.path.join(DATA, "flux1_transformer", "flux1-dev-bfl.safetensors")


def read_safetensors(path):
    """name -> float32 array (the file holds bf16 and f32 tensors only)."""
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        raw = np.frombuffer(blob[base + begin:base + end], dtype=np.uint8)
        if e["dtype"] == "BF16":
            v = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F32":
            v = raw.view(np.float32)
        else:
            raise ValueError(f"{name}: {e['dtype']}")
        out[name] = v.reshape(e["shape"])
    return out


def write(path, tensors, qtype, prefix):
    writer = gguf.GGUFWriter(path, arch="flux")
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    for name in sorted(tensors):
        x = tensors[name]
        if x.ndim == 2 and x.shape[1] % block == 0:
            writer.add_tensor(prefix + name, gguf.quants.quantize(x, qtype), raw_dtype=qtype)
        elif x.ndim == 2:
            writer.add_tensor(prefix + name, x.astype(np.float16), raw_dtype=T.F16)
        else:
            writer.add_tensor(prefix + name, x.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(path, os.path.getsize(path), "bytes")


def main():
    tensors = read_safetensors(SOURCE)
    out = os.path.join(DATA, "gguf")
    write(os.path.join(out, "flux2-klein-tiny-q8_0.gguf"), tensors, T.Q8_0, "")
    write(os.path.join(out, "flux2-klein-tiny-q4_0.gguf"), tensors, T.Q4_0, "model.diffusion_model.")
    flux1 = read_safetensors(SOURCE_FLUX1)
    write(os.path.join(out, "flux1-dev-tiny-q8_0.gguf"), flux1, T.Q8_0, "")
    write(os.path.join(out, "flux1-dev-tiny-q4_1.gguf"), flux1, T.Q4_1, "model.diffusion_model.")


if __name__ == "__main__":
    main()
