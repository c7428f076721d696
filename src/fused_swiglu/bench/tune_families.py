"""``fused-swiglu tune --families``: size bands for the families chosen by one band each (the e4m3 kernels by M,
the training kernels by H; :data:`fused_swiglu.catalog.BANDED_FAMILIES`).

Every config a family compiles is timed on each shape at each token count through its operator, with the
config named, in each launch the choice considers there (:func:`launch_names`: the default order, along M from
M = 256, swizzled orders from M = 2048; a swap-AB config only up to its token-tile bound), L2 flushed before
each call and input sets rotated: below M = 1024 CUDA-event medians of calls
taken in turn rep by rep (:func:`fused_swiglu.bench.timing.time_interleaved`), from there on by the sustained
protocol (after one heat soak, each config's CUDA-graph replays back to back at the power cap,
:func:`fused_swiglu.bench.timing.time_sustained`). For each size (M, or a shape's H) the pick is the config
or launch with the lowest geometric mean, over that size's cells, of its time over the cell's fastest, each cell
priced as the choice runs the band there (:func:`picks`): a launch not legal at a cell (a swizzle's padding past
the grid) at its config's default launch, as :func:`fused_swiglu.configs.family_choice` falls back; a config
with no legal launch at some cell (a Pingpong 2 x 1 cluster on an odd count of token tiles) is not picked for
that size. Consecutive sizes with the
same pick make one band (:func:`bands_from`), written into the GPU's bands file, ``<gpu>_families.json``
(:func:`fused_swiglu.tuning.load_bands`), each band with its config's raster and swizzle, from which
:func:`fused_swiglu.configs.family_choice` takes them.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import catalog, configs, fp8, tuning
from .defaults import TUNE_FAMILY_TOKENS as FAMILY_TOKENS, TUNE_SUSTAINED_SECONDS
from .defaults import TUNE_TRAINING_TOKENS as TRAINING_TOKENS
from .shapes import MlpShape, check_family_shapes


def picks(cells: dict[int, list[dict[str, float]]], legal_at: Callable[[str, int, int], bool] | None = None,
          widths: dict[int, list[tuple[int, int]]] | None = None) -> dict[int, str]:
    """size -> the config or launch with the lowest geometric mean of time / the cell's fastest over that size's
    cells (``cells``: size -> one ``{config or launch: ms}`` per cell). Each candidate is priced per cell as the
    choice runs its band there (:func:`fused_swiglu.configs.family_choice`). With ``legal_at(name, M, N)`` and
    ``widths`` (size -> each cell's (M, N)): by its own time where the choice would run it; else, for a launch
    ``<name>@<raster>:<swizzle>``, by its config's default launch (raster 0, swizzle 1) where the choice would run
    that; a candidate the choice would run but that was not timed there has no price. Without them, a launch not
    timed in a cell is taken as one the choice does not run there. A candidate without a price in every cell of a
    size is not picked there; a size where none has one has no pick."""
    out = {}
    for size, timed in sorted(cells.items()):
        cell_widths = widths[size] if legal_at is not None and widths is not None else [None] * len(timed)

        def runs(name: str, t: dict[str, float], width: tuple[int, int] | None) -> bool:
            return name in t if width is None else legal_at(name, *width)

        def price(candidate: str, t: dict[str, float], width: tuple[int, int] | None) -> float | None:
            if runs(candidate, t, width):
                return t.get(candidate)
            base = catalog.split_config(candidate)[0]
            return t.get(base) if base != candidate and runs(base, t, width) else None

        scores = {}
        for c in sorted(set().union(*timed)) if timed else ():
            prices = [price(c, t, w) for t, w in zip(timed, cell_widths)]
            if all(p is not None for p in prices):
                scores[c] = math.fsum(math.log(p / min(t.values())) for p, t in zip(prices, timed)) / len(timed)
        if scores:
            out[size] = min(scores, key=lambda c: (scores[c], c))
    return out


def bands_from(chosen: dict[int, str]) -> list[tuning.Band]:
    """Bands from per-size picks (config names, or launches ``<name>@<raster>:<swizzle>``): each run of
    consecutive sizes with one pick, bounded by its largest size; the last band open (every larger size).

    Raises:
        ValueError: no picks.
    """
    if not chosen:
        raise ValueError("no size has a pick: nothing was timed")
    sizes = sorted(chosen)
    bands: list[tuning.Band] = []
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        if last or chosen[sizes[i + 1]] != chosen[size]:
            name, launch = catalog.split_config(chosen[size])
            bands.append(tuning.Band(None if last else size, name, *(launch or (0, 1))))
    return bands


def launch_names(name: str, M: int, N: int) -> list[str]:
    """The launches of banded config ``name`` timed at M tokens and N = I: those the choice considers there
    (:func:`fused_swiglu.configs.launch_options`: its default order, along M from M = 256, swizzled orders from
    M = 2048; legal ones; none for a swap-AB config past its token tiles), as the config name for the default
    launch (raster 0, swizzle 1) and ``<name>@<raster>:<swizzle>`` for the others."""
    return [name if (v.raster, v.swizzle) == (0, 1) else tuning.launch_key(name, v.raster, v.swizzle)
            for v in configs.launch_options(configs.banded_config(name), M, N)]


def legal_at(name: str, M: int, N: int) -> bool:
    """Whether the choice would run banded config ``name`` (:func:`fused_swiglu.catalog.banded_names`), or a
    launch of it (``<name>@<raster>:<swizzle>``), at M tokens and N = I (:func:`fused_swiglu.configs.considered`:
    the launches :func:`launch_names` times there)."""
    return configs.considered(configs.banded_config(name), M, N)


@dataclass(frozen=True)
class TrainingSet:
    """One input set of the training kernels: the training step's (:class:`fused_swiglu.bench.backward.StepSet`:
    x (M, H), w_gate and w_up (I, H), w_packed (2I, H), w_down (H, I), dz (M, H); read detached, the kernels
    run without autograd) and the pre-activations gu (M, 2I) that dSwiGLU reads."""

    step: object
    gu: torch.Tensor


def training_sets(M: int, H: int, I: int, dtype: torch.dtype, device: torch.device, l2_bytes: int) -> list[TrainingSet]:
    """The training step's input sets (:func:`fused_swiglu.bench.backward.make_sets`), each with its gu."""
    from .backward import make_sets

    return [TrainingSet(s, torch.randn(M, 2 * I, device=device).to(dtype))
            for s in make_sets(M, H, I, dtype, device, l2_bytes)]


