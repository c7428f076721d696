"""The package's import structure, read from the sources: no module imports another's private names,
and the modules import one another without a cycle (imports inside functions included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def _modules(src: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    out = {}
    for f in sorted((src / "fused_swiglu").rglob("*.py")):
        parts = list(f.relative_to(src).with_suffix("").parts)
        package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if package else parts)] = (f, package)
    return out


def _imports(modules):
    """(importing module, imported module, name or None) for every fused_swiglu import: ``from m import
    name`` gives the submodule ``m.name`` where there is one, else ``(m, name)``."""
    for module, (f, package) in modules.items():
        here = module if package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "fused_swiglu":
                        yield module, alias.name, None
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != "fused_swiglu":
                    continue
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    yield (module, sub, None) if sub in modules else (module, source, alias.name)


def private_imports(src: Path) -> list[str]:
    return [f"{m} imports {name} from {source}" for m, source, name in _imports(_modules(src))
            if name is not None and name.startswith("_") and not name.startswith("__")]


def import_cycles(src: Path) -> list[str]:
    """Cycles among the modules' imports. Importing ``a.b.c`` (``import a.b.c``, ``from a.b import c``) runs
    the ``__init__`` of each package above it first, so it counts as importing ``a.b`` and ``a`` too; a
    module's own packages are left out (their ``__init__`` is already running when it is imported)."""
    modules = _modules(src)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m, target, _ in _imports(modules):
        while target and target not in modules:  # an attribute path: its module
            target = target.rpartition(".")[0]
        while target:  # the module, then each package above it
            if target in modules and target != m and not m.startswith(target + "."):
                edges[m].add(target)
            target = target.rpartition(".")[0]
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])
    return cycles


def test_no_module_imports_another_modules_private_names():
    assert private_imports(SRC) == []


def test_the_modules_import_one_another_without_a_cycle():
    assert import_cycles(SRC) == []


def test_the_checks_see_a_private_import_and_a_cycle(tmp_path):
    """Both checks on a package made to break both rules (the private import inside a function)."""
    pkg = tmp_path / "fused_swiglu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import _hidden\n")
    (pkg / "b.py").write_text("from . import a\n_hidden = 1\n")
    assert private_imports(tmp_path) == ["fused_swiglu.a imports _hidden from fused_swiglu.b"]
    assert import_cycles(tmp_path) == ["fused_swiglu.a -> fused_swiglu.b -> fused_swiglu.a"]


def test_the_cycle_check_sees_a_package_s_init_run_by_importing_its_submodule(tmp_path):
    """A module importing ``patch.base`` runs ``patch/__init__.py`` first, so a package whose ``__init__``
    imports that module back (inside a function) makes a cycle, as the experts patch did when it lived in
    ``hf_experts.py``; with the experts body inside the package, importing it from outside is no cycle."""
    pkg = tmp_path / "fused_swiglu"
    (pkg / "patch").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "patch" / "base.py").write_text("BlockPatch = object\n")
    (pkg / "patch" / "__init__.py").write_text("def fuse_swiglu_mlps():\n    from ..hf_experts import fuse_experts\n")
    (pkg / "hf_experts.py").write_text("from .patch.base import BlockPatch\n\ndef fuse_experts():\n    pass\n")
    assert import_cycles(tmp_path) == ["fused_swiglu.hf_experts -> fused_swiglu.patch -> fused_swiglu.hf_experts"]
    (pkg / "patch" / "experts.py").write_text("from .base import BlockPatch\n\ndef fuse_experts():\n    pass\n")
    (pkg / "patch" / "__init__.py").write_text("from .experts import fuse_experts\n")
    (pkg / "hf_experts.py").write_text("from .patch.experts import fuse_experts\n")
    assert import_cycles(tmp_path) == []


def test_the_package_declares_its_license_and_ships_its_types():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    root = SRC.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["license"] == "BSD-3-Clause" and (root / "LICENSE").read_text().startswith("BSD 3-Clause License")
    assert (SRC / "fused_swiglu" / "py.typed").exists()
    assert "py.typed" in tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "fused_swiglu"]
    assert (root / "CHANGELOG.md").read_text().startswith("# Changelog")


