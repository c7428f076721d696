"""Fixtures of the build tests: a writer of small csrc trees, and builds allowed again after a test
that stops one (the tests share one process)."""

import pytest

from fused_swiglu.build import compile as nvcc_compile


@pytest.fixture(autouse=True)
def _builds_allowed():
    nvcc_compile.allow_new_processes()
    yield
    nvcc_compile.allow_new_processes()


@pytest.fixture
def write_tree():
    """``write_tree(root, {relative path: text})`` writes the files under ``root`` and returns it."""

    def write(root, files):
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    return write
