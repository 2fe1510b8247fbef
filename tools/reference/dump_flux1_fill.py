#!/usr/bin/env python3
"""Ground truth for FLUX.1 Fill: diffusers 0.42.1 FluxFillPipeline on a tiny random Fill folder, for
tests/pipelines/test_flux1_fill_golden.cpp.

Writes
  tests/data/models/flux1-fill-tiny/   a FluxFillPipeline folder: model_index.json, scheduler/ (dev's
      dynamic shift), transformer/ (a new tiny random FluxTransformer2DModel with guidance, head dim
      128, in_channels 384 = 64 packed latents + 64 packed masked-image latents + 256 packed mask
      values, out_channels 64, bf16 weights) and the relative symlinks of flux1-dev-tiny for CLIP,
      T5, their tokenizers and the VAE.
  tests/data/models/flux1-fill-tiny-bfl.safetensors   that transformer in the BFL single-file layout
      (FLUX.1-Fill-dev's own file and ComfyUI's), with make_tiny_models' name map
  tests/data/flux1_fill/manifest.json   every case (the layout of dump_flux1_inpaint.py)
  tests/data/flux1_fill/<case>/         image_<i>.png and intermediates.safetensors: mask [B, N, 256]
      and masked_image_latents [B, N, 64] (what prepare_mask_latents returns), start_latents
      [B, N, 64] (prepare_latents) and final_latents [B, N, 64].
  tests/data/flux1_fill/inputs/         the sources and masks of dump_klein_inpaint.make_inputs

Everything is seeded; rerunning rewrites identical files.
  /work/refenv/bin/python tools/reference/dump_flux1_fill.py
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_flux1_pipeline import SCHEDULER_DEV, SHARED_COMPONENTS  # noqa: E402  (the same components)
from dump_klein_inpaint import make_inputs  # noqa: E402  (the same inputs)
from make_tiny_models import diffusers_to_bfl_flux1  # noqa: E402  (the same BFL names)

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
MODEL = DATA / "models" / "flux1-fill-tiny"
OUT = DATA / "flux1_fill"

# FluxFillPipeline's defaults are guidance 30 and strength 1 (the image enters only as the masked
# condition); its size defaults to 1024, so every case names one.
CASES = [
    # an anti-aliased mask, the defaults.
    dict(name="soft_disc", prompt="a red apple", seed=3, steps=4, strength=1.0, guidance=30.0, width=64,
         height=64, source="source_64.png", mask="mask_soft_disc_64.png", bf16=True),
    # the 100x75 source and mask resized to 96x64, two images, strength 0.8 (the source noised).
    dict(name="resized_s08", prompt="a wooden door", seed=5, steps=3, strength=0.8, guidance=10.0, width=96,
         height=64, source="source_100x75.png", mask="mask_soft_disc_100x75.png", images=2),
    # all white: everything repainted (the condition is a grey image).
    dict(name="all_white", prompt="a green field", seed=7, steps=2, strength=1.0, guidance=30.0, width=64,
         height=64, source="source_64.png", mask="mask_white_64.png"),
    # all black: nothing to repaint (the condition is the whole source).
    dict(name="all_black", prompt="a blue lake", seed=9, steps=2, strength=1.0, guidance=30.0, width=64,
         height=64, source="source_64.png", mask="mask_black_64.png"),
    # an RGB mask whose dark red box luminance keeps.
    dict(name="rgb_mask", prompt="a yellow box", seed=11, steps=3, strength=1.0, guidance=30.0, width=64,
         height=64, source="source_64.png", mask="mask_rgb_box_64.png", bf16=True),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_transformer():
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(300)
    model = FluxTransformer2DModel(patch_size=1, in_channels=384, out_channels=64, num_layers=1,
                                   num_single_layers=1, attention_head_dim=128, num_attention_heads=1,
                                   joint_attention_dim=16, pooled_projection_dim=8, guidance_embeds=True,
                                   axes_dims_rope=(16, 56, 56))
    # As dump_flux1_pipeline.py: a wider final projection, so the images depend visibly on every input.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("proj_out") or name.startswith("norm_out"):
                p.normal_(0.0, 0.05 if p.dim() > 1 else 0.02)
    return model.to(torch.bfloat16)


def make_folder() -> None:
    if MODEL.exists():
        shutil.rmtree(MODEL)
    MODEL.mkdir(parents=True)
    for component, target in SHARED_COMPONENTS.items():
        os.symlink(os.path.relpath(DATA / target, MODEL), MODEL / component)
    (MODEL / "scheduler").mkdir()
    (MODEL / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER_DEV, indent=2) + "\n")
    make_transformer().save_pretrained(MODEL / "transformer")
    index = {
        "_class_name": "FluxFillPipeline", "_diffusers_version": "0.42.1",
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"],
    }
    (MODEL / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    write_bfl_file()


def write_bfl_file() -> None:
    """The folder's transformer as BFL names it: the file people download is in that layout."""
    from safetensors.torch import load_file
    sd = load_file(MODEL / "transformer" / "diffusion_pytorch_model.safetensors")
    save_file(diffusers_to_bfl_flux1(sd), DATA / "models" / "flux1-fill-tiny-bfl.safetensors",
              metadata={"format": "pt"})


