#!/usr/bin/env python3
"""Reference dumps for the FLUX.1 T5 v1.1 text encoder (tests/data/t5_encoder/).

A tiny random transformers T5EncoderModel with the real T5 v1.1 structure and position-bias
settings (gated-gelu, 32 buckets, max distance 128, eps 1e-6, no biases, untied) but small
widths: d_model 16, 4 heads of d_kv 8 (inner 32 != d_model), d_ff 40, 3 layers, and the full
32128-row vocabulary so the real tokenizer ids can be fed. Saved in bf16 with save_pretrained,
sharded (model/config.json, model.safetensors.index.json + 2 shards), as text_encoder_2/ is.

Cases (each a safetensors file with input_ids and the outputs):
  pipeline_L512  three prompts through diffusers' FluxPipeline._get_t5_prompt_embeds with the real
                 T5 tokenizer (tests/data/tokenizers/t5) at max_sequence_length 512: the pipeline's
                 own ids (no attention mask reaches the encoder, pads are attended)
  pipeline_L256  two prompts at 256 (FLUX.1-schnell), one of them truncated
  direct_L160    random ids [2, 160], the second row zero-padded after 50 tokens, straight into
                 T5EncoderModel(input_ids) (distances past 128 hit the last bucket)
Outputs: last_hidden_state from an f32 run of the bf16 weights (exact upcast) and from a bf16 run.
Also buckets.json: transformers' bidirectional bucket for relative positions -600..600.

Run: /work/refenv/bin/python tools/reference/dump_t5_encoder.py   (deterministic, fixed seed)
"""

import json
import types
from pathlib import Path

import torch
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
from safetensors.torch import save_file
from transformers import T5Config, T5EncoderModel, T5TokenizerFast
from transformers.models.t5.modeling_t5 import T5Attention

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "t5_encoder"
TOKENIZER = REPO / "tests" / "data" / "tokenizers" / "t5"

PROMPTS = [
    "a photo of a cat sitting on a red sofa",
    "",
    "Ein Fuchs im Schnee, 雪の中の狐 🦊 — watercolor <extra_id_0>, soft light; 3 birds & a \"quote\" (1920s)",
]
LONG_PROMPT = " ".join(["a very detailed painting of a lighthouse at dawn with waves and gulls"] * 30)


def make_model():
    torch.manual_seed(20260130)
    config = T5Config(vocab_size=32128, d_model=16, d_kv=8, d_ff=40, num_layers=3, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=128,
                      dropout_rate=0.0, layer_norm_epsilon=1e-6, feed_forward_proj="gated-gelu",
                      is_encoder_decoder=False, use_cache=False, tie_word_embeddings=False,
                      initializer_factor=1.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    model = T5EncoderModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                # Norm weights start at 1: make them distinct so a swapped norm shows up.
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif "relative_attention_bias" in name:
                p.copy_(2.0 * torch.randn_like(p))  # a bias strong enough to matter in the softmax
    model = model.to(torch.bfloat16)
    folder = OUT / "model"
    model.save_pretrained(folder, max_shard_size="600KB")
    return folder


def pipeline_embeds(model, tokenizer, prompts, max_len):
    stand_in = types.SimpleNamespace(tokenizer_2=tokenizer, text_encoder_2=model, tokenizer_max_length=77,
                                     text_encoder=types.SimpleNamespace(dtype=model.dtype),
                                     _execution_device=torch.device("cpu"))
    with torch.no_grad():
        embeds = FluxPipeline._get_t5_prompt_embeds(stand_in, prompts, max_sequence_length=max_len,
                                                    device=torch.device("cpu"))
    ids = tokenizer(prompts, padding="max_length", max_length=max_len, truncation=True,
                    return_tensors="pt").input_ids
    return embeds, ids


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    folder = make_model()
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    assert len(weights) >= 2, weights  # sharded, like the real text_encoder_2
    model_f32 = T5EncoderModel.from_pretrained(folder, dtype=torch.float32).eval()
    model_bf16 = T5EncoderModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    assert model_bf16.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.bfloat16
    tokenizer = T5TokenizerFast.from_pretrained(TOKENIZER)
    meta = {"shards": weights, "torch": torch.__version__}

    for name, prompts, max_len in (("pipeline_L512", PROMPTS, 512), ("pipeline_L256", [PROMPTS[0], LONG_PROMPT], 256)):
        e32, ids = pipeline_embeds(model_f32, tokenizer, prompts, max_len)
        e16, _ = pipeline_embeds(model_bf16, tokenizer, prompts, max_len)
        assert e32.dtype == torch.float32 and e16.dtype == torch.bfloat16
        save_file({"input_ids": ids.to(torch.int64).contiguous(), "last_hidden_state_f32": e32.contiguous(),
                   "last_hidden_state_bf16": e16.contiguous()}, str(OUT / f"{name}.safetensors"))
        meta[name] = {"prompts": prompts, "max_sequence_length": max_len,
                      "real_tokens": [int((row != 0).sum()) for row in ids]}
        print(name, tuple(e32.shape), meta[name]["real_tokens"])

    gen = torch.Generator().manual_seed(7)
    ids = torch.randint(3, 32128, (2, 160), generator=gen)
    ids[1, 50:] = 0
    ids[1, 49] = 1
    with torch.no_grad():
        e32 = model_f32(input_ids=ids).last_hidden_state
        e16 = model_bf16(input_ids=ids).last_hidden_state
    save_file({"input_ids": ids.contiguous(), "last_hidden_state_f32": e32.contiguous(),
               "last_hidden_state_bf16": e16.contiguous()}, str(OUT / "direct_L160.safetensors"))
    meta["direct_L160"] = {"note": "random ids, row 1 ends with </s> at 49 and zero pads after"}

    relative = torch.arange(-600, 601)
    buckets = T5Attention._relative_position_bucket(relative, bidirectional=True, num_buckets=32, max_distance=128)
    (OUT / "buckets.json").write_text(json.dumps({"relative_position_from": -600, "buckets": buckets.tolist()}) + "\n")
    (OUT / "cases.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
