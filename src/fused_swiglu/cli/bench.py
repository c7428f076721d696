"""``fused-swiglu bench`` and its modes: the kernels (no mode), ``backward``, ``fp8``, ``moe``, ``tp``,
``e2e``, ``e2e-ab`` and ``host-time``, each a separate run with the options that apply to it."""

from __future__ import annotations

import sys

from .options import (
    COMMAND_HELP,
    EXIT_MODE_FAILED,
    EXIT_STATUS,
    check_timing_options,
    check_values_first,
    config_applies,
    models_help,
    no_hopper,
    parse_configs,
    parse_models,
    parse_tokens,
    protocol_options,
    repeated,
    run_options,
    split,
)

# the modes as they were spelt before they were subcommands: flag -> mode (``--tp N`` -> ``tp --gpus N``)
OLD_FLAGS = {"--backward": "backward", "--fp8": "fp8", "--e2e": "e2e", "--host-time": "host-time", "--tp": "tp"}
NEW_MODES = ("e2e-ab", "moe")  # the modes that were never spelt as flags


def add_parsers(sub) -> None:
    """The ``bench`` parser and its modes' parsers, under ``sub`` (the command's subparsers). Their
    defaults and names come from modules that import no PyTorch (:mod:`fused_swiglu.bench.defaults`,
    ``shapes``, ``e2e_models``, ``e2e_ab``)."""
    from ..bench import defaults as d
    from ..bench import e2e_ab
    from ..bench.e2e_models import MODELS as E2E_MODELS
    from ..bench.e2e_models import names as e2e_names
    from ..bench.shapes import FP8_MODELS, MOE_MODELS, TOKENS

    b = sub.add_parser("bench", help=COMMAND_HELP["bench"],
                       description="Time the fused kernels against eager PyTorch, cuBLAS, torch.compile and quack on "
                                   "MLP shapes; a MODE times something else (each mode has its own --help).",
                       epilog=EXIT_STATUS)
    _shapes(b, models_help("the seven Qwen2.5 models"))
    _tokens(b, TOKENS)
    _dtype(b)
    _methods(b, d.KERNEL_METHODS, "all; quack only where the quack-kernels package is installed")
    _out(b, "write results as JSON here, and as CSV beside it")
    b.add_argument("--config", help="kernel config name(s) overriding the heuristic, each optionally with its launch "
                                    "as <name>@<raster>:<swizzle> (as FUSED_SWIGLU_CONFIG)")
    _timing(b, d.KERNEL_WARMUP_MS, d.KERNEL_REPS)
    _graphs_and_protocol(b)
    modes = b.add_subparsers(dest="mode", metavar="MODE", title="modes (give one, then its options)")

    m = modes.add_parser("backward", help="training step of the whole MLP block: forward + backward",
                         description="The training step of the whole MLP block (gate, up, down): forward + backward "
                                     "for eager, torch.compile and the fused paths.", epilog=EXIT_STATUS)
    _grid(m, models_help("the seven Qwen2.5 models"), d.BACKWARD_TOKENS, d.BACKWARD_METHODS, d.BACKWARD_WARMUP_MS,
          d.BACKWARD_REPS)
    _dtype(m)
    _graphs_and_protocol(m)

    m = modes.add_parser("fp8", help="the e4m3 kernels against the unfused FP8 path and the bf16 kernel",
                         description="The e4m3 kernels against the unfused FP8 path (torch._scaled_mm + silu-and-mul) "
                                     "and the bf16 kernel; CUDA-graph replays.", epilog=EXIT_STATUS)
    _grid(m, models_help("the Qwen2.5 and FP8 checkpoints' shapes", more=", FP8 checkpoints' shapes "
                         f"({', '.join(s.model for s in FP8_MODELS)})"),
          d.FP8_TOKENS, d.FP8_METHODS, d.FP8_WARMUP_MS, d.FP8_REPS)
    _protocol(m)

    m = modes.add_parser("moe", help="routed experts of MoE models: transformers', quack's and the fused paths "
                                     "against the floor",
                         description="The routed experts of mixture-of-experts models (transformers' experts module, "
                                     "random weights, uniform random top-k routing): transformers' eager, batched_mm "
                                     "and grouped_mm forwards, quack's varlen gemm_gated (where quack-kernels is "
                                     "installed), the fused experts forward (fused: the grouped gate/up kernel), and "
                                     "the gate/up projection alone (fc1_*), each against its floor (the "
                                     "longer of the weight bytes at the copy bandwidth and the FLOPs at cuBLAS's "
                                     "rate, both measured in the run). Needs transformers and a Hopper GPU; the "
                                     "sustained protocol from 1024 tokens on.", epilog=EXIT_STATUS)
    _shapes(m, f"MoE shapes: {', '.join(s.model for s in MOE_MODELS)}, case-insensitive, or HxIxExK (hidden, expert "
               "intermediate size, experts, top-k); several as a b or a,b (default: all)")
    _tokens(m, d.MOE_TOKENS)
    _methods(m, d.MOE_METHODS + d.MOE_TILE_METHODS, "all but the fused methods pinned to one token tile's grouped "
             "config, *_t16 / *_t64 / *_t128; the quack methods only where the quack-kernels package is installed")
    _out(m, "write results as JSON here, and as CSV beside it")
    _timing(m, d.MOE_WARMUP_MS, d.MOE_REPS)
    m.add_argument("--eager", action="store_true",
                   help="time eager calls (per-call host time included) instead of CUDA-graph replays")
    _protocol(m)

    m = modes.add_parser("tp", help="tensor parallel: the MLP block split over N GPUs against one GPU",
                         description="Tensor parallel: the MLP block split over --gpus GPUs (one process each, NCCL) "
                                     "against one GPU.", epilog=EXIT_STATUS)
    m.add_argument("--gpus", type=int, required=True, metavar="N", help="world size, at least 2")
    _shapes(m, models_help(", ".join(d.TP_MODELS)))
    _tokens(m, d.TP_TOKENS)
    _dtype(m)
    m.add_argument("--rep", type=int, help=f"timed repetitions per shape (default {d.TP_REPS})")
    _out(m, "write results as JSON here, and as CSV beside it")

    m = modes.add_parser("e2e", help="Hugging Face models stock vs fuse_swiglu_mlps, end to end",
                         description="End to end: Hugging Face models (random weights, real sizes) stock vs "
                                     "fuse_swiglu_mlps, in decode, CUDA-graph, torch.compile and prefill modes, with "
                                     "an accuracy step (needs transformers; matplotlib for the plot).",
                         epilog=EXIT_STATUS)
    _shapes(m, f"whole models: {', '.join(e2e_names())}; case-insensitive; several as a b or a,b (default: all "
               "but the last, Qwen2.5-7B's dimensions at 8 layers for the training mode)")
    m.add_argument("--modes", "--e2e-modes", dest="e2e_modes", nargs="+",
                   help=f"a subset of {', '.join(d.E2E_STEPS)}, as a b or a,b (default: all)")
    m.add_argument("--quick", action="store_true",
                   help="fewer repeats, and Qwen2.5-0.5B only unless --models names others (a development run)")
    _dtype(m)
    _out(m, "write results as JSON here, and a PNG plot beside it")

    ab = e2e_ab.ABOptions(models=[])  # the defaults
    m = modes.add_parser("e2e-ab", help="whole models stock vs patched, two processes timed in alternating rounds",
                         description="A/B of whole models: the same Hugging Face model (random weights, real sizes, "
                                     "same seed) stock and patched by fuse_swiglu_mlps (or another pair of "
                                     "--variants), each in its own worker process on the same GPU, timed in "
                                     "alternating rounds (stock, patched, patched, stock, ...); per model and mode "
                                     "the median of the per-round ratios stock time / patched time (> 1: the "
                                     "patched model is faster) with their minimum and maximum (needs "
                                     "transformers).", epilog=EXIT_STATUS)
    _shapes(m, f"whole models: {', '.join(e2e_names())}; case-insensitive; several as a b or a,b (default: "
               f"{', '.join(s.name for s in E2E_MODELS)})")
    m.add_argument("--variants", nargs=2, choices=d.E2E_AB_VARIANTS, default=list(d.E2E_AB_DEFAULT_VARIANTS),
                   metavar=("A", "B"),
                   help=f"the two variants timed, each one of {', '.join(d.E2E_AB_VARIANTS)}: stock = Hugging "
                        "Face's MLPs, patched = fuse_swiglu_mlps, backend = the stock model compiled with "
                        f"fused_backend() (modes that compile the model only: {', '.join(d.E2E_AB_COMPILED_MODES)}); "
                        "ratios are A time / B time (default: "
                        f"{' '.join(d.E2E_AB_DEFAULT_VARIANTS)})")
    m.add_argument("--modes", dest="ab_modes", nargs="+", metavar="MODES",
                   help=f"a subset of {', '.join(e2e_ab.MODES)}, as a b or a,b (default: "
                        f"{', '.join(d.E2E_AB_DEFAULT_MODES)}; with the backend "
                        f"variant {', '.join(d.E2E_AB_COMPILED_MODES)}): compiled_decode = "
                        f"generate of {ab.new_tokens} tokens (batch 1) on a static cache, compiled with CUDA graphs "
                        "(ms per token); captured_decode_step = one decode forward of --decode-batch sequences "
                        f"captured in a CUDA graph (ms per replay); prefill = one forward of {ab.prefill_batch} x "
                        f"{ab.prefill_len} tokens captured in a CUDA graph (ms per replay); training = one training step (forward with labels + "
                        "backward) of --train-batch x --train-len tokens, eager (ms per step)")
    m.add_argument("--rounds", type=int, default=ab.rounds,
                   help=f"rounds per model and mode, each timing both variants, the order flipping every round; "
                        f"one ratio per round (default {ab.rounds})")
    m.add_argument("--repeats", type=int, default=ab.repeats,
                   help=f"timed calls of each variant per round, a round's time their median (default {ab.repeats})")
    m.add_argument("--decode-batch", type=int, default=ab.decode_batch,
                   help=f"captured_decode_step: sequences decoded together, one new token each (default "
                        f"{ab.decode_batch})")
    m.add_argument("--train-batch", type=int, default=ab.train_batch,
                   help=f"training: sequences per step (default {ab.train_batch})")
    m.add_argument("--train-len", type=int, default=ab.train_len,
                   help=f"training: tokens per sequence (default {ab.train_len})")
    m.add_argument("--one-process", action="store_true",
                   help="both variants in one process on the same weights, for a model that fits the GPU once but "
                        "not twice: the stock model captured, then patched and captured again, the two graphs "
                        "replayed in alternating rounds (training: the model unpatched and patched again between "
                        f"the variants' turns; variants stock and patched; modes "
                        f"{', '.join(e2e_ab.ONE_PROCESS_MODES)})")
    m.add_argument("--warmups", type=int, default=ab.warmups,
                   help=f"compiled_decode: untimed generate calls before the first round, compilation and "
                        f"CUDA-graph recording included (default {ab.warmups})")
    _dtype(m)
    _out(m, "write results as JSON here, after every model and mode (a stopped run keeps what it measured)")

    m = modes.add_parser("host-time", help="host time per call at M = 1 on Qwen2.5-0.5B's MLP",
                         description="Host time per call (us) at M = 1 on Qwen2.5-0.5B's MLP: swiglu, swiglu_packed, "
                                     "torch.mm, eager, the FP8 functions (swiglu_packed_fp8 with row scales, "
                                     "swiglu_fp8, swiglu_packed_fp8_dynamic), the training operators "
                                     "(swiglu_dual_store, dswiglu) and a transformers Qwen2MLP stock and fused; "
                                     "each against torch.mm (the MLP: fused against stock).", epilog=EXIT_STATUS)
    m.add_argument("--quick", action="store_true", help="fewer calls")
    _dtype(m)
    _out(m, "write results as JSON here")


