#!/usr/bin/env python3
"""Ground truth for the whole FLUX.2-klein pipeline: diffusers' own Flux2KleinPipeline on the tiny
random klein folders, rendered in float32 and bfloat16, for tests/pipelines/test_klein_pipeline_golden.cpp.

Writes tests/data/klein_pipeline/:
  manifest.json                    every case: prompts, seed, size, steps, guidance, dtype, batch,
                                   reference images, max_sequence_length, output files, and the
                                   reference's own bf16-vs-f32 error (docs/numerics.md rule for
                                   ill-conditioned tiny models)
  inputs/*.png                     reference images (made here from a formula, deterministic)
  <case>/image_<i>.png             diffusers' output_type="pil" images, saved with PIL
  <case>/intermediates.safetensors where the pipeline is at each stage (see INTERMEDIATES below)
  image_metrics.json               max abs / PSNR / SSIM of formula-made image pairs, computed by the
                                   numpy SSIM below, for tests/unit/test_image_compare.cpp

and tests/data/models/flux2-klein-base-tiny/ (model_index.json with is_distilled false; relative
symlinks to the distilled tiny folder's components, which are the same weights), and
tests/data/models/flux2-klein-vae3-tiny/ (the distilled folder's components by symlink, but its own
3-level VAE: vae_scale_factor 4, 8 pixels per latent token, as in a small retrained demo model).

Nothing here changes what the pipeline computes: the intermediates are taken with wrappers that
call the original method and keep its return value, a forward hook, and callback_on_step_end
(which returns nothing, so the latents stay the pipeline's own).

  /work/refenv/bin/python tools/reference/dump_klein_pipeline.py [--out DIR] [--only CASE ...]

--only runs just the named cases (names without the _f32/_bf16 suffix) and merges their entries
into the existing manifest.json, leaving every other case's files untouched.
"""

import argparse
import json
import math
import os
import shutil
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
DISTILLED = MODELS / "flux2-klein-tiny"
BASE = MODELS / "flux2-klein-base-tiny"
VAE3 = MODELS / "flux2-klein-vae3-tiny"
MODEL_FOLDERS = {"distilled": DISTILLED, "base": BASE, "vae3": VAE3}
DEFAULT_OUT = REPO / "tests" / "data" / "klein_pipeline"

# What each intermediates.safetensors holds (shapes in PyTorch order; B = images in the batch,
# N = (H/(2f))*(W/(2f)) image tokens (f = vae_scale_factor, 8 unless the case says), L = max_sequence_length, R = reference tokens; dtype = the run's
# dtype unless noted):
INTERMEDIATES = {
    "prompt_embeds": "[B, L, 24] Flux2KleinPipeline.encode_prompt output (after num_images_per_prompt)",
    "negative_prompt_embeds": "[B, L, 24] CFG cases only",
    "text_ids": "[B, L, 4] i64",
    "noise": "[B, 128, H/16, W/16] randn_tensor output (prepare_latents, before packing)",
    "latent_ids": "[B, N, 4] i64",
    "reference_latents": "[B, R, 128] packed, BN-normalised reference latents (VAE dtype)",
    "reference_ids": "[B, R, 4] i64",
    "sigmas": "[steps + 1] f32 scheduler.sigmas",
    "timesteps": "[steps] f32 scheduler.timesteps",
    "step<k>_velocity": "[B, N, 128] conditional transformer output of step k (1-based), image rows only",
    "step<k>_velocity_uncond": "[B, N, 128] CFG cases: the unconditional output",
    "step<k>_latents": "[B, N, 128] packed latents after step k",
    "final_latents": "[B, 128, H/16, W/16] unpacked latents before BN de-normalisation",
}

PROMPT_RED = "a red circle on a blue background"
PROMPT_NON_ASCII = "Ein Fuchs im Schnee \u2014 \u96ea\u306e\u4e2d\u306e\u72d0 \U0001f98a, caf\u00e9 cr\u00e8me"

