"""Build hook: ship the CUDA sources (csrc/) inside the wheel as ``fused_swiglu/_csrc``.

The kernel library is compiled on first use (or by ``fused-swiglu build``) from these sources.
An editable install (``pip install -e .``) reads ``<repo>/csrc`` directly and copies nothing.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCsrc(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        src = Path(__file__).resolve().parent / "csrc"
        if src.is_dir():
            dst = Path(self.build_lib) / "fused_swiglu" / "_csrc"
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)


setup(cmdclass={"build_py": BuildPyWithCsrc})
