#!/usr/bin/env python3
"""Writes the seed corpora of the request fuzzers (tests/fuzz/fuzz_*.cpp) into the folders beside
this file, one per target. The seeds are small and checked in; rerun this after changing an input
layout (each target's comment describes it). Any bytes are valid input: a seed only has to reach
a branch quickly, valid requests and the usual mistakes alike.

    python3 tests/data/requests/fuzz/make_seeds.py
"""
import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGES = HERE.parents[1] / "images" / "seeds"


def write(target, name, data):
    folder = HERE / target
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def generation_request():
    def body(name, **fields):
        write("generation_request", name + ".json", json.dumps(fields, ensure_ascii=False))

    body("minimal", prompt="a cat")
    body(
        "every_field",
        prompt="a red fox in snow",
        model="black-forest-labs/FLUX.1-dev",
        size="512x768",
        n=2,
        num_inference_steps=28,
        guidance_scale=3.5,
        true_cfg_scale=4,
        strength=0.6,
        seed=42,
        negative_prompt="blurry",
        max_sequence_length=256,
        response_format="url",
        output_format="jpg",
        output_compression=80,
        user="u-1",
        stream=True,
        partial_images=2,
        loras=[{"name": "style", "strength": 0.8}, "other"],
    )
    body("size_auto", prompt="a cat", size="auto", seed=-1)
    body("seed_past_int64", prompt="a cat", seed=18446744073709551615)
    body("whole_floats", prompt="a cat", num_inference_steps=4.0, n=1.0, output_compression=50.0)
    # Numbers as strings are refused in JSON (a form field's text is not).
    body("numbers_as_strings", prompt="a cat", num_inference_steps="4", guidance_scale="3.5")
    body("out_of_range", prompt="a cat", num_inference_steps=100000, guidance_scale=-1, n=0)
    body("bad_size", prompt="a cat", size="1024x", strength=1e-50)
    body("odd_size", prompt="a cat", size="1000x1000")
    body("unicode", prompt="猫 🐈 e\u0301\u2028", negative_prompt="x\u0000y")
    body("nulls", prompt="a cat", size=None, seed=None, loras=None, model=None)
    body("unknown_model", prompt="a cat", model="sd\nxl", output_format="gif")
    body("wrong_types", prompt=["a", "b"], stream="yes", user=1, response_format=0)
    body("no_prompt", num_inference_steps=4)
    write("generation_request", "array.json", '[{"prompt": "a cat"}]')
    write("generation_request", "truncated.json", '{"prompt": "a cat", "n": ')
    write("generation_request", "big_numbers.json",
          '{"prompt": "a", "n": 1e400, "seed": -9223372036854775809, "guidance_scale": 1e-400}')


# fuzz_edit_request: parts separated by "\n--\n", each "name[\tfilename[\tcontent-type]]\n" + content.
def part(name, content, filename=None, content_type=None):
    header = name
    if filename is not None:
        header += "\t" + filename
        if content_type is not None:
            header += "\t" + content_type
    return header.encode() + b"\n" + (content if isinstance(content, bytes) else content.encode())


def form(*parts):
    return b"\n--\n".join(parts)


