"""The benchmark's output check (fused_swiglu.bench.check) on CPU tensors: right results pass,
each kind of wrong result stops the benchmark with a message naming the method and the shape."""

import pytest
import torch

from fused_swiglu import cli
from fused_swiglu.bench import check, methods
from fused_swiglu.errors import WrongOutputError
from fused_swiglu.functional import swiglu, swiglu_packed
from fused_swiglu.accuracy import compare, count_threshold_for
from fused_swiglu.reference import swiglu_eager, swiglu_float64, swiglu_fp32_one_rounding

CPU = torch.device("cpu")


def _set(dtype=torch.bfloat16, M=37, H=64, I=48):
    torch.manual_seed(0)
    return methods.make_input_set(M, H, I, dtype, CPU)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_right_results_pass(dtype):
    s = _set(dtype)
    calls = methods.build_calls(["eager", "cublas_gemm"], [s])
    # the fused methods' names, served here by the one-rounding PyTorch path and the fallback
    calls["fused_packed"] = [lambda: swiglu_packed(s.x, s.w_packed, layout="interleaved", backend="torch")]
    calls["fused_dual"] = [lambda: swiglu(s.x, s.w_gate, s.w_up, backend="torch")]
    calls["fused_dual_promoted"] = [lambda: swiglu_fp32_one_rounding(s.x, s.w_gate, s.w_up)]
    check.check_outputs(calls, s, "test M=37")  # raises on failure


def _wrong_calls(s):
    def zeroed_block():
        y = swiglu_eager(s.x, s.w_gate, s.w_up)
        y[:16, :8] = 0  # a tile the kernel never stored, read as zeros
        return y

    def small_element_wrong():
        y = swiglu_eager(s.x, s.w_gate, s.w_up)
        ref = swiglu_float64(s.x, s.w_gate, s.w_up)
        i = int(ref.abs().argmin())  # an element below the counting threshold, which ulps ignore
        y.view(-1)[i] = 0.5 * ref.square().mean().sqrt().item()
        return y

    def one_nan():
        y = swiglu_eager(s.x, s.w_gate, s.w_up)
        y[3, 5] = float("nan")
        return y

    return {
        "zeroed block": (zeroed_block, r"\d+ ulps from the float64 reference \(at most 16 allowed\)"),
        "NaN": (one_nan, "1 of 1776 elements are NaN or infinite"),
        "small element wrong": (small_element_wrong, "an element below the counting threshold is"),
        # concatenated [gate; up] weights read as interleaved pairs
        "wrong layout": (lambda: swiglu_packed(s.x, s.w_cat, layout="interleaved", backend="torch"), "ulps from"),
        "gate and up swapped": (lambda: swiglu_eager(s.x, s.w_up, s.w_gate), "ulps from"),
        "no activation": (lambda: torch.mm(s.x, s.w_cat.t()), r"shape \(37, 96\), expected \(37, 48\)"),
        "fp32 output": (lambda: swiglu_fp32_one_rounding(s.x.float(), s.w_gate.float(), s.w_up.float()),
                        "dtype torch.float32, expected torch.bfloat16"),
        "not a tensor": (lambda: None, "returned NoneType, not a tensor"),
    }


@pytest.mark.parametrize("fault", ["zeroed block", "NaN", "small element wrong", "wrong layout", "gate and up swapped", "no activation",
                                   "fp32 output", "not a tensor"])
def test_each_kind_of_wrong_result_is_refused(fault):
    s = _set()
    fn, message = _wrong_calls(s)[fault]
    calls = methods.build_calls(["eager"], [s])
    calls["fused_packed"] = [fn]
    with pytest.raises(WrongOutputError, match=r"^fused_packed on Qwen2.5-0.5B M=37: .*" + message + ".*; not timed$"):
        check.check_outputs(calls, s, "Qwen2.5-0.5B M=37")


def _off_by(s, rel):
    """eager's result with every element scaled by (1 + rel), rounded: rel = 1 % is ~2.5 bf16 ulps
    everywhere, far more than a fused kernel may be off but within what a reduced-precision cuBLAS
    reduction might give PyTorch's paths."""
    y = swiglu_eager(s.x, s.w_gate, s.w_up)
    return lambda: (y.float() * (1 + rel)).to(y.dtype)


