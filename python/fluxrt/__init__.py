"""fluxrt: the FLUX image models (FLUX.2 klein, FLUX.1) on fluxrt's C++ engine, from Python, with
diffusers' pipeline API (docs/python.md):

    import fluxrt
    pipe = fluxrt.FluxPipeline.from_pretrained()  # the bundled demo model; or a folder / repo id
    image = pipe("a red circle on a blue background", generator=7).images[0]
"""

from __future__ import annotations

from . import _fluxrt
from ._cache import FirstBlockCacheConfig, MagCacheConfig, TaylorSeerCacheConfig
from ._errors import (BY_CODE, CancelledError, DeviceError, Error, FormatError, InternalError,
                      InvalidArgumentError, IoError, NotFoundError, OutOfMemoryError, UnsupportedError)
from .pipeline import (Flux2KleinInpaintPipeline, FluxPipeline, FluxPipelineOutput, bundled_demo_model, png_bytes,
                       save_png)

_fluxrt._register_error_classes(BY_CODE)

__version__: str = _fluxrt.version()

# diffusers' class names for the same pipeline, so that switching is a change of import.
Flux2KleinPipeline = FluxPipeline
# klein-9B-KV: the model says it (its folder's model_index.json, or a transformer file named
# "...-kv..."), and its reference images then run as cached keys and values.
Flux2KleinKVPipeline = FluxPipeline
FluxImg2ImgPipeline = FluxPipeline
FluxInpaintPipeline = Flux2KleinInpaintPipeline  # a mask with the image: the model decides which
FluxFillPipeline = Flux2KleinInpaintPipeline  # on a FLUX.1 Fill folder (model_index.json FluxFillPipeline)
FluxKontextPipeline = FluxPipeline  # on a FLUX.1 Kontext folder: ``image`` is the image to edit


def inspect_model(model: str) -> dict:
    """`fluxrt info`'s data for a model (variant, components, parameter counts, dtypes) from its
    configs and checkpoint headers, without loading any weight."""
    import json

    return json.loads(_fluxrt.inspect_model(str(model)))


def inspect_lora(path: str) -> dict:
    """`fluxrt info`'s data for a LoRA file: its key format, the family it is for, its module
    kinds (lora, lokr, loha, dora), ranks and alphas, the layers it adapts and its SHA-256. Raises
    the loader's error for a file fluxrt cannot apply (a malformed LoKr / LoHa / DoRA module, other
    LyCORIS algorithms, unknown keys, a corrupt file)."""
    import os

    return _fluxrt.inspect_lora(os.fspath(path))


__all__ = [
    "CancelledError", "DeviceError", "Error", "FirstBlockCacheConfig", "Flux2KleinInpaintPipeline",
    "Flux2KleinKVPipeline", "Flux2KleinPipeline", "FluxFillPipeline", "FluxImg2ImgPipeline", "FluxInpaintPipeline",
    "FluxKontextPipeline",
    "FluxPipeline", "FluxPipelineOutput",
    "FormatError", "InternalError", "InvalidArgumentError", "IoError", "MagCacheConfig", "NotFoundError",
    "OutOfMemoryError", "TaylorSeerCacheConfig", "UnsupportedError", "__version__", "bundled_demo_model",
    "inspect_lora", "inspect_model", "png_bytes", "save_png",
]
