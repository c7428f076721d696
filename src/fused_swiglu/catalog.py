"""The kernel configurations the library compiles: one list for the C++ instantiations and Python.

``csrc/instantiations/generate.py`` writes one translation unit per entry and dtype from
:data:`CONFIGS`, and :mod:`fused_swiglu.configs` chooses among the same entries, so a config exists
on both sides or on neither. This module imports nothing from the package (generate.py loads it by
path, without torch).

An entry is ``(kernel, schedule, tile_m, tile_n, tile_k, cluster_m, cluster_n, promote)``:

* kernel: ``packed`` (the packed kernel: one GEMM over interleaved gate/up weight rows, SwiGLU epilogue),
  ``dual`` (the dual kernel: two GEMMs sharing the x tile), or their swap-AB forms ``packed_swapab`` /
  ``dual_swapab`` (weights as GMMA's A operand, tokens as B: decode sizes); ``dual_paired`` (the dual kernel
  with the packed kernel's accumulator layout, its weights' rows paired in shared memory); ``*_fp8*``: their
  e4m3 forms;
  ``grouped_dual_swapab``: the dual swap-AB kernel batched over the experts of a mixture-of-experts layer.
* schedule: ``pingpong`` (two consumer warpgroups on alternate tiles, one owning a whole tile) or
  ``cooperative`` (two warpgroups split one tile along M).
* tile_m, tile_n, tile_k: the CTA TileShape in elements; tile_n counts gate + up accumulator
  columns (swap-AB: tile_m counts them and tile_n counts tokens).
* cluster_m, cluster_n: the ClusterShape in CTAs (TMA multicast of the shared operand).
* promote: 0 = GMMA accumulates all of K in its fp32 accumulators ("fast"); p > 0 = GMMA
  accumulates p k-tiles at a time and each partial sum is added into a second fp32 accumulator
  ("promoted").
"""

from __future__ import annotations

import re

DTYPES = ("bf16", "fp16")

CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    # fast accumulation
    ("packed", "pingpong", 64, 64, 64, 1, 1, 0),     # the most CTAs streaming the weights at small M
    ("packed", "pingpong", 64, 128, 64, 1, 1, 0),
    ("packed", "pingpong", 128, 128, 64, 2, 1, 0),
    ("packed", "pingpong", 128, 128, 64, 1, 2, 0),   # odd token-tile counts (no 2x1 cluster there)
    ("packed", "pingpong", 128, 192, 64, 2, 1, 0),   # large M
    ("packed", "pingpong", 64, 192, 64, 1, 1, 0),    # 64-token tiles where a 128-token tile would be half empty
    ("packed", "pingpong", 128, 96, 64, 1, 1, 0),    # 2I / 96 tiles fill a last wave that 2I / 128 leaves idle
    ("packed", "pingpong", 128, 160, 64, 2, 1, 0),   # one GMMA of N = 160
    # no cluster: odd token-tile counts (M = 333, 6000) beside odd weight-tile counts, where neither a
    # 2x1 nor a 1x2 cluster is filled
    ("packed", "pingpong", 128, 128, 64, 1, 1, 0),
    ("packed", "pingpong", 128, 160, 64, 1, 1, 0),
    ("packed", "pingpong", 128, 192, 64, 1, 1, 0),
    ("dual", "pingpong", 64, 64, 64, 1, 1, 0),
    ("dual", "pingpong", 64, 128, 64, 1, 1, 0),
    ("dual", "pingpong", 128, 128, 64, 2, 1, 0),
    ("dual", "pingpong", 128, 128, 64, 1, 2, 0),
    ("dual", "pingpong", 128, 96, 64, 1, 1, 0),      # gate 48 + up 48 columns
    ("dual", "pingpong", 128, 160, 64, 2, 1, 0),     # gate 80 + up 80 columns
    ("dual", "pingpong", 128, 128, 64, 1, 1, 0),     # no cluster (as packed above)
    ("dual", "pingpong", 128, 160, 64, 1, 1, 0),
    ("dual", "pingpong", 64, 192, 64, 1, 1, 0),
    # (dual 128x192 Pingpong is left out: its (64, 192) epilogue subtile beside 192 accumulators per
    # thread spills registers)
    ("packed_swapab", "pingpong", 128, 16, 64, 1, 1, 0),  # 128 weight rows x 16 tokens
    ("dual_swapab", "pingpong", 128, 16, 64, 1, 1, 0),
    # 112-token tiles: a token granularity the 64- and 128-row tiles lack (M = 333: 3 tiles 99 % full,
    # where 128-row tiles are 87 % full)
    ("packed_swapab", "pingpong", 128, 112, 64, 1, 1, 0),
    ("dual_swapab", "pingpong", 128, 112, 64, 1, 1, 0),
    # promoted accumulation: the partial-sum fragment doubles the accumulator registers, so a
    # warpgroup's share of a tile is at most 64 x 192
    ("packed", "pingpong", 64, 128, 64, 1, 1, 4),
    ("packed", "cooperative", 128, 192, 64, 2, 1, 4),
    ("dual", "pingpong", 64, 128, 64, 1, 1, 4),
    ("dual", "cooperative", 128, 128, 64, 2, 1, 4),
    ("packed_swapab", "pingpong", 128, 16, 64, 1, 1, 4),
    ("dual_swapab", "pingpong", 128, 16, 64, 1, 1, 4),
    # two warpgroups on one 256-token tile (128 rows each, the share of a 128-row Pingpong tile): each weight
    # k-tile feeds twice the tokens, so less operand traffic per multiply-add, which is what the clock follows
    # at the power cap (docs/perf-notes.md)
    ("packed", "cooperative", 256, 192, 64, 2, 1, 0),
    ("dual", "cooperative", 256, 128, 64, 2, 1, 0),
)


