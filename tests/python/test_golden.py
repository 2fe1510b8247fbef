"""The tiny golden models through the Python package match diffusers' checked-in images (the
cases of tests/data/klein_pipeline and tests/data/flux1_pipeline, f32: every pixel within 2/255,
docs/numerics.md), exercising the argument mapping: prompts, batches, negative prompts with CFG,
reference images (klein), img2img and true CFG (FLUX.1), klein and FLUX.1 inpainting through
fluxrt.Flux2KleinInpaintPipeline / FluxInpaintPipeline (tests/data/klein_inpaint, flux1_inpaint; one
case each with padding_mask_crop),
FLUX.1 Fill through fluxrt.FluxFillPipeline (tests/data/flux1_fill), FLUX.1 Kontext through
fluxrt.FluxKontextPipeline (tests/data/flux1_kontext) and klein-9B-KV's reference K/V caching through
fluxrt.Flux2KleinKVPipeline (tests/data/klein_kv), with diffusers' argument names."""

import json
from functools import lru_cache

import numpy as np
import pytest
from PIL import Image

import fluxrt
from conftest import DATA, MODELS

KLEIN_CASES = ["t2i_64_red_f32", "ref_64_f32", "batch_2x2_f32", "base_cfg_negative_f32"]
FLUX1_CASES = ["dev_64_red_f32", "schnell_64_f32", "dev_true_cfg_f32", "dev_img2img_s06_f32"]
INPAINT_CASES = ["soft_disc_f32", "rgb_mask_reference_f32", "base_cfg_f32", "crop_corner_f32"]
FLUX1_INPAINT_CASES = ["dev_soft_disc_f32", "dev_resized_f32", "schnell_rgb_mask_f32", "dev_crop_band_f32"]
KV_CASES = ["one_ref_f32", "two_refs_f32", "one_ref_two_images_f32"]
FILL_CASES = ["soft_disc_f32", "resized_s08_f32"]
KONTEXT_CASES = ["square_f32", "max_area_f32"]


