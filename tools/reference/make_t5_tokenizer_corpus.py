#!/usr/bin/env python3
"""Builds the T5 (FLUX.1 tokenizer_2) tokenizer test corpus checked in under tests/data/tokenizers/t5/.

The reference is what diffusers' FluxPipeline loads as tokenizer_2: transformers' T5TokenizerFast
(in transformers 5.x the `tokenizers`-backed T5Tokenizer) from the genuine google/t5-v1_1-xxl files
in shared/data/tokenizers/t5-v1_1-xxl. Its pipeline is: special tokens (<pad>, </s>, <unk>,
<extra_id_N>) cut out of the raw text, the SentencePiece precompiled charsmap applied per grapheme,
WhitespaceSplit, Metaspace (prepend "▁" to every word), Unigram Viterbi per word, "</s>" appended.
The `tokenizers` package loading the shipped tokenizer.json (whose normalizer is
Precompiled + Strip(right) + Replace(" {2,}" -> "▁") and whose pre-tokenizer has no WhitespaceSplit)
is recorded too, and rows where the two disagree are listed: the C++ tokenizer follows the
transformers one, which is what the pipeline uses.

Outputs (relative to --out, default tests/data/tokenizers/t5):
  spiece.model, tokenizer.json, tokenizer_config.json, special_tokens_map.json  copies of the genuine files
  reference_vectors_t5.json  the T5 rows of shared/data/tokenizers/reference_vectors.json
  t5_corpus.json     >= 300 prompts: 'ids' = tokenizer(text)["input_ids"] (EOS appended, no truncation),
                     'real_tokens_512' / 'real_tokens_256' = unpadded length of
                     tokenizer(text, padding="max_length", truncation=True, max_length=N), checked to be
                     ids[:N-1] + [1] when truncated; 'tokenizer_json_ids' only where the plain
                     tokenizer.json pipeline differs; invalid UTF-8 rows as hex
  t5_flux_pipeline.json  the padded input_ids FluxPipeline._get_t5_prompt_embeds hands text_encoder_2
                     (recorded by a stand-in encoder) for a subset of prompts at 512 and 256

Deterministic (the random prompts come from fixed seeds). Run:
  /work/refenv/bin/python tools/reference/make_t5_tokenizer_corpus.py
"""

import argparse
import json
import random
import shutil
import sys
import types
from pathlib import Path

import tokenizers
import torch
import transformers
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
from transformers import T5TokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tokenizer_corpus as qwen_corpus  # noqa: E402  (shared prompt lists)

