#!/usr/bin/env python3
"""The official OpenAI Python client against `fluxrt serve`, unchanged (label openai; exit 77 =
skipped when the openai package is absent): images.generate and images.edit, models.list, and the
generated image equals `fluxrt generate` with the same settings.

Usage: openai_client.py FLUXRT_BINARY DEMO_MODEL
"""
import base64
import os
import re
import subprocess
import sys
import tempfile

try:
    import openai
except ImportError:
    print("openai not installed (pip install openai): skipped")
    sys.exit(77)


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
        print("openai client: models.list, images.generate (equal to fluxrt generate), images.edit ok")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
