"""diffusers' LoRA methods on fluxrt.FluxPipeline (docs/python.md): load_lora_weights,
set_adapters, fuse_lora, ... The adapters loaded are applied per call, unmerged (a low-rank branch
next to each adapted projection), so switching them costs nothing; fuse_lora and
from_pretrained(loras=...) merge them into the weights instead, which opens the model again."""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any

from . import _fluxrt
from ._errors import FormatError, InvalidArgumentError, NotFoundError


def lora_list(loras: Any) -> list[tuple[str, float]]:
    """from_pretrained(loras=...): a path, or a list of paths and (path, strength) pairs."""
    if loras is None:
        return []
    if isinstance(loras, (str, os.PathLike)):
        loras = [loras]
    out = []
    for item in loras:
        if isinstance(item, (str, os.PathLike)):
            out.append((os.fspath(item), 1.0))
        elif (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], (str, os.PathLike))
              and isinstance(item[1], numbers.Real)):
            out.append((os.fspath(item[0]), float(item[1])))
        else:
            raise InvalidArgumentError(f"loras: expected a path or a (path, strength) pair, got {item!r}")
    return out


def _lora_file(source: Any, weight_name: str | None) -> str:
    if isinstance(source, dict):
        raise InvalidArgumentError("load_lora_weights: state dicts do not cross fluxrt's API; pass the "
                                   ".safetensors file (or its folder and weight_name=)")
    if not isinstance(source, (str, os.PathLike)):
        raise InvalidArgumentError(f"load_lora_weights: expected a path, got {type(source).__name__}")
    path = Path(source)
    if weight_name is not None:
        path = path / weight_name
    elif path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if len(files) != 1:
            raise InvalidArgumentError(f"load_lora_weights: {path} holds {len(files)} .safetensors files; "
                                       "name one with weight_name=")
        path = files[0]
    if not path.is_file():
        raise NotFoundError(f"load_lora_weights: {path}: no such file (fluxrt downloads nothing; pass a "
                            "local file)")
    return str(path)


