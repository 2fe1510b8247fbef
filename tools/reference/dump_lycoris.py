#!/usr/bin/env python3
"""Ground truth for LyCORIS LoKr / LoHa and DoRA files (issue 46, docs/lora.md): random modules of
every kind on the tiny FLUX.1-dev and FLUX.2-klein transformers, and the images of the pipeline
with them merged by the trainers' own formulas, for tests/pipelines/test_lora_lycoris.cpp.

diffusers 0.42.1 does not load LoKr for FLUX.2 and on a file mixing module kinds applies nothing
to some of them, so its loader is no reference here. This script does the merge itself, in f32 on
the diffusers pipeline's own weights, from the bf16 values the files hold:
  LoRA  dW = alpha / r * B @ A
  LoKr  dW = kron(w1, w2), each half whole or w_a @ w_b; times alpha / dim when a half is
        decomposed (dim: that half's rank), else 1 (LyCORIS, ComfyUI)
  LoHa  dW = alpha / r * (w1_a @ w1_b) * (w2_a @ w2_b)
  DoRA  W' = W + s * (m * (W + dW) / ||W + dW|| - W), the norm over each input column for a
        [1, in] magnitude and each output row for an [out, 1] one (LyCORIS' two axes), plus f32
        epsilon as LyCORIS adds; other kinds W' = W + s * dW.
The PEFT DoRA cases are rendered by PEFT's own DoRA forward (the trainer's code), not by this math.

Writes tests/data/lora_lycoris/:
  <family>/kohya_mixed.safetensors   lora_unet_ + underscored BFL names: a module of each kind in
      turn (LoRA, LoKr with w1 whole and w2 decomposed, LoKr with both decomposed, LoKr with both
      whole, LoHa, LoRA + DoRA on the input axis, LoRA + DoRA on the output axis, LoKr + DoRA),
      on fused BFL layers as their trainers see them (qkv, FLUX.1 linear1, the final layer)
  <family>/comfy_mixed.safetensors   the same tensors as diffusion_model. + dotted BFL names
  <family>/merged.safetensors        the merged weights at strength 1 under the BFL module names
      (+ ".weight", f32, fused rows as in the file), to compare merges exactly
  <family>/peft_dora.safetensors     diffusers' save_lora_weights of a PEFT use_dora adapter
      (lora_A / lora_B / lora_magnitude_vector) on every linear
  <family>_<case>_<dtype>/image_0.png  the images (64x64, 2 steps, dump_lora.py's prompt and seed)
  manifest.json                      the cases and the kinds of each file's modules

  /work/refenv/bin/python tools/reference/dump_lycoris.py
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dump_lora  # noqa: E402  (the tiny models, the run, the BFL renames)

OUT = dump_lora.DATA / "lora_lycoris"
KINDS = ["lora", "lokr_w1_whole", "lokr_both_decomposed", "lokr_both_whole", "loha", "dora_in", "dora_out",
         "lokr_dora"]
RANK = 4
STRENGTHS = {"s1": 1.0, "s07": 0.7}


def bfl_layout(family, transformer):
    """BFL module name -> (diffusers modules whose rows it stacks, in order; swapped halves?)."""
    names = dump_lora.linear_modules(transformer)
    index = {n: i for i, n in enumerate(names)}
    # dump_lora.to_bfl fuses (A, B) pairs: with A = B = [[i]] its fused A lists the indices in row order.
    mods = {n: (torch.tensor([[float(i)]]), torch.tensor([[float(i)]])) for n, i in index.items()}
    layout = {}
    for bfl, (a, _) in dump_lora.to_bfl(family, mods).items():
        parts = [names[int(i)] for i in a[:, 0].tolist()]
        layout[bfl] = (parts, bfl == "final_layer.adaLN_modulation.1")
    return layout


def fused_weight(weights, parts, swapped):
    w = torch.cat([weights[p] for p in parts], 0)
    if swapped:
        w = dump_lora.swap_halves(w)
    return w


def split_back(w, weights, parts, swapped):
    if swapped:
        w = dump_lora.swap_halves(w)
    out, at = {}, 0
    for p in parts:
        r = weights[p].shape[0]
        out[p] = w[at:at + r]
        at += r
    return out


def factor2(n):
    for f in (4, 2):
        if n % f == 0 and n > f:
            return f
    return 1


def bf16(t):
    return t.bfloat16().float()


def make_module(kind, w, g):
    """Random tensors of `kind` for a [out, in] weight `w` (bf16 values, f32 here), its delta 20% of
    the weight's norm; returns (tensors by suffix, delta with its factor, DoRA magnitude or None)."""
    out, inp = w.shape
    t = {}

    def rnd(*shape):
        return torch.randn(*shape, generator=g)

    if kind in ("lora", "dora_in", "dora_out"):
        a, b = rnd(RANK, inp) / inp ** 0.5, rnd(out, RANK)
        alpha = 2.0 * RANK
        scale = 0.2 * w.norm() / (alpha / RANK * b @ a).norm()
        t["lora_down.weight"], t["lora_up.weight"] = bf16(a), bf16(b * scale)
        t["alpha"] = torch.tensor(alpha)
        delta = alpha / RANK * t["lora_up.weight"] @ t["lora_down.weight"]
    elif kind.startswith("lokr"):
        p, q = factor2(out), factor2(inp)
        c, d = out // p, inp // q
        whole1 = kind in ("lokr_w1_whole", "lokr_both_whole", "lokr_dora")
        whole2 = kind == "lokr_both_whole"
        alpha = 0.5 * RANK
        w1 = rnd(p, q) if whole1 else None
        if not whole1:
            t["lokr_w1_a"], t["lokr_w1_b"] = bf16(rnd(p, RANK)), bf16(rnd(RANK, q))
            w1 = t["lokr_w1_a"] @ t["lokr_w1_b"]
        else:
            t["lokr_w1"] = bf16(w1)
            w1 = t["lokr_w1"]
        if whole2:
            w2 = rnd(c, d)
        else:
            a2, b2 = rnd(c, RANK), rnd(RANK, d) / d ** 0.5
            w2 = a2 @ b2
        dim = RANK if not (whole1 and whole2) else None
        f = alpha / dim if dim else 1.0
        scale = 0.2 * w.norm() / (f * torch.kron(w1, w2)).norm()
        if whole2:
            t["lokr_w2"] = bf16(w2 * scale)
            w2 = t["lokr_w2"]
        else:
            t["lokr_w2_a"], t["lokr_w2_b"] = bf16(a2 * scale), bf16(b2)
            w2 = t["lokr_w2_a"] @ t["lokr_w2_b"]
        t["alpha"] = torch.tensor(alpha)
        delta = f * torch.kron(w1, w2)
    elif kind == "loha":
        alpha = 2.0 * RANK
        w1a, w1b, w2a, w2b = rnd(out, RANK), rnd(RANK, inp), rnd(out, RANK), rnd(RANK, inp)
        scale = (0.2 * w.norm() / (alpha / RANK * (w1a @ w1b) * (w2a @ w2b)).norm()) ** 0.5
        t["hada_w1_a"], t["hada_w1_b"] = bf16(w1a * scale), bf16(w1b)
        t["hada_w2_a"], t["hada_w2_b"] = bf16(w2a * scale), bf16(w2b)
        t["alpha"] = torch.tensor(alpha)
        delta = alpha / RANK * (t["hada_w1_a"] @ t["hada_w1_b"]) * (t["hada_w2_a"] @ t["hada_w2_b"])
    else:
        raise AssertionError(kind)
    magnitude = None
    if kind in ("dora_in", "lokr_dora"):  # LyCORIS' default axis: one magnitude per input column
        magnitude = bf16((w + delta).norm(dim=0, keepdim=True) * (1 + 0.2 * rnd(1, inp)))
    elif kind == "dora_out":
        magnitude = bf16((w + delta).norm(dim=1, keepdim=True) * (1 + 0.2 * rnd(out, 1)))
    if magnitude is not None:
        t["dora_scale"] = magnitude
    return t, delta, magnitude