def family_call(kernel: str, name: str, s) -> Callable[[], object]:
    """One call of ``kernel``'s operator running config ``name`` (full name) on input set ``s``
    (:class:`fused_swiglu.bench.fp8.Fp8Set` with block operands, or :class:`TrainingSet`)."""
    from .fp8 import dual_operands

    ops = torch.ops.fused_swiglu
    if kernel == "packed_fp8":
        return lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale, config=name)
    if kernel == "packed_fp8_e4m3out":
        return lambda: fp8.swiglu_packed_fp8(s.x, s.w_packed, s.x_scale, s.w_scale, out_dtype=fp8.E4M3, config=name)
    if kernel == "packed_fp8_block":
        b = s.block
        return lambda: fp8.swiglu_packed_fp8(b.x, b.w_packed, b.x_scale, b.w_scale, scaling="block", config=name)
    if kernel == "dual_fp8":
        args = dual_operands(s)
        return lambda: fp8.swiglu_fp8(*args, config=name)
    if kernel in ("dual_store", "packed_store", "dswiglu"):
        st = s.step
        x, wg, wu, wp, wd, dz = (t.detach() for t in (st.x, st.w_gate, st.w_up, st.w_packed, st.w_down, st.dz))
    if kernel == "dual_store":
        return lambda: ops.swiglu_dual_store(x, wg, wu, name)
    if kernel == "packed_store":
        return lambda: ops.swiglu_packed_store(x, wp, name)
    if kernel == "dswiglu":
        return lambda: ops.dswiglu(dz, wd, s.gu, name)
    raise ValueError(f"kernel must be one of {', '.join(catalog.BANDED_FAMILIES)}; got {kernel!r}")


def runnable(calls: dict[str, list[Callable[[], object]]], say: Callable[..., None],
             where: str) -> dict[str, list[Callable[[], object]]]:
    """The entries of ``calls`` whose first call runs and, for a launch ``<key>@<raster>:<swizzle>``, gives
    bit for bit what its config's default launch ``<key>`` gives on the same inputs (the tile order changes
    which CTA computes a tile, never its result). Each other entry is left out with a line saying why: the
    library declining a problem (such a config has no time there and is not picked for its size), a launch
    whose output differs (a kernel bug at that launch, which no band may then pick), or a launch whose default
    launch did not run (nothing to check it against). One config at a time: only its default launch's output
    is kept while its launches are compared.

    Raises:
        torch.OutOfMemoryError: as the call raised it (not a config the library declines).
    """
    by_config: dict[str, list[str]] = {}
    for key in calls:
        by_config.setdefault(key.partition("@")[0], []).append(key)
    kept = set()
    for base, keys in by_config.items():
        default = None
        for key in sorted(keys, key=lambda k: k != base):  # the default launch first
            try:
                result = _bits(calls[key][0]())
            except torch.OutOfMemoryError:
                raise
            except (RuntimeError, ValueError) as e:
                say(f"{where}: {key} not timed: {str(e).splitlines()[0][:160]}", highlight=False)
                continue
            if key == base:
                default = result
            elif default is None:
                say(f"{where}: {key} not timed: its config's default launch did not run, so its output is "
                    "unchecked", highlight=False)
                continue
            elif not _same(result, default):
                say(f"{where}: {key} not timed: its output differs from {base}'s on the same inputs", highlight=False)
                continue
            kept.add(key)
    return {key: fns for key, fns in calls.items() if key in kept}


