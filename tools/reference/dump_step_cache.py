#!/usr/bin/env python3
"""Ground truth for step caching: diffusers 0.42.1's own hooks (`transformer.enable_cache(...)` with
FirstBlockCacheConfig, TaylorSeerCacheConfig, MagCacheConfig) on the tiny random FLUX.1-dev and
klein-base folders, in float32, for tests/pipelines/test_step_cache_golden.cpp.

Writes tests/data/step_cache/:
  manifest.json        every case: model, prompt, seed, size, steps, guidance (CFG), the cache
                       config as fluxrt's field text and as diffusers' keywords, the decision of
                       every denoising step ("F" every branch ran the whole transformer, "C" every
                       branch reused the cache, "P" the branches differed), per branch, and for
                       First-Block Cache the relative L1 change each call measured (so a threshold
                       can be checked to sit far from every measured value)
  <case>/image_0.png   diffusers' output_type="pil" image

The decisions are read with wrappers around the hooks' own methods that call the original and keep
its result; nothing changes what the pipeline computes.

  /work/refenv/bin/python tools/reference/dump_step_cache.py [--out DIR] [--only CASE ...]
"""

import argparse
import json
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "data" / "models"
DEFAULT_OUT = REPO / "tests" / "data" / "step_cache"

PROMPT = "a red circle on a blue background"
# Magnitude ratios for the klein-base cases (12 steps): a made-up curve shaped like diffusers'
# FLUX_MAG_RATIOS (first 1, rising early, falling late), so that MagCache skips some middle steps.
KLEIN_RATIOS = [1.0, 1.08, 1.03, 1.01, 1.0, 0.995, 1.0, 0.99, 0.985, 0.97, 0.95, 0.9]

FLUX1 = dict(model="flux1-dev-tiny", width=64, height=64, steps=12, seed=3, guidance=3.5)
KLEIN = dict(model="flux2-klein-base-tiny", width=64, height=64, steps=12, seed=5, guidance=4.0)

# "cache" is fluxrt's field text (--cache NAME:key=value,...); "diffusers" the config class and its
# keywords. The thresholds sit far from every change the tiny models measure (see "fbc_changes").
CASES = [
    dict(name="flux1_first_block", **FLUX1, cache="first-block:threshold=0.45",
         diffusers=("FirstBlockCacheConfig", dict(threshold=0.45))),
    dict(name="flux1_first_block_true_cfg", **FLUX1, negative_prompt="blurry", true_cfg_scale=2.0,
         cache="first-block:threshold=0.45", diffusers=("FirstBlockCacheConfig", dict(threshold=0.45))),
    dict(name="flux1_taylorseer", **FLUX1, cache="taylorseer:cache_interval=3,disable_cache_before_step=2",
         diffusers=("TaylorSeerCacheConfig", dict(cache_interval=3, disable_cache_before_step=2))),
    dict(name="flux1_taylorseer_order2_f32_after", **FLUX1,
         cache="taylorseer:cache_interval=3,disable_cache_before_step=2,max_order=2,"
               "taylor_factors_dtype=float32,disable_cache_after_step=10",
         diffusers=("TaylorSeerCacheConfig", dict(cache_interval=3, disable_cache_before_step=2, max_order=2,
                                                  taylor_factors_dtype=torch.float32,
                                                  disable_cache_after_step=10))),
    dict(name="flux1_taylorseer_lite", **FLUX1,
         cache="taylorseer:cache_interval=4,disable_cache_before_step=3,use_lite_mode=true",
         diffusers=("TaylorSeerCacheConfig", dict(cache_interval=4, disable_cache_before_step=3,
                                                  use_lite_mode=True))),
    # FLUX.1 dev's shipped ratios (28), interpolated to 12 steps.
    dict(name="flux1_mag", **FLUX1, cache="mag:threshold=0.1,retention_ratio=0.2",
         diffusers=("MagCacheConfig", dict(threshold=0.1, retention_ratio=0.2, num_inference_steps=12,
                                            mag_ratios="FLUX_MAG_RATIOS"))),
    dict(name="klein_base_taylorseer", **KLEIN, cache="taylorseer:cache_interval=3,disable_cache_before_step=2",
         diffusers=("TaylorSeerCacheConfig", dict(cache_interval=3, disable_cache_before_step=2))),
    dict(name="klein_base_mag", **KLEIN, cache="mag:threshold=0.08,max_skip_steps=2,mag_ratios=" +
         ";".join(str(r) for r in KLEIN_RATIOS),
         diffusers=("MagCacheConfig", dict(threshold=0.08, max_skip_steps=2, num_inference_steps=12,
                                            mag_ratios=KLEIN_RATIOS))),
    dict(name="klein_base_first_block", **KLEIN, cache="first-block:threshold=0.3",
         diffusers=("FirstBlockCacheConfig", dict(threshold=0.3))),
    # Calibration: nothing skipped; the ratios diffusers prints, for the record.
    dict(name="klein_base_mag_calibrate", **KLEIN, cache="mag:calibrate=true",
         diffusers=("MagCacheConfig", dict(calibrate=True, num_inference_steps=12))),
]


