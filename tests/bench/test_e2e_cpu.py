"""``bench --e2e`` on a CPU: tiny Qwen2 / Llama models, the fused path's PyTorch backend."""

import json

import pytest
import torch
from rich.console import Console

pytest.importorskip("transformers")

from fused_swiglu import cli  # noqa: E402
from fused_swiglu.bench import e2e, e2e_models, e2e_modes, e2e_report  # noqa: E402

SMALL = dict(new_tokens=4, prompt_len=8, gen_repeats=2, prefill_batch=2, prefill_len=16, prefill_repeats=2,
             train_batch=2, train_len=16, train_repeats=2, accuracy_prompt_len=8)


def _run(tmp_path, **kwargs):
    opts = e2e.E2EOptions(models=[e2e_models.TINY_QWEN2, e2e_models.TINY_LLAMA], device="cpu", backend="torch",
                          out=tmp_path / "e2e.json", settings=dict(SMALL), **kwargs)
    log = tmp_path / "log.txt"
    with log.open("w") as f:
        results = e2e.run_e2e(opts, Console(file=f, width=200))
    return results, log.read_text(), opts.out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("e2e"))


def test_every_mode_has_a_row_per_model(run):
    results, _, _ = run
    assert [(r["model"], r["mode"]) for r in results["rows"]] == [
        (m, mode) for m in ("tiny-qwen2", "tiny-llama") for mode in e2e_modes.MODES]
    for r in results["rows"]:
        assert {"model", "mode", "stock_ms", "fused_ms", "speedup"} <= set(r) and "error" not in r


def test_eager_modes_and_prefill_are_timed(run):
    results, _, _ = run
    for r in results["rows"]:
        if r["mode"] in e2e_modes.CUDA_ONLY:
            continue
        assert r["stock_ms"] > 0 and r["fused_ms"] > 0
        assert r["speedup"] == pytest.approx(r["stock_ms"] / r["fused_ms"])
        assert len(r["stock_samples_ms"]) == len(r["fused_samples_ms"]) == 2
    by = {(r["model"], r["mode"]): r for r in results["rows"]}
    assert by["tiny-qwen2", "eager_decode_b8"]["batch"] == 8 and by["tiny-qwen2", "eager_decode_b1"]["new_tokens"] == 4
    prefill = by["tiny-llama", "prefill"]
    assert (prefill["batch"], prefill["tokens"], prefill["logits_to_keep"]) == (2, 16, 1)
    train = by["tiny-qwen2", "training"]
    assert (train["batch"], train["tokens"], train["layers"]) == (2, 16, 2)
    assert train["stock_peak_gib"] is None and train["fused_peak_gib"] is None  # CUDA only


def test_training_leaves_no_gradients_and_the_model_as_it_was():
    model = e2e_models.build(e2e_models.TINY_QWEN2, torch.device("cpu"), torch.bfloat16)
    s = e2e_modes.Settings(device=torch.device("cpu"), backend="torch", train_batch=1, train_len=8, train_repeats=1)
    row = e2e_modes.training(model, s)
    assert row["stock_ms"] > 0 and not model.training
    assert all(p.grad is None for p in model.parameters())
    assert not any("forward" in vars(m) for m in model.modules())  # left stock


def test_gpu_only_modes_are_skipped_with_a_reason(run):
    results, _, _ = run
    skipped = [r for r in results["rows"] if r["mode"] in e2e_modes.CUDA_ONLY]
    assert len(skipped) == 4
    for r in skipped:
        assert r["stock_ms"] is None and r["fused_ms"] is None and r["speedup"] is None
        assert r["skipped"] == "needs a CUDA device; this run is on cpu"
    assert e2e.failures(results) == []


def test_accuracy_rows(run):
    results, _, _ = run
    assert [a["model"] for a in results["accuracy"]] == ["tiny-qwen2", "tiny-llama"]
    for a in results["accuracy"]:
        assert 0.0 <= a["token_agreement"] <= 1.0 and a["new_tokens"] == 4
        assert 0 < a["stock_logits_rel_err"] < 0.05 and 0 < a["fused_logits_rel_err"] < 0.05
        for key in ("stock_fp32_token_agreement", "fused_fp32_token_agreement", "stock_top1_vs_fp32",
                    "fused_top1_vs_fp32", "fused_top1_vs_stock"):
            assert 0.0 <= a[key] <= 1.0


def test_json_meta_and_table(run):
    results, log, out = run
    data = json.loads(out.read_text())
    assert data["rows"] == results["rows"] and data["accuracy"] == results["accuracy"]
    meta = data["meta"]
    for key in ("gpu", "torch_version", "transformers_version", "fused_swiglu_version", "git_commit", "date",
                "settings", "modes"):
        assert key in meta
    assert meta["quick"] is False and meta["complete"] is True and meta["backend"] == "torch"
    assert meta["settings"]["new_tokens"] == 4 and set(meta["models"]) == {"tiny-qwen2", "tiny-llama"}
    assert "End to end: stock vs fused" in log and "eager_decode_b8" in log and "tiny-llama:" in log
    assert "End to end: accuracy" in log and f"wrote {out}" in log