@lru_cache(maxsize=None)
def pipeline(model):
    pipe = fluxrt.FluxPipeline.from_pretrained(MODELS / model, dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


def case(folder, name):
    manifest = json.loads((DATA / folder / "manifest.json").read_text())
    return next(c for c in manifest["cases"] if c["name"] == name)


def expect_close(images, folder, spec):
    outputs = spec.get("outputs", ["image_0.png"])
    assert len(images) == len(outputs)
    for image, name in zip(images, outputs):
        expected = np.asarray(Image.open(DATA / folder / spec["name"] / name).convert("RGB")).astype(int)
        diff = np.abs(np.asarray(image).astype(int) - expected).max()
        assert diff <= 2, f"{spec['name']}/{name}: max abs difference {diff}"


@pytest.mark.parametrize("name", KLEIN_CASES)
def test_klein_matches_diffusers(name):
    c = case("klein_pipeline", name)
    refs = [Image.open(DATA / "klein_pipeline" / r) for r in c.get("reference_images", [])]
    out = pipeline(c["model"])(
        prompt=c["prompts"], negative_prompt=c["negative_prompt"] or None, height=c["height_arg"],
        width=c["width_arg"], num_inference_steps=c["steps"], guidance_scale=c["guidance_scale"],
        num_images_per_prompt=c["images_per_prompt"], generator=c["seed"], image=refs or None,
        max_sequence_length=c["max_sequence_length"])
    expect_close(out.images, "klein_pipeline", c)


@pytest.mark.parametrize("name", KV_CASES)
def test_klein_kv_matches_diffusers(name):
    c = case("klein_kv", name)
    pipe = fluxrt.Flux2KleinKVPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    assert pipe.info["pipelines"] == ["Flux2KleinKVPipeline"]
    refs = [Image.open(DATA / "klein_pipeline" / "inputs" / r) for r in c["references"]]
    out = pipe(image=refs, prompt=c["prompt"], num_inference_steps=c["steps"],
               num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"])
    expect_close(out.images, "klein_kv", c)
    assert out.timings["run"]["reference_kv_bytes"] > 0


@pytest.mark.parametrize("name", FLUX1_CASES)
def test_flux1_matches_diffusers(name):
    c = case("flux1_pipeline", name)
    init = Image.open(DATA / "flux1_pipeline" / "inputs" / c["init_image"]) if "init_image" in c else None
    out = pipeline(c["model"])(
        prompt=c["prompts"], negative_prompt=c.get("negative_prompt"), height=c["height"], width=c["width"],
        num_inference_steps=c["steps"], guidance_scale=c.get("guidance"),
        true_cfg_scale=c.get("true_cfg_scale"),
        num_images_per_prompt=c.get("images_per_prompt", 1), generator=c["seed"], image=init,
        strength=c.get("strength"), max_sequence_length=c.get("max_sequence_length", 512))
    expect_close(out.images, "flux1_pipeline", c)


@pytest.mark.parametrize("name", INPAINT_CASES)
def test_klein_inpainting_matches_diffusers(name):
    c = case("klein_inpaint", name)
    inputs = DATA / "klein_inpaint" / "inputs"
    pipe = fluxrt.Flux2KleinInpaintPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=c["prompt"], image=Image.open(inputs / c["source"]), mask_image=Image.open(inputs / c["mask"]),
               image_reference=Image.open(inputs / c["reference"]) if c["reference"] else None,
               strength=c["strength"], num_inference_steps=c["steps"],
               guidance_scale=c["guidance"] if c["guidance"] != 1.0 else None,
               num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"], padding_mask_crop=c["padding_mask_crop"])
    expect_close(out.images, "klein_inpaint", c)
    assert out.images[0].info["mask"].endswith(c["mask"])


@pytest.mark.parametrize("name", FLUX1_INPAINT_CASES)
def test_flux1_inpainting_matches_diffusers(name):
    c = case("flux1_inpaint", name)
    inputs = DATA / "flux1_inpaint" / "inputs"
    pipe = fluxrt.FluxInpaintPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=c["prompt"], image=Image.open(inputs / c["source"]), mask_image=Image.open(inputs / c["mask"]),
               height=c["height"], width=c["width"], strength=c["strength"], num_inference_steps=c["steps"],
               guidance_scale=c["guidance"] if c["model"] == "flux1-dev-tiny" else None,
               num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"], padding_mask_crop=c["padding_mask_crop"])
    expect_close(out.images, "flux1_inpaint", c)


@pytest.mark.parametrize("name", FILL_CASES)
def test_flux1_fill_matches_diffusers(name):
    c = case("flux1_fill", name)
    inputs = DATA / "flux1_fill" / "inputs"
    pipe = fluxrt.FluxFillPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=c["prompt"], image=Image.open(inputs / c["source"]), mask_image=Image.open(inputs / c["mask"]),
               height=c["height"], width=c["width"], strength=c["strength"], num_inference_steps=c["steps"],
               guidance_scale=c["guidance"], num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"])
    expect_close(out.images, "flux1_fill", c)


@pytest.mark.parametrize("name", KONTEXT_CASES)
def test_flux1_kontext_matches_diffusers(name):
    c = case("flux1_kontext", name)
    pipe = fluxrt.FluxKontextPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=c["prompt"], image=Image.open(DATA / "flux1_kontext" / "inputs" / c["image"]),
               negative_prompt=c["negative_prompt"], true_cfg_scale=c["true_cfg"], height=c["height"],
               width=c["width"], num_inference_steps=c["steps"], guidance_scale=c["guidance"],
               num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"], max_area=c["max_area"] or c["width"] * c["height"])
    assert out.images[0].size == tuple(c["output_size"])
    expect_close(out.images, "flux1_kontext", c)


def test_flux1_kontext_max_area_defaults_to_diffusers():
    # diffusers' FluxKontextPipeline rescales any size to max_area = 1024 x 1024 unless told.
    c = case("flux1_kontext", "square_f32")
    pipe = fluxrt.FluxKontextPipeline.from_pretrained(MODELS / c["model"], dtype="float32")
    r = pipe._requests(c["prompt"], None, 48, 96, 1, None, None, 1, 0,
                       Image.open(DATA / "flux1_kontext" / "inputs" / c["image"]), None, 32, [])[0][0]
    plan = pipe._engine.plan(r)
    assert (plan["width"], plan["height"]) == (1440, 720)  # 96x48 at 1024^2 pixels: 1448.2 x 724.1
    with pytest.raises(fluxrt.InvalidArgumentError, match="max_area"):
        fluxrt.FluxPipeline.from_pretrained(MODELS / "flux1-dev-tiny", dtype="float32")(
            "x", max_area=4096, num_inference_steps=1)


def test_inpainting_bad_masks_name_the_field():
    inpaint = fluxrt.Flux2KleinInpaintPipeline.from_pretrained(MODELS / "flux2-klein-tiny", dtype="float32")
    inpaint.set_progress_bar_config(disable=True)
    source = Image.open(DATA / "klein_inpaint" / "inputs" / "source_64.png")
    with pytest.raises(fluxrt.InvalidArgumentError, match="must match") as small:
        inpaint("x", image=source, mask_image=Image.new("L", (32, 64), 255), num_inference_steps=1)
    assert small.value.field == "mask"
    with pytest.raises(fluxrt.InvalidArgumentError, match="mask_image must be a PIL image"):
        inpaint("x", image=source, mask_image="mask.png", num_inference_steps=1)
    with pytest.raises(fluxrt.InvalidArgumentError, match="mask_image is required"):
        inpaint("x", image=source, num_inference_steps=1)
    with pytest.raises(fluxrt.InvalidArgumentError, match="repaints nothing") as empty:
        inpaint("x", image=source, mask_image=Image.new("L", (64, 64), 0), num_inference_steps=1,
                padding_mask_crop=4)
    assert empty.value.field == "padding_mask_crop"


def test_text_encoder_file_gives_diffusers_image():
    """text_encoder=: the tiny klein's Qwen3 as a BF16 GGUF in llama.cpp's names
    (tools/reference/make_tiny_encoder_gguf.py) in place of the folder's text_encoder/."""
    c = case("klein_pipeline", "t2i_64_red_f32")
    pipe = fluxrt.FluxPipeline.from_pretrained(MODELS / c["model"], dtype="float32",
                                               text_encoder=DATA / "gguf" / "klein-tiny-qwen3-bf16.gguf")
    pipe.set_progress_bar_config(disable=True)
    out = pipe(prompt=c["prompts"], height=c["height_arg"], width=c["width_arg"],
               num_inference_steps=c["steps"], guidance_scale=c["guidance_scale"],
               num_images_per_prompt=c["images_per_prompt"], generator=c["seed"],
               max_sequence_length=c["max_sequence_length"])
    expect_close(out.images, "klein_pipeline", c)