def _shapes(p, text: str) -> None:
    p.add_argument("--models", nargs="+", help=text)


def _grid(p, models_text: str, tokens, methods, warmup_ms: float, reps: int) -> None:
    """The options of a mode that times methods over shapes and token counts: ``tokens``, ``methods``,
    ``warmup_ms`` and ``reps`` are its benchmark module's defaults (its TOKENS, METHODS, WARMUP_MS and
    REPS, from :mod:`fused_swiglu.bench.defaults`)."""
    _shapes(p, models_text)
    _tokens(p, tokens)
    _methods(p, methods, "all")
    _out(p, "write results as JSON here, and as CSV beside it")
    _timing(p, warmup_ms, reps)


def _tokens(p, default) -> None:
    p.add_argument("--tokens", nargs="+", help=f"token counts M, as 1 16 or 1,16 (default: "
                                               f"{', '.join(map(str, default))})")


def _methods(p, methods, default: str) -> None:
    p.add_argument("--methods", nargs="+", help=f"a subset of {', '.join(methods)}, as a b or a,b (default: "
                                                f"{default})")


def _dtype(p) -> None:
    p.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16",
                   help="activation and weight dtype (default bf16)")


def _out(p, text: str) -> None:
    p.add_argument("--out", help=text)


def _timing(p, warmup_ms: float, reps: int) -> None:
    p.add_argument("--warmup-ms", type=float, help=f"warm-up per method and shape, ms (default {warmup_ms:g})")
    p.add_argument("--rep", type=int, help=f"timed repetitions per method and shape (default {reps})")


