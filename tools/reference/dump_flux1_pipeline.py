#!/usr/bin/env python3
"""Ground truth for the FLUX.1 pipeline: diffusers 0.42.1 FluxPipeline / FluxImg2ImgPipeline on tiny
random dev and schnell folders, rendered in float32 and bfloat16, for
tests/pipelines/test_flux1_pipeline_golden.cpp.

Writes
  tests/data/models/flux1-{dev,schnell}-tiny/   diffusers FluxPipeline folders: model_index.json,
      scheduler/ (dev: dynamic shift; schnell: none), transformer/ (new tiny random
      FluxTransformer2DModel, head dim 128, axes (16, 56, 56), bf16 weights), and relative symlinks
      to the components other tests already check in: text_encoder -> clip_text_model/full_vocab
      (real CLIP vocabulary, hidden 8), text_encoder_2 -> t5_encoder/model (real T5 vocabulary,
      d_model 16), tokenizer -> tokenizers/clip, tokenizer_2 -> tokenizers/t5,
      vae -> flux1_vae/model (FLUX.1 AutoencoderKL settings, 8x downsampling).
  tests/data/flux1_pipeline/manifest.json      every case: prompts, seed, size, steps, guidance, dtype
  tests/data/flux1_pipeline/<case>_<dtype>/    image_<i>.png and intermediates.safetensors:
      noise [B,16,h,w] (the randn_tensor draw), pooled [B,8], prompt_embeds [B,L,16], sigmas,
      step<k>_latents (packed, after step k), image_latents (img2img: scaled VAE sample).
  tests/data/flux1_pipeline/inputs/init_64.png img2img input image

Everything is seeded; rerunning rewrites identical files.
  /work/refenv/bin/python tools/reference/dump_flux1_pipeline.py
"""
import json
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
OUT = DATA / "flux1_pipeline"
MODELS = {"dev": DATA / "models" / "flux1-dev-tiny", "schnell": DATA / "models" / "flux1-schnell-tiny"}

SHARED_COMPONENTS = {  # component -> path relative to tests/data
    "text_encoder": "clip_text_model/full_vocab",
    "text_encoder_2": "t5_encoder/model",
    "tokenizer": "tokenizers/clip",
    "tokenizer_2": "tokenizers/t5",
    "vae": "flux1_vae/model",
}

SCHEDULER_DEV = {
    "_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.42.1",
    "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
    "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True,
}
SCHEDULER_SCHNELL = {
    "_class_name": "FlowMatchEulerDiscreteScheduler", "_diffusers_version": "0.42.1",
    "base_image_seq_len": 256, "base_shift": 0.5, "max_image_seq_len": 4096, "max_shift": 1.15,
    "num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": False,
}

