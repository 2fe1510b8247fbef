#!/usr/bin/env python3
"""Reads a GGUF file written by `fluxrt quantize` back with the gguf package: the architecture,
every tensor's type and shape, and gguf's own dequantization of every tensor (finite values).
Optionally compares each tensor with a safetensors checkpoint in the same (BFL) names and prints
the per-tensor rel-L2 of the quantization.

    /work/refenv/bin/python tools/reference/check_gguf_readback.py out.gguf [bfl.safetensors]
"""
import json
import struct
import sys

import gguf
import numpy as np


def read_safetensors(path):
    blob = open(path, "rb").read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = np.frombuffer(blob[8 + n + b:8 + n + end], dtype=np.uint8)
        if e["dtype"] == "BF16":
            v = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F32":
            v = raw.view(np.float32)
        else:
            continue
        out[name] = v.reshape(e["shape"])
    return out


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    arch = reader.fields["general.architecture"]
    print("architecture:", bytes(arch.parts[arch.data[0]]).decode(), "tensors:", len(reader.tensors))
    reference = read_safetensors(sys.argv[2]) if len(sys.argv) > 2 else {}
    types = {}
    for t in reader.tensors:
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(values).all(), t.name
        if t.name in reference:
            w = reference[t.name].reshape(values.shape)
            rel = np.linalg.norm(values - w) / np.linalg.norm(w)
            print(f"  {t.name:50s} {t.tensor_type.name:5s} rel-L2 {rel:.4g}")
    print("types:", types)


if __name__ == "__main__":
    main()
