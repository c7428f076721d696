"""The ``fused-swiglu`` command: ``bench``, ``accuracy``, ``info``, ``build``, ``tune``, ``sweep``, ``report``.

Also runs as ``python -m fused_swiglu.cli`` or ``python -m fused_swiglu``.

Exit status: 0 done (``info`` reports what it finds, a bad nvcc or cache setting included, and exits
0); 1 a bad option or environment variable, or a failed build (one line on stderr names the option
and the rule); 2 ``bench``, ``accuracy``, ``tune`` or ``sweep`` without a Hopper GPU; 3 ``bench``: a
method's result failed the check made before its shape is timed (``fused_swiglu.bench.check``; one
line names the method, the shape and the fault); 4 ``bench --e2e``: a mode failed on a model (its
row holds the error; the other modes ran); 130 interrupted; 141 stdout closed early
(e.g. piped into ``head``; quietly); 143 terminated (SIGTERM; a build under way stops its nvcc processes and removes its temporary files).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

EXIT_BAD_OPTION = 1
EXIT_NO_GPU = 2
EXIT_WRONG_OUTPUT = 3
EXIT_MODE_FAILED = 4
EXIT_STATUS = ("exit status: 0 done (info reports what it finds, a missing GPU or a bad nvcc or cache "
               "setting included, and exits 0); 1 a bad option or another bad environment variable "
               "(e.g. FUSED_SWIGLU_LIBRARY, FUSED_SWIGLU_JOBS), or a failed build; "
               "2 bench, accuracy, tune or sweep without a Hopper GPU; 3 bench: a method's result failed the check "
               "made before timing; 4 bench --e2e: a mode failed on a model (its row holds the error); "
               "130 interrupted; 141 stdout closed early; 143 terminated (SIGTERM)")


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1, like the commands' own option checks, so that exit status 2
    keeps one meaning: no Hopper GPU."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_OPTION, f"{self.prog}: error: {message}\n")


def _split(values: list[str] | None, option: str = "the option") -> list[str] | None:
    """Accept both ``--x a b`` and ``--x a,b``; a given option that names nothing, an empty item
    (``a,,b``) and an item named twice are errors."""
    if values is None:
        return None
    items = [v for item in values for v in item.split(",")]
    out = [v for v in items if v]
    if not out:
        raise ValueError(f"{option} names nothing; got {' '.join(values)!r}")
    if len(out) != len(items):
        raise ValueError(f"{option} has an empty item; got {' '.join(values)!r}")
    twice = _repeated(out)
    if twice:
        raise ValueError(f"{option} names {', '.join(map(repr, twice))} more than once")
    return out


def _repeated(values: list) -> list:
    """The values that occur more than once in ``values``, sorted."""
    return sorted({v for v in values if values.count(v) > 1})


def _known_config_names() -> set[str]:
    """The config names ``--config`` can name: :func:`fused_swiglu.configs.choosable_configs` in bf16 and
    fp16 (the library's inference configs; its training kernels are called by name only)."""
    from .configs import DTYPE_SUFFIX, choosable_configs

    return {c.name(dtype) for c in choosable_configs() for dtype in DTYPE_SUFFIX}


def _configs(value: str | None) -> str | None:
    """``--config``: comma-separated names, each one of the kernel library's inference configs
    (:func:`fused_swiglu.configs.choosable_configs`, in bf16 and fp16).

    Raises:
        ValueError: an empty item, or a name that is not a config of the library.
    """
    if value is None:
        return None
    names = _split([value], "--config")
    known = _known_config_names()
    from . import catalog

    e4m3 = [n for n in names if n in catalog.fp8_names() + catalog.fp8_out_names() + catalog.fp8_blockwise_names()
            + catalog.fp8_dual_names()]
    if e4m3:
        raise ValueError(f"--config: {', '.join(map(repr, e4m3))} is an e4m3 config, which --config does not take "
                         "(bench --fp8 times the e4m3 kernels; tools/fp8_tile_ab.py times named e4m3 configs)")
    unknown = [n for n in names if n not in known]
    if unknown:
        bf16 = sorted(n for n in known if n.endswith("_bf16"))
        raise ValueError(f"--config: {', '.join(map(repr, unknown))} is not a config of the kernel library; "
                         f"its configs are {', '.join(bf16)} and the same names ending in _fp16")
    return ",".join(names)


def _config_applies(config: str | None, methods: list[str], dtype: str) -> None:
    """``--config`` against ``--methods`` and ``--dtype``: a config name applies only to calls of its
    kernel, dtype and accumulation (``FUSED_SWIGLU_CONFIG``), so each name must match a selected
    fused method in the benchmark's dtype; otherwise the option would change nothing.

    Raises:
        ValueError: a name that no selected method would run (the message says which would).
    """
    from .bench.methods import FUSED_KERNEL
    from .configs import is_promoted

    for name in config.split(",") if config else []:
        kernel, accumulation = name.split("_", 1)[0], "promoted" if is_promoted(name) else "fast"
        runs = [m for m, ka in FUSED_KERNEL.items() if ka == (kernel, accumulation)]
        if not name.endswith("_" + dtype):
            raise ValueError(f"--config: {name!r} is a {name.rsplit('_', 1)[1]} config; the benchmark runs "
                             f"--dtype {dtype}, so it would change nothing")
        if not any(m in methods for m in runs):
            raise ValueError(f"--config: {name!r} runs only in method {runs[0]}, which --methods leaves out, "
                             "so it would change nothing")


def _tokens(values: list[str]) -> list[int]:
    """``--tokens`` values as positive integers.

    Raises:
        ValueError: a value is not an integer >= 1 (the message names it).
    """
    from .env import parse_positive_int

    from .bench.shapes import MAX_SIZE

    tokens = [parse_positive_int(v, "--tokens must be integers >= 1") for v in _split(values, "--tokens") or []]
    for v in tokens:
        if v > MAX_SIZE:
            raise ValueError(f"--tokens must be at most 2**31 - 1 (the kernels' 32-bit M); got {v}")
    twice = _repeated(tokens)
    if twice:  # also when written differently (01 and 1)
        raise ValueError(f"--tokens names {', '.join(map(str, twice))} more than once")
    return tokens


def _models(values: list[str] | None):
    """``--models`` as MlpShapes (None: the seven Qwen2.5 models).

    Raises:
        ValueError: an unknown name or a bad ``HxI``; the message starts with ``--models``.
    """
    from .bench import shapes

    names = _split(values, "--models")
    try:
        if names:  # each name resolved alone, so one shape named twice in different ways (7B and 7b,
            # or 7B and 3584x18944) is caught; an unknown name raises here
            found = [(m.hidden_size, m.intermediate_size) for n in names for m in shapes.find([n])]
            for i, hi in enumerate(found):
                first = found.index(hi)
                if first != i:
                    raise ValueError(f"{names[first]!r} and {names[i]!r} name the same shape (H={hi[0]}, I={hi[1]})")
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    return names


def _parser() -> argparse.ArgumentParser:
    from .bench.e2e import STEPS as E2E_STEPS
    from .bench.e2e_models import names as e2e_names
    from .bench.methods import METHODS
    from .bench.run import REPS, WARMUP_MS
    from .bench.shapes import TOKENS
    from .bench.timing import PROTOCOLS, SUSTAINED_FROM_M, SUSTAINED_SECONDS

    from ._version import __version__

    p = _Parser(prog="fused-swiglu", description="Fused GEMM + SwiGLU kernels for Hopper.", epilog=EXIT_STATUS)
    p.add_argument("--version", action="version", version=f"fused-swiglu {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("bench", help="time eager, cuBLAS, torch.compile and the fused kernels on Qwen2.5 or HxI shapes",
                       epilog=EXIT_STATUS)
    b.add_argument("--models", nargs="+", help="Qwen2.5 sizes, e.g. 0.5B 7B or 0.5B,7B, or MLP shapes as HxI, e.g. 4096x14336 "
                        "(default: the seven Qwen2.5 models); with --e2e, whole models: "
                        f"{','.join(e2e_names())} (default: all but the last, Qwen2.5-7B's dimensions "
                        "at 8 layers for the training mode)")
    b.add_argument("--tokens", nargs="+", help=f"token counts M (default: {','.join(map(str, TOKENS))})")
    b.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    b.add_argument("--methods", nargs="+", help=f"comma-separated subset of {','.join(METHODS)} (default: all; "
                        "quack only where the quack-kernels package is installed)")
    b.add_argument("--out", help="write results as JSON here, and as CSV beside it (--e2e: a PNG plot beside it; "
                        "--host-time: the JSON only)")
    b.add_argument("--config", help="kernel config name(s) overriding the heuristic (FUSED_SWIGLU_CONFIG)")
    b.add_argument("--warmup-ms", type=float, help=f"warm-up per method and shape, ms (default {WARMUP_MS:g})")
    b.add_argument("--rep", type=int, help=f"timed repetitions per method and shape (default {REPS})")
    b.add_argument("--cuda-graph", action="store_true",
                   help="time CUDA-graph replays of every method: GPU time without per-call host time")
    b.add_argument("--protocol", choices=PROTOCOLS, default=None,
                   help="how CUDA-graph replays are timed (also --fp8, --backward): 'sustained' = after a heat soak "
                        "to the power cap, each method back to back for --seconds with the SM clock and power "
                        "recorded (NVML); 'interleaved' = the methods alternated rep by rep (one clock and power "
                        f"state for all); 'auto' (default) = sustained from M = {SUSTAINED_FROM_M} on")
    b.add_argument("--seconds", type=float, default=None,
                   help=f"sustained protocol: seconds per method and cell (default {SUSTAINED_SECONDS:g})")
    b.add_argument("--e2e", action="store_true",
                   help="end to end: Hugging Face models (random weights, real sizes) stock vs fuse_swiglu_mlps, "
                        "in decode, CUDA-graph, torch.compile and prefill modes, with an accuracy step; --out also "
                        "writes a PNG plot beside the JSON (needs transformers; matplotlib for the plot)")
    b.add_argument("--e2e-modes", nargs="+", help=f"with --e2e: comma-separated subset of {','.join(E2E_STEPS)} "
                        "(default: all)")
    b.add_argument("--host-time", action="store_true",
                   help="host time per call (us) at M = 1 on Qwen2.5-0.5B's MLP: swiglu, swiglu_packed, torch.mm, "
                        "eager and a transformers Qwen2MLP stock and fused")
    b.add_argument("--backward", action="store_true",
                   help="training step of the whole MLP block (gate, up, down): forward + backward for eager, "
                        "torch.compile and the fused paths (--models, --tokens, default 512,2048,8192, --methods, "
                        "--rep, --warmup-ms, --cuda-graph and --out apply)")
    b.add_argument("--fp8", action="store_true",
                   help="the e4m3 kernels against the unfused FP8 path (torch._scaled_mm + silu-and-mul) and the bf16 "
                        "kernel (--models, default the Qwen2.5 and four FP8 checkpoints' shapes; --tokens, default "
                        "1,16,128,512,2048,8192; --methods, --rep, --warmup-ms and --out apply; CUDA graphs)")
    b.add_argument("--tp", type=int, metavar="N",
                   help="tensor parallel: the MLP block split over N GPUs (one process each, NCCL) against one GPU "
                        "(--models, default 32B,72B; --tokens, default 1,128,2048,8192; --rep and --out apply)")
    b.add_argument("--quick", action="store_true",
                   help="with --e2e: Qwen2.5-0.5B only and fewer repeats (a development run); with --host-time: "
                        "fewer calls")

    a = sub.add_parser("accuracy", help="eager and the fused kernels vs float64 on Qwen2.5 or HxI shapes, M = 2048",
                       epilog=EXIT_STATUS)
    a.add_argument("--out", help="write rows as JSON here, and as CSV beside it")
    a.add_argument("--dtype", choices=("bf16", "fp16", "e4m3"), default="bf16",
                   help="e4m3: the FP8 kernels and the unfused FP8 path (bf16 output) against float64 of the "
                        "dequantized operands (--models also takes the FP8 checkpoints' shapes of bench --fp8)")
    a.add_argument("--seed", type=int, help="random seed (default: fresh, printed)")
    a.add_argument("--models", nargs="+", help="Qwen2.5 sizes or HxI shapes, as for bench (default: all seven; "
                   "with --dtype e4m3 also the four FP8 checkpoints' shapes)")

    sub.add_parser("info", help="GPU, nvcc, cache and kernel library status")

    c = sub.add_parser("build", help="compile the kernel libraries into the cache ahead of time (no GPU needed)")
    c.add_argument("configs", nargs="*", help="config names to build (default: all; a first call builds the "
                   "config it needs)")
    c.add_argument("--force", action="store_true", help="rebuild even if the cache has this build")

    t = sub.add_parser("tune", help="measure the config choice's costs and overrides on this GPU (writes tuned data)")
    t.add_argument("--models", nargs="+", help="shapes to sweep: model names, Qwen2.5 sizes or HxI (default: the "
                   "sweep's public shapes and the seven Qwen2.5 ones)")
    t.add_argument("--tokens", nargs="+", help="token counts M (default: the sweep's, and for Qwen2.5 the benchmark's)")
    t.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    t.add_argument("--rep", type=int, default=10, help="timed repetitions per config and problem in the first "
                   "stage (default 10; the second stage times twice as many)")
    t.add_argument("--out-dir", help="folder of the tuned data (default: the user's tuning folder, read first)")
    t.add_argument("--fresh", action="store_true", help="start again instead of continuing a saved run")

    s = sub.add_parser("sweep", help="time the config choice against every compiled config, eager and cuBLAS")
    s.add_argument("--models", nargs="+", help="model names, Qwen2.5 sizes or HxI (default: the public shapes)")
    s.add_argument("--tokens", nargs="+", help="token counts M (default: 1,7,16,100,128,333,512,1000,2048,3000,6000,8192)")
    s.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    s.add_argument("--rep", type=int, default=10, help="timed repetitions per method and cell in the first stage "
                   "(default 10; the second stage times twice as many)")
    s.add_argument("--out", required=True, help="write the rows and their summary as JSON here")

    r = sub.add_parser("report", help="plot the results files of a folder as PNGs (no GPU needed)")
    r.add_argument("results", nargs="?", default="docs/results/h200",
                   help="folder with bench_cuda_graph.json, accuracy.json, shapes.json (default docs/results/h200)")
    r.add_argument("--out-dir", help="where the PNGs go (default: the results folder)")
    return p


def _no_hopper(command: str) -> int | None:
    from .bench.device import NEEDS_HOPPER, hopper_problem

    problem = hopper_problem()
    if problem is None:
        return None
    print(f"fused-swiglu {command} {NEEDS_HOPPER}; {problem}.", file=sys.stderr)
    return EXIT_NO_GPU


def _kernel_options_given(args) -> list[str]:
    """The options of the kernel benchmark given on the command line (none of them applies to
    --e2e or --host-time)."""
    given = {"--tokens": args.tokens, "--methods": args.methods, "--config": args.config,
             "--rep": args.rep, "--warmup-ms": args.warmup_ms, "--cuda-graph": args.cuda_graph or None,
             "--protocol": args.protocol, "--seconds": args.seconds}
    return [option for option, value in given.items() if value is not None]


def _e2e_models(values: list[str] | None) -> list[str] | None:
    """``--models`` with ``--e2e``: names of the end-to-end models (case-insensitive).

    Raises:
        ValueError: an unknown name; the message starts with ``--models``.
    """
    from .bench import e2e_models

    names = _split(values, "--models")
    try:
        found = [s.name for s in e2e_models.find(names)] if names else None
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    if found and (twice := _repeated(found)):
        raise ValueError(f"--models names {', '.join(map(repr, twice))} more than once")
    return found


def _cmd_e2e(args, console) -> int:
    from .bench.e2e import E2EOptions, check_modes, failures, run_e2e
    from .bench.report import check_out_path

    # arguments first, so that a typo is reported on any machine
    models = _e2e_models(args.models)
    modes = check_modes(_split(args.e2e_modes, "--e2e-modes")) if args.e2e_modes else None
    out = check_out_path(args.out) if args.out is not None else None
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise ValueError(f"--e2e needs the transformers package (pip install transformers): {e}") from None
    if (code := _no_hopper("bench --e2e")) is not None:
        return code
    results = run_e2e(E2EOptions(models=models, modes=modes, quick=args.quick, out=out, dtype=args.dtype), console)
    failed = failures(results)
    for line in failed:
        print(f"fused-swiglu bench --e2e: failed: {line.splitlines()[0]}", file=sys.stderr)
    return EXIT_MODE_FAILED if failed else 0


def _cmd_host_time(args, console) -> int:
    from .bench.host_time import run_host_time
    from .bench.report import check_out_path

    out = check_out_path(args.out) if args.out is not None else None
    if (code := _no_hopper("bench --host-time")) is not None:
        return code
    n, repeats = (500, 3) if args.quick else (2000, 5)
    run_host_time(console, out=out, dtype=args.dtype, n=n, repeats=repeats)
    return 0


def _check_timing_options(reps: int, warmup_ms: float) -> None:
    """``--rep`` and ``--warmup-ms`` of the timed benchmarks (ValueError naming the option)."""
    if reps < 1:
        raise ValueError(f"--rep must be a positive integer; got {reps}")
    if not (0.0 <= warmup_ms < float("inf")):
        raise ValueError(f"--warmup-ms must be a finite number >= 0; got {warmup_ms}")


def _protocol_options(args, cuda_graph: bool) -> tuple[str, float]:
    """``--protocol`` and ``--seconds`` (ValueError naming the option and the rule)."""
    from .bench import timing

    protocol = args.protocol or "auto"
    seconds = timing.SUSTAINED_SECONDS if args.seconds is None else args.seconds
    if not (0.0 < seconds < float("inf")):
        raise ValueError(f"--seconds must be a positive finite number; got {seconds}")
    if protocol == "sustained" and not cuda_graph:
        raise ValueError("--protocol sustained times CUDA-graph replays: add --cuda-graph")
    if args.seconds is not None and protocol == "interleaved":
        raise ValueError("--seconds applies to the sustained protocol, not to --protocol interleaved")
    return protocol, seconds


def _run_options(args, run) -> tuple[list[int], list[str], int, float]:
    """``--tokens``, ``--methods``, ``--rep`` and ``--warmup-ms`` of a benchmark module ``run`` (its
    TOKENS, METHODS, check_methods, REPS and WARMUP_MS give the defaults and the rule).

    Raises:
        ValueError: naming the option and the rule.
    """
    tokens = _tokens(args.tokens) if args.tokens else list(run.TOKENS)
    methods = _split(args.methods, "--methods") if args.methods else list(run.METHODS)
    try:
        run.check_methods(methods)
    except ValueError as e:
        raise ValueError(f"--methods: {e}") from None
    reps = run.REPS if args.rep is None else args.rep
    warmup_ms = run.WARMUP_MS if args.warmup_ms is None else args.warmup_ms
    _check_timing_options(reps, warmup_ms)
    return tokens, methods, reps, warmup_ms


def _cmd_backward(args, console) -> int:
    from . import configs
    from .bench import backward, shapes
    from .bench.report import check_out_path

    # arguments first, so that a typo is reported on any machine
    for option, given in (("--config", args.config is not None), ("--quick", args.quick),
                          ("--e2e-modes", args.e2e_modes is not None)):
        if given:
            raise ValueError(f"{option} does not apply to --backward")
    names = _models(args.models)
    tokens, methods, reps, warmup_ms = _run_options(args, backward)
    protocol, seconds = _protocol_options(args, args.cuda_graph)
    out = check_out_path(args.out) if args.out is not None else None
    if (code := _no_hopper("bench --backward")) is not None:
        return code
    dtype = configs.DTYPE_OF_SUFFIX[args.dtype]
    backward.run_backward(shapes.find(names), tokens, methods, dtype, console, out=out, reps=reps,
                          warmup_ms=warmup_ms, cuda_graph=args.cuda_graph, protocol=protocol, seconds=seconds)
    return 0


def _cmd_fp8(args, console) -> int:
    from .bench import fp8
    from .bench.report import check_out_path

    for option, given in (("--config", args.config), ("--quick", args.quick or None),
                          ("--e2e-modes", args.e2e_modes), ("--cuda-graph", args.cuda_graph or None)):
        if given is not None:
            raise ValueError(f"{option} does not apply to --fp8" + (" (it always replays CUDA graphs)"
                                                                   if option == "--cuda-graph" else ""))
    if args.dtype != "bf16":
        raise ValueError("--dtype does not apply to --fp8 (e4m3 inputs; bf16 or e4m3 output by method)")
    try:
        found = fp8.find_shapes(_split(args.models, "--models") if args.models else None)
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    tokens, methods, reps, warmup_ms = _run_options(args, fp8)
    protocol, seconds = _protocol_options(args, True)
    out = check_out_path(args.out) if args.out is not None else None
    if (code := _no_hopper("bench --fp8")) is not None:
        return code
    fp8.run_fp8(found, tokens, methods, console, out=out, reps=reps, warmup_ms=warmup_ms, protocol=protocol,
                seconds=seconds)
    return 0


def _cmd_tp(args, console) -> int:
    from . import configs
    from .bench import shapes, tp
    from .bench.report import check_out_path

    for option, given in (("--config", args.config), ("--methods", args.methods), ("--quick", args.quick or None),
                          ("--e2e-modes", args.e2e_modes), ("--cuda-graph", args.cuda_graph or None),
                          ("--warmup-ms", args.warmup_ms), ("--protocol", args.protocol), ("--seconds", args.seconds)):
        if given is not None:
            raise ValueError(f"{option} does not apply to --tp")
    found = shapes.find(_models(args.models or list(tp.MODELS)))
    tokens = _tokens(args.tokens) if args.tokens else list(tp.TOKENS)
    reps = tp.REPS if args.rep is None else args.rep
    _check_timing_options(reps, 0.0)
    if args.tp < 2:
        raise ValueError(f"--tp needs a world size of at least 2; got {args.tp}")
    out = check_out_path(args.out) if args.out is not None else None
    if (code := _no_hopper("bench --tp")) is not None:
        return code
    tp.run_tp(found, tokens, args.tp, configs.DTYPE_OF_SUFFIX[args.dtype], console, out=out, reps=reps)
    return 0


def _cmd_bench(args, console) -> int:
    from .bench.methods import METHODS, peer_problem
    from .bench.report import check_out_path
    from .bench.run import REPS, WARMUP_MS, BenchOptions, run_bench

    if sum(map(bool, (args.backward, args.e2e, args.host_time, args.tp is not None, args.fp8))) > 1:
        raise ValueError("--backward, --e2e, --host-time, --tp and --fp8 are separate runs; give one of them")
    if args.backward:
        return _cmd_backward(args, console)
    if args.fp8:
        return _cmd_fp8(args, console)
    if args.tp is not None:
        return _cmd_tp(args, console)
    if args.e2e or args.host_time:
        mode = "--e2e" if args.e2e else "--host-time"
        if given := _kernel_options_given(args):
            raise ValueError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to the kernel "
                             f"benchmark, not to {mode}")
        if args.host_time and args.models is not None:
            raise ValueError("--models does not apply to --host-time (it times Qwen2.5-0.5B's MLP at M = 1)")
        if args.host_time and args.e2e_modes is not None:
            raise ValueError("--e2e-modes applies to --e2e only")
        return _cmd_e2e(args, console) if args.e2e else _cmd_host_time(args, console)
    for option, given in (("--quick", args.quick), ("--e2e-modes", args.e2e_modes is not None)):
        if given:
            raise ValueError(f"{option} applies to --e2e" + (" or --host-time" if option == "--quick" else "")
                             + " only")
    args.rep = REPS if args.rep is None else args.rep
    args.warmup_ms = WARMUP_MS if args.warmup_ms is None else args.warmup_ms
    # arguments first, so that a typo is reported on any machine
    models = _models(args.models)
    tokens = _tokens(args.tokens) if args.tokens else None
    methods = _split(args.methods, "--methods") if args.methods else None
    config = _configs(args.config)
    for method in methods or []:
        if method not in METHODS:
            raise ValueError(f"--methods: unknown method {method!r}; known: {', '.join(METHODS)}")
    _config_applies(config, methods or list(METHODS), args.dtype)
    _check_timing_options(args.rep, args.warmup_ms)
    protocol, seconds = _protocol_options(args, args.cuda_graph)
    out = check_out_path(args.out) if args.out is not None else None
    for method in methods or []:  # an optional peer asked for by name: its package, on any machine
        if (problem := peer_problem(method)) is not None:
            raise ValueError(f"--methods: {problem}")
    if (code := _no_hopper("bench")) is not None:
        return code
    opts = BenchOptions(
        models=models,
        dtype=args.dtype,
        out=out,
        config=config,
        warmup_ms=args.warmup_ms,
        reps=args.rep,
        cuda_graph=args.cuda_graph,
        protocol=protocol,
        seconds=seconds,
    )
    if tokens:
        opts.tokens = tokens
    if methods:
        opts.methods = methods
    run_bench(opts, console)
    return 0