# The paired dual kernel (``dual_paired``): W_gate and W_up as stored, loaded into alternating groups of 8 rows of
# the weights' stage, so that it takes the packed kernel's accumulator layout and epilogue (kernel/
# sm90_gemm_swiglu_dual.hpp); that lets the dual kernel run the packed kernel's 128 x 192 tile, whose halves
# layout spills. Reached by name (config=, kernel="dual") until measured: the choice's candidates are CONFIGS.
DUAL_PAIRED_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("dual_paired", "pingpong", 128, 192, 64, 1, 1, 0),
    ("dual_paired", "cooperative", 256, 192, 64, 1, 1, 0),  # the dense packed tile that outran cuBLAS (2 x 1 there)
)


# The training kernels (fused_swiglu.mlp_ops): the forward that also writes the gate and up
# pre-activations (``packed_store`` / ``dual_store``), and the backward's GEMM through the down
# projection with the dSwiGLU epilogue (``dswiglu``: dY = dZ @ W_down; tile_n counts output columns).
# The inference choice never picks them; configs.training_choice does, by H.
TRAINING_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("packed_store", "pingpong", 128, 128, 64, 2, 1, 0),
    ("dual_store", "pingpong", 128, 128, 64, 2, 1, 0),
    ("dswiglu", "pingpong", 128, 128, 64, 1, 1, 0),
    ("packed_store", "pingpong", 128, 192, 64, 1, 1, 0),
    ("dual_store", "pingpong", 128, 128, 64, 1, 1, 0),
)


# The e4m3 kernels (fused_swiglu.fp8): x and the packed weights in float8_e4m3fn with fp32 dequantization
# scales (per tensor, per token, per weight row), y in bfloat16. Built in FP8_DTYPES only; their k-tile
# is 128 (128 bytes, as the 16-bit kernels' 64). fused_swiglu.fp8 chooses among them by M.
FP8_DTYPES = ("e4m3",)

