"""Tuned data per GPU model and dtype: the cost model's measured costs and the measured overrides.

``fused-swiglu tune`` writes one JSON file per GPU model and dtype, named ``<gpu>_<dtype>.json``
(``gpu``: the device name, lower case, non-alphanumerics as ``-``; e.g. ``nvidia-h200_bf16.json``).
Files are looked up in the user's tuning folder (``$FUSED_SWIGLU_CACHE_DIR/tuning``, else the
cache folder's ``tuning``) first, then in the package's ``tuned/`` folder. For a dtype without a
file the other dtype's file of the same GPU serves (bf16 and fp16 GMMA run at one rate). A GPU
without any file gets the reference GPU's costs (:data:`REFERENCE`) with its own SM count and no
overrides.

File format (``"format": 1``)::

    {"format": 1, "gpu": "NVIDIA H200", "dtype": "bf16", "num_sms": 132,
     "device": {"launch_us": ..., "hbm_gbps": ..., "sm_gbps": ..., "l2_bytes": ..., "blend": ...},
     "configs": {"packed_pingpong_64x128x64_1x1": {"tile_us": ..., "k_tile_us": ..., "gbps": ...,
                                                  "smem_bytes": ...}, ...},
     "overrides": [{"kernel": "packed", "accumulation": "fast", "M": 333, "N": 14336, "K": 4096,
                    "config": "packed_pingpong_64x192x64_1x1", "raster": 1, "swizzle": 1,
                    "model_config": "...", "gain": 1.07}, ...]}

Config names carry no dtype suffix. ``gain``: the model's pick's measured time over the override's.

``protocol`` (optional, default ``"interleaved"``): how the override was timed, rep by rep among its
rivals or (``"sustained"``) back to back at the power cap; :func:`fused_swiglu.configs.choose_config`
says where each kind applies. The device's ``energy_us_per_byte``, ``l2_reuse_bytes`` and
``power_from_m`` (optional) set the cost model's power term (:mod:`fused_swiglu.cost_model`).

Optional, the launches timed at the power cap (``fused-swiglu tune --sustained``)::

     "sustained": {"from_m": 2048, "launches": {"packed_pingpong_128x192x64_2x1@2:4":
                                                {"tile_us": ..., "k_tile_us": ..., "cells": 45}, ...}}

A launch key is ``<config>@<raster>:<swizzle>`` (:func:`launch_key`). From ``from_m`` tokens on, the
choice ranks the launches listed for the kernel and accumulation by these costs
(:func:`fused_swiglu.cost_model.predict_sustained_us`). The section may also hold ``"unfused":
{"us_per_gflop": ..., "us_per_mb": ..., "cells": ...}``: the unfused path's time there (PyTorch's two GEMMs
and ``silu(g) * u``, :func:`fused_swiglu.cost_model.predict_unfused_us`), by which a patched block runs
the unfused path where it is predicted faster (:func:`fused_swiglu.configs.unfused_faster`). A file may
hold only ``sustained`` (and ``overrides``), without ``device`` and ``configs``: those then come from the
reference GPU's file (``costs_from`` names it).

Optional, what the GPU reported when it was tuned (``tune`` writes it; :class:`Reports`)::

     "reports": {"num_sms": 132, "sm_mhz": 1980.0, "memory_gbps": 3352.3, "l2_bytes": 52428800.0}

A GPU without a file of its own takes the data of the GPU whose file's reports match its own: the same SM
count, SM clock and memory bandwidth each within :data:`NEAR` (the closest such; its overrides do not
apply); where no file's reports match, the reference GPU's costs as above, scaled to what this GPU reports
where it is visible (:func:`scaled`: times per tile by the SM clocks' ratio, bandwidths by the memory
bandwidths', the L2 terms by the L2 sizes' where both are known; ``l2_bytes`` may be left out).

Optional, where the fused training step was measured slower than the block's own (:class:`TrainingRule`,
:func:`fused_swiglu.configs.training_unfused`)::

     "training": {"unfused_from_m": 8192, "unfused_from_h": 3584, "source": "docs/results/..."}

A patched block's call that autograd records, with at least ``unfused_from_m`` tokens and a hidden size of
at least ``unfused_from_h``, runs the block's own forward (and so PyTorch's backward) there.

Size bands of the families chosen by one band each (``fused-swiglu tune --families``;
:data:`fused_swiglu.catalog.BANDED_FAMILIES`: the e4m3 kernels by M, the training kernels by H) live in a file
of their own per GPU, ``<gpu>_families.json`` (user's folder first, then the package's), so that writing them
never changes which costs a GPU's 16-bit choice reads (:func:`load_bands`)::

     {"format": 1, "gpu": "NVIDIA H200",
      "families": [{"kernel": "packed_fp8", "accumulation": "fast", "by": "M", "source": "...",
                    "bands": [{"up_to": 16, "config": "packed_fp8_swapab_pingpong_64x16x128_1x1_e4m3"},
                              {"up_to": 128, "config": "packed_fp8_pingpong_64x128x128_1x1_e4m3"},
                              {"up_to": null, "config": "packed_fp8_pingpong_128x192x128_2x1_e4m3",
                               "raster": 0, "swizzle": 1}]}, ...]}

Each band serves sizes above the previous band's ``up_to`` up to its own (``null``: every larger size; the
last band's, and only its). Names as :func:`fused_swiglu.catalog.banded_names` gives them (e4m3 names in full,
training names without their dtype suffix: one band serves bf16 and fp16). The block-scaled family's bands are
filed under ``"fast"``: its mainloop promotes every k-tile whichever accumulation a call asks for. A GPU's bands
serve that GPU (by the device name CUDA reports) and no other; elsewhere each family's built-in rule
(:mod:`fused_swiglu.configs`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path

from . import catalog
from .cost_model import ConfigCosts, DeviceCosts, UnfusedCosts

FORMAT = 1
# An override is kept only where the tuned config ran faster than the model's pick by more than this
# factor (the model's pick's median time over the override's).
OVERRIDE_GAIN = 1.02
REFERENCE = ("NVIDIA H200", "bf16")
# Reports of two GPUs match where the SM counts are equal and the SM clocks and memory bandwidths each
# differ by at most this fraction (:meth:`Reports.distance`).
NEAR = 0.10
# From this M on the GPU runs at its power cap: the benchmark's sustained timing protocol
# (fused_swiglu.bench.timing). The config choice reads the same threshold from the tuned data
# (its device's power_from_m, by default this value).
SUSTAINED_FROM_M = 1024
PACKAGE_DIR = Path(__file__).resolve().parent / "tuned"
DTYPES = catalog.DTYPES


@dataclass(frozen=True)
class Override:
    """A measured choice for one problem where it beat the model's pick by more than the tune rule."""

    config: str  # library name without the dtype suffix
    raster: int = 0
    swizzle: int = 1
    protocol: str = "interleaved"  # how it was timed (module docstring)


