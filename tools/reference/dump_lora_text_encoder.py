#!/usr/bin/env python3
"""Ground truth for FLUX.1 LoRAs that also adapt the text encoders (issue 25, docs/lora.md): random
CLIP-L and T5 modules on the tiny FLUX.1-dev, written the way kohya sd-scripts and diffusers write
them, and the images, for tests/pipelines/test_lora_text_encoder.cpp.

Writes tests/data/lora_text_encoder/:
  kohya_te.safetensors      CLIP modules only, kohya names
      (lora_te1_text_model_encoder_layers_N_{self_attn_(q|k|v|out)_proj, mlp_fc1, mlp_fc2}
      .lora_down / .lora_up / .alpha, alpha = 2 * rank: factor 2), on every CLIP layer
  diffusers_te.safetensors  diffusers' own save_lora_weights of dump_lora.py's PEFT transformer
      adapter plus a PEFT adapter with the same CLIP modules (lora_adapter_metadata per component)
  kohya_t5.safetensors      T5 modules (q, k, v, o, wi_0, wi_1, wo of every block) in kohya's
      lora_te3_ names with alpha
  <case>_<dtype>/image_0.png  64x64, 2 steps, the prompt and seed of dump_lora.py: diffusers'
      load_lora_weights / set_adapters images for the CLIP cases. diffusers drops T5 parts, so the
      kohya_t5 images are the pipeline run on T5 weights this script merges itself (what the LoRA
      was trained to do)
  manifest.json             the cases, and how far each image is from dump_lora.py's base image and
      transformer-only image (max |diff| in 8-bit steps): evidence that each encoder part matters

Each module's delta is 50% of its weight's norm: the tiny encoders reach the image only through
the modulation vectors and the text tokens, so smaller deltas barely show.

  /work/refenv/bin/python tools/reference/dump_lora_text_encoder.py
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dump_lora  # noqa: E402  (the shared prompt, seed, run settings and model paths)

OUT = dump_lora.DATA / "lora_text_encoder"
RANK, ALPHA = 4, 8.0
FACTOR = ALPHA / RANK
CLIP_LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "mlp.fc1",
                "mlp.fc2"]


def clip_tower(pipe):
    # transformers 5's CLIPTextModel has no text_model wrapper; files in the wild carry the
    # transformers 4 names (text_model.encoder...), diffusers' own saves the model's names.
    te = pipe.text_encoder
    return te.text_model if hasattr(te, "text_model") else te


def random_modules(layers, module_prefix, linears, seed, delta_ratio):
    """module_prefix.N.<linear> -> (A [r, in], B [out, r]) as bf16 values for every layer N, each
    delta delta_ratio times its weight's norm."""
    g = torch.Generator().manual_seed(seed)
    mods = {}
    for i, layer in enumerate(layers):
        for name in linears:
            w = layer.get_submodule(name).weight.detach().float()
            a = torch.randn(RANK, w.shape[1], generator=g) / w.shape[1] ** 0.5
            b = torch.randn(w.shape[0], RANK, generator=g)
            b *= delta_ratio * w.norm() / (FACTOR * b @ a).norm()
            mods[f"{module_prefix}.{i}.{name}"] = (a.bfloat16(), b.bfloat16())
    return mods


def clip_modules(pipe, seed):
    return random_modules(clip_tower(pipe).encoder.layers, "encoder.layers", CLIP_LINEARS, seed, 0.5)


def write_kohya(mods, key_prefix, file_name):
    """kohya names: key_prefix + the module with dots as underscores, lora_down / lora_up / alpha."""
    sd = {}
    for name, (a, b) in mods.items():
        stem = key_prefix + name.replace(".", "_")
        sd[stem + ".lora_down.weight"] = a.contiguous()
        sd[stem + ".lora_up.weight"] = b.contiguous()
        sd[stem + ".alpha"] = torch.tensor(ALPHA)
    save_file(sd, str(OUT / file_name))


def write_diffusers(mods):
    """dump_lora's PEFT transformer LoRA plus a PEFT adapter on CLIP, saved by save_lora_weights."""
    from peft import LoraConfig, inject_adapter_in_model
    from peft.utils import get_peft_model_state_dict

    pipe = dump_lora.load_pipeline("flux1", torch.float32)
    pipe.load_lora_weights(str(dump_lora.OUT / "flux1" / "peft.safetensors"), adapter_name="default")
    te_config = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=sorted({n.split(".")[-1] for n in CLIP_LINEARS}),
                           init_lora_weights=True)
    # (transformers' own add_adapter wants a newer PEFT than the pinned one)
    inject_adapter_in_model(te_config, pipe.text_encoder, adapter_name="default")
    tower = clip_tower(pipe)
    with torch.no_grad():
        for name, (a, b) in mods.items():
            m = tower.get_submodule(name)
            m.lora_A["default"].weight.copy_(a.float())
            m.lora_B["default"].weight.copy_(b.float())
    folder = OUT / "diffusers_save"
    meta = lambda c: {k: (sorted(v) if isinstance(v, set) else v) for k, v in c.to_dict().items()}  # noqa: E731
    type(pipe).save_lora_weights(
        str(folder),
        transformer_lora_layers=get_peft_model_state_dict(pipe.transformer, adapter_name="default"),
        text_encoder_lora_layers=get_peft_model_state_dict(pipe.text_encoder, adapter_name="default"),
        transformer_lora_adapter_metadata=meta(pipe.transformer.peft_config["default"]),
        text_encoder_lora_adapter_metadata=meta(te_config))
    (folder / "pytorch_lora_weights.safetensors").rename(OUT / "diffusers_te.safetensors")
    shutil.rmtree(folder)


