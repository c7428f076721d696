"""The ``fused-swiglu`` commands other than ``bench``: ``accuracy``, ``info``, ``build``, ``tune``,
``sweep`` and ``report``."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

from ..bench import defaults
from .options import (
    COMMAND_HELP,
    EXIT_BAD_OPTION,
    EXIT_STATUS,
    find_families,
    models_help,
    no_hopper,
    parse_models,
    split,
    sweep_args,
)

REP_DEFAULT = 10  # tune's first-stage repetitions


def add_parsers(sub) -> None:
    """The commands' parsers, under ``sub`` (the command's subparsers); what they list comes from modules
    that import no PyTorch."""
    from ..bench import model_shapes
    from ..bench.shapes import FP8_MODELS

    a = _command(sub, "accuracy")
    a.add_argument("--out", help="write rows as JSON here, and as CSV beside it")
    a.add_argument("--dtype", choices=("bf16", "fp16", "e4m3"), default="bf16",
                   help="e4m3: the FP8 kernels and the unfused FP8 path (bf16 output) against float64 of the "
                        "dequantized operands (--models also takes the FP8 checkpoints' shapes of bench fp8)")
    a.add_argument("--seed", type=int, help="random seed (default: fresh, printed)")
    a.add_argument("--models", nargs="+", help=models_help(
        "the seven Qwen2.5 models; with --dtype e4m3 also the FP8 checkpoints' shapes",
        more=f", with --dtype e4m3 FP8 checkpoints' shapes ({', '.join(m.model for m in FP8_MODELS)})"))

    _command(sub, "info")

    c = _command(sub, "build")
    c.add_argument("configs", nargs="*", help="config names to build, as a b or a,b (default: all; a first call "
                   "builds the config it needs; --list names them)")
    c.add_argument("--force", action="store_true", help="rebuild even if the cache has this build")
    c.add_argument("--list", action="store_true", help="print the config names, one a line, and build nothing")

    t = _command(sub, "tune")
    t.add_argument("--models", nargs="+", help="shapes to sweep: " + models_help(
        "the sweep's public shapes and the seven Qwen2.5 ones"))
    t.add_argument("--tokens", nargs="+", help="token counts M, as 1 16 or 1,16 (default: the sweep's, and for "
                   "Qwen2.5 the benchmark's)")
    t.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="the dtype to tune (default bf16)")
    t.add_argument("--rep", type=int, default=REP_DEFAULT, help="timed repetitions per config and problem in the first "
                   "stage (default 10; the second stage times twice as many)")
    t.add_argument("--out-dir", help="folder of the tuned data (default: the user's tuning folder, read first)")
    t.add_argument("--fresh", action="store_true", help="start again instead of continuing a saved run")
    t.add_argument("--sustained", action="store_true", help="instead: time the large-M launches back to back at "
                   "the power cap (after one heat soak) on --models (default: the seven Qwen2.5 shapes and eight "
                   "public ones) at --tokens (default " + " ".join(map(str, defaults.TUNE_SUSTAINED_TOKENS))
                   + ") and write their fitted costs, which the choice ranks from M = 2048 on (35 launches "
                   "took about 11 min on an H100 or H200 with the defaults; it now times 45)")
    t.add_argument("--seconds", type=float, default=None,
                   help="with --sustained or --families: seconds each launch runs back to back at the power cap "
                   f"(default {defaults.TUNE_SUSTAINED_SECONDS})")
    t.add_argument("--families", nargs="*", metavar="FAMILY",
                   help="instead: time every config, in each launch the choice considers, of the families chosen by a "
                   "size band (fp8: the e4m3 kernels, "
                   "by M; training: the store forward and dSwiGLU kernels, by H; or their names, e.g. dswiglu, "
                   "packed_fp8@promoted; none given: all) on --models (default: the seven Qwen2.5 shapes) at "
                   "--tokens (default " + " ".join(map(str, defaults.TUNE_FAMILY_TOKENS)) + " for fp8, "
                   + " ".join(map(str, defaults.TUNE_TRAINING_TOKENS)) + " for training) and write each family's "
                   "bands, which the choice takes on this GPU (progress is saved cell by cell: a run started again "
                   "continues, unless --fresh)")

    s = _command(sub, "sweep")
    s.add_argument("--models", nargs="+", help=models_help("the other public models"))
    s.add_argument("--tokens", nargs="+", help="token counts M, as 1 16 or 1,16 (default: "
                   f"{', '.join(map(str, model_shapes.SWEEP_TOKENS))})")
    s.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16", help="the dtype to time (default bf16)")
    s.add_argument("--rep", type=int, default=10, help="timed repetitions per method and cell in the first stage "
                   "(default 10; the second stage times twice as many)")
    s.add_argument("--out", required=True, help="write the rows and their summary as JSON here")

    r = _command(sub, "report")
    r.add_argument("results", nargs="+", help="results files that a command wrote (--out of bench and its modes, "
                   "accuracy, sweep; the CSV written beside each; or any file {\"meta\": ..., \"rows\": [...]}), or "
                   "folders of them: a file's "
                   "plots as <name>_<plot>.png, and as tables what no plot shows (bench fp8, tp, host-time and "
                   "e2e-ab, e2e's accuracy, any other rows); a folder's bench_cuda_graph.json, accuracy.json, "
                   "shapes.json, e2e.json and e2e_quick.json plotted as speedup_vs_eager.png, "
                   "vs_cublas_and_quack.png, accuracy.png, shapes.png, e2e.png and e2e_quick.png")
    r.add_argument("--out-dir", help="where the PNGs go (default: beside each results file, or in its folder)")


def _command(sub, name: str):
    """A command's parser: its one-line help (``COMMAND_HELP``) as help and (capitalised) description,
    the exit statuses as its epilog."""
    text = COMMAND_HELP[name]
    return sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".", epilog=EXIT_STATUS)


def accuracy(args, console) -> int:
    from ..bench.paths import check_out_path

    # a typo is reported on any machine, before PyTorch is imported
    if args.dtype == "e4m3":
        from ..bench.shapes import find_fp8

        names = split(args.models, "--models") if args.models else None
        try:
            models = [m.model for m in find_fp8(names)] if names else None
        except ValueError as e:
            raise ValueError(f"--models: {e}") from None
    else:
        models = parse_models(args.models)
    if args.seed is not None and not 0 <= args.seed < 2**63:
        raise ValueError(f"--seed must be an integer in [0, 2**63); got {args.seed}")
    out = check_out_path(args.out) if args.out is not None else None
    if (code := no_hopper("accuracy")) is not None:
        return code
    from ..bench.accuracy_run import run_accuracy

    if args.dtype == "e4m3":
        from ..bench.accuracy_fp8 import run_accuracy_fp8

        run_accuracy_fp8(console, out=out, seed=args.seed, models=names if args.models else None)
    else:
        run_accuracy(console, out=out, dtype_name=args.dtype, seed=args.seed, models=models)
    return 0


def info(args, console) -> int:
    import torch

    from .. import __version__, env
    from ..build import cache, cutlass, sources, toolchain
    from ..errors import BuildError

    console.print(f"fused_swiglu {__version__} (torch {torch.__version__}, CUDA {torch.version.cuda or 'none'})")
    if torch.cuda.is_available():
        from .. import tuning

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
        from ..catalog import closest
        from ..configs import OVERRIDABLE_NAMES as known, parse_overrides

        parsed, malformed = parse_overrides(override)
        unknown = [(n, base) for n, base, _ in parsed if base not in known]
        said = "; ".join(f"{n} ({closest(base, known)})" for n, base in unknown)
        if parsed:  # the well-formed names; each malformed one has its own line below
            console.print(f"FUSED_SWIGLU_CONFIG: {', '.join(n for n, _, _ in parsed)}"
                          + (f" (not config names of this version's 16-bit packed or dual kernels, which it applies "
                             f"to, so ignored: {said})" if unknown else ""))
        for n, e in malformed.items():
            console.print(f"FUSED_SWIGLU_CONFIG: {n}: {e}; so ignored", highlight=False)
    from ..build import prebuilt

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
    from ..build import torch_ops

    ops_path = torch_ops.prebuilt()
    if ops_path is None:
        try:
            ops_path = torch_ops.cache_path()
        except BuildError as e:
            console.print(f"operator library: unavailable: {e}")
    if ops_path is not None:
        state = "" if ops_path.is_file() else " (not built yet: built in seconds on first use)"
        console.print(f"operator library: {ops_path}{state}")
    from .._lib import Library

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
        missing = [n for n, base, _ in parsed  # those not of this version were named above
                   if base in known and base not in lib.names]
        if missing:
            console.print(f"FUSED_SWIGLU_CONFIG: not in the library, so ignored: {', '.join(missing)}")
    return 0


def _cache_problem(root: Path) -> str | None:
    """Why the build cache folder ``root`` cannot be used, or None (a missing folder is fine where it can
    be made: the first build makes it). Permission bits are not enough, since the superuser passes them
    on read-only and virtual file systems (``/proc``): an empty folder is made in ``root``, or in its
    nearest existing parent, and removed at once."""
    existing = root.absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        if existing == root.absolute():
            return "it is not a directory"
        return f"{existing} is not a directory, so it cannot be created"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fused-swiglu-probe-", dir=existing))
    except OSError as e:
        if existing == root.absolute():
            return f"it is not writable: {e.strerror or e}"
        return f"{existing} takes no new folders, so it cannot be created: {e.strerror or e}"
    return None


def _check_cache_dir() -> None:
    """Raises ValueError naming FUSED_SWIGLU_CACHE_DIR where the build cache folder cannot be used, so
    that a build fails before its first compile, in one line, rather than midway."""
    from .. import env

    root = env.cache_dir()
    problem = _cache_problem(root)
    if problem is not None:
        raise ValueError(f"the build cache folder {root} cannot be used: {problem}; set FUSED_SWIGLU_CACHE_DIR "
                         "to a writable directory")


def _check_config_names(names: list[str], known: list[str]) -> None:
    """Raises ValueError for names that are not configs of the library, each with the closest config
    names (a typo is a few characters from its config), instead of listing every config."""
    from ..catalog import closest

    unknown = [n for n in names if n not in known]
    if unknown:
        said = [f"{name!r} is not a config name ({closest(name, known)})" for name in unknown]
        raise ValueError(f"{'; '.join(said)}; `fused-swiglu build --list` lists them all")


def build(args, console) -> int:
    from .. import env
    from ..build import cache, sources, torch_ops, units

    def log(line: str) -> None:
        console.print(line, highlight=False)

    names = split(args.configs, "the list of config names") if args.configs else None
    known = units.config_names(sources.csrc_dir())
    if args.list:
        if names or args.force:
            raise ValueError("--list builds nothing; give it without config names or --force")
        for name in known:
            console.print(name, highlight=False)
        return 0
    _check_config_names(names or [], known)
    _check_cache_dir()
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


def tune(args, console) -> int:
    from .. import tuning
    from ..bench import model_shapes
    from ..bench.paths import check_out_path
    from ..bench.shapes import MODELS

    if args.families is not None and args.sustained:
        raise ValueError("--families and --sustained are two tunes: run one at a time")
    if args.families is not None:
        from ..bench.shapes import check_family_shapes

        families = find_families(args.families)
        shapes, tokens = sweep_args(args, ())
        check_family_shapes(shapes or list(MODELS), families)  # before the GPU check: a bad shape is bad input anywhere
    elif args.sustained:
        if args.rep != REP_DEFAULT:
            raise ValueError("--rep applies to the interleaved tune; tune --sustained times each launch for --seconds")
        shapes, tokens = sweep_args(args, defaults.TUNE_SUSTAINED_TOKENS)
        problems = [(M, s.intermediate_size, s.hidden_size) for s in (shapes or model_shapes.SUSTAINED_MODELS)
                    for M in tokens]
    else:
        if args.seconds is not None:
            raise ValueError("--seconds applies to tune --sustained and tune --families only")
        shapes, tokens = sweep_args(args, model_shapes.SWEEP_TOKENS)
        if shapes is None and not args.tokens:
            problems = model_shapes.tune_problems()
        else:
            chosen = shapes if shapes is not None else list(model_shapes.SWEEP_MODELS) + list(MODELS)
            problems = [(M, s.intermediate_size, s.hidden_size) for s in chosen for M in tokens]
    if args.families is not None or args.sustained:  # the tunes that time launches at the power cap
        args.seconds = defaults.TUNE_SUSTAINED_SECONDS if args.seconds is None else args.seconds
        if not (math.isfinite(args.seconds) and args.seconds > 0):
            raise ValueError(f"--seconds must be a finite number > 0; got {args.seconds}")
    out_dir = Path(args.out_dir).expanduser() if args.out_dir else tuning.user_dir()
    check_out_path(out_dir / "tuned.json", "--out-dir")  # its folder can be made and written, before any GPU work
    if (code := no_hopper("tune")) is not None:
        return code
    from .. import configs
    from ..bench.tune import run_sustained, run_tune

    dtype = configs.DTYPE_OF_SUFFIX[args.dtype]
    try:
        if args.families is not None:
            from ..bench.tune_families import run_families

            paths = run_families(shapes or list(MODELS), families, dtype, out_dir, reps=args.rep, tokens=tokens or None,
                                 console=console, seconds=args.seconds, fresh=args.fresh)
            for path in paths:
                entries = json.loads(path.read_text())["families"]
                mine = [e for e in entries if (e["kernel"], e.get("accumulation", "fast")) in families]
                console.print(f"wrote {path}: " + ("; ".join(
                    f"{e['kernel']}{'' if e.get('accumulation', 'fast') == 'fast' else '@' + e['accumulation']} "
                    f"{len(e['bands'])} band{'s' if len(e['bands']) != 1 else ''}" for e in mine) or "no bands"))
            return 0
        if args.sustained:
            path = run_sustained(problems, dtype, out_dir, seconds=args.seconds, fresh=args.fresh, console=console)
        else:
            path = run_tune(problems, dtype, out_dir, reps=args.rep, fresh=args.fresh, console=console)
    except RuntimeError as e:  # another tune holds this GPU's and dtype's files
        print(f"fused-swiglu tune: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    data = json.loads(path.read_text())
    if args.sustained:
        section = data["sustained"]
        console.print(f"wrote {path}: {len(section['launches'])} launches' costs at the power cap, from M = "
                      f"{section['from_m']}")
        return 0
    console.print(f"wrote {path}: {len(data['configs'])} configs' costs, {len(data['overrides'])} overrides "
                  f"over {data['cells']} problems")
    return 0


def sweep(args, console) -> int:
    from ..bench import model_shapes
    from ..bench.paths import check_out_path

    shapes, tokens = sweep_args(args, model_shapes.SWEEP_TOKENS)
    out = check_out_path(args.out)
    if (code := no_hopper("sweep")) is not None:
        return code
    from .. import configs
    from ..bench import shapes_sweep
    from ..bench.report import machine_meta
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


def report(args, console) -> int:
    from ..bench import plots

    try:
        shown = plots.report([Path(p) for p in args.results], Path(args.out_dir) if args.out_dir else None)
    except ImportError as e:
        if (e.name or "").split(".")[0] != "matplotlib":
            raise
        raise ValueError("report needs matplotlib for its plots (pip install matplotlib)") from None
    except OSError as e:  # --out-dir names a file, or a folder that cannot be made or written
        where = "--out-dir: cannot write the plots to" if args.out_dir else "cannot write the plots beside the results:"
        why = e.strerror or str(e)
        if args.out_dir and Path(args.out_dir).exists() and not Path(args.out_dir).is_dir():
            why = "it is a file, not a directory"
        raise ValueError(f"{where} {e.filename or args.out_dir} ({why})") from None
    for item in shown:  # a PNG written, or a table of what no plot shows
        console.print(f"wrote {item}" if isinstance(item, Path) else item)
    return 0