def _bits(result: object) -> list[torch.Tensor]:
    """A call's tensors (one, or those of a tuple), each as integers of its element size: compared bit for bit."""
    tensors = [result] if isinstance(result, torch.Tensor) else [t for t in (result or ()) if isinstance(t, torch.Tensor)]
    kinds = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return [t.contiguous().view(kinds[t.element_size()]).clone() for t in tensors]


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


def full_name(kernel: str, name: str, dtype: torch.dtype) -> str:
    """A banded name (or a launch of it, ``<name>@<raster>:<swizzle>``) as the library's operators take it:
    e4m3 names as they are, training names with ``dtype``'s suffix (before the launch)."""
    base, launch = catalog.split_config(name)
    full = catalog.library_name(kernel, base, configs.DTYPE_SUFFIX[dtype])
    return full if launch is None else tuning.launch_key(full, *launch)


def write_families(path: Path, entries: list[dict], gpu: str) -> dict:
    """Put ``entries`` (a bands file's ``families`` entries, :mod:`fused_swiglu.tuning`) into the bands file
    ``path`` (atomic replace), replacing the entries of the same kernel and accumulation: into the file where it
    exists, else into a copy of the package's bands file for this GPU where there is one (its other families'
    bands still serve), else into a new file. Returns what it wrote."""
    from .tune import replace_tuned_file

    package = tuning.PACKAGE_DIR / tuning.bands_file_name(gpu)
    source = path if path.is_file() else package if package.is_file() else None
    data = json.loads(source.read_text()) if source is not None else {"format": tuning.FORMAT, "gpu": gpu}
    new = {(e["kernel"], e.get("accumulation", "fast")) for e in entries}
    data["families"] = [e for e in data.get("families", []) if (e["kernel"], e.get("accumulation", "fast")) not in new]
    data["families"] += entries
    return replace_tuned_file(path, data)


def run_families(shapes: Sequence[MlpShape], families: Sequence[tuple[str, str]], dtype: torch.dtype, out_dir: Path,
                 reps: int = 10, tokens: Sequence[int] | None = None, console=None,
                 device: torch.device | None = None, seconds: float = TUNE_SUSTAINED_SECONDS,
                 fresh: bool = False) -> list[Path]:
    """Time every config of each of ``families`` ((kernel, accumulation) pairs of
    :data:`fused_swiglu.bench.defaults.TUNE_FAMILY_GROUPS`) on ``shapes`` at
    ``tokens`` (default :data:`FAMILY_TOKENS` for the e4m3 families, :data:`TRAINING_TOKENS` for the training
    ones; the training kernels in ``dtype``), pick a config per size and write the bands into ``out_dir``'s bands
    file for this GPU (``<gpu>_families.json``; a family no config could be picked for at any size is left out,
    with a line saying so). Returns [that file]. ``device``: the CUDA device to tune (None: the current one).
    Cells of M >= :data:`fused_swiglu.tuning.SUSTAINED_FROM_M` are timed by the sustained protocol (after one heat
    soak, each config's CUDA-graph replays back to back for ``seconds`` at the power cap), the others interleaved
    ``reps`` times. Each cell's timings are saved as it is
    done in ``<gpu>_families.progress.json`` in ``out_dir``, and a run with the same identity (library
    version, GPU, dtype, families, shapes, tokens, reps, seconds) continues from there, unless ``fresh``.

    Raises:
        RuntimeError: no CUDA device, or another tune holds this GPU's files. ValueError: reps below 1, a shape
            whose sizes a family cannot take (:func:`fused_swiglu.bench.shapes.check_family_shapes`).
    """
    from .. import _lib, _version
    from .tune import Progress, exclusive

    if reps < 1:
        raise ValueError(f"reps must be >= 1; got reps={reps}")
    check_family_shapes(shapes, families)
    if device is None and not torch.cuda.is_available():
        raise RuntimeError("fused-swiglu tune needs a CUDA GPU")
    device = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    _, gpu, _ = _lib.target(device.index)
    stems = list(dict.fromkeys(tuning.file_name(gpu, d).removesuffix(".json")
                               for d in ("bf16", configs.DTYPE_SUFFIX[dtype])))
    identity = {"library_version": _version.__version__, "gpu": gpu, "dtype": configs.DTYPE_SUFFIX[dtype],
                "families": [list(f) for f in families],
                "shapes": [[s.hidden_size, s.intermediate_size] for s in shapes],
                "tokens": list(tokens or []), "reps": reps, "seconds": seconds, "launches": "launch_options"}
    with contextlib.ExitStack() as held:  # the files' locks for the whole run: no other tune times this GPU meanwhile
        for stem in stems:
            held.enter_context(exclusive(out_dir / f"{stem}.lock"))
        progress = Progress(out_dir / tuning.bands_file_name(gpu).replace(".json", ".progress.json"), identity)
        if fresh:
            progress.state["cells"] = {}
        return _timed_run(shapes, families, dtype, out_dir, reps, tokens, console, device, seconds, gpu, progress)


