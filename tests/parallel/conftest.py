"""Runs tests/parallel/tp_worker.py as the ranks of a process group."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("tp_worker.py")


@pytest.fixture
def run_ranks(tmp_path):
    """``run_ranks(world_size, backend, H, I, M)`` -> one dict of saved tensors per rank."""

    def run(world_size: int, backend: str, H: int, I: int, M: int) -> list[dict[str, torch.Tensor]]:
        init = tmp_path / "init"
        procs = [
            subprocess.Popen([sys.executable, str(WORKER), str(r), str(world_size), str(init), str(tmp_path), backend,
                              str(H), str(I), str(M)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for r in range(world_size)
        ]
        logs = []
        for p in procs:
            try:
                logs.append(p.communicate(timeout=600)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                pytest.fail("a rank did not finish within 600 s")
        for r, (p, log) in enumerate(zip(procs, logs)):
            assert p.returncode == 0, f"rank {r} of {world_size} exited with {p.returncode}:\n{log[-4000:]}"
        return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world_size)]

    return run
