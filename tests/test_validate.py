"""Argument checks of the public functions (CPU; no kernel is launched)."""

import warnings

import pytest
import torch

import fused_swiglu._validate as v
from fused_swiglu import _dispatch, swiglu, swiglu_packed

BF = torch.bfloat16


def _w(I=16, H=32, dtype=BF):
    return torch.randn(I, H, dtype=dtype), torch.randn(I, H, dtype=dtype)


@pytest.fixture(params=["cutlass", "torch", "auto"])
def backend(request):
    return request.param


def test_non_tensor_arguments_are_named(backend):
    wg, wu = _w()
    with pytest.raises(TypeError, match="x must be a torch.Tensor; got list"):
        swiglu([1.0], wg, wu, backend=backend)
    with pytest.raises(TypeError, match="w_up must be a torch.Tensor; got NoneType"):
        swiglu(torch.zeros(2, 32, dtype=BF), wg, None, backend=backend)
    with pytest.raises(TypeError, match="w_packed must be a torch.Tensor"):
        swiglu_packed(torch.zeros(2, 32, dtype=BF), "w", layout="interleaved", backend=backend)


def test_sparse_tensors_are_refused_by_name(backend):
    wg, wu = _w(I=24, H=40)
    x = torch.randn(2, 40).to(BF)
    if backend != "cutlass":  # a dense call of the same shapes first: its cached plan must not admit them
        swiglu(x, wg, wu, backend=backend)
        swiglu_packed(x, torch.cat([wg, wu]), layout="interleaved", backend=backend)
    with pytest.raises(TypeError, match="x must be a dense \\(strided\\) tensor; got layout torch.sparse_coo"):
        swiglu(x.to_sparse(), wg, wu, backend=backend)
    with pytest.raises(TypeError, match="w_gate must be a dense"):
        swiglu(x, wg.to_sparse(), wu, backend=backend)
    with pytest.raises(TypeError, match="w_packed must be a dense"):
        swiglu_packed(x, torch.cat([wg, wu]).to_sparse(), layout="interleaved", backend=backend)


def test_dtypes(backend):
    wg, wu = _w()
    x = torch.zeros(2, 32, dtype=BF)
    with pytest.raises(TypeError, match=r"x must be torch.bfloat16 or torch.float16; got x.dtype=torch.float32"):
        swiglu(x.float(), wg.float(), wu.float(), backend=backend)
    with pytest.raises(TypeError, match=r"w_up must have the same dtype as x; got w_up.dtype=torch.float16"):
        swiglu(x, wg, wu.half(), backend=backend)
    with pytest.raises(TypeError, match=r"w_packed.dtype=torch.float16"):
        swiglu_packed(x, torch.cat([wg, wu]).half(), layout="concatenated", backend=backend)


def test_shapes(backend):
    wg, wu = _w(16, 32)
    x = torch.zeros(2, 32, dtype=BF)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., H\).*got x \(2, 24\) and H=32"):
        swiglu(torch.zeros(2, 24, dtype=BF), wg, wu, backend=backend)
    with pytest.raises(ValueError, match=r"w_gate \(16, 32\) and w_up \(8, 32\)"):
        swiglu(x, wg, wu[:8], backend=backend)
    with pytest.raises(ValueError, match=r"w_gate must be 2-D \(I, H\); got w_gate of shape \(16, 32, 1\)"):
        swiglu(x, wg[..., None], wu[..., None], backend=backend)
    with pytest.raises(ValueError, match=r"even number of rows \(2I\); got 31 rows"):
        swiglu_packed(x, torch.zeros(31, 32, dtype=BF), layout="concatenated", backend=backend)
    with pytest.raises(ValueError, match=r"w_packed must be 2-D"):
        swiglu_packed(x, torch.zeros(32, dtype=BF), layout="concatenated", backend=backend)
    with pytest.raises(ValueError, match=r"x must have shape"):
        swiglu_packed(torch.zeros((), dtype=BF), torch.zeros(32, 32, dtype=BF), layout="concatenated", backend=backend)


def test_devices():
    wg, wu = _w()
    x = torch.zeros(2, 32, dtype=BF, device="meta")
    with pytest.raises(ValueError, match=r"w_gate must be on the same device as x; got w_gate on cpu and x on meta"):
        swiglu(x, wg, wu, backend="torch")