def _cmd_accuracy(args, console) -> int:
    from .bench.accuracy_run import run_accuracy
    from .bench.report import check_out_path

    if args.dtype == "e4m3":  # a typo is reported on any machine
        from .bench.fp8 import find_shapes

        names = _split(args.models, "--models") if args.models else None
        try:
            models = [m.model for m in find_shapes(names)] if names else None
        except ValueError as e:
            raise ValueError(f"--models: {e}") from None
    else:
        models = _models(args.models)
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed must be an integer in [0, 2**63); got {args.seed}")
    out = check_out_path(args.out) if args.out is not None else None
    if (code := _no_hopper("accuracy")) is not None:
        return code
    if args.dtype == "e4m3":
        from .bench.accuracy_fp8 import run_accuracy_fp8

        run_accuracy_fp8(console, out=out, seed=args.seed, models=names if args.models else None)
    else:
        run_accuracy(console, out=out, dtype_name=args.dtype, seed=args.seed, models=models)
    return 0


def _cmd_info(args, console) -> int:
    import torch

    from . import __version__, env
    from .build import cache, cutlass, sources, toolchain
    from .errors import BuildError

    console.print(f"fused_swiglu {__version__} (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})")
    if torch.cuda.is_available():
        from . import tuning

        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            console.print(f"GPU {i}: {p.name} (compute capability {p.major}.{p.minor}, {p.multi_processor_count} SMs)")
            try:
                data = tuning.load(p.name, "bf16")
                what = (f"{len(data.overrides)} overrides" if data.overrides_apply
                        else "no data of its own: the reference GPU's costs, no overrides; `fused-swiglu tune` writes it")
                console.print(f"  config choice data: {data.source} ({what})")
            except (ValueError, FileNotFoundError) as e:
                console.print(f"  config choice data: unusable: {e}")
    else:
        console.print("GPU: no CUDA GPU")
    tc = None
    try:
        tc = toolchain.find_nvcc()
        console.print(f"nvcc: {tc.nvcc} ({tc.version[0]}.{tc.version[1]}, found via {tc.source})")
    except BuildError as e:
        console.print(f"nvcc: unavailable: {e}")
    try:
        console.print(f"CUTLASS: nvidia-cutlass {cutlass.version()} at {cutlass.include_dirs()[0]}")
    except BuildError as e:
        console.print(f"CUTLASS: unavailable: {e}")
    try:
        csrc = sources.csrc_dir()
        console.print(f"sources: {csrc} ({len(sources.cuda_sources(csrc))} .cu files)")
    except BuildError as e:
        console.print(f"sources: {e}")
    root = env.cache_dir()
    unusable = _cache_problem(root)
    console.print(f"cache dir: {root}" + (f" (cannot be used: {unusable}; set FUSED_SWIGLU_CACHE_DIR to a "
                                          "writable directory)" if unusable else ""))
    override = env.config_override()
    if override:  # checked against this version's configs here, against the library's below
        known = _known_config_names()
        unknown = [n for n in override if n not in known]
        console.print(f"FUSED_SWIGLU_CONFIG: {', '.join(override)}"
                      + (f" (not config names of this version, so ignored: {', '.join(unknown)})" if unknown else ""))
    from .build import prebuilt

    path = prebuilt.core_library()
    how = "FUSED_SWIGLU_LIBRARY" if env.library_path() is not None else "the wheel's prebuilt libraries"
    if path is None:
        path, how = cache.cached_library(), "cache"
    if path is None and tc is None:
        console.print("library: unknown: the cache is keyed by nvcc's version, and no nvcc was found (above)")
        return 0
    if path is None:
        console.print("library: the core library is not built for the current sources and toolchain (it builds "
                      "in seconds on first use; `fused-swiglu build` builds it and every config)")
        return 0
    console.print(f"library: {path} (from {how})")
    from .build import torch_ops

    ops_path = torch_ops.prebuilt()
    if ops_path is None:
        try:
            ops_path = torch_ops.cache_path()
        except BuildError as e:
            console.print(f"operator library: unavailable: {e}")
    if ops_path is not None:
        state = "" if ops_path.is_file() else " (not built yet: built in seconds on first use)"
        console.print(f"operator library: {ops_path}{state}")
    from ._lib import Library

    try:
        lib = Library(path, config_dirs=() if how == "cache" else (path.parent,))
    except BuildError as e:
        console.print(f"library: cannot be used: {e}")
        return 1
    found = {name: lib.find(name) for name in lib.ordered_names}
    ready = [name for name, p in found.items() if p is not None]
    console.print(f"configs ({len(found)}; {len(ready)} built, {len(found) - len(ready)} compiled on first use):")
    for name in lib.ordered_names:
        if found[name] is None:
            console.print(f"  {name}  not built", highlight=False)
            continue
        try:
            c = lib.info(name)
        except BuildError as e:
            console.print(f"  {name}  cannot be loaded: {e}", highlight=False)
            continue
        console.print(
            f"  {c.name}  stages={c.stages}  smem={c.smem_bytes / 1024:.1f} KiB"
            f" (epilogue {c.epilogue_smem_bytes / 1024:.1f} KiB)", highlight=False
        )
    if override:
        missing = [n for n in override if n not in lib.names]
        if missing:
            console.print(f"FUSED_SWIGLU_CONFIG: not in the library, so ignored: {', '.join(missing)}")
    return 0


