"""fluxrt.FluxPipeline's surface on the demo model and the tiny test models: every argument of a
call, the output types and their metadata, the timing report, the progress bar and the step
callback, generators (ints, torch's, lists of them) and the model's info."""

import io
import sys
import types

import numpy as np
import pytest
from PIL import Image

import fluxrt
from conftest import MODELS

# 64 text tokens: the demo's steps are then ~20 ms (512 tokens cost ~1 s a step with CFG).
SMALL = dict(height=64, width=64, num_inference_steps=3, max_sequence_length=64)


def pixels(image):
    return np.asarray(image).copy()


def test_version_is_the_library_s():
    assert fluxrt.__version__.count(".") == 2
    assert fluxrt.__version__[0].isdigit()


def test_from_pretrained_without_argument_opens_the_bundled_demo(demo):
    assert demo.info["variant"]["family"] == "flux.2"
    assert demo.info["pipeline_class"] == "Flux2KleinPipeline"
    assert demo.info["path"].endswith("demo")
    assert "klein" in demo.variant.lower()
    assert demo.device == "cpu"
    assert demo.dtype == "bfloat16"
    names = {c["name"] for c in demo.info["components"]}
    assert {"transformer", "text_encoder", "vae"} <= names
    transformer = next(c for c in demo.info["components"] if c["name"] == "transformer")
    assert transformer["parameters"] > 0 and transformer["dtypes"]
    assert demo.defaults["steps"] > 0


def test_default_call_makes_a_pil_image_with_its_settings(demo):
    out = demo("a red circle on a blue background", generator=1, num_inference_steps=2,
               max_sequence_length=64)
    assert isinstance(out, fluxrt.FluxPipelineOutput)
    assert len(out.images) == 1
    image = out.images[0]
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    assert image.size == (demo.defaults["width"], demo.defaults["height"])
    assert image.info["prompt"] == "a red circle on a blue background"
    assert image.info["seed"] == "1"
    assert image.info["steps"] == "2"
    assert image.info["fluxrt_version"] == fluxrt.__version__
    assert out.metadata[0] == image.info
    assert out[0] is out.images
    wide = demo("a red circle", generator=1, width=96, num_inference_steps=1, max_sequence_length=64)
    assert wide.images[0].size == (96, 64)


def test_timings_are_the_report_as_a_dict(demo):
    out = demo("a red circle", generator=1, **SMALL)
    t = out.timings
    assert t["run"]["steps"] == 3
    assert t["run"]["denoise_total_s"] > 0
    assert t["total_s"] > 0
    assert t["width"] == 64 and t["height"] == 64


def test_numpy_output(demo):
    out = demo("a red circle", generator=3, output_type="np", **SMALL)
    array = out.images[0]
    assert isinstance(array, np.ndarray)
    assert array.dtype == np.uint8 and array.shape == (64, 64, 3)
    pil = demo("a red circle", generator=3, **SMALL).images[0]
    assert np.array_equal(array, pixels(pil))
    assert out.metadata[0]["seed"] == "3"