@pytest.mark.parametrize("method", ["eager", "torch_compile"])
def test_pytorch_paths_are_held_to_a_relative_error(method):
    s = _set()
    check.check_outputs({method: [_off_by(s, 0.01)]}, s, "test")  # 1 % off: passes
    for wrong, message in ((_off_by(s, 0.2), r"relative error 0\.(199|2\d*) against the float64 reference "
                                             r"\(at most 0\.05 allowed\); not timed$"),
                           (lambda: swiglu_eager(s.x, s.w_up, s.w_gate), "relative error"),
                           (lambda: torch.zeros(37, 48, dtype=torch.bfloat16), r"relative error 1 ")):
        with pytest.raises(WrongOutputError, match=f"^{method} on test: {message}"):
            check.check_outputs({method: [wrong]}, s, "test")


def test_fused_methods_are_held_to_ulps_not_to_the_relative_error():
    s = _set()
    y = swiglu_eager(s.x, s.w_gate, s.w_up)
    spiked = y.clone()
    i = int(spiked.float().abs().view(-1).argsort()[spiked.numel() // 2])  # an element of median size
    spiked.view(-1)[i] *= 1.25  # 25 % off: ~32-64 ulps, a tiny relative L2 error
    check.check_outputs({"eager": [lambda: spiked]}, s, "test")
    with pytest.raises(WrongOutputError, match=r"^fused_dual on test: \d+ ulps from the float64 reference"):
        check.check_outputs({"fused_dual": [lambda: spiked]}, s, "test")


def test_only_cublas_gemm_computes_no_reference(monkeypatch):
    s = _set()
    monkeypatch.setattr(check, "swiglu_float64", lambda *a: pytest.fail("reference computed"))
    check.check_outputs(methods.build_calls(["cublas_gemm"], [s]), s, "test")


def test_cublas_gemm_is_not_compared_and_only_the_first_input_set_is_used():
    s, other = _set(), _set(M=5)
    calls = methods.build_calls(["cublas_gemm", "eager"], [s, other])
    check.check_outputs(calls, s, "test")
    assert check.output_problem(calls["eager"][1](), swiglu_float64(s.x, s.w_gate, s.w_up), s.x.dtype) \
        == "shape (5, 48), expected (37, 48)"


def test_eager_is_well_inside_the_bound():
    # the bound is 4x eager PyTorch's largest distance (module docstring); check that on these inputs
    s = _set(M=256, H=512, I=256)
    rep = compare(swiglu_eager(s.x, s.w_gate, s.w_up), swiglu_float64(s.x, s.w_gate, s.w_up),
                        count_threshold_for(s.x.dtype))
    assert 1 <= rep.max_ulp <= check.MAX_ULP // 4


def test_cli_reports_a_wrong_result_with_exit_status_3(monkeypatch, capsys):
    def wrong(args, console):
        raise WrongOutputError("fused_packed on Qwen2.5-7B M=512: 1 of 2 elements are NaN or infinite; not timed")

    monkeypatch.setattr(cli.bench, "run", wrong)
    assert cli.main(["bench"]) == cli.EXIT_WRONG_OUTPUT == 3
    err = capsys.readouterr().err
    assert err == "fused-swiglu bench: fused_packed on Qwen2.5-7B M=512: 1 of 2 elements are NaN or infinite; not timed\n"


def test_an_optional_method_that_raises_or_is_wrong_is_left_out_not_fatal():
    s = _set()
    calls = methods.build_calls(["eager"], [s])

    def broken_peer():
        raise TypeError("epilogue fn depends on <ContextVar>")

    calls["quack"] = [broken_peer]
    calls["other_peer"] = [lambda: torch.mm(s.x, s.w_cat.t())]  # no activation: a wrong result
    left = check.check_outputs(calls, s, "test M=37", optional=frozenset({"quack", "other_peer"}))
    assert set(calls) == {"eager"}
    assert left["quack"] == "quack on test M=37: its call raised TypeError: epilogue fn depends on <ContextVar>"
    assert left["other_peer"].startswith("other_peer on test M=37: shape (37, 96), expected (37, 48)")
    # a right result of an optional method stays, and nothing is reported
    calls["quack"] = [lambda: swiglu_eager(s.x, s.w_gate, s.w_up)]
    assert check.check_outputs(calls, s, "test M=37", optional=frozenset({"quack"})) == {}
    assert set(calls) == {"eager", "quack"}


def test_a_method_that_is_not_optional_still_stops_the_run():
    s = _set()

    def broken():
        raise TypeError("boom")

    with pytest.raises(TypeError, match="boom"):
        check.check_outputs({"quack": [broken]}, s, "test M=37")
    with pytest.raises(WrongOutputError, match="quack on test M=37: shape"):
        check.check_outputs({"quack": [lambda: torch.mm(s.x, s.w_cat.t())]}, s, "test M=37",
                            optional=frozenset({"other"}))