def edit_request():
    png = (IMAGES / "rgb.png").read_bytes()
    jpeg = (IMAGES / "baseline.jpg").read_bytes()
    webp = (IMAGES / "lossy.webp").read_bytes()
    vp8x = (IMAGES / "xmp.webp").read_bytes()
    # The same PNG declaring 4096 x 4096: over the fuzzers' upload limit, refused before decoding.
    huge = png[:16] + struct.pack(">II", 4096, 4096) + png[24:]
    w = lambda name, *parts: write("edit_request", name, form(*parts))
    w("one_png", part("prompt", "make it blue"), part("image", png, "cat.png", "image/png"))
    w("two_images", part("prompt", "combine"), part("image[]", jpeg, "a.jpg", "image/jpeg"),
      part("image[]", webp, "b.webp", "image/webp"))
    w("five_images", part("prompt", "p"), *[part("image[]", png, f"{i}.png") for i in range(5)])
    w("fields_as_text", part("prompt", "p"), part("image", vp8x, "x.webp"), part("size", "64x64"),
      part("n", "2"), part("num_inference_steps", "4"), part("guidance_scale", "3.5"),
      part("seed", "random"), part("strength", "0.6"), part("stream", "1"),
      part("loras", '[{"name": "style", "strength": -0.5}]'), part("output_compression", "007"))
    w("bad_text_numbers", part("prompt", "p"), part("image", png, "c.png"), part("n", " 2"),
      part("guidance_scale", "nan"), part("partial_images", "+1"))
    w("size_auto", part("prompt", "p"), part("size", "auto"), part("image", png, "c.png"))
    w("mask", part("prompt", "p"), part("image", png, "c.png"), part("mask", png, "m.png"))
    w("no_image", part("prompt", "p"), part("image", ""))
    w("no_prompt", part("image", png, "c.png"))
    w("prompt_as_file", part("prompt", "p", "prompt.txt"), part("image", png, "c.png"))
    w("not_an_image", part("prompt", "p"), part("image", "GIF89a....", "c.gif", "image/gif"))
    w("truncated_png", part("prompt", "p"), part("image", png[:60], "c.png"))
    w("huge_png", part("prompt", "p"), part("image", huge, "big.png"))
    w("filename_newline", part("prompt", "p"), part("image", "junk", "a\rb\x01.png"))
    w("loras_not_json", part("prompt", "p"), part("image", png, "c.png"), part("loras", "style"))


def lora_field():
    w = lambda name, text: write("lora_field", name, text)
    w("empty_list", "[]")
    w("names", '["style", "other"]')
    w("objects", '[{"name": "style", "strength": 0.8}, {"name": "b", "strength": -10}]')
    w("name_only", '[{"name": "style"}]')
    w("strength_over", '[{"name": "a", "strength": 10.5}]')
    w("strength_huge", '[{"name": "a", "strength": 1e308}]')
    w("strength_text", '[{"name": "a", "strength": "1"}]')
    w("extra_key", '[{"name": "a", "scale": 1}]')
    w("no_name", '[{"strength": 1}]')
    w("not_a_list", '"style"')
    w("null", "null")
    w("number_item", "[1, true, null]")
    w("nine", json.dumps([f"l{i}" for i in range(9)]))
    w("unicode", '["st\\u00fdle", "\\ud83d\\ude00", "a\\nb"]')
    # The same input as the CLI's --lora FILE[:STRENGTH] (parse_lora_text).
    w("cli_strength", "dir/style.safetensors:0.75")
    w("cli_plain", "style.safetensors")
    w("cli_colons", "odd:name.safetensors:-1e-3")
    w("cli_no_file", ":0.5")
    w("cli_huge", "s.safetensors:1e300")


# fuzz_request_fields: byte 0 the field, byte 1 the value's type (bit 2: the limits), 14 bytes of
# limits, then the value.
FIELDS = ["negative_prompt", "size", "steps", "guidance", "true_cfg", "strength", "seed", "batch",
          "max_sequence_length"]


