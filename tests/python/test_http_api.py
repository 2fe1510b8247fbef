"""fluxrt._fluxrt.HttpApi, `fluxrt serve`'s request handling without a socket (what fluxrt.ray
serves on Ray): the same answers as the server over HTTP for the same request, the streamed form,
multipart parts, and a client that goes away cancelling its job."""

import base64
import json
import io
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from PIL import Image

import fluxrt
from fluxrt import _fluxrt

JSON = [("Content-Type", "application/json")]


@pytest.fixture(scope="module")
def api():
    run = _fluxrt.resolve_run(fluxrt.bundled_demo_model(), threads=1)
    api = _fluxrt.HttpApi(run, max_size=256)
    status, _, body, _ = api.handle("GET", "/health", [])
    assert (status, json.loads(body)) == (503, {"status": "loading"})
    api.start_loading()
    api.wait_until_loaded()
    yield api
    api.drain()


def generate(api, request, watch=None):
    return api.handle("POST", "/v1/images/generations", JSON, json.dumps(request).encode(), [], watch)


@pytest.fixture(scope="module")
def served(cli):
    """A `fluxrt serve` on the demo model: its port."""
    proc = subprocess.Popen([cli, "serve", "--port", "0", "--model", fluxrt.bundled_demo_model(),
                             "--max-size", "256x256"], stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else port
        if "ready" in line:
            break
    yield port
    proc.terminate()
    proc.wait(timeout=60)


def over_http(port, method, path, body=None):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, data=body,
                                     headers={"Content-Type": "application/json"} if body is not None else {})
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/v1/images/generations", {"prompt": "a fox", "size": "65x64"}),
    ("POST", "/v1/images/generations", {"prompt": 3}),
    ("POST", "/v1/images/generations", {"prompt": "a fox", "n": 99}),
    ("DELETE", "/v1/models", None),
    ("GET", "/no/such/path", None),
    ("GET", "/v1/models/nope", None),
])
def test_refusals_equal_fluxrt_serve_s(api, served, method, path, body):
    data = json.dumps(body).encode() if body is not None else None
    direct = api.handle(method, path, JSON if data else [], data or b"")
    assert (direct[0], direct[2]) == over_http(served, method, path, data)
    assert direct[0] >= 400 and json.loads(direct[2])["error"]["message"]


def test_generation_equals_fluxrt_serve_s(api, served):
    request = {"prompt": "a red circle", "size": "64x64", "seed": 5, "num_inference_steps": 2}
    status, headers, body, stream = generate(api, request)
    assert status == 200 and stream is None and ("Content-Type", "application/json") in headers
    http_status, http_body = over_http(served, "POST", "/v1/images/generations", json.dumps(request).encode())
    assert http_status == 200
    png = base64.b64decode(json.loads(body)["data"][0]["b64_json"])
    assert png == base64.b64decode(json.loads(http_body)["data"][0]["b64_json"])


def test_stream_ends_with_the_completed_image(api):
    status, headers, body, stream = generate(api, {"prompt": "a fox", "size": "64x64", "seed": 1,
                                                   "num_inference_steps": 2, "stream": True})
    assert status == 200 and body == b"" and ("Content-Type", "text/event-stream") in headers
    events, more = b"", True
    give_up = time.monotonic() + 300
    while more:
        assert time.monotonic() < give_up
        chunk, more = stream.next()
        events += chunk
    names = re.findall(rb"^event: (\S+)$", events, re.M)
    assert names == [b"image_generation.partial_image"] * 2 + [b"image_generation.completed"]
    assert stream.next() == (b"", False)


def test_edit_takes_form_parts(api):
    png = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(png, format="PNG")
    image = png.getvalue()
    parts = [("prompt", "", "", b"a blue dot"), ("image", "in.png", "image/png", image),
             ("num_inference_steps", "", "", b"1")]
    status, _, body, _ = api.handle("POST", "/v1/images/edits", [("Content-Type", "multipart/form-data; boundary=x")],
                                    b"", parts)
    assert status == 200, body
    assert json.loads(body)["data"][0]["b64_json"]
    # The form's fields are checked as fluxrt serve checks them.
    status, _, body, _ = api.handle("POST", "/v1/images/edits", [("Content-Type", "multipart/form-data; boundary=x")],
                                    b"", [("prompt", "", "", b"a dot")])
    assert status == 400 and json.loads(body)["error"]["param"] == "image"


def test_a_client_that_goes_away_cancels_its_job(api):
    watch = _fluxrt.ClientWatch()
    answer = {}
    worker = threading.Thread(target=lambda: answer.update(r=generate(
        api, {"prompt": "a long one", "size": "256x256", "num_inference_steps": 50}, watch)))
    worker.start()
    time.sleep(0.5)
    watch.cancel()
    worker.join(timeout=120)
    assert not worker.is_alive(), "the cancelled request did not end"
    status, _, body, _ = answer["r"]
    assert status == 499 and json.loads(body)["error"]["code"] == "cancelled"