class Recorder:
    """Keeps what prepare_latents and prepare_mask_latents return, unchanged."""

    def __init__(self, pipe):
        self.tensors = {}
        self.pipe = pipe
        self.saved = {}
        for name, keys in (("prepare_latents", ("start_latents", None)),
                           ("prepare_mask_latents", ("mask", "masked_image_latents"))):
            original = getattr(pipe, name)
            self.saved[name] = original

            def wrapper(*args, _original=original, _keys=keys, **kwargs):
                result = _original(*args, **kwargs)
                for key, value in zip(_keys, result):
                    if key:
                        self.tensors[key] = value.clone()
                return result

            setattr(pipe, name, wrapper)

    def close(self):
        for name, original in self.saved.items():
            setattr(self.pipe, name, original)


def run_case(case: dict, dtype_name: str, inputs: Path, pipes: dict) -> dict:
    from diffusers import FluxFillPipeline

    if dtype_name not in pipes:
        pipes[dtype_name] = FluxFillPipeline.from_pretrained(str(MODEL), torch_dtype=DTYPES[dtype_name])
    pipe = pipes[dtype_name]
    name = f"{case['name']}_{dtype_name}"
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(pipe)
    final = {}

    def on_step_end(p, i, t, callback_kwargs):
        final["latents"] = callback_kwargs["latents"].clone()
        return {}

    try:
        images = pipe(prompt=case["prompt"], image=PIL.Image.open(inputs / case["source"]),
                      mask_image=PIL.Image.open(inputs / case["mask"]), width=case["width"],
                      height=case["height"], strength=case["strength"], num_inference_steps=case["steps"],
                      guidance_scale=case["guidance"], num_images_per_prompt=case.get("images", 1),
                      generator=torch.Generator("cpu").manual_seed(case["seed"]), max_sequence_length=32,
                      output_type="pil", callback_on_step_end=on_step_end,
                      callback_on_step_end_tensor_inputs=["latents"]).images
    finally:
        recorder.close()
    tensors = dict(recorder.tensors, final_latents=final["latents"])
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(images):
        outputs.append(f"image_{i}.png")
        img.save(folder / outputs[-1])
    return dict(name=name, model=MODEL.name, dtype=dtype_name, prompt=case["prompt"], seed=case["seed"],
                steps=case["steps"], strength=case["strength"], guidance=case["guidance"],
                images_per_prompt=case.get("images", 1), max_sequence_length=32, source=case["source"],
                mask=case["mask"], width=case["width"], height=case["height"], outputs=outputs)


def main() -> None:
    make_folder()
    if OUT.exists():
        shutil.rmtree(OUT)
    inputs = OUT / "inputs"
    make_inputs(inputs)
    (inputs / "reference_64.png").unlink()
    import diffusers
    import transformers

    pipes = {}
    cases = []
    for case in CASES:
        for dtype_name in ["f32"] + (["bf16"] if case.get("bf16") else []):
            cases.append(run_case(case, dtype_name, inputs, pipes))
            print("wrote", cases[-1]["name"])
    manifest = dict(generated_by="tools/reference/dump_flux1_fill.py",
                    versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                  transformers=transformers.__version__, numpy=np.__version__,
                                  pillow=PIL.__version__),
                    cases=cases)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