def request_fields():
    # max_steps, max_guidance, max_sequence_length, max_side, max_images_per_prompt,
    # max_prompt_chars, size_multiple: a FLUX model's limits and a tight set.
    flux = struct.pack("<6HBx", 1000, 100, 512, 4096, 4, 32000, 16)
    tight = struct.pack("<6HBx", 50, 10, 77, 256, 1, 8, 8)

    def seed(name, field, kind, value, limits=None):
        header = bytes([FIELDS.index(field), kind | (4 if limits else 0)]) + (limits or bytes(14))
        if kind == 1:
            value = struct.pack("<q", value)
        elif kind == 2:
            value = struct.pack("<d", value)
        elif isinstance(value, str):
            value = value.encode()
        write("request_fields", name, header + value)

    seed("negative_text", "negative_prompt", 0, "blurry, low quality")
    seed("negative_long", "negative_prompt", 0, "ééééééééé", tight)
    seed("negative_bad_utf8", "negative_prompt", 0, b"a\xc3(\xed\xa0\x80")
    seed("negative_number", "negative_prompt", 1, 5)
    seed("size", "size", 0, "1024x768", flux)
    seed("size_auto", "size", 0, "auto")
    seed("size_odd", "size", 0, "1000X1000", flux)
    seed("size_signs", "size", 0, "+64x-64")
    seed("size_huge", "size", 0, "99999999999x1", tight)
    seed("size_number", "size", 2, 1024.0)
    seed("steps_text", "steps", 0, "28")
    seed("steps_int", "steps", 1, 4, tight)
    seed("steps_whole_double", "steps", 2, 50.0, flux)
    seed("steps_fraction", "steps", 2, 2.5)
    seed("steps_spaces", "steps", 0, " 4\n")
    seed("guidance_text", "guidance", 0, "3.5", flux)
    seed("guidance_hex", "guidance", 0, "0x1p3")
    seed("guidance_nan", "guidance", 2, float("nan"))
    seed("true_cfg_int", "true_cfg", 1, 4, tight)
    seed("strength_text", "strength", 0, "0.6")
    seed("strength_tiny", "strength", 2, 1e-50)
    seed("strength_zero", "strength", 0, "0")
    seed("seed_text", "seed", 0, "18446744073709551615")
    seed("seed_random", "seed", 0, "random")
    seed("seed_minus_one", "seed", 1, -1)
    seed("seed_double", "seed", 2, -1.0)
    seed("seed_negative", "seed", 1, -2)
    seed("batch", "batch", 0, "4", tight)
    seed("max_sequence_length", "max_sequence_length", 1, 512, flux)
    seed("max_sequence_length_big", "max_sequence_length", 0, "1e3")


def preset():
    w = lambda name, text: write("preset", name + ".yaml", text)
    w("every_key", """model: black-forest-labs/FLUX.1-dev
negative_prompt: blurry
size: 1024x1024
steps: 28
guidance: 3.5
true_cfg: 4
strength: 0.6
seed: random
batch: 2
max_sequence_length: 512
dtype: bf16
device: cuda:0
threads: 8
low_memory: yes
out: outputs
filename: "img-{seed}-{index}.png"
prompts:
  - a cat
  - a dog
init_image: photo.png
vae_tiling: on
loras:
  - style.safetensors
  - {path: other.safetensors, strength: -0.5}
""")
    w("empty", "")
    w("null_values", "steps:\nseed: ~\nloras:\n")
    w("bad_values", "steps: 0\nguidance: many\nthreads: -1\ndtype: f16\n")
    w("unknown_key", "stepz: 4\n")
    w("not_a_map", "- steps\n- 4\n")
    w("nested", "size: {width: 64}\nprompts: [[a]]\n")
    w("block_scalar", "negative_prompt: |\n  two\n  lines\nprompts: >\n  folded\n  text\n")
    w("lora_strengths", "loras:\n  - {path: a, strength: 1e300}\n  - {path: b, strength: nan}\n"
      "  - {path: '', strength: 1}\n  - {strength: 1}\n  - {path: c, scale: 1}\n")
    w("anchors", "size: &s 64x64\nprompts: [*s, *s]\n")
    w("tags", "steps: !!int 4\nseed: !!str 7\nlow_memory: !!bool true\n")
    w("bad_yaml", "steps: [4\nsize: '64x64\n")
    w("duplicate_keys", "steps: 4\nsteps: 8\n")
    w("multi_document", "steps: 4\n---\nsteps: 8\n")


if __name__ == "__main__":
    for target in ("generation_request", "edit_request", "lora_field", "request_fields", "preset"):
        shutil.rmtree(HERE / target, ignore_errors=True)
    generation_request()
    edit_request()
    lora_field()
    request_fields()
    preset()
