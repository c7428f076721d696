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
    for (kernel, schedule, tm, tn, tk, cm, cn, promote), dtypes in generate.CONFIGS:
        for dtype in dtypes:
            name = generate.name_of(kernel, schedule, tm, tn, tk, cm, cn, promote, dtype)
            names.add(name)
            text = (HERE / f"{name}.cu").read_text()
            args = re.search(r"FSW_INSTANTIATE\(([^)]*)\)", text).group(1).split(", ")
            element, dtype_enum, element_out, out_enum = generate.DTYPES[dtype]
            assert args[0] == name and args[3:7] == [element, dtype_enum, element_out, out_enum], name
            assert [int(a) for a in args[7:12]] == [tm, tn, tk, cm, cn] and int(args[13]) == promote, name
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

    compiled = {generate.name_of(*c, dtype) for c, dtypes in generate.CONFIGS for dtype in dtypes}
    choosable = {c.name(dtype) for c in configs.choosable_configs() for dtype in (torch.bfloat16, torch.float16)}
    from fused_swiglu import catalog

    assert choosable - compiled == set(), "configs the choice can return but the build lacks"
    # the training kernels are called by name (fused_swiglu.mlp_ops), the e4m3 ones chosen by
    # fused_swiglu.fp8, the grouped ones by configs.grouped.grouped_choice, the paired dual ones by name only;
    # none by the 16-bit inference choice
    e4m3 = (set(catalog.fp8_names()) | set(catalog.fp8_out_names()) | set(catalog.fp8_blockwise_names())
            | set(catalog.fp8_dual_names()))
    assert compiled - choosable == (set(catalog.training_names()) | e4m3 | set(catalog.grouped_names())
                                    | set(catalog.dual_paired_names())), "compiled configs that nothing calls"
    assert [c for c, _ in generate.CONFIGS] == list(catalog.CONFIGS + catalog.TRAINING_CONFIGS + catalog.FP8_CONFIGS
                                                    + catalog.FP8_OUT_CONFIGS + catalog.FP8_BLOCKWISE_CONFIGS
                                                    + catalog.FP8_DUAL_CONFIGS + catalog.GROUPED_CONFIGS
                                                    + catalog.DUAL_PAIRED_CONFIGS)
    assert set(generate.DTYPES) == set(catalog.DTYPES) | set(catalog.FP8_DTYPES) | set(catalog.FP8_OUT_DTYPES)


def test_every_fp8_config_is_chosen():
    from fused_swiglu import catalog, fp8

    chosen = {fp8.choose_config(M, acc) for M in (1, 17, 256, 384) for acc in fp8.ACCUMULATIONS}
    assert chosen == set(catalog.fp8_names())
    assert {fp8.choose_out_config(M) for M in (1, 8192)} == set(catalog.fp8_out_names())
    assert {fp8.choose_blockwise_config(M) for M in (1, 8192)} == set(catalog.fp8_blockwise_names())
    assert {fp8.choose_dual_config(M) for M in (1, 17, 129)} == set(catalog.fp8_dual_names())
