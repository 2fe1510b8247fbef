#!/usr/bin/env python3
"""Stage 2 of the demo model: train the FLUX.2-klein transformer with the rectified-flow objective
on latents of the stage-1 VAE, conditioned on the frozen random Qwen3 text encoder, and export
the complete diffusers folder (Flux2KleinPipeline, base variant: CFG) every few minutes.

  python tools/demo_model/train_transformer.py [--work build/demo_model] [--minutes 60] [--threads 2]

Why training can use short text although inference pads every prompt to 512 tokens: the text
encoder gives all padding positions one identical state (common.make_text_encoder), and the
transformer's RoPE axis for text positions is switched off (the q/k norm scales of that axis are
held at zero), so the transformer sees the padding as N identical tokens. N copies of a key/value
in softmax attention are exactly one copy with log(N) added to its logit, so a batch padded to
its longest prompt + 1, with that bias on the padding columns (pad_bias), computes what the
512-token forward computes, at a twentieth of the cost. check_padding_equivalence() verifies it.
"""

import argparse
import copy
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import common
import shapes

def text_rope_dims(config) -> slice:
    """The RoPE dims of the 4th axis (the text position): the last axes_dims_rope[3] of a head."""
    head_dim = config.attention_head_dim
    return slice(head_dim - config.axes_dims_rope[3], head_dim)


def zero_text_rope(transformer):
    """Hold the q/k norm scales of the text-position RoPE dims at zero: q.k then ignores where
    a text token sits (image tokens have position 0 on that axis, so they lose nothing)."""
    text_dims = text_rope_dims(transformer.config)
    with torch.no_grad():
        for name, p in transformer.named_parameters():
            if any(name.endswith(f"{n}.weight") for n in ("norm_q", "norm_k", "norm_added_q", "norm_added_k")):
                p[text_dims] = 0.0


class TextBatch:
    def __init__(self, tokenizer, text_encoder, full_length: int = common.MAX_SEQUENCE_LENGTH):
        self.tokenizer, self.text_encoder, self.full_length = tokenizer, text_encoder, full_length

    def template(self, prompt: str) -> str:
        return self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                  add_generation_prompt=True, enable_thinking=False)

    def __call__(self, prompts, length=None, grad=False):
        """(embeds [B, L, 3H], pad bias [B, L]) with L = longest prompt + 1 (at least one padding
        position per row) unless `length` is given."""
        texts = [self.template(p) for p in prompts]
        if length is None:
            length = max(len(self.tokenizer(t)["input_ids"]) for t in texts) + 1
        inputs = self.tokenizer(texts, return_tensors="pt", padding="max_length", truncation=True, max_length=length)
        # The base model only: hidden states are all the pipeline reads, the LM head's logits
        # would cost more than everything else.
        with torch.set_grad_enabled(grad):
            out = self.text_encoder.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                          output_hidden_states=True, use_cache=False)
        taps = torch.stack([out.hidden_states[k] for k in common.TEXT_TAPS], dim=1)
        b, c, l, h = taps.shape
        embeds = taps.permute(0, 2, 1, 3).reshape(b, l, c * h).float()
        mask = inputs["attention_mask"].bool()
        valid = mask.sum(dim=1, keepdim=True).float()
        pads = (l - valid).clamp_min(1)
        bias = torch.where(mask, torch.zeros(()), torch.log((self.full_length - valid) / pads))
        return embeds, bias


def text_trainable(text_encoder):
    """The text encoder's weights that joint training may change: all but the query projections,
    which stay zero (uniform causal attention keeps every padding position's state identical,
    which short-padding training and 512-token inference rely on; see common.make_text_encoder).
    The LM head is tied to the embedding and never used."""
    return [p for n, p in text_encoder.model.named_parameters() if "q_proj" not in n and "q_norm" not in n]


def attention_bias(text_bias: torch.Tensor, image_tokens: int) -> torch.Tensor:
    """[B, 1, 1, L_txt + L_img] additive logits in the transformer's [text, image] token order."""
    b = text_bias.shape[0]
    return torch.cat([text_bias, torch.zeros(b, image_tokens)], dim=1).view(b, 1, 1, -1)


def forward(transformer, x_t, sigma, embeds, bias=None):
    b, n, _ = x_t.shape
    side = int(math.isqrt(n))
    kwargs = None if bias is None else {"attention_mask": attention_bias(bias, n)}
    return transformer(hidden_states=x_t, encoder_hidden_states=embeds, timestep=sigma,
                       img_ids=common.image_ids(side, side), txt_ids=common.text_ids(embeds.shape[1]),
                       joint_attention_kwargs=kwargs, return_dict=False)[0]


