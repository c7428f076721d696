"""bench/timing.py on the CPU: what a run's CellTimer reports of its heat soak."""

from __future__ import annotations

import torch

from fused_swiglu.bench import power, timing


def test_soak_meta_is_none_until_a_sustained_cell_then_the_soaks_last_second(monkeypatch):
    monkeypatch.setattr(power, "nvml_index", lambda device: 0)
    Monitor = power.Monitor
    monkeypatch.setattr(power, "Monitor", lambda index: Monitor(index, read=lambda: (1500.0, 690.0), power_limit_w=700.0))
    monkeypatch.setattr(timing, "heat_soak", lambda device, monitor: power.Reading(1470.0, 705.0, 3))
    monkeypatch.setattr(timing, "time_interleaved", lambda *a, **k: {})
    monkeypatch.setattr(timing, "time_sustained", lambda *a, **k: {})
    timer = timing.CellTimer(torch.device("cpu"), None, "auto", True, reps=1, warmup_ms=0)
    timer.time({}, 512)  # interleaved: no soak
    assert timer.soak_meta() is None
    timer.time({}, 2048)
    assert timer.soak_meta() == {"sm_mhz": 1470.0, "power_w": 705.0, "power_limit_w": 700.0}