REPO = Path(__file__).resolve().parents[2]
T5_DIR = REPO.parent / "shared" / "data" / "tokenizers" / "t5-v1_1-xxl"
COPIED = ("spiece.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
PAD_ID, EOS_ID = 0, 1
LENGTHS = (512, 256)

# T5-specific cases: special-token text, sentinels, the characters the charsmap folds, whitespace
# the WhitespaceSplit pre-tokenizer treats as a separator, SentencePiece's own "▁".
T5_SPECIALS = [
    "<extra_id_0>", "<extra_id_99>", "<extra_id_100>", "<extra_id_-1>", "<extra_id_0", "extra_id_0>",
    "The <extra_id_0> walks in <extra_id_1> park", "x<extra_id_0>y", "x <extra_id_0> y",
    "<extra_id_0><extra_id_1><extra_id_2>", "</s>", "a</s>b", "  </s>  x", "<pad><pad>", "<unk>", "<s>",
    "＜extra_id_0＞", "＜pad＞ and ＜/s＞", "<EXTRA_ID_0>", "<extra_id_5>text</s><pad>", "</s></s></s>",
    "a photo of a cat</s>", "<extra_id_42>   <extra_id_43>", "\t<extra_id_7>\n",
]
T5_WHITESPACE = [
    "▁", "▁▁x", "x▁y", "x▁", "▁a photo", "a\u0085b", "a\u2028b\u2029c", "a\u1680b", "a\u00a0b", "a\u3000b",
    "a\u2000b\u200ac", "a\u202fb\u205fc", "a\u200bb", "a\ufeffb", "a\u180eb", "\u3000\u3000x\u3000\u3000",
    "a\x0bb\x0cc", "a\x1cb\x1dc\x1ed\x1fe", " \t \n ", "x \r\n y", "a" + " " * 40 + "b",
]
T5_FOLDING = [
    "Ｈｅｌｌｏ　Ｗｏｒｌｄ！", "ﬁne ﬂour", "ｶﾞｷﾞ ﾊﾟﾝ", "ﾞ", "Ａ\u0301", "e\u0301\u0301", "①②③ ⅷ Ⅻ", "x² y³ ½ ¼",
    "㎏ ㎝ ㍻ ㈱", "™ © ®", "…", "＂quoted＂ ＇single＇", "Å Å Å", "ǅ ǈ ǋ", "ℌ ℍ ℕ ℙ", "𝐀𝐁𝐂 𝒜 𝔸",
    "Ⓐ ⓐ", "〈angle〉", "‐‑‒–—―", "¨ ´ ¸", "\u0308\u0301", "Hello 👍🏽 world", "🇯🇵🇫🇷",
    "café CAFÉ cafe\u0301", "naïve coöperate", "Straße STRASSE", "İstanbul ıi", "ǆemal",
]


def t5_long_prompts():
    out = []
    rng = random.Random(256)
    words = ("portrait", "of", "a", "majestic", "lion", "wearing", "a", "golden", "crown", "in", "the",
             "savanna", "at", "sunset,", "cinematic", "lighting,", "8k,", "ultra-detailed")
    for count in (200, 240, 250, 255, 260, 300, 420, 500, 509, 510, 511, 512, 600, 900):
        out.append(" ".join(rng.choice(words) for _ in range(count)))
    out.append("<extra_id_3> " * 300)
    out.append("x" * 5000)
    out.append("The quick brown fox. " * 200)
    return out


def t5_random_prompts(count):
    rng = random.Random(51200)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
        " \t\n\u00a0\u3000\u2009\u0085▁", "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñÅØßœ", "\u0300\u0301\u0308", "ＡＢＣａｂｃ１２３！？ｶﾞﾊﾟ", "东京大阪日本語한국어",
        "😀🚀👍🏽\u200d🇯🇵", "ΑΒΓαβγабвгд",
    ]
    words = ["<extra_id_0>", "</s>", "<pad>", "<unk>", "cat", "  ", "\n\n", "123", "ﬁ", "▁"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 20)):
            if rng.random() < 0.15:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def all_cases():
    cases = [(category, prompt) for category, prompt in qwen_corpus.all_cases() if category != "long"]
    for category, prompts in (("t5_special", T5_SPECIALS), ("t5_whitespace", T5_WHITESPACE),
                              ("t5_folding", T5_FOLDING), ("long", t5_long_prompts()),
                              ("t5_random", t5_random_prompts(80))):
        cases.extend((category, prompt) for prompt in prompts)
    return cases


