"""The operator library's launch plans, answered by the config choice: on a plan-cache miss the C++
side calls :data:`PLAN` (bound by :func:`fused_swiglu._lib.load_torch_ops`) with the problem, and
gets the config's index in the kernel library and its rasterisation and swizzle. With
``FUSED_SWIGLU_LOG_PLANS=1`` each plan is printed to stderr with the reason for it."""

from __future__ import annotations

import ctypes
import sys

from . import _lib, configs, env


# The C++ side's plan kinds (csrc/torch/launch.hpp, PlanKind): the first three fsw_kernel_kind values, the
# store variants of the training forward, which run as packed / dual configs that also write g and u, the
# e4m3 families (configs.FP8_KERNELS) and the grouped kernel (configs.grouped.GROUPED_KERNELS).
PLAN_KINDS = {0: _lib.KERNEL_NAMES[0], 1: _lib.KERNEL_NAMES[1], 2: _lib.KERNEL_NAMES[2], 3: "packed_store",
              4: "dual_store", 5: "packed_fp8", 6: "packed_fp8_e4m3out", 7: "packed_fp8_block", 8: "dual_fp8",
              9: "grouped_dual"}


def plan_callback(kind, config, m, n, k, tile, dtype, device, index, raster, swizzle, message, size) -> int:
    """The plan for one problem (kind: a key of :data:`PLAN_KINDS`; config: the ops' ``config`` argument; n = I,
    k = H; tile: a grouped problem's token tile, 0 otherwise; dtype: fsw_dtype; device: the CUDA device index,
    whose :func:`fused_swiglu._lib.target` the choice takes), written to ``index``, ``raster`` and ``swizzle``.
    Returns 0, or 1 with the exception's type and text written into ``message`` (``size`` bytes,
    NUL-terminated)."""
    try:
        num_sms, gpu, smem_limit = _lib.target(device)
        kernel, torch_dtype, config = PLAN_KINDS[kind], _lib.TORCH_DTYPES[dtype], config.decode()
        choice = configs.resolve(kernel, config, m, n, k, torch_dtype, num_sms, gpu, smem_limit, token_tile=tile)
        if env.log_plans():
            try:
                _, why = configs.explain(kernel, config, m, n, k, torch_dtype, num_sms, gpu, smem_limit,
                                         token_tile=tile)
            except Exception as e:  # noqa: BLE001 (the log line never fails a launch)
                why = f"no reason given ({type(e).__name__}: {e})"
            tiled = f" token tile {tile}" if tile else ""
            print(f"fused_swiglu plan: {kernel} M={m}{tiled} I={n} H={k} {_lib.DTYPE_NAMES[dtype]} on {gpu or 'a GPU'} "
                  f"({num_sms} SMs): {choice.name} raster {choice.raster} swizzle {choice.swizzle}; {why}",
                  file=sys.stderr, flush=True)
        index[0], raster[0], swizzle[0] = _lib.library().ensure(choice.name), choice.raster, choice.swizzle
        return 0
    except BaseException as e:  # noqa: BLE001 (nothing may cross back into C++)
        text = f"{type(e).__name__}: {e}".encode(errors="replace")[: max(size - 1, 0)]
        ctypes.memmove(message, text + b"\0", len(text) + 1)
        return 1


PLAN = _lib.PLAN_FN(plan_callback)  # kept alive for the process: the C++ side holds its address
