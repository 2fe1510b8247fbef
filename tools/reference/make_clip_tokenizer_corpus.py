#!/usr/bin/env python3
"""Builds the CLIP-L (FLUX.1 `tokenizer/`) tokenizer test data checked in under tests/data/tokenizers/clip/.

The reference is transformers' CLIPTokenizer loaded from the shared vocab.json + merges.txt +
tokenizer_config.json (in transformers 5 that class is the `tokenizers`-backed pipeline; ftfy is not
installed and not consulted), cross-checked against its own tokenizer.json re-serialisation loaded
with the `tokenizers` package, and diffusers' FluxPipeline._get_clip_prompt_embeds with a stand-in
text encoder that records the input_ids the pipeline hands it.

Outputs (relative to --out, default tests/data/tokenizers/clip):
  vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json, LICENSE, NOTICE
                            copies of the genuine files (CI checks out only the repository)
  clip_corpus.json          >= 300 prompts: ids without special tokens and without truncation, and
                            the number of text ids kept at max_length 77; invalid UTF-8 rows (hex)
  clip_flux_pipeline.json   padded input_ids from the diffusers pipeline for a subset of prompts
  reference_vectors_clip.json  the CLIP rows of shared/data/tokenizers/reference_vectors.json, each
                            checked against the reference here

Deterministic: the random prompts come from a fixed seed. Run:
  /work/refenv/bin/python tools/reference/make_clip_tokenizer_corpus.py
"""

import argparse
import json
import random
import shutil
import sys
import tempfile
import types
from pathlib import Path

import diffusers
import tokenizers
import torch
import transformers
from diffusers.pipelines.flux.pipeline_flux import FluxPipeline
from transformers import CLIPTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The general-purpose prompt lists of the Qwen corpus (real prompts, white space, digits, scripts, ...).
from make_tokenizer_corpus import (CJK, COMBINING, DIGITS, EDGE_CODEPOINTS, EMOJI, INVALID_UTF8,  # noqa: E402
                                   NEW_UNICODE, PLAIN, PUNCT, SCRIPTS, WHITESPACE, write_rows)

REPO = Path(__file__).resolve().parents[2]
CLIP_DIR = REPO.parent / "shared" / "data" / "tokenizers" / "clip-vit-large-patch14"
COPIED = ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "LICENSE", "NOTICE")
BOS_ID, EOS_ID, PAD_ID = 49406, 49407, 49407
MAX_LENGTH = 77

CASE = [
    "A PHOTO OF A CAT", "a Photo Of A Cat", "McDonald's iPhone eBay", "ÀÉÎÕÜ àéîõü", "ΣΑΣ ΟΔΟΣ σας οδός",
    "ΌΣΟΣ", "İstanbul İİ ı I", "ǅemal ǈ ǋ ǲ", "ẞ ß SS", "ĲsselmeeR ĳ", "ᏣᎳᎩ ꮳꮃꭹ", "ႠႡႢ ⴀⴁ Ა Ბ",
    "ＡＢＣ ａｂｃ", "𐐀𐐁 𐐨 (Deseret)", "Ꞗ Ꞛ ꟶ Ꟶ", "\u2c2f \u2c5f", "\ua7c0 \ua7c1 \ua7d0",
    "\ua7cb \ua7cc \ua7da \ua7dc", "\U00010d50\U00010d51 (Garay)", "ℌℑℜ Ⅻ ⓐⒶ", "ÅNGSTRÖM Å Å",
]

APOSTROPHES = [
    "it's", "IT'S", "don't", "DON'T", "we're", "they've", "i'm", "you'll", "he'd", "it’s (curly)",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "''s", "'''", "s'", "cats' toys", "rock 'n' roll",
    "o'neil's", "'quoted'", "it's'nt", "y'all'd've", "'S'T'RE'VE'M'LL'D", "x's's's", "1's", "'90s", "ʼs",
]

SPECIALS = [
    "<|startoftext|>", "<|endoftext|>", "<|STARTOFTEXT|>", "<|EndOfText|>", "<|StartOfText|>",
    "a cat<|endoftext|>a dog", "a cat <|endoftext|> a dog", "x<|startoftext|>y", "<|endoftext|><|endoftext|>",
    "<|startoftext|><|endoftext|>", "<|endoftext", "startoftext|>", "< |endoftext| >", "<<|endoftext|>>",
    "<|endoftext|>" * 80, "<|startoftext|>" * 80, "</w>", "a</w>b", "cat</w>", "<s> </s> <pad> <unk>",
    "<|im_end|>", "<|>", "<||>", "|||", "<|", "|>", "<|endoftext|>\n\n",
]

