#!/usr/bin/env python3
"""PIL Lanczos resampling and Flux2ImageProcessor reference-image preprocessing goldens.

Writes small PNG pairs under tests/data/klein_pipeline_resize/ for
tests/pipelines/test_klein_pipeline.cpp:
  <case>_in.png / <case>_out.png   PIL Image.resize((w, h), LANCZOS) on RGB, RGBA and L images
  preprocess_in.png / preprocess_out.png
                                   diffusers Flux2KleinPipeline step 4 on an image above 1024^2
                                   pixels: _resize_to_target_area, floor to 16, "crop" preprocess;
                                   the output PNG holds the processor's [-1, 1] tensor mapped back
                                   to 8 bits (checked here to be exact).
cases.json lists the sizes. Deterministic (fixed numpy seed). Run with the reference venv:
  python tools/reference/dump_klein_resize.py [--out DIR]
"""

import argparse
import json
from pathlib import Path

import numpy as np
import PIL
import PIL.Image
import torch
from diffusers.pipelines.flux2.image_processor import Flux2ImageProcessor


def random_image(rng, mode, width, height):
    channels = {"L": 1, "RGB": 3, "RGBA": 4}[mode]
    data = rng.integers(0, 256, size=(height, width, channels), dtype=np.uint8)
    if mode == "RGBA":
        # Exercise the premultiplied path: transparent, opaque and partial alpha.
        alpha = rng.choice(np.array([0, 255, 1, 77, 128, 200], dtype=np.uint8), size=(height, width))
        data[..., 3] = alpha
    if channels == 1:
        data = data[..., 0]
    return PIL.Image.fromarray(data, mode=mode)


def smooth_image(width, height):
    # Compresses well as PNG, yet has detail at every scale for the filter to act on.
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    r = 127.5 + 127.5 * np.sin(x / 45.0) * np.cos(y / 60.0)
    g = 255.0 * x / width
    b = np.where(((x // 150) + (y // 150)) % 2 == 0, 230.0, 20.0)  # hard edges: Lanczos ringing
    rgb = np.stack([r, g, b], axis=-1).round().clip(0, 255).astype(np.uint8)
    return PIL.Image.fromarray(rgb, mode="RGB")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "tests/data/klein_pipeline_resize"))
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20260130)

    cases = []
    for name, mode, src, dst in [
        ("rgb_mixed", "RGB", (37, 29), (20, 31)),       # shrink x, enlarge y
        ("rgb_shrink", "RGB", (97, 61), (40, 25)),      # ~2.4x down: widened kernel
        ("rgb_enlarge", "RGB", (9, 7), (23, 16)),       # up-sampling: plain Lanczos-3 taps
        ("rgba_alpha", "RGBA", (33, 40), (17, 23)),     # premultiplied alpha
        ("gray_only_x", "L", (50, 20), (23, 20)),       # one pass only
        # Pillow 13 filters columns first when the height loses more than twice the width's pixels.
        ("rgb_rows_first", "RGB", (100, 75), (96, 64)),
        ("rgb_tall_rows_first", "RGB", (30, 90), (36, 40)),  # wider, much shorter
    ]:
        image = random_image(rng, mode, *src)
        image.save(out / f"{name}_in.png")
        image.resize(dst, PIL.Image.Resampling.LANCZOS).save(out / f"{name}_out.png")
        cases.append({"name": name, "mode": mode, "in": list(src), "out": list(dst)})

    # Flux2KleinPipeline.__call__ step 4 for one image above the target area.
    processor = Flux2ImageProcessor(vae_scale_factor=16)
    image = smooth_image(1100, 1000)
    image.save(out / "preprocess_in.png")
    img = image
    w, h = img.size
    if w * h > 1024 * 1024:
        img = processor._resize_to_target_area(img, 1024 * 1024)
        w, h = img.size
    w, h = w // 16 * 16, h // 16 * 16
    tensor = processor.preprocess(img, height=h, width=w, resize_mode="crop")  # [1, 3, h, w] in [-1, 1]
    u8 = ((tensor[0].permute(1, 2, 0).double() + 1) / 2 * 255).round().to(torch.uint8).numpy()
    back = torch.from_numpy(u8).permute(2, 0, 1).float() / 255.0 * 2.0 - 1.0
    assert torch.equal(back, tensor[0]), "8-bit round trip of the processor output is not exact"
    PIL.Image.fromarray(u8, mode="RGB").save(out / "preprocess_out.png")
    cases.append({"name": "preprocess", "mode": "RGB", "in": [1100, 1000], "out": [w, h]})

    meta = {"pillow": PIL.__version__, "cases": cases}
    (out / "cases.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