def _protocol(p) -> None:
    from ..bench.defaults import PROTOCOLS, SUSTAINED_FROM_M, SUSTAINED_SECONDS

    p.add_argument("--protocol", choices=PROTOCOLS, default=None,
                   help="how CUDA-graph replays are timed: 'sustained' = after a heat soak to the power cap, each "
                        "method back to back for --seconds with the SM clock and power recorded (NVML); "
                        "'interleaved' = the methods alternated rep by rep (one clock and power state for all); "
                        f"'auto' (default) = sustained from M = {SUSTAINED_FROM_M} on")
    p.add_argument("--seconds", type=float, default=None,
                   help=f"sustained protocol: seconds per method and cell (default {SUSTAINED_SECONDS:g})")


def _graphs_and_protocol(p) -> None:
    p.add_argument("--cuda-graph", action="store_true",
                   help="time CUDA-graph replays of every method: GPU time without per-call host time")
    _protocol(p)


def translate_old_spelling(argv: list[str]) -> tuple[list[str], str | None]:
    """``bench --fp8 ...`` (and the other modes spelt as flags) as ``bench fp8 ...``; returns the
    arguments and a note naming the new spelling (None where nothing was translated).

    Raises:
        ValueError: two modes given as flags.
    """
    if not argv or argv[0] != "bench":
        return argv, None
    argv = [part for a in argv for part in (a.split("=", 1) if a.startswith("--tp=") else [a])]
    flags = [a for a in argv[1:] if a in OLD_FLAGS]
    if not flags:
        _check_options_follow_the_mode(argv)
        if "--e2e-modes" in argv and "e2e" not in argv:
            raise ValueError("--e2e-modes applies to bench e2e only (bench e2e --modes ...)")
        return argv, None
    if len(flags) > 1:
        raise ValueError("--backward, --e2e, --host-time, --tp and --fp8 are separate runs; give one of them")
    flag, rest = flags[0], list(argv[1:])
    at = rest.index(flag)
    rest.pop(at)
    mode = OLD_FLAGS[flag]
    given = rest[0] if rest and rest[0] in (*OLD_FLAGS.values(), *NEW_MODES) else None  # a mode as a subcommand
    if given is not None and given != mode:
        raise ValueError(f"bench {given} and {flag} are separate runs; give one of them")
    if flag == "--tp" and not any(a == "--gpus" or a.startswith("--gpus=") for a in rest):
        if at >= len(rest) or rest[at].startswith("-"):
            raise ValueError("--tp needs a world size (bench tp --gpus N)")
        rest.insert(at, "--gpus")
    new = ["bench", *rest] if given else ["bench", mode, *rest]
    return new, f"`bench {flag}` is spelt `bench {mode}{' --gpus N' if flag == '--tp' else ''}` now; running " \
                f"`fused-swiglu {' '.join(new)}`"


