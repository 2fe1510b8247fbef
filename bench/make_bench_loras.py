#!/usr/bin/env python3
"""Random plain LoRA files for a diffusers transformer, to time requests that each carry their own.

Reads the transformer's safetensors header (standard library only), and writes N files in the
diffusers/PEFT layout (transformer.<module>.lora_A.weight [r, in], .lora_B.weight [out, r], f32)
with rank R on every 2-D weight, each file from its own seed. The values are small and random:
the files change the image a little and mean nothing.

  bench/make_bench_loras.py models/demo/transformer/diffusion_pytorch_model.safetensors /tmp/loras \\
      --count 8 --rank 16
"""
import argparse
import json
import os
import random
import struct


def read_header(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(size))


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (shape, values) in tensors.items():
        data = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("transformer", help="the transformer's .safetensors file")
    ap.add_argument("out", help="folder to write lora_<i>.safetensors into")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    args = ap.parse_args()
    layers = {k[: -len(".weight")]: v["shape"] for k, v in read_header(args.transformer).items()
              if k.endswith(".weight") and len(v.get("shape", [])) == 2}
    os.makedirs(args.out, exist_ok=True)
    for i in range(args.count):
        rng = random.Random(1000 + i)
        tensors = {}
        for module, (out, inp) in sorted(layers.items()):
            r = args.rank
            tensors[f"transformer.{module}.lora_A.weight"] = ([r, inp], [rng.gauss(0, inp ** -0.5) for _ in range(r * inp)])
            tensors[f"transformer.{module}.lora_B.weight"] = ([out, r], [rng.gauss(0, 0.01) for _ in range(out * r)])
        write_safetensors(os.path.join(args.out, f"lora_{i}.safetensors"), tensors)
    print(f"{args.count} files of rank {args.rank} on {len(layers)} layers in {args.out}")


if __name__ == "__main__":
    main()
