#!/usr/bin/env python3
"""Inpainting from the web page in headless Chromium (label browser; exit 77 = skipped when chromium
is absent), on the tiny klein model (f32): the page offers the mask tools because /v1/models says
the model takes a mask; a source image is picked in the file input; Invert and Clear are clicked;
a mask is painted with a real mouse drag and partly erased with a real touch drag (Input.* events
over the canvas, turned into pointer events by the browser); Generate sends the edit; the page shows
step previews and the result beside the source. Then the same request (the same source file, the
mask PNG the page sent, the same fields) goes to /v1/images/edits directly, and its PNG must be
byte-equal to the one the page shows. A screenshot is saved to SCREENSHOT.

Usage: web_page_inpaint.py FLUXRT_BINARY MODEL_DIR SCREENSHOT
"""
import base64
import json
import os
import struct
import sys
import tempfile
import time
import urllib.request
import uuid
import zlib

from devtools_pipe import DevTools, chromium_or_skip, start_server, wait_for

SIZE = 64  # the source's side: a multiple of 16, so the output keeps it
PROMPT = "a red apple on the table"
STEPS, SEED, STRENGTH = 4, 11, 0.75


def png_rgb(width, height, pixel):
    """An 8-bit RGB PNG of pixel(x, y) -> (r, g, b), written with zlib alone."""
    raw = b"".join(b"\0" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def post_json(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def post_form(port, path, fields, files):
    """multipart/form-data: text `fields`, then `files` as (name, filename, bytes)."""
    boundary = uuid.uuid4().hex
    body = b""
    for name, value in fields.items():
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                 f"{value}\r\n").encode()
    for name, filename, data in files:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                 f"filename=\"{filename}\"\r\nContent-Type: image/png\r\n\r\n").encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body,
                                 headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def mask_pixels(png):
    """The pixels of the page's mask PNG as {(x, y): (r, g, b, a)}. The page writes it itself (8-bit
    RGBA, every row unfiltered), which this checks rather than implementing PNG's filters."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "the mask is no PNG"
    pos, header, idat = 8, None, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        data = png[pos + 8:pos + 8 + length]
        crc = struct.unpack(">I", png[pos + 8 + length:pos + 12 + length])[0]
        assert zlib.crc32(png[pos + 4:pos + 8 + length]) == crc, f"bad CRC in {kind}"
        header = struct.unpack(">IIBBBBB", data) if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert (depth, colour, interlace) == (8, 6, 0), f"the mask is not 8-bit RGBA: {header}"
    raw, row = zlib.decompress(idat), 1 + 4 * width
    assert len(raw) == row * height and all(raw[y * row] == 0 for y in range(height)), "filtered rows"
    return {(x, y): tuple(raw[y * row + 1 + 4 * x:y * row + 5 + 4 * x])
            for y in range(height) for x in range(width)}


def data_url_bytes(url, kind):
    prefix = f"data:{kind};base64,"
    assert url.startswith(prefix), f"not a {kind} data URL: {url[:60]!r}"
    return base64.b64decode(url[len(prefix):])


# Alpha of the mask canvas (what the user sees painted) at image pixels, and the count of each value.
CANVAS_ALPHA = """((points) => {
  const c = document.getElementById('mask');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const counts = {};
  for (let i = 3; i < d.length; i += 4) counts[d[i]] = (counts[d[i]] || 0) + 1;
  return { size: [c.width, c.height], counts,
           at: points.map(([x, y]) => d[(y * c.width + x) * 4 + 3]) };
})"""

def main():
    chromium = chromium_or_skip()
    binary, model_dir, screenshot = sys.argv[1], sys.argv[2], sys.argv[3]
    server, port = start_server(binary, "--model", model_dir, "--dtype", "f32")
    with tempfile.TemporaryDirectory() as work:
        source = png_rgb(SIZE, SIZE, lambda x, y: (40 + 3 * x, 200 - 2 * y, 90 + x + y))
        source_path = os.path.join(work, "source.png")
        with open(source_path, "wb") as f:
            f.write(source)
        # A finished image first: step previews use a colour fit the engine makes from finished
        # images, so the server's first request has none.
        post_json(port, "/v1/images/generations",
                  {"prompt": "warm up", "size": f"{SIZE}x{SIZE}", "num_inference_steps": 2, "seed": 1})

        browser = DevTools(chromium, os.path.join(work, "profile"))
        try:
            browser.open(f"http://127.0.0.1:{port}/")
            model = wait_for(lambda: browser.evaluate(
                "(() => { const t = document.getElementById('model')?.textContent ?? '';"
                " return t.startsWith('connecting') ? '' : t; })()"), "the model line", 60)
            assert "flux2-klein-tiny" in model, f"the page shows {model!r}"
            # The model takes a mask (/v1/models limits.mask): the inpainting fieldset is offered.
            wait_for(lambda: browser.evaluate("!document.getElementById('inpaint').hidden"),
                     "the inpainting tools", 10)

            browser.set_files("#source", [source_path])
            wait_for(lambda: browser.evaluate(
                "!document.getElementById('editor').hidden && document.getElementById('mask').width"),
                "the editor with the source", 20)

            def canvas(points):
                return browser.evaluate(f"{CANVAS_ALPHA}({json.dumps(points)})")

            def client(x, y):
                """The viewport point over the centre of image pixel (x, y)."""
                bx, by, bw, bh = browser.box("#mask")
                return (bx + (x + 0.5) * bw / SIZE, by + (y + 0.5) * bh / SIZE)

            state = canvas([])
            assert state["size"] == [SIZE, SIZE], f"the mask canvas is {state['size']}"
            brush = int(browser.evaluate("document.getElementById('brush').value"))
            assert 2 <= brush <= 16, f"brush size {brush}"

            # Invert of nothing paints everything; Clear empties it again.
            browser.click("#invert")
            assert canvas([])["counts"] == {"255": SIZE * SIZE}, "Invert left pixels unpainted"
            browser.click("#clear")
            assert canvas([])["counts"] == {"0": SIZE * SIZE}, "Clear left paint"

            # Paint a horizontal stroke with the mouse, then erase a vertical band across its
            # middle with a finger: two separate painted parts remain.
            browser.mouse_drag([client(x, 32) for x in range(10, 55, 3)])
            browser.click("#tool-erase")
            browser.touch_drag([client(32, y) for y in range(14, 51, 3)])
            painted, erased, untouched = [[14, 32], [50, 32]], [[32, 32], [32, 20], [32, 44]], \
                [[4, 4], [14, 50], [60, 60]]
            state = canvas(painted + erased + untouched)
            assert state["at"] == [255] * 2 + [0] * 6, f"the mask canvas after painting: {state}"
            # Binary after each stroke: no half-painted pixel whose fate the user cannot see.
            assert set(state["counts"]) == {"0", "255"}, f"alpha values {state['counts']}"
            painted_count = state["counts"]["255"]
            assert SIZE * 3 < painted_count < SIZE * SIZE // 3, f"{painted_count} pixels painted"

            browser.type_into("#prompt", PROMPT)
            browser.type_into("#steps", str(STEPS))
            browser.type_into("#seed", str(SEED))
            browser.type_into("#strength", str(STRENGTH))
            browser.click("#go")

            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                status = browser.evaluate("document.getElementById('status').textContent")
                if status.startswith("error"):
                    raise AssertionError(f"the page shows {status!r}")
                if status == "done":
                    break
                time.sleep(0.05)
            else:
                raise AssertionError(f"no edited image after 120 s; status {status!r}")
            page = browser.evaluate(
                "(() => { const r = document.getElementById('result');"
                " const mask = document.querySelector('#grid figure a[download^=\"fluxrt-mask\"]');"
                " return { result: r.hidden ? '' : r.src, size: r.naturalWidth + 'x' + r.naturalHeight,"
                " caption: document.getElementById('result-caption').textContent,"
                " grid: document.querySelector('#grid img').src, mask: mask ? mask.href : '',"
                " previews: Array.from(document.querySelectorAll('#previews img')).map((i) => i.alt),"
                " source_shown: !document.getElementById('editor').hidden }; })()")
            assert page["source_shown"] and page["size"] == f"{SIZE}x{SIZE}", page["size"]
            assert page["result"] == page["grid"], "the result beside the source is not the grid's"
            caption = page["caption"]
            assert "edit of source.png" in caption and f"seed {SEED}" in caption, caption
            assert page["previews"], "the page showed no step preview"

            # The mask the page sent: what was painted transparent white (repaint, for the API's
            # alpha and for readers of the colour alike), the rest opaque black, pixel for pixel.
            mask = data_url_bytes(page["mask"], "image/png")
            sent = mask_pixels(mask)
            assert len(sent) == SIZE * SIZE, f"the mask has {len(sent)} pixels"
            assert set(sent.values()) == {(255, 255, 255, 0), (0, 0, 0, 255)}, set(sent.values())
            for x, y in painted + erased + untouched:
                assert sent[(x, y)] == ((255, 255, 255, 0) if [x, y] in painted else (0, 0, 0, 255)), (x, y)
            assert sum(p[3] == 0 for p in sent.values()) == painted_count, "the mask is not what was shown"

            # The same request through the API, as OpenAI's images.edit sends it.
            api = post_form(port, "/v1/images/edits",
                            {"prompt": PROMPT, "n": 1, "size": "auto", "response_format": "b64_json",
                             "num_inference_steps": STEPS, "seed": SEED, "strength": STRENGTH},
                            [("image", "source.png", source), ("mask", "mask.png", mask)])
            api_png = base64.b64decode(api["data"][0]["b64_json"])
            page_png = data_url_bytes(page["result"], "image/png")
            assert page_png == api_png, (f"the page's image ({len(page_png)} bytes) differs from the "
                                         f"API's ({len(api_png)} bytes)")

            shot = browser.call("Page.captureScreenshot", {"format": "png"})["data"]
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot))
            print(f"inpaint page: model {model!r}; brush {brush}; {painted_count} pixels painted; "
                  f"previews {page['previews']}; result {page['size']}, {len(page_png)} bytes, equal to "
                  f"the API's; screenshot {screenshot}")
        finally:
            browser.close()
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