def _check_options_follow_the_mode(argv: list[str]) -> None:
    """``bench OPTIONS MODE ...`` would parse OPTIONS as the kernel benchmark's and then drop them for the
    mode's defaults (or read the mode's name as an option's value): refused, naming the options.

    Raises:
        ValueError: an option before the mode's name.
    """
    at = next((i for i, a in enumerate(argv[1:], 1) if a in (*OLD_FLAGS.values(), *NEW_MODES)), None)
    if at is None:
        return
    before = [a for a in argv[1:at] if a.startswith("-") and a not in ("-h", "--help")]
    if before:
        takes = _mode_options(argv[at])
        foreign = [a for a in before if takes is not None and a.split("=", 1)[0] not in takes]
        if foreign:
            raise ValueError(f"bench {argv[at]} takes no {', '.join(foreign)} (see fused-swiglu bench {argv[at]} "
                             f"--help); options go after the mode")
        raise ValueError(f"options go after the mode: fused-swiglu bench {argv[at]} {' '.join(argv[1:at])} ...; got "
                         f"{', '.join(before)} before {argv[at]}")


def _mode_options(mode: str) -> set[str] | None:
    """The option strings ``bench MODE`` takes (None where its parser cannot be found)."""
    import argparse

    from .options import Parser

    root = Parser(prog="fused-swiglu")
    add_parsers(root.add_subparsers(dest="command"))
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction) and "bench" in action.choices:
            for sub in action.choices["bench"]._actions:
                if isinstance(sub, argparse._SubParsersAction) and mode in sub.choices:
                    return set(sub.choices[mode]._option_string_actions)
    return None