def _timed_run(shapes, families, dtype, out_dir, reps, tokens, console, device, seconds, gpu, progress) -> list[Path]:
    """:func:`run_families` on its checked arguments and device, its files locked; each cell's timings saved in
    ``progress`` as it is done, and a cell found there not timed again."""
    from . import power, timing
    from .fp8 import make_sets

    l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20) if device.type == "cuda" else 0
    flush = timing.flush_buffer(device)
    timing.warm_gpu(device)
    say = console.print if console is not None else (lambda *a, **k: None)
    monitor = None  # NVML's sampler, from the first cell timed at the power cap (after one heat soak)
    entries = []
    for is_fp8 in (True, False):
        mine = [f for f in families if (catalog.BANDED_FAMILIES[f[0]][0] == "M") == is_fp8]
        if not mine:
            continue
        # (kernel, accumulation) -> size -> one {config: ms} per cell; and each cell's (M, N)
        cells: dict[tuple[str, str], dict[int, list[dict[str, float]]]] = {f: {} for f in mine}
        widths: dict[int, list[tuple[int, int]]] = {}  # size -> each cell's (M, N = I)
        for shape in shapes:
            H, I = shape.hidden_size, shape.intermediate_size
            for M in tokens or (FAMILY_TOKENS if is_fp8 else TRAINING_TOKENS):
                key = f"{'fp8' if is_fp8 else 'training'}:{M},{I},{H}"
                if key not in progress.state["cells"]:
                    sets = (make_sets(M, H, I, device, l2, blockwise=any(k == "packed_fp8_block" for k, _ in mine))
                            if is_fp8 else training_sets(M, H, I, dtype, device, l2))
                    calls = runnable({f"{k}:{launch}": [family_call(k, full_name(k, launch, dtype), s) for s in sets]
                                      for k, a in mine for name in catalog.banded_names(k, a)
                                      for launch in launch_names(name, M, I)}, say, f"{shape.model} M={M}")
                    if M >= tuning.SUSTAINED_FROM_M:  # at the power cap, as the benchmark times large M
                        if monitor is None:
                            monitor = power.Monitor(power.nvml_index(device))
                            timing.heat_soak(device, monitor)
                        timed = timing.time_sustained(timing.as_graph_replays(calls, device), device, monitor,
                                                      seconds, flush)
                    else:
                        timed = timing.time_interleaved(calls, device, warmup_ms=5.0, reps=reps, flush=flush)
                    progress.state["cells"][key] = {name: t.median_ms for name, t in timed.items()}
                    progress.save()
                    del sets, calls
                    say(f"{shape.model} M={M}: " + ", ".join(f"{name} {t.median_ms:.4f} ms"
                                                             for name, t in timed.items()), highlight=False)
                timed_ms = progress.state["cells"][key]
                size = M if is_fp8 else H
                widths.setdefault(size, []).append((M, I))
                for k, a in mine:
                    names = catalog.banded_names(k, a)
                    cells[k, a].setdefault(size, []).append(
                        {key.partition(":")[2]: ms for key, ms in timed_ms.items()
                         if key.partition(":")[0] == k and catalog.split_config(key.partition(":")[2])[0] in names})
        for (k, a), by_size in cells.items():
            chosen = picks(by_size, legal_at, widths)
            if not chosen:
                say(f"{k}{'' if a == 'fast' else '@' + a}: no config ran legally in every cell of any size; no bands "
                    "written (its rule serves)", highlight=False)
                continue
            entries.append({"kernel": k, "accumulation": a, "by": catalog.BANDED_FAMILIES[k][0],
                            "source": f"fused-swiglu tune --families on {gpu}: {len(shapes)} shapes",
                            "bands": [b.as_json() for b in bands_from(chosen)],
                            "cells": {str(size): t for size, t in by_size.items()}})
    path = out_dir / tuning.bands_file_name(gpu)
    write_families(path, entries, gpu)
    return [path]
