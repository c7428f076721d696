"""The training operators (fused_swiglu.training_ops) on the CPU: values, fake kernels, opcheck, the
config argument, and the one choice of their configs (fused_swiglu.configs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fused_swiglu import _plans, catalog, configs, training_ops
from fused_swiglu.weights import pack_gate_up

ROOT = Path(__file__).resolve().parents[1]


def _operands(M=5, H=16, I=24, dtype=torch.float64):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g, dtype=dtype) for s in ((M, H), (I, H), (I, H))]


def test_store_forward_returns_swiglu_and_the_preactivations():
    x, wg, wu = _operands()
    y, gu = training_ops.swiglu_dual_store(x, wg, wu)
    g, u = x @ wg.T, x @ wu.T
    assert torch.allclose(gu, torch.cat([g, u], dim=1)) and torch.allclose(y, F.silu(g) * u)
    yp, gup = training_ops.swiglu_packed_store(x, pack_gate_up(wg, wu))
    assert torch.equal(yp, y) and torch.equal(gup, gu)


def test_store_forward_rounds_once_to_the_dtype():
    x, wg, wu = (t.to(torch.bfloat16) for t in _operands())
    y, gu = training_ops.swiglu_dual_store(x, wg, wu)
    g, u = (x.double() @ wg.double().T), (x.double() @ wu.double().T)
    assert y.dtype == gu.dtype == torch.bfloat16
    assert torch.equal(gu, torch.cat([g, u], dim=1).float().to(torch.bfloat16))


def test_dswiglu_is_the_gradient_of_silu_gate_times_up():
    x, wg, wu = _operands()
    wd = torch.randn(16, 24, dtype=torch.float64)
    _, gu = training_ops.swiglu_dual_store(x, wg, wu)
    g, u = gu[:, :24].clone().requires_grad_(), gu[:, 24:].clone().requires_grad_()
    dz = torch.randn(5, 16, dtype=torch.float64)
    (F.silu(g) * u).backward(dz @ wd)
    dgu = training_ops.dswiglu(dz, wd, gu)
    assert torch.allclose(dgu, torch.cat([g.grad, u.grad], dim=1))


def test_fake_kernels_give_shapes_and_opcheck_passes():
    x, wg, wu = _operands(dtype=torch.float32)
    wd, gu = torch.randn(16, 24), torch.randn(5, 48)
    for op, args in ((training_ops.swiglu_dual_store, (x, wg, wu, "")),
                     (training_ops.swiglu_packed_store, (x, pack_gate_up(wg, wu), "")),
                     (training_ops.dswiglu, (x, wd, gu, ""))):
        torch.library.opcheck(op, args)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, wg = torch.empty(7, 64), torch.empty(96, 64)
        y, gu = training_ops.swiglu_dual_store(x, wg, wg)
        assert y.shape == (7, 96) and gu.shape == (7, 192) and gu.is_contiguous()
        assert training_ops.dswiglu(x, torch.empty(64, 96), gu).shape == (7, 192)


@pytest.mark.parametrize("op, args, error, message", [
    ("swiglu_dual_store", lambda x, w: (x, w, w[:8]), ValueError, r"swiglu_dual_store: w_up must be 2-D \(24, 16\)"),
    ("swiglu_packed_store", lambda x, w: (x, w[:7]), ValueError, "w_packed must have an even number of rows"),
    ("dswiglu", lambda x, w: (x, w, torch.zeros(5, 48, dtype=x.dtype)), ValueError,
     r"dswiglu: w_down must be 2-D \(16, \?\)"),
    ("swiglu_dual_store", lambda x, w: (x, w, w, "dual_pingpong_128x128x64_1x1_bf16"), ValueError,
     "config must name a dual_store kernel"),
    ("dswiglu", lambda x, w: (x, w.T, torch.zeros(5, 48, dtype=x.dtype), "dswiglu_pingpong_128x128x64_1x1_fp16"),
     ValueError, "config must name a dswiglu kernel for torch.bfloat16"),
])
def test_bad_operands_and_configs_are_named(op, args, error, message):
    x, w, _ = (t.to(torch.bfloat16) for t in _operands())
    with pytest.raises(error, match=message):
        getattr(training_ops, op)(*args(x, w))


def test_the_training_choice_uses_every_training_config_and_only_those():
    used = {(k, *configs.TRAINING_TILES[k, wide]) for k, wide in configs.TRAINING_TILES}
    assert used == {(e[0], e[3], e[5]) for e in catalog.TRAINING_CONFIGS}
    names = {configs.resolve(k, "", 4096, 1024, H, d).name for k in configs.TRAINING_KERNELS
             for d in (torch.bfloat16, torch.float16) for H in (896, configs.TRAINING_WIDE_H)}
    assert names == set(catalog.training_names())


def test_resolve_and_explain_a_training_kernel():
    name = "dswiglu_pingpong_128x128x64_1x1_bf16"
    assert configs.resolve("dswiglu", name, 1, 64, 64, torch.bfloat16).name == name
    choice, why = configs.explain("dual_store", "", 8, 4864, 896, torch.bfloat16)
    assert choice.name == "dual_store_pingpong_128x128x64_2x1_bf16" and "H = 896 < 3584" in why
    with pytest.raises(ValueError, match="config must name a dual_store kernel"):
        configs.resolve("dual_store", "promoted", 8, 64, 64, torch.bfloat16)


def test_an_inference_kernel_takes_no_store_config():
    with pytest.raises(ValueError, match="config must name a dual kernel"):
        configs.check_config("dual", "dual_store_pingpong_128x128x64_1x1_bf16", torch.bfloat16)


def test_the_plan_kinds_are_the_operator_library_s():
    header = (ROOT / "csrc" / "torch" / "launch.hpp").read_text()
    fsw = {"FSW_KERNEL_PACKED": 0, "FSW_KERNEL_DUAL": 1, "FSW_KERNEL_DSWIGLU": 2}
    found = {}
    for name, value in re.findall(r"kPlan(\w+) = (\w+),", header):
        snake = re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower().replace("fp8_e4m3_out", "fp8_e4m3out")
        found[snake] = fsw.get(value, None if not value.isdigit() else int(value))
    assert {v: k for k, v in found.items()} == _plans.PLAN_KINDS


def test_no_module_outside_the_choice_names_a_training_config():
    src = ROOT / "src" / "fused_swiglu"
    for f in (src / "mlp_ops.py", src / "training_ops.py", src / "mlp.py"):
        text = f.read_text()
        assert not re.search(r"\b_lib\b", text) and "launch(" not in text, f  # no ctypes launch
        assert not re.search(r"(dual_store|packed_store|dswiglu)_pingpong", text), f


@pytest.mark.parametrize("args, message", [
    (("quad", "", 1, 64, 64, torch.bfloat16), "kernel must be one of .*got kernel='quad'"),
    (("packed", "", 1, 64, 64, torch.float32), "dtype must be torch.bfloat16 or torch.float16; got dtype=torch.float32"),
    (("packed", "nonsense", 1, 64, 64, torch.bfloat16),
     r"'' \(the choice, fast accumulation\) or 'promoted'; got config='nonsense'"),
])
def test_explain_names_the_argument_at_fault(args, message):
    with pytest.raises(ValueError, match=message):
        configs.explain(*args)
    with pytest.raises(TypeError, match="config must be a str .*got config=None"):
        configs.explain("packed", None, 1, 64, 64, torch.bfloat16)


def test_a_named_config_with_its_launch_runs_on_the_cpu_as_the_name_alone():
    x, wg, wu = (t.to(torch.bfloat16) for t in _operands())
    name = "dual_store_pingpong_128x128x64_2x1_bf16"
    want = training_ops.swiglu_dual_store(x, wg, wu, name)
    got = training_ops.swiglu_dual_store(x, wg, wu, name + "@2:8")
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    with pytest.raises(ValueError, match=re.escape("swizzle in (1, 2, 4, 8)")):
        training_ops.swiglu_dual_store(x, wg, wu, name + "@2:5")
