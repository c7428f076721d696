"""Kernel configurations and the choice of one for a problem.

A config name is the C library's:
``{kernel}_{schedule}_{tile_m}x{tile_n}x{tile_k}_{cluster_m}x{cluster_n}[_promote{p}]_{dtype}``,
e.g. ``packed_pingpong_128x192x64_2x1_bf16``. ``tile_n`` counts gate + up columns of a CTA tile;
``_promote{p}``: GMMA accumulates ``p`` k-tiles at a time and each partial sum is added into a
second fp32 accumulator (two-level accumulation; absent: GMMA accumulates all of K).

The choice (:func:`choose_config`), one rule for every shape: take the compiled configs of the
kernel and accumulation (:data:`CATALOG`, from :mod:`fused_swiglu.catalog`), drop the illegal ones
for the problem (:func:`legal`: cluster fill, swizzle padding, shared memory), rank the rest by the
cost model (:mod:`fused_swiglu.cost_model`) with the GPU's SM count and its tuned costs
(:mod:`fused_swiglu.tuning`), and take a tuned override for this exact problem where
``fused-swiglu tune`` measured one beating the model's pick by more than
:data:`fused_swiglu.tuning.OVERRIDE_GAIN` and it stands for the problem (:func:`override_applies`).
Where the tuned data holds launches timed at the power cap, from its ``from_m`` on the choice ranks
those launches by their own costs instead (:func:`sustained_ranking`).

This package is the one place that picks a config for any family: the 16-bit inference kernels here, the
training kernels by hidden size (:func:`training_choice`), the e4m3 families by M
(:mod:`fused_swiglu.configs.fp8`), the grouped kernels by the layout's token tile
(:mod:`fused_swiglu.configs.grouped`); every operator asks :func:`resolve` (tests read the other modules'
sources for rules on M, N or K that name configs). For the training and e4m3 families a GPU may have size bands
(``fused-swiglu tune --families``, :func:`fused_swiglu.tuning.load_bands`), which take the place of the built-in
rule on that GPU wherever the band's launch is legal for the problem (:func:`family_choice`).
"""

from __future__ import annotations

import dataclasses
import functools
import re

import torch

from .. import catalog, cost_model, env, tuning
from .._validate import check_choice, warn_once
from ..errors import UnsupportedError
from . import fp8 as fp8_rules
from .base import (ACCUMULATIONS, AUTO_CONFIG, BY_BASE_NAME, CATALOG, DTYPE_OF_SUFFIX, DTYPE_SUFFIX, KERNELS,
                   NUM_SMS, PROMOTE, Choice, KernelConfig, candidates, config_of_entry, is_promoted)
from .grouped import GROUPED_KERNELS, GROUPED_TOKEN_TILE, grouped_choice


def token_tiles_fill_clusters(config: KernelConfig, M: int, N: int) -> bool:
    """Whether the tile grid fills whole clusters along each clustered dimension: a part-empty
    cluster runs padding tiles, and a Pingpong config with a 2x1 cluster on an odd number of token
    tiles was measured well below the same tile with a 1x2 cluster (docs/perf-notes.md). The
    Cooperative schedule is exempt (its 2x1 cluster was measured at every M)."""
    if config.schedule != "pingpong":
        return True
    blocks_m, blocks_n = cost_model.tile_grid(config, M, N)
    return blocks_m % config.cluster_m == 0 and blocks_n % config.cluster_n == 0


# A launch whose swizzle makes CUTLASS's persistent scheduler run more than 2 % padding tiles is
# illegal: the padding tiles run the whole mainloop on zero-filled operands (with swizzle 8 and a 2x1
# cluster, M = 2304's 18 token tiles are padded to 32).
SWIZZLE_PADDING_MAX = 1.02


def swizzle_padding(config: KernelConfig, M: int, N: int) -> float:
    """Tiles the persistent scheduler runs with the config's swizzle / tiles it runs with swizzle 1,
    for M tokens and N = I (:func:`fused_swiglu.cost_model.scheduled_tiles`)."""
    plain = cost_model.scheduled_tiles(config, M, N, 1)
    return cost_model.scheduled_tiles(config, M, N, config.swizzle) / plain if plain else 1.0


# Shared memory a Hopper (sm_90) block may opt in to, bytes: no compiled config uses more.
SM90_SMEM_MAX = 232448


def fits_shared_memory(base_name: str, smem_limit: int | None, smem_bytes: dict[str, int] | None) -> bool:
    """Whether config ``base_name`` fits ``smem_limit`` bytes of shared memory by ``smem_bytes`` (the tuned data's
    sizes): always without a limit or without sizes; a config whose size the data does not record fits only a
    limit every sm_90 kernel fits (:data:`SM90_SMEM_MAX`)."""
    if smem_limit is None or not smem_bytes:
        return True
    return smem_bytes.get(base_name, SM90_SMEM_MAX) <= smem_limit


def legal(config: KernelConfig, M: int, N: int, smem_limit: int | None = None,
          smem_bytes: dict[str, int] | None = None) -> bool:
    """Whether ``config`` may serve M tokens and N = I: its tiles fill whole clusters
    (:func:`token_tiles_fill_clusters`), its swizzle pads at most :data:`SWIZZLE_PADDING_MAX`, and its
    shared memory fits ``smem_limit`` bytes (:func:`fits_shared_memory`)."""
    if not token_tiles_fill_clusters(config, M, N) or swizzle_padding(config, M, N) > SWIZZLE_PADDING_MAX:
        return False
    return fits_shared_memory(config.base_name, smem_limit, smem_bytes)


def _check_sizes(**sizes: int) -> None:
    """Each keyword's value is an int >= 0 (num_sms: >= 1).

    Raises:
        TypeError: a value that is not an int (bool included). ValueError: one below its minimum.
    """
    for name, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int; got {value!r}")
        if value < (1 if name == "num_sms" else 0):
            raise ValueError(f"{name} must be >= {1 if name == 'num_sms' else 0}; got {value}")


