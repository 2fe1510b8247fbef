#!/usr/bin/env python3
"""Ground truth for LoRA loading (issue 25, docs/lora.md): random PEFT LoRAs on the tiny FLUX.1-dev
and FLUX.2-klein transformers, the same weights rewritten the way each other tool writes them, and
the images diffusers' own load_lora_weights / set_adapters make, for
tests/pipelines/test_lora_golden.cpp.

Writes tests/data/lora/:
  <family>/<format>.safetensors  one LoRA in every key scheme (same weights up to how the scheme
      stores them; see FORMATS below). "peft" is diffusers' save_lora_weights output of a PEFT
      adapter (with the lora_adapter_metadata header entry, lora_alpha 8, r 4: factor 2); the
      others are made here from it:
      - fused BFL projections (qkv, FLUX.1 linear1) stack the split modules' A and put their B on
        the block diagonal (one rank-3r / 4r module computing exactly the same delta);
      - formats without alpha carry the factor in B; kohya-style ones store alpha = 2 * rank;
      - the BFL final layer `final_layer.adaLN_modulation.1` holds diffusers `norm_out.linear`'s
        B halves swapped (BFL rows are (shift, scale), diffusers' (scale, shift)).
  <family>/second.safetensors   a second PEFT LoRA (attention projections only, other seed)
  <family>/xlabs*.safetensors   FLUX.1 only: an attention-only LoRA in XLabs' scheme (no alpha), and
      its PEFT twin
  <case>_<dtype>/image_0.png    diffusers' images (64x64, 2 steps, f32 and bf16)
  manifest.json                 the cases, and for every format whether diffusers itself loads it,
      how far its image is from the PEFT reference (max |diff| in 8-bit steps), and the file's
      SHA-256 (hashlib)

Cases: the LoRA at strength 1 ("peft"), at 0.5 and -0.7 (set_adapters weights), two LoRAs at once
(set_adapters(["a", "b"], [1.0, 0.7])), no LoRA (the base image), and the XLabs file as diffusers
loads it. The LoRA weights are bf16 values (stored as bf16), scaled so each module's delta is 20% of
its weight's norm: large enough that every module shows in the image.

  /work/refenv/bin/python tools/reference/dump_lora.py
"""
import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
OUT = DATA / "lora"
MODELS = {"flux1": DATA / "models" / "flux1-dev-tiny", "klein": DATA / "models" / "flux2-klein-tiny"}
RANK, ALPHA = 4, 8.0
FACTOR = ALPHA / RANK
PROMPT = "a red circle on a blue background"
RUN = dict(width=64, height=64, num_inference_steps=2, max_sequence_length=32)
SEED = 3
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def pipeline_class(family):
    from diffusers import Flux2KleinPipeline, FluxPipeline

    return FluxPipeline if family == "flux1" else Flux2KleinPipeline


def load_pipeline(family, dtype):
    return pipeline_class(family).from_pretrained(str(MODELS[family]), torch_dtype=dtype)


def linear_modules(transformer, only_attention=False):
    names = []
    for name, module in transformer.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        if only_attention and ".attn." not in name and not name.endswith(".proj_out"):
            continue
        names.append(name)
    return names


