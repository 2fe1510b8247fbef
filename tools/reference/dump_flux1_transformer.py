#!/usr/bin/env python3
"""Tiny FLUX.1 transformers and the outputs of diffusers' FluxTransformer2DModel on them, for
tests/models/test_flux1_transformer.cpp.

Run with the reference venv (tools/reference/requirements.txt pins the versions):
  /work/refenv/bin/python tools/reference/dump_flux1_transformer.py
Deterministic (fixed seeds): a rerun rewrites byte-identical files.

Models (head dim 128, RoPE axes (16, 56, 56), theta 10000, 1 head -> hidden 128; the text and
pooled widths are shrunk from 4096 / 768 to 64 / 32 to keep the files small, which config.json and
the detection from weights both carry):
  dev       1 double + 1 single block, guidance_embeds true.
            dev/                           diffusers folder from save_pretrained, sharded by
                                           diffusers itself (index.json + 3 shards)
            flux1-dev-bfl.safetensors      the same weights in the BFL single-file layout
                                           (make_tiny_models.diffusers_to_bfl_flux1, written from
                                           flux-reference.md 3.2/3.3; checked here against the
                                           independent forward map bfl_to_diffusers_flux1)
            flux1-dev-fp8.safetensors      the BFL file with EVERY tensor cast to float8_e4m3fn and
                                           the ComfyUI prefix `model.diffusion_model.`, no scales
  schnell   the dev weights without guidance_in, run by FluxTransformer2DModel(guidance_embeds
            false): the C++ test drops guidance_in.* from the dev checkpoints and must detect
            schnell (no file of its own).
  schnell2  2 double + 2 single blocks, guidance_embeds false, its own random weights.
            flux1-schnell2-fp8-scaled.safetensors   BFL names; 2-D weights float8_e4m3fn with a
                                           per-tensor f32 `<layer>.scale_weight` (ComfyUI's scaled
                                           fp8: amax / 448), a `scaled_fp8` marker tensor, biases
                                           and norm scales bf16.
fp8 references run on the dequantised weights bf16(f32(w8) * scale) (the loader's rule).

Cases (batch 2, two timesteps, guidance 3.5 / 4.0 where the model has guidance):
  dev.safetensors       4 x 4 image grid (16 tokens, ids (0, h, w)), 8 text tokens (ids 0)
  schnell.safetensors   3 x 5 grid (15 tokens), 6 text tokens
  dev_fp8.safetensors   dev grid, the fp8 dev file's weights
  schnell2_fp8_scaled.safetensors   3 x 5 grid, the scaled fp8 schnell2 file's weights
Tensors: x [B, Li, 64], x_ids [Li, 3], ctx [B, Lt, 64], ctx_ids [Lt, 3], pooled [B, 32], t [B]
(sigma), g [B] (guidance, dev models only), out [B, Li, 64] (fp32 reference), out_bf16 (diffusers
in bf16), vec / vec_bf16 [B, 128] the conditioning vector (timestep + guidance + pooled embeddings)
of both runs: in bf16 the guidance 3.5 is fed as bf16(bf16(3.5) * 1000) = 3504, which vec_bf16 pins. Inputs are bf16-representable so both C++ dtypes see the reference's exact inputs.
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_models import bfl_to_diffusers_flux1, diffusers_to_bfl_flux1, perturb_constants  # noqa: E402

OUT = REPO / "tests" / "data" / "flux1_transformer"
CTX_DIM, POOLED_DIM = 64, 32
FP8_MAX = 448.0
COMFY_PREFIX = "model.diffusion_model."


def make_model(guidance: bool, double: int, single: int, seed: int):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(seed)
    model = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,
        num_layers=double,
        num_single_layers=single,
        attention_head_dim=128,
        num_attention_heads=1,
        joint_attention_dim=CTX_DIM,
        pooled_projection_dim=POOLED_DIM,
        guidance_embeds=guidance,
        axes_dims_rope=(16, 56, 56),
    )
    perturb_constants(model, seed + 1)
    return model.to(torch.bfloat16).eval()


def model_with(state: dict, guidance: bool, double: int, single: int):
    """A model of the given config holding exactly `state` (diffusers names)."""
    model = make_model(guidance, double, single, 0)
    model.load_state_dict(state, strict=True)
    return model


def grid_ids(h, w):
    ids = torch.zeros(h * w, 3)
    hh, ww = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    ids[:, 1] = hh.reshape(-1).float()
    ids[:, 2] = ww.reshape(-1).float()
    return ids


def run(model, dtype, inputs):
    """The output and the conditioning vector (time_text_embed's output, what every block's
    modulation linear reads after SiLU)."""
    captured = {}
    hook = model.time_text_embed.register_forward_hook(lambda m, args, out: captured.update(vec=out))
    with torch.no_grad():
        out = model.to(dtype)(
            hidden_states=inputs["x"].to(dtype),
            encoder_hidden_states=inputs["ctx"].to(dtype),
            pooled_projections=inputs["pooled"].to(dtype),
            timestep=inputs["t"].to(dtype),
            img_ids=inputs["x_ids"],
            txt_ids=inputs["ctx_ids"],
            guidance=inputs["g"] if "g" in inputs else None,
            return_dict=False,
        )[0]
    hook.remove()
    return out.float(), captured["vec"].float()


def make_inputs(gen, grid, lt, t, g=None):
    li = grid[0] * grid[1]
    inputs = {
        "x": torch.randn(2, li, 64, generator=gen).bfloat16().float(),
        "x_ids": grid_ids(*grid),
        "ctx": torch.randn(2, lt, CTX_DIM, generator=gen).bfloat16().float(),
        "ctx_ids": torch.zeros(lt, 3),
        "pooled": torch.randn(2, POOLED_DIM, generator=gen).bfloat16().float(),
        "t": torch.tensor(t, dtype=torch.float32),
    }
    if g is not None:
        inputs["g"] = torch.tensor(g, dtype=torch.float32)
    return inputs


def dump_case(name, model, inputs, source):
    out, vec = run(model, torch.float32, inputs)
    out_bf16, vec_bf16 = run(model, torch.bfloat16, inputs)
    rel = ((out_bf16 - out).norm() / out.norm()).item()
    print(f"{name}: out {tuple(out.shape)} |out| {out.norm():.4f} diffusers bf16-vs-f32 rel-L2 {rel:.3e}")
    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["out"] = out.contiguous()
    tensors["out_bf16"] = out_bf16.contiguous()
    tensors["vec"] = vec.contiguous()
    tensors["vec_bf16"] = vec_bf16.contiguous()
    # One metadata key: safetensors writes several in hash order, which would make reruns differ.
    save_file(tensors, OUT / f"{name}.safetensors", metadata={"model": f"{source} (diffusers 0.42.1)"})


def dequantise(w8: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """The loader's rule: one rounding of f32(w8) * f32(scale) to bf16."""
    w = w8.float()
    if scale is not None:
        w = w * scale.float()
    return w.bfloat16()


