"""Configs load on demand in a fresh process: only what a call needs, also inside CUDA-graph capture."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

_SCRIPT = r"""
import json, torch
import fused_swiglu
from fused_swiglu import _lib
from fused_swiglu.reference import swiglu_float64

lib = _lib.library()
before = [n for n in lib.ordered_names if lib.is_loaded(n)]
torch.manual_seed(0)
x = torch.randn(3, 896, device="cuda", dtype=torch.bfloat16)
wg = torch.randn(4864, 896, device="cuda", dtype=torch.bfloat16) / 30
wu = torch.randn(4864, 896, device="cuda", dtype=torch.bfloat16) / 30
stream = torch.cuda.Stream()
graph = torch.cuda.CUDAGraph()
with torch.cuda.stream(stream):
    with torch.cuda.graph(graph, stream=stream):  # the first call of the process, captured
        y = fused_swiglu.swiglu(x, wg, wu)
y.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
ref = swiglu_float64(x, wg, wu)
err = ((y.double() - ref).abs() / (ref.abs() + 1e-2)).max().item()
print(json.dumps({"before": before, "after": [n for n in lib.ordered_names if lib.is_loaded(n)],
                  "finite": bool(torch.isfinite(y).all()), "max_rel_err": err}))
"""


def test_the_first_call_inside_graph_capture_loads_only_the_config_it_needs():
    out = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=dict(os.environ),
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"] == []
    assert len(result["after"]) == 1 and result["after"][0].startswith("dual_"), result
    assert result["finite"] and result["max_rel_err"] < 2e-2, result
