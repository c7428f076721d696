"""csrc/instantiations: the generated translation units agree with generate.py."""

import importlib.util
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "csrc" / "instantiations"


@pytest.fixture(scope="module")
def generate():
    spec = importlib.util.spec_from_file_location("generate", HERE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_extended_gmma_shapes_only_for_widths_the_default_selector_lacks(generate):
    for n in (8, 16, 32, 64, 96, 128, 192, 256):
        assert not generate.needs_extended_gmma_shapes(n)
    for n in (112, 144, 160, 176, 224):  # default: several N = 16 or 32 GMMAs per k-step
        assert generate.needs_extended_gmma_shapes(n)


def test_every_translation_unit_matches_its_config(generate):
    names = set()
    for (kernel, schedule, tm, tn, tk, cm, cn, promote) in generate.CONFIGS:
        for dtype in generate.DTYPES:
            name = generate.name_of(kernel, schedule, tm, tn, tk, cm, cn, promote, dtype)
            names.add(name)
            text = (HERE / f"{name}.cu").read_text()
            args = re.search(r"FSW_INSTANTIATE\(([^)]*)\)", text).group(1).split(", ")
            assert args[0] == name and [int(a) for a in args[5:10]] == [tm, tn, tk, cm, cn], name
            defines = "#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED" in text
            assert defines == generate.needs_extended_gmma_shapes(tn), name
            if defines:  # before any CuTe header
                assert text.index("#define CUTE_SM90_EXTENDED") < text.index("#include"), name
    assert names == {p.stem for p in HERE.glob("*.cu")}, "stale or missing generated sources: run generate.py"
    registry = (HERE.parent / "capi" / "registry.inc").read_text()
    assert set(re.findall(r"FSW_CONFIG\((\w+)\)", registry)) == names


def test_one_config_list_feeds_the_build_and_the_choice(generate):
    import torch

    from fused_swiglu import configs

    compiled = {generate.name_of(*c, dtype) for c in generate.CONFIGS for dtype in generate.DTYPES}
    choosable = {c.name(dtype) for c in configs.choosable_configs() for dtype in (torch.bfloat16, torch.float16)}
    from fused_swiglu import catalog

    assert choosable - compiled == set(), "configs the choice can return but the build lacks"
    # the training kernels are called by name (fused_swiglu.mlp_ops), never chosen for inference
    assert compiled - choosable == set(catalog.training_names()), "compiled configs that nothing calls"
    assert tuple(generate.CONFIGS) == catalog.CONFIGS + catalog.TRAINING_CONFIGS
    assert tuple(generate.catalog.DTYPES) == tuple(generate.DTYPES)