# Launch parameters (raster, swizzle) the choice considers beside each config's defaults (0, 1): along
# M from this M on, and swizzled launches from LARGE_M on (raster N with swizzle 4 where swizzle 8
# would pad the grid past SWIZZLE_PADDING_MAX); swap-AB configs only while M spans at most
# SWAP_AB_TOKEN_TILES_MAX token tiles (16-token tiles: M <= 64; 112-token tiles: M <= 448), beyond
# which each weight tile is streamed once per token tile. Measured: over 14 shapes x 12 M on an H200, where
# every config was timed (docs/results/h200/shapes.json), a swap-AB config was the fastest only at 1 and 3
# token tiles, never at 5 or more (M = 512 and 1000 for 112-token tiles, M = 100 and up for 16-token ones);
# the one swap-AB launch timed past that (Qwen2.5-14B, M = 1000, 9 tiles) ran 0.80x cuBLAS on an H100, the
# lowest dual figure at that M, where the cost model had it level with a 128-row tile (perf-notes 109).
ALONG_M_FROM = 256
LARGE_M = 2048
LARGE_M_LAUNCHES = ((1, 2), (2, 4), (2, 8))
SWAP_AB_TOKEN_TILES_MAX = 4


def swap_ab_serves(config: KernelConfig, M: int) -> bool:
    """Whether the choice considers ``config`` at M tokens: always for a non-swap-AB config; for a
    swap-AB one while ``ceil(M / tile_n) <= SWAP_AB_TOKEN_TILES_MAX``."""
    return not config.swap_ab or -(-M // config.tile_n) <= SWAP_AB_TOKEN_TILES_MAX


def launch_options(config: KernelConfig, M: int, N: int) -> list[KernelConfig]:
    """``config`` with each (raster, swizzle) the choice considers at M tokens and N = I (comment
    above), the illegal ones (:func:`legal`) left out; empty where :func:`swap_ab_serves` is false."""
    if not swap_ab_serves(config, M):
        return []
    launches = [(0, 1)]
    if not config.swap_ab and M >= ALONG_M_FROM:
        launches.append((1, 1))
    if not config.swap_ab and M >= LARGE_M:
        launches += list(LARGE_M_LAUNCHES)
    out = []
    for raster, swizzle in launches:
        v = dataclasses.replace(config, raster=raster, swizzle=swizzle)
        if legal(v, M, N):
            out.append(v)
    return out


def model_ranking(kernel: str, M: int, N: int, K: int, accumulation: str, num_sms: int,
                  data: tuning.Tuning, smem_limit: int | None = None) -> list[tuple[float, KernelConfig]]:
    """The legal configs with tuned costs, each with the launch parameters of
    :func:`launch_options`, as ``(predicted microseconds, config)``, fastest first (catalog order,
    then launch order, among equal predictions)."""
    ranked = []
    for order, config in enumerate(candidates(kernel, accumulation)):
        costs = data.costs.get(config.base_name)
        if costs is None or not legal(config, M, N, smem_limit, data.smem_bytes):
            continue
        for sub, v in enumerate(launch_options(config, M, N)):
            t = cost_model.predict_us(v, costs, data.device, M, N, K, num_sms, v.raster, v.swizzle)
            ranked.append((t, order, sub, v))
    ranked.sort(key=lambda t: t[:3])
    return [(t[0], t[3]) for t in ranked]


def sustained_ranking(kernel: str, M: int, N: int, K: int, accumulation: str, num_sms: int,
                      data: tuning.Tuning, smem_limit: int | None = None) -> list[tuple[float, KernelConfig]]:
    """The launches of ``kernel`` and ``accumulation`` with sustained costs in ``data`` that serve M
    tokens (:meth:`fused_swiglu.tuning.Tuning.sustained_launches`), as ``(predicted microseconds at the
    power cap, config with its raster and swizzle)``, fastest first; empty below the data's ``from_m`` or
    without such launches. Their costs count the padding tiles a launch runs, so only the shared
    memory rule of :func:`legal` applies (the cluster-fill and swizzle-padding rules stand in for what
    the interleaved calibration cannot see). Where ``data`` was scaled from another GPU's
    (:func:`fused_swiglu.tuning.scaled`), each launch also pays ``data.us_per_dram_byte`` per byte of its
    :func:`fused_swiglu.cost_model.dram_traffic`."""
    per_byte, l2 = data.us_per_dram_byte, data.device.l2_reuse_bytes

    def predicted(v: KernelConfig, costs) -> float:
        t = cost_model.predict_sustained_us(v, costs, M, N, K, num_sms, v.swizzle)
        return t + per_byte * cost_model.dram_traffic(v, M, N, K, num_sms, l2, v.raster, v.swizzle) if per_byte else t

    ranked = [(predicted(v, costs), key, v) for key, costs, v in _sustained_launches(kernel, M, accumulation, data,
                                                                                       smem_limit)]
    ranked.sort(key=lambda t: t[:2])
    return [(t, v) for t, _, v in ranked]


def _sustained_launches(kernel: str, M: int, accumulation: str, data: tuning.Tuning, smem_limit: int | None = None):
    """``(launch key, costs, config with its raster and swizzle)`` of each launch :func:`sustained_ranking`
    ranks (unranked)."""
    for key, costs in data.sustained_launches(M).items():
        name, raster, swizzle = tuning.split_launch_key(key)
        base = BY_BASE_NAME.get(name)
        if base is None or base.kernel != kernel or base.accumulation != accumulation:
            continue
        if not fits_shared_memory(name, smem_limit, data.smem_bytes):
            continue
        yield key, costs, dataclasses.replace(base, raster=raster, swizzle=swizzle)


def _tuned(gpu: str, dtype: torch.dtype) -> tuning.Tuning:
    """The tuned data of GPU ``gpu`` for ``dtype``; ValueError for a dtype the kernels do not take."""
    if dtype not in DTYPE_SUFFIX:
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16; got dtype={dtype}")
    return tuning.load(gpu, DTYPE_SUFFIX[dtype])


@functools.lru_cache(maxsize=4096)
def unfused_faster(kernel: str, M: int, N: int, K: int, accumulation: str = "fast", num_sms: int = NUM_SMS,
                   gpu: str = "", dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether the unfused path (PyTorch's two GEMMs and ``silu(g) * u``) is predicted faster at the power
    cap than the choice's launch of ``kernel`` for M tokens, N = I, K = H on GPU ``gpu``: the tuned data's
    ``unfused`` costs (:func:`fused_swiglu.cost_model.predict_unfused_us`) against the first of
    :func:`sustained_ranking`. False where the data has either missing (below its ``from_m``, promoted
    accumulation, a GPU whose data has no sustained section).

    Raises:
        ValueError: unknown dtype (as :func:`choose_config`).
    """
    data = _tuned(gpu, dtype)
    if data.unfused is None:
        return False
    ranked = sustained_ranking(kernel, M, N, K, accumulation, num_sms, data)
    return bool(ranked) and cost_model.predict_unfused_us(data.unfused, M, N, K) < ranked[0][0]


@functools.lru_cache(maxsize=4096)
def training_unfused(M: int, K: int, gpu: str = "", dtype: torch.dtype = torch.bfloat16) -> bool:
    """Whether a patched block's training step (a call autograd records) of M tokens and hidden size K = H
    runs the block's own forward and PyTorch's backward on GPU ``gpu``: the tuned data's ``training`` rule
    (:class:`fused_swiglu.tuning.TrainingRule`), measured there; False where the data has none.

    Raises:
        ValueError: unknown dtype.
    """
    rule = _tuned(gpu, dtype).training_unfused
    return rule is not None and M >= rule.from_m and K >= rule.from_h


def model_config(kernel: str, M: int, N: int, K: int, accumulation: str, num_sms: int,
                 data: tuning.Tuning, smem_limit: int | None = None) -> KernelConfig:
    """The cost model's pick (no override): the first of :func:`sustained_ranking` where it has any,
    else the first of :func:`model_ranking`; where no config has tuned costs, the first legal candidate
    in catalog order.

    Raises:
        ValueError: no candidate of this kernel and accumulation is legal for the problem.
    """
    ranked = sustained_ranking(kernel, M, N, K, accumulation, num_sms, data, smem_limit)
    if ranked:
        return ranked[0][1]
    ranked = model_ranking(kernel, M, N, K, accumulation, num_sms, data, smem_limit)
    if ranked:
        return ranked[0][1]
    for config in candidates(kernel, accumulation):
        if legal(config, M, N, smem_limit, data.smem_bytes):
            return config
    within = f" within smem_limit={smem_limit} bytes of shared memory" if smem_limit is not None else ""
    raise ValueError(f"no {kernel} config with accumulation={accumulation!r} is legal for M={M} N={N} K={K}{within}")


def choose_config(
    kernel: str,
    M: int,
    N: int,
    K: int,
    accumulation: str = "fast",
    num_sms: int = NUM_SMS,
    gpu: str = "",
    dtype: torch.dtype = torch.bfloat16,
    smem_limit: int | None = None,
) -> KernelConfig:
    """The config for a problem (M tokens, N = I, K = H) on GPU ``gpu`` (its device name, "" for
    none) of ``num_sms`` SMs, ignoring availability: the tuned override for this exact problem if
    there is one and it is legal here, else the cost model's pick (module docstring).

    Raises:
        ValueError: unknown kernel or accumulation, M, N or K below 0, num_sms below 1.
        TypeError: M, N, K or num_sms not an int, or an unsupported dtype.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}; got kernel={kernel!r}")
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    if dtype not in DTYPE_SUFFIX:
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
    return _choose(kernel, M, N, K, accumulation, num_sms, gpu, DTYPE_SUFFIX[dtype], smem_limit)


def override_applies(override: tuning.Override, config: KernelConfig, M: int, N: int, K: int, num_sms: int,
                     data: tuning.Tuning) -> bool:
    """Whether a measured override stands for its problem: one timed by the sustained protocol
    always; one timed interleaved (rep by rep among its rivals) below the M where the cost model's
    power term starts (the tuned data's ``power_from_m``), and above it only where its tile order
    reads no operand from HBM twice (:func:`fused_swiglu.cost_model.dram_traffic`): at the power cap
    what re-reads cost is energy, which interleaving averages over the candidates and cannot see.
    Where the data has sustained costs for the problem (:func:`sustained_ranking`), only a sustained
    override stands."""
    if override.protocol == "sustained":
        return True
    if any(_sustained_launches(config.kernel, M, config.accumulation, data)):
        return False
    if M < data.device.power_from_m or data.device.energy_us_per_byte <= 0:
        return True
    traffic = cost_model.dram_traffic(config, M, N, K, num_sms, data.device.l2_reuse_bytes, config.raster,
                                      config.swizzle)
    return traffic <= cost_model.hbm_bytes(M, N, K)


@functools.lru_cache(maxsize=4096)
def _choose(kernel, M, N, K, accumulation, num_sms, gpu, dtype, smem_limit) -> KernelConfig:
    data = tuning.load(gpu, dtype)
    found = data.override(kernel, accumulation, M, N, K)
    if found is not None and found.config in BY_BASE_NAME:
        base = BY_BASE_NAME[found.config]
        config = dataclasses.replace(base, raster=found.raster, swizzle=found.swizzle)
        if (base.kernel == kernel and base.accumulation == accumulation
                and legal(config, M, N, smem_limit, data.smem_bytes)
                and override_applies(found, config, M, N, K, num_sms, data)):
            return config
    return model_config(kernel, M, N, K, accumulation, num_sms, data, smem_limit)


def choosable_configs() -> frozenset[KernelConfig]:
    """Every config :func:`choose_config` can return, with raster 0 and swizzle 1: the catalog (the
    kernel library compiles each of them)."""
    return frozenset(CATALOG)


def select(
    kernel: str,
    M: int,
    N: int,
    K: int,
    dtype: torch.dtype,
    available: frozenset[str] | None = None,
    accumulation: str = "fast",
    num_sms: int | None = None,
    gpu: str | None = None,
    smem_limit: int | None = None,
) -> Choice:
    """Choose the config for one problem on GPU ``gpu`` (device name; "" for none) of ``num_sms`` SMs.

    Order: the first ``FUSED_SWIGLU_CONFIG`` name that is in ``available`` (default: the loaded
    library's configs) and is of this kernel, dtype and accumulation (launched as the override gives it,
    ``<name>@<raster>:<swizzle>``, else with the chosen rasterisation and swizzle if it is the choice's own
    config, else the defaults); else :func:`choose_config`'s choice. Override names that are not in
    ``available``, and malformed launches, are ignored with one warning each. If the chosen name is not in ``available``, any available config of the same
    kernel, dtype and accumulation is used instead, with one warning.

    Args:
        kernel: "packed" or "dual". M: tokens; N: intermediate size I; K: hidden size H.
        dtype: torch.bfloat16 or torch.float16.
        available: config names to choose from (any iterable of str; None: every config the core
            library lists, which loads it and, on first use, builds it: see the README's "Building").
        accumulation: "fast" or "promoted" (see :data:`ACCUMULATIONS`).
        num_sms: the GPU's SM count (the cost model's rounds of CTAs).
        gpu: the GPU's device name (``torch.cuda.get_device_name``), which picks the tuned data.
        smem_limit: the GPU's shared memory per block (opt-in) in bytes; None: not checked.
        Where both num_sms and gpu are None they and smem_limit are the current CUDA device's
        (without CUDA: 132 SMs, no GPU name, so no overrides).

    Raises:
        ValueError: unknown kernel or accumulation, M, N or K below 0, num_sms below 1. TypeError:
            unsupported dtype, or M, N, K or num_sms not an int.
        UnsupportedError: no available config of this kernel, dtype and accumulation.
    """
    check_choice("accumulation", accumulation, ACCUMULATIONS)
    if num_sms is None and gpu is None:
        num_sms, gpu, smem_limit = _current_device()
    num_sms = NUM_SMS if num_sms is None else num_sms
    gpu = gpu or ""
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    if available is not None:
        available = frozenset(available)
    else:
        from .. import _lib

        available = _lib.config_names()
    return _select(kernel, M, N, K, dtype, tuple(env.config_override()), available, accumulation, num_sms, gpu,
                   smem_limit)


def _current_device() -> tuple[int, str, int | None]:
    """(SM count, name, shared memory limit) of the current CUDA device; (132, "", None) without CUDA."""
    if not torch.cuda.is_available():
        return NUM_SMS, "", None
    from .. import _lib

    return _lib.target(torch.cuda.current_device())


def _names_kernel(name: str, kernel: str, suffix: str) -> bool:
    """``name`` is a config of ``kernel`` ("packed" or "dual", swap-AB forms included, store forms not; or a
    training kernel) for the dtype whose name suffix is ``suffix`` ("_bf16" or "_fp16")."""
    return name.startswith(kernel + "_") and not name.startswith(kernel + "_store_") and name.endswith(suffix)


def parse_overrides(overrides) -> tuple[list[tuple[str, str, tuple[int, int] | None]], dict[str, ValueError]]:
    """Override names (``FUSED_SWIGLU_CONFIG``'s, :func:`fused_swiglu.env.config_override`) read by
    :func:`fused_swiglu.catalog.split_config`: (as given, config name, launch or None) of each well-formed one,
    and as given -> the ValueError of each malformed launch."""
    parsed, malformed = [], {}
    for n in overrides:
        try:
            parsed.append((n, *catalog.split_config(n)))
        except ValueError as e:
            malformed[n] = e
    return parsed, malformed


def _parsed_overrides(overrides) -> list[tuple[str, str, tuple[int, int] | None]]:
    """:func:`parse_overrides`' well-formed names; each malformed one is left out, with one warning."""
    parsed, malformed = parse_overrides(overrides)
    for n, e in malformed.items():
        warn_once(f"override:{n}", f"fused_swiglu: {env.config_override_origin()}: {e}; it is ignored.")
    return parsed


@functools.lru_cache(maxsize=4096)
def _select(kernel, M, N, K, dtype, overrides, available, accumulation, num_sms, gpu, smem_limit) -> Choice:
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    if suffix == "_?":
        raise TypeError(f"dtype must be torch.bfloat16 or torch.float16; got {dtype}")
    promoted = accumulation == "promoted"

    def fits(n: str) -> bool:
        return _names_kernel(n, kernel, suffix) and is_promoted(n) == promoted

    cfg = choose_config(kernel, M, N, K, accumulation, num_sms, gpu, dtype, smem_limit)
    chosen_name = cfg.name(dtype)
    wanted = []
    for n, name, launch in _parsed_overrides(overrides):
        if name not in available:
            warn_once(
                f"override:{n}",
                f"fused_swiglu: {env.config_override_origin()} names {name!r}, which is not a config of the kernel "
                f"library; it is ignored ({catalog.closest(name, available) if available else 'none is available'}).",
            )
        elif fits(name):
            wanted.append((name, launch))
    if wanted:
        name, launch = wanted[0]
        if launch is not None:  # the launch the override gives
            return Choice(name, *launch)
        # the choice's launch parameters stay with its config; another config runs with the defaults
        raster, swizzle = (cfg.raster, cfg.swizzle) if name == chosen_name else (0, 1)
        return Choice(name, raster, swizzle)
    if chosen_name in available:
        return Choice(chosen_name, cfg.raster, cfg.swizzle)
    same_kind = sorted(n for n in available if fits(n))
    if not same_kind:
        raise UnsupportedError(
            f"the kernel library has no {kernel} config for {DTYPE_SUFFIX[dtype]} with "
            f"accumulation={accumulation!r}; available: {', '.join(sorted(available)) or 'none'}"
        )
    warn_once(
        f"config:{chosen_name}",
        f"fused_swiglu: config {chosen_name} is not in the kernel library; using {same_kind[0]} instead.",
    )
    return Choice(same_kind[0])


# The training kernels (fused_swiglu.training_ops): the store forward of each kernel (y, g and u from one
# launch) and the dSwiGLU backward GEMM. Their configs (catalog.TRAINING_CONFIGS) are chosen by the hidden
# size alone: (kernel, H >= TRAINING_WIDE_H) -> (tile_n, cluster_m); at that H the inference choice itself
# takes 1 x 1 clusters and, for the packed kernel, 128 x 192 tiles at M >= 2048.
TRAINING_KERNELS = ("dual_store", "packed_store", "dswiglu")
TRAINING_WIDE_H = 3584
TRAINING_TILES = {
    ("packed_store", False): (128, 2), ("packed_store", True): (192, 1),
    ("dual_store", False): (128, 2), ("dual_store", True): (128, 1),
    ("dswiglu", False): (128, 1), ("dswiglu", True): (128, 1),
}


def training_rule(kernel: str, K: int, dtype: torch.dtype) -> tuple[str, str]:
    """The built-in rule's config of training kernel ``kernel`` (:data:`TRAINING_KERNELS`) for hidden size ``K`` = H
    in ``dtype`` (bf16 / fp16), e.g. ``dswiglu_pingpong_128x128x64_1x1_bf16``, and why."""
    tile_n, cluster_m = TRAINING_TILES[kernel, K >= TRAINING_WIDE_H]
    entry = next(e for e in catalog.TRAINING_CONFIGS if e[0] == kernel and e[3] == tile_n and e[5] == cluster_m)
    return (catalog.name_of(*entry, DTYPE_SUFFIX[dtype]),
            f"the training kernels' rule by hidden size (H = {K} {'>=' if K >= TRAINING_WIDE_H else '<'} "
            f"{TRAINING_WIDE_H})")


def training_choice(kernel: str, K: int, dtype: torch.dtype, M: int = 0, N: int = 0, gpu: str = "",
                    smem_limit: int | None = None) -> Choice:
    """The config of training kernel ``kernel`` (:data:`TRAINING_KERNELS`) for M tokens, N = I and hidden size
    ``K`` = H in ``dtype`` (bf16 / fp16) on GPU ``gpu``: :func:`family_choice` of :func:`training_rule`.

    Raises:
        ValueError: the rule's config does not fit ``smem_limit`` where the rule serves (:func:`family_choice`).
    """
    return family_choice(kernel, "fast", K, M, N, gpu, DTYPE_SUFFIX[dtype], smem_limit,
                         training_rule(kernel, K, dtype))[0]


# The banded families' configs by the names their tuned bands give (catalog.banded_names), for legality.
_BANDED = {name: config_of_entry(e) for family in catalog.BANDED_FAMILIES for name, e in catalog.banded_entries(family)}


def banded_config(name: str) -> KernelConfig:
    """The :class:`KernelConfig` of a banded family's config as its tuned bands name it
    (:func:`fused_swiglu.catalog.banded_names`), with raster 0 and swizzle 1, or with the launch given as
    ``<name>@<raster>:<swizzle>`` (:func:`fused_swiglu.catalog.split_config`).

    Raises:
        KeyError: no banded family compiles ``name``. ValueError: a malformed launch.
    """
    base, launch = catalog.split_config(name)
    return _BANDED[base] if launch is None else dataclasses.replace(_BANDED[base], raster=launch[0],
                                                                     swizzle=launch[1])


def serves(config: KernelConfig, M: int, N: int, smem_limit: int | None = None,
           smem_bytes: dict[str, int] | None = None) -> bool:
    """Whether ``config`` (with its raster and swizzle) may serve M tokens and N = I: :func:`legal` and
    :func:`swap_ab_serves`."""
    return legal(config, M, N, smem_limit, smem_bytes) and swap_ab_serves(config, M)


def considered(config: KernelConfig, M: int, N: int, smem_limit: int | None = None,
               smem_bytes: dict[str, int] | None = None) -> bool:
    """Whether the choice would run ``config`` with its raster and swizzle at M tokens and N = I: the launch is
    one of :func:`launch_options` of the config (its default order always, along M from :data:`ALONG_M_FROM`,
    swizzled orders from :data:`LARGE_M`; legal ones; none for a swap-AB config past its token tiles), and the
    config fits ``smem_limit`` (:func:`fits_shared_memory`)."""
    default = dataclasses.replace(config, raster=0, swizzle=1)
    return fits_shared_memory(config.base_name, smem_limit, smem_bytes) and any(
        (o.raster, o.swizzle) == (config.raster, config.swizzle) for o in launch_options(default, M, N))


def family_choice(kernel: str, accumulation: str, size: int, M: int, N: int, gpu: str, dtype: str,
                  smem_limit: int | None, rule: tuple[str, str]) -> tuple[Choice, str]:
    """A banded family's choice (:data:`fused_swiglu.catalog.BANDED_FAMILIES`) and why: the band of GPU ``gpu``'s
    tuned bands (:func:`fused_swiglu.tuning.load_bands`) that serves ``size`` (M or H), where the choice considers
    its launch for M tokens and N = I (:func:`considered`, with ``dtype``'s tuned shared-memory sizes), else the
    band's config in its default launch where that is considered (as ``tune --families`` priced it);
    else ``rule``, the family's built-in (name, why).

    Raises:
        ValueError: the rule's config does not fit ``smem_limit`` bytes of shared memory where the rule serves.
    """
    bands = tuning.load_bands(gpu)
    band = bands.band(kernel, accumulation, size)
    smem = tuning.load(gpu, dtype).smem_bytes
    if band is None:
        return _rule_choice(kernel, rule, M, N, dtype, smem_limit, smem), rule[1]
    by = catalog.BANDED_FAMILIES[kernel][0]
    name = catalog.library_name(kernel, band.config, dtype)
    below = max((b.up_to for b in bands.families[kernel, accumulation] if b.up_to is not None and b.up_to < size),
                default=0)
    bound = f"{by} from {below + 1}" + (f" to {band.up_to}" if band.up_to is not None else " on")
    why = f"the tuned {kernel} band for {bound} ({bands.source})"
    illegal = (f"the tuned band's {band.config} raster {band.raster} swizzle {band.swizzle} is not a launch for M = "
               f"{M}, I = {N} (cluster fill, swizzle padding, shared memory, swap-AB token tiles, or an order the "
               f"choice takes only at more tokens: along M from {ALONG_M_FROM}, swizzled from {LARGE_M})")
    config = dataclasses.replace(_BANDED[band.config], raster=band.raster, swizzle=band.swizzle)
    if considered(config, M, N, smem_limit, smem):
        return Choice(name, band.raster, band.swizzle), why
    if (band.raster, band.swizzle) != (0, 1) and considered(dataclasses.replace(config, raster=0, swizzle=1), M, N,
                                                            smem_limit, smem):
        return Choice(name), f"{why}, launched with raster 0 and swizzle 1: {illegal}"
    return _rule_choice(kernel, rule, M, N, dtype, smem_limit, smem), f"{rule[1]}: {illegal}"


def _rule_choice(kernel: str, rule: tuple[str, str], M: int, N: int, dtype: str, smem_limit: int | None,
                 smem: dict[str, int]) -> Choice:
    """The family rule's config (``rule``: (name, why); a training name ends with ``dtype``, an e4m3 one is whole)
    where it fits ``smem_limit`` (:func:`fits_shared_memory`).

    Raises:
        ValueError: it does not, naming the config and the limit.
    """
    name = rule[0]
    banded = name.removesuffix("_" + dtype)  # as the bands name it (catalog.banded_names)
    base = _BANDED[banded].base_name if banded in _BANDED else banded  # the key serves() reads sizes by
    if not fits_shared_memory(base, smem_limit, smem):
        size = f"{smem[base]} bytes" if base in smem else f"size not measured, taken as the sm_90 maximum {SM90_SMEM_MAX}"
        raise ValueError(f"no {kernel} config is legal for M={M} N={N} within smem_limit={smem_limit} bytes of "
                         f"shared memory: the family's rule takes {name} ({size})")
    return Choice(name)


# The e4m3 families of fused_swiglu.fp8, each with the keyword of fused_swiglu.configs.fp8.resolve that
# names it; their configs are chosen by those rules, by M.
FP8_KERNELS = {"packed_fp8": {}, "packed_fp8_e4m3out": {"e4m3_out": True}, "packed_fp8_block": {"block": True},
               "dual_fp8": {"dual": True}}
# The dtypes explain takes for them: the operands' and y's (the e4m3-out family's y is e4m3 too).
FP8_DTYPES = (torch.float8_e4m3fn, torch.bfloat16)


def _fp8_choice(kernel: str, config: str, M: int, N: int = 0, gpu: str = "",
                smem_limit: int | None = None) -> tuple[Choice, str]:
    """An e4m3 family's config for M tokens and N = I (:data:`FP8_KERNELS`) on GPU ``gpu`` and why: a named
    config as it is, else :func:`family_choice` of the family's rule by M."""
    name = fp8_rules.resolve(config, M, **FP8_KERNELS[kernel])
    if config not in ("", "fast", "promoted"):
        return named_choice(config), "named by the call's config argument"
    accumulation = "promoted" if kernel == "packed_fp8" and config == "promoted" else "fast"
    return family_choice(kernel, accumulation, M, M, N, gpu, "bf16", smem_limit,
                         (name, f"the {kernel} family's rule by M (fused_swiglu.configs.fp8)"))


def resolve(
    kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype, num_sms: int = NUM_SMS, gpu: str = "",
    smem_limit: int | None = None, token_tile: int = GROUPED_TOKEN_TILE,
) -> Choice:
    """The ops' ``config`` argument to a launch on GPU ``gpu`` (device name) of ``num_sms`` SMs:
    ``""`` = :func:`select`'s choice with fast accumulation, ``"promoted"`` = its choice with
    promoted accumulation, else a config name as is. A training kernel (:data:`TRAINING_KERNELS`):
    ``""`` = :func:`training_choice`, else a config name as is.

    Raises:
        TypeError: config not a str.
        ValueError: a config name of another kernel (a packed config reads 2I weight rows, a dual
            config two I-row weights, a store config also writes g and u), or of another dtype, or a
            malformed launch (:func:`fused_swiglu.catalog.split_config`); for a banded family (e4m3,
            training), a rule config that does not fit ``smem_limit`` (:func:`family_choice`).
    """
    if kernel in FP8_KERNELS:
        return _fp8_choice(kernel, config, M, N, gpu, smem_limit)[0]
    if kernel in GROUPED_KERNELS:
        return grouped_choice(kernel, config, dtype, token_tile, N, num_sms)[0]
    check_config(kernel, config, dtype)
    if kernel in TRAINING_KERNELS:
        return training_choice(kernel, K, dtype, M, N, gpu, smem_limit) if config == "" else named_choice(config)
    if config in AUTO_CONFIG:
        return select(kernel, M, N, K, dtype, accumulation=AUTO_CONFIG[config], num_sms=num_sms, gpu=gpu,
                      smem_limit=smem_limit)
    return named_choice(config)


def named_choice(config: str) -> Choice:
    """The launch of a config the call named (its ``config`` argument, already checked): the name with raster 0
    and swizzle 1, or with the launch it gives as ``<name>@<raster>:<swizzle>``
    (:func:`fused_swiglu.catalog.split_config`). Named launches are run as they are, as named configs are:
    no legality rule of the choice applies (they are the choice's speed rules; any raster and swizzle computes
    the same result)."""
    name, launch = catalog.split_config(config)
    return Choice(name) if launch is None else Choice(name, *launch)


def _check_device_arguments(gpu: object, smem_limit: object, available: object) -> None:
    """:func:`explain`'s description of the device: ``gpu`` a str, ``smem_limit`` None or an int >= 0 (bytes),
    ``available`` None or a collection of config names (not one name).

    Raises:
        TypeError: an argument of another type, naming it.
        ValueError: a negative ``smem_limit``.
    """
    if not isinstance(gpu, str):
        raise TypeError(f"gpu must be a str (the device name CUDA reports, or ''); got {gpu!r}")
    if smem_limit is not None:
        if not isinstance(smem_limit, int) or isinstance(smem_limit, bool):
            raise TypeError(f"smem_limit must be None or an int (bytes of shared memory per block); got {smem_limit!r}")
        if smem_limit < 0:
            raise ValueError(f"smem_limit must be >= 0 bytes; got {smem_limit}")
    if available is not None and (isinstance(available, (str, bytes))
                                  or not all(isinstance(n, str) for n in available)):
        raise TypeError(f"available must be None or a collection of config names (str), not one name; got {available!r}")


def explain(
    kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype, num_sms: int = NUM_SMS, gpu: str = "",
    smem_limit: int | None = None, available: frozenset[str] | None = None, token_tile: int = GROUPED_TOKEN_TILE,
) -> tuple[Choice, str]:
    """:func:`resolve`'s choice for one launch (M tokens, N = I, K = H) and why, in words: the call named
    the config; ``FUSED_SWIGLU_CONFIG`` named it; the choice's config is not in the kernel library (the
    fallback); the tuned override for this exact problem; the cost model, with its prediction and the
    runner-up's; or, for an e4m3 family (:data:`FP8_KERNELS`), its rule by M. ``available``: the config
    names to choose from; None: the kernel library's if it is loaded, else every config of the catalog
    (nothing is loaded or built). A ``gpu`` that is not a Hopper part (:func:`hopper_named`) gets the choice
    a Hopper GPU of its reports would, and the reason says so.

    Raises:
        As :func:`resolve`; ValueError also for N or K not a positive multiple of 8 (the kernels' 16-byte
        TMA rows: no launch could serve the problem), a negative ``smem_limit``, a family's rule config that
        does not fit it, or a dtype an e4m3 family does not take (:data:`FP8_DTYPES`); TypeError for a ``gpu``
        that is not a str, an ``smem_limit`` that is not None or an int, or an ``available`` that is not a
        collection of config names.
    """
    _check_sizes(M=M, N=N, K=K, num_sms=num_sms)
    _check_device_arguments(gpu, smem_limit, available)
    choice, why = _explain_checked(kernel, config, M, N, K, dtype, num_sms, gpu, smem_limit, available, token_tile)
    if gpu and not hopper_named(gpu):
        why += (f"; {gpu} is not a Hopper GPU (compute capability 9.0: H100, H200, H800, H20, GH200), where alone the "
                "CUDA kernels run: on it backend='auto' and patched blocks run PyTorch, backend='cutlass' and the FP8 "
                "functions raise, and this is the choice a Hopper part would get")
    return choice, why


def hopper_named(gpu: str) -> bool:
    """Whether ``gpu`` (a device name as CUDA reports it) is a Hopper GPU: by its compute capability where a
    device of that name is visible (:func:`fused_swiglu.tuning.visible_properties`), else by the name (H100,
    H200, H800, H20 or GH200 in it)."""
    props = tuning.visible_properties(gpu)
    return (props.major, props.minor) == (9, 0) if props is not None else HOPPER_NAME.search(gpu) is not None


HOPPER_NAME = re.compile(r"\bG?H(?:100|200|800|20)\b")


def _explain_checked(kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype, num_sms: int, gpu: str,
                     smem_limit: int | None, available: frozenset[str] | None,
                     token_tile: int) -> tuple[Choice, str]:
    """:func:`explain` of checked sizes and device arguments."""
    if N == 0 or K == 0 or N % 8 or K % 8:
        raise ValueError(f"N = I and K = H must be positive multiples of 8 (16-byte TMA rows); got N={N}, K={K}")
    if kernel in FP8_KERNELS:
        if dtype not in FP8_DTYPES:
            raise ValueError(f"dtype must be torch.float8_e4m3fn (the operands) or torch.bfloat16 (y) for {kernel}; "
                             f"got dtype={dtype}")
        return _fp8_choice(kernel, config, M, N, gpu, smem_limit)
    if kernel in GROUPED_KERNELS:
        return grouped_choice(kernel, config, dtype, token_tile, N, num_sms)
    _check_kernel_and_dtype(kernel, dtype)
    if kernel in TRAINING_KERNELS:
        check_config(kernel, config, dtype)
        choice, why = ((named_choice(config), "the call named it") if config else
                       family_choice(kernel, "fast", K, M, N, gpu, DTYPE_SUFFIX[dtype], smem_limit,
                                     training_rule(kernel, K, dtype)))
        if kernel != "dswiglu" and training_unfused(M, K, gpu, dtype):
            why += ("; a patched block's call that autograd records at this size runs the block's own forward and "
                    "PyTorch's backward instead (the GPU's training rule, fused_swiglu.configs.training_unfused)")
        return choice, why
    check_config(kernel, config, dtype)
    if available is None:
        from .. import _lib

        available = _lib.config_names() if _lib.is_loaded() else frozenset(catalog.names())
    choice, why = _explain(kernel, config, M, N, K, dtype, num_sms, gpu, smem_limit, frozenset(available))
    if M == 0:
        why = f"M = 0: the operators return the empty result without a launch (else: {why})"
    return choice, why


def _explain(
    kernel: str, config: str, M: int, N: int, K: int, dtype: torch.dtype, num_sms: int = NUM_SMS, gpu: str = "",
    smem_limit: int | None = None, available: frozenset[str] | None = None,
) -> tuple[Choice, str]:
    """:func:`explain` of a checked problem."""
    if config not in AUTO_CONFIG:
        return named_choice(config), "named by the call's config argument"
    accumulation = AUTO_CONFIG[config]
    choice = select(kernel, M, N, K, dtype, available, accumulation, num_sms, gpu, smem_limit)
    picked = choose_config(kernel, M, N, K, accumulation, num_sms, gpu, dtype, smem_limit)
    if choice.name in {name for _, name, _ in _parsed_overrides(env.config_override())}:
        return choice, f"{env.config_override_origin()} names it"
    if choice.name != picked.name(dtype):
        return choice, (f"the choice, {picked.name(dtype)}, is not in the kernel library; the first available "
                        f"{kernel} config of this dtype and accumulation instead")
    data = tuning.load(gpu, DTYPE_SUFFIX[dtype])
    found = data.override(kernel, accumulation, M, N, K)
    if found is not None and (found.config, found.raster, found.swizzle) == (picked.base_name, picked.raster,
                                                                             picked.swizzle):
        return choice, f"the tuned override for this problem ({data.source}; timed {found.protocol})"
    ranked = sustained_ranking(kernel, M, N, K, accumulation, num_sms, data, smem_limit)
    ranked_sustained = bool(ranked)
    what = f"the sustained costs at the power cap ({data.source}, from M = {data.sustained_from_m})"
    if not ranked:
        ranked = model_ranking(kernel, M, N, K, accumulation, num_sms, data, smem_limit)
        what = f"the cost model ({data.costs_from or data.source})"
    if data.matched:
        what += (f"; {gpu} has no tuned data of its own and its SM count, SM clock and memory bandwidth match "
                 f"{data.matched}'s, whose data serves it")
    elif data.costs_from and not ranked_sustained:
        what += f"; {gpu}'s own file ({data.source.name}) holds no calibration of its own, so these are its costs"
    elif gpu and not data.overrides_apply:
        what += (f"; {gpu} has no tuned data of its own and matches no GPU that has: {tuning.REFERENCE[0]}'s serves it "
                 f"(tuned data is named by the device name CUDA reports, e.g. {tuning.REFERENCE[0]!r})")
        if data.scaled_to is not None:
            what += (f", its costs scaled to the {data.scaled_to.sm_mhz:.0f} MHz SM clock and "
                     f"{data.scaled_to.memory_gbps:.0f} GB/s this GPU reports"
                     + (", each byte a launch moves through DRAM charged at that bandwidth"
                        if ranked_sustained and data.us_per_dram_byte else "")
                     + (f", the L2 it may reuse scaled to its {data.scaled_to.l2_bytes / 2**20:.0f} MiB L2"
                        if data.scaled_to.l2_bytes else ""))
    if not ranked:
        why = ("no config with tuned costs is legal for this problem" if data.costs or data.sustained
               else "no tuned costs for this kernel")
        if smem_limit is not None:
            why += f" within smem_limit = {smem_limit} bytes"
        return choice, f"the first legal config in catalog order ({why})"
    best = ranked[0][0]
    others = [(t, c) for t, c in ranked if (c.base_name, c.raster, c.swizzle) != (picked.base_name, picked.raster,
                                                                                   picked.swizzle)]
    reason = f"{what}: {best:.1f} us predicted"
    if others:
        t, c = others[0]
        reason += f"; next {c.base_name} raster {c.raster} swizzle {c.swizzle}: {t:.1f} us"
    if unfused_faster(kernel, M, N, K, accumulation, num_sms, gpu, dtype):
        reason += (f"; the unfused path is predicted faster ({cost_model.predict_unfused_us(data.unfused, M, N, K):.1f}"
                   " us), so swiglu(backend='auto') runs PyTorch's unfused path, and a block patched by fuse_swiglu_mlps its "
                   "own forward, for such an eager call")
    return choice, reason


def set_config_override(names: str | None) -> None:
    """Override the choice in this process with ``names`` (comma-separated config names, each optionally
    with its launch as ``<name>@<raster>:<swizzle>``, as ``FUSED_SWIGLU_CONFIG``; ``""`` for none) instead of the variable's, or return to the variable with
    None; the operators' launch plans made before are dropped, so the next call of each problem chooses
    again (``FUSED_SWIGLU_CONFIG`` itself is read only when a plan is made).

    The override applies to the 16-bit packed and dual kernels' choice (:data:`OVERRIDABLE_NAMES`, this
    version's configs); the e4m3, training and grouped kernels take a config through their calls' ``config``.

    Raises:
        TypeError: ``names`` is neither a string nor None.
        ValueError: a name that is not one of :data:`OVERRIDABLE_NAMES`, or a malformed launch, naming it
            (nothing is set).
    """
    if names is not None and not isinstance(names, str):
        raise TypeError(f"names must be a string of comma-separated config names, or None; got {type(names).__name__}")
    parsed, malformed = parse_overrides(env.split_names(names))
    if malformed:
        n, e = next(iter(malformed.items()))
        raise ValueError(f"names: {n!r} has a malformed launch: {e}")
    for _, base, _ in parsed:
        if base not in OVERRIDABLE_NAMES:
            raise ValueError(f"names: {base!r} is not a config of the 16-bit packed or dual kernels, which the "
                             f"override applies to ({catalog.closest(base, OVERRIDABLE_NAMES)})")
    from .. import _lib

    env.set_config_names(names)
    _lib.clear_plans()


def clear_caches() -> None:
    """Forget the choices made (:func:`fused_swiglu.tuning.clear` calls it when the tuned data may have
    changed)."""
    _choose.cache_clear()
    _select.cache_clear()
    unfused_faster.cache_clear()
    training_unfused.cache_clear()
    from .. import _lib

    _lib.clear_plans()  # the operators' launch plans were made from the data too (nothing before the first call)


tuning.on_clear(clear_caches)


def _check_kernel_and_dtype(kernel: str, dtype: torch.dtype) -> None:
    """Raise ValueError naming ``kernel`` or ``dtype`` when the choice knows no such kernel or dtype."""
    if kernel not in (*KERNELS, *TRAINING_KERNELS):
        every = (*KERNELS, *TRAINING_KERNELS, *FP8_KERNELS, *GROUPED_KERNELS)
        raise ValueError(f"kernel must be one of {', '.join(map(repr, every))}; got kernel={kernel!r}")
    if dtype not in DTYPE_SUFFIX:
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16; got dtype={dtype}")


def check_config(kernel: str, config: str, dtype: torch.dtype) -> None:
    """Raise TypeError unless ``config`` is a str, ValueError unless it is ``""``, ``"promoted"`` (not for a training kernel,
    :data:`TRAINING_KERNELS`) or a name of a ``kernel`` config for ``dtype`` (the ops' ``config``
    argument; see :func:`resolve`). A training kernel's ``""`` passes with any dtype (its CPU kernels
    take any floating dtype)."""
    if not isinstance(config, str):
        raise TypeError(f"config must be a str (a config name, or '' for the choice); got config={config!r}")
    training = kernel in TRAINING_KERNELS
    if config == "" or (not training and config in AUTO_CONFIG):
        return
    name, _ = catalog.split_config(config)
    suffix = "_" + DTYPE_SUFFIX.get(dtype, "?")
    if not _names_kernel(name, kernel, suffix) or name not in _KNOWN_NAMES:
        autos = "or be ''" if training else "'' (the choice, fast accumulation) or 'promoted'"
        mine = [n for n in _KNOWN_NAMES if _names_kernel(n, kernel, suffix)]
        hint = f" ({catalog.closest(name, mine)})" if mine else ""
        raise ValueError(
            f"config must name a {kernel} kernel for {dtype} (a name starting with {kernel + '_'!r} and "
            f"ending with {suffix!r}, one the library compiles){'' if training else ','} {autos}; got "
            f"config={config!r}{hint}"
        )


# Every inference and training config name the library compiles (check_config)
_KNOWN_NAMES = frozenset(catalog.names() + catalog.training_names() + catalog.dual_paired_names())
# The names an override (FUSED_SWIGLU_CONFIG, set_config_override) may give: the configs select() chooses
# among, the 16-bit packed and dual kernels' (the e4m3, training and grouped kernels take a config only
# through their calls' config argument).
OVERRIDABLE_NAMES = frozenset(catalog.names())