def merged(w, delta, magnitude, strength):
    if magnitude is None:
        return w + strength * delta
    v = w + delta
    eps = torch.finfo(torch.float32).eps
    norm = v.norm(dim=0, keepdim=True) if magnitude.shape[0] == 1 else v.norm(dim=1, keepdim=True)
    return w + strength * (magnitude * v / (norm + eps) - w)


def kohya_key(name):
    return "lora_unet_" + name.replace(".", "_")


def make_mixed(family, folder):
    pipe = dump_lora.load_pipeline(family, torch.float32)
    tr = pipe.transformer
    modules = dict(tr.named_modules())
    weights = {n: modules[n].weight.detach().float() for n in dump_lora.linear_modules(tr)}
    layout = bfl_layout(family, tr)
    g = torch.Generator().manual_seed(46)
    kohya, comfy, merged_ref, kinds, plan = {}, {}, {}, {}, {}
    for i, (bfl, (parts, swapped)) in enumerate(sorted(layout.items())):
        w = fused_weight(weights, parts, swapped)
        kind = KINDS[i % len(KINDS)]
        tensors, delta, magnitude = make_module(kind, w, g)
        for suffix, v in tensors.items():
            v = v.contiguous() if v.dim() == 0 else v.bfloat16().contiguous()
            if suffix == "alpha":
                v = v.float()
            kohya[kohya_key(bfl) + "." + suffix] = v
            comfy["diffusion_model." + bfl + "." + suffix] = v
        merged_ref[bfl + ".weight"] = merged(w, delta, magnitude, 1.0).contiguous()
        kinds[bfl] = kind
        plan[bfl] = (parts, swapped, delta, magnitude)
    save_file(kohya, str(folder / "kohya_mixed.safetensors"))
    save_file(comfy, str(folder / "comfy_mixed.safetensors"))
    save_file(merged_ref, str(folder / "merged.safetensors"))
    return plan, kinds