def test_the_plot_is_written_beside_the_json(run):
    pytest.importorskip("matplotlib")
    _, log, out = run
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {out} and {png}" in log


def test_plot_is_skipped_without_matplotlib(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    results = {"meta": {"elapsed_s": 1.0}, "accuracy": [],
               "rows": [{"model": "m", "mode": "prefill", "stock_ms": 2.0, "fused_ms": 1.0, "speedup": 2.0}]}
    with (tmp_path / "log.txt").open("w") as f:
        e2e_report.print_and_write(results, tmp_path / "r.json", Console(file=f, width=200))
    assert (tmp_path / "r.json").is_file() and not (tmp_path / "r.png").exists()
    assert "no plot: matplotlib is not installed" in (tmp_path / "log.txt").read_text()


def test_a_failing_mode_is_recorded_and_the_run_goes_on(tmp_path, monkeypatch):
    def broken(model, s):
        raise RuntimeError("compile exploded")

    monkeypatch.setitem(e2e_modes.RUNNERS, "prefill", broken)
    results, _, _ = _run(tmp_path, modes=["eager_decode_b1", "prefill"])
    by = {(r["model"], r["mode"]): r for r in results["rows"]}
    assert by["tiny-qwen2", "prefill"]["error"] == "RuntimeError: compile exploded"
    assert by["tiny-qwen2", "prefill"]["stock_ms"] is None and by["tiny-llama", "eager_decode_b1"]["stock_ms"] > 0
    assert e2e.failures(results) == [f"{m} prefill: RuntimeError: compile exploded" for m in ("tiny-qwen2", "tiny-llama")]
    assert results["accuracy"] == []  # not among the modes asked for


def test_a_mode_that_fails_while_patched_leaves_the_model_stock(monkeypatch):
    def patched_then_broken(model, s):
        e2e_modes.set_fused(model, True, s.backend)
        raise RuntimeError("mid-mode")

    monkeypatch.setitem(e2e_modes.RUNNERS, "prefill", patched_then_broken)
    model = e2e_models.build(e2e_models.TINY_QWEN2, torch.device("cpu"), torch.bfloat16)
    settings = e2e_modes.Settings(device=torch.device("cpu"), backend="torch")
    row = e2e._run_step(model, e2e_models.TINY_QWEN2, "prefill", settings)
    assert row["error"] == "RuntimeError: mid-mode"
    assert not any("forward" in vars(layer.mlp) for layer in model.model.layers)


def test_a_model_that_cannot_be_built_fails_every_step(tmp_path, monkeypatch):
    def oom(spec, device, dtype, seed=0):
        raise MemoryError("out of memory")

    monkeypatch.setattr(e2e_models, "build", oom)
    results, _, _ = _run(tmp_path, modes=["prefill", "accuracy"])
    assert all(r["error"] == "building the model failed: MemoryError: out of memory" for r in results["rows"])
    assert len(results["rows"]) == len(results["accuracy"]) == 2
    assert len(e2e.failures(results)) == 4


def test_an_interrupted_run_writes_what_it_measured(tmp_path, monkeypatch):
    def interrupt(model, s):
        raise KeyboardInterrupt

    monkeypatch.setitem(e2e_modes.RUNNERS, "prefill", interrupt)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, modes=["eager_decode_b1", "prefill"])
    data = json.loads((tmp_path / "e2e.json").read_text())
    assert data["meta"]["complete"] is False and data["meta"]["stopped_by"] == "interrupted"
    assert [(r["model"], r["mode"]) for r in data["rows"]] == [("tiny-qwen2", "eager_decode_b1")]


def test_the_real_models_have_their_published_sizes():
    by = {s.name: s for s in e2e_models.MODELS}
    assert list(by) == ["Qwen2.5-0.5B", "Qwen2.5-7B", "Llama-3-8B", "Qwen3-1.7B"]
    cfg = by["Qwen2.5-0.5B"].config()
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
            cfg.num_key_value_heads, cfg.vocab_size, cfg.tie_word_embeddings) == (896, 4864, 24, 14, 2, 151936, True)
    assert type(by["Llama-3-8B"].config()).__name__ == "LlamaConfig"
    q3 = by["Qwen3-1.7B"].config()
    assert type(q3).__name__ == "Qwen3Config" and q3.head_dim == 128 and q3.num_key_value_heads == 8
    assert (by["Qwen2.5-7B"].hidden_size, by["Qwen2.5-7B"].intermediate_size, by["Qwen2.5-7B"].vocab_size) == (
        3584, 18944, 152064)
    assert [s.name for s in e2e_models.find(["llama-3-8b", "Qwen3-1.7B"])] == ["Llama-3-8B", "Qwen3-1.7B"]
    with pytest.raises(ValueError, match="unknown model '8B' for the end-to-end benchmark; known: Qwen2.5-0.5B"):
        e2e_models.find(["8B"])


