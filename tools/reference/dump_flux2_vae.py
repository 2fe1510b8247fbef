#!/usr/bin/env python3
"""Reference dumps for the FLUX.2 autoencoder (tests/models/test_flux2_vae.cpp).

Builds a tiny random diffusers AutoencoderKLFlux2 (few channels, real structure: 32 latent
channels, 2x2 patchify, BatchNorm statistics, quant/post-quant convs, mid-block attention),
randomises every tensor (norm scales, biases and the BatchNorm running statistics too, so a
swapped or ignored tensor changes the output), saves it with save_pretrained and writes the same
weights in the BFL `ae.safetensors` layout. Then dumps, in f32, for two image sizes (64x64 and
48x80, the latter not a multiple of the C++ test tile):

  dec_in_<H>x<W>    normalised packed latents [1, 128, H/16, W/16] (what the transformer yields)
  dec_out_<H>x<W>   pipeline decode: z*std+mean, _unpatchify_latents, vae.decode -> [1, 3, H, W]
  dec_u8_<H>x<W>    VaeImageProcessor.postprocess(output_type="np") * 255 rounded -> uint8 NHWC
  enc_in_<H>x<W>    image in [-1, 1] [1, 3, H, W]
  enc_mode_<H>x<W>  vae.encode(x).latent_dist.mode() [1, 32, H/8, W/8]
  enc_out_<H>x<W>   Flux2KleinPipeline._encode_vae_image (argmax, patchify, BN normalise)
  dec_out_bf16_<H>x<W>, enc_out_bf16_<H>x<W>   the same with the VAE and inputs in bf16
                    (vae.to(torch.bfloat16), as the klein pipeline runs it)

Run: /work/refenv/bin/python tools/reference/dump_flux2_vae.py [--out tests/data/flux2_vae]
"""
import argparse
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from diffusers.image_processor import VaeImageProcessor
from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline

from make_tiny_models import tiny_flux2_vae

REPO = Path(__file__).resolve().parents[2]
SIZES = [(64, 64), (48, 80)]


def to_bfl(sd):
    """diffusers AutoencoderKLFlux2 names -> BFL ae.safetensors names (flux-reference.md 4.4)."""
    out = {}
    n_up = 4
    for k, v in sd.items():
        if k.endswith("num_batches_tracked"):
            continue
        b = k
        b = b.replace("quant_conv.", "encoder.quant_conv.") if b.startswith("quant_conv.") else b
        b = b.replace("post_quant_conv.", "decoder.post_quant_conv.") if b.startswith("post_quant_conv.") else b
        b = b.replace("down_blocks.", "down.").replace(".resnets.", ".block.").replace("conv_shortcut", "nin_shortcut")
        b = b.replace(".downsamplers.0.", ".downsample.")
        b = b.replace("mid_block.block.0.", "mid.block_1.").replace("mid_block.block.1.", "mid.block_2.")
        b = b.replace("mid_block.attentions.0.group_norm.", "mid.attn_1.norm.")
        for d, f in (("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")):
            b = b.replace(f"mid_block.attentions.0.{d}.", f"mid.attn_1.{f}.")
        b = b.replace("conv_norm_out.", "norm_out.")
        if b.startswith("decoder.up_blocks."):
            parts = b.split(".")
            parts[1] = "up"
            parts[2] = str(n_up - 1 - int(parts[2]))
            b = ".".join(parts).replace(".upsamplers.0.", ".upsample.")
        if ".attn_1." in b and b.endswith("weight") and v.dim() == 2:
            v = v[:, :, None, None]
        out[b] = v.contiguous()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "flux2_vae"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    vae = tiny_flux2_vae((8, 16, 16, 16), seed=1234, sample_size=32).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
        vae.bn.running_mean.copy_(0.5 * torch.randn_like(vae.bn.running_mean))
        vae.bn.running_var.copy_(0.5 + 3.0 * torch.rand_like(vae.bn.running_var))
    vae.save_pretrained(out / "model", safe_serialization=True)
    sd = {k: v.detach() for k, v in vae.state_dict().items()}
    save_file(to_bfl(sd), str(out / "ae_bfl.safetensors"))

    proc = VaeImageProcessor(vae_scale_factor=16)
    eps = vae.config.batch_norm_eps
    mean = vae.bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + eps)
    dumps = {}
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for (h, w) in SIZES:
            tag = f"{h}x{w}"
            z = torch.randn(1, 128, h // 16, w // 16, generator=g)
            lat = Flux2KleinPipeline._unpatchify_latents(z * std + mean)
            img = vae.decode(lat, return_dict=False)[0]
            u8 = (proc.postprocess(img, output_type="np") * 255).round().astype("uint8")
            dumps[f"dec_in_{tag}"] = z
            dumps[f"dec_out_{tag}"] = img
            dumps[f"dec_u8_{tag}"] = torch.from_numpy(u8)
            x = (torch.rand(1, 3, h, w, generator=g) * 2 - 1)
            mode = vae.encode(x).latent_dist.mode()
            enc = (Flux2KleinPipeline._patchify_latents(mode) - mean) / std
            dumps[f"enc_in_{tag}"] = x
            dumps[f"enc_mode_{tag}"] = mode
            dumps[f"enc_out_{tag}"] = enc
    vae16 = vae.to(torch.bfloat16)
    with torch.no_grad():
        for (h, w) in SIZES:
            tag = f"{h}x{w}"
            z = dumps[f"dec_in_{tag}"].to(torch.bfloat16)
            m16, s16 = mean.to(torch.bfloat16), std.to(torch.bfloat16)
            lat = Flux2KleinPipeline._unpatchify_latents(z * s16 + m16)
            dumps[f"dec_out_bf16_{tag}"] = vae16.decode(lat, return_dict=False)[0]
            x = dumps[f"enc_in_{tag}"].to(torch.bfloat16)
            mode = vae16.encode(x).latent_dist.mode()
            dumps[f"enc_out_bf16_{tag}"] = (Flux2KleinPipeline._patchify_latents(mode) - m16) / s16
    save_file({k: v.contiguous() for k, v in dumps.items()}, str(out / "reference.safetensors"))
    for k, v in dumps.items():
        print(k, tuple(v.shape), v.dtype)


if __name__ == "__main__":
    main()
