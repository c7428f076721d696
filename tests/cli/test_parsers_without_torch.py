"""Every command's and bench mode's ``--help``, and its usage errors (an unknown option, a bad choice or
value, a missing argument), answer without importing torch: their parsers are built from modules that
import none (:mod:`fused_swiglu.bench.defaults` and the shape and model lists)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fused_swiglu.cli import EXIT_BAD_OPTION

# Runs fused_swiglu.cli.main on each argument list given (as JSON) in one process, and prints, one JSON
# line each after the help or error text, the exit status and whether torch was imported by then.
_CALLS = """
import json, sys
from fused_swiglu.cli import main
for argv in json.loads(sys.argv[1]):
    status = main(argv)
    sys.stdout.flush()
    print("\\n" + json.dumps({"argv": argv, "status": status, "torch": "torch" in sys.modules}), flush=True)
"""

# page -> a call of it that argparse refuses, and what its one-line error says
BAD_CALLS = {
    "bench": (["--bogus"], "unrecognized arguments: --bogus"),
    "bench backward": (["--bogus"], "unrecognized arguments: --bogus"),
    "bench fp8": (["--protocol", "x"], "argument --protocol: invalid choice: 'x'"),
    "bench tp": ([], "the following arguments are required: --gpus"),
    "bench moe": (["--bogus"], "unrecognized arguments: --bogus"),
    "bench e2e": (["--bogus"], "unrecognized arguments: --bogus"),
    "bench e2e-ab": (["--rounds", "x"], "argument --rounds: invalid int value: 'x'"),
    "bench host-time": (["--dtype", "e4m3"], "argument --dtype: invalid choice: 'e4m3'"),
    "accuracy": (["--dtype", "x"], "argument --dtype: invalid choice: 'x'"),
    "info": (["--bogus"], "unrecognized arguments: --bogus"),
    "build": (["--jobs", "x"], "unrecognized arguments: --jobs"),
    "tune": (["--dtype", "e4m3"], "argument --dtype: invalid choice: 'e4m3'"),
    "sweep": ([], "the following arguments are required: --out"),
    "report": ([], "the following arguments are required: results"),
}


def _run(calls: list[list[str]]) -> tuple[list[dict], str]:
    """The results of ``calls`` (one dict each: argv, status, torch), and their stderr."""
    done = subprocess.run([sys.executable, "-c", _CALLS, json.dumps(calls)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"argv"')]
    assert [r["argv"] for r in results] == calls, done.stdout
    return results, done.stderr


@pytest.mark.parametrize("page", list(BAD_CALLS))
def test_help_and_usage_errors_do_not_import_torch(page):
    bad, says = BAD_CALLS[page]
    words = page.split()
    (help_call, bad_call), err = _run([[*words, "--help"], [*words, *bad]])
    assert (help_call["status"], help_call["torch"]) == (0, False), help_call
    assert (bad_call["status"], bad_call["torch"]) == (EXIT_BAD_OPTION, False), bad_call
    assert f"fused-swiglu {page}: error: {says}" in err


def test_the_parsers_modules_import_no_torch():
    code = ("import sys; from fused_swiglu.cli import _parser; _parser(full=True); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr


def test_bench_e2e_ab_variants_are_refused_without_torch():
    (bad_choice, bad_count), err = _run([["bench", "e2e-ab", "--variants", "fused", "patched"],
                                         ["bench", "e2e-ab", "--variants", "backend"]])
    assert (bad_choice["status"], bad_choice["torch"]) == (EXIT_BAD_OPTION, False), bad_choice
    assert (bad_count["status"], bad_count["torch"]) == (EXIT_BAD_OPTION, False), bad_count
    assert "argument --variants: invalid choice: 'fused'" in err and "argument --variants: expected 2 arguments" in err


# the options whose values the commands check before importing their benchmark (with the choices argparse checks)
TORCH_FREE = {"--families", "--tokens", "--models", "--rep", "--warmup-ms", "--seconds", "--out", "--protocol", "--dtype",
              "--sustained", "--gpus", "--seed"}


def test_value_errors_do_not_import_torch():
    """Each bad argument of test_cli's table that names only such options is refused without importing torch."""
    from test_cli import BAD_ARGUMENTS

    cases = [(argv, rule) for argv, rule in BAD_ARGUMENTS
             if all(a in TORCH_FREE for a in argv if a.startswith("--"))]
    assert len(cases) >= 20
    results, err = _run([argv for argv, _ in cases])
    for r in results:
        assert (r["status"], r["torch"]) == (EXIT_BAD_OPTION, False), r
    for _, rule in cases:
        assert rule in err