def make_peft_lora(family, path, seed, only_attention=False, xlabs_modules=False):
    """A PEFT adapter on every linear (or a subset), random non-zero A and B, saved by diffusers."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    pipe = load_pipeline(family, torch.float32)
    tr = pipe.transformer
    targets = linear_modules(tr, only_attention)
    if xlabs_modules:  # what XLabs adapts: attention q/k/v and out projections, single-block q/k/v and linear2
        targets = [t for t in targets if t.split(".")[-1] in ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj",
                                                                 "add_v_proj", "0", "to_add_out")
                   or (t.startswith("single_transformer_blocks") and t.endswith("proj_out"))]
    config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=targets, init_lora_weights=True)
    tr.add_adapter(config, adapter_name="default")
    g = torch.Generator().manual_seed(seed)
    modules = dict(tr.named_modules())
    with torch.no_grad():
        for name in targets:
            m = modules[name]
            w = m.base_layer.weight
            a = torch.randn(RANK, w.shape[1], generator=g) / w.shape[1] ** 0.5
            b = torch.randn(w.shape[0], RANK, generator=g)
            delta = FACTOR * b @ a
            b *= 0.2 * w.norm() / delta.norm()
            m.lora_A["default"].weight.copy_(a.bfloat16().float())
            m.lora_B["default"].weight.copy_(b.bfloat16().float())
    state = {k: v.bfloat16() for k, v in get_peft_model_state_dict(tr).items()}
    metadata = config.to_dict()
    metadata = {k: (sorted(v) if isinstance(v, set) else v) for k, v in metadata.items()}
    folder = path.parent / (path.stem + "_save")
    pipeline_class(family).save_lora_weights(str(folder), transformer_lora_layers=state,
                                             transformer_lora_adapter_metadata=metadata)
    shutil.move(str(folder / "pytorch_lora_weights.safetensors"), str(path))
    shutil.rmtree(folder)


# ---------------------------------------------------------------------------------------------
# The same weights in the other tools' key schemes. `mods`: diffusers module -> (A [r, in], B [out, r]).


def peft_modules(path):
    sd = load_file(str(path))
    mods = {}
    for k, v in sd.items():
        stem = k.removeprefix("transformer.")
        if stem.endswith(".lora_A.weight"):
            mods.setdefault(stem[: -len(".lora_A.weight")], {})["A"] = v.float()
        elif stem.endswith(".lora_B.weight"):
            mods.setdefault(stem[: -len(".lora_B.weight")], {})["B"] = v.float()
    return {m: (d["A"], d["B"]) for m, d in mods.items()}


def fuse(parts):
    """Split modules (A_i [r, in], B_i [out_i, r]) -> one module computing the same sum of deltas."""
    a = torch.cat([p[0] for p in parts], 0)
    b = torch.block_diag(*[p[1] for p in parts])
    return a, b


def swap_halves(b):
    h = b.shape[0] // 2
    return torch.cat([b[h:], b[:h]], 0)


def to_bfl(family, mods):
    """diffusers module names -> BFL names (fused qkv / linear1, swapped final layer)."""
    out = {}
    rest = dict(mods)

    def take(name):
        return rest.pop(name)

    blocks = sorted({int(m.split(".")[1]) for m in mods if m.startswith("transformer_blocks.")})
    singles = sorted({int(m.split(".")[1]) for m in mods if m.startswith("single_transformer_blocks.")})
    for i in blocks:
        p, q = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        out[q + "img_attn.qkv"] = fuse([take(p + f"attn.to_{x}") for x in "qkv"])
        out[q + "txt_attn.qkv"] = fuse([take(p + f"attn.add_{x}_proj") for x in "qkv"])
        out[q + "img_attn.proj"] = take(p + "attn.to_out.0")
        out[q + "txt_attn.proj"] = take(p + "attn.to_add_out")
        if family == "flux1":
            out[q + "img_mlp.0"] = take(p + "ff.net.0.proj")
            out[q + "img_mlp.2"] = take(p + "ff.net.2")
            out[q + "txt_mlp.0"] = take(p + "ff_context.net.0.proj")
            out[q + "txt_mlp.2"] = take(p + "ff_context.net.2")
            out[q + "img_mod.lin"] = take(p + "norm1.linear")
            out[q + "txt_mod.lin"] = take(p + "norm1_context.linear")
        else:
            out[q + "img_mlp.0"] = take(p + "ff.linear_in")
            out[q + "img_mlp.2"] = take(p + "ff.linear_out")
            out[q + "txt_mlp.0"] = take(p + "ff_context.linear_in")
            out[q + "txt_mlp.2"] = take(p + "ff_context.linear_out")
    for i in singles:
        p, q = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        if family == "flux1":
            out[q + "linear1"] = fuse([take(p + f"attn.to_{x}") for x in "qkv"] + [take(p + "proj_mlp")])
            out[q + "linear2"] = take(p + "proj_out")
            out[q + "modulation.lin"] = take(p + "norm.linear")
        else:
            out[q + "linear1"] = take(p + "attn.to_qkv_mlp_proj")
            out[q + "linear2"] = take(p + "attn.to_out")
    renames = {
        "x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
        "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
        "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
        "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
        "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
        "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
        "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
        "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
        "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
        "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
        "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
        "single_stream_modulation.linear": "single_stream_modulation.lin",
    }
    for d, b in renames.items():
        if d in rest:
            out[b] = take(d)
    if "norm_out.linear" in rest:
        a, b = take("norm_out.linear")
        out["final_layer.adaLN_modulation.1"] = (a, swap_halves(b))
    assert not rest, f"unmapped modules: {sorted(rest)}"
    return out


def write(path, mods, prefix, down, up, alpha=None, flat=None, bake=True):
    """One file: keys prefix + name (underscored by `flat`) + down/up suffixes, bf16 values."""
    sd = {}
    for name, (a, b) in mods.items():
        key = prefix + (flat(name) if flat else name)
        rank = a.shape[0]
        if alpha is None:  # no alpha: the factor goes into B
            b = b * FACTOR if bake else b
        else:
            sd[key + ".alpha"] = torch.tensor(FACTOR * rank, dtype=torch.float32)
        sd[key + down] = a.bfloat16().contiguous()
        sd[key + up] = b.bfloat16().contiguous()
    save_file(sd, str(path))


def kohya_flat(name):
    return name.replace(".", "_")


def musubi_flat(name):
    # musubi-tuner: BFL names with the layer part underscored ("double_blocks.0.img_attn_qkv").
    parts = name.split(".")
    if parts[0] in ("double_blocks", "single_blocks") and len(parts) > 2:
        return ".".join(parts[:2]) + "." + "_".join(parts[2:])
    return "_".join(parts)


def xlabs(mods):
    out = {}
    for name, ab in mods.items():
        p = name.split(".")
        if name.startswith("double_blocks."):
            layer = {"img_attn.qkv": "qkv_lora1", "img_attn.proj": "proj_lora1", "txt_attn.qkv": "qkv_lora2",
                     "txt_attn.proj": "proj_lora2"}[".".join(p[2:])]
            out[f"double_blocks.{p[1]}.processor.{layer}"] = ab
        elif name.startswith("single_blocks."):
            out[f"single_blocks.{p[1]}.processor.{'proj_lora' if p[2] == 'linear2' else 'qkv_lora'}"] = ab
        else:
            raise AssertionError(name)
    return out


def write_formats(family, folder):
    mods = peft_modules(folder / "peft.safetensors")
    bfl = to_bfl(family, mods)
    formats = {"peft": "diffusers save_lora_weights (PEFT names, lora_adapter_metadata)"}
    write(folder / "bfl.safetensors", bfl, "diffusion_model.", ".lora_A.weight", ".lora_B.weight")
    formats["bfl"] = "BFL / ai-toolkit: diffusion_model. + BFL names, lora_A/lora_B, no alpha"
    write(folder / "comfy_down_up.safetensors", bfl, "diffusion_model.", ".lora_down.weight", ".lora_up.weight",
          alpha=True)
    formats["comfy_down_up"] = "BFL / ComfyUI: diffusion_model. + BFL names, lora_down/lora_up + alpha"
    write(folder / "kohya.safetensors", bfl, "lora_unet_", ".lora_down.weight", ".lora_up.weight", alpha=True,
          flat=kohya_flat)
    formats["kohya"] = "kohya sd-scripts / musubi: lora_unet_ + underscored BFL names + alpha"
    write(folder / "fal.safetensors", bfl, "base_model.model.", ".lora_A.weight", ".lora_B.weight")
    formats["fal"] = "fal: base_model.model. + BFL names"
    if family == "klein":
        write(folder / "musubi.safetensors", bfl, "diffusion_model.", ".lora_A.weight", ".lora_B.weight",
              alpha=True, flat=musubi_flat)
        formats["musubi"] = "musubi-tuner variant: diffusion_model.double_blocks.0.img_attn_qkv.lora_A + alpha"
    else:
        write(folder / "kohya_diffusers.safetensors", mods, "lora_unet_", ".lora_down.weight", ".lora_up.weight",
              alpha=True, flat=kohya_flat)
        formats["kohya_diffusers"] = "older sd-scripts: lora_unet_ + underscored diffusers names + alpha"
        write(folder / "onetrainer.safetensors", mods, "lora_transformer_", ".lora_down.weight", ".lora_up.weight",
              alpha=True, flat=kohya_flat)
        formats["onetrainer"] = "OneTrainer: lora_transformer_ + underscored diffusers names + alpha"
        write(folder / "peft_wrapped.safetensors", mods, "transformer.base_model.model.", ".lora_A.weight",
              ".lora_B.weight")
        formats["peft_wrapped"] = "old SimpleTuner: transformer.base_model.model. + diffusers names"
        x = peft_modules(folder / "xlabs_peft.safetensors")
        write(folder / "xlabs.safetensors", xlabs(to_bfl_attention_only(x)), "", ".down.weight", ".up.weight")
        formats["xlabs"] = "XLabs: double_blocks.N.processor.qkv_lora1.down.weight, no alpha"
    return formats


def to_bfl_attention_only(mods):
    out = {}
    for i in sorted({int(m.split(".")[1]) for m in mods if m.startswith("transformer_blocks.")}):
        p, q = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        out[q + "img_attn.qkv"] = fuse([mods[p + f"attn.to_{x}"] for x in "qkv"])
        out[q + "txt_attn.qkv"] = fuse([mods[p + f"attn.add_{x}_proj"] for x in "qkv"])
        out[q + "img_attn.proj"] = mods[p + "attn.to_out.0"]
        out[q + "txt_attn.proj"] = mods[p + "attn.to_add_out"]
    for i in sorted({int(m.split(".")[1]) for m in mods if m.startswith("single_transformer_blocks.")}):
        p, q = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        out[q + "qkv"] = fuse([mods[p + f"attn.to_{x}"] for x in "qkv"])
        out[q + "linear2"] = mods[p + "proj_out"]
    return out


# ---------------------------------------------------------------------------------------------
# Reference images.


def render(pipe, generator_seed=SEED):
    return pipe(prompt=PROMPT, generator=torch.Generator("cpu").manual_seed(generator_seed), output_type="pil",
                **RUN).images[0]


def cases(family):
    c = [
        dict(name="base", loras=[]),
        dict(name="peft", loras=[["peft", 1.0]]),
        dict(name="half", loras=[["peft", 0.5]]),
        dict(name="negative", loras=[["peft", -0.7]]),
        dict(name="two", loras=[["peft", 1.0], ["second", 0.7]]),
    ]
    if family == "flux1":
        c.append(dict(name="xlabs", loras=[["xlabs", 1.0]]))
    return c


def run_case(family, case, dtype_name):
    pipe = load_pipeline(family, DTYPES[dtype_name])
    names = []
    for i, (fmt, _) in enumerate(case["loras"]):
        pipe.load_lora_weights(str(OUT / family / f"{fmt}.safetensors"), adapter_name=f"l{i}")
        names.append(f"l{i}")
    if names:
        pipe.set_adapters(names, [w for _, w in case["loras"]])
    return render(pipe)


def diffusers_load(family, fmt):
    """Whether diffusers loads a format file, and its image (f32) when it does."""
    pipe = load_pipeline(family, torch.float32)
    try:
        pipe.load_lora_weights(str(OUT / family / f"{fmt}.safetensors"), adapter_name="x")
    except Exception as e:  # noqa: BLE001 - recorded in the manifest
        first = (str(e).splitlines() or [""])[0][:160]
        return f"{type(e).__name__}: {first}".rstrip(": "), None
    return "loads", render(pipe)


def max_diff(a, b):
    return int(np.abs(np.asarray(a, dtype=np.int16) - np.asarray(b, dtype=np.int16)).max())


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    manifest = dict(generator="tools/reference/dump_lora.py", diffusers="0.42.1", prompt=PROMPT, seed=SEED,
                    rank=RANK, alpha=ALPHA, families={})
    for family in MODELS:
        folder = OUT / family
        folder.mkdir(parents=True)
        make_peft_lora(family, folder / "peft.safetensors", seed=1)
        make_peft_lora(family, folder / "second.safetensors", seed=2, only_attention=True)
        if family == "flux1":
            make_peft_lora(family, folder / "xlabs_peft.safetensors", seed=4, xlabs_modules=True)
        formats = write_formats(family, folder)
        entry = dict(model=MODELS[family].name, cases=[], formats={})
        for case in cases(family):
            for dtype_name in DTYPES:
                out = OUT / f"{family}_{case['name']}_{dtype_name}"
                out.mkdir()
                run_case(family, case, dtype_name).save(out / "image_0.png")
            entry["cases"].append(case)
            print(family, case["name"], "done")
        reference = PIL.Image.open(OUT / f"{family}_peft_f32" / "image_0.png")
        for fmt, what in formats.items():
            status, image = diffusers_load(family, fmt)
            rec = dict(description=what, diffusers=status)
            if image is not None and fmt != "xlabs":
                rec["diffusers_max_diff_vs_peft_f32"] = max_diff(image, reference)
                if fmt == "bfl" and family == "klein":
                    image.save(OUT / "klein_bfl_as_diffusers_loads_it_f32.png")
            rec["sha256"] = hashlib.sha256((folder / f"{fmt}.safetensors").read_bytes()).hexdigest()
            entry["formats"][fmt] = rec
            print(family, fmt, status, rec.get("diffusers_max_diff_vs_peft_f32"))
        manifest["families"][family] = entry
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