def test_dir_lists_the_public_names_not_the_module_s_own_imports():
    import fused_swiglu

    names = set(dir(fused_swiglu))
    assert set(fused_swiglu.__all__) <= names and not {"annotations", "importlib"} & names


def test_the_model_patch_s_other_import_paths_give_the_package_s_objects():
    """fused_swiglu.modules and fused_swiglu.fp8.modules re-export the patch package's names."""
    import fused_swiglu
    import fused_swiglu.fp8.modules as fp8_modules
    import fused_swiglu.modules as modules
    from fused_swiglu import patch
    from fused_swiglu.patch import fp8

    assert fused_swiglu.fuse_swiglu_mlps is modules.fuse_swiglu_mlps is patch.fuse_swiglu_mlps
    assert fused_swiglu.unfuse_swiglu_mlps is modules.unfuse_swiglu_mlps is patch.unfuse_swiglu_mlps
    assert all(getattr(modules, name) is getattr(patch, name) for name in modules.__all__)
    assert all(getattr(fp8_modules, name) is getattr(fp8, name) for name in fp8_modules.__all__)


# --- one choice: no rule outside fused_swiglu.configs picks a config by problem size ---------------------

SIZE_NAMES = {"M", "N", "K", "H", "I", "T", "tokens", "hidden_size", "intermediate_size", "rows", "cols"}
CONFIG_NAME = re.compile(r"^(packed|dual|dswiglu|grouped)\w*_(pingpong|cooperative)_\d+x\d+x\d+_\d+x\d+")
CHOICE_PACKAGE = ("fused_swiglu.configs", "fused_swiglu.catalog")


def _compares_a_size(node: ast.AST) -> bool:
    """A comparison of a problem size (a name of :data:`SIZE_NAMES`, or an expression of one) with a number."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    has_size = any(isinstance(n, ast.Name) and n.id in SIZE_NAMES for s in sides for n in ast.walk(s))
    has_number = any(isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)
                     for s in sides for n in ast.walk(s))
    return has_size and has_number


def _names_a_config(node: ast.AST) -> bool:
    """A call of ``name_of`` (the catalog's config names) or a string that is a config name."""
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Name) and f.id == "name_of") or (isinstance(f, ast.Attribute) and f.attr == "name_of")
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(CONFIG_NAME.match(node.value))


def size_rules_naming_configs(src: Path) -> list[str]:
    """``module.function`` for every function outside the choice package that both compares a problem size with
    a number and names a config: a rule that picks a config by size."""
    found = []
    for module, (f, _) in _modules(src).items():
        if module.startswith(CHOICE_PACKAGE):
            continue
        for fn in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                nodes = list(ast.walk(fn))
                if any(map(_compares_a_size, nodes)) and any(map(_names_a_config, nodes)):
                    found.append(f"{module}.{fn.name}")
    return found


def test_no_config_is_chosen_outside_the_choice_package():
    assert size_rules_naming_configs(SRC) == []


def test_the_choice_check_sees_a_rule_by_size(tmp_path):
    pkg = tmp_path / "fused_swiglu"
    (pkg / "configs").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    rule = ("def pick(M):\n    if M <= 16:\n        return 'packed_swapab_pingpong_128x16x64_1x1_bf16'\n"
            "    return catalog.name_of('packed', 'pingpong', 128, 192, 64, 2, 1, 0, 'bf16')\n")
    (pkg / "ops.py").write_text(rule)
    (pkg / "configs" / "__init__.py").write_text(rule)  # the choice package may
    (pkg / "timing.py").write_text("def f(M):\n    return M <= 16\n\ndef g():\n    return 'dual_pingpong_128x128x64_2x1'\n")
    assert size_rules_naming_configs(tmp_path) == ["fused_swiglu.ops.pick"]
