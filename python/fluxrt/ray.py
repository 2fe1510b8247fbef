"""fluxrt on Ray Serve: `fluxrt serve`'s HTTP API on replicas spread over a Ray cluster
(docs/deploy.md). Install with `pip install fluxrt[ray]`, then

    serve run fluxrt.ray:app model=models/demo replicas=2 threads=4 max_batch=2

or name `fluxrt.ray:app` as an application's import_path in a Serve config file, with the same
arguments under `args`. Each replica holds one engine with its scheduler (so a replica batches the
requests Ray routes to it) and answers through fluxrt's own request handling
(fluxrt._fluxrt.HttpApi, the C++ that `fluxrt serve` runs): the same routes, fields, validation,
error bodies, Server-Sent Events and /metrics. Ray only carries the bytes.

Arguments (strings, as `serve run` passes them):
  model             a model folder, file or Hugging Face id (default: the bundled demo model)
  preset            a run preset, as `fluxrt generate --preset`
  replicas          replicas to start (default 1), or
  min_replicas, max_replicas, target_ongoing_requests
                    autoscaling on each replica's ongoing requests instead of a fixed count
  threads           CPUs per replica: Ray reserves them (num_cpus) and the engine uses that many
                    threads (Ray would otherwise leave OMP_NUM_THREADS=1) (default 1)
  max_batch, batch_window_ms, max_queue, max_size, max_images, api_key, cors_origin, lora_dir
                    as `fluxrt serve`'s flags of the same names
  replicas_per_node at most this many replicas on one node (default: no limit)

A replica answers `url` images (response_format "url") from its own memory: behind several
replicas ask for b64_json (the default), since the GET may reach another replica.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from ray import serve
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from . import _fluxrt
from .pipeline import bundled_demo_model

# The arguments app() takes, with what each becomes: the deployment's, the API's or the run's.
_INT_ARGS = ("replicas", "min_replicas", "max_replicas", "threads", "max_batch", "batch_window_ms", "max_queue",
             "max_size", "max_images", "replicas_per_node")
_FLOAT_ARGS = ("target_ongoing_requests",)
_STR_ARGS = ("model", "preset", "api_key", "cors_origin", "lora_dir")


def _parse_args(args: Dict[str, Any]) -> Dict[str, Any]:
    """The builder's arguments checked and typed: an unknown name or a value that is not a number
    is an error naming it, before any replica starts."""
    out: Dict[str, Any] = {}
    for name, value in args.items():
        if name in _INT_ARGS or name in _FLOAT_ARGS:
            kind = int if name in _INT_ARGS else float
            try:
                out[name] = kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"fluxrt.ray: {name}={value!r} is not {'an integer' if kind is int else 'a number'}")
            if out[name] < (0 if name in ("batch_window_ms", "min_replicas") else 1):
                raise ValueError(f"fluxrt.ray: {name}={value!r} is out of range")
        elif name in _STR_ARGS:
            out[name] = str(value)
        else:
            known = ", ".join(sorted(_INT_ARGS + _FLOAT_ARGS + _STR_ARGS))
            raise ValueError(f"fluxrt.ray: unknown argument {name!r} (known: {known})")
    if "replicas" in out and ("min_replicas" in out or "max_replicas" in out):
        raise ValueError("fluxrt.ray: give replicas, or min_replicas / max_replicas to autoscale, not both")
    return out


@serve.deployment
class FluxrtReplica:
    """One engine with its scheduler, answering every path through fluxrt's HTTP API."""

    def __init__(self, model: Optional[str] = None, preset: Optional[str] = None, threads: int = 1,
                 api_options: Optional[Dict[str, Any]] = None):
        run = _fluxrt.resolve_run(model or bundled_demo_model(), preset, threads=threads)
        options = dict(api_options or {})
        self._api = _fluxrt.HttpApi(run, **options)
        # Each request waits for its image on a thread of this pool, the GIL released meanwhile:
        # as many as may wait in the engine's queue and run in its batch.
        workers = options.get("max_queue", 32) + options.get("max_batch", 1) + 4
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fluxrt-http")
        self._api.start_loading()
        # Serve routes to a replica once its constructor returns: loaded, so no request meets a
        # 503 "loading" here. A failed load raises, and Serve reports the replica as failed.
        self._api.wait_until_loaded()

    def check_health(self) -> None:
        """Serve's health check: fails unless the model is loaded and the API is not draining."""
        status = self._api.status()
        if status != "ok":
            raise RuntimeError(f"fluxrt replica is not serving: status {status!r}")

    async def __call__(self, request: Request) -> Response:
        method = request.method
        # The API's paths are /v1/..., /health, ...: under an application's route_prefix
        # (Starlette's root_path), the part after it.
        path = request.url.path
        root = request.scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        headers: List[Tuple[str, str]] = list(request.headers.items())
        body = b""
        parts: Optional[List[Tuple[str, str, str, bytes]]] = []
        if request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
            parts = await _form_parts(request)
        else:
            body = await request.body()
        loop = asyncio.get_running_loop()
        watch = _fluxrt.ClientWatch()
        if parts is None:
            # What fluxrt serve answers to a multipart body its HTTP layer cannot parse.
            status, answer_headers, answer_body, stream = self._api.transport_error(400, method, path)
        else:
            try:
                status, answer_headers, answer_body, stream = await loop.run_in_executor(
                    self._pool, self._api.handle, method, path, headers, body, parts, watch)
            except asyncio.CancelledError:
                watch.cancel()  # the client went away: the engine drops the job at its next step
                raise
        media_type = None
        kept_headers = {}
        for name, value in answer_headers:
            if name.lower() == "content-type":
                media_type = value
            else:
                kept_headers[name] = value
        if stream is None:
            return Response(content=answer_body, status_code=status, headers=kept_headers, media_type=media_type)
        return StreamingResponse(_events(loop, self._pool, stream), status_code=status, headers=kept_headers,
                                 media_type=media_type)