def to_fp8_scaled(bfl: dict) -> tuple[dict, dict]:
    """ComfyUI-style scaled fp8: 2-D weights quantised with a per-tensor scale amax / 448, stored
    as `<layer>.scale_weight` (f32, shape []); biases and norm scales stay bf16. Returns the file
    tensors and the dequantised BFL state the reference runs."""
    stored, deq = {}, {}
    for name, t in bfl.items():
        if t.dim() == 2 and name.endswith(".weight"):
            scale = (t.float().abs().max() / FP8_MAX).reshape(())
            w8 = (t.float() / scale).to(torch.float8_e4m3fn)
            stored[name] = w8
            stored[name[: -len("weight")] + "scale_weight"] = scale.float()
            deq[name] = dequantise(w8, scale)
        else:
            stored[name] = t
            deq[name] = t
    stored["scaled_fp8"] = torch.empty(0, dtype=torch.float8_e4m3fn)
    return stored, deq


def check_bfl_round_trip(diffusers_sd: dict, bfl: dict):
    back = bfl_to_diffusers_flux1(bfl, 128)
    assert sorted(back) == sorted(diffusers_sd), "BFL -> diffusers key set differs"
    for k, v in diffusers_sd.items():
        assert torch.equal(back[k], v), f"BFL round trip differs: {k}"


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    gen = torch.Generator().manual_seed(20260901)

    # dev: diffusers folder (sharded by diffusers) + BFL bf16 + BFL fp8.
    dev = make_model(True, 1, 1, 9101)
    dev.save_pretrained(OUT / "dev", safe_serialization=True, max_shard_size="900KB")
    dev_sd = {k: v.clone() for k, v in dev.state_dict().items()}
    dev_bfl = diffusers_to_bfl_flux1(dev_sd)
    check_bfl_round_trip(dev_sd, dev_bfl)
    save_file(dev_bfl, OUT / "flux1-dev-bfl.safetensors", metadata={"format": "pt"})
    dev_inputs = make_inputs(gen, (4, 4), 8, [1.0, 0.6], [3.5, 4.0])
    dump_case("dev", dev, dev_inputs, "flux1_transformer/dev")

    fp8 = {COMFY_PREFIX + k: v.to(torch.float8_e4m3fn) for k, v in dev_bfl.items()}
    save_file(fp8, OUT / "flux1-dev-fp8.safetensors", metadata={"format": "pt"})
    deq = {k[len(COMFY_PREFIX):]: dequantise(v, None) for k, v in fp8.items()}
    dev_fp8 = model_with(bfl_to_diffusers_flux1(deq, 128), True, 1, 1)
    dump_case("dev_fp8", dev_fp8, dev_inputs, "flux1_transformer/flux1-dev-fp8.safetensors")

    # schnell: the dev weights without guidance_in.
    schnell_sd = {k: v for k, v in dev_sd.items() if "guidance_embedder" not in k}
    schnell = model_with(schnell_sd, False, 1, 1)
    dump_case("schnell", schnell, make_inputs(gen, (3, 5), 6, [0.75, 0.3125]),
              "flux1_transformer/flux1-dev-bfl.safetensors without guidance_in")

    # schnell2: 2 + 2 blocks, scaled fp8 BFL file.
    s2 = make_model(False, 2, 2, 9201)
    s2_bfl = diffusers_to_bfl_flux1({k: v.clone() for k, v in s2.state_dict().items()})
    stored, deq = to_fp8_scaled(s2_bfl)
    save_file(stored, OUT / "flux1-schnell2-fp8-scaled.safetensors", metadata={"format": "pt"})
    s2_deq = model_with(bfl_to_diffusers_flux1(deq, 128), False, 2, 2)
    dump_case("schnell2_fp8_scaled", s2_deq, make_inputs(gen, (3, 5), 6, [1.0, 0.5]),
              "flux1_transformer/flux1-schnell2-fp8-scaled.safetensors")

    cfg = json.loads((OUT / "dev" / "config.json").read_text())
    print("dev config:", {k: cfg[k] for k in ("num_layers", "num_single_layers", "guidance_embeds")})
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(f"  {p.relative_to(REPO)}: {p.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