FP8_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("packed_fp8", "pingpong", 128, 192, 128, 2, 1, 0),   # large M
    ("packed_fp8", "pingpong", 128, 192, 128, 1, 1, 0),   # large M, odd token-tile counts
    ("packed_fp8", "pingpong", 64, 128, 128, 1, 1, 0),    # middle M: the most CTAs streaming the weights
    ("packed_fp8_swapab", "pingpong", 64, 16, 128, 1, 1, 0),   # decode: 64 weight rows x 16 tokens
    # accumulation="promoted": a second fp32 accumulator, so at most 64 x 192 per warpgroup
    ("packed_fp8", "pingpong", 64, 128, 128, 1, 1, 1),
    ("packed_fp8", "cooperative", 128, 192, 128, 2, 1, 1),
    ("packed_fp8_swapab", "pingpong", 64, 16, 128, 1, 1, 1),
)


# e4m3 inputs with e4m3 output (fused_swiglu.fp8, out_dtype=float8_e4m3fn): the epilogue quantizes y per
# 1 x 128 group of output columns (or with a static scale). A group's 128 outputs are 256 accumulator
# columns, so every tile is 256 wide; fast accumulation only (a second accumulator of 256 columns per
# warpgroup would exceed the register file).
FP8_OUT_DTYPES = ("e4m3_e4m3out",)

FP8_OUT_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("packed_fp8", "pingpong", 64, 256, 128, 1, 1, 0),
    ("packed_fp8", "cooperative", 128, 256, 128, 2, 1, 0),
)


# e4m3 inputs with block scaling (fused_swiglu.fp8, scaling="block"): one fp32 scale per 1 x 128 group of
# each token and per 128 x 128 block of each weight, applied per 128-deep k-tile in CUTLASS's blockwise-
# scaled FP8 mainloop (a partial accumulator beside the main one), y in bfloat16.
FP8_BLOCKWISE_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("packed_fp8_blockwise", "pingpong", 64, 128, 128, 1, 1, 0),
    ("packed_fp8_blockwise", "cooperative", 128, 192, 128, 2, 1, 0),
)


# The dual kernel in e4m3 (fused_swiglu.fp8.swiglu_fp8): x, W_gate and W_up in float8_e4m3fn as stored, fp32
# scales per tensor, token or output channel, y in bfloat16, fast accumulation. Its epilogue subtile spans
# the whole tile width (each gate column meets its up column), so a 128-token Pingpong tile is at most
# 128 x 128 (the 16-bit dual 128 x 192 already spills).
FP8_DUAL_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("dual_fp8", "pingpong", 128, 128, 128, 2, 1, 0),        # large M
    ("dual_fp8", "pingpong", 64, 128, 128, 1, 1, 0),         # middle M: the most CTAs streaming the weights
    ("dual_fp8_swapab", "pingpong", 128, 16, 128, 1, 1, 0),  # decode: 64 gate + 64 up rows x 16 tokens
)


# The grouped kernels (fused_swiglu.grouped): the experts of a mixture-of-experts layer, tokens sorted by expert
# and padded to whole token tiles, gate_up_proj [E, 2I, H] read in place. Built in DTYPES; chosen by
# configs.grouped.grouped_choice, never by the dense inference choice, whose token tile (tile_n) follows the routed
# rows per expert. The dual swap-AB kernel (128 weight rows: 64 gate, 64 up), fast accumulation, by 16, 64
# and 128 tokens: a token tile reads its expert's weights once, so fewer, wider tiles read them fewer times
# once the experts hold more rows; promoted accumulation by 16 tokens. The Cooperative 256-row weight tile (128
# gate, 128 up) by 128 tokens: both consumer warpgroups on one tile, as the dense dual Cooperative 256 x 128 tile
# that outran the 128 x 128 Pingpong one at large M (docs/perf-notes.md, entries 123 and 125); named only until
# measured.
GROUPED_CONFIGS: tuple[tuple[str, str, int, int, int, int, int, int], ...] = (
    ("grouped_dual_swapab", "pingpong", 128, 16, 64, 1, 1, 0),
    ("grouped_dual_swapab", "pingpong", 128, 64, 64, 1, 1, 0),
    ("grouped_dual_swapab", "pingpong", 128, 128, 64, 1, 1, 0),
    ("grouped_dual_swapab", "cooperative", 256, 128, 64, 1, 1, 0),
    # accumulation="promoted" (a second fp32 accumulator, 4 k-tiles per promotion), as the dense dual swap-AB
    # kernel's: 16-token tiles only
    ("grouped_dual_swapab", "pingpong", 128, 16, 64, 1, 1, 4),
)