@dataclass(frozen=True)
class Reports:
    """What a GPU reports about itself (``torch.cuda.get_device_properties``): its SM count, its SM
    clock's maximum in MHz, its memory's peak bandwidth in GB/s (two transfers per memory clock over
    the bus width) and its L2 cache in bytes (0: not reported)."""

    num_sms: int
    sm_mhz: float
    memory_gbps: float
    l2_bytes: float = 0.0

    @classmethod
    def of(cls, props) -> Reports:
        """From a ``torch.cuda.get_device_properties`` result (clocks in kHz, bus width in bits)."""
        return cls(int(props.multi_processor_count), props.clock_rate / 1e3,
                   round(2 * props.memory_clock_rate * 1e3 * props.memory_bus_width / 8 / 1e9, 1),
                   float(getattr(props, "L2_cache_size", 0)))

    def distance(self, other: Reports) -> float | None:
        """The larger relative difference of the SM clocks and of the memory bandwidths, as fractions of
        ``other``'s; None where the SM counts differ."""
        if self.num_sms != other.num_sms:
            return None
        return max(abs(self.sm_mhz / other.sm_mhz - 1), abs(self.memory_gbps / other.memory_gbps - 1))

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def visible_properties(gpu: str):
    """``torch.cuda.get_device_properties`` of the first visible CUDA device named ``gpu`` (None where there is
    none)."""
    import torch

    if not gpu or not torch.cuda.is_available():
        return None
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        if props.name == gpu:
            return props
    return None


