#!/usr/bin/env python3
"""Images per second of `fluxrt serve` under concurrent clients, batched against unbatched.

Starts the server once per --max-batch value (default 1 and 8) on a free port, sends --requests
generation requests from --clients threads (each one image, distinct seeds, one size), and prints
images/s and latency p50/p99 per setting. Python's standard library only.

  bench/serve_bench.py build/cpu-release/fluxrt --clients 8 --requests 64 --steps 4 --size 64x64

With --lora-dir DIR the server gets that folder and request i names its i-th LoRA file (cycling),
so every concurrent request carries its own LoRA (bench/make_bench_loras.py writes such files).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request


def run(binary, max_batch, args):
    cmd = [binary, "serve", "--port", "0", "--max-batch", str(max_batch), "--batch-window-ms",
           str(args.window_ms), "--max-queue", str(max(32, args.clients * 2))] + (["--model", args.model] if args.model else []) \
        + (["--lora-dir", args.lora_dir] if args.lora_dir else [])
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    port = None
    for line in proc.stderr:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready" in line:
            break
    if port is None:
        proc.kill()
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
    url = f"http://127.0.0.1:{port}/v1/images/generations"
    counter = iter(range(args.requests))
    loras = sorted(f for f in os.listdir(args.lora_dir) if f.endswith(".safetensors")) if args.lora_dir else []
    lock = threading.Lock()
    latencies, failures = [], [0]

    def client():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            fields = {"prompt": "a red circle on a blue background", "seed": i, "size": args.size,
                      "num_inference_steps": args.steps}
            if loras:
                fields["loras"] = [loras[i % len(loras)]]
            body = json.dumps(fields).encode()
            t0 = time.monotonic()
            try:
                req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=600) as r:
                    json.load(r)
                with lock:
                    latencies.append(time.monotonic() - t0)
            except Exception:
                with lock:
                    failures[0] += 1

    start = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    proc.terminate()
    proc.wait(timeout=60)
    latencies.sort()
    pct = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else 0
    print(f"--max-batch {max_batch}{f' ({len(loras)} LoRAs)' if loras else ''}: {len(latencies)} images in {wall:.1f} s = {len(latencies) / wall:.2f} images/s; "
          f"latency p50 {pct(0.5):.2f} s, p99 {pct(0.99):.2f} s; {failures[0]} failed", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--model", default="")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--size", default="64x64")
    ap.add_argument("--window-ms", type=int, default=20)
    ap.add_argument("--batches", default="1,8", help="the --max-batch values to compare")
    ap.add_argument("--lora-dir", default="", help="each request names one of this folder's LoRA files")
    args = ap.parse_args()
    for b in args.batches.split(","):
        run(args.binary, int(b), args)


if __name__ == "__main__":
    main()
