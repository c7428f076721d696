"""Bad input after a good call, one operator family per process: ``python bad_input_worker.py FAMILY``.

The process makes one good call of the family (so that every fast path and cache is warm), then runs
each case of :data:`CASES` ``[FAMILY]`` in order, each followed by the good call again, and prints one
JSON line per case: ``{"case", "expected", "error", "message", "good_after"}`` (``error`` None when the call returned;
then ``"message"`` says whether the result matched the reference). A line ``{"case", "started"}`` comes
before each case, so that a process that dies names the case it died in. tests/test_bad_input_gpu.py
runs it and judges each line.

A case is ``(name, call, expected)``: ``expected`` is ``(exception type name, regex of the message)``,
or ``(SAME, reference)`` for input the operators must accept (strided or misaligned operands are
copied) and answer bit for bit as ``reference()`` does on contiguous operands.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch

M, H, I = 33, 896, 4864  # Qwen2.5-0.5B's MLP, an awkward M
SAME = "same"


def _r(*shape, dtype=torch.bfloat16, device="cuda", scale=1.0):
    return (torch.randn(*shape, device=device) * scale).to(dtype)


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A copy of t whose data starts 2 bytes past a 16-byte boundary (unit column stride)."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    return flat[1:].view(t.shape).copy_(t)


def _row_padded(t: torch.Tensor, pad: int = 8) -> torch.Tensor:
    """A copy of t (rows, cols) with row stride cols + pad (a row slice of a wider tensor)."""
    wide = torch.empty(t.shape[0], t.shape[1] + pad, dtype=t.dtype, device=t.device)
    return wide[:, : t.shape[1]].copy_(t)


def _no_grad(fn, *args):
    with torch.no_grad():
        return fn(*args)


def _transposed(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with column stride != 1 (the transpose of a contiguous tensor)."""
    return t.T.contiguous().T


# --- the families -------------------------------------------------------------------------------------
# Each returns (good, cases): good() -> tensor (or tuple) to compare; cases as in the module docstring.


def swiglu_dual():
    from fused_swiglu import swiglu

    x, wg, wu = _r(M, H), _r(I, H, scale=H**-0.5), _r(I, H, scale=H**-0.5)
    good = lambda: swiglu(x, wg, wu)  # noqa: E731
    return good, [
        ("H_900", lambda: swiglu(_r(M, 900), _r(I, 900), _r(I, 900)),
         ("ValueError", r"H must be a positive multiple of 8 for 16-byte TMA rows; got H=900")),
        ("I_4860", lambda: swiglu(x, wg[:4860], wu[:4860]),
         ("ValueError", r"I must be a multiple of 8 for 16-byte TMA rows; got I=4860")),
        ("H_0", lambda: swiglu(_r(M, 0), _r(I, 0), _r(I, 0)), ("ValueError", r"H must be a positive multiple of 8")),
        ("x_H_differs", lambda: swiglu(_r(M, 904), wg, wu),
         ("ValueError", r"x must have shape \(\.\.\., H\) with H = w_gate.shape\[1\]; got x \(33, 904\) and H=896")),
        ("w_up_other_shape", lambda: swiglu(x, wg, wu[:4856]), ("ValueError", r"w_gate and w_up must have the same shape")),
        ("w_gate_1d", lambda: swiglu(x, wg[0], wu), ("ValueError", r"w_gate must be 2-D \(I, H\)")),
        ("fp32", lambda: swiglu(x.float(), wg.float(), wu.float()),
         ("TypeError", r"x must be torch.bfloat16 or torch.float16; got x.dtype=torch.float32")),
        ("mixed_dtypes", lambda: swiglu(x, wg.half(), wu), ("TypeError", r"w_gate must have the same dtype as x")),
        ("w_up_on_cpu", lambda: swiglu(x, wg, wu.cpu()), ("ValueError", r"w_up must be on the same device as x")),
        ("x_on_cpu", lambda: swiglu(x.cpu(), wg, wu), ("ValueError", r"w_gate must be on the same device as x")),
        ("w_gate_not_a_tensor", lambda: swiglu(x, 3, wu), ("TypeError", r"w_gate must be a torch.Tensor")),
        ("unknown_kernel", lambda: swiglu(x, wg, wu, kernel="triple"), ("ValueError", r"kernel must be one of")),
        ("x_3d_H_differs", lambda: swiglu(_r(3, 11, 904), wg, wu), ("ValueError", r"x must have shape \(\.\.\., H\)")),
        ("misaligned_x", lambda: swiglu(_misaligned(x), wg, wu), (SAME, good)),
        ("transposed_x", lambda: swiglu(_transposed(x), wg, wu), (SAME, good)),
        ("row_slice_weights", lambda: swiglu(x, _row_padded(wg), _row_padded(wu)), (SAME, good)),
        ("misaligned_w_up", lambda: swiglu(x, wg, _misaligned(wu)), (SAME, good)),
    ]


