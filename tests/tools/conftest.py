"""The scripts of tools/ loaded as modules, for their CPU tests."""

import importlib.util
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture(scope="session")
def load_tool():
    """``load_tool("library_ab")``: tools/library_ab.py as a module."""
    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