@functools.lru_cache(maxsize=16)
def reported(gpu: str) -> Reports | None:
    """The :class:`Reports` of a visible CUDA device named ``gpu`` (None where there is none)."""
    props = visible_properties(gpu)
    # older PyTorch releases do not report the clocks and bus width
    fields = ("multi_processor_count", "clock_rate", "memory_clock_rate", "memory_bus_width")
    return Reports.of(props) if props is not None and all(hasattr(props, f) for f in fields) else None


@dataclass(frozen=True)
class TrainingRule:
    """Where a patched block's training step runs the block's own (unfused) forward and backward: from
    ``from_m`` tokens at a hidden size of at least ``from_h``, measured slower fused (``source``: the
    results file it was read from)."""

    from_m: int
    from_h: int
    source: str = ""


@dataclass(frozen=True)
class Band:
    """One size band of a family's tuned choice: sizes up to ``up_to`` (None: every larger size) above the
    previous band's run ``config`` (:func:`fused_swiglu.catalog.banded_names`) with ``raster`` and
    ``swizzle``."""

    up_to: int | None
    config: str
    raster: int = 0
    swizzle: int = 1

    def serves(self, size: int) -> bool:
        """Whether ``size`` is at most this band's bound."""
        return self.up_to is None or size <= self.up_to

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def parse_bands(entry: dict) -> tuple[tuple[str, str], tuple[Band, ...]]:
    """((kernel, accumulation), bands) of one entry of a bands file's ``families`` (module docstring).

    Raises:
        ValueError: an unknown family or accumulation, ``by`` not the family's size, no bands, bounds not
            increasing positive ints with ``null`` last (and only last), or a config not of the family's
            banded names, naming the field.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("bands"), list):
        raise ValueError(f"families: each entry must be an object with a list of bands; got {entry!r}"[:300])
    kernel, accumulation = str(entry["kernel"]), str(entry.get("accumulation", "fast"))
    if kernel not in catalog.BANDED_FAMILIES:
        raise ValueError(f"families: kernel must be one of {', '.join(catalog.BANDED_FAMILIES)}; got {kernel!r}")
    by = catalog.BANDED_FAMILIES[kernel][0]
    if entry.get("by", by) != by:
        raise ValueError(f"families: {kernel} is chosen by {by}; got by={entry.get('by')!r}")
    names = catalog.banded_names(kernel, accumulation) if accumulation in ("fast", "promoted") else ()
    if not names:
        raise ValueError(f"families: {kernel} has no configs of accumulation {accumulation!r}")
    for b in entry["bands"]:
        if not isinstance(b, dict):
            raise ValueError(f"families: {kernel}'s bands must be objects; got {b!r}"[:300])
        for name in ("up_to", "raster", "swizzle"):
            if b.get(name) is not None and (type(b[name]) is not int):
                raise ValueError(f"families: {kernel}'s band {name} must be an integer; got {b[name]!r}")
    bands = tuple(Band(b.get("up_to"), str(b["config"]), b.get("raster", 0), b.get("swizzle", 1))
                  for b in entry["bands"])
    bounds = [b.up_to for b in bands]
    if not bands or bounds[-1] is not None or None in bounds[:-1] or any(
            lo >= hi for lo, hi in zip([0, *bounds[:-2]], bounds[:-1])):
        raise ValueError(f"families: {kernel}'s bands must have increasing positive up_to bounds and null last "
                         f"(every larger {by}); got {bounds}")
    for b in bands:
        if b.config not in names:
            raise ValueError(f"families: {kernel} ({accumulation}) band config must be one of {', '.join(names)}; "
                             f"got {b.config!r}")
        if b.raster not in catalog.RASTERS or b.swizzle not in catalog.SWIZZLES:
            raise ValueError(f"families: raster must be 0, 1 or 2 and swizzle 1, 2, 4 or 8; got {b.raster}, "
                             f"{b.swizzle}")
    return (kernel, accumulation), bands


@dataclass(frozen=True)
class Tuning:
    """The data :func:`load` found for one GPU and dtype.

    costs: config name without dtype -> :class:`ConfigCosts`. smem_bytes: config name -> shared
    memory per CTA. overrides: (kernel, accumulation, M, N, K) -> :class:`Override`. source: the file
    read (None: none). overrides_apply: False where the file is another GPU's (reference costs only).
    reports: what the file's GPU reported (None: not recorded). matched: the GPU whose file serves this
    one because their reports match ("" where the file is this GPU's own or the reference's).
    """

    gpu: str
    dtype: str
    device: DeviceCosts
    costs: dict[str, ConfigCosts]
    smem_bytes: dict[str, int] = field(default_factory=dict)
    overrides: dict[tuple[str, str, int, int, int], Override] = field(default_factory=dict)
    source: Path | None = None
    overrides_apply: bool = True
    sustained: dict[str, ConfigCosts] = field(default_factory=dict)
    sustained_from_m: int = 0
    unfused: UnfusedCosts | None = None
    costs_from: Path | None = None
    reports: Reports | None = None
    matched: str = ""
    training_unfused: TrainingRule | None = None
    scaled_to: Reports | None = None  # the reports the costs were scaled to (:func:`scaled`), None: as measured
    # where scaled to a GPU of another memory bandwidth: microseconds each byte a launch moves through DRAM
    # takes there beyond what it took on the measured GPU (:func:`scaled`; 0: as measured)
    us_per_dram_byte: float = 0.0

    def sustained_launches(self, M: int) -> dict[str, ConfigCosts]:
        """The sustained costs by launch key that serve M tokens (none below ``sustained_from_m``)."""
        return self.sustained if self.sustained and M >= self.sustained_from_m else {}

    def override(self, kernel: str, accumulation: str, M: int, N: int, K: int) -> Override | None:
        """The override for this exact problem, or None (whether it applies: :mod:`fused_swiglu.configs`)."""
        if not self.overrides_apply:
            return None
        return self.overrides.get((kernel, accumulation, M, N, K))


def launch_key(config: str, raster: int, swizzle: int) -> str:
    """``"packed_pingpong_128x192x64_2x1", 2, 4`` -> ``"packed_pingpong_128x192x64_2x1@2:4"``."""
    return f"{config}@{raster}:{swizzle}"


def split_launch_key(key: str) -> tuple[str, int, int]:
    """(config, raster, swizzle) of a :func:`launch_key`.

    Raises:
        ValueError: not of the form ``<config>@<raster>:<swizzle>``.
    """
    try:
        config, launch = catalog.split_config(key)
    except (TypeError, ValueError) as e:
        raise ValueError(f"a launch key is <config>@<raster>:<swizzle>; got {key!r} ({e})") from None
    if launch is None:
        raise ValueError(f"a launch key is <config>@<raster>:<swizzle>; got {key!r}")
    return config, *launch


def gpu_slug(gpu: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200"`` (the file-name form of a device name)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "unknown"


def file_name(gpu: str, dtype: str) -> str:
    return f"{gpu_slug(gpu)}_{dtype}.json"


def user_dir() -> Path:
    """The user's tuning folder: ``tuning`` in the build cache folder (``FUSED_SWIGLU_CACHE_DIR``)."""
    from .env import cache_dir

    return cache_dir() / "tuning"


