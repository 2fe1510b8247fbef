"""Headless Chromium driven over the DevTools protocol on --remote-debugging-pipe (fd 3 in, fd 4 out,
each message a JSON object ended by a NUL byte), with the standard library only: no WebDriver, no
packages. The browser tests of tests/server (label browser) share it: web_page.py (text to image)
and web_page_inpaint.py (painting a mask). Input goes in as real input events (Input.*), which
the browser turns into the page's pointer, mouse, touch and key events as for a user.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time


def chromium_or_skip():
    """The browser's path; exits 77 (ctest's skip) when Debian's chromium is not installed."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium not installed: skipped")
        sys.exit(77)
    return chromium


def start_server(binary, *args):
    """`fluxrt serve --port 0 ARGS` once it says it is ready: (process, port)."""
    server = subprocess.Popen([binary, "serve", "--port", "0", *args], stderr=subprocess.PIPE, text=True)
    port = None
    for line in server.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "ready" in line:
            break
    assert port, "the server did not say where it listens"
    return server, port


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

    def evaluate(self, expression, await_promise=False):
        """The expression's value; with await_promise, what the promise it gives resolves to."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": await_promise})
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def box(self, selector):
        """The element's box in the viewport's CSS pixels, where Input.* events are placed:
        [x, y, width, height]."""
        return self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                             ".getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; })()")

    def click(self, selector):
        x, y, w, h = self.box(selector)
        box = [x + w / 2, y + h / 2]
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent",
                      {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1})

    def type_into(self, selector, text):
        self.click(selector)
        self.evaluate(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.insertText", {"text": text})

    def set_files(self, selector, paths):
        """Picks files in an <input type=file> as the file chooser would (input and change fire)."""
        node = self.call("Runtime.evaluate",
                         {"expression": f"document.querySelector({json.dumps(selector)})"})
        self.call("DOM.setFileInputFiles", {"files": paths, "objectId": node["result"]["objectId"]})

    def mouse_drag(self, points):
        """The left button pressed at the first point, moved through the others, released at the
        last: the mouse events a user's drag makes."""
        (x, y), last = points[0], points[-1]
        self.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        self.call("Input.dispatchMouseEvent",
                  {"type": "mousePressed", "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": 1})
        for x, y in points[1:]:
            self.call("Input.dispatchMouseEvent",
                      {"type": "mouseMoved", "x": x, "y": y, "button": "left", "buttons": 1})
        self.call("Input.dispatchMouseEvent", {"type": "mouseReleased", "x": last[0], "y": last[1],
                                               "button": "left", "buttons": 0, "clickCount": 1})

    def touch_drag(self, points):
        """One finger down at the first point, moved through the others, lifted."""
        self.call("Input.dispatchTouchEvent", {"type": "touchStart", "touchPoints": [
            {"x": points[0][0], "y": points[0][1]}]})
        for x, y in points[1:]:
            self.call("Input.dispatchTouchEvent", {"type": "touchMove", "touchPoints": [{"x": x, "y": y}]})
        self.call("Input.dispatchTouchEvent", {"type": "touchEnd", "touchPoints": []})

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
