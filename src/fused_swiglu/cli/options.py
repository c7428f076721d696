"""What every ``fused-swiglu`` command shares: the exit statuses, the argument parser (a usage error
exits 1 and names an unknown option first; help lines break between words only), and the checks of
options several commands take (each raises ValueError naming the option and the rule)."""

from __future__ import annotations

import argparse
import sys
import textwrap

EXIT_BAD_OPTION = 1
EXIT_NO_GPU = 2
EXIT_WRONG_OUTPUT = 3
EXIT_MODE_FAILED = 4
EXIT_STATUS = ("exit status: 0 done (info reports what it finds, a missing GPU or a bad nvcc or cache "
               "setting included); 1 bad input: an unknown or bad option, a results file that report cannot "
               "read, a bad environment variable (e.g. FUSED_SWIGLU_JOBS; FUSED_SWIGLU_CACHE_DIR for build), a "
               "package the command needs but lacks, a failed build, a kernel library that info cannot load, "
               "or tune's files held by another tune; 2 bench, accuracy, tune or sweep without a Hopper GPU; "
               "3 bench: a method's result failed the check made before timing; 4 bench e2e or e2e-ab: a mode "
               "failed on a model (its row holds the error); 130 interrupted; 141 stdout closed early; 143 "
               "terminated (SIGTERM)")

_MISSING = "_missing_required"  # namespace attribute: (parser, its required actions not given)