def name_of(kernel: str, schedule: str, tile_m: int, tile_n: int, tile_k: int, cluster_m: int, cluster_n: int,
            promote: int, dtype: str) -> str:
    """The library's name of one entry in ``dtype`` ("bf16", "fp16", "e4m3" or "e4m3_e4m3out"), e.g.
    ``packed_pingpong_128x192x64_2x1_bf16``."""
    acc = f"_promote{promote}" if promote else ""
    return f"{kernel}_{schedule}_{tile_m}x{tile_n}x{tile_k}_{cluster_m}x{cluster_n}{acc}_{dtype}"


def entry_names(entries: tuple[tuple, ...], dtypes: tuple[str, ...]) -> list[str]:
    """The library's names of ``entries`` (tuples of the form of :data:`CONFIGS`'), entry by entry, each in
    ``dtypes`` in their order."""
    return [name_of(*entry, dtype) for entry in entries for dtype in dtypes]


def names() -> list[str]:
    """Every compiled config name, entry by entry, bf16 before fp16."""
    return entry_names(CONFIGS, DTYPES)


def dual_paired_names() -> list[str]:
    """Every compiled paired dual config name (:data:`DUAL_PAIRED_CONFIGS`), entry by entry, bf16 before fp16."""
    return entry_names(DUAL_PAIRED_CONFIGS, DTYPES)


def training_names() -> list[str]:
    """Every compiled training config name, entry by entry, bf16 before fp16."""
    return entry_names(TRAINING_CONFIGS, DTYPES)


def grouped_names() -> list[str]:
    """Every compiled grouped config name, entry by entry, bf16 before fp16."""
    return entry_names(GROUPED_CONFIGS, DTYPES)


def fp8_names() -> list[str]:
    """Every compiled e4m3 config name with bfloat16 output, entry by entry."""
    return entry_names(FP8_CONFIGS, FP8_DTYPES)


def fp8_blockwise_names() -> list[str]:
    """Every compiled block-scaled e4m3 config name, entry by entry."""
    return entry_names(FP8_BLOCKWISE_CONFIGS, FP8_DTYPES)


def fp8_dual_names() -> list[str]:
    """Every compiled dual-kernel e4m3 config name, entry by entry."""
    return entry_names(FP8_DUAL_CONFIGS, FP8_DTYPES)


def fp8_out_names() -> list[str]:
    """Every compiled e4m3 config name with e4m3 output, entry by entry."""
    return entry_names(FP8_OUT_CONFIGS, FP8_OUT_DTYPES)


# The families chosen by one size band each (fused_swiglu.configs.family_choice): the e4m3 kernels by the
# token count M, the training kernels by the hidden size H. family -> (the size, its entries, the dtype
# suffix its names carry in tuned data: the e4m3 one, or none for the 16-bit training kernels, whose tuned
# file names the dtype).
BANDED_FAMILIES: dict[str, tuple[str, tuple[tuple, ...], str]] = {
    "packed_fp8": ("M", FP8_CONFIGS, FP8_DTYPES[0]),
    "packed_fp8_e4m3out": ("M", FP8_OUT_CONFIGS, FP8_OUT_DTYPES[0]),
    "packed_fp8_block": ("M", FP8_BLOCKWISE_CONFIGS, FP8_DTYPES[0]),
    "dual_fp8": ("M", FP8_DUAL_CONFIGS, FP8_DTYPES[0]),
    **{kernel: ("H", tuple(e for e in TRAINING_CONFIGS if e[0] == kernel), "")
       for kernel in ("dual_store", "packed_store", "dswiglu")},
}


