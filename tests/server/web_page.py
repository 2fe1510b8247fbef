#!/usr/bin/env python3
"""The web page in headless Chromium (label browser; exit 77 = skipped when chromium is absent):
the page loads from `fluxrt serve`, a prompt is submitted, the progress bar moves and the image
appears; a screenshot is saved to SCREENSHOT.

Chromium is driven without a WebDriver: --dump-dom after a virtual time budget long enough for the
page to submit (?auto=1 makes it submit on load) and finish, then --screenshot.

Usage: web_page.py FLUXRT_BINARY SCREENSHOT
"""
import re
import shutil
import subprocess
import sys


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        print("chromium not installed: skipped")
        sys.exit(77)
    binary, screenshot = sys.argv[1], sys.argv[2]
    proc = subprocess.Popen([binary, "serve", "--port", "0"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "ready" in line:
            break
    try:
        url = f"http://127.0.0.1:{port}/?auto=1&steps=8"
        flags = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=60000"]
        dom = subprocess.run(flags + ["--dump-dom", url], capture_output=True, text=True, timeout=240).stdout
        assert 'data-progress-moved="1"' in dom, "the progress bar never moved"
        assert "data:image/png;base64," in dom, "no image appeared"
        subprocess.run(flags + ["--window-size=1000,700", f"--screenshot={screenshot}", url], timeout=240,
                       capture_output=True)
        print(f"page: progress moved, image shown; screenshot {screenshot}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
