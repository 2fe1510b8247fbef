#!/usr/bin/env python3
"""The web page in headless Chromium (label browser; exit 77 = skipped when chromium is absent):
the page loads from `fluxrt serve`, a prompt is typed and the Generate button clicked, the progress
bar is watched moving through the steps, the image appears and decodes; a screenshot is saved to
SCREENSHOT.

Chromium is driven over the DevTools protocol on --remote-debugging-pipe (fd 3 in, fd 4 out, each
message a JSON object ended by a NUL byte), with the standard library only: no WebDriver, no
packages. Clicks and typing are real input events, so the page runs exactly as for a user; the
test only reads the DOM, every 20 ms, the way a user watches it.

Usage: web_page.py FLUXRT_BINARY SCREENSHOT
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

STEPS = 24
PROMPT = "a green square on a white background"


class DevTools:
    """One browser over the pipe; `call` sends a command and waits for its answer (events that
    arrive meanwhile are dropped: the test polls the DOM instead of following events)."""

    def __init__(self, chromium, profile):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()
        # The browser reads commands on its fd 3 and writes answers on its fd 4. In the child, the
        # two ends go to fds above 4 first (either could already be 3 or 4), then onto 3 and 4;
        # os.dup2 makes those inheritable, while every other fd of this process is close-on-exec.
        def wire():
            reads, writes = os.dup(to_browser_r) + 100, os.dup(from_browser_w) + 100
            os.dup2(to_browser_r, reads)
            os.dup2(from_browser_w, writes)
            os.dup2(reads, 3)
            os.dup2(writes, 4)
        self.proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1100,800",
             "about:blank"],
            preexec_fn=wire, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.next_id = 0
        self.buffer = b""
        self.session = None

    def call(self, method, params=None, timeout=60, browser_level=False):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser_level:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                answer = json.loads(raw)
                if answer.get("id") == self.next_id:
                    if "error" in answer:
                        raise RuntimeError(f"{method}: {answer['error']}")
                    return answer.get("result", {})
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: no answer in {timeout} s")
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"{method}: the browser closed the pipe")
            self.buffer += chunk

    def open(self, url):
        target = self.call("Target.createTarget", {"url": url}, browser_level=True)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 browser_level=True)["sessionId"]
        self.call("Page.enable")
        self.call("Runtime.enable")

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector):
        box = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def type_into(self, selector, text):
        self.click(selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.insertText", {"text": text})

    def close(self):
        try:
            self.call("Browser.close", timeout=10, browser_level=True)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def wait_for(predicate, what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium not installed: skipped")
        sys.exit(77)
    binary, screenshot = sys.argv[1], sys.argv[2]
    server = subprocess.Popen([binary, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in server.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "ready" in line:
            break
    assert port, "the server did not say where it listens"
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