# One entry per case; every case runs in f32 and (unless "dtypes" says otherwise) in bf16.
# width/height None: not passed to diffusers (the reference size, or the model default).
# max_sequence_length None: diffusers' default (512).
CASES = [
    dict(name="t2i_64_red", prompts=[PROMPT_RED], seed=0, width=64, height=64, steps=4),
    # guidance 4 on the distilled model: diffusers ignores it (no CFG) - the C++ side must too.
    dict(name="t2i_empty_prompt", prompts=[""], seed=42, width=64, height=64, steps=2, guidance=4.0),
    dict(name="t2i_non_ascii_96x64", prompts=[PROMPT_NON_ASCII], seed=7, width=96, height=64, steps=3,
         max_sequence_length=64),
    dict(name="t2i_64x128", prompts=["a tall tower"], seed=1234, width=64, height=128, steps=2,
         max_sequence_length=32),
    dict(name="t2i_128", prompts=["a green field under a grey sky"], seed=3, width=128, height=128, steps=4,
         max_sequence_length=64),
    # Two prompts x two images: order p0 p0 p1 p1, one noise draw for the whole batch.
    dict(name="batch_2x2", prompts=["a cat", "a dog"], images_per_prompt=2, seed=11, width=64, height=64,
         steps=2, max_sequence_length=32),
    # Base variant: true CFG, the default negative prompt "".
    dict(name="base_cfg", model="base", prompts=["a lighthouse at dusk"], seed=5, width=64, height=64, steps=3,
         guidance=4.0, max_sequence_length=64),
    # Base variant with a negative prompt (diffusers takes it as negative_prompt_embeds made by
    # the pipeline's own encode_prompt) and two prompts.
    dict(name="base_cfg_negative", model="base", prompts=["a boat", "a bridge"], negative_prompt="blurry, dark",
         seed=9, width=96, height=64, steps=3, guidance=3.5, max_sequence_length=32),
    # Reference image; the output size defaults to the reference's size.
    dict(name="ref_64", prompts=["make it blue"], seed=21, steps=2, references=["ref_gradient_64.png"],
         max_sequence_length=32),
    # Two references; the first (100x75) is floored to 96x64 and centre-cropped by
    # Flux2ImageProcessor, the second is RGBA (alpha dropped); output size = first reference's.
    dict(name="ref_crop_two", prompts=["combine both"], seed=33, steps=2,
         references=["ref_stripes_100x75.png", "ref_disc_rgba_64.png"], max_sequence_length=32),
    # Reference with an explicit output size different from the reference.
    dict(name="ref_64_out_128x64", prompts=["wider"], seed=4, width=128, height=64, steps=2,
         references=["ref_gradient_64.png"], max_sequence_length=32, dtypes=["f32"]),
    # A 3-level VAE (vae_scale_factor 4): 64x64 pixels are 8x8 tokens, the noise is [B, 128, H/8, W/8].
    dict(name="vae3_t2i_64", model="vae3", prompts=[PROMPT_RED], seed=0, width=64, height=64, steps=2,
         max_sequence_length=32),
    # ... and its reference preprocessing floors to multiples of 8: 100x75 -> 96x72 (72 is no
    # multiple of 16), which is also the output size.
    dict(name="vae3_ref_stripes", model="vae3", prompts=["combine both"], seed=33, steps=2,
         references=["ref_stripes_100x75.png"], max_sequence_length=32, dtypes=["f32"]),
]

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------
# Image metrics (numpy only): the definitions tests/support/image_compare.cpp implements.


def gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    x = np.arange(size, dtype=np.float64) - (size - 1) / 2.0
    g = np.exp(-(x * x) / (2.0 * sigma * sigma))
    g /= g.sum()
    return np.outer(g, g)


