#!/usr/bin/env python3
"""Reference images of the bundled demo model for tests/pipelines/test_demo_model*.cpp, rendered by
diffusers' Flux2KleinPipeline (the ground truth the C++ pipeline must reproduce).

  python tools/demo_model/dump_reference_images.py [--model models/demo] [--out tests/data/demo_model]

Writes <case>_<dtype>.png for each case below, cases.json with the exact settings (prompt,
seed, size, steps, guidance, max_sequence_length, dtype) and classifications.txt with what
shapes.classify says about each image (checks the C++ twin of the classifier). Fixed seeds: rerunning gives the same
files (the f32 ones bit for bit on the same torch build).
"""

import argparse
import json

import numpy as np
import torch
from PIL import Image

import common
import shapes

# Few steps keep the C++ test at a few seconds; reproduction does not need good pictures.
CASES = [
    dict(name="red_circle", prompt="a red circle on a blue background", seed=1, steps=4, guidance=4.0),
    dict(name="star_top_left", prompt="a small yellow star at the top left on a black background", seed=7,
         steps=4, guidance=4.0),
    dict(name="short_text", prompt="a large green square on the right on a white background", seed=3, steps=3,
         guidance=4.0, max_sequence_length=64),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=common.Path, default=common.REPO / "models" / "demo")
    parser.add_argument("--out", type=common.Path, default=common.REPO / "tests" / "data" / "demo_model")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    common.setup_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    from diffusers import Flux2KleinPipeline

    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    classifications = []
    for dtype_name, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        pipe = Flux2KleinPipeline.from_pretrained(args.model, dtype=dtype)
        pipe.set_progress_bar_config(disable=True)
        for case in CASES:
            settings = {**dict(height=64, width=64, max_sequence_length=512), **case}
            image = pipe(prompt=settings["prompt"], height=settings["height"], width=settings["width"],
                         num_inference_steps=settings["steps"], guidance_scale=settings["guidance"],
                         max_sequence_length=settings["max_sequence_length"],
                         generator=torch.Generator().manual_seed(settings["seed"]), output_type="np").images[0]
            pixels = np.round(np.clip(image, 0, 1) * 255).astype(np.uint8)
            file = f"{case['name']}_{dtype_name}.png"
            Image.fromarray(pixels).save(args.out / file)
            records.append(dict(settings, dtype=dtype_name, file=file))
            got = shapes.classify(pixels)
            h, v = got["position"] or (0, 0)
            classifications.append(f"{file} {got['background']} {got['shape_colour'] or 'none'} {h} {v} "
                                   f"{got['shape_pixels']}")
            print(f"{file}: {settings['prompt']!r} mean {pixels.mean():.1f}")
    (args.out / "cases.json").write_text(json.dumps(records, indent=1) + "\n")
    # shapes.classify on each image: the C++ twin of the classifier must say the same.
    (args.out / "classifications.txt").write_text(
        "# file background shape_colour horizontal vertical shape_pixels (shapes.classify)\n"
        + "\n".join(classifications) + "\n")


if __name__ == "__main__":
    main()
