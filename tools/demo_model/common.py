"""Shapes of the demo model's components and the pieces of Flux2KleinPipeline that training has
to reproduce exactly (latent patchify + BN normalisation, token packing, position ids; the prompt
encoding is train_transformer.TextBatch)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
DEFAULT_WORK = REPO / "build" / "demo_model"
DEFAULT_TOKENIZER = REPO.parent / "shared" / "data" / "tokenizers" / "qwen3"
FALLBACK_TOKENIZER = REPO / "tests" / "data" / "models" / "flux2-klein-tiny" / "tokenizer"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
MAX_SEQUENCE_LENGTH = 512  # the pipelines' default: training sees the same padding as inference
TEXT_TAPS = (9, 18, 27)


def setup_threads(n: int = 2):
    torch.set_num_threads(n)
    torch.set_num_interop_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", str(n))


def log(fh, msg: str):
    print(msg, flush=True)
    if fh is not None:
        fh.write(msg + "\n")
        fh.flush()


def tokenizer_source() -> Path:
    return DEFAULT_TOKENIZER if (DEFAULT_TOKENIZER / "vocab.json").exists() else FALLBACK_TOKENIZER


def copy_tokenizer(dst: Path):
    dst.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        shutil.copyfile(tokenizer_source() / name, dst / name)


# ----------------------------------------------------------------------------------------------
# Components


def make_vae():
    from diffusers import AutoencoderKLFlux2

    torch.manual_seed(3001)
    return AutoencoderKLFlux2(
        in_channels=3,
        out_channels=3,
        # Three levels (a /4 factor; the pipeline derives it from this list as diffusers does):
        # 64x64 images become 8x8 = 64 tokens. Four levels left 4x4 tokens, too coarse to place a
        # small shape, and a round trip that lost its colour.
        block_out_channels=(16, 32, 64),
        down_block_types=("DownEncoderBlock2D",) * 3,
        up_block_types=("UpDecoderBlock2D",) * 3,
        layers_per_block=1,
        latent_channels=32,  # x 2x2 patch = the 128 channels the transformer expects
        norm_num_groups=4,
        sample_size=64,
        use_quant_conv=True,
        use_post_quant_conv=True,
        mid_block_add_attention=True,
        batch_norm_eps=1e-4,
        batch_norm_momentum=0.1,
        patch_size=(2, 2),
    )


QWEN_HIDDEN = 16


def make_text_encoder():
    """A frozen, randomly initialised Qwen3. 28 layers so that hidden state 27 (the last tap) is
    still an un-normalised intermediate one, as in the real 36-layer encoder. The weights are
    rounded to bf16 (the saved dtype) so training sees exactly what inference will compute."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(3011)
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=QWEN_HIDDEN,
        intermediate_size=48,
        num_hidden_layers=28,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        hidden_act="silu",
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        attention_bias=False,
        tie_word_embeddings=True,
        bos_token_id=151643,
        eos_token_id=151645,
    )
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        # Token identity must survive the random layers: a unit-scale embedding keeps the residual
        # stream dominated by the token itself.
        model.model.embed_tokens.weight.normal_(0.0, 1.0)
        for layer in model.model.layers:
            # q = 0 makes every query attend uniformly to the keys it may see: each layer mixes in
            # the mean of its causal prefix, so a token carries the words before it (word order),
            # and every padding position (which sees exactly the valid tokens) gets the same
            # state. That is what lets training use short padding (see pad_bias).
            layer.self_attn.q_proj.weight.zero_()
            layer.self_attn.v_proj.weight.normal_(0.0, 0.15)
            layer.self_attn.o_proj.weight.normal_(0.0, 0.15)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return model.eval().requires_grad_(False)


TRANSFORMER_KW = dict(
    patch_size=1,
    in_channels=128,
    out_channels=None,
    num_layers=2,
    num_single_layers=2,
    attention_head_dim=128,
    num_attention_heads=1,
    joint_attention_dim=3 * QWEN_HIDDEN,
    timestep_guidance_channels=256,
    mlp_ratio=3.0,
    axes_dims_rope=(32, 32, 32, 32),
    rope_theta=2000,
    eps=1e-6,
    guidance_embeds=False,
)


def make_transformer(**overrides):
    from diffusers import Flux2Transformer2DModel

    torch.manual_seed(3021)
    return Flux2Transformer2DModel(**{**TRANSFORMER_KW, **overrides})


# ----------------------------------------------------------------------------------------------
# Pipeline pieces


def patchify(latents: torch.Tensor) -> torch.Tensor:
    b, c, h, w = latents.shape
    latents = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 1, 3, 5, 2, 4)
    return latents.reshape(b, c * 4, h // 2, w // 2)


def bn_normalise(vae, patched: torch.Tensor) -> torch.Tensor:
    mean = vae.bn.running_mean.view(1, -1, 1, 1)
    std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) + vae.config.batch_norm_eps)
    return (patched - mean) / std


def pack(latents: torch.Tensor) -> torch.Tensor:
    b, c, h, w = latents.shape
    return latents.reshape(b, c, h * w).permute(0, 2, 1)


def image_ids(h: int, w: int) -> torch.Tensor:
    t = torch.arange(1)
    return torch.cartesian_prod(t, torch.arange(h), torch.arange(w), torch.arange(1))


def text_ids(length: int) -> torch.Tensor:
    z = torch.arange(1)
    return torch.cartesian_prod(z, z, z, torch.arange(length))


def images_to_tensor(images_uint8) -> torch.Tensor:
    x = torch.from_numpy(images_uint8).permute(0, 3, 1, 2).float() / 127.5 - 1.0
    return x.contiguous()


# The FLUX.1-dev scheduler config that diffusers' klein conversion copies (flux-reference.md 5.3).
KLEIN_SCHEDULER = dict(
    num_train_timesteps=1000,
    shift=3.0,
    use_dynamic_shifting=True,
    base_shift=0.5,
    max_shift=1.15,
    base_image_seq_len=256,
    max_image_seq_len=4096,
)
