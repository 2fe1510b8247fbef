#!/usr/bin/env python3
"""Write the small safetensors files that tests/io/test_safetensors.cpp reads back.

Run with the reference venv:  /work/refenv/bin/python tools/reference/make_safetensors_fixtures.py
Writes tests/data/safetensors/good/:
  dtypes.safetensors       one tensor per dtype the engine reads (F64 F32 F16 BF16 F8_E4M3 F8_E5M2
                           I64 I32 I16 I8 U8 BOOL), an empty tensor, a scalar, and __metadata__,
                           written by the `safetensors` package itself (safetensors.torch.save_file)
  dtypes.expected.json     for each tensor: torch dtype name, shape, and the values as float64
                           (non-finite ones as "inf"/"-inf"/"nan"; the C++ test compares them all)
  sharded/                 a 2-shard checkpoint written by huggingface_hub.save_torch_state_dict,
                           the code transformers' save_pretrained uses: model-0000k-of-00002
                           .safetensors plus model.safetensors.index.json
  sharded.expected.json    same format as dtypes.expected.json, for the sharded tensors
  misaligned.safetensors   hand-written (the reference writer never produces it): a 3-byte BOOL
                           tensor followed by an F32 tensor at byte 3 of the data section. The
                           format allows it; the reader must give a correct (if misaligned) view.

`--verify FILE` instead loads FILE with safetensors.torch.load_file and prints every tensor
(used once to check that files from fluxrt's writer read back identically in the reference).
"""
import json
import math
import os
import struct
import sys

import torch
from safetensors.torch import load_file, save_file
from huggingface_hub import save_torch_state_dict

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "safetensors",
                   "good")


def expected(tensors):
    out = {}
    for name, t in tensors.items():
        out[name] = {
            "dtype": str(t.dtype).replace("torch.", ""),
            "shape": list(t.shape),
            # JSON has no infinities or NaN: those go in as the strings "inf", "-inf", "nan".
            "values": [v if math.isfinite(v) else str(v) for v in t.to(torch.float64).flatten().tolist()],
        }
    return out


def dtype_tensors():
    g = torch.Generator().manual_seed(1234)
    return {
        "f64.values": torch.tensor([1.0 / 3.0, -2.5, 1e300], dtype=torch.float64),
        "f32.matrix": (torch.arange(6, dtype=torch.float32) * 0.5 - 1.0).reshape(2, 3),
        "f16.values": torch.tensor([[0.25, -1.0], [65504.0, 0.0009765625]], dtype=torch.float16),
        "bf16.random": torch.randn(2, 3, 4, generator=g).to(torch.bfloat16),
        "f8_e4m3.values": torch.tensor([0.0, 1.0, -2.0, 0.5, 448.0, -0.001953125], dtype=torch.float8_e4m3fn),
        "f8_e5m2.values": torch.tensor([0.0, 1.0, -2.0, 0.25, 57344.0, float("inf")], dtype=torch.float8_e5m2),
        "i64.values": torch.tensor([-1, 0, 2**40], dtype=torch.int64),
        "i32.values": torch.tensor([[-7, 8]], dtype=torch.int32),
        "i16.values": torch.tensor([-32768, 32767], dtype=torch.int16),
        "i8.values": torch.tensor([-128, 5, 127], dtype=torch.int8),
        "u8.values": torch.tensor([0, 200, 255], dtype=torch.uint8),
        "bool.mask": torch.tensor([True, False, True], dtype=torch.bool),
        "empty.f32": torch.zeros(0, 4, dtype=torch.float32),
        "scalar.f32": torch.tensor(3.5, dtype=torch.float32),
    }


def write_misaligned(path):
    # Data section: 3 bool bytes, then 2 f32 values starting at byte 3.
    header = {
        "mask": {"dtype": "BOOL", "shape": [3], "data_offsets": [0, 3]},
        "weight": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]},
    }
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    data = bytes([1, 0, 1]) + struct.pack("<2f", 1.5, -4.0)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--verify":
        for name, t in sorted(load_file(sys.argv[2]).items()):
            print(name, t.dtype, list(t.shape), t.to(torch.float64).flatten().tolist())
        return
    os.makedirs(OUT, exist_ok=True)

    tensors = dtype_tensors()
    path = os.path.join(OUT, "dtypes.safetensors")
    save_file(tensors, path, metadata={"format": "pt", "note": "fluxrt fixture", "unicode": "größe ✓"})
    back = load_file(path)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and torch.equal(back[name].reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), name
    with open(os.path.join(OUT, "dtypes.expected.json"), "w") as f:
        json.dump(expected(tensors), f, indent=1, sort_keys=True)

    # Two shards: every weight is 128 bytes, the shard limit 400.
    g = torch.Generator().manual_seed(99)
    sharded = {f"layers.{i}.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16) * (i + 1)
               for i in range(4)}
    sharded["layers.0.bias"] = torch.randn(8, generator=g)
    shard_dir = os.path.join(OUT, "sharded")
    os.makedirs(shard_dir, exist_ok=True)
    for old in os.listdir(shard_dir):
        os.remove(os.path.join(shard_dir, old))
    save_torch_state_dict(sharded, shard_dir, max_shard_size=400, metadata={"format": "pt"})
    files = sorted(os.listdir(shard_dir))
    assert "model.safetensors.index.json" in files and len(files) >= 3, files
    with open(os.path.join(OUT, "sharded.expected.json"), "w") as f:
        json.dump(expected(sharded), f, indent=1, sort_keys=True)

    write_misaligned(os.path.join(OUT, "misaligned.safetensors"))
    print("wrote", OUT, sorted(os.listdir(OUT)), files)


if __name__ == "__main__":
    main()