def test_modes_and_settings_are_checked():
    assert e2e.check_modes(["prefill", "eager_decode_b1"]) == ["eager_decode_b1", "prefill"]
    assert e2e.check_modes(None) == list(e2e.STEPS)
    with pytest.raises(ValueError, match="unknown mode 'decode'"):
        e2e.check_modes(["decode"])
    s = e2e.resolve_settings(e2e.E2EOptions(quick=True), torch.device("cpu"))
    assert s.gen_repeats == e2e.QUICK["gen_repeats"] < e2e.FULL["gen_repeats"]
    with pytest.raises(ValueError, match="settings: unknown key"):
        e2e.resolve_settings(e2e.E2EOptions(settings={"tokens": 3}), torch.device("cpu"))
    with pytest.raises(ValueError, match="settings: new_tokens must be an integer >= 1; got 0"):
        e2e.resolve_settings(e2e.E2EOptions(settings={"new_tokens": 0}), torch.device("cpu"))


@pytest.mark.parametrize("argv, message", [
    (["--e2e", "--host-time"], "--e2e, --host-time, --tp and --fp8 are separate runs"),
    (["--e2e", "--tokens", "1"], "unrecognized arguments: --tokens 1"),
    (["--e2e", "--rep", "3", "--cuda-graph"], "unrecognized arguments: --rep 3 --cuda-graph"),
    (["--e2e", "--models", "7B"], "--models: unknown model '7B' for the end-to-end benchmark"),
    (["--e2e", "--models", "qwen2.5-7b,Qwen2.5-7B"], "--models names 'Qwen2.5-7B' more than once"),
    (["--e2e", "--e2e-modes", "prefill,bogus"], "--modes: unknown mode 'bogus'"),
    (["--e2e-modes", "prefill"], "--e2e-modes applies to bench e2e only"),
    (["e2e", "--modes", "prefill,bogus"], "--modes: unknown mode 'bogus'"),
    (["--quick"], "unrecognized arguments: --quick"),
    (["--e2e", "--out", "e2e.png"], "--out names the JSON file (its plot goes beside it as .png)"),
])
def test_bad_e2e_options_exit_1(argv, message, capsys):
    assert cli.main(["bench", *argv]) == cli.EXIT_BAD_OPTION
    assert message in capsys.readouterr().err


def test_a_failed_mode_makes_the_command_exit_4(monkeypatch, capsys):
    seen = {}

    def fake_run(opts, console):
        seen.update(models=opts.models, modes=opts.modes, quick=opts.quick)
        return {"meta": {}, "accuracy": [], "rows": [
            {"model": "Qwen2.5-0.5B", "mode": "prefill", "stock_ms": 1.0, "fused_ms": 1.0},
            {"model": "Qwen2.5-0.5B", "mode": "compiled_decode", "stock_ms": None, "fused_ms": None,
             "error": "BackendCompilerFailed: boom\nmore"}]}

    monkeypatch.setattr(cli.bench, "no_hopper", lambda command: None)
    monkeypatch.setattr(e2e, "run_e2e", fake_run)
    argv = ["bench", "--e2e", "--quick", "--models", "qwen2.5-0.5b", "--e2e-modes", "prefill,compiled_decode"]
    assert cli.main(argv) == cli.EXIT_MODE_FAILED
    assert seen == {"models": ["Qwen2.5-0.5B"], "modes": ["compiled_decode", "prefill"], "quick": True}
    assert capsys.readouterr().err.endswith("fused-swiglu bench e2e: failed: Qwen2.5-0.5B compiled_decode: "
                                            "BackendCompilerFailed: boom\n")


def test_alternate_warms_up_after_every_switch(monkeypatch):
    from fused_swiglu.bench import e2e_modes

    log = []
    monkeypatch.setattr(e2e_modes, "set_fused", lambda model, fused, backend: log.append(("state", fused)))
    stock, fused = e2e_modes.alternate(lambda: log.append("measure") or 1.0, None, 2, "auto",
                                       warmup=lambda: log.append("warmup"))
    assert stock == fused == [1.0, 1.0]
    assert log == [("state", False), "warmup", "measure", ("state", True), "warmup", "measure",
                   ("state", True), "warmup", "measure", ("state", False), "warmup", "measure", ("state", False)]
