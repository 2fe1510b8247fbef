"""Engine errors reach Python as fluxrt.Error subclasses that are also the built-in exception for
their kind (ValueError, FileNotFoundError, MemoryError, RuntimeError), with the engine's one-line
message; a pipeline keeps working after a failed call."""

import json

import numpy as np
import pytest

import fluxrt

SMALL = dict(height=64, width=64, num_inference_steps=2, max_sequence_length=64)


def one_line(e):
    text = str(e.value)
    assert text and "\n" not in text
    return text


def test_missing_model_is_file_not_found(tmp_path):
    with pytest.raises(fluxrt.NotFoundError) as e:
        fluxrt.FluxPipeline.from_pretrained(tmp_path / "nothing-here")
    assert isinstance(e.value, FileNotFoundError) and isinstance(e.value, fluxrt.Error)
    assert e.value.code == "not found"
    assert "nothing-here" in one_line(e)


def test_corrupt_model_is_a_runtime_error(tmp_path):
    (tmp_path / "model_index.json").write_text("{ not json")
    with pytest.raises(fluxrt.Error) as e:
        fluxrt.FluxPipeline.from_pretrained(tmp_path)
    assert isinstance(e.value, RuntimeError)
    one_line(e)


def test_unsupported_device_is_a_runtime_error():
    with pytest.raises(fluxrt.Error) as e:
        fluxrt.FluxPipeline.from_pretrained(device="tpu")
    assert isinstance(e.value, (RuntimeError, ValueError))
    one_line(e)


@pytest.mark.parametrize("kwargs", [
    dict(prompt=3),
    dict(prompt=[]),
    dict(prompt="x", width=65),
    dict(prompt="x", num_inference_steps=0),
    dict(prompt="x", num_images_per_prompt=0),
    dict(prompt="x", output_type="latent"),
    dict(prompt="x", generator="seven"),
    dict(prompt="x", generator=-1),
    dict(prompt="x", generator=[1, 2]),
    dict(prompt="x", image="not an image"),
    dict(prompt="x", image=np.zeros((4, 4), dtype=np.uint8)),
    dict(prompt="x", true_cfg_scale=4.0),  # FLUX.1 only
    dict(prompt="x", max_sequence_length=0),
])
def test_bad_arguments_are_value_errors(demo, kwargs):
    with pytest.raises(fluxrt.InvalidArgumentError) as e:
        demo(**{**SMALL, **kwargs})
    assert isinstance(e.value, ValueError) and isinstance(e.value, fluxrt.Error)
    one_line(e)


@pytest.mark.parametrize("kwargs, field", [
    (dict(width=65), "size"),
    (dict(num_inference_steps=0), "steps"),
    (dict(max_sequence_length=0), "max_sequence_length"),
    (dict(true_cfg_scale=4.0), "true_cfg"),
])
def test_refused_requests_name_the_engine_field(demo, kwargs, field):
    with pytest.raises(fluxrt.InvalidArgumentError) as e:
        demo("x", **{**SMALL, **kwargs})
    assert e.value.field == field


def test_other_errors_name_no_field(tmp_path):
    with pytest.raises(fluxrt.NotFoundError) as e:
        fluxrt.FluxPipeline.from_pretrained(tmp_path / "nothing-here")
    assert e.value.field is None


def test_bad_dtype_is_a_value_error():
    with pytest.raises(ValueError):
        fluxrt.FluxPipeline.from_pretrained(dtype="float16")


def test_too_large_is_a_memory_error(demo):
    # The largest size the engine takes, 64 times: terabytes, refused before anything is allocated.
    with pytest.raises(fluxrt.OutOfMemoryError) as e:
        demo("x", width=16384, height=16384, num_images_per_prompt=64, num_inference_steps=1)
    assert isinstance(e.value, MemoryError)
    one_line(e)


def test_the_pipeline_works_after_an_error(demo):
    with pytest.raises(ValueError):
        demo("x", width=65, height=64)
    assert len(demo("x", generator=1, **SMALL).images) == 1


def test_every_code_has_a_class():
    assert {c.code for c in fluxrt._errors.BY_CODE.values()} == set(fluxrt._errors.BY_CODE)
    for cls in fluxrt._errors.BY_CODE.values():
        assert issubclass(cls, fluxrt.Error)
        assert issubclass(cls, (ValueError, FileNotFoundError, MemoryError, RuntimeError))
    json.dumps(sorted(fluxrt._errors.BY_CODE))
