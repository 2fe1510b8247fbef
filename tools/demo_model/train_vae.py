#!/usr/bin/env python3
"""Stage 1 of the demo model: train the tiny AutoencoderKLFlux2 to reconstruct shape images, then
set its latent BatchNorm statistics (the pipeline (de)normalises latents with them).

  python tools/demo_model/train_vae.py [--work build/demo_model] [--steps 600] [--threads 2]

Writes <work>/vae/ (diffusers folder) at every checkpoint and at the end; logs to <work>/vae.log.
"""

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

import common
import shapes


def set_bn_statistics(vae, rng, batches: int = 40, batch_size: int = 32):
    """Mean/variance of the patchified latent means over fresh images, as BatchNorm would have
    tracked them while training the full FLUX.2 autoencoder."""
    vae.eval()
    total, total_sq, n = 0.0, 0.0, 0
    with torch.no_grad():
        for _ in range(batches):
            images, _ = shapes.batch(rng, batch_size, allow_held_out=True)
            z = common.patchify(vae.encode(common.images_to_tensor(images)).latent_dist.mode())
            total = total + z.sum(dim=(0, 2, 3)).double()
            total_sq = total_sq + (z.double() ** 2).sum(dim=(0, 2, 3))
            n += z.shape[0] * z.shape[2] * z.shape[3]
    mean = total / n
    var = total_sq / n - mean**2
    vae.bn.running_mean.copy_(mean.float())
    vae.bn.running_var.copy_(var.clamp_min(1e-6).float())
    vae.bn.num_batches_tracked.fill_(batches)


def shape_mask(x: torch.Tensor) -> torch.Tensor:
    """[B, 1, H, W] 1 where a pixel is far from the image's background colour (the median of its
    one-pixel border), 0 elsewhere."""
    border = torch.cat([x[:, :, 0], x[:, :, -1], x[:, :, :, 0], x[:, :, :, -1]], dim=2)
    background = border.median(dim=2).values[:, :, None, None]
    return ((x - background).pow(2).sum(dim=1, keepdim=True).sqrt() > 0.3).float()


def save(vae, folder, decoder_only: bool, rng_seed=3101):
    if not decoder_only:  # the encoder is frozen in decoder-only mode, so are its statistics
        set_bn_statistics(vae, np.random.default_rng(rng_seed))
    vae.save_pretrained(folder, safe_serialization=True)
    vae.train()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=common.Path, default=common.DEFAULT_WORK)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--crop", type=int, default=32,
                        help="train on random crops of this size (8-aligned; the nets are convolutional) "
                             "except for the last --full-steps steps, which see whole images")
    parser.add_argument("--full-steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--kl", type=float, default=1e-4, help="weight of the latent L2 penalty")
    parser.add_argument("--latent-noise", type=float, default=0.05)
    parser.add_argument("--decoder-only", action="store_true",
                        help="fine-tune the decoder of <work>/vae with the encoder (the transformer's latent "
                             "space) frozen; writes <work>/vae_final")
    parser.add_argument("--init", type=common.Path, default=None,
                        help="decoder-only: start from this VAE folder (default <work>/vae)")
    parser.add_argument("--out-name", default="vae_final", help="decoder-only: output folder name in <work>")
    parser.add_argument("--shape-weight", type=float, default=0.0,
                        help="extra loss weight on shape pixels (those away from the background colour, "
                             "the border median): shapes are a small part of each image, and their colour is "
                             "what the evaluation reads")
    parser.add_argument("--seed", type=int, default=0, help="data seed (0: the stage default)")
    parser.add_argument("--stop-after", type=int, default=0,
                        help="end after this step (the learning-rate schedule still spans --steps)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--checkpoint-every", type=int, default=150)
    args = parser.parse_args()
    common.setup_threads(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    fh = open(args.work / ("vae_decoder.log" if args.decoder_only else "vae.log"), "a")
    seed = args.seed or (3110 if args.decoder_only else 3100)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)

    if args.decoder_only:
        from diffusers import AutoencoderKLFlux2

        vae = AutoencoderKLFlux2.from_pretrained(args.init or args.work / "vae").train()
        for module in (vae.encoder, vae.quant_conv):
            module.requires_grad_(False)
        args.crop = 10**6
        out_folder = args.work / args.out_name
    else:
        vae = common.make_vae().train()
        out_folder = args.work / "vae"
    params = sum(p.numel() for p in vae.parameters())
    common.log(fh, f"vae: {params} parameters, {args.steps} steps of batch {args.batch}")
    opt = torch.optim.AdamW([p for p in vae.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.05)
    start = time.time()
    for step in range(1, args.steps + 1):
        images, _ = shapes.batch(rng, args.batch, allow_held_out=True)
        x = common.images_to_tensor(images)
        if step <= args.steps - args.full_steps and args.crop < x.shape[-1]:
            top, left = (int(v) * 8 for v in rng.integers(0, (x.shape[-1] - args.crop) // 8 + 1, size=2))
            x = x[:, :, top:top + args.crop, left:left + args.crop].contiguous()
        with torch.set_grad_enabled(not args.decoder_only):
            posterior = vae.encode(x).latent_dist
        # A near-deterministic autoencoder: the pipeline only ever decodes (and encodes with the
        # mode), and the KL-sized sampling noise of an untrained encoder (std 1) made early
        # training crawl. A little noise keeps the decoder tolerant of imperfect latents; the
        # L2 term keeps the latent scale bounded (BN statistics normalise it afterwards).
        mean = posterior.mean
        recon = vae.decode(mean + args.latent_noise * torch.randn_like(mean)).sample
        if args.shape_weight:
            weight = 1.0 + args.shape_weight * shape_mask(x)
            rec = ((recon - x).pow(2) * weight).mean() + 0.5 * ((recon - x).abs() * weight).mean()
        else:
            rec = F.mse_loss(recon, x) + 0.5 * F.l1_loss(recon, x)
        kl = mean.pow(2).mean()
        loss = rec + args.kl * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == 1:
            with torch.no_grad():
                err = (recon.clamp(-1, 1) - x).abs().mul(127.5).amax(dim=1).mean().item()
            common.log(fh, f"step {step} loss {loss.item():.5f} rec {rec.item():.5f} |z|^2 {kl.item():.3f} "
                           f"mean|err| {err:.2f}/255 lr {sched.get_last_lr()[0]:.2e} {time.time() - start:.0f}s")
        if step % args.checkpoint_every == 0 or step == args.steps:
            save(vae, out_folder, args.decoder_only)
            common.log(fh, f"saved {out_folder} at step {step}")
        if step == args.stop_after:
            save(vae, out_folder, args.decoder_only)
            common.log(fh, f"stopped after step {step}; saved {out_folder}")
            break


if __name__ == "__main__":
    main()
