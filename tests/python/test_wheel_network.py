"""`pip wheel .` builds the package and the wheel works outside the tree: in a fresh venv, install
the wheel and run the README's Python example. Needs PyPI (scikit-build-core, pybind11, numpy) and
a full build of the library (minutes), so ctest labels it slow and network (FLUXRT_TEST_NETWORK=1)."""

import os
import subprocess
import venv

import pytest

from conftest import SOURCE_DIR

pytestmark = pytest.mark.skipif(os.environ.get("FLUXRT_TEST_NETWORK") != "1",
                                reason="needs PyPI and minutes: set FLUXRT_TEST_NETWORK=1 (ctest -L network)")


def readme_example():
    """The README's Python example: the line after `pip install .` in its section "From Python"."""
    lines = (SOURCE_DIR / "README.md").read_text().splitlines()
    section = lines.index("## From Python")
    start = next(i for i in range(section, len(lines)) if "pip install ." in lines[i])
    example = lines[start + 1].strip()
    assert "import fluxrt" in example, example
    return example


def test_wheel_installs_and_runs_the_readme_example(tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    wheelhouse = tmp_path / "wheels"
    subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "-w", str(wheelhouse), str(SOURCE_DIR)],
                   check=True)
    wheels = list(wheelhouse.glob("fluxrt-*.whl"))
    assert len(wheels) == 1
    subprocess.run([python, "-m", "pip", "install", str(wheels[0])], check=True)
    # Run from elsewhere, so nothing of the source tree is on the path; the README's command with
    # the venv's python.
    command = readme_example().replace("~/fluxrt-venv/bin/python", python)
    subprocess.run(["bash", "-c", command], check=True, cwd=tmp_path)
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stubs = subprocess.run([python, "-c", "import fluxrt, pathlib; p = pathlib.Path(fluxrt.__file__).parent; "
                            "print((p / '_fluxrt.pyi').is_file(), (p / 'py.typed').is_file())"],
                           check=True, capture_output=True, text=True)
    assert stubs.stdout.split() == ["True", "True"]
