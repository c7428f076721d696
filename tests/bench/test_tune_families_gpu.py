"""bench.tune_families on a Hopper GPU: a short run writes bands that the choice then takes."""

import json

import pytest
import torch

from fused_swiglu import configs, tuning
from fused_swiglu.bench import tune_families
from fused_swiglu.bench.shapes import MlpShape

pytestmark = pytest.mark.gpu


def test_a_short_run_writes_bands_the_choice_takes(monkeypatch, tmp_path):
    monkeypatch.setattr(tuning, "user_dir", lambda: tmp_path)
    tuning.clear()
    families = [("packed_fp8", "fast"), ("dual_fp8", "fast"), ("packed_fp8_block", "fast"), ("dswiglu", "fast"),
                ("dual_store", "fast")]
    try:
        paths = tune_families.run_families([MlpShape("0.5B", 896, 4864)], families, torch.bfloat16, tmp_path, reps=2,
                                           tokens=[16, 2048])
        gpu = torch.cuda.get_device_name()
        assert paths == [tmp_path / tuning.bands_file_name(gpu)]
        data = json.loads(paths[0].read_text())
        mine = {(e["kernel"], e["accumulation"]): e for e in data["families"]}
        assert set(families) <= set(mine)
        for (kernel, accumulation), entry in mine.items():
            band = tuning.load_bands(gpu).band(kernel, accumulation, 16 if entry["by"] == "M" else 896)
            assert band is not None and band.config in entry["cells"]["16" if entry["by"] == "M" else "896"][0]
        choice, why = configs.explain("packed_fp8", "", 16, 4864, 896, torch.bfloat16, gpu=gpu)
        assert "tuned packed_fp8 band" in why and choice.name.endswith("_e4m3")
    finally:
        tuning.clear()