def run(args, console) -> int:
    """The ``bench`` command: the kernels, or the mode named."""
    mode = getattr(args, "mode", None)
    check_values_first(args)
    return {None: _kernels, "backward": _backward, "fp8": _fp8, "moe": _moe, "tp": _tp, "e2e": _e2e,
            "e2e-ab": _e2e_ab, "host-time": _host_time}[mode](args, console)


def _kernels(args, console) -> int:
    from ..bench.defaults import KERNEL_REPS, KERNEL_WARMUP_MS
    from ..bench.paths import check_out_path

    # arguments first, so that a typo is reported on any machine, and those that need no PyTorch before it is
    # imported (an argument error in well under a second)
    reps = KERNEL_REPS if args.rep is None else args.rep
    warmup_ms = KERNEL_WARMUP_MS if args.warmup_ms is None else args.warmup_ms
    models = parse_models(args.models)
    tokens = parse_tokens(args.tokens) if args.tokens else None
    methods = split(args.methods, "--methods") if args.methods else None
    config = parse_configs(args.config)
    check_timing_options(reps, warmup_ms)
    protocol, seconds = protocol_options(args, args.cuda_graph)
    out = check_out_path(args.out) if args.out is not None else None
    from ..bench.defaults import KERNEL_METHODS as METHODS

    for method in methods or []:
        if method not in METHODS:
            raise ValueError(f"--methods: unknown method {method!r}; known: {', '.join(METHODS)}")

    from ..bench.methods import peer_problem
    from ..bench.run import BenchOptions, run_bench

    config_applies(config, methods or list(METHODS), args.dtype)
    for method in methods or []:  # an optional peer asked for by name: its package, on any machine
        if (problem := peer_problem(method)) is not None:
            raise ValueError(f"--methods: {problem}")
    if (code := no_hopper("bench")) is not None:
        return code
    opts = BenchOptions(models=models, dtype=args.dtype, out=out, config=config, warmup_ms=warmup_ms, reps=reps,
                        cuda_graph=args.cuda_graph, protocol=protocol, seconds=seconds)
    if tokens:
        opts.tokens = tokens
    if methods:
        opts.methods = methods
    run_bench(opts, console)
    return 0


