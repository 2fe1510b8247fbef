#!/usr/bin/env python3
"""Reference dumps for the FLUX.1 autoencoder (tests/models/test_flux1_vae.cpp).

Builds a tiny random diffusers AutoencoderKL with the FLUX.1 settings (16 latent channels, no
quant_conv / post_quant_conv, mid-block attention, scaling_factor 0.3611, shift_factor 0.1159) but
few channels, randomises every tensor (norm scales and biases too, so a swapped or ignored tensor
changes the output), saves it with save_pretrained and writes the same weights in the BFL
`ae.safetensors` layout (the name map of dump_flux2_vae.py). Then dumps, in f32, for two image
sizes (64x64 and 48x80, the latter not a multiple of the C++ test tile):

  dec_in_<H>x<W>    scaled latents [1, 16, H/8, W/8] (what the transformer yields, unpacked)
  dec_out_<H>x<W>   FluxPipeline's decode: z / scaling_factor + shift_factor, vae.decode -> [1, 3, H, W]
  dec_u8_<H>x<W>    VaeImageProcessor.postprocess(output_type="np") * 255 rounded -> uint8 NHWC
  enc_in_<H>x<W>    image in [-1, 1] [1, 3, H, W]
  enc_mode_<H>x<W>  vae.encode(x).latent_dist.mode() [1, 16, H/8, W/8]
  enc_out_<H>x<W>   (mode - shift_factor) * scaling_factor (FluxImg2ImgPipeline's scaling, on the mean)
  dec_out_bf16_<H>x<W>, enc_out_bf16_<H>x<W>   the same with the VAE and inputs in bf16

Run: /work/refenv/bin/python tools/reference/dump_flux1_vae.py [--out tests/data/flux1_vae]
Deterministic (fixed seeds).
"""
import argparse
import sys
from pathlib import Path

import torch
from diffusers import AutoencoderKL
from diffusers.image_processor import VaeImageProcessor
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dump_flux2_vae import to_bfl  # noqa: E402  (same BFL <-> diffusers map; FLUX.1 has no quant convs)

REPO = Path(__file__).resolve().parents[2]
SIZES = [(64, 64), (48, 80)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "tests" / "data" / "flux1_vae"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    torch.manual_seed(4321)
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(8, 16, 16, 16),
                        layers_per_block=2, act_fn="silu", latent_channels=16, norm_num_groups=4, sample_size=32,
                        scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                        use_post_quant_conv=False, mid_block_add_attention=True).eval()
    with torch.no_grad():
        for name, p in vae.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
    vae.save_pretrained(out / "model", safe_serialization=True)
    sd = {k: v.detach() for k, v in vae.state_dict().items()}
    bfl = to_bfl(sd)
    assert not any("quant_conv" in k for k in bfl), "FLUX.1 has no quant convs"
    save_file(bfl, str(out / "ae_bfl.safetensors"))

    scaling, shift = vae.config.scaling_factor, vae.config.shift_factor
    proc = VaeImageProcessor(vae_scale_factor=16)  # FluxPipeline: vae_scale_factor * 2
    dumps = {}
    g = torch.Generator().manual_seed(11)
    with torch.no_grad():
        for (h, w) in SIZES:
            tag = f"{h}x{w}"
            z = torch.randn(1, 16, h // 8, w // 8, generator=g)
            img = vae.decode(z / scaling + shift, return_dict=False)[0]
            u8 = (proc.postprocess(img, output_type="np") * 255).round().astype("uint8")
            dumps[f"dec_in_{tag}"] = z
            dumps[f"dec_out_{tag}"] = img
            dumps[f"dec_u8_{tag}"] = torch.from_numpy(u8)
            x = torch.rand(1, 3, h, w, generator=g) * 2 - 1
            mode = vae.encode(x).latent_dist.mode()
            dumps[f"enc_in_{tag}"] = x
            dumps[f"enc_mode_{tag}"] = mode
            dumps[f"enc_out_{tag}"] = (mode - shift) * scaling
    vae16 = vae.to(torch.bfloat16)
    with torch.no_grad():
        for (h, w) in SIZES:
            tag = f"{h}x{w}"
            z = dumps[f"dec_in_{tag}"].to(torch.bfloat16)
            dumps[f"dec_out_bf16_{tag}"] = vae16.decode(z / scaling + shift, return_dict=False)[0]
            x = dumps[f"enc_in_{tag}"].to(torch.bfloat16)
            mode = vae16.encode(x).latent_dist.mode()
            dumps[f"enc_out_bf16_{tag}"] = (mode - shift) * scaling
    save_file({k: v.contiguous() for k, v in dumps.items()}, str(out / "reference.safetensors"))
    for (h, w) in SIZES:
        tag = f"{h}x{w}"
        for kind in ("dec_out", "enc_out"):
            ref, b16 = dumps[f"{kind}_{tag}"], dumps[f"{kind}_bf16_{tag}"].float()
            print(f"{kind}_{tag}: torch bf16 vs f32 rel-L2 {((b16 - ref).norm() / ref.norm()).item():.2e}")


if __name__ == "__main__":
    main()
