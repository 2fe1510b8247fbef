#!/usr/bin/env python3
"""Reference dumps for the Qwen3 text encoder of FLUX.2-klein (tests/data/qwen3_encoder/).

Two models:
  * the tiny klein text encoder already checked in (tests/data/models/flux2-klein-tiny/text_encoder:
    hidden 8, 2 query heads / 1 kv head, head_dim 16, 36 layers, full vocabulary). Prompts are
    run through diffusers' own Flux2KleinPipeline._get_qwen3_prompt_embeds with the real Qwen3
    tokenizer files, so ids, mask, hidden-state taps and stacking are the pipeline's.
  * gqa_model/: a second random Qwen3 saved here with save_pretrained (hidden 32, 4 query heads,
    2 kv heads, head_dim 16, 28 layers, untied lm_head). Its vocabulary is cut to 512 rows to stay
    small, so the real prompt ids are folded into range (id % 512) before the forward; that test
    feeds ids straight to the encoder and does not go through the tokenizer.

For each case: input_ids, attention_mask, the stacked [B, L, 3H] embeddings from an f32 run of the
bf16 weights (exact upcast, so the f32 comparison is meaningful) and from a bf16 run (the dtype the
pipeline uses). Run with the reference venv:
  /work/refenv/bin/python tools/reference/dump_qwen3_encoder.py
Deterministic (fixed seed).
"""

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "models" / "flux2-klein-tiny"
OUT = REPO / "tests" / "data" / "qwen3_encoder"

PROMPTS = [
    "a photo of a cat sitting on a red sofa",
    "",
    "Ein Fuchs im Schnee, 雪の中の狐 🦊 — watercolor, soft light; 3 birds & a \"quote\" (1920s)",
]
# Long enough to be cut at 64 tokens (checks truncation in the same run).
LONG_PROMPT = " ".join(["a very detailed painting of a lighthouse at dawn with waves and gulls"] * 6)
TAPS = (9, 18, 27)
GQA_VOCAB = 512


def pipeline_embeds(model, tokenizer, prompts, max_len, dtype):
    embeds = Flux2KleinPipeline._get_qwen3_prompt_embeds(
        model, tokenizer, prompts, dtype=dtype, device=torch.device("cpu"), max_sequence_length=max_len,
        hidden_states_layers=TAPS)
    ids, masks = [], []
    for p in prompts:
        text = tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
        enc = tokenizer(text, return_tensors="pt", padding="max_length", truncation=True, max_length=max_len)
        ids.append(enc["input_ids"])
        masks.append(enc["attention_mask"])
    return embeds, torch.cat(ids), torch.cat(masks)


def direct_embeds(model, ids, mask):
    # The same forward and stacking as _get_qwen3_prompt_embeds, on given ids.
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
    x = torch.stack([out.hidden_states[k] for k in TAPS], dim=1)  # [B, 3, L, H]
    b, c, l, h = x.shape
    return x.permute(0, 2, 1, 3).reshape(b, l, c * h)


def dump_tiny(tokenizer):
    model_bf16 = Qwen3ForCausalLM.from_pretrained(TINY / "text_encoder", dtype=torch.bfloat16).eval()
    model_f32 = Qwen3ForCausalLM.from_pretrained(TINY / "text_encoder", dtype=torch.float32).eval()
    cases = {"tiny_L64": (PROMPTS + [LONG_PROMPT], 64), "tiny_L512": (PROMPTS[:2], 512)}
    meta = {}
    for name, (prompts, max_len) in cases.items():
        with torch.no_grad():
            e32, ids, mask = pipeline_embeds(model_f32, tokenizer, prompts, max_len, torch.float32)
            e16, ids16, _ = pipeline_embeds(model_bf16, tokenizer, prompts, max_len, torch.bfloat16)
        assert torch.equal(ids, ids16)
        save_file({"input_ids": ids.to(torch.int64).contiguous(),
                   "attention_mask": mask.to(torch.int64).contiguous(),
                   "embeds_f32": e32.contiguous(), "embeds_bf16": e16.contiguous()},
                  str(OUT / f"{name}.safetensors"))
        meta[name] = {"prompts": prompts, "max_sequence_length": max_len}
        print(name, tuple(e32.shape), "real tokens", mask.sum(1).tolist())
    return meta


def make_gqa_model():
    torch.manual_seed(1234)
    config = Qwen3Config(vocab_size=GQA_VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=28,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
                         rope_theta=1e6, max_position_embeddings=40960, tie_word_embeddings=False,
                         initializer_range=0.15, bos_token_id=0, eos_token_id=1, pad_token_id=None)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                # RMSNorm weights start at 1; make them distinct so a swapped q_norm/k_norm or
                # input/post-attention norm shows up in the comparison.
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model = model.to(torch.bfloat16)
    folder = OUT / "gqa_model"
    model.save_pretrained(folder)
    return folder


def dump_gqa(tokenizer):
    folder = make_gqa_model()
    model_bf16 = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
    model_f32 = Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    max_len = 48
    ids, masks = [], []
    for p in PROMPTS:
        text = tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                             add_generation_prompt=True, enable_thinking=False)
        enc = tokenizer(text, return_tensors="pt", padding="max_length", truncation=True, max_length=max_len)
        ids.append(enc["input_ids"] % GQA_VOCAB)
        masks.append(enc["attention_mask"])
    ids, mask = torch.cat(ids), torch.cat(masks)
    e32 = direct_embeds(model_f32, ids, mask)
    e16 = direct_embeds(model_bf16, ids, mask)
    save_file({"input_ids": ids.to(torch.int64).contiguous(), "attention_mask": mask.to(torch.int64).contiguous(),
               "embeds_f32": e32.contiguous(), "embeds_bf16": e16.contiguous()},
              str(OUT / "gqa_L48.safetensors"))
    print("gqa_L48", tuple(e32.shape), "real tokens", mask.sum(1).tolist())
    return {"gqa_L48": {"prompts": PROMPTS, "max_sequence_length": max_len, "ids_mod": GQA_VOCAB}}


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(TINY / "tokenizer")
    meta = dump_tiny(tokenizer)
    meta.update(dump_gqa(tokenizer))
    meta["taps"] = list(TAPS)
    meta["torch"] = torch.__version__
    (OUT / "cases.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
