"""bench e2e-ab on the CPU: two worker processes, alternating rounds, the row's ratios."""

from __future__ import annotations

import json
import multiprocessing
import re
import threading
import types

import pytest
from rich.console import Console

pytest.importorskip("transformers")

from fused_swiglu.bench import e2e_ab, e2e_models  # noqa: E402


def _opts(**kw):
    base = dict(models=[e2e_models.TINY_QWEN2], modes=["prefill"], rounds=3, repeats=1, prefill_batch=1,
                prefill_len=8, device="cpu")
    return e2e_ab.ABOptions(**{**base, **kw})


def test_rounds_alternate_between_two_processes_and_ratios_are_per_round(tmp_path):
    out = tmp_path / "ab.json"
    results = e2e_ab.run_ab(_opts(), out, Console(quiet=True))
    (row,) = results["rows"]
    assert "error" not in row, row.get("error")
    assert row["model"] == "tiny-qwen2" and row["mode"] == "prefill" and row["rounds"] == 3
    assert len(row["ratios"]) == len(row["stock_samples_ms"]) == len(row["fused_samples_ms"]) == 3
    for r, s, f in zip(row["ratios"], row["stock_samples_ms"], row["fused_samples_ms"]):
        assert r == pytest.approx(s / f)
    assert row["ratio_min"] <= row["ratio_median"] <= row["ratio_max"]
    assert (row["variant_a"], row["variant_b"]) == ("stock", "patched")
    assert json.loads(out.read_text())["rows"][0]["ratio_median"] == row["ratio_median"]


def test_a_mixture_of_experts_model_runs_with_its_experts_patched():
    """The Qwen3-MoE stand-in: every layer's experts module patched (the worker checks one per layer)."""
    results = e2e_ab.run_ab(_opts(models=[e2e_models.TINY_QWEN3_MOE], rounds=1), None, Console(quiet=True))
    (row,) = results["rows"]
    assert "error" not in row, row.get("error")
    assert row["model"] == "tiny-qwen3-moe" and row["ratio_median"] > 0


def test_the_moe_model_has_qwen3_30b_a3b_s_size():
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    spec = e2e_models.find(["qwen3-30b-a3b"])[0]
    cfg = spec.config()
    assert (cfg.num_experts, cfg.num_experts_per_tok, cfg.moe_intermediate_size, cfg.num_hidden_layers) == (
        128, 8, 768, 48)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    assert 30.4e9 < e2e_models.n_params(model) < 30.6e9  # the published 30.5 B


def test_a_mode_that_cannot_run_is_a_row_with_its_error():
    results = e2e_ab.run_ab(_opts(modes=["compiled_decode"], rounds=1), None, Console(quiet=True))
    (row,) = results["rows"]
    assert row["ratio_median"] is None and "compiled_decode needs a CUDA device" in row["error"]


@pytest.mark.parametrize("kw,says", [({"modes": ["decode"]}, "unknown mode 'decode'"),
                                     ({"rounds": 0}, "rounds must be an integer >= 1"),
                                     ({"models": ["Qwen9"]}, "unknown model 'Qwen9'")])
def test_bad_options_are_named(kw, says):
    with pytest.raises(ValueError, match=says):
        e2e_ab.check_options(_opts(**kw))



def _cli_on_the_cpu(monkeypatch):
    """``fused-swiglu bench e2e-ab`` as on a GPU machine, but on the CPU: the tiny model found by name,
    the run on the CPU with a short prefill (options the command does not take), no GPU check."""
    import dataclasses

    from fused_swiglu.cli import bench

    run_ab = e2e_ab.run_ab
    monkeypatch.setattr(e2e_models, "EXTRA_MODELS", (*e2e_models.EXTRA_MODELS, e2e_models.TINY_QWEN2))
    monkeypatch.setattr(e2e_ab, "run_ab", lambda opts, out, console: run_ab(
        dataclasses.replace(opts, device="cpu", prefill_batch=1, prefill_len=8), out, console))
    monkeypatch.setattr(bench, "no_hopper", lambda command: None)