def render_merged(family, plan, strength, dtype):
    pipe = dump_lora.load_pipeline(family, torch.float32)
    modules = dict(pipe.transformer.named_modules())
    weights = {n: modules[n].weight.detach().float() for n in dump_lora.linear_modules(pipe.transformer)}
    with torch.no_grad():
        for parts, swapped, delta, magnitude in plan.values():
            w = fused_weight(weights, parts, swapped)
            for name, rows in split_back(merged(w, delta, magnitude, strength), weights, parts, swapped).items():
                modules[name].weight.copy_(rows)
    pipe.to(dtype)
    return dump_lora.render(pipe)


def make_peft_dora(family, folder):
    """A PEFT DoRA adapter on every linear of the transformer (random A, B, magnitude), saved by
    diffusers; returns the pipeline with it active, whose image is PEFT's own DoRA forward."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    pipe = dump_lora.load_pipeline(family, torch.float32)
    tr = pipe.transformer
    targets = dump_lora.linear_modules(tr)
    config = LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=targets, use_dora=True)
    tr.add_adapter(config, adapter_name="default")
    g = torch.Generator().manual_seed(47)
    modules = dict(tr.named_modules())
    with torch.no_grad():
        for name in targets:
            m = modules[name]
            w = m.base_layer.weight
            a = torch.randn(RANK, w.shape[1], generator=g) / w.shape[1] ** 0.5
            b = torch.randn(w.shape[0], RANK, generator=g)
            b *= 0.2 * w.norm() / (2.0 * b @ a).norm()
            m.lora_A["default"].weight.copy_(bf16(a))
            m.lora_B["default"].weight.copy_(bf16(b))
            mag = m.lora_magnitude_vector["default"].weight
            mag.copy_(bf16(mag * (1 + 0.2 * torch.randn(mag.shape, generator=g))))
    state = {k: v.bfloat16() for k, v in get_peft_model_state_dict(tr).items()}
    metadata = {k: (sorted(v) if isinstance(v, set) else v) for k, v in config.to_dict().items()}
    save = folder / "peft_dora_save"
    pipe.save_lora_weights(str(save), transformer_lora_layers=state, transformer_lora_adapter_metadata=metadata)
    shutil.move(str(save / "pytorch_lora_weights.safetensors"), str(folder / "peft_dora.safetensors"))
    shutil.rmtree(save)
    return sorted(load_file(str(folder / "peft_dora.safetensors")))[:3]


def render_peft_dora(family, folder, dtype):
    from peft import LoraConfig, set_peft_model_state_dict

    pipe = dump_lora.load_pipeline(family, torch.float32)
    tr = pipe.transformer
    sd = load_file(str(folder / "peft_dora.safetensors"))
    targets = dump_lora.linear_modules(tr)
    tr.add_adapter(LoraConfig(r=RANK, lora_alpha=2 * RANK, target_modules=targets, use_dora=True), "default")
    state = {k.removeprefix("transformer."): v.float() for k, v in sd.items()}
    result = set_peft_model_state_dict(tr, state, adapter_name="default")
    assert not [k for k in result.unexpected_keys], result.unexpected_keys
    pipe.to(dtype)
    return dump_lora.render(pipe)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    manifest = dict(generator="tools/reference/dump_lycoris.py", rank=RANK, families={})
    for family in dump_lora.MODELS:
        folder = OUT / family
        folder.mkdir(parents=True)
        plan, kinds = make_mixed(family, folder)
        entry = dict(kinds=kinds, cases=[])
        for case, strength in STRENGTHS.items():
            for dname, dtype in dump_lora.DTYPES.items():
                out = OUT / f"{family}_mixed_{case}_{dname}"
                out.mkdir()
                render_merged(family, plan, strength, dtype).save(out / "image_0.png")
            entry["cases"].append(dict(name=f"mixed_{case}", file="kohya_mixed", strength=strength))
            print(family, "mixed", case, "done")
        entry["peft_dora_keys"] = make_peft_dora(family, folder)
        for dname, dtype in dump_lora.DTYPES.items():
            out = OUT / f"{family}_peft_dora_{dname}"
            out.mkdir()
            render_peft_dora(family, folder, dtype).save(out / "image_0.png")
        entry["cases"].append(dict(name="peft_dora", file="peft_dora", strength=1.0))
        manifest["families"][family] = entry
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
