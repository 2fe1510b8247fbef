#!/usr/bin/env python3
"""Reference dumps for the CLIP-L text model of FLUX.1 (tests/data/clip_text_model/).

Two tiny random transformers CLIPTextModel configurations, saved with save_pretrained in bf16 (the
dtype FLUX.1 ships text_encoder/ in):
  * tiny/: vocab 1000, hidden 32, 4 heads, 3 layers, eos_token_id 998 (the current pooling rule:
    first position of eos_token_id). Ids are random below 997 framed by bos 997 / eos 998 and
    padded with 999, so "argmax of the ids" would pick a pad, not the end token: the rule matters.
  * full_vocab/: the real vocabulary (49408) with hidden 8, 2 heads, 2 layers and the legacy
    eos_token_id 2 of openai/clip-vit-large-patch14 (pooling at the argmax of the ids). Prompts go
    through diffusers' FluxPipeline._get_clip_prompt_embeds with the real CLIP tokenizer files, so
    ids, padding and the pooled output are the pipeline's.
  * tiny_text_model_prefix/: tiny's weights with every key under transformers 4's "text_model."
    prefix (the layout of FLUX.1's text_encoder/model.safetensors).

For each case: input_ids, last_hidden_state and pooled output from an f32 run of the bf16 weights
(exact upcast) and from a bf16 run. Run with the reference venv:
  /work/refenv/bin/python tools/reference/dump_clip_text_model.py
Deterministic (fixed seeds).
"""

import json
import types
from pathlib import Path

import torch
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
from safetensors.torch import load_file, save_file
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "clip_text_model"
TOKENIZER = REPO / "tests" / "data" / "tokenizers" / "clip"

PROMPTS = [
    "a photo of a cat sitting on a red sofa",
    "",
    "Ein Fuchs im Schnee, 雪の中の狐 🦊 — watercolor, soft light; 3 birds & a \"quote\" (1920s)",
    " ".join(["a very detailed painting of a lighthouse at dawn with waves and gulls"] * 6),  # truncated
    "text with an <|endoftext|> in the middle",  # the pooled row is taken at the first end token
]


def make_model(config, seed):
    torch.manual_seed(seed)
    model = CLIPTextModel(config).eval()
    # Wider than the default init (std 0.02) so that the layers do something visible.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 / p.shape[-1] ** 0.5 if p.dim() == 2 else 0.1))
    return model.to(torch.bfloat16)


def run(model, ids, dtype):
    with torch.no_grad():
        out = model.to(dtype)(input_ids=ids)
    model.to(torch.bfloat16)
    return out.last_hidden_state.float(), out.pooler_output.float()


def dump_case(path, model, ids, extra=None):
    hidden32, pooled32 = run(model, ids, torch.float32)
    hidden16, pooled16 = run(model, ids, torch.bfloat16)
    tensors = {"input_ids": ids.to(torch.int32).contiguous(), "hidden_f32": hidden32.contiguous(),
               "pooled_f32": pooled32.contiguous(), "hidden_bf16": hidden16.to(torch.bfloat16).contiguous(),
               "pooled_bf16": pooled16.to(torch.bfloat16).contiguous()}
    tensors.update(extra or {})
    save_file(tensors, str(path))
    rel = ((pooled16 - pooled32).norm() / pooled32.norm()).item()
    print(f"{path.name}: ids {tuple(ids.shape)}, torch bf16 vs f32 pooled rel-L2 {rel:.2e}")


def main():
    OUT.mkdir(parents=True, exist_ok=True)

    # ---- tiny: current pooling rule, small vocabulary ----
    tiny_config = CLIPTextConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=4, max_position_embeddings=77, hidden_act="quick_gelu",
                                 layer_norm_eps=1e-5, bos_token_id=997, eos_token_id=998, pad_token_id=999,
                                 projection_dim=32)
    tiny = make_model(tiny_config, seed=0)
    tiny.save_pretrained(str(OUT / "tiny"), safe_serialization=True)
    gen = torch.Generator().manual_seed(1)
    rows = []
    for length in (5, 30, 0, 75):  # text tokens per row
        ids = torch.randint(0, 997, (length,), generator=gen).tolist()
        row = [997] + ids + [998]
        rows.append(row + [999] * (77 - len(row)))
    ids = torch.tensor(rows, dtype=torch.long)
    dump_case(OUT / "tiny_L77.safetensors", tiny, ids)
    dump_case(OUT / "tiny_L16.safetensors", tiny, ids[:2, :16].clone())
    # transformers 4 layout: every key under "text_model." (FLUX.1's text_encoder/model.safetensors).
    state = load_file(str(OUT / "tiny" / "model.safetensors"))
    prefixed = OUT / "tiny_text_model_prefix"
    prefixed.mkdir(exist_ok=True)
    save_file({"text_model." + k: v for k, v in state.items()}, str(prefixed / "model.safetensors"),
              metadata={"format": "pt"})
    (prefixed / "config.json").write_text((OUT / "tiny" / "config.json").read_text())


    # ---- full_vocab: legacy pooling (argmax of ids), real tokenizer through the pipeline ----
    full_config = CLIPTextConfig(vocab_size=49408, hidden_size=8, intermediate_size=16, num_hidden_layers=2,
                                 num_attention_heads=2, max_position_embeddings=77, hidden_act="quick_gelu",
                                 layer_norm_eps=1e-5, bos_token_id=0, eos_token_id=2, pad_token_id=1,
                                 projection_dim=8)
    full = make_model(full_config, seed=2)
    full.save_pretrained(str(OUT / "full_vocab"), safe_serialization=True)
    tok = CLIPTokenizer.from_pretrained(str(TOKENIZER))
    stand_in = types.SimpleNamespace(tokenizer=tok, text_encoder=full, tokenizer_max_length=tok.model_max_length,
                                     _execution_device=torch.device("cpu"))
    pooled_pipeline = FluxPipeline._get_clip_prompt_embeds(stand_in, PROMPTS, num_images_per_prompt=1,
                                                           device=torch.device("cpu"))
    ids = tok(PROMPTS, padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
    dump_case(OUT / "full_vocab_pipeline.safetensors", full, ids,
              {"pooled_pipeline_bf16": pooled_pipeline.to(torch.bfloat16).contiguous()})
    (OUT / "cases.json").write_text(json.dumps({
        "generator": "tools/reference/dump_clip_text_model.py",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "diffusers": __import__("diffusers").__version__},
        "full_vocab_pipeline_prompts": PROMPTS,
    }, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