def test_alignment_rules_for_the_kernels():
    # I = 4860 (not a multiple of 8) and H = 900, as reported by users
    x = torch.zeros(33, 896, dtype=BF)
    wg = torch.zeros(4860, 896, dtype=BF)
    with pytest.raises(ValueError, match=r"I must be a multiple of 8 for 16-byte TMA rows; got I=4860"):
        swiglu(x, wg, wg, backend="cutlass")
    x = torch.zeros(33, 900, dtype=BF)
    wg = torch.zeros(4864, 900, dtype=BF)
    with pytest.raises(ValueError, match=r"H must be a positive multiple of 8 for 16-byte TMA rows; got H=900"):
        swiglu(x, wg, wg, backend="cutlass")
    with pytest.raises(ValueError, match=r"got H=900"):
        swiglu_packed(x, torch.zeros(2 * 4864, 900, dtype=BF), layout="interleaved", backend="cutlass")
    with pytest.raises(ValueError, match=r"got H=0"):
        swiglu(torch.zeros(3, 0, dtype=BF), torch.zeros(8, 0, dtype=BF), torch.zeros(8, 0, dtype=BF), backend="cutlass")


def test_alignment_rules_do_not_apply_to_torch_backend():
    x = torch.randn(5, 9, dtype=BF)
    wg, wu = torch.randn(4, 9, dtype=BF), torch.randn(4, 9, dtype=BF)
    assert swiglu(x, wg, wu, backend="torch").shape == (5, 4)
    assert swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated", backend="torch").shape == (5, 4)


def test_cutlass_on_cpu_names_the_device():
    wg, wu = _w()
    with pytest.raises(RuntimeError, match=r"backend='cutlass' cannot run: tensors are on cpu, not on a CUDA device"):
        swiglu(torch.zeros(2, 32, dtype=BF), wg, wu, backend="cutlass")


def test_choices():
    wg, wu = _w()
    x = torch.zeros(2, 32, dtype=BF)
    with pytest.raises(ValueError, match=r"backend must be one of 'auto', 'cutlass', 'torch'; got backend='triton'"):
        swiglu(x, wg, wu, backend="triton")
    with pytest.raises(ValueError, match=r"kernel must be one of .*got kernel='fused'"):
        swiglu(x, wg, wu, kernel="fused")
    with pytest.raises(ValueError, match=r"layout must be one of .*got layout='blocked'"):
        swiglu_packed(x, torch.cat([wg, wu]), layout="blocked")
    with pytest.raises(TypeError, match="layout"):
        swiglu_packed(x, torch.cat([wg, wu]))
    np = pytest.importorskip("numpy")

    with pytest.raises(ValueError, match=r"kernel must be one of .*got kernel=array"):
        swiglu(x, wg, wu, kernel=np.array(["dual", "x"]))
    with pytest.raises(ValueError, match=r"layout must be one of .*got layout=array"):
        swiglu_packed(x, torch.cat([wg, wu]), layout=np.array(["interleaved"]))
    with pytest.raises(ValueError, match=r"accumulation must be one of 'fast', 'promoted'; got accumulation='exact'"):
        swiglu(x, wg, wu, accumulation="exact")
    with pytest.raises(ValueError, match=r"accumulation must be one of .*got accumulation=\['fast'\]"):
        swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated", accumulation=["fast"])


def test_fallback_warning_under_an_error_filter_is_raised_every_time(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    monkeypatch.setattr(_dispatch, "PLANS", {})  # the warning is given when a call is first planned
    wg, wu = _w()
    x = torch.randn(2, 32, dtype=BF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # not swallowed after the first raise
            with pytest.raises(RuntimeWarning, match="runs the PyTorch fallback"):
                swiglu(x, wg, wu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swiglu(x, wg, wu)
        swiglu(x, wg, wu)
    assert len(caught) == 1


def test_auto_backend_warns_once_on_cpu(monkeypatch):
    monkeypatch.setattr(v, "_warned", set())
    monkeypatch.setattr(_dispatch, "PLANS", {})
    wg, wu = _w()
    x = torch.randn(2, 32, dtype=BF)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swiglu(x, wg, wu)
        swiglu(x, wg, wu)
        swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated")
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "PyTorch fallback because tensors are on cpu" in msgs[0]
    assert "slower than the unfused bf16/fp16 products it replaces" in msgs[0]
