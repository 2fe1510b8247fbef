#!/usr/bin/env python3
"""Inputs and fp32 outputs of diffusers' Flux2Transformer2DModel for tests/models/test_flux2_transformer.cpp.

Run with the reference venv (tools/reference/requirements.txt pins the versions):
  /work/refenv/bin/python tools/reference/dump_flux2_transformer.py
Writes tests/data/flux2_transformer/<case>.safetensors.

The model is the tiny klein transformer that make_tiny_models.py checked in under
tests/data/models/flux2-klein-tiny/transformer (head dim 128, RoPE axes 4 x 32, theta 2000,
1 double + 1 single block); its BFL single-file copy is tests/data/models/flux2-klein-tiny-bfl.safetensors.
This script re-derives that BFL copy with make_tiny_models.diffusers_to_bfl_flux2 and checks it
matches the checked-in file, so the C++ test can load both layouts against the same outputs.
A model with more heads would not fit the size budget of the checked-in data (the shared
modulation linears alone are 15 D^2 parameters, 2 MB of bf16 at D = 256).

The weights are stored in bf16; the reference runs them upcast to fp32 (bf16-rounded values), so
the fp32 C++ path can match to rel-L2 1e-5. Inputs are rounded to bf16 values too, so the bf16
C++ path sees exactly the same inputs. A second output, `out_bf16`, is diffusers run in bf16.

Cases (batch 2 each, two different timesteps per batch, chosen so that t and 1000 t are exact
in bf16 and both dtype chains of flux-reference.md 2.4 feed the same value):
  t2i   Li = 16 image tokens (4 x 4 grid, ids (0, h, w, 0)), Lt = 8 text tokens (ids (0, 0, 0, l))
  ref   the same plus 16 reference-image tokens appended to the image rows with ids (10, h, w, 0),
        as Flux2KleinPipeline appends reference latents (their time coordinate is 10 * (i + 1))
Tensors in each file: x [B, Li, 128], x_ids [Li, 4], ctx [B, Lt, C], ctx_ids [Lt, 4] (ids as f32
holding small integers), t [B] (the pipeline's timestep / 1000), out [B, Li, 128] f32, out_bf16.
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import diffusers_to_bfl_flux2  # noqa: E402

MODEL = REPO / "tests" / "data" / "models" / "flux2-klein-tiny" / "transformer"
BFL = REPO / "tests" / "data" / "models" / "flux2-klein-tiny-bfl.safetensors"
OUT = REPO / "tests" / "data" / "flux2_transformer"


def grid_ids(h, w, t):
    hh, ww = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ids = torch.zeros(h * w, 4, dtype=torch.int64)
    ids[:, 0] = t
    ids[:, 1] = hh.reshape(-1)
    ids[:, 2] = ww.reshape(-1)
    return ids


def text_ids(n):
    ids = torch.zeros(n, 4, dtype=torch.int64)
    ids[:, 3] = torch.arange(n)
    return ids


def run(model, dtype, x, x_ids, ctx, ctx_ids, t):
    with torch.no_grad():
        out = model.to(dtype)(
            hidden_states=x.to(dtype),
            encoder_hidden_states=ctx.to(dtype),
            timestep=t.to(dtype),
            img_ids=x_ids,
            txt_ids=ctx_ids,
            return_dict=False,
        )[0]
    return out.float()


def main():
    from diffusers import Flux2Transformer2DModel

    model = Flux2Transformer2DModel.from_pretrained(MODEL, torch_dtype=torch.bfloat16)
    cfg = model.config
    # The checked-in BFL file must be this model's conversion (both layouts share the goldens).
    bfl = diffusers_to_bfl_flux2({k: v.clone() for k, v in model.state_dict().items()})
    stored = load_file(BFL)
    assert sorted(bfl) == sorted(stored), "BFL key set differs"
    for k in bfl:
        assert torch.equal(bfl[k], stored[k]), f"BFL tensor differs: {k}"

    gen = torch.Generator().manual_seed(20261130)
    B, Lt, C = 2, 8, cfg.joint_attention_dim
    cases = {
        "t2i": dict(ref=False, t=[1.0, 0.25]),
        "ref": dict(ref=True, t=[0.5, 0.125]),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    for name, spec in cases.items():
        x_ids = grid_ids(4, 4, 0)
        if spec["ref"]:
            x_ids = torch.cat([x_ids, grid_ids(4, 4, 10)], 0)
        Li = x_ids.shape[0]
        x = torch.randn(B, Li, cfg.in_channels, generator=gen).bfloat16().float()
        ctx = torch.randn(B, Lt, C, generator=gen).bfloat16().float()
        ctx_ids = text_ids(Lt)
        t = torch.tensor(spec["t"], dtype=torch.float32)
        out = run(model, torch.float32, x, x_ids, ctx, ctx_ids, t)
        out_bf16 = run(model, torch.bfloat16, x, x_ids, ctx, ctx_ids, t)
        rel = ((out_bf16 - out).norm() / out.norm()).item()
        print(f"{name}: out {tuple(out.shape)} |out| {out.norm():.4f} bf16-vs-f32 rel-L2 {rel:.3e}")
        save_file(
            {
                "x": x.contiguous(),
                "x_ids": x_ids.float().contiguous(),
                "ctx": ctx.contiguous(),
                "ctx_ids": ctx_ids.float().contiguous(),
                "t": t,
                "out": out.contiguous(),
                "out_bf16": out_bf16.contiguous(),
            },
            OUT / f"{name}.safetensors",
            metadata={"model": "tests/data/models/flux2-klein-tiny/transformer", "diffusers": "0.42.1"},
        )


if __name__ == "__main__":
    main()