class RecordingT5(torch.nn.Module):
    """Stands in for T5EncoderModel: records the input_ids the pipeline passes, returns zeros."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.calls = []

    @property
    def dtype(self):
        return torch.float32

    def forward(self, input_ids, **kwargs):
        self.calls.append((input_ids.tolist(), sorted(kwargs)))
        return (torch.zeros(input_ids.shape[0], input_ids.shape[1], 2),)


def pipeline_ids(tok, prompts, length):
    encoder = RecordingT5()
    stand_in = types.SimpleNamespace(tokenizer_2=tok, text_encoder_2=encoder, tokenizer_max_length=77,
                                     text_encoder=types.SimpleNamespace(dtype=torch.float32),
                                     _execution_device=torch.device("cpu"))
    FluxPipeline._get_t5_prompt_embeds(stand_in, prompts, max_sequence_length=length)
    (ids, kwargs), = encoder.calls
    assert kwargs == ["output_hidden_states"], kwargs  # no attention_mask reaches the encoder
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "tokenizers" / "t5")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        shutil.copyfile(T5_DIR / name, args.out / name)
    # The T5 rows of the shared reference vectors, so the test runs where ../shared is absent (CI).
    shared = json.loads((T5_DIR.parent / "reference_vectors.json").read_text(encoding="utf-8"))
    (args.out / "reference_vectors_t5.json").write_text(
        json.dumps({"_about": "the 't5' rows of shared/data/tokenizers/reference_vectors.json", "t5": shared["t5"]},
                   ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    tok = T5TokenizerFast.from_pretrained(str(T5_DIR))
    assert tok.pad_token_id == PAD_ID and tok.eos_token_id == EOS_ID and tok.padding_side == "right"
    plain = tokenizers.Tokenizer.from_file(str(T5_DIR / "tokenizer.json"))
    plain.no_truncation()
    plain.no_padding()
    versions = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "torch": torch.__version__}
    import diffusers
    versions["diffusers"] = diffusers.__version__

    rows, pipeline_rows, differ = [], [], 0
    pipeline_prompts = []
    for index, (category, prompt) in enumerate(all_cases()):
        ids = tok(prompt)["input_ids"]
        assert ids[-1] == EOS_ID, prompt
        row = {"category": category, "text": prompt, "ids": ids}
        json_ids = plain.encode(prompt).ids
        if json_ids != ids:
            row["tokenizer_json_ids"] = json_ids
            differ += 1
        for length in LENGTHS:
            enc = tok(prompt, padding="max_length", truncation=True, max_length=length)
            real = min(len(ids), length)
            want = (ids if len(ids) <= length else ids[:length - 1] + [EOS_ID]) + [PAD_ID] * (length - real)
            assert enc["input_ids"] == want, prompt
            assert enc["attention_mask"] == [1] * real + [0] * (length - real), prompt
            row[f"real_tokens_{length}"] = real
        if index % (2 if category == "long" else 25) == 0:
            pipeline_prompts.append(prompt)
        rows.append(row)
    # The pipeline in batches of four prompts, as a list (the batched tokenizer call).
    for start in range(0, len(pipeline_prompts), 4):
        batch = pipeline_prompts[start:start + 4]
        for length in LENGTHS:
            ids = pipeline_ids(tok, batch, length)
            for prompt, row_ids in zip(batch, ids):
                pipeline_rows.append({"prompt": prompt, "max_sequence_length": length, "input_ids": row_ids})
    for raw in qwen_corpus.INVALID_UTF8:
        rows.append({"category": "invalid_utf8", "text_hex": raw.hex(), "error": "invalid_utf8"})

    about = ("T5 tokenizer corpus for FLUX.1 (tokenizer_2 = google/t5-v1_1-xxl). 'ids': transformers "
             "T5TokenizerFast(text)['input_ids'] ('</s>' appended, no truncation); 'real_tokens_N': unpadded "
             "length after tokenizer(text, padding='max_length', truncation=True, max_length=N), which is "
             "ids[:N-1] + [1] when too long, padded with 0 on the right (checked for every row); "
             "'tokenizer_json_ids': only where tokenizers.Tokenizer.from_file(tokenizer.json) differs. "
             "'text_hex' rows are invalid UTF-8 and must be rejected.")
    header = {"_about": about, "generator": "tools/reference/make_t5_tokenizer_corpus.py", "versions": versions,
              "pad_id": PAD_ID, "eos_id": EOS_ID, "lengths": list(LENGTHS)}
    qwen_corpus.write_rows(args.out / "t5_corpus.json", header, rows)
    qwen_corpus.write_rows(args.out / "t5_flux_pipeline.json",
                           {"_about": "input_ids that diffusers FluxPipeline._get_t5_prompt_embeds passes to "
                                      "text_encoder_2 (no attention mask), prompts batched four at a time.",
                            "generator": "tools/reference/make_t5_tokenizer_corpus.py", "versions": versions},
                           pipeline_rows)
    print(f"{len(rows)} corpus rows, {differ} where tokenizer.json alone differs, "
          f"{len(pipeline_rows)} pipeline rows")


if __name__ == "__main__":
    main()