def filter_valid(img: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Correlation over every window position fully inside the image (no padding)."""
    k = window.shape[0]
    h, w = img.shape
    out = np.zeros((h - k + 1, w - k + 1), dtype=np.float64)
    for dy in range(k):
        for dx in range(k):
            out += window[dy, dx] * img[dy:dy + h - k + 1, dx:dx + w - k + 1]
    return out


def ssim_channel(a: np.ndarray, b: np.ndarray) -> float:
    """Wang et al. 2004 SSIM on 8-bit values (L = 255): gaussian window 11, sigma 1.5, K1 0.01,
    K2 0.03, local statistics weighted by the window (biased), mean over the valid positions."""
    c1 = (0.01 * 255.0) ** 2
    c2 = (0.03 * 255.0) ** 2
    win = gaussian_window()
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    mu_a = filter_valid(a, win)
    mu_b = filter_valid(b, win)
    var_a = filter_valid(a * a, win) - mu_a * mu_a
    var_b = filter_valid(b * b, win) - mu_b * mu_b
    cov = filter_valid(a * b, win) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a * mu_a + mu_b * mu_b + c1) * (var_a + var_b + c2))
    return float(s.mean())


def image_metrics(a: np.ndarray, b: np.ndarray) -> dict:
    """a, b: [H, W, C] uint8. SSIM is the mean of the per-channel SSIMs."""
    assert a.shape == b.shape and a.dtype == np.uint8 and b.dtype == np.uint8
    d = a.astype(np.float64) - b.astype(np.float64)
    mse = float((d * d).mean())
    psnr = math.inf if mse == 0 else 10.0 * math.log10(255.0 * 255.0 / mse)
    ssim = float(np.mean([ssim_channel(a[..., c], b[..., c]) for c in range(a.shape[2])]))
    return dict(max_abs=int(np.abs(d).max()), mse=mse, psnr=psnr, ssim=ssim)


def formula_image(width: int, height: int, channels: int, seed: int) -> np.ndarray:
    """A deterministic test image both Python and C++ make from integer arithmetic: smooth ramps
    plus a 32-bit LCG texture (tests/unit/test_image_compare.cpp has the same function)."""
    out = np.zeros((height, width, channels), dtype=np.uint8)
    state = seed & 0xFFFFFFFF
    for y in range(height):
        for x in range(width):
            for c in range(channels):
                state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
                ramp = (x * 255 // max(width - 1, 1) + y * 128 // max(height - 1, 1) + c * 60) % 256
                noise = (state >> 24) % 33 - 16  # [-16, 16]
                out[y, x, c] = min(255, max(0, ramp + noise))
    return out


def write_image_metrics(out: Path) -> None:
    pairs = []
    for width, height, channels, seed_a, seed_b in [(32, 24, 3, 1, 2), (40, 40, 3, 7, 7), (17, 29, 1, 3, 99),
                                                   (64, 48, 3, 5, 6)]:
        a = formula_image(width, height, channels, seed_a)
        b = formula_image(width, height, channels, seed_b)
        m = image_metrics(a, b)
        pairs.append(dict(width=width, height=height, channels=channels, seed_a=seed_a, seed_b=seed_b, **m))
    # A gross distortion: b = 255 - a (SSIM goes negative).
    a = formula_image(24, 24, 3, 13)
    pairs.append(dict(width=24, height=24, channels=3, seed_a=13, seed_b=-1, inverted=True,
                      **image_metrics(a, 255 - a)))
    for p in pairs:
        if math.isinf(p["psnr"]):
            p["psnr"] = None  # JSON has no inf; null means "identical"
    (out / "image_metrics.json").write_text(json.dumps(dict(
        definition="max abs 8-bit difference; PSNR = 10 log10(255^2 / MSE) over all samples; SSIM: "
                   "gaussian window 11, sigma 1.5, K1 0.01, K2 0.03, L 255, valid positions only, "
                   "mean over channels; images from formula_image(width, height, channels, seed)",
        pairs=pairs), indent=1) + "\n")


# ----------------------------------------------------------------------------------------------
# Inputs


def make_reference_inputs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:64, 0:64]
    grad = np.stack([x * 4, y * 4, (x + y) * 2], axis=-1).clip(0, 255).astype(np.uint8)
    PIL.Image.fromarray(grad, "RGB").save(folder / "ref_gradient_64.png")

    y, x = np.mgrid[0:75, 0:100]
    stripes = np.stack([((x // 6) % 2) * 200 + 30, ((y // 5) % 3) * 90 + 20, (x * 2 + y) % 256],
                       axis=-1).clip(0, 255).astype(np.uint8)
    PIL.Image.fromarray(stripes, "RGB").save(folder / "ref_stripes_100x75.png")

    y, x = np.mgrid[0:64, 0:64]
    inside = ((x - 30) ** 2 + (y - 34) ** 2) < 22 ** 2
    rgba = np.zeros((64, 64, 4), dtype=np.uint8)
    rgba[..., 0] = np.where(inside, 240, 20)
    rgba[..., 1] = np.where(inside, 200, (x * 3) % 256)
    rgba[..., 2] = np.where(inside, 40, 160)
    rgba[..., 3] = np.where(inside, 255, 90)  # the pipeline drops alpha without compositing
    PIL.Image.fromarray(rgba, "RGBA").save(folder / "ref_disc_rgba_64.png")


def make_base_folder() -> None:
    """The base variant differs from the distilled one only in model_index.json's is_distilled."""
    BASE.mkdir(parents=True, exist_ok=True)
    index = json.loads((DISTILLED / "model_index.json").read_text())
    index["is_distilled"] = False
    (BASE / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    for component in ("scheduler", "text_encoder", "tokenizer", "transformer", "vae"):
        link = BASE / component
        target = Path("..") / DISTILLED.name / component
        if link.is_symlink() or link.exists():
            if link.is_symlink() and os.readlink(link) == str(target):
                continue
            raise SystemExit(f"{link} exists and is not the expected symlink to {target}")
        link.symlink_to(target, target_is_directory=True)


def make_vae3_folder() -> None:
    """The distilled tiny pipeline with a 3-level AutoencoderKLFlux2 (block_out_channels of three
    entries, so diffusers' vae_scale_factor is 4). Deterministic: fixed seeds, so a rerun writes the
    same weights."""
    from make_tiny_models import perturb_constants, tiny_flux2_vae

    VAE3.mkdir(parents=True, exist_ok=True)
    index = json.loads((DISTILLED / "model_index.json").read_text())
    (VAE3 / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    for component in ("scheduler", "text_encoder", "tokenizer", "transformer"):
        link = VAE3 / component
        target = Path("..") / DISTILLED.name / component
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        if link.is_symlink() or link.exists():
            raise SystemExit(f"{link} exists and is not the expected symlink to {target}")
        link.symlink_to(target, target_is_directory=True)
    vae = tiny_flux2_vae((8, 16, 16), seed=2031)  # three levels: spatial factor 4
    perturb_constants(vae, 2032)
    if (VAE3 / "vae").exists():
        shutil.rmtree(VAE3 / "vae")
    vae.eval().save_pretrained(VAE3 / "vae", safe_serialization=True)


# ----------------------------------------------------------------------------------------------
# Running one case


def unpack_tokens(packed: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """[B, h*w, C] -> [B, C, h, w] (inverse of Flux2KleinPipeline._pack_latents; exact)."""
    b, n, c = packed.shape
    assert n == h * w
    return packed.permute(0, 2, 1).reshape(b, c, h, w)


class Recorder:
    """Captures intermediates through wrappers that return the original results unchanged."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.tensors = {}
        self.encode_calls = []
        self.velocities = []  # transformer outputs in call order (image rows only)
        self.step = 0
        self.num_image_tokens = None
        self.latent_hw = None
        self._undo = []

        def wrap(obj, name, after):
            original = getattr(obj, name)

            def wrapper(*args, **kwargs):
                result = original(*args, **kwargs)
                after(result, args, kwargs)
                return result

            setattr(obj, name, wrapper)
            self._undo.append((obj, name))

        wrap(pipe, "encode_prompt", lambda r, a, k: self.encode_calls.append((r[0].clone(), r[1].clone())))
        wrap(pipe, "prepare_latents", self._on_latents)
        wrap(pipe, "prepare_image_latents", self._on_image_latents)
        self._hook = pipe.transformer.register_forward_hook(self._on_transformer, with_kwargs=True)

    def _on_latents(self, result, args, kwargs):
        packed, ids = result
        height = kwargs["height"]
        width = kwargs["width"]
        multiple = 2 * self.pipe.vae_scale_factor
        h, w = int(height) // multiple, int(width) // multiple
        self.latent_hw = (h, w)
        self.num_image_tokens = packed.shape[1]
        self.tensors["noise"] = unpack_tokens(packed, h, w).clone()
        self.tensors["latent_ids"] = ids.clone().contiguous()

    def _on_image_latents(self, result, args, kwargs):
        latents, ids = result
        self.tensors["reference_latents"] = latents.clone()
        self.tensors["reference_ids"] = ids.clone()

    def _on_transformer(self, module, args, kwargs, output):
        out = output[0] if isinstance(output, tuple) else output.sample
        self.velocities.append(out[:, : self.num_image_tokens].clone())

    def on_step_end(self, pipe, i, t, callback_kwargs):
        self.tensors[f"step{i + 1}_latents"] = callback_kwargs["latents"].clone()
        return {}

    def close(self):
        self._hook.remove()
        for obj, name in self._undo:
            delattr(obj, name)


def load_pipeline(model: str, dtype: torch.dtype):
    from diffusers import Flux2KleinPipeline

    return Flux2KleinPipeline.from_pretrained(str(MODEL_FOLDERS[model]), torch_dtype=dtype)


def run_case(case: dict, dtype_name: str, out: Path, pipelines: dict) -> dict:
    dtype = DTYPES[dtype_name]
    model = case.get("model", "distilled")
    key = (model, dtype_name)
    if key not in pipelines:
        pipelines[key] = load_pipeline(model, dtype)
    pipe = pipelines[key]
    cfg_wanted = model == "base" and case.get("guidance", 1.0) > 1.0
    max_len = case.get("max_sequence_length")
    kwargs = dict(
        prompt=case["prompts"] if len(case["prompts"]) > 1 else case["prompts"][0],
        num_inference_steps=case["steps"],
        guidance_scale=case.get("guidance", 1.0),
        num_images_per_prompt=case.get("images_per_prompt", 1),
        generator=torch.Generator("cpu").manual_seed(case["seed"]),
        output_type="pil",
    )
    if case.get("width") is not None:
        kwargs["width"] = case["width"]
    if case.get("height") is not None:
        kwargs["height"] = case["height"]
    if max_len is not None:
        kwargs["max_sequence_length"] = max_len
    refs = case.get("references", [])
    if refs:
        images = [PIL.Image.open(out / "inputs" / r) for r in refs]
        for img in images:
            img.load()
        kwargs["image"] = images if len(images) > 1 else images[0]

    negative = case.get("negative_prompt", "")
    recorder = Recorder(pipe)
    try:
        if negative:
            # diffusers' Flux2KleinPipeline has no negative_prompt argument (it always encodes "");
            # another negative prompt goes in as negative_prompt_embeds, made with the pipeline's
            # own encoder: one row per prompt (encode_prompt repeats it per image).
            neg_embeds = pipe._get_qwen3_prompt_embeds(
                pipe.text_encoder, pipe.tokenizer, [negative] * len(case["prompts"]),
                max_sequence_length=max_len or 512)
            kwargs["negative_prompt_embeds"] = neg_embeds
        recorder.encode_calls.clear()
        result = pipe(callback_on_step_end=recorder.on_step_end, callback_on_step_end_tensor_inputs=["latents"],
                      **kwargs)
    finally:
        recorder.close()

    steps = case["steps"]
    t = recorder.tensors
    t["prompt_embeds"], t["text_ids"] = recorder.encode_calls[0]
    forwards_per_step = 2 if cfg_wanted else 1
    assert len(recorder.encode_calls) == forwards_per_step, (case["name"], len(recorder.encode_calls))
    assert len(recorder.velocities) == steps * forwards_per_step
    if cfg_wanted:
        t["negative_prompt_embeds"] = recorder.encode_calls[1][0]
    for k in range(steps):
        t[f"step{k + 1}_velocity"] = recorder.velocities[k * forwards_per_step]
        if cfg_wanted:
            t[f"step{k + 1}_velocity_uncond"] = recorder.velocities[k * forwards_per_step + 1]
    t["sigmas"] = pipe.scheduler.sigmas.to(torch.float32).clone()
    t["timesteps"] = pipe.scheduler.timesteps.to(torch.float32).clone()
    h, w = recorder.latent_hw
    t["final_latents"] = unpack_tokens(t[f"step{steps}_latents"], h, w)

    name = f"{case['name']}_{dtype_name}"
    folder = out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in sorted(t.items())}, str(folder / "intermediates.safetensors"))
    outputs = []
    for i, img in enumerate(result.images):
        file = f"image_{i}.png"
        img.save(folder / file)
        outputs.append(file)
    width, height = result.images[0].size
    entry = dict(
        name=name,
        model=MODEL_FOLDERS[model].name,
        is_distilled=model != "base",
        dtype=dtype_name,
        prompts=case["prompts"],
        images_per_prompt=case.get("images_per_prompt", 1),
        batch=len(case["prompts"]) * case.get("images_per_prompt", 1),
        negative_prompt=negative,
        seed=case["seed"],
        width_arg=case.get("width"),
        height_arg=case.get("height"),
        width=width,
        height=height,
        steps=steps,
        guidance_scale=case.get("guidance", 1.0),
        used_cfg=cfg_wanted,
        max_sequence_length_arg=max_len,
        max_sequence_length=max_len or 512,
        reference_images=[f"inputs/{r}" for r in refs],
        outputs=outputs,
        intermediates="intermediates.safetensors",
    )
    if pipe.vae_scale_factor != 8:  # absent: 8 (the manifest entries made before this field)
        entry["vae_scale_factor"] = pipe.vae_scale_factor
    return entry


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a = a.double()
    b = b.double()
    return float((a - b).norm() / b.norm())


def add_reference_self_error(entries: list, out: Path) -> None:
    """For each bf16 case, how far the reference's own bf16 run is from its f32 run: the measure
    docs/numerics.md uses to widen a bf16 tolerance for an ill-conditioned tiny model."""
    from safetensors.torch import load_file

    by_name = {e["name"]: e for e in entries}
    for e in entries:
        if e["dtype"] != "bf16":
            continue
        twin = by_name.get(e["name"][: -len("_bf16")] + "_f32")
        if twin is None:
            continue
        a = load_file(str(out / e["name"] / "intermediates.safetensors"))
        b = load_file(str(out / twin["name"] / "intermediates.safetensors"))
        ssims = []
        max_abs = 0
        for fa, fb in zip(e["outputs"], twin["outputs"]):
            ia = np.asarray(PIL.Image.open(out / e["name"] / fa).convert("RGB"))
            ib = np.asarray(PIL.Image.open(out / twin["name"] / fb).convert("RGB"))
            m = image_metrics(ia, ib)
            ssims.append(m["ssim"])
            max_abs = max(max_abs, m["max_abs"])
        e["f32_twin"] = twin["name"]
        e["reference_bf16_vs_f32"] = dict(
            prompt_embeds_rel_l2=rel_l2(a["prompt_embeds"], b["prompt_embeds"]),
            step1_velocity_rel_l2=rel_l2(a["step1_velocity"], b["step1_velocity"]),
            final_latents_rel_l2=rel_l2(a["final_latents"], b["final_latents"]),
            image_min_ssim=min(ssims),
            image_max_abs=max_abs,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="+", metavar="CASE", help="run these cases only; merge into manifest.json")
    args = parser.parse_args()
    known = {c["name"] for c in CASES}
    for name in args.only or []:
        if name not in known:
            raise SystemExit(f"unknown case {name} (known: {', '.join(sorted(known))})")
    torch.manual_seed(0)
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    make_base_folder()
    make_vae3_folder()
    if not args.only:
        make_reference_inputs(out / "inputs")
        write_image_metrics(out)

    entries = []
    pipelines = {}
    for case in CASES:
        if args.only and case["name"] not in args.only:
            continue
        for dtype_name in case.get("dtypes", ["f32", "bf16"]):
            entry = run_case(case, dtype_name, out, pipelines)
            entries.append(entry)
            print(f"{entry['name']}: {entry['width']}x{entry['height']} x{entry['batch']}", flush=True)
    add_reference_self_error(entries, out)
    if args.only:
        # Keep every other case's entry as it is; replace or append the regenerated ones.
        old = json.loads((out / "manifest.json").read_text())["cases"]
        fresh = {e["name"]: e for e in entries}
        merged = [fresh.pop(e["name"], e) for e in old]
        entries = merged + [e for e in entries if e["name"] in fresh]

    import diffusers
    import transformers

    manifest = dict(
        generated_by="tools/reference/dump_klein_pipeline.py",
        versions=dict(torch=torch.__version__, diffusers=diffusers.__version__,
                      transformers=transformers.__version__, numpy=np.__version__, pillow=PIL.__version__),
        intermediates=INTERMEDIATES,
        cases=entries,
    )
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{len(entries)} cases, {total / 1e6:.2f} MB in {out}")


if __name__ == "__main__":
    main()
