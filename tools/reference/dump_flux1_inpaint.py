#!/usr/bin/env python3
"""Ground truth for FLUX.1 inpainting: diffusers' own FluxInpaintPipeline on the tiny random FLUX.1
folders (tests/data/models/flux1-dev-tiny and -schnell-tiny), for
tests/pipelines/test_flux1_inpaint_golden.cpp.

Writes tests/data/flux1_inpaint/ in the layout of dump_klein_inpaint.py (manifest.json, inputs/ with
the same formula-made source images and masks, <case>/image_<i>.png, <case>/intermediates.safetensors
with mask [B, N, 64] (prepare_mask_latents' packed mask), source_latents [B, N, 64] (prepare_latents'
packed image latents) and final_latents [B, N, 64]).

  /work/refenv/bin/python tools/reference/dump_flux1_inpaint.py [--out DIR]
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_klein_inpaint import make_inputs  # noqa: E402  (the same inputs)

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
MODEL_FOLDERS = {"dev": MODELS / "flux1-dev-tiny", "schnell": MODELS / "flux1-schnell-tiny"}
DEFAULT_OUT = REPO / "tests" / "data" / "flux1_inpaint"

# FluxInpaintPipeline takes height/width (default 1024): the image and the mask are resized to it.
CASES = [
    # dev (guidance embedded), an anti-aliased mask, strength 0.6 of 4 steps: t_start 1.
    dict(name="dev_soft_disc", model="dev", prompt="a red apple", seed=3, steps=4, strength=0.6, guidance=3.5,
         width=64, height=64, source="source_64.png", mask="mask_soft_disc_64.png", bf16=True),
    # the 100x75 source and mask resized to 64x64, two images.
    dict(name="dev_resized", model="dev", prompt="a wooden door", seed=5, steps=3, strength=0.8, guidance=3.5,
         width=64, height=64, source="source_100x75.png", mask="mask_soft_disc_100x75.png", images=2),
    # schnell with an RGB mask at strength 1.
    dict(name="schnell_rgb_mask", model="schnell", prompt="a green field", seed=7, steps=2, strength=1.0,
         guidance=0.0, width=64, height=64, source="source_64.png", mask="mask_rgb_box_64.png"),
    # padding_mask_crop: an off-centre disc's window (padded by 6, squared) repainted at 64x64 and
    # pasted back over the 100x75 source; the output is 100x75.
    dict(name="dev_crop_corner", model="dev", prompt="a red apple", seed=19, steps=4, strength=0.9,
         guidance=3.5, width=64, height=64, source="source_100x75.png", mask="mask_corner_100x75.png",
         padding_mask_crop=6, bf16=True),
    # A band nearly as wide as the image: the window cannot be squared inside it, so it is resized
    # to fit 64x64 and the rows above and below are filled from its edges.
    dict(name="dev_crop_band", model="dev", prompt="a wooden fence", seed=23, steps=3, strength=1.0,
         guidance=3.5, width=64, height=64, source="source_100x75.png", mask="mask_band_100x75.png",
         padding_mask_crop=4),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


class Recorder:
    """Keeps what prepare_latents and prepare_mask_latents return, unchanged."""

    def __init__(self, pipe):
        self.tensors = {}
        self.pipe = pipe
        self.saved = {}
        for name, index, key in (("prepare_latents", 2, "source_latents"), ("prepare_mask_latents", 0, "mask")):
            original = getattr(pipe, name)
            self.saved[name] = original

            def wrapper(*args, _original=original, _index=index, _key=key, **kwargs):
                result = _original(*args, **kwargs)
                self.tensors[_key] = result[_index].clone()
                return result

            setattr(pipe, name, wrapper)

    def close(self):
        for name, original in self.saved.items():
            setattr(self.pipe, name, original)


def run_case(case: dict, dtype_name: str, out: Path, inputs: Path, pipes: dict) -> dict:
    from diffusers import FluxInpaintPipeline

    key = (case["model"], dtype_name)
    if key not in pipes:
        pipes[key] = FluxInpaintPipeline.from_pretrained(str(MODEL_FOLDERS[case["model"]]),
                                                         torch_dtype=DTYPES[dtype_name])
    pipe = pipes[key]
    name = f"{case['name']}_{dtype_name}"
    folder = out / name
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
                      padding_mask_crop=case.get("padding_mask_crop"),
                      callback_on_step_end_tensor_inputs=["latents"]).images
    finally:
        recorder.close()
    tensors = dict(recorder.tensors, final_latents=final["latents"])
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(images):
        outputs.append(f"image_{i}.png")
        img.save(folder / outputs[-1])
    return dict(name=name, model=MODEL_FOLDERS[case["model"]].name, dtype=dtype_name, prompt=case["prompt"],
                seed=case["seed"], steps=case["steps"], strength=case["strength"], guidance=case["guidance"],
                images_per_prompt=case.get("images", 1), max_sequence_length=32, source=case["source"],
                mask=case["mask"], reference=None, width=case["width"], height=case["height"],
                padding_mask_crop=case.get("padding_mask_crop"), run_width=case["width"],
                run_height=case["height"], outputs=outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    inputs = args.out / "inputs"
    make_inputs(inputs)
    for unused in ("mask_black_64.png", "mask_white_64.png", "reference_64.png"):
        (inputs / unused).unlink()
    import diffusers
    import transformers

    pipes = {}
    cases = []
    for case in CASES:
        for dtype_name in ["f32"] + (["bf16"] if case.get("bf16") else []):
            cases.append(run_case(case, dtype_name, args.out, inputs, pipes))
            print("wrote", cases[-1]["name"])
    manifest = dict(generated_by="tools/reference/dump_flux1_inpaint.py",
                    versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                  transformers=transformers.__version__, numpy=np.__version__,
                                  pillow=PIL.__version__),
                    cases=cases)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
