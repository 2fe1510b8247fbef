#!/usr/bin/env python3
"""Quality of each step cache against the uncached run on the trained demo model (a klein base
model: CFG, 50 steps), for docs/requests.md's table (issue 47 item 6).

20 held-out evaluation prompts (evaluate.py's), one `fluxrt generate` call per setting with all 20
prompts as one batch (64x64, 64 text tokens, seed 1), then PSNR and SSIM (11x11 gaussian, sigma
1.5, the definition of tests/support/image_compare.h) of every image against the uncached one, and
the share of steps each setting skipped. MagCache runs on ratios `fluxrt calibrate-cache` measures
on the same model first. A batch of 20 decides First-Block Cache from the whole batch's residual,
as diffusers does for a 20-prompt call.

  python3 tools/demo_model/step_cache_quality.py [--fluxrt build/release/fluxrt] [--out DIR]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))

SETTINGS = [
    ("none", None),
    ("first-block (default 0.05)", "first-block"),
    ("first-block 0.1", "first-block:threshold=0.1"),
    ("taylorseer (defaults)", "taylorseer"),
    ("taylorseer lite (defaults)", "taylorseer:use_lite_mode=true"),
    ("mag (defaults, calibrated ratios)", "mag:mag_ratios={ratios}"),
]


def ssim_channel(a, b):
    from numpy.lib.stride_tricks import sliding_window_view

    x = np.arange(11) - 5
    g = np.exp(-(x * x) / (2 * 1.5 ** 2))
    w = np.outer(g, g)
    w /= w.sum()

    def filt(img):
        return np.einsum("ijkl,kl->ij", sliding_window_view(img, (11, 11)), w)

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_a, mu_b = filt(a), filt(b)
    va = filt(a * a) - mu_a ** 2
    vb = filt(b * b) - mu_b ** 2
    cov = filt(a * b) - mu_a * mu_b
    s = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a ** 2 + mu_b ** 2 + c1) * (va + vb + c2))
    return s.mean()


def metrics(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    mse = np.mean((a - b) ** 2)
    psnr = float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)
    return psnr, np.mean([ssim_channel(a[..., c], b[..., c]) for c in range(3)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fluxrt", default=str(REPO / "build" / "release" / "fluxrt"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/step_cache_quality"))
    args = parser.parse_args()
    from evaluate import evaluation_prompts

    args.out.mkdir(parents=True, exist_ok=True)
    prompts = [p for p, _, _ in evaluation_prompts(20)]
    (args.out / "prompts.txt").write_text("\n".join(prompts) + "\n")
    common = ["--model", str(REPO / "models" / "demo"), "--size", "64x64", "--max-sequence-length", "64",
              "--steps", "50", "--seed", "1"]
    ratios = args.out / "demo-ratios.json"
    subprocess.run([args.fluxrt, "calibrate-cache", *common, "--prompt", prompts[0], "--out", str(ratios)],
                   check=True)
    rows = []
    reference = None
    for name, cache in SETTINGS:
        folder = args.out / name.split(" ")[0].replace("-", "_") / (cache or "none").replace("/", "_")[:40]
        folder.mkdir(parents=True, exist_ok=True)
        cmd = [args.fluxrt, "generate", *common, "--prompts-file", str(args.out / "prompts.txt"), "--out",
               str(folder), "--filename", "{index}.png", "--profile", str(folder / "timing.json"), "-q"]
        if cache:
            cmd += ["--cache", cache.format(ratios=ratios)]
        subprocess.run(cmd, check=True)
        images = [np.asarray(Image.open(folder / f"{i}.png").convert("RGB")) for i in range(len(prompts))]
        timing = json.loads((folder / "timing.json").read_text())["run"]
        steps = timing.get("cache_steps") or "F" * 50
        if reference is None:
            reference = images
        scores = [metrics(a, b) for a, b in zip(images, reference)]
        psnr = [s[0] for s in scores if np.isfinite(s[0])]
        rows.append((name, steps.count("C") + steps.count("P"), len(steps), timing["denoise_total_s"],
                     np.mean(psnr) if psnr else float("inf"), min(psnr) if psnr else float("inf"),
                     np.mean([s[1] for s in scores]), min(s[1] for s in scores), steps))
    print("| setting | steps skipped | denoise s | PSNR dB mean / min | SSIM mean / min | decisions |")
    print("|---|---|---|---|---|---|")
    for name, skipped, total, seconds, pm, pmin, sm, smin, steps in rows:
        print(f"| {name} | {skipped} of {total} | {seconds:.1f} | {pm:.1f} / {pmin:.1f} | {sm:.4f} / {smin:.4f} | "
              f"`{steps}` |")


if __name__ == "__main__":
    main()
