"""Which e4m3 config serves a problem: by M, for each family (row scaling with bf16 y, e4m3 y, block
scaling, the dual kernel). The configs are catalog.FP8_CONFIGS, FP8_OUT_CONFIGS, FP8_BLOCKWISE_CONFIGS
and FP8_DUAL_CONFIGS; the rules follow the measurements in docs/fp8.md."""

from __future__ import annotations

from .. import catalog
from .._validate import check_choice

ACCUMULATIONS = ("fast", "promoted")
SCALINGS = ("row", "block")
CONFIG_NAMES = tuple(catalog.fp8_names())
OUT_CONFIG_NAMES = tuple(catalog.fp8_out_names())
BLOCKWISE_CONFIG_NAMES = tuple(catalog.fp8_blockwise_names())
DUAL_CONFIG_NAMES = tuple(catalog.fp8_dual_names())


def choose_config(M: int, accumulation: str = "fast") -> str:
    """The e4m3 config for M tokens: up to 16 tokens the swap-AB form (64 weight rows by 16 tokens, the
    most CTAs streaming the weights), up to 128 tokens 64 x 128 tiles, then 128 x 192 tiles (fast:
    Pingpong, with a 2 x 1 cluster where the 128-token tiles come in pairs; promoted: Cooperative, whose
    two warpgroups hold 64 x 192 each beside the second accumulator)."""
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    promote = 1 if accumulation == "promoted" else 0
    if M <= 16:
        return catalog.name_of("packed_fp8_swapab", "pingpong", 64, 16, 128, 1, 1, promote, "e4m3")
    if M <= 128:
        return catalog.name_of("packed_fp8", "pingpong", 64, 128, 128, 1, 1, promote, "e4m3")
    if promote:
        return catalog.name_of("packed_fp8", "cooperative", 128, 192, 128, 2, 1, 1, "e4m3")
    cluster_m = 2 if -(-M // 128) % 2 == 0 else 1
    return catalog.name_of("packed_fp8", "pingpong", 128, 192, 128, cluster_m, 1, 0, "e4m3")


def choose_out_config(M: int) -> str:
    """The e4m3-output config for M tokens (every tile spans a 128-column output group: 256 accumulator
    columns): up to 2048 tokens 64 x 256 Pingpong tiles, then 128 x 256 Cooperative tiles with a 2 x 1
    cluster."""
    if M <= 2048:
        return catalog.name_of("packed_fp8", "pingpong", 64, 256, 128, 1, 1, 0, "e4m3_e4m3out")
    return catalog.name_of("packed_fp8", "cooperative", 128, 256, 128, 2, 1, 0, "e4m3_e4m3out")


def choose_blockwise_config(M: int) -> str:
    """The block-scaled config for M tokens: 64 x 128 Pingpong tiles up to 128 tokens, then 128 x 192
    Cooperative tiles with a 2 x 1 cluster (its two warpgroups hold 64 x 192 each beside the partial
    accumulator)."""
    if M <= 128:
        return catalog.name_of("packed_fp8_blockwise", "pingpong", 64, 128, 128, 1, 1, 0, "e4m3")
    return catalog.name_of("packed_fp8_blockwise", "cooperative", 128, 192, 128, 2, 1, 0, "e4m3")


def choose_dual_config(M: int) -> str:
    """The dual-kernel e4m3 config for M tokens (fast accumulation, bf16 y), as the packed family's rule:
    up to 16 tokens the swap-AB form (64 gate + 64 up weight rows by 16 tokens), up to 128 tokens 64 x 128
    tiles, then 128 x 128 Pingpong tiles with a 2 x 1 cluster (the widest 128-token tile whose full-width
    epilogue subtile fits the registers beside the accumulators)."""
    if M <= 16:
        return catalog.name_of("dual_fp8_swapab", "pingpong", 128, 16, 128, 1, 1, 0, "e4m3")
    if M <= 128:
        return catalog.name_of("dual_fp8", "pingpong", 64, 128, 128, 1, 1, 0, "e4m3")
    return catalog.name_of("dual_fp8", "pingpong", 128, 128, 128, 2, 1, 0, "e4m3")


def _in_family(config: str, names: tuple[str, ...], family: str) -> str:
    """``config`` if it is one of ``names``; else a ValueError naming the family's configs."""
    if config not in names:
        raise ValueError(f"config must be '' or one of {', '.join(names)} {family}; got config={config!r}")
    return config


def resolve(config: str, M: int, e4m3_out: bool = False, block: bool = False, dual: bool = False) -> str:
    """The config name an operator's ``config`` argument stands for at M tokens ("" or an accumulation:
    the choice by M; else a name of the family, checked, optionally with its launch as
    ``<name>@<raster>:<swizzle>``, :func:`fused_swiglu.catalog.split_config`). ``dual``: the dual kernel's
    family (fast only).

    Raises:
        TypeError: config not a str.
        ValueError: a name outside the family, or a bad launch.
    """
    name, launch = catalog.split_config(config)
    if launch is not None:
        return resolve(name, M, e4m3_out, block, dual)
    if dual:
        return choose_dual_config(M) if config in ("", "fast") else _in_family(
            config, DUAL_CONFIG_NAMES, "for the dual e4m3 kernel (fast accumulation only)")
    if block:
        return choose_blockwise_config(M) if config in ("", "fast", "promoted") else _in_family(
            config, BLOCKWISE_CONFIG_NAMES, "for block scaling")
    if e4m3_out:
        return choose_out_config(M) if config in ("", "fast") else _in_family(
            config, OUT_CONFIG_NAMES, "for e4m3 y (fast accumulation only)")
    if config in ("", "fast", "promoted"):
        return choose_config(M, config or "fast")
    if config not in CONFIG_NAMES:
        raise ValueError(f"config must be '', 'promoted' or one of {', '.join(CONFIG_NAMES)}; got config={config!r}")
    return config
