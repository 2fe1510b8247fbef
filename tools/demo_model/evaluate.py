#!/usr/bin/env python3
"""Scores the demo model: renders evaluation prompts with diffusers' own Flux2KleinPipeline and
checks each image with the pixel classifier of shapes.py (background colour, shape colour,
rough position). By default (--pairs held-out) the prompts use shape/background colour pairs that
training never drew (shapes.is_held_out), so they test composition, not memory; --pairs seen
draws the pairs training saw instead.

  python tools/demo_model/evaluate.py [--model models/demo] [--num 100] [--steps 50] [--grid out.png]

Prints one line per prompt and the agreement fraction.
"""

import argparse
import time

import numpy as np
import torch

import common
import shapes


def evaluation_prompts(n: int, seed: int = 4000, held_out_pairs: bool = True):
    """n single-shape scenes with their captions, cycling through the colour pairs held out of
    training (or, held_out_pairs=False, through the pairs training draws)."""
    rng = np.random.default_rng(seed)
    pairs = [(c, b) for c in shapes.COLOUR_NAMES for b in shapes.COLOUR_NAMES
             if c != b and shapes.is_held_out(c, b) == held_out_pairs]
    out = []
    for i in range(n):
        colour, background = pairs[i % len(pairs)]
        spec = shapes.ShapeSpec(str(rng.choice(shapes.SHAPES)), colour, str(rng.choice(shapes.POSITION_NAMES)),
                                str(rng.choice(list(shapes.SIZES))))
        out.append((shapes.caption_single(spec, background, rng), spec, background))
    return out


def render(pipe, prompts, seeds, steps, guidance, size=64, batch=25):
    images = []
    for i in range(0, len(prompts), batch):
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds[i:i + batch]]
        out = pipe(prompt=list(prompts[i:i + batch]), height=size, width=size, num_inference_steps=steps,
                   guidance_scale=guidance, generator=gens, output_type="np").images
        images += [np.round(np.clip(im, 0, 1) * 255).astype(np.uint8) for im in out]
    return images


class ShortPadding:
    """Runs Flux2KleinPipeline unchanged except that the prompt embeddings it is given are padded
    to the longest prompt + 1 with the log-count bias of train_transformer.py on the padding
    columns: the same images as its own 512-token path (the transformer and the text encoder
    were built to make this exact), at a tenth of the cost on this CPU."""

    def __init__(self, pipe):
        from train_transformer import TextBatch, attention_bias

        self.pipe, self.text, self.attention_bias = pipe, TextBatch(pipe.tokenizer, pipe.text_encoder), attention_bias
        self.known = []

    def _hook(self, module, args, kwargs):
        embeds = kwargs["encoder_hidden_states"]
        for known, bias in self.known:
            if known.shape == embeds.shape and torch.equal(known, embeds):
                kwargs["joint_attention_kwargs"] = {"attention_mask": self.attention_bias(bias, kwargs["hidden_states"].shape[1])}
                return args, kwargs
        raise RuntimeError("prompt embeddings the short-padding hook did not make")

    def __call__(self, prompts, **kw):
        cond, cond_bias = self.text(prompts)
        uncond, uncond_bias = self.text([""] * len(prompts))
        self.known = [(cond, cond_bias), (uncond, uncond_bias)]
        handle = self.pipe.transformer.register_forward_pre_hook(self._hook, with_kwargs=True)
        try:
            return self.pipe(prompt_embeds=cond, negative_prompt_embeds=uncond, **kw)
        finally:
            handle.remove()


def render_short(short, prompts, seeds, steps, guidance, size=64, batch=50):
    images = []
    for i in range(0, len(prompts), batch):
        gens = [torch.Generator().manual_seed(int(s)) for s in seeds[i:i + batch]]
        out = short(list(prompts[i:i + batch]), height=size, width=size, num_inference_steps=steps,
                    guidance_scale=guidance, generator=gens, output_type="np").images
        images += [np.round(np.clip(im, 0, 1) * 255).astype(np.uint8) for im in out]
    return images


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=common.Path, default=common.REPO / "models" / "demo")
    parser.add_argument("--num", type=int, default=100)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--guidance", type=float, default=4.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", choices=["held-out", "seen"], default="held-out",
                        help="shape/background colour pairs of the prompts: never drawn in training, or drawn")
    parser.add_argument("--prompt-seed", type=int, default=4000,
                        help="seed of the prompt list: 4000 is the reported score's set; another seed gives a "
                             "disjoint validation set (to choose settings such as guidance without the score's prompts)")
    parser.add_argument("--first-seed", type=int, default=0, help="noise seed of the first image (seeds count up)")
    parser.add_argument("--grid", type=common.Path, default=None, help="save the images as one PNG grid")
    parser.add_argument("--full-padding", action="store_true",
                        help="let the pipeline pad every prompt to 512 tokens itself (same images, ~10x slower)")
    parser.add_argument("--check-short-padding", action="store_true",
                        help="first render 2 prompts both ways (4 steps) and report the largest pixel difference")
    args = parser.parse_args()
    common.setup_threads(args.threads)
    from diffusers import Flux2KleinPipeline

    pipe = Flux2KleinPipeline.from_pretrained(args.model, dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    cases = evaluation_prompts(args.num, seed=args.prompt_seed, held_out_pairs=args.pairs == "held-out")
    short = None if args.full_padding else ShortPadding(pipe)
    if args.check_short_padding:
        prompts = [c[0] for c in cases[:2]]
        a = render_short(short, prompts, [0, 1], 4, args.guidance)
        b = render(pipe, prompts, [0, 1], 4, args.guidance)
        diff = max(int(np.abs(x.astype(int) - y.astype(int)).max()) for x, y in zip(a, b))
        print(f"short padding vs the pipeline's own 512-token padding, 2 prompts x 4 steps: max |diff| {diff}/255")
    start = time.time()
    prompts, seeds = [c[0] for c in cases], list(range(args.first_seed, args.first_seed + len(cases)))
    if short is None:
        images = render(pipe, prompts, seeds, args.steps, args.guidance)
    else:
        images = render_short(short, prompts, seeds, args.steps, args.guidance)
    seconds = time.time() - start
    passed = 0
    for (prompt, spec, background), image in zip(cases, images):
        ok, got = shapes.agrees(image, spec, background)
        passed += ok
        print(f"{'PASS' if ok else 'FAIL'}  {prompt!r}: got background {got['background']}, shape "
              f"{got['shape_colour']} at {got['position']} ({got['shape_pixels']} px)")
    print(f"agreement: {passed}/{len(cases)} = {passed / len(cases):.2f} "
          f"({args.steps} steps, guidance {args.guidance}, 64x64, prompt seed {args.prompt_seed}, "
          f"seeds {seeds[0]}..{seeds[-1]}, {seconds:.0f} s)")
    if args.grid:
        from PIL import Image

        cols = 10
        rows = (len(images) + cols - 1) // cols
        grid = np.zeros((rows * 64, cols * 64, 3), np.uint8)
        for k, im in enumerate(images):
            grid[(k // cols) * 64:(k // cols + 1) * 64, (k % cols) * 64:(k % cols + 1) * 64] = im
        Image.fromarray(grid).save(args.grid)


if __name__ == "__main__":
    main()
