#!/usr/bin/env python3
"""Builds the tiny random FLUX models checked in under tests/data/models/.

Every model is built with the reference libraries' own classes (diffusers / transformers) and
saved with their own save_pretrained, so the C++ side sees the real key names, config.json
fields and file layouts. Sizes are tiny, the structure is not: FLUX.2 keeps head_dim 128,
RoPE axes (32, 32, 32, 32), 32 latent channels, the Qwen3 text encoder keeps the full
151936-row vocabulary and 36 layers (taps 9/18/27 exist).

Outputs (relative to --out, default tests/data/models):
  flux2-klein-tiny/                     complete Flux2KleinPipeline folder (is_distilled true)
  flux2-klein-tiny-bfl.safetensors      the same transformer in the BFL single-file layout
  flux1-dev-tiny-transformer/           FluxTransformer2DModel, guidance_embeds=True
  flux1-schnell-tiny-transformer/       FluxTransformer2DModel, guidance_embeds=False
  flux1-schnell-tiny-bfl.safetensors    the schnell transformer in the BFL single-file layout

Deterministic: each model is built right after torch.manual_seed(<fixed seed>); running the
script twice gives byte-identical files. Run with the venv described in README.md:
  python tools/reference/make_tiny_models.py [--out DIR] [--no-check]
"""

import argparse
import hashlib
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "tests" / "data" / "models"
DEFAULT_TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "qwen3"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")

# Tiny sizes (see README.md for the reasoning).
KLEIN_HEADS = 1  # x head_dim 128 -> hidden 128
QWEN_HIDDEN = 8  # the 151936 x hidden embedding dominates the folder size
QWEN_LAYERS = 36  # like Qwen3-4B/8B; FLUX.2 reads hidden_states 9, 18, 27
QWEN_VOCAB = 151936

# The FLUX.1-dev scheduler config, which the diffusers klein converter copies for klein
# (flux-reference.md section 5.3).
KLEIN_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
)


def perturb_constants(module: torch.nn.Module, seed: int) -> None:
    """Norm scales start as all-ones and biases/BN buffers as zeros; a swapped or ignored one
    would then go unnoticed by golden tests. Give every constant tensor distinct values."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point() or t.numel() < 2:
                continue
            flat = t.reshape(-1)
            if not bool((flat == flat[0]).all()):
                continue
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32)
            if name.endswith("running_var"):
                t.copy_(0.5 + noise.abs())  # must stay positive
            else:
                t.copy_(t.float() + 0.1 * noise)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ----------------------------------------------------------------------------------------------
# FLUX.2 klein


def make_klein_transformer():
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(2001)
    model = Flux2Transformer2DModel(
        patch_size=1,
        in_channels=128,  # 32 latent channels x 2x2 patch
        out_channels=None,
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=128,
        num_attention_heads=KLEIN_HEADS,
        joint_attention_dim=3 * QWEN_HIDDEN,
        timestep_guidance_channels=256,
        mlp_ratio=3.0,
        axes_dims_rope=(32, 32, 32, 32),
        rope_theta=2000,
        eps=1e-6,
        guidance_embeds=False,
    )
    perturb_constants(model, 2002)
    return model.to(torch.bfloat16).eval()


def make_qwen3_text_encoder():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(2011)
    config = Qwen3Config(
        vocab_size=QWEN_VOCAB,
        hidden_size=QWEN_HIDDEN,
        intermediate_size=24,
        num_hidden_layers=QWEN_LAYERS,
        num_attention_heads=2,
        num_key_value_heads=1,  # grouped-query attention, like the real 32 q / 8 kv heads
        head_dim=16,  # explicit and larger than hidden / heads, like Qwen3-4B (128 vs 2560/32)
        hidden_act="silu",
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        attention_bias=False,
        tie_word_embeddings=True,  # Qwen3-4B ties lm_head to the embedding
        bos_token_id=151643,
        eos_token_id=151645,
    )
    model = Qwen3ForCausalLM(config)
    perturb_constants(model, 2012)
    return model.to(torch.bfloat16).eval()


def tiny_flux2_vae(block_out_channels: tuple, seed: int, sample_size: int = 64):
    """The tiny AutoencoderKLFlux2 of the reference dumps (this folder's klein VAE, the 3-level VAE
    of dump_klein_pipeline.py, the VAE module golden of dump_flux2_vae.py): the released klein
    VAE's structure (quant convs, mid-block attention, batch-norm statistics, 2x2 patches) at 4 norm
    groups. block_out_channels sets the levels (four keep the /8 spatial factor, three give /4);
    sample_size is only recorded in config.json. Built right after torch.manual_seed(seed), so a
    rerun gives the same weights."""
    from diffusers import AutoencoderKLFlux2

    levels = len(block_out_channels)
    torch.manual_seed(seed)
    return AutoencoderKLFlux2(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        block_out_channels=block_out_channels,
        layers_per_block=2,
        latent_channels=32,  # 32 x 2x2 = the 128 packed channels the transformer needs
        norm_num_groups=4,
        sample_size=sample_size,
        use_quant_conv=True,
        use_post_quant_conv=True,
        mid_block_add_attention=True,
        batch_norm_eps=1e-4,
        batch_norm_momentum=0.1,
        patch_size=(2, 2),
    )


def make_klein_vae():
    model = tiny_flux2_vae((8, 16, 16, 16), seed=2021)  # four levels keep the /8 spatial factor
    perturb_constants(model, 2022)
    return model.eval()  # float32, like BFL's ae.safetensors


def make_tokenizer(tokenizer_src: Path, folder: Path):
    """Copies the real Qwen3 tokenizer files verbatim (no 11 MB tokenizer.json)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_src / name, folder / name)


