"""The units of the build and the files each depends on."""

import pytest

from fused_swiglu.build import sources, units
from fused_swiglu.errors import BuildError


# a csrc tree: two configs, one of which includes a header that includes another
TREE = {
    "include/fused_swiglu.h": "// abi\n",
    "capi/status.hpp": '#include "fused_swiglu.h"\n',
    "capi/fused_swiglu.cpp": '#include "fused_swiglu.h"\n#include "status.hpp"\n#include <cuda.h>\n',
    "capi/quantize_e4m3.cu": '#include "fused_swiglu.h"\n#include "scale_layout.hpp"\n',
    "capi/moe_layout.cu": '#include "lib/moe_layout.h"\n',
    "include/lib/moe_layout.h": '#include "fused_swiglu.h"\n',
    "capi/scale_layout.hpp": "#pragma once\n",
    "capi/registry.inc": "#define FSW_CONFIG_LIST \\\n  FSW_CONFIG(a) \\\n  FSW_CONFIG(b) \\\n\n",
    "capi/driver_entry_points.cu": "#include <cuda.h>\n",
    "include/lib/kernel.hpp": '#pragma once\n#include "detail.hpp"\n#include "cutlass/gemm.h"\n',
    "include/lib/detail.hpp": "#pragma once\n",
    "instantiations/a.cu": '#include "lib/kernel.hpp"\n  #  include "status.hpp"\n',
    "instantiations/b.cu": '#include "status.hpp"\n',
}


def test_units_are_the_core_and_one_per_registry_config(tmp_path, write_tree):
    csrc = write_tree(tmp_path / "csrc", TREE)
    assert [u.name for u in units.all_units(csrc)] == ["core", "a", "b"]
    assert units.core().library == "libfused_swiglu.so" and units.config("a").library == "libfsw_a.so"


def test_dependencies_follow_includes_transitively_within_csrc(tmp_path, write_tree):
    csrc = write_tree(tmp_path / "csrc", TREE)
    assert units.dependencies(csrc, units.config("a")) == [
        "capi/driver_entry_points.cu", "capi/status.hpp", "include/fused_swiglu.h", "include/lib/detail.hpp",
        "include/lib/kernel.hpp", "instantiations/a.cu",
    ]
    assert units.dependencies(csrc, units.config("b")) == [
        "capi/driver_entry_points.cu", "capi/status.hpp", "include/fused_swiglu.h", "instantiations/b.cu",
    ]
    assert units.dependencies(csrc, units.core()) == ["capi/fused_swiglu.cpp", "capi/moe_layout.cu", "capi/quantize_e4m3.cu",
                                                      "capi/scale_layout.hpp", "capi/status.hpp",
                                                      "include/fused_swiglu.h", "include/lib/moe_layout.h"]


def test_a_missing_source_is_an_error(tmp_path, write_tree):
    csrc = write_tree(tmp_path / "csrc", TREE)
    with pytest.raises(BuildError, match="the source instantiations/c.cu of c is missing"):
        units.dependencies(csrc, units.config("c"))
    (csrc / "capi" / "registry.inc").unlink()
    with pytest.raises(BuildError, match="registry.inc cannot be read"):
        units.config_names(csrc)


def test_every_cuda_source_of_the_repository_belongs_to_a_unit():
    """The build compiles every csrc/**/*.cu (CI builds every unit), and every unit's sources exist."""
    csrc = sources.csrc_dir()
    built = {s for u in units.all_units(csrc) for s in u.sources}
    assert {p.as_posix() for p in sources.cuda_sources(csrc)} == {s for s in built if s.endswith(".cu")}
    assert all((csrc / s).is_file() for s in built)
    for unit in units.all_units(csrc):
        deps = units.dependencies(csrc, unit)
        assert "include/fused_swiglu.h" in deps, unit
        if not unit.is_core:  # a kernel header edit reaches every config that includes it, not the core
            assert any(d.startswith("include/fused_swiglu/kernel/") for d in deps), unit
    # the core reads the C ABI headers of include/ and no kernel template
    core_includes = {d for d in units.dependencies(csrc, units.core()) if d.startswith("include/")}
    assert core_includes == {"include/fused_swiglu.h", "include/fused_swiglu/moe_layout.h"}


def test_the_include_tree_is_self_contained():
    """Every header under include/ reads only include/ (besides CUTLASS, CUDA and the C++ library): the
    kernels and the C ABI headers need nothing of capi/ or torch/."""
    csrc = sources.csrc_dir().resolve()
    include = csrc / "include"
    headers = [p for p in include.rglob("*") if p.suffix in (".h", ".hpp", ".inl")]
    assert headers
    for path in headers:
        for target in units._INCLUDE.findall(path.read_text(errors="replace")):
            found = units._resolve(csrc, path, target)
            assert found is None or include in found.parents, f"{path.relative_to(csrc)} includes {target}"
