"""Every operator family, fed bad input after a good call, raises an error that names the argument and
the rule, and keeps working: each family in a process of its own (tests/bad_input_worker.py), so that a
crash fails that family's test instead of ending the suite."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import bad_input_worker as worker

pytestmark = pytest.mark.gpu

WORKER = Path(worker.__file__)


def _judge(line: dict) -> str | None:
    """What is wrong with one case's result line (None: nothing)."""
    expected = line["expected"]
    if not line.get("good_after"):
        return "the good call after it failed or changed its answer"
    if expected[0] == worker.SAME:
        return None if line["error"] is None and line["message"] == "same result" else \
            f"accepted input expected; got {line['error']}: {line['message'][:300]}"
    kind, pattern = expected
    if line["error"] is None or not re.fullmatch(kind, line["error"]):
        return f"expected {kind}; got {line['error']}: {line['message'][:300]}"
    if not re.search(pattern, line["message"]):
        return f"{line['error']} does not say /{pattern}/: {line['message'][:300]}"
    return None


@pytest.mark.parametrize("family", sorted(worker.CASES))
def test_bad_input_after_a_good_call_is_a_clear_error(family, tmp_path):
    env = {**os.environ, "FSW_TP_INIT": str(tmp_path / "init")}
    proc = subprocess.run([sys.executable, str(WORKER), family], capture_output=True, text=True, timeout=900, env=env)
    lines = [json.loads(t) for t in proc.stdout.splitlines() if t.startswith("{")]
    started = [d["case"] for d in lines if d.get("started")]
    if not lines or lines[-1] != {"done": True}:
        where = f"in case {started[-1]!r}" if started else "before the first case"
        pytest.fail(f"the {family} process ended {where} with exit status {proc.returncode}:\n{proc.stderr[-3000:]}")
    results = [d for d in lines if "error" in d]
    assert [d["case"] for d in results] == started
    problems = [f"{family}.{d['case']}: {why}" for d in results if (why := _judge(d)) is not None]
    assert not problems, "\n".join(problems)
