"""The ``fused-swiglu`` command: ``bench`` (modes ``backward``, ``fp8``, ``moe``, ``tp``, ``e2e``, ``e2e-ab``,
``host-time``), ``accuracy``, ``info``, ``build``, ``tune``, ``sweep``, ``report``; one module per
concern (``bench``, ``commands``, and ``options``: what they share).

Also runs as ``python -m fused_swiglu.cli`` or ``python -m fused_swiglu``.

Exit status (``options.EXIT_STATUS``, which every help page lists): 0 done (``info`` reports what it
finds, a missing GPU or a bad nvcc or cache setting included); 1 bad input: an unknown or bad option
(one line on stderr names the option and the rule), a results file that ``report`` cannot read, a
bad environment variable (e.g. ``FUSED_SWIGLU_JOBS``; ``FUSED_SWIGLU_CACHE_DIR`` for ``build``), a
package the command needs but lacks, a failed build, a kernel library that ``info`` cannot load, or
``tune``'s files held by another ``tune``; 2 ``bench``, ``accuracy``, ``tune`` or ``sweep`` without
a Hopper GPU; 3 ``bench``: a method's result failed the check made before its shape is timed
(``fused_swiglu.bench.check``; one line names the method, the shape and the fault); 4 ``bench e2e``
or ``bench e2e-ab``: a mode failed on a model (its row holds the error; one line on stderr names the
model, the mode and the error; the other modes ran); 130 interrupted; 141 stdout closed early (e.g.
piped into ``head``; quietly); 143 terminated (SIGTERM; a build under way stops its nvcc processes
and removes its temporary files).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from . import bench, commands
from .options import (
    COMMAND_HELP,
    EXIT_BAD_OPTION,
    EXIT_MODE_FAILED,
    EXIT_NO_GPU,
    EXIT_STATUS,
    EXIT_WRONG_OUTPUT,
    Parser,
)

__all__ = ["EXIT_BAD_OPTION", "EXIT_MODE_FAILED", "EXIT_NO_GPU", "EXIT_STATUS", "EXIT_WRONG_OUTPUT", "main"]


def _parser(full: bool = True) -> Parser:
    """The command's parser: with ``full``, every command's options (their names and defaults come from
    modules that import no torch, so that a command's ``--help`` and usage errors do not load it);
    else the commands' one-line help alone, which imports none of the benchmark modules: enough for a
    call that names no command (``--help``, ``--version``, a bad option or command)."""
    from .._version import __version__

    p = Parser(prog="fused-swiglu", description="Fused GEMM + SwiGLU kernels for Hopper.", epilog=EXIT_STATUS)
    p.add_argument("--version", action="version", version=f"fused-swiglu {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    if full:
        bench.add_parsers(sub)
        commands.add_parsers(sub)
    else:
        for name, text in COMMAND_HELP.items():
            sub.add_parser(name, help=text)
    _mark_pages(p)
    return p


def _command_of(argv: list[str]) -> str | None:
    """The command a call names: its first argument that is not an option (the top level takes only
    --help and --version)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _mark_pages(parser: argparse.ArgumentParser) -> None:
    """Each (sub)command's parser records itself as ``args._page``, so that an unknown option is reported
    with the usage of the command it was given to."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for page in action.choices.values():
                page.set_defaults(_page=page)
                _mark_pages(page)


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


def _name(args) -> str:
    """The command as a message names it: ``bench fp8`` for a bench mode."""
    mode = getattr(args, "mode", None)
    return f"{args.command} {mode}" if mode else args.command


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (module docstring: 1 bad input, 2 no Hopper GPU, 3 a wrong
    result in bench, 4 a failed bench e2e or e2e-ab mode, 130 interrupted, 141 stdout closed early, 143
    terminated by SIGTERM)."""
    from rich.console import Console

    from ..errors import BuildError, WrongOutputError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, note = bench.translate_old_spelling(argv)
    except ValueError as e:
        print(f"fused-swiglu bench: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    if note is not None:
        print(f"fused-swiglu: {note}", file=sys.stderr)
    try:
        args = _parser(full=_command_of(argv) in COMMAND_HELP).parse_args(argv)  # an unknown option named before a missing argument (options.Parser)
    except SystemExit as e:  # --help, --version or a usage error, which argparse has printed
        return e.code if isinstance(e.code, int) else EXIT_BAD_OPTION
    # no wrapping of plain lines; wide tables when piped into a log
    console = Console(soft_wrap=True, markup=False, width=None if sys.stdout.isatty() else 200)  # messages carry [brackets]
    console.on_broken_pipe = _raise_broken_pipe  # rich would exit 1; one status for a closed stdout
    handlers = {"bench": bench.run, "accuracy": commands.accuracy, "info": commands.info, "build": commands.build,
                "tune": commands.tune, "sweep": commands.sweep, "report": commands.report}
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        from .. import env

        env.jobs()  # a malformed FUSED_SWIGLU_JOBS is reported by every command, not only by a build
        return handlers[args.command](args, console)
    except (BuildError, ValueError) as e:  # ValueError: a malformed FUSED_SWIGLU_* variable or option
        print(f"fused-swiglu {_name(args)}: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    except WrongOutputError as e:
        print(f"fused-swiglu {_name(args)}: {e}", file=sys.stderr)
        return EXIT_WRONG_OUTPUT
    except BrokenPipeError:  # stdout closed early, e.g. `fused-swiglu info | head -1`: stop quietly
        _silence_stdout()
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print(f"fused-swiglu {_name(args)}: interrupted", file=sys.stderr)
        return 130
    except _Terminated:
        print(f"fused-swiglu {_name(args)}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