def _cache_problem(root) -> str | None:
    """Why the build cache folder ``root`` cannot be used, or None (a missing folder under a writable
    parent is fine: the first build creates it)."""
    import os

    if root.exists():
        if not root.is_dir():
            return "it is not a directory"
        return None if os.access(root, os.W_OK | os.X_OK) else "it is not writable"
    parent = next((p for p in root.parents if p.exists()), None)
    if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return f"it does not exist and {parent} is not a writable directory"
    return None


def _cmd_build(args, console) -> int:
    from . import env
    from .build import cache, torch_ops, units

    def log(line: str) -> None:
        console.print(line, highlight=False)

    names = _split(args.configs, "the list of config names") if args.configs else None
    path = cache.ensure_built(force=args.force, log=log, names=names)
    print(path)
    ops_path = torch_ops.ensure_built(force=args.force, log=log)
    log(f"operator library: {ops_path}")
    override = env.library_path()
    if override is not None and override.resolve() != path.resolve():
        missing = "" if override.is_file() else " (which is not a file: calls will fail until it is unset or fixed)"
        log(f"note: FUSED_SWIGLU_LIBRARY is set, so the package loads {override}{missing}, not the library above")
    inputs = cache.Inputs()
    for name in names or units.config_names(inputs.csrc):
        library = cache.cached(name, inputs)
        info = (cache.read_build_info(library) if library is not None else None) or {}
        for k in info.get("ptxas", []):
            props = k.get("properties", "")
            console.print(f"  {name}: {k.get('registers', '?')} registers; {props}", highlight=False)
    return 0


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so that a build under way cleans up as on Ctrl-C (its
    nvcc processes stopped, its temporary directory removed) before the command exits."""


def _raise_terminated(signum, frame):
    raise _Terminated()


def _raise_broken_pipe() -> None:
    raise BrokenPipeError


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's final flush of a closed pipe raises no
    second BrokenPipeError (as the Python docs advise for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout without a file descriptor (e.g. captured)
        pass


def _sweep_args(args, default_tokens) -> tuple[list, list[int]]:
    """``--models`` and ``--tokens`` of tune / sweep, checked (ValueError naming the option)."""
    from .bench import shapes as known

    try:
        shapes = known.find(_split(args.models, "--models"), default=known.SWEEP_MODELS) if args.models else None
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    tokens = _tokens(args.tokens) if args.tokens else None
    if args.rep < 1:
        raise ValueError(f"--rep must be >= 1; got {args.rep}")
    return shapes, tokens or list(default_tokens)


def _cmd_tune(args, console) -> int:
    from . import configs, tuning
    from .bench import model_shapes
    from .bench.shapes import MODELS
    from .bench.tune import run_tune

    shapes, tokens = _sweep_args(args, model_shapes.SWEEP_TOKENS)
    if shapes is None and not args.tokens:
        problems = model_shapes.tune_problems()
    else:
        chosen = shapes if shapes is not None else list(model_shapes.SWEEP_MODELS) + list(MODELS)
        problems = [(M, s.intermediate_size, s.hidden_size) for s in chosen for M in tokens]
    out_dir = Path(args.out_dir).expanduser() if args.out_dir else tuning.user_dir()
    if (code := _no_hopper("tune")) is not None:
        return code
    dtype = configs.DTYPE_OF_SUFFIX[args.dtype]
    try:
        path = run_tune(problems, dtype, out_dir, reps=args.rep, fresh=args.fresh, console=console)
    except RuntimeError as e:  # another tune holds this GPU's and dtype's files
        print(f"fused-swiglu tune: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    data = json.loads(path.read_text())
    console.print(f"wrote {path}: {len(data['configs'])} configs' costs, {len(data['overrides'])} overrides "
                  f"over {data['cells']} problems")
    return 0


def _cmd_report(args, console) -> int:
    from .bench import plots

    try:
        written = plots.report(Path(args.results), Path(args.out_dir) if args.out_dir else None)
    except ImportError:
        raise ValueError("report needs matplotlib (pip install matplotlib)") from None
    except OSError as e:  # --out-dir names a file, or a folder that cannot be made or written
        raise ValueError(f"--out-dir: cannot write the plots to {e.filename or args.out_dir} "
                         f"({e.strerror or e})") from None
    for path in written:
        console.print(f"wrote {path}")
    return 0


def _cmd_sweep(args, console) -> int:
    from . import configs
    from .bench import model_shapes, shapes_sweep
    from .bench.report import check_out_path, machine_meta

    shapes, tokens = _sweep_args(args, model_shapes.SWEEP_TOKENS)
    out = check_out_path(args.out)
    if (code := _no_hopper("sweep")) is not None:
        return code
    dtype = configs.DTYPE_OF_SUFFIX[args.dtype]
    rows = shapes_sweep.run_sweep(shapes or list(model_shapes.SWEEP_MODELS), tokens, dtype, reps=args.rep,
                                  console=console)
    meta = {**machine_meta(), "dtype": args.dtype, "reps": args.rep}
    shapes_sweep.write(rows, out, meta)
    for method, s in shapes_sweep.summary(rows).items():
        console.print(f"{method}: worst {s['worst_over_best']:.3f}x best compiled ({s['over_best_above_limit']} "
                      f"cells > {shapes_sweep.WITHIN_BEST}), worst {s['worst_vs_cublas']:.3f} of cuBLAS "
                      f"({s['below_cublas_limit']} < {shapes_sweep.MIN_VS_CUBLAS}), {s['slower_than_eager']} slower "
                      f"than eager, over {s['cells']} cells")
    console.print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (module docstring: 1 bad option, 2 no Hopper GPU,
    3 a wrong result in bench, 130 interrupted, 141 stdout closed early, 143 terminated by SIGTERM)."""
    from rich.console import Console

    from .errors import BuildError, WrongOutputError

    args = _parser().parse_args(argv)
    # no wrapping of plain lines; wide tables when piped into a log
    console = Console(soft_wrap=True, markup=False, width=None if sys.stdout.isatty() else 200)  # messages carry [brackets]
    console.on_broken_pipe = _raise_broken_pipe  # rich would exit 1; one status for a closed stdout
    handlers = {"bench": _cmd_bench, "accuracy": _cmd_accuracy, "info": _cmd_info, "build": _cmd_build,
                "tune": _cmd_tune, "sweep": _cmd_sweep, "report": _cmd_report}
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        from . import env

        env.jobs()  # a malformed FUSED_SWIGLU_JOBS is reported by every command, not only by a build
        return handlers[args.command](args, console)
    except (BuildError, ValueError) as e:  # ValueError: a malformed FUSED_SWIGLU_* variable or option
        print(f"fused-swiglu {args.command}: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    except WrongOutputError as e:
        print(f"fused-swiglu {args.command}: {e}", file=sys.stderr)
        return EXIT_WRONG_OUTPUT
    except BrokenPipeError:  # stdout closed early, e.g. `fused-swiglu info | head -1`: stop quietly
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print(f"fused-swiglu {args.command}: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print(f"fused-swiglu {args.command}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    raise SystemExit(main())
