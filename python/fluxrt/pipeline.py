"""fluxrt.FluxPipeline: the engine behind the surface of diffusers' FLUX pipelines, so a script
switches by changing its import (docs/python.md has the side-by-side example and what differs)."""

from __future__ import annotations

import json
import numbers
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import _fluxrt
from ._cache import Transformer
from ._errors import InvalidArgumentError
from ._lora import LoraLoaderMixin, lora_list
from ._progress import make_bar

# "int8": the transformer's linears W8A8 and the rest bfloat16 (CPU only; docs/quantization.md).
_DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float32": "f32", "f32": "f32", "fp32": "f32", "float": "f32",
           "int8": "int8"}
_DTYPE_NAMES = {"bf16": "bfloat16", "f32": "float32", "int8": "int8"}


def bundled_demo_model() -> str:
    """The folder of the demo model shipped inside the package (models/demo of the source tree)."""
    # Not resolved: in the build tree the .py files are links to the sources, and the demo model's
    # link sits next to them.
    return str(Path(__file__).parent / "models" / "demo")


def _bundled_preset(name: str) -> str:
    """A run preset shipped inside the package (configs/ of the source tree, as `fluxrt generate`
    reads them), e.g. the demo model's size."""
    return str(Path(__file__).parent / "configs" / f"{name}.yaml")


@dataclass
class FluxPipelineOutput:
    """What a pipeline call returns, as diffusers' output: ``images`` (PIL images, or uint8 numpy
    arrays of shape (height, width, 3)), ``metadata`` (each image's settings, the PNG text chunks
    ``fluxrt generate`` writes; also each PIL image's ``.info``) and ``timings`` (the timing report
    of docs/cli.md as a dict, seconds throughout)."""

    images: list[Any]
    metadata: list[dict[str, str]] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, index: int) -> Any:  # out[0] is the images, as with diffusers' outputs
        return (self.images,)[index]


def _dtype_of(dtype: Any) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in _DTYPES:
        raise InvalidArgumentError(f"dtype {name!r} is not supported: use \"bfloat16\", \"float32\" or \"int8\"")
    return _DTYPES[name]


def _seed_of(generator: Any) -> int:
    if isinstance(generator, numbers.Integral) and not isinstance(generator, bool):
        seed = int(generator)
        if not 0 <= seed < 2**64:
            raise InvalidArgumentError(f"generator: seed {seed} is outside [0, 2^64)")
        return seed
    torch = sys.modules.get("torch")  # accepted when the caller has torch; never imported here
    if torch is not None and isinstance(generator, torch.Generator):
        # The seed, not the state: a generator that has already drawn numbers counts as fresh.
        return int(generator.initial_seed())
    raise InvalidArgumentError(
        "generator must be None, an int, a torch.Generator or a list of them, got "
        f"{type(generator).__name__}")


def _rgb_of(image: Any, what: str) -> tuple[int, int, bytes, str]:
    """(width, height, RGB bytes, name) of a PIL image or an (H, W, 3) numpy array."""
    if hasattr(image, "convert") and hasattr(image, "tobytes"):  # PIL, without importing it
        rgb = image.convert("RGB")
        return rgb.width, rgb.height, rgb.tobytes(), str(getattr(image, "filename", "") or "")
    if isinstance(image, np.ndarray):
        array = image
        if array.ndim != 3 or array.shape[2] not in (3, 4):
            raise InvalidArgumentError(f"{what}: a numpy image must be (height, width, 3), got {array.shape}")
        if array.dtype != np.uint8:  # diffusers' float images in [0, 1]
            array = np.clip(np.rint(array.astype(np.float64) * 255), 0, 255).astype(np.uint8)
        array = np.ascontiguousarray(array[:, :, :3])
        return array.shape[1], array.shape[0], array.tobytes(), ""
    raise InvalidArgumentError(f"{what} must be a PIL image or a numpy array, got {type(image).__name__}")


def _pil_module() -> Any:
    try:
        from PIL import Image
    except ImportError:
        return None
    return Image


