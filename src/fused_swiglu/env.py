"""Every environment variable fused_swiglu reads, in one place.

All are read when used (not at import), so a process can change them between calls; the config
override is read when a launch plan is made (once per problem: set it before the calls it should steer,
or use :func:`fused_swiglu.configs.set_config_override`, which also drops the plans made before).

=========================  ==========================================================================
``FUSED_SWIGLU_CACHE_DIR``  Where built libraries are cached. Default ``~/.cache/fused_swiglu``.
``FUSED_SWIGLU_LIBRARY``    Path of a prebuilt core library ``libfused_swiglu.so`` to load as is,
                            skipping the cache. Its ABI version is still checked. The config
                            libraries ``libfsw_<name>.so`` and the operator library
                            ``libfused_swiglu_torch.so`` beside it are used as is; a config missing
                            there is built into the cache (which needs nvcc).
``FUSED_SWIGLU_NVCC``       Path of the nvcc to use (first in the search order; an error if it is not
                            nvcc >= 12.3).
``FUSED_SWIGLU_JOBS``       Parallel nvcc jobs when building. Default: ``os.cpu_count()``.
``FUSED_SWIGLU_VERBOSE``    ``1`` prints each nvcc command and build step to stderr (empty, ``0``,
                            ``false``, ``no``, ``off``, any case: quiet).
``FUSED_SWIGLU_CONFIG``     Comma-separated kernel config names that override the heuristic, e.g.
                            ``packed_pingpong_128x192x64_2x1_bf16``, each optionally with its launch
                            (``packed_pingpong_128x192x64_2x1_bf16@2:8``: raster, swizzle); each applies
                            to the kernel, dtype and accumulation its name spells (for benchmarking and
                            tuning); names not in the library, or bad launches, are ignored with one
                            warning each.
                            :func:`fused_swiglu.configs.set_config_override` replaces it in the
                            running process.
``FUSED_SWIGLU_LOG_PLANS``  ``1`` prints one line to stderr per launch plan the operators make (each
                            new problem): the config, rasterisation, swizzle and why
                            (:func:`fused_swiglu.configs.explain`); falsy values as for VERBOSE.
=========================  ==========================================================================
"""

from __future__ import annotations

import os
from pathlib import Path

PREFIX = "FUSED_SWIGLU_"


def _get(name: str) -> str | None:
    value = os.environ.get(PREFIX + name)
    return value if value else None


def cache_dir() -> Path:
    """Root of the build cache (``FUSED_SWIGLU_CACHE_DIR``, default ``~/.cache/fused_swiglu``), as an absolute
    path (a relative one is taken from the current directory)."""
    value = _get("CACHE_DIR")
    return Path(value).expanduser().absolute() if value else Path.home() / ".cache" / "fused_swiglu"


def library_path() -> Path | None:
    """Prebuilt library to load directly (``FUSED_SWIGLU_LIBRARY``), or None."""
    value = _get("LIBRARY")
    return Path(value).expanduser() if value else None


def nvcc() -> str | None:
    """Explicit nvcc path (``FUSED_SWIGLU_NVCC``), or None."""
    return _get("NVCC")


def jobs() -> int:
    """Parallel compile jobs (``FUSED_SWIGLU_JOBS``, default ``os.cpu_count()``).

    Raises:
        ValueError: the variable is set but is not a positive integer.
    """
    value = _get("JOBS")
    if value is None:
        return max(1, os.cpu_count() or 1)
    return parse_positive_int(value, f"{PREFIX}JOBS must be a positive integer")


def parse_positive_int(text: str, rule: str) -> int:
    """``text`` as an integer >= 1.

    Raises:
        ValueError: ``f"{rule}; got {text!r}"`` when it is not one.
    """
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{rule}; got {text!r}")
    return n


def _flag(name: str) -> bool:
    """Whether ``FUSED_SWIGLU_<name>`` is set to anything but empty, ``0``, ``false``, ``no`` or ``off``
    (case-insensitive)."""
    value = _get(name)
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def verbose() -> bool:
    """Whether ``FUSED_SWIGLU_VERBOSE`` asks for build logging."""
    return _flag("VERBOSE")


def lineinfo() -> bool:
    """Whether ``FUSED_SWIGLU_LINEINFO`` asks the kernel build for line tables (nvcc ``-lineinfo``)."""
    return _flag("LINEINFO")


def log_plans() -> bool:
    """Whether ``FUSED_SWIGLU_LOG_PLANS`` asks for one line per launch plan."""
    return _flag("LOG_PLANS")


_override: str | None = None  # set_config_names's names; None: FUSED_SWIGLU_CONFIG's


def config_override() -> list[str]:
    """Config names that override the choice: :func:`set_config_names`'s, else ``FUSED_SWIGLU_CONFIG``'s
    (comma-separated), or an empty list."""
    return split_names(_override if _override is not None else _get("CONFIG"))


def split_names(value: str | None) -> list[str]:
    """The names of a comma-separated list (``FUSED_SWIGLU_CONFIG``'s form), stripped, empty items left out."""
    return [name.strip() for name in (value or "").split(",") if name.strip()]


def config_override_origin() -> str:
    """Where :func:`config_override`'s names come from, in words."""
    return "fused_swiglu.configs.set_config_override" if _override is not None else "FUSED_SWIGLU_CONFIG"


def set_config_names(names: str | None) -> None:
    """:func:`config_override`'s names from now on: ``names`` (comma-separated, ``""`` for none) instead of
    ``FUSED_SWIGLU_CONFIG``'s, or the variable's again with None. The operators' launch plans made before
    stay: :func:`fused_swiglu.configs.set_config_override` sets this and drops them."""
    global _override
    _override = names
