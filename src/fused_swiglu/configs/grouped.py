"""The grouped kernels' choice (:mod:`fused_swiglu.grouped_ops`): the experts of a mixture-of-experts layer over
one padded token matrix (M = T_pad rows) whose token tiles each belong to one expert. Their configs
(``catalog.GROUPED_CONFIGS``) are chosen by :func:`grouped_choice`, by the layout's token tile and the
accumulation; the layout's tile is chosen by :func:`grouped_token_tile`, from the routed rows per expert (fast
accumulation), or is the promoted configs' tile."""

from __future__ import annotations

import torch

from .. import catalog
from .base import AUTO_CONFIG, DTYPE_SUFFIX, Choice

GROUPED_KERNELS = ("grouped_dual",)


def _base_name(entry: tuple) -> str:
    return catalog.name_of(*entry, "").removesuffix("_")


# The grouped configs by token tile (tile_n), fast and promoted accumulation: the dual swap-AB kernel over
# experts, Pingpong (128 weight rows per tile). Its scheduler runs its own tile order: weight tiles along M for
# groups of S token tiles, S the launch's swizzle (kernel/sm90_tile_scheduler_expert_tiles.hpp); the raster is
# always 1.
GROUPED_CONFIGS = {entry[3]: _base_name(entry) for entry in catalog.GROUPED_CONFIGS
                   if not entry[7] and entry[1] == "pingpong"}
GROUPED_PROMOTED_CONFIGS = {entry[3]: _base_name(entry) for entry in catalog.GROUPED_CONFIGS if entry[7]}
# The Cooperative configs by token tile (256 weight rows per tile): reached by name (config=...) only, never by
# the choice, until a measurement says where they win (docs/perf-notes.md, entry 125).
GROUPED_COOPERATIVE_CONFIGS = {entry[3]: _base_name(entry) for entry in catalog.GROUPED_CONFIGS
                               if not entry[7] and entry[1] == "cooperative"}
GROUPED_TOKEN_TILES = tuple(sorted(GROUPED_CONFIGS))
GROUPED_PROMOTED_TILE = min(GROUPED_PROMOTED_CONFIGS)  # the layout's tile for config="promoted"
_GROUPED_TILE_OF = {_base_name(entry) + f"_{suffix}": entry[3] for entry in catalog.GROUPED_CONFIGS
                    for suffix in DTYPE_SUFFIX.values()}
GROUPED_TOKEN_TILE = GROUPED_TOKEN_TILES[0]  # the smallest: decode sizes, and the CPU kernel's default
# The layout's token tile by the mean routed rows per expert, ceil(T k / E): the first tile whose bound the
# mean does not pass, else the widest. A token tile reads its expert's weights once, so wider tiles read them
# fewer times when an expert holds more rows, at the cost of padding rows computed for nothing (each expert's
# last tile). Bounds from the fastest pinned tile per cell of bench moe on an H100 (docs/results/h100/moe.json,
# four MoE shapes, 1 to 4096 tokens; in sample).
GROUPED_TILE_BY_MEAN_ROWS = ((8, 16), (32, 64))
GROUPED_WIDEST_TILE = GROUPED_TOKEN_TILES[-1]
# The token-tile group S (the launch's swizzle) the choice may run for each token tile: the S token tiles of a
# group read each weight tile together, so an expert holding several token tiles reads its weights once per
# group instead of once per token tile. The widest tile is the one chosen where experts hold many rows; the
# narrower ones keep the order along M (S = 1), where an expert holds about one tile.
GROUPED_TOKEN_GROUP = {GROUPED_WIDEST_TILE: 8}
# Weight rows (gate + up) of each grouped config's tile, by name without the dtype: an expert's gate_up_proj is
# ceil(2 I / rows) weight tiles.
GROUPED_WEIGHT_TILE_ROWS = {_base_name(entry): entry[2] for entry in catalog.GROUPED_CONFIGS}


