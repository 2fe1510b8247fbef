#!/usr/bin/env python3
"""Writes tests/data/tokenizers/transformers5/: the checked-in tokenizers saved again by transformers 5.

transformers 5 saves every tokenizer as tokenizer.json + tokenizer_config.json (+ chat_template.jinja
when there is a chat template) and nothing else: no vocab.json / merges.txt, no spiece.model, no
special_tokens_map.json, and a tokenizer_config.json without added_tokens_decoder. Published repos
still carry the old files, but a folder written by FluxPipeline.save_pretrained (a fine-tune, a
re-saved model) has only the new ones. These folders let the C++ tests load that layout:

  clip/   tests/data/tokenizers/clip (vocab.json + merges.txt + tokenizer_config.json)
  t5/     tests/data/tokenizers/t5 (spiece.model + tokenizer.json + tokenizer_config.json)
  qwen3/  tests/data/tokenizers/qwen3_mini_tokenizer.json with the genuine Qwen3
          tokenizer_config.json (chat template, special tokens) of
          tests/data/models/flux2-klein-tiny/tokenizer; the genuine Qwen3 tokenizer.json is 11 MB,
          too big to check in (that folder carries the genuine vocab.json + merges.txt instead)

Each source is loaded with AutoTokenizer and saved with save_pretrained. The script then checks
what the C++ tests rely on: loaded back by transformers, each folder gives the ids of the
checked-in corpus (clip_corpus.json, t5_corpus.json, qwen3_mini_expected.json), and so does its
tokenizer.json run by the `tokenizers` package alone; saving it again writes the same bytes; and
the genuine Qwen3 tokenizer saved the same way has the same tokenizer_config.json and
chat_template.jinja as qwen3/. It also writes README.md there with the package versions.

Needs transformers, tokenizers, sentencepiece and protobuf only (no torch, no diffusers):
  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install transformers tokenizers sentencepiece protobuf
  /tmp/tokvenv/bin/python tools/reference/make_transformers5_tokenizers.py
"""

import argparse
import filecmp
import json
import shutil
import tempfile
from importlib.metadata import version
from pathlib import Path

import tokenizers
import transformers
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "tokenizers"
QWEN_CONFIG = REPO / "tests" / "data" / "models" / "flux2-klein-tiny" / "tokenizer" / "tokenizer_config.json"