def swiglu_packed():
    from fused_swiglu import pack_gate_up, swiglu_packed as packed

    x, wg, wu = _r(M, H), _r(I, H, scale=H**-0.5), _r(I, H, scale=H**-0.5)
    wp, wc = pack_gate_up(wg, wu), torch.cat([wg, wu])
    good = lambda: (packed(x, wp, layout="interleaved"), packed(x, wc, layout="concatenated"))  # noqa: E731
    return good, [
        ("odd_rows", lambda: packed(x, wp[:-1], layout="interleaved"),
         ("ValueError", r"w_packed must have an even number of rows \(2I\); got 9727 rows")),
        ("H_900", lambda: packed(_r(M, 900), _r(2 * I, 900), layout="interleaved"),
         ("ValueError", r"H must be a positive multiple of 8 for 16-byte TMA rows; got H=900")),
        ("I_4860_interleaved", lambda: packed(x, wp[:9720], layout="interleaved"),
         ("ValueError", r"I must be a multiple of 8.*got I=4860")),
        ("I_4860_concatenated", lambda: packed(x, wc[:9720], layout="concatenated"),
         ("ValueError", r"I must be a multiple of 8.*got I=4860")),
        ("x_H_differs", lambda: packed(_r(M, 904), wp, layout="interleaved"), ("ValueError", r"x must have shape")),
        ("no_layout", lambda: packed(x, wp), ("TypeError", r"layout")),
        ("unknown_layout", lambda: packed(x, wp, layout="stacked"), ("ValueError", r"layout must be one of")),
        ("fp16_weight", lambda: packed(x, wp.half(), layout="interleaved"),
         ("TypeError", r"w_packed must have the same dtype as x")),
        ("weight_on_cpu", lambda: packed(x, wp.cpu(), layout="concatenated"),
         ("ValueError", r"w_packed must be on the same device as x")),
        ("w_packed_1d", lambda: packed(x, wp[0], layout="interleaved"), ("ValueError", r"w_packed must be 2-D \(2I, H\)")),
        ("misaligned_x", lambda: (packed(_misaligned(x), wp, layout="interleaved"),
                                  packed(_misaligned(x), wc, layout="concatenated")), (SAME, good)),
        ("row_slice_weight", lambda: (packed(x, _row_padded(wp), layout="interleaved"),
                                      packed(x, _row_padded(wc), layout="concatenated")), (SAME, good)),
    ]


def raw_ops():
    """The registered operators called directly: the C++ CUDA kernels' own checks (RuntimeError)."""
    from fused_swiglu import ops, pack_gate_up

    x, wg, wu = _r(M, H), _r(I, H, scale=H**-0.5), _r(I, H, scale=H**-0.5)
    wp = pack_gate_up(wg, wu)
    good = lambda: (ops.swiglu_dual(x, wg, wu, ""), ops.swiglu_packed(x, wp, ""))  # noqa: E731
    return good, [
        ("x_1d", lambda: ops.swiglu_dual(x[0], wg, wu, ""), ("RuntimeError", r"swiglu_dual: x must be 2-D \(M, H\); got 1-D")),
        ("H_900", lambda: ops.swiglu_dual(_r(M, 900), _r(I, 900), _r(I, 900), ""),
         ("RuntimeError", r"swiglu_dual: H must be a positive multiple of 8 for 16-byte TMA rows; got H=900")),
        ("I_4860", lambda: ops.swiglu_dual(x, wg[:4860], wu[:4860], ""),
         ("RuntimeError", r"swiglu_dual: I must be a multiple of 8 for 16-byte TMA rows; got I=4860")),
        ("x_H_differs", lambda: ops.swiglu_dual(_r(M, 904), wg, wu, ""),
         ("RuntimeError", r"x must be \(M, H\) with H = w_gate.shape\[1\] = 896; got H=904")),
        ("w_up_other_shape", lambda: ops.swiglu_dual(x, wg, wu[:8], ""),
         ("RuntimeError", r"w_gate and w_up must have the same shape \(I, H\)")),
        ("fp32", lambda: ops.swiglu_dual(x.float(), wg.float(), wu.float(), ""),
         ("RuntimeError", r"x must be torch.bfloat16 or torch.float16 on CUDA")),
        ("mixed_dtypes", lambda: ops.swiglu_dual(x, wg.half(), wu, ""), ("RuntimeError", r"w_gate must have x's dtype")),
        ("w_up_on_cpu", lambda: ops.swiglu_dual(x, wg, wu.cpu(), ""), ("RuntimeError", r"w_up must be a CUDA tensor")),
        ("packed_odd_rows", lambda: ops.swiglu_packed(x, wp[:-1], ""),
         ("RuntimeError", r"w_packed must have an even number of rows \(2I\); got 9727")),
        ("packed_H_900", lambda: ops.swiglu_packed(_r(M, 900), _r(2 * I, 900), ""),
         ("RuntimeError", r"swiglu_packed: H must be a positive multiple of 8.*got H=900")),
        ("unknown_config", lambda: ops.swiglu_dual(x, wg, wu, "no_such_config"), ("RuntimeError", r"no_such_config")),
        ("misaligned_x", lambda: (ops.swiglu_dual(_misaligned(x), wg, wu, ""), ops.swiglu_packed(_misaligned(x), wp, "")),
         (SAME, good)),
        ("transposed_weights", lambda: (ops.swiglu_dual(x, _transposed(wg), _transposed(wu), ""),
                                        ops.swiglu_packed(x, _transposed(wp), "")), (SAME, good)),
    ]


