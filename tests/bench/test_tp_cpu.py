"""``bench --tp``: options, the world-size rule and the input-set count (no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from fused_swiglu import cli
from fused_swiglu.bench import shapes, tp


@pytest.mark.parametrize("argv, message", [
    (["--tp", "1"], "--gpus: tensor parallel needs a world size of at least 2; got 1"),
    (["--tp", "2", "--methods", "eager"], "unrecognized arguments: --methods eager"),
    (["--tp", "2", "--cuda-graph"], "unrecognized arguments: --cuda-graph"),
    (["--tp", "2", "--config", "dual_pingpong_128x128x64_1x1_bf16"], "unrecognized arguments: --config"),
    (["--tp", "2", "--backward"], "--backward, --e2e, --host-time, --tp and --fp8 are separate runs"),
    (["--tp", "2", "--rep", "0"], "--rep must be a positive integer"),
    (["--tp", "2", "--models", "70B"], "--models"),
    (["--tp", "2", "--out", "tp.csv"], "--out names the JSON file"),
])
def test_bad_tp_options_exit_1(argv, message, capsys):
    assert cli.main(["bench", *argv]) == cli.EXIT_BAD_OPTION
    assert message in capsys.readouterr().err


def test_world_size_rule(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="--gpus 2 needs 2 GPUs; this machine has 1"):
        tp.check_world_size(2)
    with pytest.raises(ValueError, match="at least 2"):
        tp.check_world_size(1)


def test_run_tp_checks_the_shapes_before_spawning(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    odd = shapes.MlpShape("odd", 64, 8 * 3)  # I / 4 = 6 rows, not whole blocks of 8
    with pytest.raises(ValueError, match=r"multiple of 8 \* world_size = 32"):
        tp.run_tp([odd], [1], 4, torch.bfloat16, console=None)


def test_input_sets_exceed_l2_within_four():
    qwen72 = shapes.find(["72B"])[0]
    n = tp._n_sets(qwen72, 8192, 2, 2, 50 * 2**20)
    assert n == 1  # each rank's half of the weights alone exceeds 2 x L2
    small = shapes.find(["0.5B"])[0]
    assert tp._n_sets(small, 1, 2, 2, 50 * 2**20) == 4
