"""The suite's own rule (tests/conftest.py): only tests marked ``build`` (or ``gpu``) compile CUDA
sources, so ``pytest -m "not build"`` leaves the build cache as it found it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

INNER = '''
import types
import pytest
from fused_swiglu.build import cache


def _planned():
    tc = types.SimpleNamespace(nvcc="/usr/bin/true")  # outside pytest's temporary folders: a real one
    return types.SimpleNamespace(unit=types.SimpleNamespace(name="packed_x"), inputs=types.SimpleNamespace(toolchain=tc))


def test_unmarked():
    cache._build_and_install(_planned(), None)


@pytest.mark.build
def test_marked():
    assert cache._build_and_install.__qualname__ == "_build_and_install"  # not guarded
'''


def test_a_test_that_compiles_cuda_without_the_build_marker_fails(tmp_path):
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    build: compiles\n    gpu: needs a GPU\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "-c", str(tmp_path / "pytest.ini"), "--basetemp", str(tmp_path / "basetemp"), str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert "1 failed, 1 passed" in out.stdout, out.stdout[-3000:]
    assert "test_inner.py::test_unmarked compiles packed_x with /usr/bin/true but is not marked pytest.mark.build" \
        in out.stdout, out.stdout[-3000:]