class Formatter(argparse.HelpFormatter):
    """argparse's help layout, with lines broken only between words: a method, model or option name
    (``fused_dual_promoted``, ``Qwen2.5-7B``, ``--cuda-graph``) is never split across lines, so that
    what the help names can be copied from it."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_long_words=False, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1, like the commands' own option checks, so that exit status 2
    keeps one meaning: no Hopper GPU. An unknown option is reported before a missing required argument
    (argparse reports only the latter, e.g. ``fused-swiglu --bogus`` as "required: command"), so that
    the message names what was mistyped."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        # "--modles 7B": argparse takes 7B for the subcommand and blames it; the unknown option comes first
        unknown = [a for a in getattr(self, "_given", []) if a.startswith("--")
                   and a.split("=", 1)[0] not in self._option_string_actions]
        if message.startswith("argument ") and "invalid choice" in message and unknown:
            message = f"unrecognized arguments: {' '.join(unknown)}"
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_OPTION, f"{self.prog}: error: {message}\n")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, except that a required argument left out is not an error yet: it is recorded in
        the namespace (the innermost command's first) for :meth:`parse_args`, which reports it only
        where no argument was unknown. Subcommands' parsers are called through this method too."""
        given = sys.argv[1:] if args is None else list(args)
        self._given = given
        # a help page is printed while parsing: it shows the required options as required
        required = [] if ("-h" in given or "--help" in given) else [a for a in self._actions if a.required]
        for action in required:
            action.required = False
        try:
            namespace, extras = super().parse_known_args(args, namespace)
        finally:
            for action in required:
                action.required = True
        missing = [a for a in required if getattr(namespace, a.dest, None) is None]
        if missing and not hasattr(namespace, _MISSING):
            setattr(namespace, _MISSING, (self, missing))
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        """The arguments, or a usage error (exit 1): arguments no command takes, named, with the usage of
        the command they were given to (``args._page``, where the command set it); else the required
        arguments left out, with the usage of the command that requires them."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            getattr(namespace, "_page", self).error(f"unrecognized arguments: {' '.join(extras)}")
        if hasattr(namespace, _MISSING):
            parser, missing = getattr(namespace, _MISSING)
            parser.error("the following arguments are required: "
                         + ", ".join(argparse._get_action_name(a) for a in missing))
        return namespace


def split(values: list[str] | None, option: str = "the option") -> list[str] | None:
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
    twice = repeated(out)
    if twice:
        raise ValueError(f"{option} names {', '.join(map(repr, twice))} more than once")
    return out


def repeated(values: list) -> list:
    """The values that occur more than once in ``values``, sorted."""
    return sorted({v for v in values if values.count(v) > 1})


def known_config_names() -> set[str]:
    """The config names ``--config`` can name: :func:`fused_swiglu.configs.choosable_configs` in bf16 and
    fp16 (the library's inference configs; its training kernels are called by name only)."""
    from ..configs import DTYPE_SUFFIX, choosable_configs

    return {c.name(dtype) for c in choosable_configs() for dtype in DTYPE_SUFFIX}


def parse_configs(value: str | None) -> str | None:
    """``--config``: comma-separated names, each one of the kernel library's inference configs
    (:func:`fused_swiglu.configs.choosable_configs`, in bf16 and fp16), optionally with its launch,
    ``<name>@<raster>:<swizzle>``, as ``FUSED_SWIGLU_CONFIG``.

    Raises:
        ValueError: an empty item, a malformed launch, or a name that is not a config of the library.
    """
    if value is None:
        return None
    from .. import catalog

    given = split([value], "--config")
    names = []
    for n in given:
        try:
            names.append(catalog.split_config(n)[0])
        except ValueError as e:
            raise ValueError(f"--config: {n!r} has a malformed launch: {e}") from None
    known = known_config_names()

    e4m3 = [n for n in names if n in catalog.fp8_names() + catalog.fp8_out_names() + catalog.fp8_blockwise_names()
            + catalog.fp8_dual_names()]
    if e4m3:
        raise ValueError(f"--config: {', '.join(map(repr, e4m3))} is an e4m3 config, which --config does not take "
                         "(bench fp8 times the e4m3 kernels; tools/fp8_tile_ab.py times named e4m3 configs)")
    grouped = [n for n in names if n in catalog.grouped_names()]
    if grouped:
        raise ValueError(f"--config: {', '.join(map(repr, grouped))} is a grouped config, which --config does not "
                         "take (fused_swiglu.grouped.grouped_swiglu takes it by name)")
    unknown = [n for n in names if n not in known]
    if unknown:
        said = "; ".join(f"{n!r} is not a config of the kernel library ({catalog.closest(n, known)})" for n in unknown)
        raise ValueError(f"--config: {said}; `fused-swiglu build --list` lists them all")
    return ",".join(given)


def config_applies(config: str | None, methods: list[str], dtype: str) -> None:
    """``--config`` against ``--methods`` and ``--dtype``: a config name applies only to calls of its
    kernel, dtype and accumulation (``FUSED_SWIGLU_CONFIG``), so each name must match a selected
    fused method in the benchmark's dtype; otherwise the option would change nothing.

    Raises:
        ValueError: a name that no selected method would run (the message says which would).
    """
    from ..bench.methods import FUSED_KERNEL
    from ..configs import is_promoted

    from ..catalog import split_config

    for name in (split_config(n)[0] for n in config.split(",")) if config else []:
        kernel, accumulation = name.split("_", 1)[0], "promoted" if is_promoted(name) else "fast"
        runs = [m for m, ka in FUSED_KERNEL.items() if ka == (kernel, accumulation)]
        if not name.endswith("_" + dtype):
            raise ValueError(f"--config: {name!r} is a {name.rsplit('_', 1)[1]} config; the benchmark runs "
                             f"--dtype {dtype}, so it would change nothing")
        if not any(m in methods for m in runs):
            raise ValueError(f"--config: {name!r} runs only in method {runs[0]}, which --methods leaves out, "
                             "so it would change nothing")


def parse_tokens(values: list[str]) -> list[int]:
    """``--tokens`` values as positive integers.

    Raises:
        ValueError: a value is not an integer >= 1 (the message names it).
    """
    from ..env import parse_positive_int

    from ..bench.shapes import MAX_SIZE

    tokens = [parse_positive_int(v, "--tokens must be integers >= 1") for v in split(values, "--tokens") or []]
    for v in tokens:
        if v > MAX_SIZE:
            raise ValueError(f"--tokens must be at most 2**31 - 1 (the kernels' 32-bit M); got {v}")
    twice = repeated(tokens)
    if twice:  # also when written differently (01 and 1)
        raise ValueError(f"--tokens names {', '.join(map(str, twice))} more than once")
    return tokens


def parse_models(values: list[str] | None):
    """``--models`` as MlpShapes (None: the seven Qwen2.5 models).

    Raises:
        ValueError: an unknown name or a bad ``HxI``; the message starts with ``--models``.
    """
    from ..bench import shapes

    names = split(values, "--models")
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


def models_help(default: str, more: str = "") -> str:
    """``--models`` help that lists every name the option takes (:func:`fused_swiglu.bench.shapes.find`:
    the Qwen2.5 models by size, the other public models by name, any shape as HxI), so that no accepted
    name has to be guessed; ``more`` names what a command takes beyond them, ``default`` what it runs
    without the option."""
    from ..bench.shapes import QWEN2_5_BY_SIZE, SWEEP_MODELS

    sizes = ", ".join(QWEN2_5_BY_SIZE)
    return (f"Qwen2.5 models by size ({sizes}; or by full name, e.g. Qwen2.5-7B), other public models "
            f"({', '.join(m.model for m in SWEEP_MODELS)}){more} or MLP shapes as HxI (e.g. 4096x14336); "
            f"case-insensitive; several as 0.5B 7B or 0.5B,7B (default: {default})")


def no_hopper(command: str) -> int | None:
    from ..bench.device import NEEDS_HOPPER, hopper_problem

    problem = hopper_problem()
    if problem is None:
        return None
    print(f"fused-swiglu {command} {NEEDS_HOPPER}; {problem}.", file=sys.stderr)
    return EXIT_NO_GPU


def check_timing_options(reps: int, warmup_ms: float) -> None:
    """``--rep`` and ``--warmup-ms`` of the timed benchmarks (ValueError naming the option)."""
    if reps < 1:
        raise ValueError(f"--rep must be a positive integer; got {reps}")
    if not (0.0 <= warmup_ms < float("inf")):
        raise ValueError(f"--warmup-ms must be a finite number >= 0; got {warmup_ms}")


def check_seconds(seconds: float) -> None:
    """``--seconds``: a positive finite number (ValueError naming the option)."""
    if not (0.0 < seconds < float("inf")):
        raise ValueError(f"--seconds must be a positive finite number; got {seconds}")


def check_values_first(args) -> None:
    """The options of the timed commands whose values need no PyTorch, where the command has them (``--tokens``,
    ``--rep``, ``--warmup-ms``, ``--seconds``): checked before a command imports its benchmark, so that a bad
    value is reported at once; the command checks them again with its defaults.

    Raises:
        ValueError: naming the option and the rule.
    """
    if getattr(args, "tokens", None):
        parse_tokens(args.tokens)
    rep, warmup_ms = getattr(args, "rep", None), getattr(args, "warmup_ms", None)
    if rep is not None or warmup_ms is not None:
        check_timing_options(1 if rep is None else rep, 0.0 if warmup_ms is None else warmup_ms)
    if getattr(args, "seconds", None) is not None:
        check_seconds(args.seconds)


def protocol_options(args, cuda_graph: bool) -> tuple[str, float]:
    """``--protocol`` and ``--seconds`` (ValueError naming the option and the rule)."""
    from ..bench.defaults import SUSTAINED_SECONDS

    protocol = args.protocol or "auto"
    seconds = SUSTAINED_SECONDS if args.seconds is None else args.seconds
    check_seconds(seconds)
    if protocol == "sustained" and not cuda_graph:
        raise ValueError("--protocol sustained times CUDA-graph replays: add --cuda-graph")
    if args.seconds is not None and not cuda_graph:
        raise ValueError("--seconds applies to the sustained protocol, which times CUDA-graph replays: add "
                         "--cuda-graph")
    if args.seconds is not None and protocol == "interleaved":
        raise ValueError("--seconds applies to the sustained protocol, not to --protocol interleaved")
    return protocol, seconds


def run_options(args, run) -> tuple[list[int], list[str], int, float]:
    """``--tokens``, ``--methods``, ``--rep`` and ``--warmup-ms`` of a benchmark module ``run`` (its
    TOKENS, METHODS, check_methods, REPS and WARMUP_MS give the defaults and the rule).

    Raises:
        ValueError: naming the option and the rule.
    """
    tokens = parse_tokens(args.tokens) if args.tokens else list(run.TOKENS)
    methods = split(args.methods, "--methods") if args.methods else list(run.METHODS)
    try:
        run.check_methods(methods)
    except ValueError as e:
        raise ValueError(f"--methods: {e}") from None
    reps = run.REPS if args.rep is None else args.rep
    warmup_ms = run.WARMUP_MS if args.warmup_ms is None else args.warmup_ms
    check_timing_options(reps, warmup_ms)
    return tokens, methods, reps, warmup_ms


def sweep_args(args, default_tokens) -> tuple[list, list[int]]:
    """``--models`` and ``--tokens`` of tune / sweep, checked (ValueError naming the option)."""
    from ..bench import shapes as known

    try:
        shapes = known.find(split(args.models, "--models"), default=known.SWEEP_MODELS) if args.models else None
    except ValueError as e:
        raise ValueError(f"--models: {e}") from None
    tokens = parse_tokens(args.tokens) if args.tokens else None
    if args.rep < 1:
        raise ValueError(f"--rep must be >= 1; got {args.rep}")
    return shapes, tokens or list(default_tokens)


def find_families(names: list[str] | None) -> list[tuple[str, str]]:
    """``tune --families``: group names (``fp8``, ``training``: :data:`fused_swiglu.bench.defaults.TUNE_FAMILY_GROUPS`)
    or family names (a kernel of :data:`fused_swiglu.catalog.BANDED_FAMILIES`, ``packed_fp8@promoted`` for the
    promoted one), case-insensitive, as a b or a,b, in order without repeats; none: every family.

    Raises:
        ValueError: an unknown name, naming the known ones.
    """
    from ..bench.defaults import TUNE_FAMILY_GROUPS as GROUPS

    every = [f for group in GROUPS.values() for f in group]
    if not names:
        return every
    by_name = {(k if a == "fast" else f"{k}@{a}"): (k, a) for k, a in every}
    out: list[tuple[str, str]] = []
    for name in split(names, "--families"):
        key = name.lower()  # case-insensitive, as --models
        found = GROUPS.get(key) or ((by_name[key],) if key in by_name else None)
        if found is None:
            raise ValueError(f"--families: unknown family {name!r}; known: {', '.join([*GROUPS, *by_name])}")
        out += [f for f in found if f not in out]
    return out


# Each command's one-line help, in the order ``fused-swiglu --help`` lists them. The top-level parser
# of a call that names no command is built from this table alone (no command's options, nothing that
# loads torch), so --help, --version and a bad top-level option answer at once.
COMMAND_HELP = {
    "bench": "time eager, cuBLAS, torch.compile and the fused kernels on Qwen2.5 or HxI shapes",
    "accuracy": "eager and the fused kernels vs float64 on Qwen2.5 or HxI shapes, M = 2048",
    "info": "GPU, nvcc, cache and kernel library status",
    "build": "compile the kernel libraries into the cache ahead of time (no GPU needed)",
    "tune": "measure the config choice's costs and overrides on this GPU (writes tuned data)",
    "sweep": "time the config choice against every compiled config, eager and cuBLAS",
    "report": "plot results files as PNGs, and print as tables what no plot shows (no GPU needed)",
}