TRUNCATION = [
    " ".join(["cat"] * 74), " ".join(["cat"] * 75), " ".join(["cat"] * 76), " ".join(["cat"] * 77),
    " ".join(["cat"] * 200), "a " * 75 + "<|endoftext|>", "a " * 74 + "<|endoftext|>", "1" * 100,
    "!" * 300, "🚀" * 60, "photograph " * 30, "x" * 77, " ".join(str(i) for i in range(60)),
]


# Characters first assigned (or first given a case mapping) in Unicode 16. The reference's tables
# (Rust's std lower-casing, Oniguruma) know them; the C++ side's utf8proc may not, so these rows
# carry "unicode": "16.0" and the test checks them only against new enough tables.
UNICODE_16_CHARS = set("\ua7cb\ua7cc\ua7da\ua7dc\U00010d50\U00010d51\u0897\U000116d0\U00010d70\U00010d71")


def long_prompts():
    sentences = [
        "A sprawling fantasy landscape with floating islands connected by rope bridges.",
        "Waterfalls pour from the edges of each island into a sea of clouds far below.",
        "In the foreground, a young traveler in a green cloak studies an old map.",
        "The sky shifts from deep violet at the top to warm orange near the horizon.",
        "Tiny villages cling to the cliffs, their windows glowing with lantern light.",
    ]
    rng = random.Random(77)
    out = [" ".join(rng.choice(sentences) for _ in range(count)) for count in (4, 6, 8, 12, 20)]
    out += ["一只猫在屋顶上看着月亮，" * 20, "word " * 150, "a" * 500, "!?" * 120, " " * 300 + "x",
            "\n" * 200, "Привет мир " * 20, "x" + "\u0301" * 100]
    return out


def random_prompts(count):
    rng = random.Random(20260131)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
        "0123456789",
        " \t\n\r\u00a0\u3000\u2009\u0085",
        "'\"!?.,;:-_()[]{}<>/\\|@#$%^&*+=~`",
        "éèêëàâäôöûüçñÅØßœİΣ",
        "\u0300\u0301\u0302\u0303\u0308\u0327",
        "东京大阪猫狗山水日本語한국어",
        "😀🚀🦙👍🏽\u200d\ufe0f🇯🇵",
        "ΑΒΓαβγабвгдשלוםمرحبا",
    ]
    words = ["'s", "'t", "'re", "'ll", "<|endoftext|>", "<|startoftext|>", "cat", "dog", "  ", "\n\n", "123",
             "<|", "|>", "</w>"]
    out = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 25)):
            if rng.random() < 0.15:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def all_cases():
    cases = []
    for category, prompts in (("plain", PLAIN), ("case", CASE), ("apostrophes", APOSTROPHES),
                              ("whitespace", WHITESPACE), ("digits", DIGITS), ("punctuation", PUNCT), ("cjk", CJK),
                              ("scripts", SCRIPTS), ("emoji", EMOJI), ("combining", COMBINING),
                              ("new_unicode", NEW_UNICODE), ("edge_codepoints", EDGE_CODEPOINTS),
                              ("special_like", SPECIALS), ("truncation", TRUNCATION), ("long", long_prompts()),
                              ("random", random_prompts(80))):
        for prompt in prompts:
            cases.append((category, prompt))
    return cases


class RecordingClip(torch.nn.Module):
    """Stands in for CLIPTextModel: records the input_ids the pipeline passes, returns zeros."""

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.calls = []

    @property
    def dtype(self):
        return torch.float32

    @property
    def device(self):
        return self.anchor.device

    def forward(self, input_ids, output_hidden_states=False):
        self.calls.append(input_ids.tolist())
        return types.SimpleNamespace(pooler_output=torch.zeros(input_ids.shape[0], 4))