def test_numpy_output_without_pillow(demo, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` now fails
    out = demo("a red circle", generator=3, **SMALL)
    assert isinstance(out.images[0], np.ndarray)


def test_return_dict_false_gives_a_tuple(demo):
    images, = demo("a red circle", generator=3, return_dict=False, **SMALL)
    assert len(images) == 1


def test_every_argument_reaches_the_engine(demo):
    out = demo(prompt=["a red circle", "a blue square"], negative_prompt="blurry", height=64, width=96,
               num_inference_steps=4, guidance_scale=3.0, num_images_per_prompt=2, generator=5,
               max_sequence_length=32, output_type="pil")
    assert len(out.images) == 4
    assert [im.size for im in out.images] == [(96, 64)] * 4
    info = out.images[3].info
    assert info["prompt"] == "a blue square"
    assert info["negative_prompt"] == "blurry"
    assert info["steps"] == "4"
    assert float(info["guidance"]) == 3.0
    assert info["max_sequence_length"] == "32"
    assert info["batch_index"].endswith("of 4")
    assert info["size"] == "96x64"
    # each argument changes the image
    base = dict(prompt="a red circle", generator=5, **SMALL)
    ref = pixels(demo(**base).images[0])
    for change in (dict(prompt="a green star"), dict(generator=6), dict(num_inference_steps=4),
                   dict(guidance_scale=1.5), dict(negative_prompt="red")):
        assert not np.array_equal(pixels(demo(**{**base, **change}).images[0]), ref), change


def test_same_seed_same_image(demo):
    a = demo("a red circle", generator=9, **SMALL).images[0]
    b = demo("a red circle", generator=9, **SMALL).images[0]
    assert np.array_equal(pixels(a), pixels(b))


def test_no_generator_draws_a_recorded_random_seed(demo):
    out = demo("a red circle", **SMALL)
    seed = int(out.images[0].info["seed"])
    again = demo("a red circle", generator=seed, **SMALL)
    assert np.array_equal(pixels(out.images[0]), pixels(again.images[0]))


class FakeGenerator:
    """Stands in for torch.Generator("cpu").manual_seed(s): the pipeline reads initial_seed()."""

    def __init__(self, seed):
        self.seed = seed

    def initial_seed(self):
        return self.seed


def test_torch_generator_is_read_by_its_seed(demo, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(Generator=FakeGenerator))
    a = demo("a red circle", generator=FakeGenerator(11), **SMALL).images[0]
    b = demo("a red circle", generator=11, **SMALL).images[0]
    assert np.array_equal(pixels(a), pixels(b))


def test_real_torch_generator_when_torch_is_installed(demo):
    torch = pytest.importorskip("torch")
    g = torch.Generator("cpu").manual_seed(12)
    a = demo("a red circle", generator=g, **SMALL).images[0]
    assert np.array_equal(pixels(a), pixels(demo("a red circle", generator=12, **SMALL).images[0]))


def test_a_list_of_generators_gives_each_image_its_seed(demo):
    out = demo(["a red circle", "a blue square"], num_images_per_prompt=2, generator=[1, 2, 3, 4], **SMALL)
    assert [im.info["seed"] for im in out.images] == ["1", "2", "3", "4"]
    # each image is the one its seed gives alone (one batch of requests: generate_batch)
    for i, (prompt, seed) in enumerate([("a red circle", 1), ("a red circle", 2), ("a blue square", 3),
                                        ("a blue square", 4)]):
        alone = demo(prompt, generator=seed, **SMALL).images[0]
        assert np.array_equal(pixels(out.images[i]), pixels(alone)), i


def test_reference_images_pil_numpy_and_lists(klein):
    ref = Image.open(MODELS.parent / "klein_pipeline" / "inputs" / "ref_gradient_64.png")
    args = dict(prompt="make it blue", generator=21, num_inference_steps=2, max_sequence_length=32)
    a = klein(image=ref, **args)
    assert a.images[0].info["reference_images"].endswith("ref_gradient_64.png")
    b = klein(image=np.asarray(ref.convert("RGB")), **args)
    c = klein(image=[ref], **args)
    assert np.array_equal(pixels(a.images[0]), pixels(b.images[0]))
    assert np.array_equal(pixels(a.images[0]), pixels(c.images[0]))
    plain = klein(**args)
    assert not np.array_equal(pixels(a.images[0]), pixels(plain.images[0]))
    # several generators with references: one call per image (they cannot share a batch)
    d = klein(image=ref, **{**args, "generator": [21, 22]}, num_images_per_prompt=2)
    assert np.array_equal(pixels(d.images[0]), pixels(a.images[0]))
    assert len(d.timings["calls"]) == 2


def test_flux1_img2img_strength_and_true_cfg():
    dev = fluxrt.FluxPipeline.from_pretrained(MODELS / "flux1-dev-tiny", dtype="float32")
    dev.set_progress_bar_config(disable=True)
    init = Image.open(MODELS.parent / "flux1_pipeline" / "inputs" / "init_64.png")
    out = dev("make it blue", image=init, strength=0.6, generator=21, num_inference_steps=5,
              max_sequence_length=32)
    info = out.images[0].info
    assert info["strength"].startswith("0.6") and info["steps"] == "3"
    cfg = dev("a lighthouse", negative_prompt="dark", true_cfg_scale=4.0, generator=5, num_inference_steps=2,
              height=64, width=64, max_sequence_length=32)
    assert cfg.images[0].info["true_cfg"] == "4"


def test_callback_on_step_end_counts_and_arguments(demo):
    calls = []
    demo("a red circle", generator=1, callback_on_step_end=lambda *a: calls.append(a), **SMALL)
    assert [c[1] for c in calls] == [0, 1, 2]
    pipe, _, timestep, kwargs = calls[0]
    assert pipe is demo and kwargs == {}
    # The schedule's timesteps, sigma x 1000, falling from near 1000 (diffusers' t).
    timesteps = [c[2] for c in calls]
    assert all(isinstance(t, float) for t in timesteps)
    assert 0 < timesteps[-1] < timesteps[0] <= 1000


def test_progress_bar_by_default_and_disabled(monkeypatch):
    pipe = fluxrt.FluxPipeline.from_pretrained()
    stream = io.StringIO()
    pipe.set_progress_bar_config(file=stream, desc="denoising")
    pipe("a red circle", generator=1, **SMALL)
    assert "3/3" in stream.getvalue()
    pipe.set_progress_bar_config(file=stream, disable=True)
    stream.truncate(0)
    stream.seek(0)
    pipe("a red circle", generator=1, **SMALL)
    assert stream.getvalue() == ""


def test_simple_progress_bar_without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    pipe = fluxrt.FluxPipeline.from_pretrained()
    stream = io.StringIO()
    pipe.set_progress_bar_config(file=stream)
    pipe("a red circle", generator=1, **SMALL)
    assert "3/3" in stream.getvalue() and stream.getvalue().endswith("\n")


def test_diffusers_class_names_and_torch_dtype_spelling():
    assert fluxrt.Flux2KleinPipeline is fluxrt.FluxPipeline
    pipe = fluxrt.Flux2KleinPipeline.from_pretrained(torch_dtype="torch.float32")
    assert pipe.dtype == "float32"
    assert pipe.to("cpu") is pipe
    pipe.set_progress_bar_config(disable=True)
    on_cpu = pixels(pipe("a red circle", generator=2, **SMALL).images[0])
    # cpu:1, the CPU posing as a second device (docs/cuda.md): reopened with the same dtype
    assert pipe.to("cpu:1") is pipe and pipe.device == "cpu:1" and pipe.dtype == "float32"
    assert np.array_equal(pixels(pipe("a red circle", generator=2, **SMALL).images[0]), on_cpu)


def test_int8_dtype_runs_the_transformer_linears_in_int8():
    # dtype "int8": the transformer's linears W8A8, the rest bfloat16 (docs/quantization.md).
    pipe = fluxrt.FluxPipeline.from_pretrained(dtype="int8")
    pipe.set_progress_bar_config(disable=True)
    assert pipe.dtype == "int8" and pipe._engine.precision == "int8"
    out = pipe("a red circle on a blue background", generator=2, **SMALL)
    assert out.metadata[0]["dtype"] == "int8"
    bf16 = fluxrt.FluxPipeline.from_pretrained()
    bf16.set_progress_bar_config(disable=True)
    want = pixels(bf16("a red circle on a blue background", generator=2, **SMALL).images[0])
    got = pixels(out.images[0])
    assert not np.array_equal(got, want)  # int8 ran
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 40  # yet the same picture
    # cpu:1 reopens at int8; a CUDA device refuses it (whether or not the build has CUDA).
    assert pipe.to("cpu:1") is pipe and pipe.dtype == "int8"
    with pytest.raises(fluxrt.UnsupportedError, match="int8 runs on the CPU only"):
        fluxrt.FluxPipeline.from_pretrained(dtype="int8", device="cuda")
    with pytest.raises(ValueError):
        fluxrt.FluxPipeline.from_pretrained(dtype="int4")


def test_free_text_encoder_loads_in_the_calls_and_gives_the_same_image(demo):
    # free_text_encoder=True: fluxrt generate's way, the encoder and the transformer never held
    # together; the loads happen inside the calls that encode new prompts.
    apart = fluxrt.FluxPipeline.from_pretrained(free_text_encoder=True)
    apart.set_progress_bar_config(disable=True)
    first = apart("a red circle on a blue background", generator=3, **SMALL)
    assert first.timings["run"]["load_s"] > 0
    assert first.timings["run"]["load_detail"]["text_encoder_s"] > 0
    want = demo("a red circle on a blue background", generator=3, **SMALL)
    assert want.timings["run"]["load_s"] == 0
    np.testing.assert_array_equal(pixels(first.images[0]), pixels(want.images[0]))
    again = apart("a red circle on a blue background", generator=4, **SMALL)  # the kept embeddings
    assert again.timings["run"]["load_s"] == 0
    assert apart.to("cpu:1") is apart  # reopening keeps the choice
    assert apart._open_options["free_text_encoder"] is True
    moved = apart("a red circle on a blue background", generator=3, **SMALL)
    assert moved.timings["run"]["load_s"] > 0
    np.testing.assert_array_equal(pixels(moved.images[0]), pixels(want.images[0]))


def test_inspect_model_without_loading():
    info = fluxrt.inspect_model(str(MODELS / "flux1-schnell-tiny"))
    assert info["variant"]["family"] == "flux.1"
    assert info["variant"]["guidance_embed"] is False  # schnell