# the device fields a tuned file may leave out, and their types
_OPTIONAL_DEVICE = {"l2_bytes": float, "blend": float, "energy_us_per_byte": float, "l2_reuse_bytes": float,
                    "power_from_m": int}


def parse(data: dict, source: Path | None = None, base: Tuning | None = None) -> Tuning:
    """A :class:`Tuning` from a file's JSON object; ``device`` and ``configs`` from ``base`` where the
    file has neither.

    Raises:
        ValueError: another format, or a field missing or of the wrong type (naming it).
    """
    if data.get("format") != FORMAT:
        raise ValueError(f"tuning data {source}: format must be {FORMAT}; got {data.get('format')!r}")
    try:
        if base is not None and "device" not in data and "configs" not in data:
            device, costs, smem = base.device, base.costs, base.smem_bytes
        else:
            dev = data["device"]
            optional = {k: cast(dev[k]) for k, cast in _OPTIONAL_DEVICE.items() if k in dev}  # else DeviceCosts' defaults
            device = DeviceCosts(float(dev["launch_us"]), float(dev["hbm_gbps"]), float(dev["sm_gbps"]), **optional)
            costs = {name: ConfigCosts(float(c["tile_us"]), float(c["k_tile_us"]), float(c.get("gbps", 0.0)))
                     for name, c in data["configs"].items()}
            smem = {name: int(c["smem_bytes"]) for name, c in data["configs"].items() if "smem_bytes" in c}
            base = None
        overrides = {
            (o["kernel"], o["accumulation"], int(o["M"]), int(o["N"]), int(o["K"])): Override(
                o["config"], int(o.get("raster", 0)), int(o.get("swizzle", 1)), str(o.get("protocol", "interleaved")))
            for o in data.get("overrides", [])
        }
        sustained, from_m, unfused = {}, 0, None
        if "sustained" in data:
            section = data["sustained"]
            if "unfused" in section:
                unfused = UnfusedCosts(float(section["unfused"]["us_per_gflop"]), float(section["unfused"]["us_per_mb"]))
            from_m = int(section["from_m"])
            for key, c in section["launches"].items():
                split_launch_key(key)
                sustained[key] = ConfigCosts(float(c["tile_us"]), float(c["k_tile_us"]))
        reports = None
        if "reports" in data:
            r = data["reports"]
            reports = Reports(int(r["num_sms"]), float(r["sm_mhz"]), float(r["memory_gbps"]), float(r.get("l2_bytes", 0)))
        training = None
        if "training" in data:
            t = data["training"]
            training = TrainingRule(int(t["unfused_from_m"]), int(t["unfused_from_h"]), str(t.get("source", "")))
        return Tuning(str(data["gpu"]), str(data["dtype"]), device, costs, smem, overrides, source,
                      sustained=sustained, sustained_from_m=from_m, unfused=unfused,
                      costs_from=base.source if base is not None else None, reports=reports,
                      training_unfused=training)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"tuning data {source}: {type(e).__name__}: {e}") from None


