#!/usr/bin/env python3
"""The official OpenAI Python client against `fluxrt serve`, unchanged (label openai; exit 77 =
skipped when the openai package is absent): images.generate and images.edit, models.list, the
generated image equals `fluxrt generate` with the same settings, and images.edit(image=...,
mask=...) with OpenAI's transparent-means-edit mask gives the pixels `fluxrt generate --init-image
--mask` gives for the same region painted white.

Usage: openai_client.py FLUXRT_BINARY DEMO_MODEL
"""
import base64
import os
import re
import struct
import subprocess
import sys
import tempfile
import zlib

try:
    import openai
except ImportError:
    print("openai not installed (pip install openai): skipped")
    sys.exit(77)


def png(width, height, channels, pixel):
    """A minimal 8-bit PNG (colour type 2 RGB or 6 RGBA) whose pixel (x, y) is pixel(x, y)."""
    rows = b"".join(b"\0" + b"".join(bytes(pixel(x, y)) for x in range(width)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 6 if channels == 4 else 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def png_pixels(data):
    """The filtered scanlines of a PNG (its IDAT data inflated): equal for equal pixels written by
    the same encoder, whatever text chunks the files carry."""
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + length]
        pos += 12 + length
    return zlib.decompress(idat)


def in_box(x, y):
    return 8 <= x < 40 and 16 <= y < 48


def main():
    binary, model = sys.argv[1], sys.argv[2]
    proc = subprocess.Popen([binary, "serve", "--port", "0", "--model", model, "--api-key", "k"],
                            stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "ready" in line:
            break
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
        assert [m.id for m in client.models.list()] == ["demo"]
        r = client.images.generate(model="demo", prompt="a red circle on a blue background", size="64x64",
                                   extra_body={"seed": 7, "num_inference_steps": 2})
        served = base64.b64decode(r.data[0].b64_json)
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([binary, "generate", "--model", model, "--prompt", "a red circle on a blue background",
                            "--size", "64x64", "--seed", "7", "--steps", "2", "--guidance", "4", "-q", "--out", out,
                            "--filename", "x"], check=True, stdout=subprocess.DEVNULL)
            # Byte for byte: the same pixels and the same text chunks.
            cli = open(os.path.join(out, "x.png"), "rb").read()
        assert served == cli, "the served PNG differs from `fluxrt generate`'s"
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            f.write(served)
            f.flush()
            e = client.images.edit(model="demo", image=open(f.name, "rb"), prompt="a blue circle",
                                   extra_body={"seed": 3, "num_inference_steps": 1})
        assert e.data[0].b64_json
        # Inpainting: OpenAI's mask marks what to edit with fully transparent pixels.
        with tempfile.TemporaryDirectory() as out:
            source, mask, cli_mask = (os.path.join(out, n) for n in ("source.png", "mask.png", "cli_mask.png"))
            open(source, "wb").write(served)
            open(mask, "wb").write(png(64, 64, 4, lambda x, y: (0, 0, 0, 0 if in_box(x, y) else 255)))
            open(cli_mask, "wb").write(png(64, 64, 3, lambda x, y: (255,) * 3 if in_box(x, y) else (0,) * 3))
            m = client.images.edit(model="demo", image=open(source, "rb"), mask=open(mask, "rb"),
                                   prompt="a green square", extra_body={"seed": 5, "num_inference_steps": 2})
            masked = base64.b64decode(m.data[0].b64_json)
            subprocess.run([binary, "generate", "--model", model, "--prompt", "a green square", "--init-image",
                            source, "--mask", cli_mask, "--seed", "5", "--steps", "2", "--guidance", "4", "-q",
                            "--out", out, "--filename", "inpainted"], check=True, stdout=subprocess.DEVNULL)
            cli = open(os.path.join(out, "inpainted.png"), "rb").read()
        assert png_pixels(masked) == png_pixels(cli), "the masked edit differs from `fluxrt generate --mask`'s"
        assert png_pixels(masked) != png_pixels(served), "the masked edit left the image unchanged"
        print("openai client: models.list, images.generate (equal to fluxrt generate), images.edit, "
              "images.edit with a mask (equal to fluxrt generate --mask) ok")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
