#!/usr/bin/env python3
"""Dump the sigma/timestep schedules and Euler steps of the diffusers FLUX pipelines.

Run with the reference venv:  /work/refenv/bin/python tools/reference/dump_schedules.py
Writes tests/data/schedules/schedules.json and tests/data/schedules/euler.json for
tests/pipelines/test_schedule.cpp.

schedules.json: for each case the scheduler config, the step count, the image sequence length
(packed tokens), the mu the pipeline computes (a Python float, written with repr so it
round-trips exactly), and the float32 bit patterns of scheduler.sigmas (N + 1 values, final 0)
and scheduler.timesteps (N values), produced by calling the pipelines' own helpers
(compute_empirical_mu / calculate_shift, retrieve_timesteps) on the real
FlowMatchEulerDiscreteScheduler, with the sigmas argument built exactly as the pipelines do.
It also stores, per latent dtype, the timestep the transformer receives:
`(t.expand(B).to(latents.dtype)) / 1000`.

euler.json: FlowMatchEulerDiscreteScheduler.step on small random tensors for each latent /
model-output dtype pair the pipelines produce, over every step of a klein 4-step schedule.
"""
import json
import os

import numpy as np
import torch
from diffusers import FlowMatchEulerDiscreteScheduler
from diffusers.pipelines.flux.pipeline_flux import calculate_shift
from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu, retrieve_timesteps

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "data", "schedules")

# FLUX.1-dev's scheduler/scheduler_config.json (flux-reference.md 5.3); the klein repos ship the
# same (the diffusers converter copies it).
DEV_CONFIG = {
    "base_image_seq_len": 256,
    "base_shift": 0.5,
    "invert_sigmas": False,
    "max_image_seq_len": 4096,
    "max_shift": 1.15,
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "shift_terminal": None,
    "stochastic_sampling": False,
    "time_shift_type": "exponential",
    "use_beta_sigmas": False,
    "use_dynamic_shifting": True,
    "use_exponential_sigmas": False,
    "use_karras_sigmas": False,
}
# FLUX.1-schnell: no shift (flux-reference.md 5.3: use_dynamic_shifting false, shift 1.0).
SCHNELL_CONFIG = dict(DEV_CONFIG, use_dynamic_shifting=False, shift=1.0)
# Not shipped by the FLUX repos; exercise the other branches of set_timesteps.
STATIC_SHIFT_CONFIG = dict(DEV_CONFIG, use_dynamic_shifting=False, shift=3.0)
LINEAR_SHIFT_CONFIG = dict(DEV_CONFIG, time_shift_type="linear")

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def f32_bits(t: torch.Tensor):
    return [int(v) for v in t.to(torch.float32).contiguous().numpy().view(np.uint32)]


def u16_bits(t: torch.Tensor):
    return [int(v) for v in t.contiguous().view(torch.int16).numpy().view(np.uint16)]


def bits(t: torch.Tensor):
    return f32_bits(t) if t.dtype == torch.float32 else u16_bits(t)


def schedule_case(family, config, steps, image_seq_len):
    scheduler = FlowMatchEulerDiscreteScheduler(**config)
    # Exactly the pipelines' step 5/6 ("Prepare timesteps").
    sigmas = np.linspace(1.0, 1 / steps, steps)
    if family == "flux2":
        mu = compute_empirical_mu(image_seq_len=image_seq_len, num_steps=steps)
    else:
        mu = calculate_shift(
            image_seq_len,
            scheduler.config.get("base_image_seq_len", 256),
            scheduler.config.get("max_image_seq_len", 4096),
            scheduler.config.get("base_shift", 0.5),
            scheduler.config.get("max_shift", 1.15),
        )
    timesteps, n = retrieve_timesteps(scheduler, steps, "cpu", sigmas=sigmas, mu=mu)
    assert n == steps and scheduler.sigmas.dtype == torch.float32 and timesteps.dtype == torch.float32
    model_t = {}
    for name, dt in DTYPES.items():
        # As the denoising loops do it, one step at a time for a batch of 2.
        model_t[name] = bits(torch.stack([(t.expand(2).to(dt) / 1000)[0] for t in timesteps]))
    return {
        "family": family,
        "config": config,
        "steps": steps,
        "image_seq_len": image_seq_len,
        "mu": repr(float(mu)),
        "sigmas": f32_bits(scheduler.sigmas),
        "timesteps": f32_bits(timesteps),
        "model_timestep": model_t,
    }


def euler_cases():
    scheduler = FlowMatchEulerDiscreteScheduler(**DEV_CONFIG)
    mu = compute_empirical_mu(image_seq_len=4096, num_steps=4)
    retrieve_timesteps(scheduler, 4, "cpu", sigmas=np.linspace(1.0, 1 / 4, 4), mu=mu)
    g = torch.Generator().manual_seed(1234)
    n = 96
    out = []
    pairs = [("bf16", "bf16"), ("f16", "f16"), ("f32", "f32"), ("bf16", "f32"), ("f32", "bf16")]
    for sample_dt, output_dt in pairs:
        sample = (torch.randn(n, generator=g) * 3).to(DTYPES[sample_dt])
        scheduler.set_begin_index(0)
        scheduler._step_index = None
        steps = []
        x = sample
        for t in scheduler.timesteps:
            v = (torch.randn(n, generator=g) * 2).to(DTYPES[output_dt])
            x_in = x
            x = scheduler.step(v, t, x_in, return_dict=False)[0]
            steps.append({"sample": bits(x_in), "model_output": bits(v), "result": bits(x),
                          "result_dtype": [k for k, d in DTYPES.items() if d == x.dtype][0]})
            x = x.to(DTYPES[sample_dt])  # the pipelines keep the latents' dtype
        out.append({"sample_dtype": sample_dt, "model_output_dtype": output_dt,
                    "sigmas": f32_bits(scheduler.sigmas), "steps": steps})
    return out


def main():
    cases = []
    for steps, seq in [(4, 4096), (4, 1024), (4, 256), (50, 4096), (28, 4096), (4, 4300), (4, 4301),
                       (4, 8160), (1, 4096), (2, 16), (8, 2040), (50, 1024), (3, 3600)]:
        cases.append(schedule_case("flux2", DEV_CONFIG, steps, seq))
    for steps, seq in [(28, 4096), (50, 4096), (28, 1024), (4, 256), (20, 6000), (1, 4096), (30, 2040)]:
        cases.append(schedule_case("flux1", DEV_CONFIG, steps, seq))
    for steps, seq in [(4, 4096), (1, 4096), (7, 1024)]:
        cases.append(schedule_case("flux1", SCHNELL_CONFIG, steps, seq))
    for steps, seq in [(4, 4096), (10, 1024)]:
        cases.append(schedule_case("flux1", STATIC_SHIFT_CONFIG, steps, seq))
        cases.append(schedule_case("flux2", LINEAR_SHIFT_CONFIG, steps, seq))
    os.makedirs(OUT_DIR, exist_ok=True)
    meta = {"torch": torch.__version__, "numpy": np.__version__}
    with open(os.path.join(OUT_DIR, "schedules.json"), "w") as f:
        json.dump(dict(meta, cases=cases), f, indent=None, separators=(",", ":"))
        f.write("\n")
    with open(os.path.join(OUT_DIR, "euler.json"), "w") as f:
        json.dump(dict(meta, cases=euler_cases()), f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} schedule cases to {OUT_DIR}")


if __name__ == "__main__":
    main()