def _read(path: Path, base: Callable[[], Tuning] | None = None) -> Tuning | None:
    """The file at ``path`` (None if there is none); one without ``device`` and ``configs`` takes them
    from ``base()``."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    partial = isinstance(data, dict) and "device" not in data and "configs" not in data
    return parse(data, path, base() if partial and base is not None else None)


def _dirs() -> list[Path]:
    return [user_dir(), PACKAGE_DIR]


@functools.lru_cache(maxsize=64)
def load(gpu: str, dtype: str) -> Tuning:
    """The tuned data for GPU ``gpu`` (its device name; "" for none) and ``dtype`` ("bf16"/"fp16").

    Raises:
        ValueError: ``dtype`` unknown, or a file that is not valid tuning data (naming the file).
        FileNotFoundError: not even the reference GPU's data is installed.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}; got {dtype!r}")
    if gpu:
        for d in _dtype_order(dtype):
            for folder in _dirs():
                found = _read(folder / file_name(gpu, d), base=lambda: _reference(dtype))
                if found is not None:
                    return found
        near = _matching(gpu, dtype)
        if near is not None:
            return dataclasses.replace(near, gpu=gpu, dtype=dtype, overrides_apply=False, matched=near.gpu)
    found = _reference(dtype)
    mine = reported(gpu) if gpu else None
    if mine is not None and found.reports is not None and min(mine.sm_mhz, mine.memory_gbps, found.reports.sm_mhz,
                                                              found.reports.memory_gbps) > 0:
        found = scaled(found, mine)  # (a report of 0, e.g. an unknown memory clock, leaves the costs as measured)
    return dataclasses.replace(found, gpu=gpu, dtype=dtype, overrides_apply=False)


