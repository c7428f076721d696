"""SM clock and board power of a GPU while something runs, sampled through NVML (``nvidia-ml-py``).

At large M every method drives an H200 to its power cap; then the clock, and so the time, depends
on the energy a kernel spends per multiply-add. The sustained timing protocol
(:func:`fused_swiglu.bench.timing.time_sustained`) records both per method with :class:`Monitor`.
Without ``nvidia-ml-py`` (or without a driver) a monitor samples nothing and reports None.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass

PERIOD_S = 0.01  # between samples


@dataclass(frozen=True)
class Reading:
    """Medians of the samples of one window: SM clock in MHz, board power in W (None: not sampled)."""

    sm_mhz: float | None
    power_w: float | None
    samples: int


def _nvml_reader(index: int) -> tuple[Callable[[], tuple[float, float]], float | None] | None:
    """``(read, power_limit_w)`` for NVML device ``index``: read() -> (SM MHz, W); None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # no package, no driver, no such device
        return None
    instant = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)

    def power_w() -> float:
        if instant is not None:
            value = pynvml.nvmlDeviceGetFieldValues(handle, [instant])[0]
            if value.nvmlReturn == pynvml.NVML_SUCCESS:
                return value.value.uiVal / 1000.0
        return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW, averaged by the driver

    def read() -> tuple[float, float]:
        return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), power_w()

    try:
        read()
        limit = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0
    except Exception:
        return None
    return read, limit


def describe(reading: Reading) -> str:
    """A reading as one line of text."""
    if reading.sm_mhz is None:
        return "no NVML reading (nvidia-ml-py missing?)"
    return f"SM {reading.sm_mhz:.0f} MHz, {reading.power_w:.0f} W over the last second"


class Monitor:
    """Samples one GPU's SM clock and power every ``period_s`` in a thread, within :meth:`window`.

    Args:
        index: the NVML index of the device (:func:`nvml_index`).
        read: a ``() -> (sm_mhz, power_w)`` to sample instead of NVML (tests).
    """

    def __init__(self, index: int = 0, period_s: float = PERIOD_S,
                 read: Callable[[], tuple[float, float]] | None = None, power_limit_w: float | None = None):
        if read is None:
            found = _nvml_reader(index)
            read, power_limit_w = found if found is not None else (None, None)
        self._read, self.power_limit_w, self.period_s = read, power_limit_w, period_s

    @property
    def available(self) -> bool:
        return self._read is not None

    def sample(self) -> tuple[float, float] | None:
        """One reading now, or None without NVML."""
        return self._read() if self._read is not None else None

    def window(self) -> "_Window":
        """A context manager sampling while its block runs; its ``reading`` holds the medians after it."""
        return _Window(self)


class _Window:
    def __init__(self, monitor: Monitor):
        self._monitor = monitor
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reading = Reading(None, None, 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._samples.append(self._monitor.sample())
            except Exception:  # a failed read ends the sampling, never the timing
                return
            self._stop.wait(self._monitor.period_s)

    def __enter__(self) -> "_Window":
        if self._monitor.available:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        if self._samples:
            self.reading = Reading(statistics.median(s[0] for s in self._samples),
                                   statistics.median(s[1] for s in self._samples), len(self._samples))


def nvml_index(device) -> int:
    """The NVML index of a torch CUDA device (CUDA_VISIBLE_DEVICES taken into account)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        return int(torch.cuda._get_nvml_device_index(index))
    except Exception:
        return index