def qwen_source(tmp):
    """A folder AutoTokenizer reads as the Qwen3 tokenizer with the mini vocabulary."""
    src = tmp / "qwen3_src"
    src.mkdir()
    shutil.copyfile(DATA / "qwen3_mini_tokenizer.json", src / "tokenizer.json")
    config = json.loads(QWEN_CONFIG.read_text(encoding="utf-8"))
    # Its added_tokens_decoder gives the genuine ids (151643...); the mini file numbers the same
    # tokens from 2256, and its own added_tokens list is the one that fits.
    config.pop("added_tokens_decoder")
    (src / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    return src


def corpus_rows(name):
    """(text, ids, add_special_tokens) for every valid-UTF-8 row of a checked-in corpus."""
    if name == "clip":
        rows = json.loads((DATA / "clip" / "clip_corpus.json").read_text(encoding="utf-8"))["cases"]
        return [(r["text"], r["ids"], False) for r in rows if "text" in r]
    if name == "t5":
        rows = json.loads((DATA / "t5" / "t5_corpus.json").read_text(encoding="utf-8"))["cases"]
        return [(r["text"], r["ids"], True) for r in rows if "text" in r]  # ids end with </s>
    rows = json.loads((DATA / "qwen3_mini_expected.json").read_text(encoding="utf-8"))["cases"]
    return [(r["text"], r["ids"], False) for r in rows]


def check_ids(tok, name, where):
    rows = corpus_rows(name)
    wrong = [text for text, ids, special in rows if tok(text, add_special_tokens=special)["input_ids"] != ids]
    assert not wrong, f"{name} from {where}: {len(wrong)} of {len(rows)} rows differ, e.g. {wrong[0]!r}"
    return len(rows)


def check_file_alone(path, name):
    """The saved tokenizer.json run by the `tokenizers` package alone: transformers 5 writes the
    pipeline it runs into it (the published T5 file's normalizer and pre-tokenizer are not that)."""
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    rows = corpus_rows(name)
    wrong = [text for text, ids, special in rows if tok.encode(text, add_special_tokens=special).ids != ids]
    assert not wrong, f"{path} alone: {len(wrong)} of {len(rows)} rows differ, e.g. {wrong[0]!r}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DATA / "transformers5")
    args = parser.parse_args()
    major = transformers.__version__.split(".")[0]
    assert major == "5", f"transformers {transformers.__version__}: these folders are the 5.x layout"
    transformers.logging.set_verbosity_error()  # the corpus has rows longer than model_max_length on purpose
    tmp = Path(tempfile.mkdtemp(prefix="tok5_"))
    try:
        sources = {"clip": DATA / "clip", "t5": DATA / "t5", "qwen3": qwen_source(tmp)}
        # Where the licence files are (the t5 source folder has none checked in).
        licences = {"clip": DATA / "clip", "qwen3": QWEN_CONFIG.parent}
        counts, classes, written = {}, {}, {}
        for name, src in sources.items():
            out = args.out / name
            shutil.rmtree(out, ignore_errors=True)
            tok = AutoTokenizer.from_pretrained(str(src))
            check_ids(tok, name, src)
            tok.save_pretrained(str(out))
            written[name] = sorted(p.name for p in out.iterdir())
            again = AutoTokenizer.from_pretrained(str(out))
            assert type(again) is type(tok), (name, type(again), type(tok))
            counts[name] = check_ids(again, name, out)
            check_file_alone(out / "tokenizer.json", name)
            classes[name] = type(tok).__name__
            # A second save of what was loaded back must not change a byte (the layout is stable).
            again.save_pretrained(str(tmp / f"{name}_again"))
            assert written[name] == sorted(p.name for p in (tmp / f"{name}_again").iterdir()), name
            for file in written[name]:
                assert filecmp.cmp(out / file, tmp / f"{name}_again" / file, shallow=False), (name, file)
            if name in licences:
                shutil.copyfile(licences[name] / "LICENSE", out / "LICENSE")
        # The genuine Qwen3 tokenizer saved the same way: the small files must be the fixture's.
        genuine = tmp / "qwen3_genuine"
        AutoTokenizer.from_pretrained(str(QWEN_CONFIG.parent)).save_pretrained(str(genuine))
        for file in ("tokenizer_config.json", "chat_template.jinja"):
            assert filecmp.cmp(genuine / file, args.out / "qwen3" / file, shallow=False), file
    finally:
        shutil.rmtree(tmp)

    versions = {package: version(package) for package in ("transformers", "tokenizers", "sentencepiece", "protobuf")}
    lines = [
        "# transformers5/ — tokenizer folders in the layout transformers 5 saves",
        "",
        "Written by `tools/reference/make_transformers5_tokenizers.py` (see its docstring): each source",
        "tokenizer loaded with `AutoTokenizer.from_pretrained` and saved with `save_pretrained`, as",
        "`FluxPipeline.save_pretrained` / `Flux2KleinPipeline.save_pretrained` save theirs. transformers writes",
        "nothing else: no vocab.json / merges.txt / spiece.model / special_tokens_map.json.",
        "",
        "| folder | class | source | written by transformers | corpus rows checked (transformers, loaded back) |",
        "|---|---|---|---|---|",
        f"| `clip/` | {classes['clip']} | `../clip/` (vocab.json + merges.txt) | {', '.join(written['clip'])} "
        f"| {counts['clip']} of `../clip/clip_corpus.json` |",
        f"| `t5/` | {classes['t5']} | `../t5/` (spiece.model + tokenizer.json) | {', '.join(written['t5'])} "
        f"| {counts['t5']} of `../t5/t5_corpus.json` |",
        f"| `qwen3/` | {classes['qwen3']} | `../qwen3_mini_tokenizer.json` + the genuine Qwen3 tokenizer_config.json "
        f"| {', '.join(written['qwen3'])} | {counts['qwen3']} of `../qwen3_mini_expected.json` |",
        "",
        "The vocabularies are the sources' re-serialised, under their licences: `clip/LICENSE` (OpenAI CLIP,",
        "MIT) and `qwen3/LICENSE` (Qwen3, Apache 2.0) are copies of the sources' LICENSE, whose NOTICE",
        "(`../clip/NOTICE`, `../../models/flux2-klein-tiny/tokenizer/NOTICE`) says where the originals come",
        "from; `t5/` is google/t5-v1_1-xxl's vocabulary (Apache License 2.0), like `../t5/`.",
        "",
        "The qwen3 folder has the mini vocabulary (first 2000 merges): the genuine Qwen3 tokenizer.json",
        "that transformers writes is 11 MB. Its tokenizer_config.json and chat_template.jinja are what",
        "transformers writes for the genuine one too.",
        "",
        "Package versions:",
        "",
        *[f"- {package} {v}" for package, v in versions.items()],
        "",
    ]
    (args.out / "README.md").write_text("\n".join(lines), encoding="utf-8")
    print("wrote", args.out, counts, versions)


if __name__ == "__main__":
    main()