def training():
    """swiglu_mlp / swiglu_mlp_packed under autograd (the store forward and the dSwiGLU backward), and
    the training operators called directly."""
    from fused_swiglu import mlp_ops, pack_gate_up, swiglu_mlp, swiglu_mlp_packed

    x, wg, wu, wd = _r(M, H), _r(I, H, scale=H**-0.5), _r(I, H, scale=H**-0.5), _r(H, I, scale=I**-0.5)
    wp = pack_gate_up(wg, wu)
    for t in (x, wg, wu, wd, wp):
        t.requires_grad_()

    def step(fn, *args, **kw):
        z = fn(*args, **kw)
        grads = torch.autograd.grad(z.float().square().sum(),
                                    [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad])
        return (z, *grads)

    good = lambda: (step(swiglu_mlp, x, wg, wu, wd), step(swiglu_mlp_packed, x, wp, wd, layout="interleaved"))  # noqa: E731
    gu = torch.zeros(M, 2 * I, device="cuda", dtype=torch.bfloat16)
    return good, [
        ("w_down_shape", lambda: step(swiglu_mlp, x, wg, wu, wd[:, :4856]), ("ValueError", r"w_down must be 2-D \(H, I\)")),
        ("w_down_fp16", lambda: step(swiglu_mlp, x, wg, wu, wd.detach().half()),
         ("TypeError", r"w_down must have the same dtype as x")),
        ("w_down_on_cpu", lambda: step(swiglu_mlp, x, wg, wu, wd.detach().cpu()),
         ("ValueError", r"w_down must be on the same device as x")),
        ("I_4860", lambda: step(swiglu_mlp, x, wg[:4860], wu[:4860], wd[:, :4860]),
         ("ValueError", r"I must be a multiple of 8.*got I=4860")),
        ("H_900", lambda: step(swiglu_mlp, _r(M, 900).requires_grad_(), _r(I, 900), _r(I, 900), _r(900, I)),
         ("ValueError", r"H must be a positive multiple of 8.*got H=900")),
        ("packed_odd_rows", lambda: step(swiglu_mlp_packed, x, wp[:-1], wd, layout="interleaved"),
         ("ValueError", r"w_packed must have an even number of rows")),
        ("recompute_not_bool", lambda: step(swiglu_mlp, x, wg, wu, wd, recompute="yes"),
         ("TypeError", r"recompute must be a bool")),
        ("op_w_down_shape", lambda: mlp_ops.mlp_forward(x.detach(), wg.detach(), wu.detach(), wd.detach()[:, :4856]),
         ("ValueError", r"mlp_forward: w_down must be 2-D \(896, 4864\)")),
        ("op_I_4860", lambda: mlp_ops.mlp_forward(x.detach(), wg.detach()[:4860], wu.detach()[:4860],
                                                  wd.detach()[:, :4860]),
         ("ValueError", r"mlp_forward: H and I must be multiples of 8 \(H > 0\) for 16-byte TMA rows; got H=896, I=4860")),
        ("op_fp32", lambda: mlp_ops.mlp_forward(x.detach().float(), wg.detach().float(), wu.detach().float(),
                                                wd.detach().float()),
         ("TypeError", r"mlp_forward: the CUDA kernels take torch.bfloat16 or torch.float16")),
        ("op_packed_rows", lambda: mlp_ops.mlp_forward_packed(x.detach(), wp.detach()[:64], wd.detach(), "interleaved"),
         ("ValueError", r"mlp_forward_packed: w_packed must be 2-D \(9728, 896\)")),
        ("op_dswiglu_gu", lambda: mlp_ops.dswiglu(x.detach(), wd.detach(), gu[:, :64]),
         ("RuntimeError", r"dswiglu: gu must be \(M, 2I\) = \(33, 9728\); got gu of shape \(33, 64\)")),
        ("op_dswiglu_w_down_on_cpu", lambda: mlp_ops.dswiglu(x.detach(), wd.detach().cpu(), gu),
         ("RuntimeError", r"dswiglu: w_down must be a CUDA tensor")),
        ("misaligned_x", lambda: swiglu_mlp(_misaligned(x.detach()).requires_grad_(), wg, wu, wd),
         (SAME, lambda: swiglu_mlp(x, wg, wu, wd))),
    ]