class FluxPipeline(LoraLoaderMixin):
    """A FLUX.2 klein or FLUX.1 model loaded once, called like diffusers' pipelines. One pipeline
    may be called from several threads: the calls queue on the pipeline's scheduler, and with
    ``max_batch`` > 1 calls that may share a transformer call run as one. The GIL is released
    while a call waits."""

    def __init__(self, run: _fluxrt.Run, open_options: dict[str, Any],
                 scheduler_options: dict[str, Any] | None = None) -> None:
        self._open_options = open_options  # resolve_run's keyword arguments, for to() and fuse_lora
        self._scheduler_options = scheduler_options or {}  # max_batch, batch_window_ms
        self._progress_bar_config: dict[str, Any] = {}
        # diffusers' pipe.transformer.enable_cache(...) / disable_cache(): the step cache every
        # later call asks for (the request field "cache").
        self.transformer = Transformer()
        self._use_run(run)
        self._init_loras()

    def _use_run(self, run: _fluxrt.Run) -> None:
        """Opens the resolved run's model as the pipeline's engine, with a scheduler of its own (the
        old one finishes what it has queued and goes with the last call holding it)."""
        self._resolved = run  # the resolved settings: the model, and the preset's request defaults
        self._engine = _fluxrt.Engine(run)
        self._scheduler = _fluxrt.Scheduler(self._engine, **self._scheduler_options)
        self._info: dict[str, Any] = json.loads(self._engine.info_json())

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike[str] | None = None, *,
                        dtype: Any = "bfloat16", device: str = "cpu", threads: int | None = None,
                        low_memory: bool | None = False, components: str | os.PathLike[str] | None = None,
                        torch_dtype: Any = None, vae_encoder: bool = True, loras: Any = None,
                        text_encoder: str | os.PathLike[str] | None = None,
                        preset: str | os.PathLike[str] | None = None, max_batch: int = 1,
                        batch_window_ms: int = 0, free_text_encoder: bool = False) -> FluxPipeline:
        """Opens a model: a diffusers pipeline folder, a single transformer .safetensors (with
        ``components=`` naming the folder of the other components when it is not next to it), or a
        repo id ("black-forest-labs/FLUX.2-klein-4B") in the local Hugging Face cache; nothing is
        downloaded. No argument: the bundled demo model, at the size its preset says (as
        ``fluxrt generate`` runs it). ``dtype`` "int8" runs the transformer's linears W8A8 (CPU only,
        the rest bfloat16; docs/quantization.md). ``torch_dtype`` is accepted for diffusers' spelling of
        ``dtype``. ``low_memory=None`` lets the engine decide from the RAM. ``loras``: LoRA files
        merged into the weights at load, each a path or (path, strength). ``text_encoder``: one
        file (a GGUF in llama.cpp's names, weights kept quantized, or a .safetensors) used instead
        of the folder's klein Qwen3 / FLUX.1 T5. ``preset``: a `fluxrt generate` run preset (a name
        under configs/ or a .yaml file) whose size, steps, guidance, ... a call's unset arguments
        take (docs/cli.md). ``max_batch``: images per transformer call when several threads call
        the pipeline at once (calls that may share one, same size, steps, guidance, ..., run as
        one); the first waits up to ``batch_window_ms`` for the others. ``free_text_encoder``: never
        hold the text encoder and the transformer together (each call that encodes new prompts
        loads the encoder, frees it and loads the transformer again; ``fluxrt generate``'s default),
        for a peak of the larger of the two instead of their sum."""
        demo = pretrained_model_name_or_path is None
        if preset is None:
            preset = _bundled_preset("demo") if demo else "none"
        options = dict(model=bundled_demo_model() if demo else os.fspath(pretrained_model_name_or_path),
                       preset=os.fspath(preset), device=device,
                       precision=_dtype_of(dtype if torch_dtype is None else torch_dtype), threads=threads,
                       low_memory=low_memory, components=None if components is None else os.fspath(components),
                       vae_encoder=vae_encoder, loras=lora_list(loras),
                       text_encoder=None if text_encoder is None else os.fspath(text_encoder),
                       free_text_encoder=free_text_encoder)
        return cls(_fluxrt.resolve_run(**options), options,
                   scheduler_options=dict(max_batch=max_batch, batch_window_ms=batch_window_ms))

    # What the model is: `fluxrt info`'s data (variant, components, parameter counts, dtypes).
    @property
    def info(self) -> dict[str, Any]:
        return self._info

    @property
    def variant(self) -> str:
        return self._engine.variant

    @property
    def device(self) -> str:
        return self._engine.device

    @property
    def dtype(self) -> str:
        return _DTYPE_NAMES[self._engine.precision]

    @property
    def defaults(self) -> dict[str, Any]:
        """What unset arguments become: steps, guidance, width, height, max_sequence_length, ...
        (the preset's, else the model's)."""
        defaults = self._engine.defaults()
        preset = self._resolved.request
        for key in ("steps", "guidance", "width", "height", "max_sequence_length"):
            value = getattr(preset, key, None)
            if value is not None:
                defaults[key] = value
        return defaults

    def set_progress_bar_config(self, **kwargs: Any) -> None:
        """Options of the progress bar (tqdm's, e.g. ``disable=True``, ``desc=``, ``leave=``)."""
        self._progress_bar_config = kwargs

    def to(self, device: str) -> FluxPipeline:
        """Moves the pipeline to ``device`` by opening the model again there, with the options it
        was opened with (no-op when it is there)."""
        if device != self.device:
            self._reopen(device=device)
        return self

    def _reopen(self, **changes: Any) -> None:
        """Opens the model again with some open options changed (to(), fuse_lora)."""
        options = dict(self._open_options, **changes)
        self._use_run(_fluxrt.resolve_run(**options))
        self._open_options = options

    def __call__(self, prompt: str | list[str] | None = None, negative_prompt: str | None = None,
                 height: int | None = None, width: int | None = None, num_inference_steps: int | None = None,
                 guidance_scale: float | None = None, true_cfg_scale: float | None = None,
                 num_images_per_prompt: int = 1, generator: Any = None, image: Any = None,
                 strength: float | None = None, max_sequence_length: int | None = 512,
                 output_type: str = "pil", return_dict: bool = True,
                 callback_on_step_end: Callable[..., Any] | None = None,
                 joint_attention_kwargs: dict[str, Any] | None = None, max_area: int | None = None) -> Any:
        """Generates ``len(prompt) x num_images_per_prompt`` images. ``generator``: None (a random
        seed, recorded in the metadata), an int seed, a torch.Generator (its seed is read), or a
        list of them, one per image. ``image``: FLUX.2 klein's reference image(s), FLUX.1's
        img2img init image (noised by ``strength``), FLUX.1 Kontext's image to edit (resized to
        the preferred Kontext resolution of its aspect ratio, as diffusers' FluxKontextPipeline).
        ``max_area`` (FLUX.1 Kontext): the output's size (``width`` x ``height``, default
        1024x1024) rescaled to that many pixels keeping its aspect ratio, floored to multiples of
        16; unset it is diffusers' default, 1024 x 1024, so a Kontext call gives diffusers' size.
        ``callback_on_step_end(pipe, step, timestep, kwargs)`` runs after each step (0-based step;
        timestep the schedule's t, sigma x 1000, as a float; kwargs {}: no tensor crosses the
        engine's API). Ctrl-C stops at the next step with KeyboardInterrupt. The active LoRA
        adapters (load_lora_weights, set_adapters) apply, their weights times
        ``joint_attention_kwargs["scale"]`` when given."""
        if output_type not in ("pil", "np"):
            raise InvalidArgumentError(f"output_type must be \"pil\" or \"np\", got {output_type!r}")
        loras = self._call_loras(joint_attention_kwargs)
        requests, one_call = self._requests(prompt, negative_prompt, height, width, num_inference_steps,
                                            guidance_scale, true_cfg_scale, num_images_per_prompt, generator,
                                            image, strength, max_sequence_length, loras, max_area=max_area)
        return self._finish(requests, one_call, callback_on_step_end, output_type, return_dict)

    def _finish(self, requests: list[_fluxrt.Request], one_call: bool, callback_on_step_end: Any,
                output_type: str, return_dict: bool) -> Any:
        results = self._run(requests, one_call, callback_on_step_end)
        out = self._output(results, output_type)
        return out if return_dict else (out.images,)

    def _requests(self, prompt: Any, negative_prompt: Any, height: Any, width: Any, steps: Any, guidance: Any,
                  true_cfg: Any, images_per_prompt: Any, generator: Any, image: Any, strength: Any,
                  max_sequence_length: Any, loras: list[tuple[str, float]],
                  mask_image: Any = None, image_reference: Any = None,
                  max_area: Any = None, padding_mask_crop: Any = None) -> tuple[list[_fluxrt.Request], bool]:
        if isinstance(prompt, str):
            prompts = [prompt]
        elif isinstance(prompt, (list, tuple)) and prompt and all(isinstance(p, str) for p in prompt):
            prompts = list(prompt)
        else:
            raise InvalidArgumentError("prompt must be a string or a non-empty list of strings")
        if negative_prompt is not None and not isinstance(negative_prompt, str):
            raise InvalidArgumentError("negative_prompt must be a string (one for every prompt)")
        if not isinstance(images_per_prompt, numbers.Integral) or images_per_prompt < 1:
            raise InvalidArgumentError(
                f"num_images_per_prompt must be a positive int, got {images_per_prompt!r}")
        count = len(prompts) * int(images_per_prompt)
        fields = {"negative_prompt": negative_prompt, "num_inference_steps": steps, "guidance_scale": guidance,
                  "true_cfg_scale": true_cfg, "strength": strength, "max_sequence_length": max_sequence_length,
                  "cache": self.transformer._cache_text, "padding_mask_crop": padding_mask_crop}
        # FluxKontextPipeline's max_area defaults to 1024 x 1024 (the CLI and the server keep a given
        # size as it is unless asked).
        if max_area is None and self._engine.takes_field("max_area"):
            max_area = 1024 * 1024
        fields["max_area"] = max_area

        def request(prompts_: list[str], per_prompt: int, seed: int) -> _fluxrt.Request:
            r = self._resolved.request  # a copy: the preset's settings, if any
            r.prompts = prompts_
            r.images_per_prompt = per_prompt
            r.seed = seed
            if image is None:  # with images the first one's size
                r.width = r.width if width is None else width
                r.height = r.height if height is None else height
            else:
                r.width, r.height = width, height
            # The engine checks each value against the model's limits, as the server does.
            for name, value in fields.items():
                if value is not None:
                    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
                        value = int(value)
                    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
                        value = float(value)
                    self._engine.set_field(r, name, value)
            r.loras = loras
            if mask_image is None:
                self._add_images(r, image)
            else:  # inpainting: the image edited, its mask, then the extra references
                r.set_init_image(*_rgb_of(image, "image"))
                mask = mask_image
                if isinstance(mask, np.ndarray) and mask.ndim == 2:  # (H, W), as diffusers takes it
                    mask = np.repeat(mask[:, :, None], 3, axis=2)
                r.set_mask_image(*_rgb_of(mask, "mask_image"))
                if image_reference is not None:
                    refs = list(image_reference) if isinstance(image_reference, (list, tuple)) else [image_reference]
                    for i, im in enumerate(refs):
                        r.add_reference_image(*_rgb_of(im, f"image_reference[{i}]"))
            return r

        if isinstance(generator, (list, tuple)):
            if len(generator) != count:
                raise InvalidArgumentError(f"generator: a list of {len(generator)} for {count} images "
                                           f"({len(prompts)} prompts x {images_per_prompt})")
            # One request per image, each with its own seed, as diffusers draws each image's noise
            # from its own generator; the scheduler runs them as one batch when they may share one
            # (what the progress bar needs to know).
            seeds = [_seed_of(g) for g in generator]
            n = int(images_per_prompt)
            requests = [request([prompts[i // n]], 1, s) for i, s in enumerate(seeds)]
            keys = {self._engine.batch_key(r) for r in requests}
            return requests, len(keys) == 1 and "" not in keys
        seed = random.SystemRandom().getrandbits(63) if generator is None else _seed_of(generator)
        return [request(prompts, int(images_per_prompt), seed)], False

    def _add_images(self, r: _fluxrt.Request, image: Any) -> None:
        if image is None:
            return
        images = list(image) if isinstance(image, (list, tuple)) else [image]
        # klein's references and FLUX.1 Kontext's image to edit are reference images; the rest of
        # FLUX.1 takes the image as img2img's init image.
        if self._engine.max_reference_images() == 0:
            if len(images) != 1:
                raise InvalidArgumentError(f"image: FLUX.1 img2img takes one init image, got {len(images)}")
            r.set_init_image(*_rgb_of(images[0], "image"))
            return
        for i, im in enumerate(images):
            r.add_reference_image(*_rgb_of(im, f"image[{i}]"))

    def _run(self, requests: list[_fluxrt.Request], one_call: bool,
             callback: Callable[..., Any] | None) -> list[dict]:
        config = dict(self._progress_bar_config)
        bar = None
        if not config.get("disable", False):
            plans = [self._engine.plan(r)["steps_run"] for r in requests]
            bar = make_bar(plans[0] if one_call else sum(plans), config)

        def on_step(step: int, total: int, step_s: float, elapsed_s: float, eta_s: float,
                    timestep: float) -> None:
            if bar is not None:
                bar.update(1)
            if callback is not None:
                callback(self, step - 1, timestep, {})

        try:
            # The callback runs between two steps, as diffusers' does; a bar only follows them.
            return self._scheduler.run(requests, on_step=on_step, step_by_step=callback is not None)
        finally:
            if bar is not None:
                bar.close()

    def _output(self, results: list[dict], output_type: str) -> FluxPipelineOutput:
        pil = _pil_module() if output_type == "pil" else None
        images, metadata = [], []
        for result in results:
            for im in result["images"]:
                w, h = im["width"], im["height"]
                meta = dict(im["metadata"])
                if pil is not None:
                    picture = pil.frombytes("RGB", (w, h), im["rgb"])
                    picture.info = dict(meta)
                else:
                    picture = np.frombuffer(im["rgb"], dtype=np.uint8).reshape(h, w, 3).copy()
                images.append(picture)
                metadata.append(meta)
        timings = []
        for r in results:
            report = json.loads(r["timing_json"])
            report["batch_images"] = r["batch_images"]  # of the engine call, other threads' included
            timings.append(report)
        if len(timings) == 1:
            report = timings[0]
        else:  # one call per request (reference or init images cannot share a batch)
            report = {"calls": timings, "total_s": sum(t.get("total_s") or 0 for t in timings)}
        return FluxPipelineOutput(images=images, metadata=metadata, timings=report)


class Flux2KleinInpaintPipeline(FluxPipeline):
    """diffusers' Flux2KleinInpaintPipeline (and, on a FLUX.1 model, FluxInpaintPipeline, on a
    FLUX.1 Fill model FluxFillPipeline, also exported under those names): ``image`` is edited where
    ``mask_image`` is white (luminance >= 128; the image's size), noised by ``strength`` (default
    klein 0.8, FLUX.1 0.6, Fill 1), with ``image_reference`` as extra reference images (klein).
    klein's output has the image's size (brought down to 1024x1024 pixels when larger, floored to
    multiples of 16), FLUX.1's the model's 1024x1024, unless ``height``/``width`` say otherwise.
    ``padding_mask_crop`` (klein and FLUX.1, not Fill): only a window around the mask, padded by
    that many pixels and grown to the output's aspect ratio, is repainted at the output size and
    blended back over ``image``, so the result has ``image``'s size."""

    def __call__(self, prompt: str | list[str] | None = None, image: Any = None, mask_image: Any = None,
                 image_reference: Any = None, height: int | None = None, width: int | None = None,
                 strength: float | None = None, num_inference_steps: int | None = None,
                 guidance_scale: float | None = None, num_images_per_prompt: int = 1, generator: Any = None,
                 negative_prompt: str | None = None, max_sequence_length: int | None = 512,
                 output_type: str = "pil", return_dict: bool = True,
                 callback_on_step_end: Callable[..., Any] | None = None,
                 joint_attention_kwargs: dict[str, Any] | None = None,
                 padding_mask_crop: int | None = None) -> Any:
        if output_type not in ("pil", "np"):
            raise InvalidArgumentError(f"output_type must be \"pil\" or \"np\", got {output_type!r}")
        if image is None or isinstance(image, (list, tuple)):
            raise InvalidArgumentError("image: inpainting takes one image to edit")
        if mask_image is None:
            raise InvalidArgumentError("mask_image is required (white = repaint)")
        loras = self._call_loras(joint_attention_kwargs)
        requests, one_call = self._requests(prompt, negative_prompt, height, width, num_inference_steps,
                                            guidance_scale, None, num_images_per_prompt, generator, image,
                                            strength, max_sequence_length, loras, mask_image=mask_image,
                                            image_reference=image_reference,
                                            padding_mask_crop=padding_mask_crop)
        return self._finish(requests, one_call, callback_on_step_end, output_type, return_dict)


def png_bytes(image: Any, text: dict[str, str] | None = None) -> bytes:
    """The image as PNG bytes with its settings as text chunks (a PIL image's ``.info``, else
    ``text``): exactly the file ``fluxrt generate`` writes for the same image."""
    width, height, rgb, _ = _rgb_of(image, "image")
    if text is None:
        text = dict(getattr(image, "info", None) or {})
    return _fluxrt.encode_png(width, height, rgb, [(str(k), str(v)) for k, v in text.items()])


def save_png(image: Any, path: str | os.PathLike[str], text: dict[str, str] | None = None) -> None:
    """Writes png_bytes(image, text) to ``path``."""
    Path(path).write_bytes(png_bytes(image, text))


__all__ = ["Flux2KleinInpaintPipeline", "FluxPipeline", "FluxPipelineOutput", "bundled_demo_model", "png_bytes", "save_png"]