def diffusers_to_bfl_flux2(sd: dict) -> dict:
    """diffusers Flux2Transformer2DModel state dict -> BFL single-file names (flux-reference.md
    sections 3.4/3.5, inverted). Every input tensor must be consumed exactly once."""
    sd = dict(sd)
    out = {}

    def take(name):
        return sd.pop(name)

    def swap_halves(w):
        # diffusers AdaLayerNormContinuous stores (scale, shift); BFL stores (shift, scale).
        scale, shift = w.chunk(2, dim=0)
        return torch.cat([shift, scale], dim=0)

    out["img_in.weight"] = take("x_embedder.weight")
    out["txt_in.weight"] = take("context_embedder.weight")
    out["time_in.in_layer.weight"] = take("time_guidance_embed.timestep_embedder.linear_1.weight")
    out["time_in.out_layer.weight"] = take("time_guidance_embed.timestep_embedder.linear_2.weight")
    for which in ("double_stream_modulation_img", "double_stream_modulation_txt", "single_stream_modulation"):
        out[f"{which}.lin.weight"] = take(f"{which}.linear.weight")

    n_double = len({k.split(".")[1] for k in sd if k.startswith("transformer_blocks.")})
    for i in range(n_double):
        p, q = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        out[q + "img_attn.qkv.weight"] = torch.cat([take(p + f"attn.to_{c}.weight") for c in "qkv"], 0)
        out[q + "txt_attn.qkv.weight"] = torch.cat([take(p + f"attn.add_{c}_proj.weight") for c in "qkv"], 0)
        out[q + "img_attn.norm.query_norm.scale"] = take(p + "attn.norm_q.weight")
        out[q + "img_attn.norm.key_norm.scale"] = take(p + "attn.norm_k.weight")
        out[q + "txt_attn.norm.query_norm.scale"] = take(p + "attn.norm_added_q.weight")
        out[q + "txt_attn.norm.key_norm.scale"] = take(p + "attn.norm_added_k.weight")
        out[q + "img_attn.proj.weight"] = take(p + "attn.to_out.0.weight")
        out[q + "txt_attn.proj.weight"] = take(p + "attn.to_add_out.weight")
        out[q + "img_mlp.0.weight"] = take(p + "ff.linear_in.weight")
        out[q + "img_mlp.2.weight"] = take(p + "ff.linear_out.weight")
        out[q + "txt_mlp.0.weight"] = take(p + "ff_context.linear_in.weight")
        out[q + "txt_mlp.2.weight"] = take(p + "ff_context.linear_out.weight")

    n_single = len({k.split(".")[1] for k in sd if k.startswith("single_transformer_blocks.")})
    for i in range(n_single):
        p, q = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        out[q + "linear1.weight"] = take(p + "attn.to_qkv_mlp_proj.weight")
        out[q + "linear2.weight"] = take(p + "attn.to_out.weight")
        out[q + "norm.query_norm.scale"] = take(p + "attn.norm_q.weight")
        out[q + "norm.key_norm.scale"] = take(p + "attn.norm_k.weight")

    out["final_layer.adaLN_modulation.1.weight"] = swap_halves(take("norm_out.linear.weight"))
    out["final_layer.linear.weight"] = take("proj_out.weight")
    if sd:
        raise RuntimeError(f"unmapped FLUX.2 tensors: {sorted(sd)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def build_klein(out_dir: Path, tokenizer_src: Path):
    from diffusers import FlowMatchEulerDiscreteScheduler, Flux2KleinPipeline
    from transformers import AutoTokenizer

    folder = out_dir / "flux2-klein-tiny"
    if folder.exists():
        shutil.rmtree(folder)
    make_tokenizer(tokenizer_src, folder / "tokenizer.src")
    tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer.src")
    pipe = Flux2KleinPipeline(
        scheduler=FlowMatchEulerDiscreteScheduler(**KLEIN_SCHEDULER),
        vae=make_klein_vae(),
        text_encoder=make_qwen3_text_encoder(),
        tokenizer=tokenizer,
        transformer=make_klein_transformer(),
        is_distilled=True,
    )
    pipe.save_pretrained(folder, safe_serialization=True)
    # save_pretrained re-serialises the tokenizer (an 11 MB tokenizer.json); ship the original
    # three files instead, which is also what the C++ tokenizer reads.
    shutil.rmtree(folder / "tokenizer")
    (folder / "tokenizer.src").rename(folder / "tokenizer")

    transformer_sd = load_file(folder / "transformer" / "diffusion_pytorch_model.safetensors")
    bfl = diffusers_to_bfl_flux2(transformer_sd)
    save_file(bfl, out_dir / "flux2-klein-tiny-bfl.safetensors", metadata={"format": "pt"})
    return folder


# ----------------------------------------------------------------------------------------------
# FLUX.1 (variant-detection models only; small head_dim keeps them a few hundred KB)


def make_flux1_transformer(guidance: bool):
    from diffusers import FluxTransformer2DModel

    torch.manual_seed(1001 if guidance else 1011)
    model = FluxTransformer2DModel(
        patch_size=1,
        in_channels=64,  # 16 latent channels x 2x2
        num_layers=1,
        num_single_layers=1,
        attention_head_dim=16,  # real: 128 = 16 + 56 + 56; tiny: 4 + 6 + 6
        num_attention_heads=2,
        joint_attention_dim=32,
        pooled_projection_dim=24,
        guidance_embeds=guidance,
        axes_dims_rope=(4, 6, 6),
    )
    perturb_constants(model, 1002 if guidance else 1012)
    return model.to(torch.bfloat16).eval()


def diffusers_to_bfl_flux1(sd: dict) -> dict:
    """diffusers FluxTransformer2DModel -> BFL names (flux-reference.md sections 3.2/3.3, inverted)."""
    sd = dict(sd)
    out = {}

    def move(src, dst):
        for suffix in ("weight", "bias"):
            out[f"{dst}.{suffix}"] = sd.pop(f"{src}.{suffix}")

    def fuse(srcs, dst):
        for suffix in ("weight", "bias"):
            out[f"{dst}.{suffix}"] = torch.cat([sd.pop(f"{s}.{suffix}") for s in srcs], 0)

    move("x_embedder", "img_in")
    move("context_embedder", "txt_in")
    move("time_text_embed.timestep_embedder.linear_1", "time_in.in_layer")
    move("time_text_embed.timestep_embedder.linear_2", "time_in.out_layer")
    move("time_text_embed.text_embedder.linear_1", "vector_in.in_layer")
    move("time_text_embed.text_embedder.linear_2", "vector_in.out_layer")
    if "time_text_embed.guidance_embedder.linear_1.weight" in sd:
        move("time_text_embed.guidance_embedder.linear_1", "guidance_in.in_layer")
        move("time_text_embed.guidance_embedder.linear_2", "guidance_in.out_layer")

    n_double = len({k.split(".")[1] for k in sd if k.startswith("transformer_blocks.")})
    for i in range(n_double):
        p, q = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        move(p + "norm1.linear", q + "img_mod.lin")
        move(p + "norm1_context.linear", q + "txt_mod.lin")
        fuse([p + f"attn.to_{c}" for c in "qkv"], q + "img_attn.qkv")
        fuse([p + f"attn.add_{c}_proj" for c in "qkv"], q + "txt_attn.qkv")
        out[q + "img_attn.norm.query_norm.scale"] = sd.pop(p + "attn.norm_q.weight")
        out[q + "img_attn.norm.key_norm.scale"] = sd.pop(p + "attn.norm_k.weight")
        out[q + "txt_attn.norm.query_norm.scale"] = sd.pop(p + "attn.norm_added_q.weight")
        out[q + "txt_attn.norm.key_norm.scale"] = sd.pop(p + "attn.norm_added_k.weight")
        move(p + "attn.to_out.0", q + "img_attn.proj")
        move(p + "attn.to_add_out", q + "txt_attn.proj")
        move(p + "ff.net.0.proj", q + "img_mlp.0")
        move(p + "ff.net.2", q + "img_mlp.2")
        move(p + "ff_context.net.0.proj", q + "txt_mlp.0")
        move(p + "ff_context.net.2", q + "txt_mlp.2")

    n_single = len({k.split(".")[1] for k in sd if k.startswith("single_transformer_blocks.")})
    for i in range(n_single):
        p, q = f"single_transformer_blocks.{i}.", f"single_blocks.{i}."
        move(p + "norm.linear", q + "modulation.lin")
        fuse([p + "attn.to_q", p + "attn.to_k", p + "attn.to_v", p + "proj_mlp"], q + "linear1")
        move(p + "proj_out", q + "linear2")
        out[q + "norm.query_norm.scale"] = sd.pop(p + "attn.norm_q.weight")
        out[q + "norm.key_norm.scale"] = sd.pop(p + "attn.norm_k.weight")

    for suffix in ("weight", "bias"):
        scale, shift = sd.pop(f"norm_out.linear.{suffix}").chunk(2, dim=0)
        out[f"final_layer.adaLN_modulation.1.{suffix}"] = torch.cat([shift, scale], 0)
    move("proj_out", "final_layer.linear")
    if sd:
        raise RuntimeError(f"unmapped FLUX.1 tensors: {sorted(sd)[:5]}")
    return {k: v.contiguous() for k, v in out.items()}


def bfl_to_diffusers_flux1(bfl: dict, head_dim_total: int) -> dict:
    """The forward direction of flux-reference.md section 3.3, written independently of the
    inverse above, so the round trip checks both."""
    d = head_dim_total
    out = {}
    ren = {
        "img_in": "x_embedder",
        "txt_in": "context_embedder",
        "time_in.in_layer": "time_text_embed.timestep_embedder.linear_1",
        "time_in.out_layer": "time_text_embed.timestep_embedder.linear_2",
        "vector_in.in_layer": "time_text_embed.text_embedder.linear_1",
        "vector_in.out_layer": "time_text_embed.text_embedder.linear_2",
        "guidance_in.in_layer": "time_text_embed.guidance_embedder.linear_1",
        "guidance_in.out_layer": "time_text_embed.guidance_embedder.linear_2",
        "final_layer.linear": "proj_out",
    }
    block_ren = {
        "img_mod.lin": "norm1.linear",
        "txt_mod.lin": "norm1_context.linear",
        "img_attn.proj": "attn.to_out.0",
        "txt_attn.proj": "attn.to_add_out",
        "img_mlp.0": "ff.net.0.proj",
        "img_mlp.2": "ff.net.2",
        "txt_mlp.0": "ff_context.net.0.proj",
        "txt_mlp.2": "ff_context.net.2",
        "img_attn.norm.query_norm.scale": "attn.norm_q.weight",
        "img_attn.norm.key_norm.scale": "attn.norm_k.weight",
        "txt_attn.norm.query_norm.scale": "attn.norm_added_q.weight",
        "txt_attn.norm.key_norm.scale": "attn.norm_added_k.weight",
        "modulation.lin": "norm.linear",
        "linear2": "proj_out",
        "norm.query_norm.scale": "attn.norm_q.weight",
        "norm.key_norm.scale": "attn.norm_k.weight",
    }
    for name, t in bfl.items():
        parts = name.split(".")
        if parts[0] in ("double_blocks", "single_blocks"):
            prefix = ("transformer_blocks." if parts[0] == "double_blocks" else "single_transformer_blocks.") + parts[1] + "."
            rest = ".".join(parts[2:])
            if rest.endswith(".scale"):
                out[prefix + block_ren[rest]] = t
                continue
            stem, suffix = rest.rsplit(".", 1)
            if stem in ("img_attn.qkv", "txt_attn.qkv"):
                names = ["to_q", "to_k", "to_v"] if stem == "img_attn.qkv" else ["add_q_proj", "add_k_proj", "add_v_proj"]
                for n, c in zip(names, t.chunk(3, 0)):
                    out[f"{prefix}attn.{n}.{suffix}"] = c
            elif stem == "linear1":
                q, k, v, mlp = t[:d], t[d : 2 * d], t[2 * d : 3 * d], t[3 * d :]
                for n, c in (("attn.to_q", q), ("attn.to_k", k), ("attn.to_v", v), ("proj_mlp", mlp)):
                    out[f"{prefix}{n}.{suffix}"] = c
            else:
                out[f"{prefix}{block_ren[stem]}.{suffix}"] = t
        elif name.startswith("final_layer.adaLN_modulation.1."):
            shift, scale = t.chunk(2, 0)
            out["norm_out.linear." + parts[-1]] = torch.cat([scale, shift], 0)
        else:
            stem, suffix = name.rsplit(".", 1)
            out[f"{ren[stem]}.{suffix}"] = t
    return out


def build_flux1(out_dir: Path):
    for variant, guidance in (("dev", True), ("schnell", False)):
        folder = out_dir / f"flux1-{variant}-tiny-transformer"
        if folder.exists():
            shutil.rmtree(folder)
        make_flux1_transformer(guidance).save_pretrained(folder, safe_serialization=True)
    sd = load_file(out_dir / "flux1-schnell-tiny-transformer" / "diffusion_pytorch_model.safetensors")
    save_file(diffusers_to_bfl_flux1(sd), out_dir / "flux1-schnell-tiny-bfl.safetensors", metadata={"format": "pt"})


# ----------------------------------------------------------------------------------------------
# Checks


def check_klein(out_dir: Path):
    from diffusers import Flux2KleinPipeline, Flux2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_flux2_transformer_checkpoint_to_diffusers
    from transformers import AutoTokenizer

    folder = out_dir / "flux2-klein-tiny"
    pipe = Flux2KleinPipeline.from_pretrained(folder, torch_dtype=torch.float32)
    image = pipe(
        prompt="a tiny red fox",
        height=64,
        width=64,
        num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
        output_type="np",
        max_sequence_length=64,
    ).images[0]
    assert image.shape == (64, 64, 3), image.shape
    print(f"klein pipeline: rendered {image.shape}, mean {image.mean():.4f}")

    tok = AutoTokenizer.from_pretrained(folder / "tokenizer")
    ids = tok("<|im_start|>user\nhello<|im_end|>")["input_ids"]
    assert ids[0] == 151644 and ids[-1] == 151645, ids
    print(f"tokenizer: {type(tok).__name__}, {len(tok)} tokens")

    # The BFL file must convert back to exactly the diffusers tensors with diffusers' own converter.
    bfl = load_file(out_dir / "flux2-klein-tiny-bfl.safetensors")
    back = convert_flux2_transformer_checkpoint_to_diffusers(dict(bfl))
    ref = Flux2Transformer2DModel.from_pretrained(folder / "transformer").state_dict()
    assert set(back) == set(ref), sorted(set(back) ^ set(ref))[:5]
    for k in ref:
        assert torch.equal(back[k], ref[k]), k
    print(f"klein BFL file: {len(bfl)} tensors, converts back exactly ({len(ref)} diffusers tensors)")


def check_flux1(out_dir: Path):
    for variant in ("dev", "schnell"):
        sd = load_file(out_dir / f"flux1-{variant}-tiny-transformer" / "diffusion_pytorch_model.safetensors")
        has_guidance = any("guidance_embedder" in k for k in sd)
        assert has_guidance == (variant == "dev")
    ref = load_file(out_dir / "flux1-schnell-tiny-transformer" / "diffusion_pytorch_model.safetensors")
    bfl = load_file(out_dir / "flux1-schnell-tiny-bfl.safetensors")
    back = bfl_to_diffusers_flux1(bfl, 32)
    assert set(back) == set(ref), sorted(set(back) ^ set(ref))[:5]
    for k in ref:
        assert torch.equal(back[k], ref[k]), k
    print(f"flux1 BFL file: {len(bfl)} tensors, round-trips exactly ({len(ref)} diffusers tensors)")


def report(out_dir: Path):
    total = 0
    for path in sorted(out_dir.rglob("*")):
        if path.is_file():
            size = path.stat().st_size
            total += size
            print(f"{size:>10}  {sha256(path)[:12]}  {path.relative_to(out_dir)}")
    print(f"{total:>10}  total bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_TOKENIZER, help="folder with the Qwen3 tokenizer files")
    parser.add_argument("--no-check", action="store_true", help="skip loading the saved models back")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    build_klein(args.out, args.tokenizer)
    build_flux1(args.out)
    if not args.no_check:
        check_klein(args.out)
        check_flux1(args.out)
    report(args.out)


if __name__ == "__main__":
    main()
