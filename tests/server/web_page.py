#!/usr/bin/env python3
"""The web page in headless Chromium (label browser; exit 77 = skipped when chromium is absent):
the page loads from `fluxrt serve`, a prompt is typed and the Generate button clicked, the progress
bar is watched moving through the steps, the image appears and decodes; a screenshot is saved to
SCREENSHOT.

Chromium is driven over the DevTools protocol (devtools_pipe.py, standard library only). Clicks
and typing are real input events, so the page runs exactly as for a user; the test only reads the
DOM, every 20 ms, the way a user watches it.

Usage: web_page.py FLUXRT_BINARY SCREENSHOT
"""
import base64
import re
import sys
import tempfile
import time

from devtools_pipe import DevTools, chromium_or_skip, start_server, wait_for

STEPS = 24
PROMPT = "a green square on a white background"


def main():
    chromium = chromium_or_skip()
    binary, screenshot = sys.argv[1], sys.argv[2]
    server, port = start_server(binary)
    with tempfile.TemporaryDirectory() as profile:
        browser = DevTools(chromium, profile)
        try:
            browser.open(f"http://127.0.0.1:{port}/")
            # The page asks /v1/models on load and shows the model's id.
            model = wait_for(lambda: browser.evaluate(
                "(() => { const t = document.getElementById('model')?.textContent ?? '';"
                " return t.startsWith('connecting') ? '' : t; })()"), "the model line", 60)
            assert "demo" in model, f"the page shows no model: {model!r}"

            browser.type_into("#prompt", PROMPT)
            browser.type_into("#steps", str(STEPS))
            browser.type_into("#seed", "7")
            browser.click("#go")

            # Watch the bar as a user would: the status text and the bar's width, every 20 ms.
            seen_steps, widths = set(), []
            deadline = time.monotonic() + 240
            state = {}
            while time.monotonic() < deadline:
                state = browser.evaluate(
                    "(() => { const img = document.querySelector('#grid img');"
                    " return { status: document.getElementById('status').textContent,"
                    " width: document.getElementById('fill').style.width,"
                    " image: img ? img.naturalWidth + 'x' + img.naturalHeight : '',"
                    " caption: img ? img.parentElement.querySelector('figcaption').textContent : '' }; })()")
                m = re.match(r"step (\d+) of (\d+)", state["status"])
                if m:
                    assert int(m.group(2)) == STEPS, f"the page says {state['status']!r}"
                    seen_steps.add(int(m.group(1)))
                    widths.append(state["width"])
                if state["status"].startswith("error"):
                    raise AssertionError(f"the page shows {state['status']!r}")
                if state["status"] == "done" and state["image"] not in ("", "0x0"):
                    break
                time.sleep(0.02)
            else:
                raise AssertionError(f"no finished image after 240 s; last state {state}")

            # Moving means at least two different steps seen before the end, not just the last one.
            partial = sorted(s for s in seen_steps if s < STEPS)
            assert len(partial) >= 2, f"the progress bar did not move: steps seen {sorted(seen_steps)}"
            assert state["width"] == "100%", f"the bar ends at {state['width']!r}"
            assert PROMPT in state["caption"] and "seed 7" in state["caption"], state["caption"]

            # The demo model draws what it is asked: the middle of the picture is green.
            rgb = browser.evaluate(
                "(() => { const img = document.querySelector('#grid img');"
                " const c = document.createElement('canvas'); c.width = img.naturalWidth;"
                " c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);"
                " return Array.from(g.getImageData(c.width / 2, c.height / 2, 1, 1).data.slice(0, 3)); })()")
            assert rgb[1] > rgb[0] + 40 and rgb[1] > rgb[2] + 40, f"the middle pixel is {rgb}, not green"

            shot = browser.call("Page.captureScreenshot", {"format": "png"})["data"]
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot))
            print(f"page: model {model!r}; steps seen {sorted(seen_steps)} of {STEPS}; "
                  f"image {state['image']}, middle pixel {rgb}; screenshot {screenshot}")
        finally:
            browser.close()
            server.terminate()
            server.wait(timeout=60)


if __name__ == "__main__":
    main()