def banded_entries(family: str) -> tuple[tuple[str, tuple], ...]:
    """``(name, entry)`` of every entry of ``family`` (:data:`BANDED_FAMILIES`), in catalog order, named as its
    tuned bands name it: e4m3 names in full, training names without their dtype suffix.

    Raises:
        KeyError: not a banded family.
    """
    _, entries, suffix = BANDED_FAMILIES[family]
    return tuple((name_of(*e, suffix).removesuffix("_"), e) for e in entries)


def banded_names(family: str, accumulation: str) -> tuple[str, ...]:
    """The config names a tuned band of ``family`` (:data:`BANDED_FAMILIES`) may give for ``accumulation``
    (``"fast"`` or ``"promoted"``: entries without or with a promote count), in catalog order
    (:func:`banded_entries`). A family none of whose entries accumulates that way has none.

    Raises:
        KeyError: not a banded family.
    """
    promoted = accumulation == "promoted"
    return tuple(name for name, e in banded_entries(family) if bool(e[7]) == promoted)


def library_name(family: str, name: str, dtype: str) -> str:
    """The library's name of banded config ``name`` (:func:`banded_names`) run in 16-bit ``dtype`` ("bf16",
    "fp16"): an e4m3 name as it is, a training name with the dtype's suffix."""
    return name if BANDED_FAMILIES[family][2] else f"{name}_{dtype}"


# A launch's tile order: raster 0 = the kernel's heuristic, 1 = along M, 2 = along N; and its swizzle (the
# number of tiles a raster step spans).
RASTERS = (0, 1, 2)
SWIZZLES = (1, 2, 4, 8)


def split_config(config: str) -> tuple[str, tuple[int, int] | None]:
    """An operator's ``config`` argument as (name, launch): ``"<name>@<raster>:<swizzle>"`` names a config and
    the launch to run it with, ``(raster, swizzle)`` (:data:`RASTERS`, :data:`SWIZZLES`); any other string is
    the name itself with no launch given (the config's default, raster 0 and swizzle 1).

    Raises:
        TypeError: config not a str.
        ValueError: a ``@`` not followed by ``<raster>:<swizzle>``, a launch given to the choice (``"fast"`` or
            ``"promoted"``) instead of a config name, or a raster or swizzle outside its values, naming the rule.
    """
    if not isinstance(config, str):
        raise TypeError(f"config must be a str (a config name, optionally <name>@<raster>:<swizzle>); got {config!r}")
    name, at, launch = config.partition("@")
    if not at:
        return config, None
    raster, colon, swizzle = launch.partition(":")
    if not (name and colon and all(re.fullmatch("[0-9]{1,2}", p) for p in (raster, swizzle))):
        raise ValueError(f"config must be a config name, optionally with its launch as <name>@<raster>:<swizzle>; "
                         f"got config={config!r:.120}")
    if name in ("fast", "promoted"):
        raise ValueError(f"config with a launch (<name>@<raster>:<swizzle>) must name a config, not the choice; "
                         f"got config={config!r:.120}")
    if int(raster) not in RASTERS or int(swizzle) not in SWIZZLES:
        raise ValueError(f"config's launch must have raster in {RASTERS} (0 the kernel's order, 1 along M, 2 along "
                         f"N) and swizzle in {SWIZZLES}; got config={config!r:.120}")
    return name, (int(raster), int(swizzle))


def closest(name: str, known) -> str:
    """For a message about an unknown config ``name``: the up to three names of ``known`` closest to it
    (a typo is a few characters from its config), as ``"closest: a, b, c"``, or ``"none is close to it"``."""
    import difflib

    close = difflib.get_close_matches(str(name).lower(), sorted(known), n=3)  # config names are lower case
    return f"closest: {', '.join(close)}" if close else "none is close to it"
