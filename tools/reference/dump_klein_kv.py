#!/usr/bin/env python3
"""Ground truth for FLUX.2-klein-9B-KV: diffusers' own Flux2KleinKVPipeline on the tiny random
klein weights run as a KV model (tests/data/models/flux2-klein-kv-tiny: flux2-klein-tiny's
components under a model_index.json naming Flux2KleinKVPipeline), for
tests/pipelines/test_klein_kv_golden.cpp.

Writes tests/data/klein_kv/:
  manifest.json              every case: prompt, seed, steps, dtype, images per prompt, the
                             reference image files (tests/data/klein_pipeline/inputs), the output size
  <case>/image_<i>.png       diffusers' output_type="pil" images, saved with PIL
  <case>/intermediates.safetensors
                             prompt_embeds      [B, L, 24] encode_prompt's output
                             text_ids           [B, L, 4]
                             noise_tokens       [B, N, 128] prepare_latents' packed noise
                             latent_ids         [B, N, 4]
                             reference_latents  [B, R, 128] prepare_image_latents' packed latents
                             reference_ids      [B, R, 4]
                             timesteps          [steps] scheduler.timesteps
                             step<k>_velocity   [B, N, 128] the transformer's output at step k (1:
                                                the "extract" pass, later: "cached")
                             final_latents      [B, N, 128] the packed latents after the last step

The pipeline runs as is: the intermediates come from wrappers that call the pipeline's own methods
and return their results unchanged, and a forward hook on the transformer (which returns nothing).

Text K/V are not cached by diffusers, and caching them would change the image: the text stream's
modulation depends on the step's timestep and, from the second double block on, its tokens have
attended to the step's latents, so the text keys and values differ at every step.

  /work/refenv/bin/python tools/reference/dump_klein_kv.py [--out DIR]
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
MODEL = REPO / "tests" / "data" / "models" / "flux2-klein-kv-tiny"
INPUTS = REPO / "tests" / "data" / "klein_pipeline" / "inputs"
DEFAULT_OUT = REPO / "tests" / "data" / "klein_kv"

# Every case runs in f32; those with "bf16" also in bfloat16. No width/height: diffusers sizes the
# run from the first reference image (none: its 128 x vae_scale_factor default is too large here).
CASES = [
    dict(name="one_ref", prompt="make the sky blue", seed=1, steps=4, references=["ref_gradient_64.png"],
         bf16=True),
    # Two references of different sizes (the first floored 100x75 -> 96x64), t = 10 and 20.
    dict(name="two_refs", prompt="the stripes behind the disc", seed=2, steps=3,
         references=["ref_stripes_100x75.png", "ref_disc_rgba_64.png"], bf16=True),
    # Two images of one prompt share the request's references (and their cache).
    dict(name="one_ref_two_images", prompt="a red square", seed=3, steps=2, images=2,
         references=["ref_disc_rgba_64.png"]),
    # No reference: the standard forward of the KV pipeline.
    dict(name="t2i", prompt="a green field", seed=4, steps=3, references=[], width=64, height=48),
]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
MAX_SEQUENCE_LENGTH = 64


class Recorder:
    """Keeps what encode_prompt, prepare_latents and prepare_image_latents return, unchanged, and
    every transformer output."""

    def __init__(self, pipe):
        self.tensors = {}
        self.pipe = pipe
        self.saved = {}
        self.calls = 0
        for name, after in (("encode_prompt", self._prompt), ("prepare_latents", self._latents),
                            ("prepare_image_latents", self._references)):
            original = getattr(pipe, name)
            self.saved[name] = original

            def wrapper(*args, _original=original, _after=after, **kwargs):
                result = _original(*args, **kwargs)
                _after(result)
                return result

            setattr(pipe, name, wrapper)
        self.hook = pipe.transformer.register_forward_hook(self._velocity)

    def _prompt(self, result):
        self.tensors["prompt_embeds"] = result[0].clone()
        self.tensors["text_ids"] = result[1].clone()

    def _latents(self, result):
        self.tensors["noise_tokens"] = result[0].clone()
        self.tensors["latent_ids"] = result[1].clone()

    def _references(self, result):
        self.tensors["reference_latents"] = result[0].clone()
        self.tensors["reference_ids"] = result[1].clone()

    def _velocity(self, module, args, output):
        self.calls += 1
        self.tensors[f"step{self.calls}_velocity"] = output[0].clone()

    def close(self):
        for name, original in self.saved.items():
            setattr(self.pipe, name, original)
        self.hook.remove()


def run_case(case: dict, dtype_name: str, out: Path, pipes: dict) -> dict:
    from diffusers import Flux2KleinKVPipeline

    if dtype_name not in pipes:
        pipes[dtype_name] = Flux2KleinKVPipeline.from_pretrained(str(MODEL), torch_dtype=DTYPES[dtype_name])
    pipe = pipes[dtype_name]
    name = f"{case['name']}_{dtype_name}"
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    references = [PIL.Image.open(INPUTS / f).convert("RGB") for f in case["references"]]
    kwargs = dict(
        prompt=case["prompt"],
        num_inference_steps=case["steps"],
        num_images_per_prompt=case.get("images", 1),
        generator=torch.Generator("cpu").manual_seed(case["seed"]),
        max_sequence_length=MAX_SEQUENCE_LENGTH,
        output_type="pil",
    )
    if references:
        kwargs["image"] = references
    if "width" in case:
        kwargs["width"], kwargs["height"] = case["width"], case["height"]
    recorder = Recorder(pipe)
    final = {}

    def on_step_end(p, i, t, callback_kwargs):
        final["latents"] = callback_kwargs["latents"].clone()
        return {}

    try:
        images = pipe(callback_on_step_end=on_step_end, callback_on_step_end_tensor_inputs=["latents"],
                      **kwargs).images
    finally:
        recorder.close()
    tensors = dict(recorder.tensors, final_latents=final["latents"],
                   timesteps=pipe.scheduler.timesteps.clone().float())
    save_file({k: v.contiguous() for k, v in sorted(tensors.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(images):
        file = f"image_{i}.png"
        img.save(folder / file)
        outputs.append(file)
    return dict(name=name, model=MODEL.name, dtype=dtype_name, prompt=case["prompt"], seed=case["seed"],
                steps=case["steps"], images_per_prompt=case.get("images", 1),
                max_sequence_length=MAX_SEQUENCE_LENGTH, references=case["references"],
                width_arg=case.get("width"), height_arg=case.get("height"), width=images[0].width,
                height=images[0].height, outputs=outputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    import diffusers
    import transformers

    pipes = {}
    cases = []
    for case in CASES:
        for dtype_name in ["f32"] + (["bf16"] if case.get("bf16") else []):
            cases.append(run_case(case, dtype_name, args.out, pipes))
            print("wrote", cases[-1]["name"])
    manifest = dict(generated_by="tools/reference/dump_klein_kv.py",
                    versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                                  transformers=transformers.__version__, numpy=np.__version__,
                                  pillow=PIL.__version__),
                    cases=cases)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
