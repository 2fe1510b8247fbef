"""LoRAs from Python (diffusers' load_lora_weights / set_adapters / fuse_lora surface, and
from_pretrained(loras=...)) on the tiny klein model in f32: each gives diffusers' image for the same
adapters and weights (tests/data/lora, made by tools/reference/dump_lora.py), within 2/255; and
LyCORIS LoKr / LoHa / DoRA files the trainers' image (tests/data/lora_lycoris, dump_lycoris.py)."""

import json

import numpy as np
import pytest
from PIL import Image

import fluxrt
from conftest import DATA, MODELS

LORA = DATA / "lora"
KLEIN_LORAS = LORA / "klein"
MANIFEST = json.loads((LORA / "manifest.json").read_text())


def golden(case):
    return np.asarray(Image.open(LORA / f"klein_{case}_f32" / "image_0.png").convert("RGB")).astype(int)


def render(pipe, **kwargs):
    out = pipe(MANIFEST["prompt"], generator=MANIFEST["seed"], height=64, width=64, num_inference_steps=2,
               max_sequence_length=32, **kwargs)
    return out.images[0]


def assert_golden(image, case):
    diff = np.abs(np.asarray(image).astype(int) - golden(case)).max()
    assert diff <= 2, f"{case}: max difference {diff}/255"


@pytest.fixture()
def pipe():
    p = fluxrt.FluxPipeline.from_pretrained(MODELS / "flux2-klein-tiny", dtype="float32")
    p.set_progress_bar_config(disable=True)
    return p


def test_loaded_adapters_give_the_diffusers_images(pipe):
    pipe.load_lora_weights(KLEIN_LORAS / "peft.safetensors", adapter_name="a")
    assert pipe.get_active_adapters() == ["a"]
    image = render(pipe)
    assert_golden(image, "peft")
    sha = MANIFEST["families"]["klein"]["formats"]["peft"]["sha256"]
    assert image.info["loras"] == f"peft.safetensors:1:{sha[:12]}"

    # A folder and weight_name, as diffusers takes them; the newest loaded is the active one.
    pipe.load_lora_weights(KLEIN_LORAS, weight_name="second.safetensors", adapter_name="b")
    assert pipe.get_active_adapters() == ["b"]
    assert pipe.get_list_adapters() == {"transformer": ["a", "b"]}
    pipe.set_adapters(["a", "b"], adapter_weights=[1.0, 0.7])
    assert_golden(render(pipe), "two")

    pipe.set_adapters("a")
    assert_golden(render(pipe, joint_attention_kwargs={"scale": 0.5}), "half")
    pipe.set_adapters("a", -0.7)
    assert_golden(render(pipe), "negative")

    pipe.disable_lora()
    assert pipe.get_active_adapters() == []
    base = render(pipe)
    assert_golden(base, "base")
    assert "loras" not in base.info
    pipe.enable_lora()
    pipe.delete_adapters("b")
    pipe.set_adapters("a")
    assert_golden(render(pipe), "peft")
    pipe.unload_lora_weights()
    assert pipe.get_list_adapters() == {}
    assert_golden(render(pipe), "base")


def test_fused_and_merged_at_load(pipe):
    pipe.load_lora_weights(KLEIN_LORAS / "kohya.safetensors")
    pipe.fuse_lora(lora_scale=0.5)
    assert pipe.get_active_adapters() == []  # fused: no longer applied per call as well
    assert_golden(render(pipe), "half")
    pipe.unfuse_lora()
    assert_golden(render(pipe), "base")

    merged = fluxrt.FluxPipeline.from_pretrained(MODELS / "flux2-klein-tiny", dtype="float32",
                                                 loras=[(KLEIN_LORAS / "bfl.safetensors", -0.7)])
    merged.set_progress_bar_config(disable=True)
    assert_golden(render(merged), "negative")


def lycoris_golden(case):
    path = DATA / "lora_lycoris" / f"klein_{case}_f32" / "image_0.png"
    return np.asarray(Image.open(path).convert("RGB")).astype(int)


def test_lycoris_and_dora_files(pipe):
    lycoris = DATA / "lora_lycoris" / "klein"
    # A file mixing LoRA, LoKr, LoHa and DoRA modules, per call (a merged copy of the layers its
    # LoKr / LoHa / DoRA modules touch) and fused.
    pipe.load_lora_weights(lycoris / "kohya_mixed.safetensors", adapter_name="mixed")
    pipe.set_adapters("mixed", 0.7)
    diff = np.abs(np.asarray(render(pipe)).astype(int) - lycoris_golden("mixed_s07")).max()
    assert diff <= 2, f"mixed 0.7 per call: {diff}/255"
    pipe.load_lora_weights(lycoris / "peft_dora.safetensors", adapter_name="dora")
    pipe.fuse_lora()
    diff = np.abs(np.asarray(render(pipe)).astype(int) - lycoris_golden("peft_dora")).max()
    assert diff <= 2, f"PEFT DoRA fused: {diff}/255"
    info = fluxrt.inspect_lora(lycoris / "kohya_mixed.safetensors")
    assert info["kinds"] == {"lora": 7, "lokr": 10, "loha": 2, "dora": 6}
    assert len(info["module_kinds"]) == len(info["modules"])


def test_inspect_lora():
    info = fluxrt.inspect_lora(KLEIN_LORAS / "peft.safetensors")
    assert info["family"] == "FLUX.2"
    assert info["ranks"] == [4]
    assert info["sha256"] == MANIFEST["families"]["klein"]["formats"]["peft"]["sha256"]
    assert info["modules"]


def test_refusals(pipe, tmp_path):
    with pytest.raises(fluxrt.FormatError, match="FLUX.1 LoRA"):
        pipe.load_lora_weights(LORA / "flux1" / "peft.safetensors")
    with pytest.raises(fluxrt.NotFoundError, match="no such file"):
        pipe.load_lora_weights(tmp_path / "missing.safetensors")
    with pytest.raises(fluxrt.InvalidArgumentError, match="weight_name"):
        pipe.load_lora_weights(KLEIN_LORAS)  # several files: which one?
    with pytest.raises(fluxrt.InvalidArgumentError, match="state dicts"):
        pipe.load_lora_weights({"x": 1})
    broken = tmp_path / "broken.safetensors"
    broken.write_bytes(b"not a safetensors file")
    with pytest.raises(fluxrt.Error):
        pipe.load_lora_weights(broken)
    pipe.load_lora_weights(KLEIN_LORAS / "peft.safetensors", adapter_name="a")
    with pytest.raises(fluxrt.InvalidArgumentError, match="already in use"):
        pipe.load_lora_weights(KLEIN_LORAS / "bfl.safetensors", adapter_name="a")
    with pytest.raises(fluxrt.InvalidArgumentError, match="no adapter 'z'"):
        pipe.set_adapters(["a", "z"])
    with pytest.raises(fluxrt.InvalidArgumentError, match="2 adapters but 1 weights"):
        pipe.set_adapters(["a", "a"], [1.0])
    with pytest.raises(fluxrt.InvalidArgumentError, match="only 'scale'"):
        render(pipe, joint_attention_kwargs={"alpha": 1})
    with pytest.raises(fluxrt.InvalidArgumentError, match="loras"):
        fluxrt.FluxPipeline.from_pretrained(MODELS / "flux2-klein-tiny", loras=[3])
    # Nothing refused above was applied: the pipeline makes its adapter's image.
    assert_golden(render(pipe), "peft")
