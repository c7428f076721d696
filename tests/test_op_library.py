"""The operator namespace and the loader of the operators' C++ CUDA kernels (fused_swiglu.op_library)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fused_swiglu import op_library

# each module that defines operators with C++ CUDA kernels, and those operators
DEFINING = {
    "fused_swiglu.ops": ("swiglu_packed", "swiglu_dual"),
    "fused_swiglu.training_ops": ("swiglu_dual_store", "swiglu_packed_store", "dswiglu"),
    "fused_swiglu.mlp_ops": ("swiglu_dual_store", "swiglu_packed_store", "dswiglu"),
    "fused_swiglu.grouped_ops": ("swiglu_grouped",),
}

_HAS_CUDA_KERNEL = """
import importlib, sys, torch
importlib.import_module(sys.argv[1])
for name in sys.argv[2:]:
    print(name, torch._C._dispatch_has_kernel_for_dispatch_key("fused_swiglu::" + name, "CUDA"))
"""


@pytest.mark.parametrize("module", sorted(DEFINING))
def test_importing_one_module_alone_gives_its_operators_a_cuda_kernel(module):
    """The first CUDA call of an operator reaches the library whichever module was imported: no
    'Could not run ... with arguments from the CUDA backend' for a user who imports one module only."""
    names = DEFINING[module]
    out = subprocess.run([sys.executable, "-c", _HAS_CUDA_KERNEL, module, *names], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [w for name in names for w in (name, "True")]


def test_every_cuda_operator_has_a_loader_until_the_library_loads():
    from fused_swiglu import ops

    code = ("import torch, fused_swiglu.ops as ops, fused_swiglu.op_library as lib;"
            "has = lambda: [torch._C._dispatch_has_kernel_for_dispatch_key('fused_swiglu::' + n, 'CUDA')"
            " for n in ops.CUDA_OPERATORS];"
            "before = has(); lib.drop_loaders(); after = has(); lib.drop_loaders();"
            "lib.cuda_kernels_from_library('dswiglu');"  # nothing once dropped
            "print(all(before), any(after), any(has()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "False"]
    assert len(ops.CUDA_OPERATORS) == len(set(ops.CUDA_OPERATORS))


def test_load_binds_the_library_with_the_plan_callback_and_drops_the_loaders_first(monkeypatch):
    from fused_swiglu import _lib, _plans

    seen = []
    monkeypatch.setattr(_lib, "load_torch_ops", lambda plan, before: seen.append((plan, before)))
    op_library.load()
    assert seen == [(_plans.PLAN, op_library.drop_loaders)]