def scaled(data: Tuning, mine: Reports) -> Tuning:
    """``data`` (measured on a GPU whose :class:`Reports` it holds) as a first estimate for a GPU reporting
    ``mine``: every time per tile, per k-tile, per launch and per GFLOP times ``data``'s SM clock over ``mine``'s,
    every bandwidth (HBM, a config's at decode sizes) and time per MB by the memory bandwidths' ratio, one CTA's
    bandwidth by the smaller of the two ratios (its issue rate and the memory both bound it); the power terms as
    they are. The sustained costs, measured at the power cap where every launch also streams its DRAM
    bytes, take the clock's ratio, and each DRAM byte a launch moves costs ``us_per_dram_byte`` more: the
    difference of the two GPUs' times per byte (``1 / mine - 1 / data's`` memory bandwidth), with no overlap
    assumed (:func:`fused_swiglu.configs.sustained_ranking` adds it by the launch's
    :func:`fused_swiglu.cost_model.dram_traffic`). The L2 that traffic model lets a wave reuse takes the ratio
    of the two GPUs' L2 sizes where both report one. The SM count is the caller's (the choice's ``num_sms``). A
    first-order estimate, not a measurement: ``fused-swiglu tune`` measures the GPU's own."""
    clock = data.reports.sm_mhz / mine.sm_mhz  # > 1: this GPU computes slower
    memory = mine.memory_gbps / data.reports.memory_gbps  # < 1: this GPU streams slower
    l2 = mine.l2_bytes / data.reports.l2_bytes if mine.l2_bytes and data.reports.l2_bytes else 1.0
    dev = data.device
    device = dataclasses.replace(dev, launch_us=dev.launch_us * clock, hbm_gbps=dev.hbm_gbps * memory,
                                 sm_gbps=dev.sm_gbps * min(memory, 1 / clock), l2_bytes=dev.l2_bytes * l2,
                                 l2_reuse_bytes=dev.l2_reuse_bytes * l2)
    costs = {name: ConfigCosts(c.tile_us * clock, c.k_tile_us * clock, c.gbps * memory)
             for name, c in data.costs.items()}
    sustained = {key: ConfigCosts(c.tile_us * clock, c.k_tile_us * clock, c.gbps) for key, c in data.sustained.items()}
    unfused = (UnfusedCosts(data.unfused.us_per_gflop * clock, data.unfused.us_per_mb / memory)
               if data.unfused is not None else None)
    us_per_dram_byte = 1e-3 / mine.memory_gbps - 1e-3 / data.reports.memory_gbps  # GB/s = 1e3 bytes per us
    return dataclasses.replace(data, device=device, costs=costs, sustained=sustained, unfused=unfused, scaled_to=mine,
                               us_per_dram_byte=us_per_dram_byte)


