#!/usr/bin/env python3
"""Throughput of an image server (`fluxrt serve`, fluxrt.ray on Ray Serve, anything with OpenAI's
images API): REQUESTS generations, CONCURRENCY at a time, then images per second and the latency
percentiles. Standard library only; the figures of docs/deploy.md come from it.

Usage: image_load.py URL [--requests N] [--concurrency C] [--size WxH] [--steps S] [--api-key K]
  e.g. image_load.py http://127.0.0.1:8000 --requests 16 --concurrency 4 --size 256x256 --steps 4
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time
import urllib.error
import urllib.request


def one(url, body, api_key):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(f"{url}/v1/images/generations", data=body, headers=headers, method="POST")
    start = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=3600) as r:
            ok = r.status == 200 and len(json.loads(r.read())["data"]) > 0
    except urllib.error.HTTPError as e:
        print(f"HTTP {e.code}: {e.read()[:200]!r}", file=sys.stderr)
        ok = False
    return ok, time.monotonic() - start


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--size", default="256x256")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--api-key", default="")
    a = p.parse_args()
    if a.requests < 1 or a.concurrency < 1 or a.steps < 1:
        p.error("--requests, --concurrency and --steps must be at least 1")
    url = a.url.rstrip("/")
    bodies = [json.dumps({"prompt": "a red fox in the snow", "size": a.size, "seed": i,
                          "num_inference_steps": a.steps}).encode() for i in range(a.requests)]
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(a.concurrency) as pool:
        results = list(pool.map(lambda b: one(url, b, a.api_key), bodies))
    wall = time.monotonic() - start
    failed = sum(1 for ok, _ in results if not ok)
    latencies = sorted(t for _, t in results)
    print(f"{a.requests} requests ({a.size}, {a.steps} steps), {a.concurrency} at a time: {wall:.1f} s, "
          f"{(a.requests - failed) / wall:.3f} images/s, latency p50 {statistics.median(latencies):.2f} s, "
          f"max {latencies[-1]:.2f} s, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