CASES = [
    dict(name="dev_64_red", model="dev", prompts=["a red circle on a white background"], seed=0, width=64,
         height=64, steps=4),
    dict(name="dev_96x64_guidance5", model="dev", prompts=["ein Bild, été, 東京 at night"], seed=7, width=96,
         height=64, steps=3, guidance=5.0, max_sequence_length=64),
    dict(name="dev_batch_2x2", model="dev", prompts=["a cat", "a dog"], images_per_prompt=2, seed=11, width=64,
         height=64, steps=2, max_sequence_length=32),
    dict(name="dev_true_cfg", model="dev", prompts=["a lighthouse at dusk"], negative_prompt="blurry, dark",
         true_cfg_scale=4.0, seed=5, width=64, height=64, steps=3, max_sequence_length=48),
    dict(name="schnell_64", model="schnell", prompts=["a green field under a grey sky"], seed=42, width=64,
         height=64, steps=4, max_sequence_length=256),
    dict(name="schnell_64x128_seed1234", model="schnell", prompts=["a tall tower"], seed=1234, width=64,
         height=128, steps=2, max_sequence_length=256),
    dict(name="dev_img2img_s06", model="dev", prompts=["make it blue"], seed=21, width=64, height=64, steps=5,
         strength=0.6, init_image="init_64.png", max_sequence_length=32),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_transformer(guidance: bool, seed: int):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(seed)
    model = FluxTransformer2DModel(patch_size=1, in_channels=64, num_layers=1, num_single_layers=1,
                                   attention_head_dim=128, num_attention_heads=1, joint_attention_dim=16,
                                   pooled_projection_dim=8, guidance_embeds=guidance, axes_dims_rope=(16, 56, 56))
    # The default init gives a near-zero final projection; a wider one makes velocities (and so the
    # images) depend visibly on every input, which the golden comparison needs to mean something.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("proj_out") or name.startswith("norm_out"):
                p.normal_(0.0, 0.05 if p.dim() > 1 else 0.02)
    return model.to(torch.bfloat16)


def make_folder(kind: str) -> None:
    folder = MODELS[kind]
    folder.mkdir(parents=True, exist_ok=True)
    for component, target in SHARED_COMPONENTS.items():
        link = folder / component
        if link.is_symlink() or link.exists():
            link.unlink()
        os.symlink(os.path.relpath(DATA / target, folder), link)
    (folder / "scheduler").mkdir(exist_ok=True)
    sched = SCHEDULER_DEV if kind == "dev" else SCHEDULER_SCHNELL
    (folder / "scheduler" / "scheduler_config.json").write_text(json.dumps(sched, indent=2) + "\n")
    make_transformer(kind == "dev", 100 if kind == "dev" else 200).save_pretrained(folder / "transformer")
    index = {
        "_class_name": "FluxPipeline", "_diffusers_version": "0.42.1",
        "image_encoder": [None, None], "feature_extractor": [None, None],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"],
    }
    (folder / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")


def make_init_image() -> Path:
    path = OUT / "inputs" / "init_64.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:64, 0:64]
    rgb = np.stack([(x * 4) % 256, (y * 4) % 256, ((x + y) * 2 + 40 * ((x // 16 + y // 16) % 2)) % 256], -1)
    Image.fromarray(rgb.astype(np.uint8), "RGB").save(path)
    return path


def unpack(packed: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """[B, (h/2)(w/2), 64] tokens -> [B, 16, h, w] latents (FluxPipeline._unpack_latents on the grid)."""
    b, _, c = packed.shape
    x = packed.view(b, h // 2, w // 2, c // 4, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c // 4, h, w)


def run_case(case: dict, dtype_name: str, pipes: dict) -> dict:
    from diffusers import FluxImg2ImgPipeline, FluxPipeline

    img2img = "init_image" in case
    key = (case["model"], dtype_name, img2img)
    if key not in pipes:
        cls = FluxImg2ImgPipeline if img2img else FluxPipeline
        pipes[key] = cls.from_pretrained(str(MODELS[case["model"]]), torch_dtype=DTYPES[dtype_name])
    pipe = pipes[key]
    tensors = {}
    h, w = 2 * (case["height"] // 16), 2 * (case["width"] // 16)

    original_encode = pipe.encode_prompt
    original_prepare = pipe.prepare_latents
    original_vae_encode = getattr(pipe, "_encode_vae_image", None)
    encodes = []

    def encode_prompt(*a, **k):
        r = original_encode(*a, **k)
        encodes.append(r)
        return r

    def prepare_latents(*a, **k):
        r = original_prepare(*a, **k)
        tensors["initial_latents"] = unpack(r[0], h, w).clone()  # img2img: already noised
        tensors["latent_ids"] = r[1].clone()
        return r

    def encode_vae_image(*a, **k):
        r = original_vae_encode(*a, **k)
        tensors["image_latents"] = r.clone()
        return r

    pipe.encode_prompt = encode_prompt
    pipe.prepare_latents = prepare_latents
    if img2img:
        pipe._encode_vae_image = encode_vae_image

    def on_step_end(p, i, t, kw):
        tensors[f"step{i + 1}_latents"] = kw["latents"].clone()
        return {}

    kwargs = dict(prompt=case["prompts"] if len(case["prompts"]) > 1 else case["prompts"][0],
                  num_inference_steps=case["steps"], width=case["width"], height=case["height"],
                  num_images_per_prompt=case.get("images_per_prompt", 1),
                  generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="pil",
                  callback_on_step_end=on_step_end)
    if "guidance" in case:
        kwargs["guidance_scale"] = case["guidance"]
    if "max_sequence_length" in case:
        kwargs["max_sequence_length"] = case["max_sequence_length"]
    if "negative_prompt" in case:
        kwargs["negative_prompt"] = case["negative_prompt"]
        kwargs["true_cfg_scale"] = case["true_cfg_scale"]
    if img2img:
        kwargs["image"] = Image.open(OUT / "inputs" / case["init_image"]).convert("RGB")
        kwargs["strength"] = case["strength"]
    images = pipe(**kwargs).images
    pipe.encode_prompt = original_encode
    pipe.prepare_latents = original_prepare
    if img2img:
        pipe._encode_vae_image = original_vae_encode

    tensors["prompt_embeds"] = encodes[0][0].clone()
    tensors["pooled"] = encodes[0][1].clone()
    if len(encodes) > 1:
        tensors["negative_prompt_embeds"] = encodes[1][0].clone()
        tensors["negative_pooled"] = encodes[1][1].clone()
    tensors["sigmas"] = pipe.scheduler.sigmas.clone().float()
    tensors["timesteps"] = pipe.scheduler.timesteps.clone().float()
    if not img2img:
        # the noise itself: the same draw on a fresh generator (prepare_latents packs it)
        tensors["noise"] = tensors.pop("initial_latents")

    out = OUT / f"{case['name']}_{dtype_name}"
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for i, image in enumerate(images):
        image.save(out / f"image_{i}.png")
        names.append(f"image_{i}.png")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "intermediates.safetensors"))
    entry = dict(case)
    entry.update(name=f"{case['name']}_{dtype_name}", case=case["name"], dtype=dtype_name, outputs=names,
                 model=MODELS[case["model"]].name, batch=len(case["prompts"]) * case.get("images_per_prompt", 1),
                 steps_run=len(pipe.scheduler.timesteps) if not img2img else len([k for k in tensors if k.startswith("step")]))
    return entry


def main() -> None:
    torch.manual_seed(0)
    OUT.mkdir(parents=True, exist_ok=True)
    for kind in MODELS:
        make_folder(kind)
    make_init_image()
    pipes = {}
    entries = []
    for case in CASES:
        for dtype_name in DTYPES:
            entries.append(run_case(case, dtype_name, pipes))
            print(entries[-1]["name"], "done")
    # How far the reference's own bf16 run is from its f32 run (final step latents), for the record.
    for e in entries:
        if e["dtype"] != "bf16":
            continue
        from safetensors.torch import load_file

        a = load_file(str(OUT / e["name"] / "intermediates.safetensors"))
        b = load_file(str(OUT / (e["case"] + "_f32") / "intermediates.safetensors"))
        last = f"step{e['steps_run']}_latents"
        diff = (a[last].float() - b[last].float()).norm() / b[last].float().norm()
        e["reference_bf16_vs_f32_final_latents_rel_l2"] = float(diff)
    manifest = dict(generator="tools/reference/dump_flux1_pipeline.py", diffusers="0.42.1", cases=entries)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
