"""bench.tune: the calibration problems, the fit, the overrides rule and the resumable progress
(CPU; the GPU run is tests/bench/test_tune_gpu.py)."""

import json
import math

import pytest
import torch

from fused_swiglu import configs, cost_model, tuning
from fused_swiglu.bench import model_shapes, shapes, tune
from fused_swiglu.bench.shapes import MODELS, TOKENS


@pytest.mark.parametrize("num_sms", [132, 114, 78])
def test_calibration_problems_fill_exact_rounds_of_whole_clusters(num_sms):
    for config in configs.CATALOG:
        for r in tune.ROUNDS:
            M, N = tune.calibration_problem(config, r, num_sms)
            assert cost_model.rounds(config, M, N, num_sms) == (r, cost_model.persistent_ctas(config, num_sms))
            assert configs.legal(config, M, N) and N % 8 == 0


def test_fit_recovers_per_tile_and_per_k_tile_costs():
    points = [(r, k, 5.0 + r * (1.5 + k * 0.25)) for r in (2, 4) for k in (16, 64)]
    costs = tune.fit_config_costs(points, launch_us=5.0)
    assert costs.tile_us == pytest.approx(1.5) and costs.k_tile_us == pytest.approx(0.25)
    # a negative intercept is refitted through the origin, never negative
    costs = tune.fit_config_costs([(2, 16, 5.0 + 2 * 16 * 0.3 - 1), (2, 64, 5.0 + 2 * 64 * 0.3)], launch_us=5.0)
    assert costs.tile_us == 0.0 and costs.k_tile_us > 0
    with pytest.raises(ValueError, match="two k-tile counts"):
        tune.fit_config_costs([(2, 16, 9.0), (4, 16, 13.0)], launch_us=5.0)