def _backward(args, console) -> int:
    from ..bench.paths import check_out_path

    # arguments first, so that a typo is reported on any machine (those that need no PyTorch before it is imported)
    names = parse_models(args.models)
    protocol, seconds = protocol_options(args, args.cuda_graph)
    out = check_out_path(args.out) if args.out is not None else None

    from .. import configs
    from ..bench import backward, shapes

    tokens, methods, reps, warmup_ms = run_options(args, backward)
    if (code := no_hopper("bench backward")) is not None:
        return code
    dtype = configs.DTYPE_OF_SUFFIX[args.dtype]
    backward.run_backward(shapes.find(names), tokens, methods, dtype, console, out=out, reps=reps,
                          warmup_ms=warmup_ms, cuda_graph=args.cuda_graph, protocol=protocol, seconds=seconds)
    return 0


def _fp8(args, console) -> int:
    from ..bench.paths import check_out_path
    from ..bench.shapes import find_fp8

    try:
        found = find_fp8(split(args.models, "--models") if args.models else None)
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    protocol, seconds = protocol_options(args, True)
    out = check_out_path(args.out) if args.out is not None else None

    from ..bench import fp8

    tokens, methods, reps, warmup_ms = run_options(args, fp8)
    if (code := no_hopper("bench fp8")) is not None:
        return code
    fp8.run_fp8(found, tokens, methods, console, out=out, reps=reps, warmup_ms=warmup_ms, protocol=protocol,
                seconds=seconds)
    return 0


def _moe(args, console) -> int:
    from ..bench.paths import check_out_path
    from ..bench.shapes import find_moe

    names = split(args.models, "--models") if args.models else None
    try:
        found = find_moe(names)
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    if args.out is not None:
        check_out_path(args.out)

    from ..bench import moe

    tokens, methods, reps, warmup_ms = run_options(args, moe)
    if args.eager and args.protocol == "sustained":
        raise ValueError("--protocol sustained times CUDA-graph replays: leave out --eager")
    if args.eager and args.seconds is not None:
        raise ValueError("--seconds applies to the sustained protocol, which times CUDA-graph replays: leave out --eager")
    protocol, seconds = protocol_options(args, not args.eager)
    left_out: list[str] = []  # the default methods a missing package leaves out, said once the GPU is there
    if args.methods:  # a peer asked for by name: its package, on any machine
        for method in methods:
            if (problem := moe.peer_problem(method)) is not None:
                raise ValueError(f"--methods: {problem}")
    else:
        methods, left_out = moe.default_methods()
    out = check_out_path(args.out) if args.out is not None else None
    if (code := no_hopper("bench moe")) is not None:
        return code
    for line in left_out:
        console.print(line)
    moe.run_moe(found, tokens, methods, console, out=out, reps=reps, warmup_ms=warmup_ms, cuda_graph=not args.eager,
                protocol=protocol, seconds=seconds)
    return 0


def _tp(args, console) -> int:
    from ..bench import defaults, shapes
    from ..bench.paths import check_out_path

    found = shapes.find(parse_models(args.models or list(defaults.TP_MODELS)))
    tokens = parse_tokens(args.tokens) if args.tokens else list(defaults.TP_TOKENS)
    reps = defaults.TP_REPS if args.rep is None else args.rep
    check_timing_options(reps, 0.0)
    if args.gpus < 2:
        raise ValueError(f"--gpus: tensor parallel needs a world size of at least 2; got {args.gpus}")
    out = check_out_path(args.out) if args.out is not None else None

    from .. import configs
    from ..bench import tp
    if (code := no_hopper("bench tp")) is not None:
        return code
    tp.run_tp(found, tokens, args.gpus, configs.DTYPE_OF_SUFFIX[args.dtype], console, out=out, reps=reps)
    return 0


def _e2e_models(values: list[str] | None) -> list[str] | None:
    """``--models`` of ``bench e2e``: names of the end-to-end models (case-insensitive).

    Raises:
        ValueError: an unknown name; the message starts with ``--models``.
    """
    from ..bench import e2e_models

    names = split(values, "--models")
    try:
        found = [s.name for s in e2e_models.find(names)] if names else None
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    if found and (twice := repeated(found)):
        raise ValueError(f"--models names {', '.join(map(repr, twice))} more than once")
    return found


