#!/usr/bin/env python3
"""fluxrt.ray on a real two-node Ray cluster on this machine (label ray; exit 77 = skipped when ray,
Serve or openai are not installed for any interpreter at hand):

- two nodes of one CPU each (ray.cluster_utils.Cluster, loopback addresses only), the demo model
  on two replicas of one CPU each, so one on each node;
- concurrent images.generate calls with the official OpenAI client, each image byte for byte the
  PNG `fluxrt generate` writes for the same settings;
- a bad request answered with the same status and body as `fluxrt serve` gives;
- the worker node removed: requests still succeed on the replica left.

Usage: ray_cluster.py FLUXRT_BINARY DEMO_MODEL
Without ray in this interpreter it runs itself again with $FLUXRT_PYPI_PYTHON when that is set
(.ci/run's venv with ray[serve] and openai), so ctest needs no second configuration.
"""
import base64
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

# Ray replaces 127.0.0.1 in a cluster's address by this machine's address (ray.init, workers); off,
# every node, worker and connection stays on loopback. Set before ray is imported: it is read then.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
# Serve gives its HTTP proxy 5 s to answer a ready check and 10 s a health check, then replaces it;
# on a loaded 2-core machine starting the proxy takes longer, and serve.start gave up after
# replacing it (seen with a benchmark busy on both cores). The nodes' processes inherit these.
os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")

try:
    import openai
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster
except ImportError as missing:
    other = os.environ.get("FLUXRT_PYPI_PYTHON")
    if other and os.path.realpath(other) != os.path.realpath(sys.executable):
        os.execv(other, [other] + sys.argv)
    print(f"{missing.name} not installed (pip install 'ray[serve]' openai): skipped")
    sys.exit(77)

PROMPT = "a red circle on a blue background"
STEPS = 2
# Everything the test waits for is bounded: a hang is a failure, not a stuck CI job. Ray's own
# calls (ray.init, serve.run) take no timeout, so a watchdog ends the test at the deadline.
LIMIT_S = 540
DEADLINE = time.monotonic() + LIMIT_S


def remaining(at_most):
    left = DEADLINE - time.monotonic()
    assert left > 0, "the test ran out of time"
    return min(at_most, left)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    """(status, body) of a JSON POST, whatever the status."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=remaining(120)) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def generate_cli(binary, model, seed):
    """The PNG `fluxrt generate` writes for the test's settings."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([binary, "generate", "--model", model, "--prompt", PROMPT, "--size", "64x64", "--seed",
                        str(seed), "--steps", str(STEPS), "--guidance", "4", "-q", "--out", out, "--filename", "x"],
                       check=True, stdout=subprocess.DEVNULL, timeout=remaining(120))
        with open(os.path.join(out, "x.png"), "rb") as f:
            return f.read()


def serve_bad_request(binary, model, bad):
    """`fluxrt serve`'s (status, body) for the bad request."""
    proc = subprocess.Popen([binary, "serve", "--port", "0", "--model", model], stderr=subprocess.PIPE, text=True)
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else port
            if "ready" in line:
                break
        assert port, "fluxrt serve did not start"
        return post(f"http://127.0.0.1:{port}/v1/images/generations", bad)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def replica_nodes():
    """The node of each live replica of the fluxrt deployment."""
    from ray._private import state

    return [a["Address"]["NodeID"] for a in state.actors().values()
            if "FluxrtReplica" in a.get("ActorClassName", "") and a.get("State") == "ALIVE"]


def wait_for(holds, what, at_most=120):
    give_up = time.monotonic() + remaining(at_most)
    while not holds():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.5)


def start_watchdog(cluster):
    """Past the deadline: the cluster's processes stopped and the test failed, whatever hangs."""

    def expire():
        print(f"ray: the test ran past {LIMIT_S} s: stopping the cluster", file=sys.stderr, flush=True)
        for node in [cluster.head_node] + list(cluster.worker_nodes):
            if node is None:
                continue
            for infos in node.all_processes.values():
                for info in infos:
                    try:
                        info.process.send_signal(signal.SIGKILL)
                    except OSError:
                        pass
        os._exit(1)

    timer = threading.Timer(max(DEADLINE - time.monotonic(), 0), expire)
    timer.daemon = True
    timer.start()


def main():
    binary, model = sys.argv[1], os.path.abspath(sys.argv[2])
    import fluxrt.ray

    bad = {"prompt": PROMPT, "size": "65x64"}
    expected_bad = serve_bad_request(binary, model, bad)
    assert expected_bad[0] == 400, expected_bad
    expected = {seed: generate_cli(binary, model, seed) for seed in (7, 8)}

    # One CPU per node, so each one-CPU replica takes a node of its own. No dashboard: nothing
    # listens beyond what the test needs, and all of it on 127.0.0.1.
    node_args = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=dict(node_args))
    start_watchdog(cluster)
    worker = cluster.add_node(**{k: v for k, v in node_args.items() if k != "include_dashboard"})
    try:
        ray.init(address=cluster.address)
        port = free_port()
        # One HTTP proxy, the head node's: on one machine every node's proxy would bind the same
        # 127.0.0.1:port (SO_REUSEPORT), and a client's connections would land on the removed node's.
        serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
        serve.run(fluxrt.ray.app({"model": model, "replicas": "2", "threads": "1", "max_batch": "2"}),
                  route_prefix="/")
        nodes = replica_nodes()
        assert len(nodes) == 2 and len(set(nodes)) == 2, f"replicas not on two nodes: {nodes}"

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                               timeout=remaining(300), max_retries=0)

        def generate(seed):
            r = client.images.generate(model="demo", prompt=PROMPT, size="64x64",
                                       extra_body={"seed": seed, "num_inference_steps": STEPS})
            return seed, base64.b64decode(r.data[0].b64_json)

        seeds = [7, 8, 7, 8]
        with concurrent.futures.ThreadPoolExecutor(len(seeds)) as pool:
            for seed, png in pool.map(generate, seeds):
                assert png == expected[seed], f"seed {seed}: the PNG differs from `fluxrt generate`'s"
        print(f"ray: {len(seeds)} concurrent requests over 2 replicas on 2 nodes, each equal to fluxrt generate")

        got_bad = post(f"http://127.0.0.1:{port}/v1/images/generations", bad)
        assert got_bad == expected_bad, f"bad request: Ray answered {got_bad}, fluxrt serve {expected_bad}"
        print(f"ray: a bad request gets fluxrt serve's answer: {got_bad[0]} {got_bad[1].decode()}")

        cluster.remove_node(worker)
        # The controller notices the replica is gone; the one on the head node serves on (the
        # replacement finds no free CPU and waits).
        wait_for(lambda: len(replica_nodes()) == 1, "the removed node's replica to be gone")
        for seed in (8, 7):
            assert generate(seed)[1] == expected[seed], f"seed {seed} after the node's removal"
        print("ray: worker node removed, requests still succeed on the head node's replica")
    finally:
        serve.shutdown()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