T5_LINEARS = ["layer.0.SelfAttention.q", "layer.0.SelfAttention.k", "layer.0.SelfAttention.v",
              "layer.0.SelfAttention.o", "layer.1.DenseReluDense.wi_0", "layer.1.DenseReluDense.wi_1",
              "layer.1.DenseReluDense.wo"]


def t5_modules(pipe, seed):
    # Each delta 1.5x its weight's norm: the tiny T5's tokens move the image less than CLIP's
    # pooled vector.
    return random_modules(pipe.text_encoder_2.encoder.block, "encoder.block", T5_LINEARS, seed, 1.5)


def render_t5_merged(mods, dtype_name, strength):
    """diffusers drops T5 LoRA parts, so the reference is what the LoRA was trained to do: the T5
    weights merged (W + strength * alpha / r * B A in f32, rounded once to the pipeline dtype) and
    the pipeline run as it is."""
    pipe = dump_lora.load_pipeline("flux1", dump_lora.DTYPES[dtype_name])
    fp32 = dump_lora.load_pipeline("flux1", torch.float32).text_encoder_2  # the checkpoint's weights
    with torch.no_grad():
        for name, (a, b) in mods.items():
            w = fp32.encoder.get_submodule(name.removeprefix("encoder.")).weight.float()
            merged = w + strength * FACTOR * (b.float() @ a.float())
            pipe.text_encoder_2.encoder.get_submodule(name.removeprefix("encoder.")).weight.copy_(merged)
    return dump_lora.render(pipe)


def cases():
    return [
        dict(name="kohya_te", file="kohya_te", strength=1.0, dtypes=["f32", "bf16"]),
        dict(name="kohya_te_half", file="kohya_te", strength=0.5, dtypes=["f32"]),
        dict(name="diffusers_te", file="diffusers_te", strength=1.0, dtypes=["f32", "bf16"]),
    ]


def run_case(case, dtype_name):
    pipe = dump_lora.load_pipeline("flux1", dump_lora.DTYPES[dtype_name])
    pipe.load_lora_weights(str(OUT / f"{case['file']}.safetensors"), adapter_name="a")
    pipe.set_adapters(["a"], [case["strength"]])
    return dump_lora.render(pipe)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    mods = clip_modules(dump_lora.load_pipeline("flux1", torch.float32), seed=9)
    write_kohya(mods, "lora_te1_text_model_", "kohya_te.safetensors")
    write_diffusers(mods)
    t5 = t5_modules(dump_lora.load_pipeline("flux1", torch.float32), seed=10)
    write_kohya(t5, "lora_te3_", "kohya_t5.safetensors")  # kohya's FLUX T5 prefix (lora_te1_ is CLIP-L)
    manifest = dict(generator="tools/reference/dump_lora_text_encoder.py", diffusers="0.42.1", rank=RANK,
                    alpha=ALPHA, cases=[])
    for case in cases():
        rec = dict(case, max_diff_vs_base={}, max_diff_vs_transformer_only={})
        for dtype_name in case["dtypes"]:
            out = OUT / f"{case['name']}_{dtype_name}"
            out.mkdir()
            image = run_case(case, dtype_name)
            image.save(out / "image_0.png")
            # dump_lora's base image (no LoRA) and its "peft" image (the transformer part alone).
            for what, c in (("max_diff_vs_base", "base"), ("max_diff_vs_transformer_only", "peft")):
                ref = PIL.Image.open(dump_lora.OUT / f"flux1_{c}_{dtype_name}" / "image_0.png")
                rec[what][dtype_name] = dump_lora.max_diff(image, ref)
        manifest["cases"].append(rec)
        print(case["name"], rec["max_diff_vs_base"], rec["max_diff_vs_transformer_only"])
    for strength, name in ((1.0, "kohya_t5"), (0.5, "kohya_t5_half")):
        rec = dict(name=name, file="kohya_t5", strength=strength, dtypes=["f32", "bf16"], max_diff_vs_base={},
                   reference="T5 weights merged by this script (diffusers drops T5 LoRA parts)")
        for dtype_name in rec["dtypes"]:
            out = OUT / f"{name}_{dtype_name}"
            out.mkdir()
            image = render_t5_merged(t5, dtype_name, strength)
            image.save(out / "image_0.png")
            ref = PIL.Image.open(dump_lora.OUT / f"flux1_base_{dtype_name}" / "image_0.png")
            rec["max_diff_vs_base"][dtype_name] = dump_lora.max_diff(image, ref)
        manifest["cases"].append(rec)
        print(name, rec["max_diff_vs_base"])
    # What diffusers itself makes of the T5 file: the base image (it drops the parts).
    pipe = dump_lora.load_pipeline("flux1", torch.float32)
    try:
        pipe.load_lora_weights(str(OUT / "kohya_t5.safetensors"), adapter_name="t5")
        manifest["diffusers_on_kohya_t5_max_diff_vs_base_f32"] = dump_lora.max_diff(
            dump_lora.render(pipe), PIL.Image.open(dump_lora.OUT / "flux1_base_f32" / "image_0.png"))
    except Exception as e:  # noqa: BLE001 - recorded in the manifest
        manifest["diffusers_on_kohya_t5"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