def fp8_ops():
    from fused_swiglu import fp8

    x = _r(M, H, dtype=torch.float32)
    xq, xs = fp8.quantize_e4m3(x, per_row=True)
    gq, gs = fp8.quantize_e4m3(_r(I, H, dtype=torch.float32, scale=H**-0.5), per_row=True)
    uq, us = fp8.quantize_e4m3(_r(I, H, dtype=torch.float32, scale=H**-0.5), per_row=True)
    wp, ws = fp8.pack_weights(gq, uq, gs, us)
    xg, xgs = fp8.quantize_e4m3_groups(x.to(torch.bfloat16), column_major_scales=True)
    gb, gbs = fp8.quantize_e4m3_blocks(_r(I, H, dtype=torch.float32, scale=H**-0.5))
    ub, ubs = fp8.quantize_e4m3_blocks(_r(I, H, dtype=torch.float32, scale=H**-0.5))
    wb, wbs = fp8.pack_weights_blockwise(gb, ub, gbs, ubs)
    xb = x.to(torch.bfloat16)
    x904 = fp8.quantize_e4m3(_r(M, 904, dtype=torch.float32), per_row=True)[0]
    w904 = fp8.quantize_e4m3(_r(2 * I, 904, dtype=torch.float32), per_row=True)[0]

    def good():
        return (fp8.swiglu_packed_fp8(xq, wp, xs, ws), fp8.swiglu_packed_fp8(xq, wp, xs, ws, out_dtype=fp8.E4M3),
                fp8.swiglu_packed_fp8(xg, wb, xgs, wbs, scaling="block"), fp8.swiglu_fp8(xq, gq, uq, xs, gs, us),
                fp8.swiglu_packed_fp8_dynamic(xb, wb, wbs), fp8.quantize_e4m3_groups(xb))

    return good, [
        ("x_bf16", lambda: fp8.swiglu_packed_fp8(xb, wp, xs, ws), ("TypeError", r"x must be torch.float8_e4m3fn")),
        ("x_scale_fp16", lambda: fp8.swiglu_packed_fp8(xq, wp, xs.half(), ws), ("TypeError", r"x_scale must be torch.float32")),
        ("x_scale_shape", lambda: fp8.swiglu_packed_fp8(xq, wp, xs[:-1], ws), ("ValueError", r"x_scale must have shape")),
        ("w_scale_on_cpu", lambda: fp8.swiglu_packed_fp8(xq, wp, xs, ws.cpu()),
         ("ValueError", r"w_scale must be on x's device")),
        ("H_904", lambda: fp8.swiglu_packed_fp8(x904, w904, xs, ws),
         ("ValueError", r"H \(x.shape\[1\]\) must be a positive multiple of 16")),
        ("w_packed_H_differs", lambda: fp8.swiglu_packed_fp8(xq, wp[:, :880], xs, ws),
         ("ValueError", r"w_packed must have x's H=896 columns")),
        ("w_packed_odd_rows", lambda: fp8.swiglu_packed_fp8(xq, wp[:-1], xs, ws), ("ValueError", r"w_packed must have 2I rows")),
        ("e4m3_out_scale_two_values", lambda: fp8.swiglu_packed_fp8(xq, wp, xs, ws, out_dtype=fp8.E4M3,
                                                                    out_scale=torch.ones(2, device="cuda")),
         ("ValueError", r"out_scale must be one fp32 value of shape \(1,\)")),
        ("e4m3_out_promoted", lambda: fp8.swiglu_packed_fp8(xq, wp, xs, ws, out_dtype=fp8.E4M3, accumulation="promoted"),
         ("ValueError", r"e4m3 y is computed with accumulation='fast' only")),
        ("block_x_scale_shape", lambda: fp8.swiglu_packed_fp8(xg, wb, xgs[:, :1], wbs, scaling="block"),
         ("ValueError", r"x_scale must have shape")),
        ("block_w_scale_fp16", lambda: fp8.swiglu_packed_fp8(xg, wb, xgs, wbs.half(), scaling="block"),
         ("TypeError", r"w_scale must be torch.float32")),
        ("dual_scale_kinds", lambda: fp8.swiglu_fp8(xq, gq, uq, xs, gs[:1], us),
         ("ValueError", r"gate_scale and up_scale must be of one kind")),
        ("dual_w_up_rows", lambda: fp8.swiglu_fp8(xq, gq, uq[:8], xs, gs, us), ("ValueError", r"w_up must have w_gate's I=4864 rows")),
        ("dual_I_4860", lambda: fp8.swiglu_fp8(xq, gq[:4860], uq[:4860], xs, gs[:4860], us[:4860]),
         ("ValueError", r"I \(w_gate.shape\[0\]\) must be a positive multiple of 8")),
        ("dynamic_x_fp32", lambda: fp8.swiglu_packed_fp8_dynamic(x, wb, wbs),
         ("TypeError", r"x must be torch.bfloat16 or torch.float16")),
        ("dynamic_w_scale_shape", lambda: fp8.swiglu_packed_fp8_dynamic(xb, wb, wbs[:-1]), ("ValueError", r"w_scale must have shape")),
        ("quantize_groups_1d", lambda: fp8.quantize_e4m3_groups(xb[0]), ("ValueError", r"must be 2-D")),
        # the operators called directly: their C++ CUDA kernels' own checks
        ("op_packed_x_bf16", lambda: fp8.swiglu_packed_fp8_op(xb, wp, xs, ws, None, "row", False, ""),
         ("RuntimeError", r"swiglu_packed_fp8: x must be torch.float8_e4m3fn")),
        ("op_packed_scaling", lambda: fp8.swiglu_packed_fp8_op(xq, wp, xs, ws, None, "tile", False, ""),
         ("RuntimeError", r"swiglu_packed_fp8: scaling must be 'row' or 'block'; got 'tile'")),
        ("op_packed_no_x_scale_row", lambda: fp8.swiglu_packed_fp8_op(xb, wp, None, ws, None, "row", False, ""),
         ("RuntimeError", r"swiglu_packed_fp8: x_scale may be None only with scaling='block'")),
        ("op_packed_w_scale_on_cpu", lambda: fp8.swiglu_packed_fp8_op(xq, wp, xs, ws.cpu(), None, "row", False, ""),
         ("RuntimeError", r"swiglu_packed_fp8: w_scale must be a CUDA tensor")),
        ("op_packed_block_x_scale_shape", lambda: fp8.swiglu_packed_fp8_op(xg, wb, xgs[:, :1], wbs, None, "block",
                                                                          False, ""),
         ("RuntimeError", r"swiglu_packed_fp8: x_scale must have shape \(33, 7\)")),
        ("op_packed_e4m3_out_scale_two", lambda: fp8.swiglu_packed_fp8_op(xq, wp, xs, ws, torch.ones(2, device="cuda"),
                                                                         "row", True, ""),
         ("RuntimeError", r"swiglu_packed_fp8: out_scale must be one value of shape \(1,\)")),
        ("op_packed_config", lambda: fp8.swiglu_packed_fp8_op(xq, wp, xs, ws, None, "row", False, "nope"),
         ("RuntimeError", r"config must be '', 'promoted' or one of")),
        ("op_dual_up_scale_shape", lambda: fp8.swiglu_dual_fp8_op(xq, gq, uq, xs, gs, us[:5], ""),
         ("RuntimeError", r"swiglu_dual_fp8: up_scale must have shape \(1,\) \(per tensor\) or \(4864,\)")),
        ("op_quantize_fp32", lambda: fp8.quantize_e4m3_groups_op(x, False),
         ("RuntimeError", r"quantize_e4m3_groups: t must be torch.bfloat16 or torch.float16")),
        ("misaligned_x", lambda: fp8.swiglu_packed_fp8(_misaligned(xq.view(torch.uint8)).view(fp8.E4M3), wp, xs, ws),
         (SAME, lambda: fp8.swiglu_packed_fp8(xq, wp, xs, ws))),
    ]


