"""What the tests of fused_backend (tests/test_compile_fusion.py and its GPU half) share: a fresh Dynamo
for every test and a count of the operator's backward calls."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import autograd as fsw_autograd


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch: Dynamo's caches and counters emptied before and after it."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def backward_calls(monkeypatch):
    """Counts the calls of the operator's backward (traced by AOTAutograd when the graph is compiled)."""
    calls = []
    original = fsw_autograd.dual_backward

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(fsw_autograd, "dual_backward", counted)
    return calls
