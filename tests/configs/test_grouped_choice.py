"""The grouped kernels' choice (fused_swiglu.configs.grouped): the config and launch of each token tile, the
token-tile groups by the experts' weight tiles and the SMs, and the layout's tile by the routed rows per expert."""

from __future__ import annotations

import re

import pytest
import torch

from fused_swiglu import catalog, configs


def test_the_choice_gives_every_grouped_config_with_its_fixed_launch():
    chosen = {configs.resolve("grouped_dual", "", 4096, 768, 2048, dtype, token_tile=tile)
              for tile in configs.grouped.GROUPED_TOKEN_TILES for dtype in (torch.bfloat16, torch.float16)}
    chosen |= {configs.resolve("grouped_dual", "promoted", 4096, 768, 2048, dtype,
                               token_tile=configs.grouped.GROUPED_PROMOTED_TILE)
               for dtype in (torch.bfloat16, torch.float16)}
    cooperative = {f"{name}_{suffix}" for name in configs.grouped.GROUPED_COOPERATIVE_CONFIGS.values()
                   for suffix in ("bf16", "fp16")}
    assert cooperative and {c.name for c in chosen} == set(catalog.grouped_names()) - cooperative
    assert len(catalog.grouped_names()) <= 12  # the grouped family's share of the catalog's build units
    choice, why = configs.explain("grouped_dual", "promoted", 1, 768, 2048, torch.bfloat16, token_tile=16)
    assert choice.name.endswith("_promote4_bf16") and "16-row token tiles (promoted accumulation)" in why
    with pytest.raises(ValueError, match="config='promoted': the grouped configs with promoted accumulation have "
                                         "16-row token tiles, but the layout's tiles hold 64 rows"):
        configs.resolve("grouped_dual", "promoted", 4096, 768, 2048, torch.bfloat16, token_tile=64)
    # raster 1 always; the token-tile group (swizzle) 1 where an expert's weight tiles fit a wave (I = 768: 12)
    assert {(c.name.split("x")[1], c.raster, c.swizzle) for c in chosen} == {("16", 1, 1), ("64", 1, 1), ("128", 1, 1)}
    # and 8 for the widest tile where they outnumber the SMs (I = 14336: 224 weight tiles on 132 SMs; 8448 and
    # 8512: 132 and 133)
    for I, sms, group in ((14336, 132, 8), (8448, 132, 1), (8512, 132, 8), (8512, 144, 1)):
        for tile in configs.grouped.GROUPED_TOKEN_TILES:
            choice, why = configs.explain("grouped_dual", "", 4096, I, 4096, torch.bfloat16, num_sms=sms,
                                          token_tile=tile)
            assert (choice.raster, choice.swizzle) == (1, group if tile == 128 else 1), (I, sms, tile)
        tiles = -(-I // 64)
        assert (f"in groups of 8 (an expert's {tiles} weight tiles outnumber the {sms} SMs)" in why) == (group == 8)
        assert (f"along M (an expert's {tiles} weight tiles fit one wave of {sms} SMs)" in why) == (group == 1)
    for tile in configs.grouped.GROUPED_TOKEN_TILES:
        choice, why = configs.explain("grouped_dual", "", 4096, 768, 2048, torch.float16, token_tile=tile)
        assert choice.name.endswith("_fp16") and f"{tile}-row token tiles" in why
        assert configs.grouped.grouped_config_tile(choice.name) == tile
    with pytest.raises(ValueError, match=r"token tile must be one of \(16, 64, 128\) rows"):
        configs.resolve("grouped_dual", "", 4096, 768, 2048, torch.bfloat16, token_tile=32)
    name = catalog.grouped_names()[0]
    assert configs.explain("grouped_dual", name, 16, 768, 2048, torch.bfloat16) == (
        configs.Choice(name, 1, 1), "named by the call's config argument")
    tile = configs.grouped.grouped_config_tile(name)
    for group in (1, 2, 4, 8):  # a named launch: raster 1, its swizzle the token-tile group
        assert configs.resolve("grouped_dual", f"{name}@1:{group}", 4096, 768, 2048, torch.bfloat16,
                               token_tile=tile) == configs.Choice(name, 1, group)
    for launch, words in (("@2:8", "takes raster 1 in its launch"), ("@0:1", "takes raster 1 in its launch"),
                          ("@1:16", "swizzle in (1, 2, 4, 8)"), ("@1", "<name>@<raster>:<swizzle>")):
        with pytest.raises(ValueError, match=re.escape(words)):
            configs.resolve("grouped_dual", name + launch, 4096, 768, 2048, torch.bfloat16, token_tile=tile)
    _, why = configs.explain("grouped_dual", "", 4096, 768, 2048, torch.bfloat16, token_tile=128)
    assert "token tiles along M (an expert's 12 weight tiles fit one wave of 132 SMs)" in why
    with pytest.raises(ValueError, match="dtype must be torch.bfloat16 or torch.float16"):
        configs.resolve("grouped_dual", "", 16, 768, 2048, torch.float32)
    # the dense choice never returns a grouped config, nor takes one by name
    with pytest.raises(ValueError, match="config must name a dual kernel"):
        configs.check_config("dual", name, torch.bfloat16)


def test_the_layout_tile_follows_the_routed_rows_per_expert():
    """configs.grouped.grouped_token_tile: the smallest tile while the mean rows per expert is at most its bound, a
    wider one past it; sizes only."""
    bounds = configs.grouped.GROUPED_TILE_BY_MEAN_ROWS
    assert configs.grouped.grouped_token_tile(0, 8)[0] == configs.grouped.GROUPED_TOKEN_TILE
    for bound, tile in bounds:
        assert configs.grouped.grouped_token_tile(bound * 128, 128)[0] == tile
    assert configs.grouped.grouped_token_tile((bounds[-1][0] + 1) * 8, 8)[0] == configs.grouped.GROUPED_WIDEST_TILE
    assert [configs.grouped.grouped_token_tile(rows, 8)[0] for rows in range(0, 2000, 7)] == sorted(
        configs.grouped.grouped_token_tile(rows, 8)[0] for rows in range(0, 2000, 7))  # never narrower with more rows
    with pytest.raises(ValueError, match="experts >= 1"):
        configs.grouped.grouped_token_tile(8, 0)


def test_the_cooperative_grouped_config_is_named_only_and_counts_its_own_weight_tiles():
    """The Cooperative grouped config (256 weight rows by 128 tokens) is reached by name, with the layout of its
    128-row token tiles, never by the choice; its token-tile group counts its own 256-row weight tiles."""
    grouped = configs.grouped
    name = f"{grouped.GROUPED_COOPERATIVE_CONFIGS[128]}_bf16"
    assert name == "grouped_dual_swapab_cooperative_256x128x64_1x1_bf16" and grouped.grouped_config_tile(name) == 128
    assert configs.resolve("grouped_dual", name, 4096, 14336, 4096, torch.bfloat16, token_tile=128) == (
        configs.Choice(name, 1, 1))
    assert configs.resolve("grouped_dual", name + "@1:8", 4096, 14336, 4096, torch.bfloat16, token_tile=128) == (
        configs.Choice(name, 1, 8))
    with pytest.raises(ValueError, match="has 128-row token tiles, but the layout's tiles hold 64 rows"):
        configs.resolve("grouped_dual", name, 4096, 768, 2048, torch.bfloat16, token_tile=64)
    with pytest.raises(ValueError, match="config must name a grouped kernel for torch.float16"):
        configs.resolve("grouped_dual", name, 4096, 768, 2048, torch.float16, token_tile=128)
    # Mixtral-8x7B's expert (I = 14336): 224 weight tiles of 128 rows outnumber 132 SMs, 112 of 256 rows do not
    assert grouped.token_group(128, 14336, 132)[0] == 8
    group, why = grouped.token_group(128, 14336, 132, name + "@1:8")
    assert group == 1 and "an expert's 112 weight tiles fit one wave of 132 SMs" in why
    assert grouped.token_group(128, 14336, 100, name)[0] == 8
    assert grouped.token_group(16, 14336, 100, name) == (1, "")  # the narrow tiles never group
    with pytest.raises(KeyError):
        grouped.token_group(128, 14336, 132, "dual_pingpong_128x128x64_1x1_bf16")