@torch.no_grad()
def check_padding_equivalence(transformer, text: TextBatch, log):
    prompts = ["a red circle on a blue background", "", "a small green star at the top left on a white background"]
    torch.manual_seed(0)
    x = torch.randn(len(prompts), 16, 128)
    sigma = torch.tensor([0.9, 0.5, 0.2])
    short_e, short_b = text(prompts)
    full_e, _ = text(prompts, length=text.full_length)
    short = forward(transformer, x, sigma, short_e, short_b)
    full = forward(transformer, x, sigma, full_e)
    rel = ((short - full).norm() / full.norm()).item()
    log(f"padding equivalence: short ({short_e.shape[1]} tokens + bias) vs {text.full_length} tokens: rel-L2 {rel:.2e}")
    if rel > 1e-4:
        raise RuntimeError("short-padding training would not match 512-token inference")


def sample_sigmas(n: int, gen: torch.Generator, shift: float) -> torch.Tensor:
    """Logit-normal, shifted towards noise like the inference schedule (mu ~ 1.6 at 16 tokens)."""
    u = torch.sigmoid(torch.randn(n, generator=gen))
    return shift * u / (1 + (shift - 1) * u)


@torch.no_grad()
def encode_images(vae, images_uint8) -> torch.Tensor:
    z = vae.encode(common.images_to_tensor(images_uint8)).latent_dist.mode()
    return common.pack(common.bn_normalise(vae, common.patchify(z)))