def test_the_sustained_fit_recovers_each_launchs_costs_from_relative_errors():
    costs = {"packed_pingpong_128x192x64_2x1@2:4": (0.8, 0.5), "dual_pingpong_128x160x64_2x1@2:8": (0.0, 0.45)}
    rows = []
    for shape in [*MODELS, *model_shapes.SWEEP_MODELS[:5]]:
        for M in (2048, 6000, 8192):
            K, N = shape.hidden_size, shape.intermediate_size
            for key, (a, b) in costs.items():
                name, raster, swizzle = tuning.split_launch_key(key)
                v = configs.BY_BASE_NAME[name]
                waves, _ = cost_model.rounds(v, M, N, 132, swizzle)
                t_us = waves * (a + -(-K // v.tile_k) * b)
                rows.append({"model": shape.model, "hidden_size": K, "intermediate_size": N, "tokens": M,
                             "method": key, "median_ms": t_us / 1e3})
            rows.append({"model": shape.model, "hidden_size": K, "intermediate_size": N, "tokens": M,
                         "method": "cublas_gemm", "median_ms": 1.0})  # not a launch: skipped
    section = tune.fit_sustained(rows, 132)
    assert section["from_m"] == 2048 and set(section["launches"]) == set(costs)
    for key, (a, b) in costs.items():
        fitted = section["launches"][key]
        assert fitted["tile_us"] == pytest.approx(a, abs=1e-6) and fitted["k_tile_us"] == pytest.approx(b)
        assert fitted["cells"] == 36
    # a launch timed in too few cells is left out; none left is an error
    few = [r for r in rows if r["model"] in {m.model for m in MODELS[:3]}]
    with pytest.raises(ValueError, match="no launch has sustained timings"):
        tune.fit_sustained(few, 132)
    # the section parses as tuned data
    data = tuning.parse({"format": 1, "gpu": "g", "dtype": "bf16", "sustained": section},
                        base=tuning.load("NVIDIA H200", "bf16"))
    assert set(data.sustained) == set(costs)


def test_variants_are_legal_and_keyed_uniquely():
    for M, N, K in model_shapes.tune_problems()[::7]:
        found = tune.variants(M, N)
        assert len({v.key for v in found}) == len(found)
        assert all(configs.legal(v.config, M, N) for v in found)
        assert all(configs.swap_ab_serves(v.config, M) for v in found)


def _data():
    return tuning.load("NVIDIA H200", "bf16")


def test_overrides_only_where_the_best_beats_the_models_pick_by_the_rule():
    data = _data()
    M, N, K = 333, 14336, 4096
    times = {}
    for v in tune.variants(M, N):
        times[v.key] = 1.0
    picks = {g: configs.model_config(*g[:1], M, N, K, g[1], 132, data) for g in
             [(k, a) for k in configs.KERNELS for a in configs.ACCUMULATIONS]}
    pick = picks[("packed", "fast")]
    pick_key = tune.Variant(pick, pick.raster, pick.swizzle).key
    other = next(k for k in times if tune.group_of(k) == ("packed", "fast") and k != pick_key)
    times[other] = 1.0 / 1.01  # within the rule: no override
    assert [o for o in tune.overrides({f"{M},{N},{K}": times}, data, 132) if o["kernel"] == "packed"
            and o["accumulation"] == "fast"] == []
    times[other] = 1.0 / 1.05  # beats the pick by 5 %
    found = [o for o in tune.overrides({f"{M},{N},{K}": times}, data, 132) if o["kernel"] == "packed"
             and o["accumulation"] == "fast"]
    assert len(found) == 1 and f"{found[0]['config']}@{found[0]['raster']}:{found[0]['swizzle']}" == other
    assert found[0]["gain"] == pytest.approx(1.05, abs=1e-3) and found[0]["model_config"] == pick_key
    del times[pick_key]  # the pick was not timed: the best becomes the override
    found = [o for o in tune.overrides({f"{M},{N},{K}": times}, data, 132) if o["kernel"] == "packed"
             and o["accumulation"] == "fast"]
    assert len(found) == 1 and found[0]["gain"] is None


def test_progress_resumes_only_the_same_run(tmp_path):
    path = tmp_path / "x.progress.json"
    p = tune.Progress(path, {"reps": 10})
    p.state["cells"]["1,64,64"] = {"a@0:1": 0.5}
    p.save()
    assert tune.Progress(path, {"reps": 10}).state["cells"] == {"1,64,64": {"a@0:1": 0.5}}
    assert tune.Progress(path, {"reps": 20}).state["cells"] == {}  # another run: starts again
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


def test_write_data_round_trips_through_the_tuning_parser(tmp_path):
    shipped = json.loads((tuning.PACKAGE_DIR / "nvidia-h200_bf16.json").read_text())
    p = tune.Progress(tmp_path / "p.json", {"reps": 10})
    p.state["calibration"] = {"device": {k: shipped["device"][k] for k in ("launch_us", "hbm_gbps", "sm_gbps")},
                              "configs": shipped["configs"]}
    M, N, K = 2048, 4096, 2048
    p.state["cells"][f"{M},{N},{K}"] = {v.key: 1.0 + i * 1e-3 for i, v in enumerate(tune.variants(M, N))}
    out = tune.write_data(p, "NVIDIA H200", "bf16", 132, 50 * 2**20, tmp_path / "nvidia-h200_bf16.json")
    data = tuning.parse(json.loads((tmp_path / "nvidia-h200_bf16.json").read_text()))
    assert data.device.l2_bytes / (50 * 2**20) in tune.L2_SHARES and data.device.blend in tune.BLENDS
    assert len(data.overrides) == len(out["overrides"]) and out["cells"] == 1
    assert all(math.isfinite(c.k_tile_us) for c in data.costs.values())
    assert data.sustained == {}
    # launches timed at the power cap by tune --sustained stay when the interleaved tune writes again
    tune.write_sustained(tmp_path / "nvidia-h200_bf16.json", shipped["sustained"], "NVIDIA H200", "bf16", 132)
    tune.write_data(p, "NVIDIA H200", "bf16", 132, 50 * 2**20, tmp_path / "nvidia-h200_bf16.json")
    data = tuning.parse(json.loads((tmp_path / "nvidia-h200_bf16.json").read_text()))
    assert set(data.sustained) == set(shipped["sustained"]["launches"]) and data.costs


def test_default_problems_cover_the_sweep_and_the_benchmark():
    problems = set(model_shapes.tune_problems())
    for s in model_shapes.SWEEP_MODELS:
        assert all((M, s.intermediate_size, s.hidden_size) in problems for M in model_shapes.SWEEP_TOKENS)
    for s in MODELS:
        assert all((M, s.intermediate_size, s.hidden_size) in problems for M in TOKENS)
    assert len(model_shapes.SWEEP_MODELS) >= 12
    assert not {(s.hidden_size, s.intermediate_size) for s in model_shapes.SWEEP_MODELS} & {
        (s.hidden_size, s.intermediate_size) for s in MODELS}


def test_model_names_resolve():
    assert [s.model for s in shapes.find(["llama-3-8b", "7B", "4096x14336", "4096x11008"])] == [
        "Llama-3-8B", "Qwen2.5-7B", "4096x11008"]
    assert shapes.find(None, default=shapes.SWEEP_MODELS) == list(shapes.SWEEP_MODELS)
    with pytest.raises(ValueError, match="unknown model 'nope'.*Llama-3-70B"):
        shapes.find(["nope"])


def test_calibration_measures_every_config_once_and_resumes(monkeypatch, tmp_path):
    """calibrate with the GPU timing replaced by the cost model of known costs: the fitted costs
    reproduce the calibration times (launch_us is a one-tile launch's time, so the per-tile cost
    absorbs the difference), each config's decode bandwidth is measured, and a second run times
    nothing."""
    truth = cost_model.ConfigCosts(tile_us=2.0, k_tile_us=0.5, gbps=3000.0)
    device = cost_model.DeviceCosts(launch_us=5.0, hbm_gbps=4000.0, sm_gbps=100.0, l2_bytes=1e18, blend=16.0)
    calls = []

    def fake_time(found, M, N, K, *args, **kwargs):
        calls.append((M, N, K))
        return {v.key: cost_model.predict_us(v.config, truth, device, M, N, K, 132) / 1e3 for v in found}

    class Info:
        smem_bytes = 200_000

    class Lib:
        def info(self, name):
            return Info()

    from fused_swiglu import _lib

    monkeypatch.setattr(tune, "time_variants", fake_time)
    monkeypatch.setattr(_lib, "library", lambda: Lib())
    progress = tune.Progress(tmp_path / "p.json", {"reps": 1})
    tune.calibrate(progress, torch.bfloat16, None, 132, 1, None, lambda what: None)
    cal = progress.state["calibration"]
    assert cal["device"]["launch_us"] > 0 and cal["device"]["hbm_gbps"] > 0 and cal["device"]["sm_gbps"] > 0
    for config in configs.CATALOG:
        entry = cal["configs"][config.base_name]
        assert entry["smem_bytes"] == 200_000 and entry["gbps"] > 0
        assert entry["k_tile_us"] == pytest.approx(0.5, rel=0.05) and 0 <= entry["tile_us"] <= 2.0
        for r, k, t_us in entry["points"]:
            assert cal["device"]["launch_us"] + r * (entry["tile_us"] + k * entry["k_tile_us"]) == pytest.approx(t_us, rel=0.05)
    timed = len(calls)
    tune.calibrate(tune.Progress(tmp_path / "p.json", {"reps": 1}), torch.bfloat16, None, 132, 1, None, lambda what: None)
    assert len(calls) == timed  # resumed: nothing timed again


def test_one_tune_at_a_time_per_gpu_and_dtype(tmp_path):
    from filelock import FileLock

    lock = tmp_path / "nvidia-h200_bf16.lock"
    with tune.exclusive(lock):
        with pytest.raises(RuntimeError, match="another fused-swiglu tune holds .*nvidia-h200_bf16.lock"):
            with tune.exclusive(lock):
                pass
    with tune.exclusive(lock):  # released: free again
        pass
    held = FileLock(str(lock))
    held.acquire()
    try:
        with pytest.raises(RuntimeError):
            with tune.exclusive(lock):
                pass
    finally:
        held.release()


def test_tune_sustained_times_each_launch_once_fits_and_keeps_the_rest_of_the_file(monkeypatch, tmp_path):
    """run_sustained with the GPU replaced by known costs per launch: the file gets those costs (a file of
    that section alone) and a second run times nothing."""
    from types import SimpleNamespace

    from fused_swiglu import _lib
    from fused_swiglu.bench import power, timing

    truth = {v.key: (0.5 + i * 0.01, 0.3 + i * 0.002) for i, v in enumerate(tune.sustained_variants())}
    calls = []

    def fake_timings(found, M, N, K, dtype, device, reps, flush, extra=None, sets=None, monitor=None, seconds=None):
        assert monitor is not None and seconds == 0.05  # the sustained protocol
        calls.append((M, N, K))
        gflop, mb = cost_model.unfused_features(M, N, K)
        out = {name: SimpleNamespace(median_ms=(2.0 * gflop + 0.5 * mb) / 1e3) for name in extra}
        for v in found:
            waves, _ = cost_model.rounds(v.config, M, N, 132, v.swizzle)
            a, b = truth[v.key]
            out[v.key] = SimpleNamespace(median_ms=waves * (a + -(-K // v.config.tile_k) * b) / 1e3)
        return out

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_lib, "target", lambda index: (132, "NVIDIA Test GPU", 232448))
    monkeypatch.setattr(timing, "flush_buffer", lambda device: None)
    monkeypatch.setattr(timing, "heat_soak", lambda device, monitor: None)
    monkeypatch.setattr(power, "nvml_index", lambda device: 0)
    monkeypatch.setattr(power, "Monitor", lambda index: object())
    monkeypatch.setattr(tune, "variant_timings", fake_timings)
    monkeypatch.setattr(tune, "make_operands", lambda M, N, K, dtype, device: [])
    problems = [(M, s.intermediate_size, s.hidden_size) for s in MODELS[2:] for M in (2048, 6000, 8192)]
    path = tune.run_sustained(problems, torch.bfloat16, tmp_path, seconds=0.05)
    assert path == tmp_path / "nvidia-test-gpu_bf16.json" and len(calls) == len(problems)
    data = json.loads(path.read_text())
    assert set(data) == {"format", "gpu", "dtype", "num_sms", "sustained"}
    section = data["sustained"]
    assert section["from_m"] == 2048 and set(section["launches"]) == set(truth)
    for key, (a, b) in truth.items():
        assert section["launches"][key]["k_tile_us"] == pytest.approx(b, rel=1e-6), key
    assert section["unfused"]["us_per_gflop"] == pytest.approx(2.0) and section["unfused"]["us_per_mb"] == pytest.approx(0.5)
    tune.run_sustained(problems, torch.bfloat16, tmp_path, seconds=0.05)
    assert len(calls) == len(problems)  # resumed: nothing timed again
    with pytest.raises(ValueError, match="seconds must be > 0"):
        tune.run_sustained(problems, torch.bfloat16, tmp_path, seconds=0)
