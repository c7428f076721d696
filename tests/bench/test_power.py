"""The NVML monitor (fused_swiglu.bench.power) with a stand-in reader, and without NVML."""

from __future__ import annotations

import itertools
import time

from fused_swiglu.bench import power


def test_a_window_reports_the_medians_of_what_it_sampled():
    readings = itertools.cycle([(1500.0, 690.0), (1400.0, 700.0), (1600.0, 650.0)])
    monitor = power.Monitor(read=lambda: next(readings), period_s=0.001, power_limit_w=700.0)
    with monitor.window() as w:
        time.sleep(0.05)
    assert w.reading.samples >= 3
    assert 1400.0 <= w.reading.sm_mhz <= 1600.0 and 650.0 <= w.reading.power_w <= 700.0


def test_without_nvml_a_window_reports_nothing(monkeypatch):
    monkeypatch.setattr(power, "_nvml_reader", lambda index: None)
    monitor = power.Monitor(0)
    assert not monitor.available and monitor.sample() is None and monitor.power_limit_w is None
    with monitor.window() as w:
        pass
    assert w.reading == power.Reading(None, None, 0)


def test_a_failing_read_ends_the_sampling_not_the_timing():
    calls = []

    def read():
        calls.append(1)
        if len(calls) > 2:
            raise RuntimeError("NVML went away")
        return 1000.0, 500.0

    with power.Monitor(read=read, period_s=0.001).window() as w:
        time.sleep(0.03)
    assert w.reading.samples == 2 and w.reading.sm_mhz == 1000.0