class DecisionLog:
    """Wraps the hooks' decision points; per cache context, one decision per transformer call."""

    def __init__(self):
        self.calls = {}     # context name -> ["F" | "C", ...]
        self.changes = {}   # context name -> [relative L1 change, ...] (First-Block Cache)
        self.calibration = {}  # context name -> [ratio per step] (MagCache calibrate)
        self.taylor_owner = None
        self.originals = []

    def _patch(self, cls, name, wrapper):
        original = getattr(cls, name)
        self.originals.append((cls, name, original))
        setattr(cls, name, wrapper(original))

    def install(self):
        from diffusers.hooks import first_block_cache as fbc
        from diffusers.hooks import mag_cache as mag
        from diffusers.hooks import taylorseer_cache as ts

        log = self

        def fbc_should_compute(original):
            def wrapped(hook, residual):
                state = hook.state_manager.get_state()
                ctx = hook.state_manager._context.name
                if state.head_block_residual is not None:
                    prev = state.head_block_residual
                    change = ((residual - prev).abs().mean() / prev.abs().mean()).item()
                    log.changes.setdefault(ctx, []).append(change)
                result = original(hook, residual)
                log.calls.setdefault(ctx, []).append("F" if result else "C")
                return result
            return wrapped

        def mag_head(original):
            def wrapped(hook, module, *args, **kwargs):
                out = original(hook, module, *args, **kwargs)
                state = hook.state_manager.get_state()
                log.calls.setdefault(hook.state_manager._context.name, []).append(
                    "F" if state.should_compute else "C")
                return out
            return wrapped

        def taylor_measure(original):
            def wrapped(hook):
                should_compute, state = original(hook)
                if log.taylor_owner is None:
                    log.taylor_owner = id(hook)
                if id(hook) == log.taylor_owner:
                    log.calls.setdefault(hook.state_manager._context.name, []).append(
                        "F" if should_compute else "C")
                return should_compute, state
            return wrapped

        def mag_calibrate(original):
            def wrapped(hook, state, residual):
                original(hook, state, residual)
                log.calibration.setdefault(hook.state_manager._context.name, []).append(
                    state.calibration_ratios[-1])
            return wrapped

        self._patch(mag.MagCacheBlockHook, "_perform_calibration_step", mag_calibrate)
        self._patch(fbc.FBCHeadBlockHook, "_should_compute_remaining_blocks", fbc_should_compute)
        self._patch(mag.MagCacheHeadHook, "new_forward", mag_head)
        self._patch(ts.TaylorSeerCacheHook, "_measure_should_compute", taylor_measure)

    def uninstall(self):
        for cls, name, original in self.originals:
            setattr(cls, name, original)

    def per_step(self):
        branches = [self.calls[k] for k in ("cond", "uncond") if k in self.calls]
        steps = []
        for decisions in zip(*branches):
            steps.append("F" if all(d == "F" for d in decisions) else "C" if all(d == "C" for d in decisions)
                         else "P")
        return "".join(steps)


def make_config(spec):
    import diffusers
    from diffusers.hooks.mag_cache import FLUX_MAG_RATIOS

    cls_name, kwargs = spec
    kwargs = dict(kwargs)
    if kwargs.get("mag_ratios") == "FLUX_MAG_RATIOS":
        kwargs["mag_ratios"] = FLUX_MAG_RATIOS
    return getattr(diffusers, cls_name)(**kwargs)


def run_case(case, out_root):
    from diffusers import Flux2KleinPipeline, FluxPipeline

    folder = MODELS / case["model"]
    cls = FluxPipeline if case["model"].startswith("flux1") else Flux2KleinPipeline
    pipe = cls.from_pretrained(str(folder), torch_dtype=torch.float32)
    log = DecisionLog()
    log.install()
    error = None
    try:
        pipe.transformer.enable_cache(make_config(case["diffusers"]))
        kwargs = dict(prompt=PROMPT, num_inference_steps=case["steps"], width=case["width"],
                      height=case["height"], guidance_scale=case["guidance"],
                      generator=torch.Generator("cpu").manual_seed(case["seed"]), output_type="pil")
        if "negative_prompt" in case:
            kwargs["negative_prompt"] = case["negative_prompt"]
            kwargs["true_cfg_scale"] = case["true_cfg_scale"]
        images = pipe(**kwargs).images
    except Exception as e:  # diffusers' own failure is part of the record
        error = f"{type(e).__name__}: {e}"
        images = []
    finally:
        log.uninstall()
    entry = {k: v for k, v in case.items() if k != "diffusers"}
    entry["prompt"] = PROMPT
    entry["diffusers_config"] = [case["diffusers"][0],
                                 {k: (str(v) if isinstance(v, torch.dtype) else v)
                                  for k, v in case["diffusers"][1].items()}]
    if error:
        entry["diffusers_error"] = error
        print(case["name"], "diffusers failed:", error)
        return entry
    out = out_root / case["name"]
    out.mkdir(parents=True, exist_ok=True)
    images[0].save(out / "image_0.png")
    entry["image"] = f"{case['name']}/image_0.png"
    entry["decisions"] = log.per_step()
    entry["branch_decisions"] = {k: "".join(v) for k, v in log.calls.items()}
    if log.calibration:
        entry["calibration"] = log.calibration
    if log.changes:
        entry["fbc_changes"] = {k: [round(c, 5) for c in v] for k, v in log.changes.items()}
    print(case["name"], entry["decisions"], entry["branch_decisions"])
    return entry


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    old = {}
    if args.only and manifest_path.exists():
        old = {e["name"]: e for e in json.loads(manifest_path.read_text())["cases"]}
    entries = []
    for case in CASES:
        if args.only and case["name"] not in args.only:
            if case["name"] in old:
                entries.append(old[case["name"]])
            continue
        entries.append(run_case(case, args.out))
    manifest = dict(generator="tools/reference/dump_step_cache.py", diffusers="0.42.1", cases=entries)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
