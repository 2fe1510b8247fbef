"""Step caching from Python with diffusers' API: pipe.transformer.enable_cache(config) /
disable_cache(), the three config classes with diffusers' field names, what the images' metadata
says of the steps, and errors as InvalidArgumentError naming the field."""

import json

import pytest

import fluxrt
from conftest import MODELS

SMALL = dict(height=64, width=64, num_inference_steps=8, max_sequence_length=64, guidance_scale=4.0)


def test_configs_become_the_cache_field_text():
    assert fluxrt.FirstBlockCacheConfig(threshold=0.2)._field_text() == "first-block:threshold=0.2"
    text = fluxrt.TaylorSeerCacheConfig(cache_interval=4, max_order=2, taylor_factors_dtype="torch.float32",
                                        use_lite_mode=True)._field_text()
    assert text == ("taylorseer:cache_interval=4,disable_cache_before_step=3,max_order=2,"
                    "taylor_factors_dtype=float32,use_lite_mode=true")
    text = fluxrt.MagCacheConfig(threshold=0.1, mag_ratios=[1.0, 1.5])._field_text()
    assert text == "mag:threshold=0.1,max_skip_steps=3,retention_ratio=0.2,mag_ratios=1.0;1.5"
    with pytest.raises(fluxrt.InvalidArgumentError, match="cache_identifiers"):
        fluxrt.TaylorSeerCacheConfig(cache_identifiers=["x"])._field_text()


def test_enable_cache_skips_steps_and_the_metadata_says_which(demo):
    demo.transformer.enable_cache(fluxrt.TaylorSeerCacheConfig(cache_interval=3, disable_cache_before_step=2))
    try:
        assert demo.transformer.is_cache_enabled
        with pytest.raises(fluxrt.InvalidArgumentError, match="already enabled"):
            demo.transformer.enable_cache(fluxrt.FirstBlockCacheConfig())
        out = demo("a red circle on a blue background", generator=3, **SMALL)
    finally:
        demo.transformer.disable_cache()
    meta = out.images[0].info
    assert meta["cache"].startswith("taylorseer:cache_interval=3,disable_cache_before_step=2")
    assert meta["cache_steps"] == "FFCFCCFC"
    assert out.timings["run"]["cache_steps"] == "FFCFCCFC"
    plain = demo("a red circle on a blue background", generator=3, **SMALL)
    assert "cache" not in plain.images[0].info


def test_bad_cache_settings_are_invalid_argument_errors(demo):
    demo.transformer.enable_cache(fluxrt.MagCacheConfig())  # klein base ships no ratios
    try:
        with pytest.raises(fluxrt.InvalidArgumentError, match="calibrate-cache"):
            demo("a red circle", generator=3, **SMALL)
    finally:
        demo.transformer.disable_cache()
    with pytest.raises(fluxrt.InvalidArgumentError, match="enable_cache takes"):
        demo.transformer.enable_cache({"threshold": 0.2})


def test_distilled_models_take_a_cache_as_a_note(schnell):
    schnell.transformer.enable_cache(fluxrt.FirstBlockCacheConfig(threshold=0.5))
    try:
        out = schnell("a red circle", generator=3, height=64, width=64, num_inference_steps=4)
    finally:
        schnell.transformer.disable_cache()
    assert "cache" not in out.images[0].info
