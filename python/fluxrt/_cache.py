"""Step caching with diffusers' API: ``pipe.transformer.enable_cache(fluxrt.FirstBlockCacheConfig(threshold=0.2))``,
``TaylorSeerCacheConfig``, ``MagCacheConfig`` and ``disable_cache()`` (docs/python.md). The configs
take diffusers' field names and defaults; each becomes the request field ``cache`` (the text the
CLI's ``--cache`` takes), which the engine checks and runs as diffusers' hooks compute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._errors import InvalidArgumentError


def _dtype_name(dtype: Any) -> str:
    # torch.bfloat16 or "bfloat16" / "torch.float32": fluxrt's names are torch's without the module.
    name = str(dtype)
    return name[len("torch."):] if name.startswith("torch.") else name


@dataclass
class FirstBlockCacheConfig:
    """diffusers' FirstBlockCacheConfig: skip the blocks after the first while its residual's
    relative L1 change since the last full step is at most ``threshold``."""

    threshold: float = 0.05

    def _field_text(self) -> str:
        return f"first-block:threshold={float(self.threshold)!r}"


@dataclass
class TaylorSeerCacheConfig:
    """diffusers' TaylorSeerCacheConfig: full steps every ``cache_interval``, Taylor-extrapolated
    attention outputs (``use_lite_mode``: the whole output) in between. ``skip_predict_identifiers``
    and ``cache_identifiers`` (module name patterns) are not supported: fluxrt hooks the modules
    diffusers hooks by default."""

    cache_interval: int = 5
    disable_cache_before_step: int = 3
    disable_cache_after_step: int | None = None
    max_order: int = 1
    taylor_factors_dtype: Any = "bfloat16"
    skip_predict_identifiers: list[str] | None = None
    cache_identifiers: list[str] | None = None
    use_lite_mode: bool = False

    def _field_text(self) -> str:
        if self.skip_predict_identifiers or self.cache_identifiers:
            raise InvalidArgumentError("cache: TaylorSeerCacheConfig's skip_predict_identifiers and "
                                       "cache_identifiers are not supported (fluxrt hooks diffusers' default "
                                       "modules, or the output with use_lite_mode=True)")
        parts = [f"cache_interval={int(self.cache_interval)}",
                 f"disable_cache_before_step={int(self.disable_cache_before_step)}",
                 f"max_order={int(self.max_order)}",
                 f"taylor_factors_dtype={_dtype_name(self.taylor_factors_dtype)}"]
        if self.disable_cache_after_step is not None:
            parts.append(f"disable_cache_after_step={int(self.disable_cache_after_step)}")
        if self.use_lite_mode:
            parts.append("use_lite_mode=true")
        return "taylorseer:" + ",".join(parts)


@dataclass
class MagCacheConfig:
    """diffusers' MagCacheConfig. ``mag_ratios``: a list (or a 1-D tensor) of ratios, or a path to
    a JSON file of them (what ``fluxrt calibrate-cache`` writes); None takes the ones fluxrt ships
    for the model (FLUX.1 dev) and is refused for others. ``num_inference_steps``: None is the
    call's step count (diffusers' default is 28)."""

    threshold: float = 0.06
    max_skip_steps: int = 3
    retention_ratio: float = 0.2
    num_inference_steps: int | None = None
    mag_ratios: Any = None
    calibrate: bool = False

    def _field_text(self) -> str:
        parts = [f"threshold={float(self.threshold)!r}", f"max_skip_steps={int(self.max_skip_steps)}",
                 f"retention_ratio={float(self.retention_ratio)!r}"]
        if self.num_inference_steps is not None:
            parts.append(f"num_inference_steps={int(self.num_inference_steps)}")
        ratios = self.mag_ratios
        if ratios is not None:
            if isinstance(ratios, str) or hasattr(ratios, "__fspath__"):
                parts.append(f"mag_ratios={ratios}")
            else:
                values = ratios.tolist() if hasattr(ratios, "tolist") else list(ratios)
                parts.append("mag_ratios=" + ";".join(repr(float(v)) for v in values))
        if self.calibrate:
            parts.append("calibrate=true")
        return "mag:" + ",".join(parts)


_CONFIGS = (FirstBlockCacheConfig, TaylorSeerCacheConfig, MagCacheConfig)


@dataclass
class Transformer:
    """``pipe.transformer``: what diffusers' CacheMixin offers on the transformer, for fluxrt's
    engine (the weights stay in C++)."""

    _cache_text: str | None = field(default=None, repr=False)
    _cache_config: Any = field(default=None, repr=False)

    def enable_cache(self, config: Any) -> None:
        if not isinstance(config, _CONFIGS):
            raise InvalidArgumentError(f"cache: enable_cache takes FirstBlockCacheConfig, TaylorSeerCacheConfig or "
                                       f"MagCacheConfig, got {type(config).__name__}")
        if self._cache_config is not None:
            # diffusers: one cache at a time.
            raise InvalidArgumentError("cache: a cache is already enabled; call disable_cache() first")
        self._cache_text = config._field_text()
        self._cache_config = config

    def disable_cache(self) -> None:
        self._cache_text = None
        self._cache_config = None

    @property
    def is_cache_enabled(self) -> bool:
        return self._cache_config is not None