def token_group(token_tile: int, I: int, num_sms: int, config: str = "") -> tuple[int, str]:
    """The token-tile group S the choice runs for ``token_tile``-row tiles over experts of intermediate size ``I``
    on ``num_sms`` SMs, and why: :data:`GROUPED_TOKEN_GROUP`'s where an expert's weight tiles outnumber the SMs,
    else 1 (the order along M). Where one wave covers an expert's weight tiles, the expert's consecutive token
    tiles already run together and share its weights through L2, and the groups gained nothing consistent; where
    it does not (Mixtral-8x7B: 224 weight tiles on 132 SMs), each token tile read the weights from DRAM again,
    which the groups save (measured in docs/perf-notes.md, entry 122; in sample). The weight tiles are those of
    grouped config ``config`` (its name, with or without dtype and launch; "": the choice's config of the tile).

    Raises:
        KeyError: ``config`` names no grouped config.
    """
    group = GROUPED_TOKEN_GROUP.get(token_tile, 1)
    if group == 1:
        return 1, ""
    name = catalog.split_config(config)[0] if config else GROUPED_CONFIGS[token_tile]
    for suffix in DTYPE_SUFFIX.values():
        name = name.removesuffix(f"_{suffix}")
    tiles = -(-2 * I // GROUPED_WEIGHT_TILE_ROWS[name])
    if tiles > num_sms:
        return group, f"token tiles in groups of {group} (an expert's {tiles} weight tiles outnumber the {num_sms} SMs)"
    return 1, f"token tiles along M (an expert's {tiles} weight tiles fit one wave of {num_sms} SMs)"


def grouped_token_tile(rows: int, experts: int) -> tuple[int, str]:
    """The token tile (rows per tile of the padded layout, :data:`GROUPED_TOKEN_TILES`) for ``rows`` routed rows
    (T k: every token's k experts) over ``experts`` experts, and why: by the mean rows per expert
    (:data:`GROUPED_TILE_BY_MEAN_ROWS`). Sizes only, never the routing: no host synchronisation.

    Raises:
        ValueError: rows < 0 or experts < 1.
    """
    if rows < 0 or experts < 1:
        raise ValueError(f"rows must be >= 0 and experts >= 1; got rows={rows}, experts={experts}")
    mean = -(-rows // experts)
    for bound, tile in GROUPED_TILE_BY_MEAN_ROWS:
        if mean <= bound:
            return tile, f"{mean} routed rows per expert on average <= {bound}"
    return GROUPED_WIDEST_TILE, f"{mean} routed rows per expert on average > {GROUPED_TILE_BY_MEAN_ROWS[-1][0]}"


def check_grouped_config(config: str, dtype: torch.dtype) -> None:
    """Raise ValueError unless ``config`` is ``""`` (the choice, fast accumulation), ``"promoted"`` (the choice,
    promoted accumulation; any dtype for both, as the CPU kernel takes any floating dtype) or the name of a
    grouped config for ``dtype`` (:func:`catalog.grouped_names`). TypeError for a config that is not a str."""
    if not isinstance(config, str):
        raise TypeError(f"config must be a str (a grouped config name, '' or 'promoted' for the choice); got "
                        f"config={config!r}")
    if config in AUTO_CONFIG:
        return
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    names = catalog.grouped_names()
    name, launch = catalog.split_config(config)
    if name in names and name.endswith(suffix):
        if launch is not None and launch[0] != 1:
            raise ValueError(f"config of a grouped kernel takes raster 1 in its launch (<name>@1:<swizzle>, the "
                             f"swizzle its token-tile group): its scheduler runs weight tiles along M; got "
                             f"config={config!r}")
        return
    mine = [n for n in names if n.endswith(suffix)]
    hint = f" ({catalog.closest(config, mine)})" if mine else ""
    raise ValueError(f"config must name a grouped kernel for {dtype} ({', '.join(mine) or 'none'}) or be '' (the "
                     f"choice, fast accumulation) or 'promoted' (the choice, promoted accumulation); got "
                     f"config={config!r}{hint}")


def grouped_config_tile(config: str) -> int:
    """The token tile (tile_n) of grouped config ``config`` (a name of :func:`catalog.grouped_names`, with or
    without a launch ``@1:<swizzle>``).

    Raises:
        KeyError: not a grouped config's name.
        ValueError: a malformed launch (:func:`fused_swiglu.catalog.split_config`).
    """
    return _GROUPED_TILE_OF[catalog.split_config(config)[0]]


def config_tile(config: str, tile: int) -> int:
    """The token tile a grouped ``config`` runs: a named config's own, the promoted configs' for ``"promoted"``,
    else ``tile`` (the choice's, fast accumulation)."""
    if config == "promoted":
        return GROUPED_PROMOTED_TILE
    return grouped_config_tile(config) if config else tile


def check_grouped_tile(config: str, token_tile: int) -> None:
    """Raise ValueError unless ``token_tile`` is a grouped config's tile (:data:`GROUPED_TOKEN_TILES`) and a named
    ``config`` (one :func:`check_grouped_config` accepts), or ``"promoted"``, has that tile: a kernel tile must
    cover exactly one layout tile, one expert's rows."""
    if token_tile not in GROUPED_CONFIGS:
        raise ValueError(f"the layout's token tile must be one of {GROUPED_TOKEN_TILES} rows (a grouped config's); "
                         f"got {token_tile} (T_pad / tile_expert's entries)")
    wanted = config_tile(config, token_tile)
    if wanted != token_tile:
        what = (f"config {config!r} has {wanted}-row token tiles" if config != "promoted" else
                f"config='promoted': the grouped configs with promoted accumulation have {wanted}-row token tiles")
        raise ValueError(f"{what}, but the layout's tiles hold {token_tile} rows (T_pad / tile_expert's entries); "
                         f"build the layout with its tile (fused_swiglu.grouped.grouped_layout(..., tile={wanted})) "
                         f"or pass a config of {token_tile}-row tiles")


def grouped_choice(kernel: str, config: str, dtype: torch.dtype, token_tile: int, I: int,
                   num_sms: int) -> tuple[Choice, str]:
    """The config of grouped kernel ``kernel`` (:data:`GROUPED_KERNELS`) for ``dtype`` (bf16 / fp16) over a
    layout of ``token_tile``-row tiles, experts of intermediate size ``I``, on ``num_sms`` SMs, and why: the
    call's config name, or for ``""`` the fast grouped config of that tile (:data:`GROUPED_CONFIGS`), for
    ``"promoted"`` the promoted one (:data:`GROUPED_PROMOTED_CONFIGS`, :data:`GROUPED_PROMOTED_TILE`-row tiles
    only); raster 1 (along M, the only order its scheduler runs), swizzle the token-tile group
    (:func:`token_group`; a named config: its launch's, else 1).

    Raises:
        ValueError: an unknown kernel or dtype, a config :func:`check_grouped_config` refuses, a token tile
            no grouped config has or a named config of another tile (:func:`check_grouped_tile`).
    """
    if kernel not in GROUPED_KERNELS:
        raise ValueError(f"kernel must be one of {', '.join(map(repr, GROUPED_KERNELS))}; got kernel={kernel!r}")
    if dtype not in DTYPE_SUFFIX:
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16; got dtype={dtype}")
    check_grouped_config(config, dtype)
    check_grouped_tile(config, token_tile)
    if config not in AUTO_CONFIG:
        name, launch = catalog.split_config(config)
        return Choice(name, 1, launch[1] if launch else 1), "named by the call's config argument"
    accumulation = AUTO_CONFIG[config]
    by_tile = GROUPED_PROMOTED_CONFIGS if accumulation == "promoted" else GROUPED_CONFIGS
    group, order = token_group(token_tile, I, num_sms)
    order = f", {order}" if order else ""
    return (Choice(f"{by_tile[token_tile]}_{DTYPE_SUFFIX[dtype]}", 1, group),
            f"the grouped config of the layout's {token_tile}-row token tiles ({accumulation} accumulation){order}")