class LoraLoaderMixin:
    """State: the loaded adapters (name -> file), the active ones with their weights, whether
    LoRA is enabled, and the files fused into the engine (its open options' `loras`)."""

    _adapters: dict[str, str]
    _active: list[tuple[str, float]]
    _lora_enabled: bool

    def _init_loras(self) -> None:
        self._adapters = {}
        self._active = []
        self._lora_enabled = True

    def load_lora_weights(self, pretrained_model_name_or_path_or_dict: Any, adapter_name: str | None = None,
                          weight_name: str | None = None, **kwargs: Any) -> None:
        """Loads a LoRA file (diffusers/PEFT, kohya, BFL/ComfyUI, fal, musubi or XLabs keys;
        docs/lora.md) as the adapter ``adapter_name`` (default ``default_N``) and makes it the
        active one, as diffusers does; set_adapters combines several. A folder takes
        ``weight_name=`` (or must hold one .safetensors file). The file is checked now: a
        malformed LoKr / LoHa / DoRA module, unknown keys or a LoRA of the other family raise here; a LoRA for another
        size of the model raises at the first call. Other diffusers keywords are accepted and
        have no effect."""
        path = _lora_file(pretrained_model_name_or_path_or_dict, weight_name)
        name = adapter_name if adapter_name is not None else f"default_{len(self._adapters)}"
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"adapter_name must be a non-empty string, got {name!r}")
        if name in self._adapters:
            raise InvalidArgumentError(f"adapter name {name!r} is already in use (loaded from "
                                       f"{self._adapters[name]}); give another or delete_adapters it first")
        info = _fluxrt.inspect_lora(path)
        family = self._info["variant"].get("family")
        want = "FLUX.1" if family == "flux.1" else "FLUX.2"
        if want not in info["family"]:
            raise FormatError(f"{path}: a {info['family']} LoRA cannot be applied to this {want} model")
        self._adapters[name] = path
        self._active = [(name, 1.0)]

    def set_adapters(self, adapter_names: str | list[str], adapter_weights: Any = None) -> None:
        """Makes exactly these adapters active, with these weights (a number for all, a list of
        one per adapter, or None for 1.0): diffusers' set_adapters."""
        names = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        if adapter_weights is None:
            weights = [1.0] * len(names)
        elif isinstance(adapter_weights, numbers.Real):
            weights = [float(adapter_weights)] * len(names)
        else:
            weights = list(adapter_weights)
            if len(weights) != len(names):
                raise InvalidArgumentError(f"set_adapters: {len(names)} adapters but {len(weights)} weights")
        for name, weight in zip(names, weights):
            if name not in self._adapters:
                raise InvalidArgumentError(f"set_adapters: no adapter {name!r} (loaded: "
                                           f"{', '.join(self._adapters) or 'none'})")
            if not isinstance(weight, numbers.Real):
                raise InvalidArgumentError(f"set_adapters: the weight of {name!r} must be a number, got {weight!r}")
        self._active = [(n, float(w)) for n, w in zip(names, weights)]
        self._lora_enabled = True

    def get_active_adapters(self) -> list[str]:
        return [name for name, _ in self._active] if self._lora_enabled else []

    def get_list_adapters(self) -> dict[str, list[str]]:
        return {"transformer": list(self._adapters)} if self._adapters else {}

    def disable_lora(self) -> None:
        """The next calls run without the loaded adapters (fused ones stay)."""
        self._lora_enabled = False

    def enable_lora(self) -> None:
        self._lora_enabled = True

    def delete_adapters(self, adapter_names: str | list[str]) -> None:
        for name in [adapter_names] if isinstance(adapter_names, str) else adapter_names:
            if name not in self._adapters:
                raise InvalidArgumentError(f"delete_adapters: no adapter {name!r}")
            del self._adapters[name]
            self._active = [(n, w) for n, w in self._active if n != name]

    def unload_lora_weights(self) -> None:
        """Forgets every loaded adapter, and opens the model again without fused ones if any were
        fused (diffusers' unload_lora_weights also removes fused LoRAs)."""
        self._adapters.clear()
        self._active = []
        if self._open_options.get("loras"):
            self._reopen(loras=[])

    def fuse_lora(self, lora_scale: float = 1.0, adapter_names: list[str] | None = None, **kwargs: Any) -> None:
        """Merges the active adapters (or ``adapter_names`` at weight 1) times ``lora_scale`` into
        the weights: W + s B A in f32, rounded once. The model is opened again with them merged,
        which takes a load's time; the calls after run at the base model's speed. The fused
        adapters are no longer applied per call."""
        chosen = self._active if adapter_names is None else [(n, 1.0) for n in adapter_names]
        for name, _ in chosen:
            if name not in self._adapters:
                raise InvalidArgumentError(f"fuse_lora: no adapter {name!r}")
        fused = list(self._open_options.get("loras") or [])
        fused += [(self._adapters[n], w * float(lora_scale)) for n, w in chosen]
        self._reopen(loras=fused)
        self._active = [(n, w) for n, w in self._active if n not in {c for c, _ in chosen}]

    def unfuse_lora(self, **kwargs: Any) -> None:
        """Opens the model again without the fused LoRAs."""
        if self._open_options.get("loras"):
            self._reopen(loras=[])

    def _call_loras(self, joint_attention_kwargs: dict[str, Any] | None) -> list[tuple[str, float]]:
        """The LoRAs of one call: the active adapters, their weights times diffusers' FLUX LoRA
        scale (``joint_attention_kwargs={"scale": s}``)."""
        scale = 1.0
        if joint_attention_kwargs:
            unknown = set(joint_attention_kwargs) - {"scale"}
            if unknown:
                raise InvalidArgumentError(f"joint_attention_kwargs: only 'scale' is taken, got {sorted(unknown)}")
            scale = joint_attention_kwargs.get("scale", 1.0)
            if not isinstance(scale, numbers.Real):
                raise InvalidArgumentError(f"joint_attention_kwargs['scale'] must be a number, got {scale!r}")
        if not self._lora_enabled:
            return []
        return [(self._adapters[n], w * float(scale)) for n, w in self._active]
