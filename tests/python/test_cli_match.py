"""The Python package renders exactly what `fluxrt generate` writes: for the same settings on the
demo model, the PNG bytes (pixels and text chunks) of fluxrt.png_bytes equal the CLI's file."""

import subprocess

import numpy as np
from PIL import Image

import fluxrt


def cli_png(cli, tmp_path, *flags):
    subprocess.run([cli, "generate", "--quiet", "--out", str(tmp_path), "--filename", "cli-{index}", *flags],
                   check=True, capture_output=True, text=True)
    return sorted(tmp_path.glob("cli-*.png"))


def test_demo_image_equals_the_cli_s_byte_for_byte(demo, cli, tmp_path):
    model = fluxrt.bundled_demo_model()
    files = cli_png(cli, tmp_path, "--model", model, "--prompt", "a red circle on a blue background",
                    "--seed", "7", "--steps", "6", "--size", "64x64", "--guidance", "4",
                    "--max-sequence-length", "64")
    assert len(files) == 1
    out = demo("a red circle on a blue background", generator=7, num_inference_steps=6, height=64, width=64,
               guidance_scale=4.0, max_sequence_length=64)
    image = out.images[0]
    written = Image.open(files[0])
    assert np.array_equal(np.asarray(image), np.asarray(written.convert("RGB")))
    assert fluxrt.png_bytes(image) == files[0].read_bytes()
    # the settings: every text chunk of the CLI's file, in its order
    assert list(image.info.items()) == [(k, v) for k, v in written.text.items()]


def test_batch_and_f32_equal_the_cli_s(cli, tmp_path):
    model = fluxrt.bundled_demo_model()
    files = cli_png(cli, tmp_path, "--model", model, "--prompt", "a small yellow star", "--seed", "3",
                    "--steps", "4", "--size", "96x64", "--batch", "2", "--dtype", "f32",
                    "--max-sequence-length", "48")
    pipe = fluxrt.FluxPipeline.from_pretrained(model, dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    out = pipe("a small yellow star", generator=3, num_inference_steps=4, height=64, width=96,
               num_images_per_prompt=2, max_sequence_length=48)
    assert len(files) == 2
    for image, path in zip(out.images, files):
        assert fluxrt.png_bytes(image) == path.read_bytes(), path.name


def test_save_png_writes_the_same_file(demo, tmp_path):
    small = dict(generator=1, num_inference_steps=2, height=64, width=64, max_sequence_length=64)
    out = demo("a red circle", **small)
    fluxrt.save_png(out.images[0], tmp_path / "a.png")
    assert Image.open(tmp_path / "a.png").text == out.images[0].info
    array = demo("a red circle", output_type="np", **small)
    assert fluxrt.png_bytes(array.images[0], array.metadata[0]) == (tmp_path / "a.png").read_bytes()