def test_the_cli_command_times_the_pair_in_two_processes_and_writes_the_rows(tmp_path, monkeypatch, capsys):
    from fused_swiglu import cli

    _cli_on_the_cpu(monkeypatch)
    out = tmp_path / "runs" / "ab.json"
    assert cli.main(["bench", "e2e-ab", "--models", "tiny-qwen2", "--modes", "prefill", "--rounds", "2",
                     "--repeats", "1", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "tiny-qwen2 prefill: stock/patched" in captured.out and f"wrote {out}" in captured.out
    assert "failed" not in captured.err
    results = json.loads(out.read_text())
    assert results["meta"]["kind"] == "e2e_ab" and results["meta"]["options"]["rounds"] == 2
    (row,) = results["rows"]
    assert row["model"] == "tiny-qwen2" and row["mode"] == "prefill" and "error" not in row
    assert row["rounds"] == len(row["ratios"]) == 2 and row["repeats_per_round"] == 1


def test_the_cli_command_exits_4_naming_each_failed_pair_after_running_the_others(tmp_path, monkeypatch, capsys):
    """As ``bench e2e`` for a failed mode: the row holds the error, the other pairs run, one line on
    stderr per failed pair (which worker, and its exception), exit status 4."""
    from fused_swiglu import cli

    _cli_on_the_cpu(monkeypatch)
    ran = []

    def run_pair(spec, mode, opts):  # a worker's failure as run_pair raises it; the other pair measured
        ran.append(mode)
        if mode == "captured_decode_step":
            raise RuntimeError("the patched worker failed:\nTraceback (most recent call last):\n  File \"x.py\", "
                               "line 1, in worker\nRuntimeError: CUDA error: out of memory\n")
        return {"model": spec.name, "mode": mode, "rounds": opts.rounds, "ratio_median": 1.0, "ratio_min": 1.0,
                "ratio_max": 1.0, "stock_ms": 1.0, "fused_ms": 1.0, "ratios": [1.0] * opts.rounds}

    monkeypatch.setattr(e2e_ab, "run_pair", run_pair)
    out = tmp_path / "ab.json"
    assert cli.main(["bench", "e2e-ab", "--models", "tiny-qwen2", "--modes", "captured_decode_step", "prefill",
                     "--out", str(out)]) == cli.EXIT_MODE_FAILED
    assert ran == ["captured_decode_step", "prefill"]
    assert capsys.readouterr().err.strip() == ("fused-swiglu bench e2e-ab: failed: tiny-qwen2 captured_decode_step: "
                                               "the patched worker failed: RuntimeError: CUDA error: out of memory")
    failed, measured = json.loads(out.read_text())["rows"]
    assert failed["ratio_median"] is None and "CUDA error: out of memory" in failed["error"]
    assert measured["mode"] == "prefill" and measured["ratio_median"] == 1.0


# --- --variants: which two variants, and the rows that name them -----------------------------------------


class _ThreadContext:
    """The spawn context with threads for processes: the workers, the test's fakes, run in this process."""

    Pipe = staticmethod(multiprocessing.Pipe)

    class Process(threading.Thread):
        def kill(self):  # never needed: a fake worker returns on "stop"
            raise AssertionError("a fake worker did not stop")


def _fake_workers(monkeypatch, ms: dict[str, float]):
    """Workers that answer each "time" with ``ms[variant]`` (and Dynamo's count unchanged); returns the
    order in which the variants were timed."""
    timed = []

    def worker(conn, spec, mode, variant, opts):
        info = {"prepare_s": 1.0, "patched_blocks": spec.num_layers if variant == "patched" else 0}
        if variant == "backend":
            info["fused_mlps"] = spec.num_layers
        conn.send(("ready", info))
        while conn.recv() != "stop":
            timed.append(variant)
            conn.send(("ms", (ms[variant], 7)))

    monkeypatch.setattr(e2e_ab, "mp", types.SimpleNamespace(get_context=lambda method: _ThreadContext))
    monkeypatch.setattr(e2e_ab, "worker", worker)
    return timed


def test_the_default_pair_keeps_the_stock_and_patched_fields(monkeypatch):
    timed = _fake_workers(monkeypatch, {"stock": 3.0, "patched": 2.0})
    (row,) = e2e_ab.run_ab(_opts(rounds=2), None, Console(quiet=True))["rows"]
    assert timed == ["stock", "patched", "patched", "stock"]
    assert (row["variant_a"], row["variant_b"]) == ("stock", "patched")
    assert (row["stock_ms"], row["fused_ms"], row["ratios"]) == (3.0, 2.0, [1.5, 1.5])
    assert row["stock_samples_ms"] == [3.0, 3.0] and row["fused_samples_ms"] == [2.0, 2.0]
    assert row["graphs_compiled_while_timed"] == {"stock": 0, "fused": 0}
    assert row["prepare_s"] == {"stock": 1.0, "fused": 1.0}
    assert not any("backend" in key for key in row)


def test_backend_against_patched_rows_name_both_variants(monkeypatch, tmp_path):
    timed = _fake_workers(monkeypatch, {"backend": 1.5, "patched": 2.0})
    console = Console(record=True, width=200)
    out = tmp_path / "ab.json"
    results = e2e_ab.run_ab(_opts(modes=["compiled_decode"], variants=["backend", "patched"], rounds=3), out, console)
    assert timed == ["backend", "patched", "patched", "backend", "backend", "patched"]  # A B, B A, A B
    (row,) = json.loads(out.read_text())["rows"]
    assert row == results["rows"][0]
    assert (row["variant_a"], row["variant_b"]) == ("backend", "patched")
    assert (row["backend_ms"], row["fused_ms"], row["ratio_median"]) == (1.5, 2.0, 0.75)
    assert row["ratios"] == [0.75] * 3
    assert row["backend_samples_ms"] == [1.5] * 3 and row["fused_samples_ms"] == [2.0] * 3
    assert row["graphs_compiled_while_timed"] == {"backend": 0, "fused": 0}
    assert row["prepare_s"] == {"backend": 1.0, "fused": 1.0} and row["backend_fused_mlps"] == 2
    assert "stock_ms" not in row and "stock_samples_ms" not in row
    meta = results["meta"]
    assert meta["unit"].startswith("ratio = backend ms / patched ms") and "(backend, patched)" in meta["protocol"]
    assert meta["options"]["variants"] == ["backend", "patched"]
    printed = console.export_text()
    assert "tiny-qwen2 compiled_decode: backend/patched 0.750 [0.750, 0.750] over 3 rounds" in printed
    assert "(backend 1.500 ms, patched 2.000 ms)" in printed


def test_a_failed_pair_names_its_variants(monkeypatch):
    def run_pair(spec, mode, opts):
        raise RuntimeError("the backend worker failed:\nRuntimeError: fused_backend fused the MLPs of 1 of 2")

    monkeypatch.setattr(e2e_ab, "run_pair", run_pair)
    (row,) = e2e_ab.run_ab(_opts(modes=["compiled_decode"], variants=["stock", "backend"]), None,
                           Console(quiet=True))["rows"]
    assert (row["variant_a"], row["variant_b"], row["ratio_median"]) == ("stock", "backend", None)
    assert "the backend worker failed" in row["error"]


@pytest.mark.parametrize("variants,modes,says", [
    (["backend", "patched"], ["prefill"], "variants backend (the model compiled with fused_backend()) needs modes "
                                          "that compile the model (compiled_decode); prefill does not"),
    (["stock", "backend"], ["compiled_decode", "captured_decode_step", "prefill"],
     "captured_decode_step, prefill do not"),
    (["stock", "stock"], ["prefill"],
     "variants must be two different ones of stock, patched, backend; got stock stock"),
    (["stock"], ["prefill"], "variants must be two different ones"),
    (["stock", "fused"], ["prefill"], "got stock fused"),
])
def test_bad_variants_are_named(variants, modes, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        e2e_ab.check_options(_opts(variants=variants, modes=modes))


def test_the_default_modes_of_a_pair():
    assert e2e_ab.default_modes(["stock", "patched"]) == ["compiled_decode", "captured_decode_step", "prefill"]
    assert "training" in e2e_ab.MODES  # run when named
    assert e2e_ab.default_modes(["backend", "patched"]) == ["compiled_decode"]
    e2e_ab.check_options(_opts(variants=["patched", "backend"], modes=e2e_ab.default_modes(["patched", "backend"])))


def test_fused_mlps_counts_layers_and_refuses_an_unfused_product():
    from fused_swiglu.compile_fusion import FusedSwiGLUBackend, FusionRecord

    def record(layer, graph=0, reason=None):
        return FusionRecord(graph, f"mul_{layer}", f"layers_{layer}_mlp_gate_proj_weight",
                            f"layers_{layer}_mlp_up_proj_weight", "separate", (128, 64), reason)

    backend = FusedSwiGLUBackend("eager", False, "fast")
    backend.fused = [record(0), record(1), record(0, graph=1)]  # layer 0 in a second graph counts once
    assert e2e_ab.fused_mlps(backend, 2) == 2
    with pytest.raises(RuntimeError, match="fused the MLPs of 2 of 3 decoder layers"):
        e2e_ab.fused_mlps(backend, 3)
    backend.unfused = [record(2, reason="a projection has a bias")]
    with pytest.raises(RuntimeError, match="unfused: mul_2: a projection has a bias"):
        e2e_ab.fused_mlps(backend, 2)


def test_generate_compiles_with_the_backend_itself():
    """generate deep-copies its CompileConfig; the config of the backend variant hands torch.compile the
    backend itself, so that its records (read by the backend worker) are there after the call."""
    import torch

    from fused_swiglu import fused_backend
    from fused_swiglu.bench import e2e_modes as em

    torch._dynamo.reset()
    model = e2e_models.build(e2e_models.TINY_QWEN2, torch.device("cpu"), torch.bfloat16)
    backend = fused_backend("eager", force=True)
    config = em.compile_config(backend)
    config._compile_all_devices = True  # transformers compiles on the CPU only when asked
    s = em.Settings(device=torch.device("cpu"), new_tokens=3, prompt_len=4)
    cache = em.static_cache(model, 7, 1)
    ids = em.prompt(model, 1, 4, 0, s.device)
    try:
        model.generate(**em.generate_kwargs(model, ids, s), **{em.cache_keyword(model): cache},
                       compile_config=config)
        assert vars(model).get("_compiled_call") is not None
        assert e2e_ab.fused_mlps(backend, e2e_models.TINY_QWEN2.num_layers) == 2
    finally:
        torch._dynamo.reset()
    assert em.compile_config().backend == "inductor"


@pytest.mark.parametrize("spec", [e2e_models.TINY_QWEN2, e2e_models.TINY_QWEN3_MOE], ids=lambda s: s.name)
def test_the_decode_step_decodes_decode_batch_sequences_at_the_same_position(spec):
    import torch

    model = e2e_models.build(spec, torch.device("cpu"), torch.float32)
    step = e2e_ab._decode_step(model, _opts(decode_batch=3, prompt_len=5), torch.device("cpu"))
    with torch.no_grad():
        first, again = step(), step()
    assert first.shape == (3, 1, spec.vocab_size)
    torch.testing.assert_close(first, again)  # re-run at the same position, not one further


def test_one_process_times_both_variants_of_one_model(tmp_path):
    """one_process: a single worker builds the model once and answers for both variants."""
    results = e2e_ab.run_ab(_opts(models=[e2e_models.TINY_QWEN3_MOE], rounds=2, one_process=True), tmp_path / "ab.json",
                            Console(quiet=True))
    (row,) = results["rows"]
    assert "error" not in row, row.get("error")
    assert len(row["stock_samples_ms"]) == len(row["fused_samples_ms"]) == 2
    assert row["prepare_s"]["stock"] >= 0 and row["prepare_s"]["fused"] >= 0
    assert results["meta"]["protocol"].startswith("one process, stock and patched captured on the same weights")


class _Conn:
    """A worker's end of the pipe: hands it ``asks`` one by one, keeps what it sends."""

    def __init__(self, asks):
        self.asks, self.sent = list(asks), []

    def recv(self):
        return self.asks.pop(0)

    def send(self, message):
        self.sent.append(message)


def test_one_process_runs_each_variant_on_the_model_as_that_variant(monkeypatch):
    """Uncaptured (the CPU), the worker patches or unpatches the model before a variant's calls: each
    measurement sees the model in its variant's state, whatever the order asked."""
    from fused_swiglu.patch import base

    seen = []

    def fake_prepare(model, mode, opts, device, backend=None):
        def measure():
            seen.append(any(base.installed(m) is not None for m in model.modules()))
            return 1.0
        return measure

    monkeypatch.setattr(e2e_ab, "_prepare", fake_prepare)
    asks = [("time", "stock"), ("time", "patched"), ("time", "patched"), ("time", "stock"), "stop"]
    conn = _Conn(asks)
    e2e_ab.worker_both(conn, e2e_models.TINY_QWEN2, "prefill", _opts(one_process=True))
    kinds = [m[0] for m in conn.sent]
    assert kinds == ["ready", "ms", "ms", "ms", "ms"], conn.sent
    assert conn.sent[0][1]["patched"]["patched_blocks"] == e2e_models.TINY_QWEN2.num_layers
    # prepare-time calls (stock, then patched), then the four asked: stock, patched, patched, stock
    assert seen == [False, True, False, True, True, False]


@pytest.mark.parametrize("kw,says", [
    ({"variants": ["patched", "backend"], "modes": ["compiled_decode"]},
     "one_process times the stock and patched variants of one model; got variants patched backend"),
    ({"modes": ["prefill", "compiled_decode"]}, "one_process needs modes that do not compile the model"),
])
def test_one_process_options_are_checked(kw, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        e2e_ab.check_options(_opts(one_process=True, **kw))


@pytest.mark.parametrize("one_process", [False, True])
def test_the_training_step_is_timed_per_round_in_both_variants(tmp_path, one_process):
    """training: forward with labels and backward, each variant per round, in two processes or in one (which
    unpatches and patches the model between the variants' turns)."""
    opts = _opts(modes=["training"], rounds=2, train_batch=1, train_len=8, one_process=one_process)
    e2e_ab.check_options(opts)
    (row,) = e2e_ab.run_ab(opts, tmp_path / "ab.json", Console(quiet=True))["rows"]
    assert "error" not in row, row.get("error")
    assert row["mode"] == "training" and len(row["ratios"]) == 2
    assert all(t > 0 for t in row["stock_samples_ms"] + row["fused_samples_ms"])


def test_a_training_step_runs_backward_through_the_variant_the_model_is_in(monkeypatch):
    """In one process the training step runs on the model as each variant: the untimed step after a switch and
    every timed one see the patched blocks exactly in the patched turns, and the steps leave gradients."""
    from fused_swiglu.patch import base

    seen, models = [], []
    real = e2e_ab._training_step

    def watched(model, opts, device):
        models.append(model)
        inner = real(model, opts, device).step  # one untimed step, as the real one takes

        def step():
            seen.append(any(base.installed(m) is not None for m in model.modules()))
            inner()

        def timed():
            step()
            return 1.0

        timed.step = step
        return timed

    monkeypatch.setattr(e2e_ab, "_training_step", watched)
    conn = _Conn([("time", "stock"), ("time", "patched"), ("time", "patched"), ("time", "stock"), "stop"])
    e2e_ab.worker_both(conn, e2e_models.TINY_QWEN2, "training", _opts(one_process=True, train_len=8))
    assert [m[0] for m in conn.sent] == ["ready", "ms", "ms", "ms", "ms"], conn.sent
    # at prepare: stock, patched; then asked stock (a switch: untimed, timed), patched (switch), patched, stock
    assert seen == [False, True, False, False, True, True, True, False, False]
    (model,) = set(models)
    assert model.training and all(p.grad is not None for p in model.parameters() if p.requires_grad)
