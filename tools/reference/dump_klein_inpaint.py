#!/usr/bin/env python3
"""Ground truth for FLUX.2-klein inpainting: diffusers' own Flux2KleinInpaintPipeline on the tiny
random klein folders (tests/data/models/flux2-klein-tiny and -base-tiny), for
tests/pipelines/test_klein_inpaint_golden.cpp.

Writes tests/data/klein_inpaint/:
  manifest.json              every case: prompt, seed, steps, strength, guidance, dtype, images per
                             prompt, the input files, the output size and files
  inputs/*.png               source images, masks and references, drawn here from formulas
  <case>/image_<i>.png       diffusers' output_type="pil" images, saved with PIL (with
                             padding_mask_crop the source's size; run_width x run_height is the run's)
  <case>/intermediates.safetensors
                             mask           [B, N, 1] prepare_mask_latents' result (the packed mask)
                             source_latents [B, N, 128] prepare_latents' packed source latents
                             final_latents  [B, N, 128] the packed latents after the last step

The pipeline runs as is: the intermediates come from wrappers that call the pipeline's own methods
and return their results unchanged, and from callback_on_step_end (which returns nothing).

  /work/refenv/bin/python tools/reference/dump_klein_inpaint.py [--out DIR]
"""

import argparse
import json
import shutil
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
MODEL_FOLDERS = {"distilled": MODELS / "flux2-klein-tiny", "base": MODELS / "flux2-klein-base-tiny"}
DEFAULT_OUT = REPO / "tests" / "data" / "klein_inpaint"

