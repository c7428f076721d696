"""Build hook: ship the CUDA sources (csrc/) inside the wheel as ``fused_swiglu/_csrc``, and with
``FUSED_SWIGLU_PREBUILT=1`` the compiled libraries as ``fused_swiglu/_prebuilt``.

Without the switch the wheel is pure Python: the kernel libraries are compiled on first use (or by
``fused-swiglu build``) from the shipped sources. With it, the wheel carries the core library, every
config library and the operator library (sm_90a; built here with nvcc and the installed torch and
nvidia-cutlass, reusing the build cache), so a GPU machine without nvcc runs it as installed; it is
then tagged for this platform::

    FUSED_SWIGLU_PREBUILT=1 pip wheel . --no-build-isolation --no-deps -w dist -v   # -v: the build's progress

An editable install (``pip install -e .``) reads ``<repo>/csrc`` directly and copies nothing.
"""

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

ROOT = Path(__file__).resolve().parent


def prebuilt_requested() -> bool:
    return os.environ.get("FUSED_SWIGLU_PREBUILT", "").strip().lower() not in ("", "0", "false", "no", "off")


def build_prebuilt(dst: Path) -> None:
    """Compile (or take from the build cache) every library and copy them into ``dst``."""
    sys.path.insert(0, str(ROOT / "src"))
    os.environ.pop("FUSED_SWIGLU_LIBRARY", None)  # the wheel carries what this checkout builds, nothing else
    from fused_swiglu.build import cache, torch_ops, units

    def log(line: str) -> None:
        print(f"fused_swiglu: {line}", flush=True)

    core = cache.ensure_built(log=log)
    inputs = cache.Inputs()
    libraries = [core, torch_ops.ensure_built(log=log)]
    libraries += [cache.cached(name, inputs) for name in units.config_names(inputs.csrc)]
    dst.mkdir(parents=True, exist_ok=True)
    for library in libraries:
        shutil.copy2(library, dst / library.name)


class BuildPyWithCsrc(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        src = ROOT / "csrc"
        package = Path(self.build_lib) / "fused_swiglu"
        if src.is_dir():
            dst = package / "_csrc"
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
        shutil.rmtree(package / "_prebuilt", ignore_errors=True)
        if prebuilt_requested():
            build_prebuilt(package / "_prebuilt")


class PlatformWheel(bdist_wheel):
    """A wheel with prebuilt libraries is not pure: tagged py3-none-<platform> (the libraries are
    loaded with ctypes, so any CPython 3 will do)."""

    def finalize_options(self):
        super().finalize_options()
        if prebuilt_requested():
            self.root_is_pure = False

    def get_tag(self):
        python, abi, plat = super().get_tag()
        return ("py3", "none", plat) if prebuilt_requested() else (python, abi, plat)


setup(cmdclass={"build_py": BuildPyWithCsrc, "bdist_wheel": PlatformWheel})