def _e2e(args, console) -> int:
    from ..bench.paths import check_out_path

    # arguments first, so that a typo is reported on any machine
    models = _e2e_models(args.models)
    if args.out is not None:
        check_out_path(args.out, beside=".png")

    from ..bench.e2e import E2EOptions, check_modes, failures, run_e2e

    try:
        modes = check_modes(split(args.e2e_modes, "--modes")) if args.e2e_modes else None
    except ValueError as e:
        raise ValueError(f"--modes: {e}") from None
    out = check_out_path(args.out, beside=".png") if args.out is not None else None
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise ValueError(f"bench e2e needs the transformers package (pip install transformers): {e}") from None
    if (code := no_hopper("bench e2e")) is not None:
        return code
    results = run_e2e(E2EOptions(models=models, modes=modes, quick=args.quick, out=out, dtype=args.dtype), console)
    failed = failures(results)
    for line in failed:
        print(f"fused-swiglu bench e2e: failed: {line.splitlines()[0]}", file=sys.stderr)
    return EXIT_MODE_FAILED if failed else 0


# an option of bench e2e-ab, by the ABOptions field that check_options names first in its message
_AB_OPTIONS = {"rounds": "--rounds", "repeats": "--repeats", "warmups": "--warmups", "dtype": "--dtype",
               "decode_batch": "--decode-batch", "train_batch": "--train-batch", "train_len": "--train-len",
               "variants": "--variants", "one_process": "--one-process"}


def _ab_options(args):
    """``bench e2e-ab``'s options as an :class:`fused_swiglu.bench.e2e_ab.ABOptions`, checked by
    :func:`fused_swiglu.bench.e2e_ab.check_options`.

    Raises:
        ValueError: a bad value; the message names the option.
    """
    from ..bench import e2e_ab, e2e_models

    models = _e2e_models(args.models) or [s.name for s in e2e_models.MODELS]
    variants = list(args.variants)
    modes = split(args.ab_modes, "--modes") if args.ab_modes else e2e_ab.default_modes(variants)
    opts = e2e_ab.ABOptions(models=models, modes=modes, variants=variants, rounds=args.rounds, repeats=args.repeats,
                            decode_batch=args.decode_batch, train_batch=args.train_batch,
                            train_len=args.train_len, warmups=args.warmups, dtype=args.dtype,
                            one_process=args.one_process)
    try:
        e2e_ab.check_options(opts)
    except ValueError as e:
        text = str(e)
        if text.startswith("unknown mode"):
            raise ValueError(f"--modes: {text}") from None
        field = text.split(" ", 1)[0]
        if field in _AB_OPTIONS:
            raise ValueError(f"{_AB_OPTIONS[field]}{text[len(field):]}") from None
        raise
    return opts


def _e2e_ab(args, console) -> int:
    from ..bench import e2e_ab
    from ..bench.paths import check_out_path

    # arguments first, so that a typo is reported on any machine (the path before what imports PyTorch)
    out = check_out_path(args.out) if args.out is not None else None
    opts = _ab_options(args)
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        raise ValueError(f"bench e2e-ab needs the transformers package (pip install transformers): {e}") from None
    if (code := no_hopper("bench e2e-ab")) is not None:
        return code
    results = e2e_ab.run_ab(opts, out, console)
    failed = [r for r in results["rows"] if r.get("error")]
    for r in failed:  # the error holds a worker's traceback: which worker, and the exception (its last line)
        lines = r["error"].strip().splitlines() or ["?"]
        who = f"{lines[0]} " if len(lines) > 1 and lines[0].endswith("worker failed:") else ""
        print(f"fused-swiglu bench e2e-ab: failed: {r['model']} {r['mode']}: {who}{lines[-1].strip()}", file=sys.stderr)
    return EXIT_MODE_FAILED if failed else 0


def _host_time(args, console) -> int:
    from ..bench.paths import check_out_path

    out = check_out_path(args.out) if args.out is not None else None

    from ..bench.host_time import run_host_time

    if (code := no_hopper("bench host-time")) is not None:
        return code
    n, repeats = (500, 3) if args.quick else (2000, 5)
    run_host_time(console, out=out, dtype=args.dtype, n=n, repeats=repeats)
    return 0
