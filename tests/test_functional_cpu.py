"""The public functions on CPU (torch backend): shapes, layouts, strides, empty inputs."""

import warnings

import pytest
import torch

from fused_swiglu import pack_gate_up, swiglu, swiglu_mlp, swiglu_mlp_packed, swiglu_packed
from fused_swiglu.reference import swiglu_fp32_one_rounding
from numerics import Float64Truth

# the deprecated layout="concatenated" is still tested until its removal; its warning: test_functional_cpu
pytestmark = pytest.mark.filterwarnings("ignore:swiglu.*layout='concatenated'.*deprecated:FutureWarning")


def test_the_concatenated_layout_is_deprecated_naming_the_call_to_write_instead():
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    wg, wu, wd = (torch.randn(40, 64) / 8).bfloat16(), (torch.randn(40, 64) / 8).bfloat16(), torch.randn(64, 40).bfloat16()
    w = torch.cat([wg, wu])
    with pytest.warns(FutureWarning, match=r"swiglu_packed\(\.\.\., layout='concatenated'\) is deprecated and will be "
                      r"removed in 0\.3: swiglu_packed runs the packed kernel only; for \[W_gate; W_up\] weights call "
                      r"swiglu\(x, \*w_packed\.chunk\(2\)\)") as caught:
        y = swiglu_packed(x, w, layout="concatenated", backend="torch")
    assert caught[0].filename == __file__  # at the caller's line
    assert torch.equal(y, swiglu(x, *w.chunk(2), backend="torch"))
    with pytest.warns(FutureWarning, match=r"swiglu_mlp_packed.*call swiglu_mlp\(x, \*w_packed\.chunk\(2\), w_down\)"):
        z = swiglu_mlp_packed(x, w, wd, layout="concatenated", backend="torch")
    assert torch.equal(z, swiglu_mlp(x, *w.chunk(2), wd, backend="torch"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # the packed kernel's own layout: no warning
        swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="torch")
        swiglu_mlp_packed(x, pack_gate_up(wg, wu), wd, layout="interleaved", backend="torch")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_backend_is_fp32_one_rounding(dtype):
    x = torch.randn(3, 7, 64).to(dtype)
    wg, wu = (torch.randn(40, 64) / 8).to(dtype), (torch.randn(40, 64) / 8).to(dtype)
    expected = swiglu_fp32_one_rounding(x, wg, wu)
    out = swiglu(x, wg, wu, backend="torch")
    assert out.shape == (3, 7, 40) and out.dtype == dtype
    assert torch.equal(out, expected)
    assert torch.equal(swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved", backend="torch"), expected)
    assert torch.equal(swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated", backend="torch"), expected)
    # the torch backend has one accumulation (IEEE fp32 matrix products) for either choice
    assert torch.equal(swiglu(x, wg, wu, backend="torch", accumulation="promoted"), expected)


def test_strided_inputs_are_read_by_their_strides():
    # Checked against float64, not bit for bit: a row's fp32 matrix product on the CPU can depend on
    # where the row sits in the batch (MKL blocks the rows), so a transposed x may differ in a last bit.
    base = torch.randn(3, 7, 128, dtype=torch.bfloat16)
    x = base[..., ::2]
    wt = torch.randn(64, 32, dtype=torch.bfloat16)
    wg = wt.t()
    wu = torch.randn(32, 64, dtype=torch.bfloat16)
    truth = Float64Truth(x.contiguous(), wg.contiguous(), wu)
    truth.check(swiglu(x, wg, wu, backend="torch"), "x = base[..., ::2], w_gate = wt.t()")
    out_t = swiglu(x.transpose(0, 1), wg, wu, backend="torch")
    truth.check(out_t.transpose(0, 1), "x.transpose(0, 1)")


def test_empty_x():
    wg = torch.randn(16, 32, dtype=torch.bfloat16)
    for shape in [(0, 32), (2, 0, 32)]:
        out = swiglu(torch.zeros(shape, dtype=torch.bfloat16), wg, wg, backend="torch")
        assert out.shape == shape[:-1] + (16,)


def test_validation_cache_never_skips_a_rule():
    from fused_swiglu import _dispatch

    wg = torch.randn(16, 64, dtype=torch.bfloat16)
    wu = torch.randn(16, 64, dtype=torch.bfloat16)
    for M in (1, 5):  # one cached plan serves every M
        x = torch.randn(M, 64, dtype=torch.bfloat16)
        torch.testing.assert_close(swiglu(x, wg, wu, backend="torch"), swiglu_fp32_one_rounding(x, wg, wu),
                                   rtol=0, atol=0)
    assert any(k[0] == "swiglu" for k in _dispatch.PLANS)
    # what differs from the cached call is checked again
    with pytest.raises(TypeError, match="dtype"):
        swiglu(torch.randn(2, 64, dtype=torch.float16), wg, wu, backend="torch")
    with pytest.raises(ValueError, match="H"):
        swiglu(torch.randn(2, 63, dtype=torch.bfloat16), wg, wu, backend="torch")
    with pytest.raises(ValueError, match="kernel"):
        swiglu(torch.randn(2, 64, dtype=torch.bfloat16), wg, wu, backend="torch", kernel="triple")


@pytest.mark.parametrize("backend", ["torch", "auto"])
def test_fallback_compiles_with_fullgraph(backend):
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    wg, wu = torch.randn(16, 64, dtype=torch.bfloat16), torch.randn(16, 64, dtype=torch.bfloat16)
    swiglu(x, wg, wu, backend=backend)  # the once-per-process fallback warning happens outside the graph
    f = torch.compile(lambda t: swiglu(t, wg, wu, backend=backend), fullgraph=True)
    torch.testing.assert_close(f(x), swiglu_fp32_one_rounding(x, wg, wu), rtol=0, atol=0)
    g = torch.compile(lambda t: swiglu_packed(t, pack_gate_up(wg, wu), layout="interleaved", backend=backend),
                      fullgraph=True)
    torch.testing.assert_close(g(x), swiglu_fp32_one_rounding(x, wg, wu), rtol=0, atol=0)


def test_fallback_warning_points_at_the_callers_line(monkeypatch):
    import warnings

    import fused_swiglu._validate as v
    from fused_swiglu import _dispatch

    monkeypatch.setattr(v, "_warned", set())
    monkeypatch.setattr(_dispatch, "PLANS", {})
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    w = torch.randn(16, 64, dtype=torch.bfloat16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        swiglu(x, w, w)
    assert len(caught) == 1 and caught[0].filename == __file__


@pytest.fixture
def kernel_path_on_cpu(monkeypatch, direct_calls):
    """Pretend the CPU is a Hopper GPU: the kernel path's Python layer runs and calls the operator,
    whose CPU kernel runs instead of the library. Calls that dispatch below the Autograd key (the
    direct path) are recorded (:func:`direct_calls`). The validation cache is private to the test."""
    import fused_swiglu._validate as validate
    from fused_swiglu import _dispatch

    monkeypatch.setattr(validate, "hopper_status", lambda device: None)
    monkeypatch.setattr(_dispatch, "PLANS", {})
    return direct_calls


def test_parameter_weights_take_the_direct_path_when_no_graph_is_recorded(kernel_path_on_cpu):
    x = torch.randn(4, 16, dtype=torch.bfloat16)
    wg = torch.nn.Parameter(torch.randn(8, 16, dtype=torch.bfloat16))
    wu = torch.nn.Parameter(torch.randn(8, 16, dtype=torch.bfloat16))
    with torch.inference_mode():
        y1 = swiglu(x, wg, wu, backend="cutlass")
    with torch.no_grad():
        y2 = swiglu(x, wg, wu, backend="cutlass")
    assert len(kernel_path_on_cpu) == 2 and y1.grad_fn is None and y2.grad_fn is None
    y3 = swiglu(x, wg, wu, backend="cutlass")  # grad mode on, weights require grad: through the op
    assert len(kernel_path_on_cpu) == 2 and y3.grad_fn is not None
    assert torch.equal(y1, y3.detach()) and torch.equal(y2, y1)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage:UserWarning")
def test_nested_tensors_are_refused_by_name():
    nt = torch.nested.nested_tensor([torch.randn(2, 16), torch.randn(3, 16)]).to(torch.bfloat16)
    w = torch.randn(8, 16, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="x must be a dense"):
        swiglu(nt, w, w)
    with pytest.raises(TypeError, match="w_gate must be a dense"):
        pack_gate_up(torch.nested.nested_tensor([w, w]), w)


def test_mlp_shape_errors_name_the_argument_and_show_the_shapes():
    """swiglu_mlp(_packed) on the 0.5B shape (H = 896, I = 4864) with a weight given as its .T."""
    H, I = 896, 4864
    x = torch.zeros(2, H, dtype=torch.bfloat16)
    wg, wu = torch.zeros(I, H, dtype=torch.bfloat16), torch.zeros(I, H, dtype=torch.bfloat16)
    wd = torch.zeros(H, I, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^w_gate and w_up must be \(I, H\) .*got w_gate \(896, 4864\), "
                                         r"w_up \(896, 4864\) and x \(2, 896\): .*look transposed: pass w_gate.T "
                                         r"and w_up.T"):
        swiglu_mlp(x, wg.T, wu.T, wd, backend="torch")
    with pytest.raises(ValueError, match=r"^w_packed must be \(2I, H\) .*got w_packed \(896, 9728\) and x "
                                         r"\(2, 896\): .*looks transposed: pass w_packed.T"):
        swiglu_mlp_packed(x, torch.cat([wg, wu]).T, wd, layout="concatenated", backend="torch")
    for call in (lambda: swiglu_mlp(x, wg, wu, wd.T, backend="torch"),
                 lambda: swiglu_mlp_packed(x, torch.cat([wg, wu]), wd.T, layout="concatenated", backend="torch")):
        with pytest.raises(ValueError, match=r"^w_down must be 2-D \(H, I\) = \(896, 4864\) \(down_proj.weight "
                                             r"of the same MLP\); got w_down of shape \(4864, 896\): it looks "
                                             r"transposed: pass down_proj.weight as stored, not its .T$"):
            call()


@pytest.mark.parametrize("fn", ["swiglu", "swiglu_packed"])
def test_auto_backend_runs_the_unfused_path_where_the_data_predicts_it_faster(kernel_path_on_cpu, monkeypatch, fn):
    """backend="auto" on the kernel path asks the choice's data (here: a stand-in that says yes for the
    dual kernel) and then runs PyTorch's unfused SwiGLU in x's dtype; "cutlass" never asks."""
    from fused_swiglu import functional

    asked = []

    def predicted(kernel, x, I, accumulation):
        asked.append((kernel, tuple(x.shape), I, accumulation))
        return kernel == "dual"

    monkeypatch.setattr(functional, "unfused_predicted_faster", predicted)
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    wg, wu = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    want = torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)  # rounded to bf16 after each product
    if fn == "swiglu":
        got = swiglu(x, wg, wu)
        assert asked == [("dual", (2, 5, 16), 8, "fast")] and torch.equal(got, want)
        kernel = swiglu(x, wg, wu, kernel="packed")  # the packed kernel's data says no: the kernel runs
        assert asked[-1][0] == "packed" and not torch.equal(kernel, want)
        assert torch.equal(kernel, swiglu(x, wg, wu, backend="cutlass")) and len(asked) == 2
    else:
        got = swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated")
        assert asked == [("dual", (2, 5, 16), 8, "fast")] and torch.equal(got, want)
        swiglu_packed(x, pack_gate_up(wg, wu), layout="interleaved")  # the packed kernel, not asked
        swiglu_packed(x, torch.cat([wg, wu]), layout="concatenated", backend="cutlass")
        assert len(asked) == 1


def test_the_unfused_check_asks_the_data_for_large_eager_cuda_calls_only(monkeypatch):
    from fused_swiglu import _dispatch, _lib

    class X:  # the attributes of a CUDA tensor the check reads
        def __init__(self, M, H, is_cuda=True):
            self.shape, self.is_cuda, self.dtype = (M, H), is_cuda, torch.bfloat16
            self.device = torch.device("cuda", 1)

        def numel(self):
            return self.shape[0] * self.shape[1]

        def dim(self):
            return len(self.shape)

    asked = []
    monkeypatch.setattr(_lib, "target", lambda index: (132, f"GPU {index}", None))
    monkeypatch.setattr(_dispatch, "unfused_faster", lambda *a: asked.append(a) or True)
    M = _dispatch.UNFUSED_CHECK_FROM
    assert _dispatch.unfused_predicted_faster("dual", X(M, 64), 256, "fast")
    assert asked == [("dual", M, 256, 64, "fast", 132, "GPU 1", torch.bfloat16)]
    assert not _dispatch.unfused_predicted_faster("dual", X(M - 1, 64), 256, "fast")  # fewer tokens
    assert not _dispatch.unfused_predicted_faster("dual", X(M, 64, is_cuda=False), 256, "fast")
    assert not _dispatch.unfused_predicted_faster("dual", X(M, 0), 256, "fast")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not _dispatch.unfused_predicted_faster("dual", X(M, 64), 256, "fast")  # under torch.compile
    assert len(asked) == 1


@pytest.mark.parametrize("fn", ["swiglu", "swiglu_packed"])
def test_a_0d_x_on_the_fast_path_is_a_clear_error(kernel_path_on_cpu, monkeypatch, fn):
    """The fast path's size test reads x.shape[-1]: a 0-d x must still reach the checks that name it."""
    from fused_swiglu import functional

    monkeypatch.setattr(functional, "fast_path", lambda x: True)  # as for a CUDA tensor on a Hopper GPU
    x = torch.tensor(1.0, dtype=torch.bfloat16)
    w = torch.randn(8, 16, dtype=torch.bfloat16)
    with pytest.raises((ValueError, TypeError), match="x"):
        if fn == "swiglu":
            swiglu(x, w, w)
        else:
            swiglu_packed(x, torch.cat([w, w]), layout="concatenated")



def test_op_first_runs_the_checks_only_where_the_operator_raises():
    """_dispatch.op_first: the call's result without the checks; where the call raises, the checks' error, or
    the call's own where the checks find nothing wrong."""
    from fused_swiglu._dispatch import op_first

    checked = []

    def fails(*args):
        raise RuntimeError(f"C boundary: {args}")

    assert op_first(lambda: checked.append(1), lambda a, b: a + b, 2, 3) == 5 and checked == []
    with pytest.raises(ValueError, match="named"):
        op_first(lambda: (_ for _ in ()).throw(ValueError("named")), fails, 1)
    with pytest.raises(RuntimeError, match=r"C boundary: \(1, 2\)"):
        op_first(lambda: checked.append(1), fails, 1, 2)
    assert checked == [1]


@pytest.mark.parametrize("case", ["w dtype", "H", "w_up rows", "w not a tensor", "w_packed odd rows", "w_packed None"])
def test_the_fast_path_raises_the_checked_path_s_errors(kernel_path_on_cpu, monkeypatch, case):
    """A call the operator refuses on the fast path raises what the checked path raises, type and message."""
    from fused_swiglu import functional

    x = torch.randn(4, 16, dtype=torch.bfloat16)
    w = torch.randn(8, 16, dtype=torch.bfloat16)
    call = {
        "w dtype": lambda: swiglu(x, w.float(), w, backend="cutlass"),
        "H": lambda: swiglu(x, w[:, :8], w[:, :8], backend="cutlass"),
        "w_up rows": lambda: swiglu(x, w, w[:4], backend="cutlass"),
        "w not a tensor": lambda: swiglu(x, w, [1.0], backend="cutlass"),
        "w_packed odd rows": lambda: swiglu_packed(x, w[:7], layout="concatenated", backend="cutlass"),
        "w_packed None": lambda: swiglu_packed(x, None, layout="interleaved", backend="cutlass"),
    }[case]
    errors = []
    for fast in (False, True):
        monkeypatch.setattr(functional, "fast_path", lambda x: fast)
        with pytest.raises((TypeError, ValueError)) as error:
            call()
        errors.append((error.type, str(error.value)))
    assert errors[0] == errors[1]

def test_swiglu_follows_autocast_as_torch_mm_does():
    """Under torch.autocast to bf16, float32 operands are cast first (differentiably): the result is the
    bf16 call's, and float64 is left as it is (and refused by name, as outside autocast)."""
    torch.manual_seed(0)
    x = torch.randn(5, 16, requires_grad=True)
    wg, wu = torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(8, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU fallback's notice
        want = swiglu(x.detach().bfloat16(), wg, wu.bfloat16())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got = swiglu(x, wg, wu)
            packed = swiglu_packed(x, torch.cat([wg.float(), wu]), layout="concatenated")
            assert (torch.mm(x, wu.T).dtype, got.dtype) == (torch.bfloat16, torch.bfloat16)
            with pytest.raises(TypeError, match="x must be torch.bfloat16 or torch.float16"):
                swiglu(x.double(), wg, wu)
        assert torch.equal(got, want) and torch.equal(packed, want)
        got.float().sum().backward()
        assert x.grad is not None and x.grad.dtype == torch.float32
        with pytest.raises(TypeError, match="x must be torch.bfloat16 or torch.float16"):
            swiglu(x, wg, wu)  # outside autocast: as before
