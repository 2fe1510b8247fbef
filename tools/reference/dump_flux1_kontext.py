#!/usr/bin/env python3
"""Ground truth for FLUX.1 Kontext: diffusers 0.42.1 FluxKontextPipeline on a tiny random Kontext
folder, for tests/pipelines/test_flux1_kontext_golden.cpp.

Writes
  tests/data/models/flux1-kontext-tiny/   a FluxKontextPipeline folder: model_index.json, scheduler/
      (dev's dynamic shift) and relative symlinks to flux1-dev-tiny's transformer (Kontext-dev has
      dev's shapes) and to the CLIP, T5, tokenizers and VAE it links.
  tests/data/flux1_kontext/manifest.json  every case: prompt, seed, steps, guidance, size (diffusers'
      width/height, with max_area = width x height unless the case gives one: then the output is
      width x height rescaled to that area, output_size), the input image
  tests/data/flux1_kontext/<case>/        image_<i>.png and intermediates.safetensors:
      start_latents [B, N, 64] (the packed noise) and final_latents [B, N, 64]; the manifest's
      reference_size is the size the input image was resized to (from its token ids).
  tests/data/flux1_kontext/inputs/        the sources of dump_klein_inpaint.make_inputs

The input image is resized to the preferred Kontext resolution of its aspect ratio (diffusers'
default _auto_resize): a 64x64 image becomes 1024x1024, a 100x75 one (96x64 once floored to
multiples of 16) 1248x832.
  /work/refenv/bin/python tools/reference/dump_flux1_kontext.py
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

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
MODEL = DATA / "models" / "flux1-kontext-tiny"
OUT = DATA / "flux1_kontext"

CASES = [
    dict(name="square", prompt="make it red", seed=3, steps=3, guidance=2.5, width=64, height=64,
         image="source_64.png", bf16=True),
    # 100x75 -> 1248x832; a wide output, two images, true CFG with a negative prompt.
    dict(name="wide_true_cfg", prompt="add a hat", negative_prompt="blurry", true_cfg=2.0, seed=5, steps=2,
         guidance=3.5, width=96, height=64, image="source_100x75.png", images=2),
    # max_area below the asked size: 96x64 rescaled to 4096 pixels at its 3:2 aspect (78.4 x 52.3,
    # rounded, floored to 16) -> a 64x48 image.
    dict(name="max_area", prompt="a blue sky", seed=7, steps=2, guidance=3.5, width=96, height=64, max_area=4096,
         image="source_64.png"),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_folder() -> None:
    if MODEL.exists():
        shutil.rmtree(MODEL)
    MODEL.mkdir(parents=True)
    links = dict(SHARED_COMPONENTS, transformer="models/flux1-dev-tiny/transformer")
    for component, target in links.items():
        os.symlink(os.path.relpath(DATA / target, MODEL), MODEL / component)
    (MODEL / "scheduler").mkdir()
    (MODEL / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER_DEV, indent=2) + "\n")
    index = {
        "_class_name": "FluxKontextPipeline", "_diffusers_version": "0.42.1",
        "image_encoder": [None, None], "feature_extractor": [None, None],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"], "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"], "tokenizer_2": ["transformers", "T5TokenizerFast"],
        "transformer": ["diffusers", "FluxTransformer2DModel"], "vae": ["diffusers", "AutoencoderKL"],
    }
    (MODEL / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")


class Recorder:
    """Keeps what prepare_latents returns, unchanged."""

    def __init__(self, pipe):
        self.tensors = {}
        self.pipe = pipe
        self.original = pipe.prepare_latents

        def wrapper(*args, **kwargs):
            result = self.original(*args, **kwargs)
            for key, value in zip(("start_latents", "image_latents", None, "image_ids"), result):
                if key:
                    self.tensors[key] = value.clone()
            return result

        pipe.prepare_latents = wrapper

    def close(self):
        self.pipe.prepare_latents = self.original


def run_case(case: dict, dtype_name: str, inputs: Path, pipes: dict) -> dict:
    from diffusers import FluxKontextPipeline

    if dtype_name not in pipes:
        pipes[dtype_name] = FluxKontextPipeline.from_pretrained(str(MODEL), torch_dtype=DTYPES[dtype_name])
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
        images = pipe(image=PIL.Image.open(inputs / case["image"]), prompt=case["prompt"],
                      negative_prompt=case.get("negative_prompt"), true_cfg_scale=case.get("true_cfg", 1.0),
                      width=case["width"], height=case["height"],
                      max_area=case.get("max_area", case["width"] * case["height"]),
                      num_inference_steps=case["steps"], guidance_scale=case["guidance"],
                      num_images_per_prompt=case.get("images", 1),
                      generator=torch.Generator("cpu").manual_seed(case["seed"]), max_sequence_length=32,
                      output_type="pil", callback_on_step_end=on_step_end,
                      callback_on_step_end_tensor_inputs=["latents"]).images
    finally:
        recorder.close()
    # The image's tokens are kept out of the files (4096 rows); their grid says the size it was
    # resized to, and the final latents depend on every one of them.
    ids = recorder.tensors["image_ids"]
    assert bool((ids[:, 0] == 1).all())
    reference_size = [int(ids[:, 2].max() + 1) * 16, int(ids[:, 1].max() + 1) * 16]
    tensors = dict(start_latents=recorder.tensors["start_latents"], final_latents=final["latents"])
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(images):
        outputs.append(f"image_{i}.png")
        img.save(folder / outputs[-1])
    return dict(name=name, model=MODEL.name, dtype=dtype_name, prompt=case["prompt"],
                negative_prompt=case.get("negative_prompt"), true_cfg=case.get("true_cfg"), seed=case["seed"],
                steps=case["steps"], guidance=case["guidance"], images_per_prompt=case.get("images", 1),
                max_sequence_length=32, image=case["image"], reference_size=reference_size, width=case["width"],
                height=case["height"], max_area=case.get("max_area"), output_size=list(images[0].size),
                outputs=outputs)


def main() -> None:
    make_folder()
    if OUT.exists():
        shutil.rmtree(OUT)
    inputs = OUT / "inputs"
    make_inputs(inputs)
    for f in inputs.iterdir():
        if f.name.startswith("mask_") or f.name == "reference_64.png":
            f.unlink()
    import diffusers
    import transformers

    pipes = {}
    cases = []
    for case in CASES:
        for dtype_name in ["f32"] + (["bf16"] if case.get("bf16") else []):
            cases.append(run_case(case, dtype_name, inputs, pipes))
            print("wrote", cases[-1]["name"])
    manifest = dict(generated_by="tools/reference/dump_flux1_kontext.py",
                    versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                  transformers=transformers.__version__, numpy=np.__version__,
                                  pillow=PIL.__version__),
                    cases=cases)
    (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