def tensor_parallel():
    """The tensor-parallel MLP as the only rank of a one-GPU NCCL group."""
    import torch.distributed as dist

    from fused_swiglu.parallel import TensorParallelSwiGLUMLP

    dist.init_process_group("nccl", init_method=f"file://{os.environ['FSW_TP_INIT']}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    x, wg, wu, wd = _r(M, H), _r(I, H, scale=H**-0.5), _r(I, H, scale=H**-0.5), _r(H, I, scale=I**-0.5)
    dual = TensorParallelSwiGLUMLP.from_full(wg, wu, wd)
    packed = TensorParallelSwiGLUMLP.from_full(wg, wu, wd, kernel="packed")
    good = lambda: (dual(x), packed(x))  # noqa: E731
    return good, [
        ("x_H_differs", lambda: dual(_r(M, 904)), ("ValueError", r"x must have shape \(\.\.\., H\)")),
        ("x_fp32", lambda: dual(x.float()), ("TypeError", r"must have the same dtype|must be torch.bfloat16")),
        ("x_on_cpu", lambda: packed(x.cpu()), ("ValueError", r"must be on the same device")),
        ("shards_disagree", lambda: TensorParallelSwiGLUMLP(wd, wg[:8], wu[:8]), ("ValueError", r"w_gate must be \(4864, 896\)")),
        ("I_4860", lambda: TensorParallelSwiGLUMLP.from_full(wg[:4860], wu[:4860], wd[:, :4860])(x),
         ("ValueError", r"I must be a multiple of 8")),
    ]


def patched_model():
    """A block patched by fuse_swiglu_mlps, called with input it cannot take."""
    from torch import nn

    from fused_swiglu import fuse_swiglu_mlps

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj, self.up_proj = (nn.Linear(H, I, bias=False, dtype=torch.bfloat16) for _ in range(2))
            self.down_proj = nn.Linear(I, H, bias=False, dtype=torch.bfloat16)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    mlp = Mlp().cuda()
    assert fuse_swiglu_mlps(mlp) == ["(the model itself)"]
    x = _r(M, H)
    good = lambda: mlp(x)  # noqa: E731
    return good, [
        ("x_H_differs", lambda: mlp(_r(M, 904)), ("ValueError", r"x must have shape \(\.\.\., H\) with H = w_gate.shape\[1\]; got x \(33, 904\)")),
        ("x_H_differs_no_grad", lambda: _no_grad(mlp, _r(M, 904)),
         ("ValueError", r"x must have shape \(\.\.\., H\) with H = w_gate.shape\[1\]; got x \(33, 904\)")),
        ("x_fp32", lambda: mlp(x.float()), ("RuntimeError", r"dtype|same type|BFloat16")),
        ("x_on_cpu", lambda: mlp(x.cpu()), ("RuntimeError", r"device|cpu|CPU")),
        ("misaligned_x", lambda: mlp(_misaligned(x)), (SAME, good)),
    ]


CASES = {f.__name__: f for f in (swiglu_dual, swiglu_packed, raw_ops, training, fp8_ops, tensor_parallel, patched_model)}


def _same(a, b) -> bool:
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(p, q) for p, q in zip(a, b))
    if a.dtype == torch.float8_e4m3fn:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return a.shape == b.shape and torch.equal(a, b)


def main(family: str) -> None:
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    good, cases = CASES[family]()
    want = good()
    torch.cuda.synchronize()
    for name, call, expected in cases:
        print(json.dumps({"case": name, "started": True}), flush=True)
        result = {"case": name, "expected": [SAME] if expected[0] == SAME else list(expected), "error": None,
                  "message": ""}
        try:
            got = call()
            torch.cuda.synchronize()
            if expected[0] == SAME:
                result["message"] = "same result" if _same(got, expected[1]()) else "different result"
        except Exception as e:  # noqa: BLE001 - every error is reported to the test
            result["error"], result["message"] = type(e).__name__, str(e)
        again = good()  # a good call after the bad one still works and gives the same answer
        torch.cuda.synchronize()
        result["good_after"] = _same(again, want)
        print(json.dumps(result), flush=True)
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