async def _form_parts(request: Request) -> Optional[List[Tuple[str, str, str, bytes]]]:
    """A multipart body as the parts fluxrt's edit endpoint takes; None when it cannot be parsed.
    Starlette's parser (the python-multipart package) stands where cpp-httplib's does under
    `fluxrt serve`: the framing is the HTTP server's, the fields the API's."""
    from starlette.datastructures import UploadFile

    try:
        form = await request.form(max_files=64, max_fields=64)
    except Exception:  # noqa: BLE001 - whatever the parser refuses is the client's malformed body
        return None
    parts = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            parts.append((name, value.filename or "", value.content_type or "", await value.read()))
        else:
            parts.append((name, "", "", value.encode()))
    return parts


async def _events(loop: asyncio.AbstractEventLoop, pool: concurrent.futures.Executor,
                  stream: Any) -> AsyncIterator[bytes]:
    """A streamed answer's events as the job makes them; a client that goes away closes the
    generator, and closing the stream cancels the job."""
    try:
        more = True
        while more:
            chunk, more = await loop.run_in_executor(pool, stream.next)
            if chunk:
                yield chunk
    finally:
        stream.close()


def app(args: Dict[str, Any]) -> serve.Application:
    """The application builder `serve run fluxrt.ray:app key=value ...` calls (module docstring)."""
    a = _parse_args(args)
    threads = a.get("threads", 1)
    api_options = {key: a[key] for key in ("max_batch", "batch_window_ms", "max_queue", "max_images", "api_key",
                                           "cors_origin", "lora_dir") if key in a}
    if "max_size" in a:
        api_options["max_size"] = a["max_size"]
    max_queue = a.get("max_queue", 32)
    deployment_options: Dict[str, Any] = {
        "ray_actor_options": {"num_cpus": threads},
        # Ray holds requests beyond this at its router instead of sending them to a full replica,
        # where they would get 429: a replica takes what its queue and batch hold.
        "max_ongoing_requests": max_queue + a.get("max_batch", 1),
        # A load reads the whole model: more than Serve's default health-check grace on a big one.
        "health_check_timeout_s": 60,
    }
    if "replicas_per_node" in a:
        deployment_options["max_replicas_per_node"] = a["replicas_per_node"]
    if "min_replicas" in a or "max_replicas" in a:
        min_replicas = a.get("min_replicas", 1)
        deployment_options["autoscaling_config"] = {
            "min_replicas": min_replicas,
            "max_replicas": max(a.get("max_replicas", min_replicas), min_replicas),
            # A replica busy with one generation and one waiting is at its target by default.
            "target_ongoing_requests": a.get("target_ongoing_requests", 2.0),
        }
    else:
        deployment_options["num_replicas"] = a.get("replicas", 1)
    return FluxrtReplica.options(**deployment_options).bind(a.get("model"), a.get("preset"), threads, api_options)
