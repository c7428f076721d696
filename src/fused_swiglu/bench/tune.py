"""``fused-swiglu tune``: measure the cost model's constants and the overrides for this GPU.

Two steps, both with the benchmark's timing protocol (:func:`fused_swiglu.bench.timing.time_interleaved`:
CUDA-event medians after warm-up, L2 flushed before every call, input sets rotated):

1. **Calibration.** The device's launch cost, HBM bandwidth and one CTA's bandwidth
   (:class:`fused_swiglu.cost_model.DeviceCosts`), then for every compiled config of the dtype its
   cost per tile and per k-tile of a round (:class:`fused_swiglu.cost_model.ConfigCosts`): a least-
   squares fit of ``t - launch_us = rounds * (tile_us + k_tiles * k_tile_us)`` over problems whose tile
   grid is exactly 2 and 4 rounds of the full persistent grid, at K = 1024 and 4096.
2. **Sweep.** For each shape and token count every compiled config of each kernel and accumulation
   with each launch the choice considers (:func:`fused_swiglu.configs.launch_options`) is timed, and
   the fastest few of each timed again in a turn of their own (:func:`time_two_stage`); where
   the fastest beat the cost model's pick by more than :data:`fused_swiglu.tuning.OVERRIDE_GAIN` it
   becomes an override for that exact problem.

``--sustained`` runs another step instead (:func:`run_sustained`): the launches of :data:`SUSTAINED_CONFIGS`
x :data:`SUSTAINED_LAUNCHES` at large M, each timed back to back at the power cap after one heat soak
(:func:`fused_swiglu.bench.timing.time_sustained`), and their costs there fitted (:func:`fit_sustained`)
into the tuned file's ``sustained`` section, which the choice ranks from its ``from_m`` on.

Progress is saved after each step in ``<out>/<gpu>_<dtype>.progress.json``; a run started again with
the same library version, GPU, dtype, repetitions and problems continues from there. One run at a time
per folder, GPU and dtype (``<gpu>_<dtype>.lock``); a second one stops with an error. The result is ``<out>/<gpu>_<dtype>.json``
(:mod:`fused_swiglu.tuning` describes the format and where it is read from).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .. import _version, configs, cost_model, tuning
from ..configs import KernelConfig
from ..errors import UnsupportedError
from ..reference import swiglu_eager
from ..weights import pack_gate_up
from . import timing
from .defaults import TUNE_SUSTAINED_SECONDS

ROUNDS = (2, 4)
CALIBRATION_K = (1024, 4096)


@dataclass(frozen=True)
class Variant:
    """One config with its launch parameters; ``key`` names it in the progress file."""

    config: KernelConfig
    raster: int = 0
    swizzle: int = 1

    @property
    def key(self) -> str:
        return tuning.launch_key(self.config.base_name, self.raster, self.swizzle)


def variants(M: int, N: int) -> list[Variant]:
    """Every config of the catalog with each launch the choice considers at M tokens, N = I
    (:func:`fused_swiglu.configs.launch_options`)."""
    return [Variant(v, v.raster, v.swizzle) for config in configs.CATALOG for v in configs.launch_options(config, M, N)]


@dataclass
class Operands:
    """One input set: x (M, K), W_gate / W_up (N, K), the packed (2N, K) weight, y (M, N)."""

    x: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_packed: torch.Tensor
    y: torch.Tensor


def make_operands(M: int, N: int, K: int, dtype: torch.dtype, device: torch.device) -> list[Operands]:
    """Rotated input sets for one problem (:func:`fused_swiglu.bench.timing.n_input_sets`)."""
    element = torch.finfo(dtype).bits // 8
    read = element * (M * K + 2 * N * K)
    held = element * (M * K + 4 * N * K + M * N)
    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    sets = []
    for _ in range(timing.n_input_sets(read, held, l2)):
        x = torch.randn(M, K, device=device, dtype=torch.float32).to(dtype)
        wg = (torch.randn(N, K, device=device, dtype=torch.float32) * K**-0.5).to(dtype)
        wu = (torch.randn(N, K, device=device, dtype=torch.float32) * K**-0.5).to(dtype)
        sets.append(Operands(x, wg, wu, pack_gate_up(wg, wu), torch.empty(M, N, device=device, dtype=dtype)))
    return sets


def launcher(variant: Variant, s: Operands, dtype: torch.dtype) -> Callable[[], None]:
    """A zero-argument call launching ``variant`` on one input set through the kernel library."""
    from .. import _lib

    lib = _lib.library()
    name = variant.config.name(dtype)
    if variant.config.kernel == "packed":
        return lambda: lib.run(name, s.x, s.w_packed, None, s.y, variant.raster, variant.swizzle)
    return lambda: lib.run(name, s.x, s.w_gate, s.w_up, s.y, variant.raster, variant.swizzle)


def time_variants(found: Sequence[Variant], M: int, N: int, K: int, dtype: torch.dtype, device: torch.device,
                  reps: int, flush: torch.Tensor, extra: dict[str, list[Callable[[], object]]] | None = None,
                  sets: list[Operands] | None = None) -> dict[str, float]:
    """Median milliseconds of each variant (and of each ``extra`` method) on one problem, timed in turn
    rep by rep (:func:`variant_timings`)."""
    timed = variant_timings(found, M, N, K, dtype, device, reps, flush, extra, sets)
    return {key: t.median_ms for key, t in timed.items()}


def variant_timings(found: Sequence[Variant], M: int, N: int, K: int, dtype: torch.dtype, device: torch.device,
                    reps: int, flush: torch.Tensor, extra: dict[str, list[Callable[[], object]]] | None = None,
                    sets: list[Operands] | None = None, monitor=None,
                    seconds: float = timing.SUSTAINED_SECONDS) -> dict[str, timing.Timing]:
    """The :class:`~fused_swiglu.bench.timing.Timing` of each variant (and of each ``extra`` method) on
    one problem, timed in turn rep by rep; with a ``monitor`` (:class:`fused_swiglu.bench.power.Monitor`)
    by the sustained protocol instead, each for ``seconds``. A variant the library rejects for this
    problem is left out."""
    sets = sets if sets is not None else make_operands(M, N, K, dtype, device)
    calls: dict[str, list[Callable[[], object]]] = dict(extra or {})
    for v in found:
        fns = [launcher(v, s, dtype) for s in sets]
        try:
            fns[0]()
        except (ValueError, UnsupportedError):  # the library declines the problem (can_implement)
            continue
        calls[v.key] = fns
    if not calls:
        return {}
    if monitor is not None:
        return timing.time_sustained(timing.as_graph_replays(calls, device), device, monitor, seconds, flush)
    return timing.time_interleaved(calls, device, warmup_ms=5.0, reps=reps, flush=flush)


FINALISTS = 3  # per kernel and accumulation, re-timed together in the second stage


def group_of(key: str) -> tuple[str, str]:
    """(kernel, accumulation) of a variant key (``name@raster:swizzle``)."""
    config = configs.BY_BASE_NAME[key.split("@")[0]]
    return config.kernel, config.accumulation


def time_two_stage(found: Sequence[Variant], M: int, N: int, K: int, dtype: torch.dtype, device: torch.device,
                   reps: int, flush: torch.Tensor, extra: dict[str, list[Callable[[], object]]] | None = None,
                   keep: Sequence[Variant] = (), sets: list[Operands] | None = None) -> tuple[dict[str, float], set[str]]:
    """An exhaustive first stage (every variant, ``reps``), then the :data:`FINALISTS` fastest of each
    kernel and accumulation, the ``keep`` variants and the ``extra`` methods timed again together with
    ``2 * reps``: with tens of variants in one turn a long first stage drifts (clocks, power), so the
    finalists are compared in a shorter turn of their own. Returns the medians (the second stage's
    for its members) and the keys of the second stage."""
    sets = sets if sets is not None else make_operands(M, N, K, dtype, device)
    first = time_variants(found, M, N, K, dtype, device, reps, flush, sets=sets)
    by_key = {v.key: v for v in [*found, *keep]}
    groups: dict[tuple[str, str], list[str]] = {}
    for key in sorted(first, key=first.get):
        groups.setdefault(group_of(key), []).append(key)
    finalists = {key for keys in groups.values() for key in keys[:FINALISTS]} | {v.key for v in keep}
    second = time_variants([by_key[k] for k in sorted(finalists) if k in by_key], M, N, K, dtype, device, 2 * reps,
                           flush, extra=extra, sets=sets)
    return {**first, **second}, set(second)


def calibration_problem(config: KernelConfig, rounds: int, num_sms: int) -> tuple[int, int]:
    """(M, N) whose tile grid fills exactly ``rounds`` rounds of the config's full persistent grid,
    with whole clusters in both dimensions: half the CTAs' worth of tiles along the weights (all of
    them where half would split a cluster) and the rest along the tokens."""
    ctas = cost_model.persistent_ctas(config, num_sms)
    weight_cluster = config.cluster_m if config.swap_ab else config.cluster_n
    weight_tiles = ctas // 2 if ctas % 2 == 0 and (ctas // 2) % weight_cluster == 0 else ctas
    token_tiles = rounds * ctas // weight_tiles
    if config.swap_ab:  # GEMM-M: 2N weight rows in tiles of tile_m; GEMM-N: tokens in tiles of tile_n
        return token_tiles * config.tile_n, weight_tiles * config.tile_m // 2
    return token_tiles * config.tile_m, weight_tiles * config.tile_n // 2


def fit_config_costs(points: Sequence[tuple[int, int, float]], launch_us: float,
                     relative: bool = False) -> cost_model.ConfigCosts:
    """Least-squares ``(tile_us, k_tile_us)`` of ``t - launch_us = rounds * (tile_us + k_tiles * k_tile_us)``
    over ``(rounds, k_tiles, t_us)`` points; both clamped at 0. ``relative``: each point's error counts
    relative to its ``t`` (timings spanning orders of magnitude).

    Raises:
        ValueError: fewer than two points with distinct k_tiles.
    """
    if len({k for _, k, _ in points}) < 2:
        raise ValueError(f"fit_config_costs needs points at two k-tile counts at least; got {list(points)}")
    a, b = fit_two([(r, r * k, t - launch_us) for r, k, t in points], relative=relative)
    return cost_model.ConfigCosts(tile_us=a, k_tile_us=b)


def fit_two(points: Sequence[tuple[float, float, float]], relative: bool = False) -> tuple[float, float]:
    """Least-squares ``(a, b)`` of ``y = a * f + b * g`` over ``(f, g, y)`` points, both clamped at 0 (a
    negative ``a`` is refitted with ``a = 0``); ``relative``: each point's error relative to its ``y``.

    Raises:
        ValueError: the points do not determine both (f and g proportional).
    """
    w = [1.0 / (y * y) if relative else 1.0 for _, _, y in points]
    saa = sum(wi * f * f for wi, (f, _, _) in zip(w, points))
    sab = sum(wi * f * g for wi, (f, g, _) in zip(w, points))
    sbb = sum(wi * g * g for wi, (_, g, _) in zip(w, points))
    say = sum(wi * f * y for wi, (f, _, y) in zip(w, points))
    sby = sum(wi * g * y for wi, (_, g, y) in zip(w, points))
    det = saa * sbb - sab * sab
    if not det > 1e-12 * saa * sbb:
        raise ValueError(f"fit_two needs points where f and g are not proportional; got {list(points)[:4]} ...")
    a = (say * sbb - sby * sab) / det
    b = (saa * sby - sab * say) / det
    if a < 0:  # refit through the origin in a
        a, b = 0.0, sby / sbb
    return max(a, 0.0), max(b, 0.0)


# A launch enters the sustained costs only with timings in at least this many cells.
SUSTAINED_MIN_CELLS = 10
# The rows of the unfused path (PyTorch's two GEMMs and silu(g) * u) among the sustained timings
UNFUSED_METHOD = "eager"


def fit_sustained(rows: Sequence[dict], num_sms: int) -> dict:
    """The ``sustained`` section of a tuned file (:mod:`fused_swiglu.tuning`) from timings at the power
    cap: rows with ``hidden_size`` (K), ``intermediate_size`` (N), ``tokens`` (M), ``method`` (a launch key,
    :func:`fused_swiglu.tuning.launch_key`; other methods are skipped) and ``median_ms``, as
    ``tools/schedule_ab.py --protocol sustained`` writes them. Each launch of a catalog config timed in at
    least :data:`SUSTAINED_MIN_CELLS` cells gets the ``(tile_us, k_tile_us)`` of :func:`fit_config_costs`
    (relative errors, no launch cost) over its cells' rounds (padding tiles included) and k-tiles;
    ``from_m`` is the fewest tokens among them. Rows of :data:`UNFUSED_METHOD` (in as many cells) give the
    unfused path's costs (``unfused``: :func:`fit_two` of its time on its GFLOP and MB,
    :func:`fused_swiglu.cost_model.unfused_features`).

    Raises:
        ValueError: no launch has enough cells.
    """
    points: dict[str, list[tuple[int, int, float]]] = {}
    tokens: dict[str, list[int]] = {}
    for r in rows:
        try:
            name, raster, swizzle = tuning.split_launch_key(str(r["method"]))
        except ValueError:
            continue
        if name not in configs.BY_BASE_NAME:
            continue
        M, N, K = int(r["tokens"]), int(r["intermediate_size"]), int(r["hidden_size"])
        v = dataclasses.replace(configs.BY_BASE_NAME[name], raster=raster, swizzle=swizzle)
        waves, _ = cost_model.rounds(v, M, N, num_sms, swizzle)
        if waves:
            points.setdefault(r["method"], []).append((waves, -(-K // v.tile_k), _us(float(r["median_ms"]))))
            tokens.setdefault(r["method"], []).append(M)
    launches = {}
    for key, pts in sorted(points.items()):
        if len(pts) < SUSTAINED_MIN_CELLS or len({k for _, k, _ in pts}) < 2:
            continue
        costs = fit_config_costs(pts, 0.0, relative=True)
        launches[key] = {"tile_us": costs.tile_us, "k_tile_us": costs.k_tile_us, "cells": len(pts)}
    if not launches:
        raise ValueError(f"no launch has sustained timings in {SUSTAINED_MIN_CELLS} cells or more")
    section = {"from_m": min(m for key in launches for m in tokens[key]), "launches": launches}
    unfused = [(*cost_model.unfused_features(int(r["tokens"]), int(r["intermediate_size"]), int(r["hidden_size"])),
                _us(float(r["median_ms"]))) for r in rows if r["method"] == UNFUSED_METHOD]
    if len(unfused) >= SUSTAINED_MIN_CELLS:
        a, b = fit_two(unfused, relative=True)
        section["unfused"] = {"us_per_gflop": a, "us_per_mb": b, "cells": len(unfused)}
    return section


def pick_losses(cells: dict[str, dict[str, float]], data: tuning.Tuning, num_sms: int) -> list[tuple]:
    """Per cell, kernel and accumulation: ``(M, N, K, kernel, accumulation, pick, best, pick_ms / best_ms)``
    with the model's pick (variant key) and the fastest variant timed (inf where the pick was not
    timed)."""
    out = []
    for key, times in sorted(cells.items(), key=lambda kv: tuple(map(int, kv[0].split(",")))):
        M, N, K = map(int, key.split(","))
        for kernel in configs.KERNELS:
            for accumulation in configs.ACCUMULATIONS:
                mine = {k: t for k, t in times.items()
                        if (c := configs.BY_BASE_NAME[k.split("@")[0]]).kernel == kernel and c.accumulation == accumulation}
                if not mine:
                    continue
                best = min(mine, key=mine.get)
                model = configs.model_config(kernel, M, N, K, accumulation, num_sms, data)
                pick = Variant(model, model.raster, model.swizzle).key
                out.append((M, N, K, kernel, accumulation, pick, best, mine.get(pick, math.inf) / mine[best]))
    return out


def fit_device(cells: dict[str, dict[str, float]], data: tuning.Tuning, num_sms: int, l2_size: int) -> tuning.Tuning:
    """``data`` with the device's ``l2_bytes`` and ``blend`` from the grid :data:`L2_SHARES` x
    :data:`BLENDS` that minimises the sum over the timed cells of log(pick time / best time) (each
    term capped at log 3)."""
    best = None
    for share in L2_SHARES:
        for blend in BLENDS:
            device = dataclasses.replace(data.device, l2_bytes=share * l2_size, blend=blend)
            trial = dataclasses.replace(data, device=device)
            loss = sum(math.log(min(r, 3.0)) for *_, r in pick_losses(cells, trial, num_sms))
            if best is None or loss < best[0]:
                best = (loss, trial)
    return best[1] if best is not None else data


class Progress:
    """The resumable state of one tune run, saved as JSON after every step (atomic replace)."""

    def __init__(self, path: Path, identity: dict):
        self.path = path
        self.identity = identity
        self.state: dict = {"identity": identity, "calibration": {}, "cells": {}}
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved.get("identity") == identity:
                self.state = saved

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.state, indent=0, sort_keys=True))
        os.replace(tmp, self.path)

    @staticmethod
    def cell_key(M: int, N: int, K: int) -> str:
        return f"{M},{N},{K}"


def _us(ms: float) -> float:
    return ms * 1e3


def calibrate(progress: Progress, dtype: torch.dtype, device: torch.device, num_sms: int, reps: int,
              flush: torch.Tensor, advance: Callable[[str], None]) -> None:
    """Step 1 (module docstring): fills ``progress.state["calibration"]``."""
    cal = progress.state["calibration"]
    if "device" not in cal:
        tiny = configs.BY_BASE_NAME["packed_pingpong_64x64x64_1x1"]
        swap = configs.BY_BASE_NAME["packed_swapab_pingpong_128x16x64_1x1"]
        launch = time_variants([Variant(tiny)], 64, 32, 64, dtype, device, reps, flush)
        launch_us = _us(min(launch.values()))
        # HBM: the weights of a large problem at decode sizes, every SM streaming
        bandwidth = []
        for config, M in ((swap, 16), (tiny, 64)):
            ms = time_variants([Variant(config)], M, 16384, 8192, dtype, device, reps, flush)
            if ms:
                bandwidth.append(cost_model.hbm_bytes(M, 16384, 8192) / (_us(min(ms.values())) - launch_us) / 1e3)
        # one CTA: 8 tiles of a long K
        per_cta = []
        for config, M, N in ((swap, 16, 512), (tiny, 64, 256)):
            ms = time_variants([Variant(config)], M, N, 32768, dtype, device, reps, flush)
            if ms:
                per_cta.append(cost_model.hbm_bytes(M, N, 32768) / 8 / (_us(min(ms.values())) - launch_us) / 1e3)
        cal["device"] = {"launch_us": launch_us, "hbm_gbps": max(bandwidth), "sm_gbps": max(per_cta)}
        progress.save()
    advance("device costs")
    from .. import _lib

    cal.setdefault("configs", {})
    for config in configs.CATALOG:
        name = config.base_name
        entry = cal["configs"].get(name)
        if entry is None:
            points = []
            for rounds in ROUNDS:
                M, N = calibration_problem(config, rounds, num_sms)
                for K in CALIBRATION_K:
                    ms = time_variants([Variant(config)], M, N, K, dtype, device, reps, flush)
                    if ms:
                        points.append((rounds, -(-K // config.tile_k), _us(min(ms.values()))))
            costs = fit_config_costs(points, cal["device"]["launch_us"])
            info = _lib.library().info(config.name(dtype))
            entry = cal["configs"][name] = {"tile_us": costs.tile_us, "k_tile_us": costs.k_tile_us,
                                            "smem_bytes": info.smem_bytes, "points": points}
            progress.save()
        if not entry.get("gbps"):  # decode sizes: one token tile, weights far larger than L2
            M, N, K = DECODE_PROBLEM
            ms = time_variants([Variant(config)], M, N, K, dtype, device, reps, flush)
            t_us = _us(min(ms.values())) - cal["device"]["launch_us"] if ms else 0.0
            entry["gbps"] = cost_model.hbm_bytes(M, N, K) / t_us / 1e3 if t_us > 0 else 0.0
            progress.save()
        advance(name)


# (M, N, K) at which each config's HBM bandwidth is measured
DECODE_PROBLEM = (16, 16384, 8192)
# The grid tune searches for the device's l2_bytes (times the L2 size) and blend
L2_SHARES = (0.5, 0.75, 1.0, 1.5, 2.0)
BLENDS = (2.0, 4.0, 8.0, 16.0)


# The launches ``tune --sustained`` times at the power cap: the 128-row tiles of both kernels that the
# sweeps of perf-notes entry 81 found fastest somewhere at M >= 2048, and the 256-row Cooperative tiles of
# entry 91, each along M and along N with swizzle 4 and 8, and the heuristic order.
SUSTAINED_CONFIGS = (
    "packed_pingpong_128x192x64_2x1", "packed_pingpong_128x192x64_1x1", "packed_pingpong_128x128x64_2x1",
    "dual_pingpong_128x128x64_2x1", "dual_pingpong_128x128x64_1x1", "dual_pingpong_128x160x64_2x1",
    "dual_pingpong_128x160x64_1x1", "packed_cooperative_256x192x64_2x1", "dual_cooperative_256x128x64_2x1",
)
SUSTAINED_LAUNCHES = ((0, 1), (1, 4), (1, 8), (2, 4), (2, 8))


def sustained_variants() -> list[Variant]:
    """Every launch of :data:`SUSTAINED_CONFIGS` x :data:`SUSTAINED_LAUNCHES`."""
    return [Variant(dataclasses.replace(configs.BY_BASE_NAME[name], raster=r, swizzle=sw), r, sw)
            for name in SUSTAINED_CONFIGS for r, sw in SUSTAINED_LAUNCHES]


def write_sustained(path: Path, section: dict, gpu: str, dtype: str, num_sms: int) -> dict:
    """Put ``section`` as the ``sustained`` section of the tuned file ``path`` (atomic replace): into the
    file where it exists, else into a new file that holds only that section."""
    data = json.loads(path.read_text()) if path.is_file() else {
        "format": tuning.FORMAT, "gpu": gpu, "dtype": dtype, "num_sms": num_sms}
    data["sustained"] = section
    return replace_tuned_file(path, data)


def replace_tuned_file(path: Path, data: dict) -> dict:
    """Write ``data`` as the tuned file ``path`` (atomic replace), with what its GPU reports where that GPU
    is visible (:func:`fused_swiglu.tuning.reported`), and forget the files read; returns it."""
    if (reports := tuning.reported(str(data["gpu"]))) is not None:
        data["reports"] = reports.as_json()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    tuning.clear()
    return data


def _target(problems: Sequence[tuple[int, int, int]], dtype: torch.dtype) -> tuple[torch.device, int, str, str, str]:
    """Check a tune run's problems and find its GPU: ``(device, SM count, GPU name, dtype suffix, file stem)``.

    Raises:
        RuntimeError: no CUDA device. ValueError: a problem size not a positive int multiple of 8 for N and K.
    """
    from .. import _lib

    if not torch.cuda.is_available():
        raise RuntimeError("fused-swiglu tune needs a CUDA GPU")
    for M, N, K in problems:
        if min(M, N, K) < 1 or N % 8 or K % 8:
            raise ValueError(f"problem (M={M}, N={N}, K={K}): M >= 1 and N, K positive multiples of 8 required")
    device = torch.device("cuda", torch.cuda.current_device())
    num_sms, gpu, _ = _lib.target(device.index)
    suffix = configs.DTYPE_SUFFIX[dtype]
    return device, num_sms, gpu, suffix, tuning.file_name(gpu, suffix).removesuffix(".json")


def run_sustained(problems: Sequence[tuple[int, int, int]], dtype: torch.dtype, out_dir: Path,
                  seconds: float = TUNE_SUSTAINED_SECONDS, fresh: bool = False, console=None) -> Path:
    """``fused-swiglu tune --sustained``: after one heat soak, time every launch of
    :func:`sustained_variants` and the unfused path (:data:`UNFUSED_METHOD`) on each problem ((M, N = I,
    K = H)) back to back at the power cap for ``seconds`` each, fit their costs (:func:`fit_sustained`) and write them into
    ``out_dir/<gpu>_<dtype>.json`` (:func:`write_sustained`); returns its path. Progress is saved after each
    problem in ``<gpu>_<dtype>.sustained-progress.json`` and a run with the same identity continues
    from there, unless ``fresh``.

    Raises:
        RuntimeError: no CUDA device, or another tune holds this GPU's and dtype's files. ValueError:
            seconds not above 0, a problem size not a positive int multiple of 8 for N and K, or the
            fit finds no launch timed in enough problems.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

    from . import power

    if not seconds > 0:
        raise ValueError(f"seconds must be > 0; got seconds={seconds}")
    device, num_sms, gpu, suffix, stem = _target(problems, dtype)
    found = sustained_variants()
    identity = {"library_version": _version.__version__, "gpu": gpu, "dtype": suffix, "seconds": seconds,
                "problems": [list(p) for p in problems], "launches": [v.key for v in found]}
    progress_path = out_dir / f"{stem}.sustained-progress.json"
    with exclusive(out_dir / f"{stem}.lock"):
        if fresh and progress_path.exists():
            progress_path.unlink()
        progress = Progress(progress_path, identity)
        cells = progress.state["cells"]
        flush = timing.flush_buffer(device)
        monitor = power.Monitor(power.nvml_index(device))
        timing.heat_soak(device, monitor)
        with Bar(TextColumn("[bold]tune --sustained[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                 TimeRemainingColumn(), console=console, transient=False) as bar:
            task = bar.add_task(gpu, total=len(problems))
            for M, N, K in problems:
                key = Progress.cell_key(M, N, K)
                if key not in cells:
                    sets = make_operands(M, N, K, dtype, device)
                    unfused = {UNFUSED_METHOD: [lambda s=s: swiglu_eager(s.x, s.w_gate, s.w_up) for s in sets]}
                    timed = variant_timings(found, M, N, K, dtype, device, 1, flush, extra=unfused, sets=sets,
                                            monitor=monitor, seconds=seconds)
                    cells[key] = {k: t.median_ms for k, t in timed.items()}
                    progress.save()
                bar.update(task, advance=1, description=f"M={M} N={N} K={K}")
        rows = [{"tokens": M, "intermediate_size": N, "hidden_size": K, "method": k, "median_ms": t}
                for key, times in cells.items() for M, N, K in [map(int, key.split(","))] for k, t in times.items()]
        path = out_dir / f"{stem}.json"
        write_sustained(path, fit_sustained(rows, num_sms), gpu, suffix, num_sms)
    return path


def tuning_of(progress: Progress, gpu: str, dtype: str) -> tuning.Tuning:
    """The calibration as :class:`fused_swiglu.tuning.Tuning` (no overrides)."""
    cal = progress.state["calibration"]
    return tuning.parse({"format": tuning.FORMAT, "gpu": gpu, "dtype": dtype, "device": cal["device"],
                         "configs": cal["configs"], "overrides": []})


def sweep(progress: Progress, problems: Sequence[tuple[int, int, int]], dtype: torch.dtype, device: torch.device,
          reps: int, flush: torch.Tensor, advance: Callable[[str], None]) -> None:
    """Step 2: every variant's median time at each (M, N, K) into ``progress.state["cells"]``."""
    cells = progress.state["cells"]
    for M, N, K in problems:
        key = Progress.cell_key(M, N, K)
        if key not in cells:
            cells[key], _ = time_two_stage(variants(M, N), M, N, K, dtype, device, reps, flush)
            progress.save()
        advance(f"M={M} N={N} K={K}")


def overrides(cells: dict[str, dict[str, float]], data: tuning.Tuning, num_sms: int) -> list[dict]:
    """Where a cell's fastest variant of a kernel and accumulation beat the model's pick by more than
    :data:`fused_swiglu.tuning.OVERRIDE_GAIN` (or the pick was not timed), an override for it."""
    out = []
    for M, N, K, kernel, accumulation, pick, best, gain in pick_losses(cells, data, num_sms):
        if gain > tuning.OVERRIDE_GAIN:
            name, launch = best.split("@")
            raster, swizzle = map(int, launch.split(":"))
            out.append({"kernel": kernel, "accumulation": accumulation, "M": M, "N": N, "K": K,
                        "config": name, "raster": raster, "swizzle": swizzle, "model_config": pick,
                        "gain": round(gain, 4) if math.isfinite(gain) else None, "protocol": "interleaved"})
    return out


def write_data(progress: Progress, gpu: str, dtype: str, num_sms: int, l2_size: int, path: Path) -> dict:
    """The tuning file from the progress: calibration, the fitted device constants
    (:func:`fit_device`) and :func:`overrides` (atomic replace)."""
    cal = progress.state["calibration"]
    data = fit_device(progress.state["cells"], tuning_of(progress, gpu, dtype), num_sms, l2_size)
    found = overrides(progress.state["cells"], data, num_sms)
    # the power term is not measured here (the sweep interleaves its candidates): the shipped H200's
    reference = tuning.load(*tuning.REFERENCE).device
    power = {k: getattr(reference, k) for k in ("energy_us_per_byte", "l2_reuse_bytes", "power_from_m")}
    data = dataclasses.replace(data, device=dataclasses.replace(data.device, **power))
    fields = ("tile_us", "k_tile_us", "gbps", "smem_bytes")
    out = {
        "format": tuning.FORMAT, "gpu": gpu, "dtype": dtype, "num_sms": num_sms,
        "library_version": _version.__version__, "torch": torch.__version__,
        "reps": progress.identity.get("reps"),
        "device": asdict(data.device),
        "configs": {name: {k: c[k] for k in fields if k in c} for name, c in cal["configs"].items()},
        "cells": len(progress.state["cells"]),
        "overrides": found,
    }
    if path.is_file():  # launches timed at the power cap by tune --sustained stay
        previous = json.loads(path.read_text())
        if "sustained" in previous:
            out["sustained"] = previous["sustained"]
    return replace_tuned_file(path, out)


@contextlib.contextmanager
def exclusive(lock_path: Path):
    """Hold ``lock_path`` (a file lock) for one tune run of a GPU and dtype: a second run on the same
    folder would time its problems on a GPU the first one keeps busy.

    Raises:
        RuntimeError: another process holds the lock (naming the file).
    """
    from filelock import FileLock, Timeout

    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RuntimeError(f"another fused-swiglu tune holds {lock_path}; wait for it to finish") from None
    try:
        yield
    finally:
        lock.release()


def run_tune(problems: Sequence[tuple[int, int, int]], dtype: torch.dtype, out_dir: Path, reps: int = 10,
             fresh: bool = False, console=None) -> Path:
    """Tune this process's current CUDA device for ``dtype``: calibrate, sweep ``problems``
    ((M, N = I, K = H) triples), write ``out_dir/<gpu>_<dtype>.json``; returns its path. With a
    progress file of the same library version, GPU, dtype, reps and problems in ``out_dir`` it
    continues from there, unless ``fresh``.

    Raises:
        RuntimeError: no CUDA device. ValueError: reps below 1, or a problem size not a positive int
            multiple of 8 for N and K.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

    if reps < 1:
        raise ValueError(f"reps must be >= 1; got reps={reps}")
    device, num_sms, gpu, suffix, stem = _target(problems, dtype)
    identity = {"library_version": _version.__version__, "gpu": gpu, "dtype": suffix, "reps": reps,
                "problems": [list(p) for p in problems]}
    progress_path = out_dir / f"{stem}.progress.json"
    with exclusive(out_dir / f"{stem}.lock"):
        if fresh and progress_path.exists():
            progress_path.unlink()
        progress = Progress(progress_path, identity)
        flush = timing.flush_buffer(device)
        timing.warm_gpu(device)
        total = 1 + len(configs.CATALOG) + len(problems)
        with Bar(TextColumn("[bold]tune[/] {task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                 console=console, transient=False) as bar:
            task = bar.add_task(gpu, total=total)

            def advance(what: str) -> None:
                bar.update(task, advance=1, description=what)

            calibrate(progress, dtype, device, num_sms, reps, flush, advance)
            sweep(progress, problems, dtype, device, reps, flush, advance)
        path = out_dir / f"{stem}.json"
        l2_size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
        write_data(progress, gpu, suffix, num_sms, l2_size, path)
    return path
