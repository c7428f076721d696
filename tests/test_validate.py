"""Argument checks of the public functions (CPU; no kernel is launched)."""

import warnings

import pytest
import torch

import fused_swiglu._validate as v
from fused_swiglu import _dispatch, swiglu, swiglu_packed

# the deprecated layout="concatenated" is still tested until its removal; its warning: test_functional_cpu
pytestmark = pytest.mark.filterwarnings("ignore:swiglu.*layout='concatenated'.*deprecated:FutureWarning")

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
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., H\).*got x \(2, 24\) and H=32 "
                                         r"\(w_gate \(16, 32\)\)"):
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


# Weights given as (H, I), e.g. w_gate.T of an nn.Linear weight, on the 0.5B shape: the message blames the
# weight, not x, and shows every shape it got.
H5, I5 = 896, 4864


def _shape_args():
    x = torch.zeros(2, 3, H5, dtype=BF)
    wg, wu = torch.zeros(I5, H5, dtype=BF), torch.zeros(I5, H5, dtype=BF)
    return x, wg, wu


def test_transposed_weight_pair_is_blamed_not_x(backend):
    x, wg, wu = _shape_args()
    with pytest.raises(ValueError, match=(
            r"^w_gate and w_up must be \(I, H\) = \(out_features, in_features\), as nn.Linear.weight stores it; "
            r"got w_gate \(896, 4864\), w_up \(896, 4864\) and x \(2, 3, 896\): x's last dimension, 896, is "
            r"w_gate.shape\[0\], so w_gate and w_up look transposed: pass w_gate.T and w_up.T, i.e. "
            r"gate_proj.weight as stored and up_proj.weight as stored, not their .T\. If the weights are right, "
            r"x is not: x must have shape \(\.\.\., H\) with H = w_gate.shape\[1\] = 4864$")):
        swiglu(x, wg.T, wu.T, backend=backend)


@pytest.mark.parametrize("arg", ["w_gate", "w_up"])
def test_one_transposed_weight_is_named(backend, arg):
    x, wg, wu = _shape_args()
    args = {"w_gate": wg, "w_up": wu}
    args[arg] = args[arg].T
    got = {"w_gate": r"w_gate \(896, 4864\), w_up \(4864, 896\)",
           "w_up": r"w_gate \(4864, 896\), w_up \(896, 4864\)"}[arg]
    with pytest.raises(ValueError, match=(
            rf"^{arg} must be \(I, H\) = \(out_features, in_features\).*; got {got} and x \(2, 3, 896\): "
            rf"x's last dimension, 896, is {arg}.shape\[0\], so {arg} looks transposed: pass {arg}.T, i.e. "
            rf"\w+_proj.weight as stored, not its .T$")):
        swiglu(x, args["w_gate"], args["w_up"], backend=backend)


def test_transposed_packed_weight_is_blamed_not_x(backend):
    x, wg, wu = _shape_args()
    for layout, w_packed in (("concatenated", torch.cat([wg, wu])), ("interleaved", torch.zeros(2 * I5, H5, dtype=BF))):
        with pytest.raises(ValueError, match=(
                r"^w_packed must be \(2I, H\) = \(out_features, in_features\), as nn.Linear.weight stores it; "
                r"got w_packed \(896, 9728\) and x \(2, 3, 896\): x's last dimension, 896, is w_packed.shape\[0\], "
                r"so w_packed looks transposed: pass w_packed.T, i.e. pack_gate_up\(gate_proj.weight, "
                r"up_proj.weight\) or their torch.cat, not its .T\. If the weights are right, x is not: x must have "
                r"shape \(\.\.\., H\) with H = w_packed.shape\[1\] = 9728$")):
            swiglu_packed(x, w_packed.T, layout=layout, backend=backend)


def test_x_of_the_wrong_width_is_blamed_with_the_weight_shown(backend):
    x, wg, wu = _shape_args()
    with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., H\) with H = w_gate.shape\[1\]; got x "
                                         r"\(2, 3, 904\) and H=896 \(w_gate \(4864, 896\)\)$"):
        swiglu(torch.zeros(2, 3, 904, dtype=BF), wg, wu, backend=backend)
    with pytest.raises(ValueError, match=r"^x must have shape \(\.\.\., H\) with H = w_packed.shape\[1\]; got x "
                                         r"\(2, 3, 904\) and H=896 \(w_packed \(9728, 896\)\)$"):
        swiglu_packed(torch.zeros(2, 3, 904, dtype=BF), torch.cat([wg, wu]), layout="concatenated", backend=backend)


def test_weights_of_different_shapes_show_both():
    x, wg, wu = _shape_args()
    with pytest.raises(ValueError, match=r"^w_gate and w_up must have the same shape \(I, H\); got w_gate "
                                         r"\(4864, 896\) and w_up \(4856, 896\)$"):
        v.check_weight_pair(x, wg, wu[:-8])
    with pytest.raises(ValueError, match=r"^w_packed must have an even number of rows \(2I\); got 9727 rows "
                                         r"\(w_packed \(9727, 896\)\)$"):
        v.check_packed(x, torch.cat([wg, wu])[:-1])


def test_square_weights_are_never_called_transposed():
    # I == H: x's last dimension matches both of a weight's dimensions, so the weights are taken as given
    x, w = torch.zeros(2, 64, dtype=BF), torch.zeros(64, 64, dtype=BF)
    assert v.check_weight_pair(x, w, w) == (64, 64)
    with pytest.raises(ValueError, match=r"^x must have shape"):
        v.check_weight_pair(torch.zeros(2, 32, dtype=BF), w, w)


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

    with pytest.raises(TypeError, match=r"kernel must be a str, one of .*got kernel=array"):
        swiglu(x, wg, wu, kernel=np.array(["dual", "x"]))
    with pytest.raises(TypeError, match=r"layout must be a str, one of .*got layout=array"):
        swiglu_packed(x, torch.cat([wg, wu]), layout=np.array(["interleaved"]))
    with pytest.raises(TypeError, match=r"accumulation must be a str, one of 'fast', 'promoted'; got accumulation=5"):
        swiglu(x, wg, wu, accumulation=5)
    with pytest.raises(ValueError, match=r"accumulation must be one of 'fast', 'promoted'; got accumulation='exact'"):
        swiglu(x, wg, wu, accumulation="exact")
    with pytest.raises(TypeError, match=r"accumulation must be a str, one of .*got accumulation=\['fast'\]"):
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
    assert "rounds once, for correctness, not speed" in msgs[0]
    assert v.fallback_cost(torch.device("cpu")) in msgs[0]


def test_fallback_cost_is_stated_per_device_type():
    cpu = v.fallback_cost(torch.device("cpu"))
    assert "can take about 1-5x the time of eager bf16/fp16" in cpu and "AVX2-only CPU it can be faster" in cpu
    gpu = v.fallback_cost(torch.device("cuda", 0))  # a device object only: no GPU is needed
    assert "slower than the unfused bf16/fp16 products it replaces" in gpu
    assert v.fallback_cost(torch.device("meta")) == (
        "Its speed against the unfused bf16/fp16 products has not been measured on meta.")