def _matching(gpu: str, dtype: str) -> Tuning | None:
    """The data of the GPU whose file's reports match ``gpu``'s (:data:`NEAR`): the closest among the
    files of the user's and the package's folders for ``dtype``, else for the other dtypes. None where
    ``gpu`` is not visible or no file matches."""
    mine = reported(gpu)
    if mine is None:
        return None
    best: tuple[float, Tuning] | None = None
    for d in _dtype_order(dtype):
        for folder in _dirs():
            for path in sorted(folder.glob(f"*_{d}.json")) if folder.is_dir() else ():
                found = _read(path, base=lambda: _reference(dtype))
                if found is None or found.reports is None:
                    continue
                distance = mine.distance(found.reports)
                if distance is not None and distance <= NEAR and (best is None or distance < best[0]):
                    best = (distance, found)
        if best is not None:
            return best[1]
    return None


def _dtype_order(dtype: str) -> list[str]:
    """``dtype`` first, then the other dtypes (bf16 and fp16 GMMA run at one rate)."""
    return [dtype, *(d for d in DTYPES if d != dtype)]


def _reference(dtype: str) -> Tuning:
    """The reference GPU's data (:data:`REFERENCE`) for ``dtype``, else for the other dtype.

    Raises:
        FileNotFoundError: none is installed.
    """
    for d in _dtype_order(dtype):
        for folder in _dirs():
            found = _read(folder / file_name(REFERENCE[0], d))
            if found is not None:
                return found
    raise FileNotFoundError(f"no tuning data for {REFERENCE[0]} in {', '.join(map(str, _dirs()))}")


@dataclass(frozen=True)
class Bands:
    """A GPU's family bands (module docstring): (kernel, accumulation) -> bands, in size order; ``source``: the
    file read (None: none)."""

    families: dict[tuple[str, str], tuple[Band, ...]] = field(default_factory=dict)
    source: Path | None = None

    def band(self, kernel: str, accumulation: str, size: int) -> Band | None:
        """The band of banded family ``kernel`` serving ``size`` (its M or H), or None (no bands for it)."""
        return next((b for b in self.families.get((kernel, accumulation), ()) if b.serves(size)), None)


def bands_file_name(gpu: str) -> str:
    return f"{gpu_slug(gpu)}_families.json"


def parse_bands_file(data: dict, source: Path | None = None) -> Bands:
    """:class:`Bands` from a bands file's JSON object.

    Raises:
        ValueError: another format, or an entry :func:`parse_bands` refuses, naming the file.
    """
    try:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format must be {FORMAT}")
        entries = data.get("families", [])
        if not isinstance(entries, list):
            raise ValueError("families must be a list")
        return Bands(dict(parse_bands(entry) for entry in entries), source)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"tuned bands {source}: {type(e).__name__}: {e}") from None


@functools.lru_cache(maxsize=16)
def load_bands(gpu: str) -> Bands:
    """GPU ``gpu``'s bands (device name; "" for none): its ``<gpu>_families.json`` in the user's tuning folder,
    else in the package's; none for a GPU without one.

    Raises:
        ValueError: a file that is not valid (naming it).
    """
    if gpu:
        for folder in _dirs():
            path = folder / bands_file_name(gpu)
            if path.is_file():
                return parse_bands_file(json.loads(path.read_text()), path)
    return Bands()


# What clear() also runs: the caches of choices made from the data (fused_swiglu.configs registers its own).
_ON_CLEAR: list[Callable[[], None]] = []


def on_clear(forget: Callable[[], None]) -> None:
    """Have :func:`clear` call ``forget`` too (a cache of results computed from the tuned data)."""
    _ON_CLEAR.append(forget)


def clear() -> None:
    """Forget the files read (after ``fused-swiglu tune`` wrote one) and what was computed from them."""
    load.cache_clear()
    load_bands.cache_clear()
    for forget in _ON_CLEAR:
        forget()
