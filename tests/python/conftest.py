"""Shared fixtures of the Python package's tests (run by ctest as Python.<file>, or by hand:
PYTHONPATH=build/cpu-release/python /usr/bin/python3 -m pytest tests/python)."""

import os
import shutil
from pathlib import Path

import pytest

import fluxrt

SOURCE_DIR = Path(os.environ.get("FLUXRT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
DATA = SOURCE_DIR / "tests" / "data"
MODELS = DATA / "models"


@pytest.fixture(scope="session")
def demo():
    """The bundled demo model, progress bar off (the tests' output stays readable)."""
    pipe = fluxrt.FluxPipeline.from_pretrained()
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def klein():
    pipe = fluxrt.FluxPipeline.from_pretrained(MODELS / "flux2-klein-tiny", dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def schnell():
    pipe = fluxrt.FluxPipeline.from_pretrained(MODELS / "flux1-schnell-tiny", dtype="float32")
    pipe.set_progress_bar_config(disable=True)
    return pipe


@pytest.fixture(scope="session")
def cli():
    """The `fluxrt` command of the same build (ctest sets FLUXRT_CLI)."""
    path = os.environ.get("FLUXRT_CLI") or shutil.which("fluxrt")
    if not path:
        pytest.skip("no fluxrt command: set FLUXRT_CLI")
    return path
