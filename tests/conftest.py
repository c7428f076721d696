"""Markers: ``gpu`` tests run only on an NVIDIA Hopper GPU (compute capability 9.0); ``build`` tests
compile CUDA sources, and no other test may (``pytest -m "not build"`` compiles nothing on a machine
without a GPU; a test that compiles with the real nvcc and lacks the marker fails, naming it);
``fuzz`` tests draw fresh random inputs each run (the ``seed`` fixture)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch


@functools.lru_cache(maxsize=1)
def hopper_available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return False, f"needs compute capability 9.0; found {cap[0]}.{cap[1]} ({torch.cuda.get_device_name()})"
    return True, ""


def pytest_collection_modifyitems(config, items):
    ok, why = hopper_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cuda_compiles_only_in_build_tests(request, monkeypatch):
    """Outside ``build`` and ``gpu`` tests, installing a unit compiled by a real nvcc fails the test
    (the fake toolchains of the build tests live in pytest's temporary folders and pass)."""
    if request.node.get_closest_marker("build") or request.node.get_closest_marker("gpu"):
        yield
        return
    from fused_swiglu.build import cache

    fakes = request.config._tmp_path_factory.getbasetemp().resolve()
    build_and_install = cache._build_and_install

    def guarded(planned, log):
        nvcc = Path(planned.inputs.toolchain.nvcc).resolve()
        if not nvcc.is_relative_to(fakes):
            pytest.fail(f"{request.node.nodeid} compiles {planned.unit.name} with {nvcc} but is not marked "
                        "pytest.mark.build", pytrace=False)
        return build_and_install(planned, log)

    monkeypatch.setattr(cache, "_build_and_install", guarded)
    yield


SEED_VARIABLE = "FUSED_SWIGLU_TEST_SEED"


@pytest.fixture
def seed(request):
    """The seed of torch's generators, returned so that failure messages can name it: 0, or the
    integer in FUSED_SWIGLU_TEST_SEED; tests marked ``fuzz`` draw a fresh one per run unless that
    variable is set."""
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if text:
        try:
            s = int(text)
        except ValueError:
            raise pytest.UsageError(f"{SEED_VARIABLE} must be an integer; got {text!r}") from None
    elif request.node.get_closest_marker("fuzz"):
        s = int.from_bytes(os.urandom(4), "little")
    else:
        s = 0
    torch.manual_seed(s)
    return s


@pytest.fixture
def package_data_only(monkeypatch, tmp_path):
    """The shipped tuned data, whatever the user's tuning folder holds, and no current device."""
    from fused_swiglu import configs, tuning

    monkeypatch.setattr(tuning, "user_dir", lambda: tmp_path / "tuning")
    # select() without a device reads the current CUDA device's; these tests name theirs
    monkeypatch.setattr(configs, "_current_device", lambda: (configs.NUM_SMS, "", None))
    tuning.clear()  # and the choices made from the data (configs registers its caches with it)
    yield
    tuning.clear()


@pytest.fixture
def direct_calls(monkeypatch):
    """The calls that dispatch below the Autograd key (``fused_swiglu._dispatch.BELOW_AUTOGRAD``, the direct
    path): a list that grows by one entry at each."""
    from fused_swiglu import _dispatch

    calls = []
    real = _dispatch.BELOW_AUTOGRAD

    def counting():
        calls.append(1)
        return real()

    monkeypatch.setattr(_dispatch, "BELOW_AUTOGRAD", counting)
    return calls