# Every case runs in f32; those with "bf16" also in bfloat16. No width/height: diffusers sizes the
# run from the source image.
CASES = [
    # An anti-aliased (soft-edged) grey disc; the 100x75 source is floored to 96x64 and the mask
    # resized with it. 4 steps at strength 0.6: t_start 1, three steps run.
    dict(name="soft_disc", prompt="a red apple", seed=3, steps=4, strength=0.6, source="source_100x75.png",
         mask="mask_soft_disc_100x75.png", bf16=True),
    # All black: nothing is repainted; the result is the source through the VAE.
    dict(name="all_black", prompt="a blue sky", seed=5, steps=3, strength=0.8, source="source_64.png",
         mask="mask_black_64.png"),
    # All white at strength 1: every token is generated, the source only as a reference.
    dict(name="all_white", prompt="a green field", seed=7, steps=2, strength=1.0, source="source_64.png",
         mask="mask_white_64.png"),
    # An RGB mask (luminance decides) with an extra reference image (t = 20), two images.
    dict(name="rgb_mask_reference", prompt="put the pattern here", seed=11, steps=3, strength=0.9,
         source="source_64.png", mask="mask_rgb_box_64.png", reference="reference_64.png", images=2),
    # Base variant: CFG with guidance 4 against "".
    dict(name="base_cfg", model="base", prompt="a wooden door", seed=13, steps=3, strength=0.7, guidance=4.0,
         source="source_64.png", mask="mask_soft_disc_64.png", bf16=True),
    # padding_mask_crop: a small disc near the top right corner of the 100x75 source; the window
    # (the disc's box padded by 8, widened to 96:64 and shifted back inside) is repainted at 96x64
    # and pasted back over the source, so the output is 100x75.
    dict(name="crop_corner", prompt="a red apple", seed=17, steps=4, strength=0.9, source="source_100x75.png",
         mask="mask_corner_100x75.png", padding_mask_crop=8, bf16=True),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def make_inputs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)

    def source(w, h, seed):
        rng = np.random.default_rng(seed)
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 127 // (w + h)], -1)
        img = img + rng.integers(-12, 13, size=img.shape)
        return np.clip(img, 0, 255).astype(np.uint8)

    def soft_disc(w, h):
        y, x = np.mgrid[0:h, 0:w].astype(np.float64)
        d = np.hypot(x - w * 0.45, y - h * 0.5)
        r = min(w, h) * 0.3
        # A linear ramp 6 pixels wide around the edge: greys that binarise at 0.5 either way.
        return np.clip((r + 3 - d) / 6.0 * 255.0, 0, 255).round().astype(np.uint8)

    PIL.Image.fromarray(source(100, 75, 1), "RGB").save(folder / "source_100x75.png")
    PIL.Image.fromarray(source(64, 64, 2), "RGB").save(folder / "source_64.png")
    PIL.Image.fromarray(soft_disc(100, 75), "L").save(folder / "mask_soft_disc_100x75.png")
    PIL.Image.fromarray(soft_disc(64, 64), "L").save(folder / "mask_soft_disc_64.png")
    # padding_mask_crop's masks: an off-centre soft disc (radius 7 at (80, 18)), and a band almost as
    # wide as the image, whose window cannot reach the run's aspect and is filled at its edges.
    y, x = np.mgrid[0:75, 0:100].astype(np.float64)
    corner = np.clip((7 + 3 - np.hypot(x - 80, y - 18)) / 6.0 * 255.0, 0, 255).round().astype(np.uint8)
    PIL.Image.fromarray(corner, "L").save(folder / "mask_corner_100x75.png")
    band = np.zeros((75, 100), np.uint8)
    band[50:58, 5:95] = 255
    band[49, 5:95] = band[58, 5:95] = 128
    PIL.Image.fromarray(band, "L").save(folder / "mask_band_100x75.png")
    PIL.Image.fromarray(np.zeros((64, 64), np.uint8), "L").save(folder / "mask_black_64.png")
    PIL.Image.fromarray(np.full((64, 64), 255, np.uint8), "L").save(folder / "mask_white_64.png")
    box = np.zeros((64, 64, 3), np.uint8)
    box[8:40, 20:60] = (255, 220, 40)  # bright: luminance above half
    box[44:60, 4:30] = (200, 0, 40)  # dark red: luminance below half, kept
    PIL.Image.fromarray(box, "RGB").save(folder / "mask_rgb_box_64.png")
    y, x = np.mgrid[0:64, 0:64]
    pattern = np.stack([(x // 8 % 2) * 255, (y // 8 % 2) * 255, np.full_like(x, 128)], -1).astype(np.uint8)
    PIL.Image.fromarray(pattern, "RGB").save(folder / "reference_64.png")


class Recorder:
    """Keeps what prepare_latents and prepare_mask_latents return, unchanged."""

    def __init__(self, pipe):
        self.tensors = {}
        self.pipe = pipe
        self.saved = {}
        for name, after in (("prepare_latents", self._latents), ("prepare_mask_latents", self._mask)):
            original = getattr(pipe, name)
            self.saved[name] = original

            def wrapper(*args, _original=original, _after=after, **kwargs):
                result = _original(*args, **kwargs)
                _after(result)
                return result

            setattr(pipe, name, wrapper)

    def _latents(self, result):
        self.tensors["source_latents"] = result[2].clone()

    def _mask(self, result):
        self.tensors["mask"] = result.clone()

    def close(self):
        for name, original in self.saved.items():
            setattr(self.pipe, name, original)


def run_case(case: dict, dtype_name: str, out: Path, inputs: Path, pipes: dict) -> dict:
    from diffusers import Flux2KleinInpaintPipeline

    model = case.get("model", "distilled")
    key = (model, dtype_name)
    if key not in pipes:
        pipes[key] = Flux2KleinInpaintPipeline.from_pretrained(str(MODEL_FOLDERS[model]),
                                                               torch_dtype=DTYPES[dtype_name])
    pipe = pipes[key]
    name = f"{case['name']}_{dtype_name}"
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    kwargs = dict(
        prompt=case["prompt"],
        image=PIL.Image.open(inputs / case["source"]),
        mask_image=PIL.Image.open(inputs / case["mask"]),
        strength=case["strength"],
        num_inference_steps=case["steps"],
        guidance_scale=case.get("guidance", 1.0),
        num_images_per_prompt=case.get("images", 1),
        generator=torch.Generator("cpu").manual_seed(case["seed"]),
        max_sequence_length=32,
        output_type="pil",
    )
    if "padding_mask_crop" in case:
        kwargs["padding_mask_crop"] = case["padding_mask_crop"]
    if "reference" in case:
        kwargs["image_reference"] = PIL.Image.open(inputs / case["reference"])
    recorder = Recorder(pipe)
    final = {}

    def on_step_end(p, i, t, callback_kwargs):
        final["latents"] = callback_kwargs["latents"].clone()
        return {}

    # The run's size (with padding_mask_crop not the output's): the source floored to 16s.
    source = PIL.Image.open(inputs / case["source"])
    pipe_run = dict(width=source.width // 16 * 16, height=source.height // 16 * 16)

    try:
        images = pipe(callback_on_step_end=on_step_end, callback_on_step_end_tensor_inputs=["latents"],
                      **kwargs).images
    finally:
        recorder.close()
    tensors = dict(recorder.tensors, final_latents=final["latents"])
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(images):
        file = f"image_{i}.png"
        img.save(folder / file)
        outputs.append(file)
    return dict(name=name, model=MODEL_FOLDERS[model].name, dtype=dtype_name, prompt=case["prompt"],
                seed=case["seed"], steps=case["steps"], strength=case["strength"],
                guidance=case.get("guidance", 1.0), images_per_prompt=case.get("images", 1),
                max_sequence_length=32, source=case["source"], mask=case["mask"],
                reference=case.get("reference"), width=images[0].width, height=images[0].height,
                padding_mask_crop=case.get("padding_mask_crop"), run_width=pipe_run["width"],
                run_height=pipe_run["height"], outputs=outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.out.exists():
        shutil.rmtree(args.out)
    inputs = args.out / "inputs"
    make_inputs(inputs)
    (inputs / "mask_band_100x75.png").unlink()  # FLUX.1's (dump_flux1_inpaint.py)
    import diffusers
    import transformers

    pipes = {}
    cases = []
    for case in CASES:
        for dtype_name in ["f32"] + (["bf16"] if case.get("bf16") else []):
            cases.append(run_case(case, dtype_name, args.out, inputs, pipes))
            print("wrote", cases[-1]["name"])
    manifest = dict(generated_by="tools/reference/dump_klein_inpaint.py",
                    versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                  transformers=transformers.__version__, numpy=np.__version__,
                                  pillow=PIL.__version__),
                    cases=cases)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