def export(work, transformer, vae, text_encoder, transformer_dtype=torch.float32):
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline
    from transformers import AutoTokenizer

    from diffusers import AutoencoderKLFlux2

    folder = work / "pipeline"
    tmp = work / "pipeline.tmp"
    if (work / "vae_final").exists():
        # train_vae.py --decoder-only runs alongside: same encoder and BN statistics (the latent
        # space trained on), a better decoder.
        vae = AutoencoderKLFlux2.from_pretrained(work / "vae_final")
    if tmp.exists():
        common.shutil.rmtree(tmp)
    common.copy_tokenizer(tmp / "tokenizer.src")
    pipe = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**common.KLEIN_SCHEDULER),
        vae=vae,
        text_encoder=copy.deepcopy(text_encoder).to(torch.bfloat16),
        tokenizer=AutoTokenizer.from_pretrained(tmp / "tokenizer.src"),
        transformer=copy.deepcopy(transformer).to(transformer_dtype),
        is_distilled=False,
    )
    pipe.save_pretrained(tmp, safe_serialization=True)
    # save_pretrained writes an 11 MB tokenizer.json; ship the three original files instead.
    common.shutil.rmtree(tmp / "tokenizer")
    (tmp / "tokenizer.src").rename(tmp / "tokenizer")
    if folder.exists():
        common.shutil.rmtree(folder)
    tmp.rename(folder)
    return folder


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=common.Path, default=common.DEFAULT_WORK)
    parser.add_argument("--minutes", type=float, default=60.0, help="wall-clock training budget")
    parser.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: at the end of the schedule or the time budget)")
    parser.add_argument("--schedule-steps", type=int, default=0,
                        help="a step-based run of this many steps (reproducible anywhere) instead of --minutes")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=8e-4)
    parser.add_argument("--ema", type=float, default=0.998)
    parser.add_argument("--caption-dropout", type=float, default=0.1)
    parser.add_argument("--partial-captions", type=float, default=0.0,
                        help="fraction of single-shape captions that name only the shape or only the background")
    parser.add_argument("--sigma-shift", type=float, default=3.0)
    parser.add_argument("--export-minutes", type=float, default=8.0)
    parser.add_argument("--resume", type=common.Path, default=None,
                        help="start from the transformer of this pipeline folder (a fresh optimiser, warm-up "
                             "and schedule) instead of the seeded initialisation")
    parser.add_argument("--train-text-encoder", action="store_true",
                        help="train the Qwen3 text encoder jointly (all but its zero query projections)")
    parser.add_argument("--text-lr", type=float, default=2e-3, help="peak learning rate of the text encoder")
    parser.add_argument("--heads", type=int, default=1,
                        help="attention heads of a fresh transformer (head dim hidden / heads, four equal RoPE axes)")
    parser.add_argument("--hidden", type=int, default=128, help="hidden size of a fresh transformer")
    parser.add_argument("--latent-reuse", type=int, default=1,
                        help="train on each drawn and VAE-encoded batch this many steps in a row (fresh noise, "
                             "noise level and caption dropout each time): drawing and encoding are ~19%% of a step")
    parser.add_argument("--export-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="dtype of the exported transformer weights (bfloat16 halves the folder)")
    parser.add_argument("--seed", type=int, default=0, help="data/noise seed (0: the stage default)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.latent_reuse < 1:
        parser.error("--latent-reuse must be at least 1")
    common.setup_threads(args.threads)
    fh = open(args.work / "transformer.log", "a")

    def log(msg):
        common.log(fh, msg)

    from diffusers import AutoencoderKLFlux2
    from transformers import AutoTokenizer

    vae = AutoencoderKLFlux2.from_pretrained(args.work / "vae").eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(str(common.tokenizer_source()))
    text_encoder = common.make_text_encoder()
    text = TextBatch(tokenizer, text_encoder)
    if args.resume:
        from diffusers import Flux2Transformer2DModel
        from transformers import Qwen3ForCausalLM

        transformer = Flux2Transformer2DModel.from_pretrained(args.resume / "transformer").train()
        if args.train_text_encoder:
            # continue from the resumed folder's text encoder (the frozen init for a first joint run)
            text_encoder = Qwen3ForCausalLM.from_pretrained(args.resume / "text_encoder", dtype=torch.float32).eval()
            text = TextBatch(tokenizer, text_encoder)
    else:
        head_dim = args.hidden // args.heads
        if head_dim * args.heads != args.hidden or head_dim % 4:
            parser.error(f"--hidden {args.hidden} / --heads {args.heads} must be a head dim divisible by 4")
        transformer = common.make_transformer(num_attention_heads=args.heads, attention_head_dim=head_dim,
                                              axes_dims_rope=(head_dim // 4,) * 4).train()
    zero_text_rope(transformer)
    check_padding_equivalence(transformer, text, log)
    ema = copy.deepcopy(transformer).eval().requires_grad_(False)
    log(f"transformer: {sum(p.numel() for p in transformer.parameters())} parameters; batch {args.batch}, "
        f"lr {args.lr}, {args.minutes} min")

    groups = [dict(params=list(transformer.parameters()), lr_peak=args.lr)]
    text_params, ema_text, ema_text_params = [], text_encoder, []
    if args.train_text_encoder:
        text_encoder.requires_grad_(False)
        text_params = text_trainable(text_encoder)
        for p in text_params:
            p.requires_grad_(True)
        # no weight decay on the text encoder: most embedding rows never get a gradient
        groups.append(dict(params=text_params, lr_peak=args.text_lr, weight_decay=0.0))
        ema_text = copy.deepcopy(text_encoder).requires_grad_(False)
        ema_text_params = text_trainable(ema_text)
        log(f"text encoder trained jointly: {sum(p.numel() for p in text_params)} parameters, lr {args.text_lr}")
    opt = torch.optim.AdamW(groups, lr=args.lr, weight_decay=0.01, betas=(0.9, 0.99))
    seed = args.seed or (3300 if args.resume else 3200)  # a resumed run must not replay the first run's data
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    start = time.time()
    last_export = start
    budget = args.minutes * 60
    step, running = 0, None
    while True:
        step += 1
        elapsed = time.time() - start
        progress = min(1.0, step / args.schedule_steps if args.schedule_steps else elapsed / budget)
        factor = min(1.0, step / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        lr = args.lr * factor
        for g in opt.param_groups:
            g["lr"] = g["lr_peak"] * factor
        if (step - 1) % args.latent_reuse == 0:
            images, drawn_captions = shapes.batch(rng, args.batch, partial=args.partial_captions)
            x0 = encode_images(vae, images)
        captions = ["" if rng.random() < args.caption_dropout else c for c in drawn_captions]
        embeds, bias = text(captions, grad=bool(text_params))
        noise = torch.randn(x0.shape, generator=gen)
        sigma = sample_sigmas(args.batch, gen, args.sigma_shift)
        s = sigma.view(-1, 1, 1)
        x_t = (1 - s) * x0 + s * noise
        pred = forward(transformer, x_t, sigma, embeds, bias)
        loss = F.mse_loss(pred, noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(transformer.parameters()) + text_params, 1.0)
        opt.step()
        zero_text_rope(transformer)
        decay = min(args.ema, (1 + step) / (10 + step))
        with torch.no_grad():
            for pe, p in zip(ema.parameters(), transformer.parameters()):
                pe.lerp_(p, 1 - decay)
            for pe, p in zip(ema_text_params, text_params):
                pe.lerp_(p, 1 - decay)
        running = loss.item() if running is None else 0.98 * running + 0.02 * loss.item()
        if step % 20 == 0 or step == 1:
            log(f"step {step} loss {loss.item():.4f} avg {running:.4f} lr {lr:.2e} {elapsed:.0f}s")
        if args.schedule_steps:
            done = step >= args.schedule_steps or bool(args.max_steps and step >= args.max_steps)
        else:
            done = elapsed >= budget or (args.max_steps and step >= args.max_steps)
        if done or time.time() - last_export >= args.export_minutes * 60:
            folder = export(args.work, ema, vae, ema_text, getattr(torch, args.export_dtype))
            log(f"exported {folder} (EMA) at step {step}")
            last_export = time.time()
        if done:
            break


if __name__ == "__main__":
    main()
