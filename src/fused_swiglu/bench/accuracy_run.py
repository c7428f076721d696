"""``fused-swiglu accuracy``: eager, each fused kernel and (where its package imports) the quack peer
against float64 on every model shape."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .. import configs
from ..accuracy import compare, count_threshold_for
from ..reference import swiglu_eager, swiglu_float64, swiglu_fp32_one_rounding
from ..weights import pack_gate_up
from . import report, shapes
from .methods import FUSED_KERNEL, OPTIONAL_PEERS, alternate_rows, fused_call, peer_problem, quack_swiglu

M_TOKENS = 2048
DTYPES = configs.DTYPE_OF_SUFFIX
METHODS = {
    "eager": lambda x, wg, wu, wp: swiglu_eager(x, wg, wu),
    "torch_fp32_one_rounding": lambda x, wg, wu, wp: swiglu_fp32_one_rounding(x, wg, wu),
    **{method: fused_call(method) for method in FUSED_KERNEL},
}


def run_accuracy(
    console, out: Path | None = None, dtype_name: str = "bf16", seed: int | None = None,
    models: list[str] | None = None,
) -> list[dict]:
    """x ~ N(0, 1) (M = 2048), weights ~ N(0, 1/H); every method vs float64 rounded once. The
    ``quack`` peer is measured too where the quack-kernels package imports; if its call raises on
    a shape, it is left out from that shape on, with the reason printed (a broken peer install
    does not stop the measurement of the kernels).

    The seed is fresh unless given, and printed so a run can be repeated. Mismatches are counted
    over elements of at least 1 % of the RMS for bf16 (the definition), 8 % for fp16
    (:func:`fused_swiglu.accuracy.count_threshold_for`).
    """
    dtype = DTYPES[dtype_name]
    threshold = count_threshold_for(dtype)
    seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    console.print(f"seed {seed}")
    gen = torch.Generator(device="cuda").manual_seed(seed)
    device = torch.device("cuda", torch.cuda.current_device())
    methods = dict(METHODS)
    if peer_problem("quack") is None:
        methods["quack"] = lambda x, wg, wu, wp: quack_swiglu(x, alternate_rows(wg, wu))
    rows = []
    peers_not_run: dict[str, str] = {}
    for shape in shapes.find(models):
        H, I = shape.hidden_size, shape.intermediate_size
        x = torch.randn(M_TOKENS, H, device=device, generator=gen).to(dtype)
        wg = (torch.randn(I, H, device=device, generator=gen) * H**-0.5).to(dtype)
        wu = (torch.randn(I, H, device=device, generator=gen) * H**-0.5).to(dtype)
        wp = pack_gate_up(wg, wu)
        ref64 = swiglu_float64(x, wg, wu)
        for method, fn in list(methods.items()):
            try:
                y = fn(x, wg, wu, wp)
            except Exception as e:  # an optional peer's own failure (its install, its compiler) here
                if method not in OPTIONAL_PEERS:
                    raise
                peers_not_run[method] = (f"{method} on {shape.model}: its call raised {type(e).__name__}: {e}; "
                                         "left out from there on")
                console.print(f"not measured: {peers_not_run[method]}")
                del methods[method]
                continue
            r = compare(y, ref64, threshold)
            del y
            rows.append({"model": shape.model, "method": method, "exact": r.exact, "mismatch": r.mismatch,
                         "max_ulp": r.max_ulp, "counted": r.counted, "n": r.n})
        del x, wg, wu, wp, ref64
        torch.cuda.empty_cache()
    console.print(report.accuracy_table(rows, dtype_name))
    if out:
        meta = report.machine_meta(device)
        meta.update({"seed": seed, "dtype": dtype_name, "tokens": M_TOKENS, "count_threshold_of_rms": threshold})
        if peers_not_run:
            meta["peers_not_run"] = peers_not_run
        paths = report.write_results(out, meta, rows, report.ACCURACY_FIELDS)
        console.print(f"wrote {paths[0]} and {paths[1]}")
    return rows