def pipeline_ids(tok, prompts):
    encoder = RecordingClip()
    stand_in = types.SimpleNamespace(tokenizer=tok, text_encoder=encoder, tokenizer_max_length=tok.model_max_length,
                                     _execution_device=torch.device("cpu"))
    FluxPipeline._get_clip_prompt_embeds(stand_in, prompts, num_images_per_prompt=1, device=torch.device("cpu"))
    return encoder.calls[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "tokenizers" / "clip")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        (args.out / name).unlink(missing_ok=True)  # the shared copies are read-only
        shutil.copyfile(CLIP_DIR / name, args.out / name)
    diffusers.utils.logging.set_verbosity_error()  # the truncation warnings are expected here

    tok = CLIPTokenizer.from_pretrained(str(CLIP_DIR))
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (BOS_ID, EOS_ID, PAD_ID)
    assert tok.model_max_length == MAX_LENGTH and tok.padding_side == "right"
    versions = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "torch": torch.__version__}
    versions["diffusers"] = diffusers.__version__
    tmp = Path(tempfile.mkdtemp(prefix="clip_tok_"))
    try:
        tok.save_pretrained(str(tmp))
        fast = tokenizers.Tokenizer.from_file(str(tmp / "tokenizer.json"))
        fast.no_truncation()
        fast.no_padding()

        rows, pipeline_rows = [], []
        picked = []
        for index, (category, prompt) in enumerate(all_cases()):
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            assert ids == fast.encode(prompt, add_special_tokens=False).ids, prompt
            assert tok(prompt)["input_ids"] == [BOS_ID] + ids + [EOS_ID], prompt
            padded = tok(prompt, padding="max_length", max_length=MAX_LENGTH, truncation=True)["input_ids"]
            kept = min(len(ids), MAX_LENGTH - 2)
            assert padded == [BOS_ID] + ids[:kept] + [EOS_ID] + [PAD_ID] * (MAX_LENGTH - 2 - kept), prompt
            row = {"category": category, "text": prompt, "ids": ids, "kept_77": kept}
            if UNICODE_16_CHARS & set(prompt):
                row["unicode"] = "16.0"
            rows.append(row)
            if category in ("truncation", "special_like", "long") or index % 10 == 0:
                picked.append(prompt)
        # The pipeline encodes a list of prompts as one batch; rows come back in order.
        for prompt, ids in zip(picked, pipeline_ids(tok, picked)):
            row = next(r for r in rows if r["text"] == prompt)
            kept = row["kept_77"]
            assert ids == [BOS_ID] + row["ids"][:kept] + [EOS_ID] + [PAD_ID] * (MAX_LENGTH - 2 - kept), prompt
            pipeline_rows.append({"prompt": prompt, "input_ids": ids})
        for raw in INVALID_UTF8:
            try:
                raw.decode("utf-8")
                raise AssertionError(f"{raw!r} is valid UTF-8")
            except UnicodeDecodeError:
                pass
            rows.append({"category": "invalid_utf8", "text_hex": raw.hex(), "error": "invalid_utf8"})
        # Round trips through decode, as transformers does them (specials kept, "</w>" -> " ", stripped).
        decode_rows = []
        for prompt in ("a photo of a cat", "Hello, World!", "it's 12:30", "  Café   crème  ", "東京タワー 🚀",
                       "x<|endoftext|>y"):
            ids = tok(prompt)["input_ids"]
            decode_rows.append({"ids": ids, "text": tok.decode(ids)})

        about = ("CLIP-L tokenizer corpus for FLUX.1. 'ids': CLIPTokenizer(text, add_special_tokens=False) with no "
                 "truncation; 'kept_77': text ids kept by tokenizer(text, padding='max_length', max_length=77, "
                 "truncation=True), which is [49406] + ids[:kept_77] + [49407] + 49407 padding (checked for every "
                 "row). 'text_hex' rows are invalid UTF-8 and must be rejected. Reference: transformers "
                 "CLIPTokenizer from shared/data/tokenizers/clip-vit-large-patch14 == tokenizers.Tokenizer of its "
                 "tokenizer.json.")
        header = {"_about": about, "generator": "tools/reference/make_clip_tokenizer_corpus.py", "versions": versions,
                  "bos_id": BOS_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "max_length": MAX_LENGTH,
                  "decode": decode_rows}
        write_rows(args.out / "clip_corpus.json", header, rows)
        write_rows(args.out / "clip_flux_pipeline.json",
                   {"_about": "input_ids that diffusers FluxPipeline._get_clip_prompt_embeds passes to the CLIP text "
                              "encoder (recorded by a stand-in encoder), prompts encoded as one batch.",
                    "generator": "tools/reference/make_clip_tokenizer_corpus.py", "versions": versions},
                   pipeline_rows)
        shared = json.loads((CLIP_DIR.parent / "reference_vectors.json").read_text(encoding="utf-8"))
        for row in shared["clip"]:
            assert tok(row["text"])["input_ids"] == row["ids"], row
        (args.out / "reference_vectors_clip.json").write_text(
            json.dumps({"_about": shared["_about"], "clip": shared["clip"]}, ensure_ascii=False, indent=1) + "\n",
            encoding="utf-8")
        print(f"{len(rows)} corpus rows ({len(INVALID_UTF8)} invalid UTF-8), {len(pipeline_rows)} pipeline rows")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
