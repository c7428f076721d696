"""Build tests share one process: a test that stops a build must not leave later builds refused."""

import pytest

from fused_swiglu.build import compile as nvcc_compile


@pytest.fixture(autouse=True)
def _builds_allowed():
    nvcc_compile.allow_new_processes()
    yield
    nvcc_compile.allow_new_processes()
