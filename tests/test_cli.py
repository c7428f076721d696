"""The command line on a machine without a Hopper GPU."""

import argparse
import functools
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fused_swiglu import cli

pytestmark = pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0),
    reason="checks the no-GPU behaviour",
)

SENTENCE = "needs an NVIDIA Hopper GPU (compute capability 9.0) with CUDA"


@pytest.mark.parametrize("command, options", [("bench", []), ("accuracy", []), ("tune", []),
                                             ("tune", ["--families", "fp8"]), ("bench host-time", []),
                                             ("bench e2e", ["--quick", "--models", "Qwen2.5-0.5B"])])
def test_gpu_commands_exit_2_with_one_sentence(command, options, capsys):
    if command == "bench e2e":
        pytest.importorskip("transformers")  # without it: exit 1 naming the package, before the GPU check
    assert cli.main(command.split() + options) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"fused-swiglu {command} {SENTENCE};")
    assert err.count("\n") == 0 and err.endswith(".")


def test_bench_options_parse_before_the_gpu_check(capsys):
    assert cli.main(["bench", "--models", "0.5B,7B", "--tokens", "1", "16", "--methods", "eager,fused_dual",
                     "--dtype", "fp16", "--rep", "5", "--warmup-ms", "1", "--out", "x.json"]) == 2
    for argv in (["bench", "--dtype", "fp8"], ["bench", "--rep", "abc"], ["frobnicate"]):
        assert cli.main(argv) == cli.EXIT_BAD_OPTION == 1, argv  # argparse's usage errors: as the commands' own checks
    assert cli._parser().epilog == cli.EXIT_STATUS  # the exit statuses are listed in --help
    for code in (cli.EXIT_BAD_OPTION, cli.EXIT_NO_GPU, cli.EXIT_WRONG_OUTPUT, cli.EXIT_MODE_FAILED):
        assert f" {code} " in cli.EXIT_STATUS, code


def test_fp8_runs_take_the_fp8_checkpoints_shapes(capsys):
    assert cli.main(["bench", "--fp8", "--models", "Qwen3-32B", "deepseek-v3-dense", "7B", "--tokens", "1"]) == 2
    assert cli.main(["accuracy", "--dtype", "e4m3", "--models", "Llama-3.1-70B"]) == 2
    assert capsys.readouterr().err.count(SENTENCE) == 2


def test_out_path_is_checked_without_creating_folders(tmp_path, capsys):
    target = tmp_path / "new" / "deeper" / "x.json"
    assert cli.main(["bench", "--out", str(target)]) == 2  # no GPU here; the path itself is fine
    assert cli.main(["accuracy", "--out", str(target)]) == 2
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("")
    assert cli.main(["bench", "--out", str(tmp_path / "file" / "sub" / "x.json")]) == 1
    assert "is not a directory" in capsys.readouterr().err


# (argv, what the error says) of bad arguments refused before the GPU check
BAD_ARGUMENTS = [
    (["bench", "--models", "9000B"], "unknown model '9000B'"),
    (["bench", "--tokens", "-5"], "--tokens must be integers >= 1; got '-5'"),
    (["bench", "--tokens", "abc"], "--tokens must be integers >= 1; got 'abc'"),
    (["bench", "--methods", "eager,fused"], "--methods: unknown method 'fused'"),
    (["accuracy", "--models", "9000B"], "unknown model '9000B'"),
    (["bench", "--models", "4096x100"], "--models: custom shape '4096x100': hidden size H and intermediate size I must be"),
    (["accuracy", "--models", "7B,12x64"], "--models: custom shape '12x64'"),
    (["bench", "--models", "\u00b2x8"], "--models: unknown model"),  # a superscript digit is not a size
    (["bench", "--models", "\uff14096x14336"], "--models: unknown model"),  # nor a full-width one
    (["bench", "--models", "8" * 12 + "x8"], "at most 2**31 - 1"),
    (["bench", "--tokens", str(2**31)], "--tokens must be at most 2**31 - 1"),
    (["bench", "--rep", "0"], "--rep must be a positive integer; got 0"),
    (["bench", "--warmup-ms", "inf"], "--warmup-ms must be a finite number >= 0; got inf"),
    (["bench", "--out", "results.csv"], "--out names the JSON file"),
    (["bench", "--out", "/proc/version/x.json"], "--out: cannot create the folder /proc/version"),
    (["accuracy", "--out", "/"], "--out must be a file path, not a directory"),
    (["accuracy", "--seed", str(2**64)], "--seed must be an integer in [0, 2**63)"),
    (["bench", "--models", ","], "--models names nothing; got ','"),
    (["bench", "--methods", ","], "--methods names nothing"),
    (["bench", "--tokens", ",,"], "--tokens names nothing"),
    (["accuracy", "--models", ","], "--models names nothing"),
    (["bench", "--models", "0.5B,,7B"], "--models has an empty item"),
    (["bench", "--models", "7B", "7B"], "--models names '7B' more than once"),
    (["bench", "--models", "0.5B", "0.5b"], "--models: '0.5B' and '0.5b' name the same shape (H=896, I=4864)"),
    (["bench", "--models", "7B,3584x18944"], "--models: '7B' and '3584x18944' name the same shape"),
    (["bench", "--tokens", "01", "1"], "--tokens names 1 more than once"),
    (["bench", "--modles", "7B"], "unrecognized arguments: --modles"),  # not "invalid choice: '7B'"
    (["bench", "--modles", "7B", "e2e"], "bench e2e takes no --modles (see fused-swiglu bench e2e --help)"),
    (["bench", "--tokens", "1", "e2e"], "bench e2e takes no --tokens"),
    (["tune", "--sustained", "--seconds", "inf"], "--seconds must be a finite number > 0; got inf"),
    (["tune", "--seconds", "1"], "--seconds applies to tune --sustained and tune --families only"),
    (["tune", "--sustained", "--rep", "3"], "--rep applies to the interleaved tune"),
    (["bench", "--config", "nosuchcfg"], "--config: 'nosuchcfg' is not a config of the kernel library (none is close "
     "to it); `fused-swiglu build --list` lists them all"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf17"], "--config: 'packed_pingpong_128x192x64_2x1_bf17' "
     "is not a config of the kernel library (closest: packed_pingpong_128x192x64_2x1_bf16"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf16,"], "--config has an empty item"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf16@9:4"], "--config: "
     "'packed_pingpong_128x192x64_2x1_bf16@9:4' has a malformed launch: config's launch must have raster in"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf16@2:4", "--methods", "fused_dual"],
     "--config: 'packed_pingpong_128x192x64_2x1_bf16' runs only in method fused_packed"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf16", "--dtype", "fp16"],
     "--config: 'packed_pingpong_128x192x64_2x1_bf16' is a bf16 config; the benchmark runs --dtype fp16"),
    (["bench", "--config", "packed_pingpong_128x192x64_2x1_bf16", "--methods", "fused_dual"],
     "runs only in method fused_packed, which --methods leaves out"),
    (["bench", "--config", "dual_pingpong_64x128x64_1x1_promote4_bf16", "--methods", "fused_dual"],
     "runs only in method fused_dual_promoted, which --methods leaves out"),
    (["bench", "--config", "packed_fp8_pingpong_64x128x128_1x1_e4m3"],
     "'packed_fp8_pingpong_64x128x128_1x1_e4m3' is an e4m3 config, which --config does not take (bench fp8"),
    (["bench", "--config", "grouped_dual_swapab_pingpong_128x16x64_1x1_bf16"],
     "'grouped_dual_swapab_pingpong_128x16x64_1x1_bf16' is a grouped config, which --config does not take"),
    (["bench", "--fp8", "--models", "9000B"], "--models: unknown model '9000B'"),
    (["bench", "--fp8", "--methods", "eager"], "--methods: unknown method 'eager'; known: fp8_fused"),
    (["bench", "--fp8", "--cuda-graph"], "unrecognized arguments: --cuda-graph"),
    (["bench", "--fp8", "--dtype", "fp16"], "unrecognized arguments: --dtype fp16"),
    (["bench", "--fp8", "--backward"], "--backward, --e2e, --host-time, --tp and --fp8 are separate runs"),
    (["bench", "--fp8", "--rep", "0"], "--rep must be a positive integer; got 0"),
    (["accuracy", "--dtype", "e4m3", "--models", "9000B"], "--models: unknown model '9000B'"),
    (["bench", "moe", "--models", "Qwen3-9000B"], "--models: unknown MoE shape 'Qwen3-9000B'; known: Qwen3-30B-A3B"),
    (["bench", "moe", "--models", "64x32x8x9"], "sizes must be positive and top-k at most the experts"),
    (["bench", "moe", "--models", ","], "--models names nothing"),
    (["bench", "moe", "--methods", "quack_varlen"], "--methods: quack needs the quack-kernels package"),
    (["bench", "moe", "--eager", "--seconds", "3"], "--seconds applies to the sustained protocol"),
    (["bench", "moe", "--methods", "fused_packed"], "--methods: unknown method 'fused_packed'; known: hf_eager"),
    (["bench", "moe", "--eager", "--protocol", "sustained"], "--protocol sustained times CUDA-graph replays: leave "
     "out --eager"),
    (["bench", "moe", "--tokens", "0"], "--tokens"),
    (["bench", "--seconds", "-1"], "--seconds must be a positive finite number; got -1.0"),
    (["bench", "--protocol", "sustained"], "--protocol sustained times CUDA-graph replays: add --cuda-graph"),
    (["bench", "backward", "--tokens", "0"], "--tokens must be integers >= 1"),
    (["bench", "backward", "--models", "foo"], "--models: unknown model 'foo'"),
    (["bench", "fp8", "--models", "foo"], "or an FP8 checkpoint's shape"),
    (["bench", "tp", "--gpus", "2", "--tokens", "x"], "--tokens must be integers >= 1"),
    (["bench", "e2e", "--models", "foo"], "--models"),
    (["bench", "e2e-ab", "--models", "foo"], "--models"),
    (["bench", "host-time", "--out", "/"], "--out must be a file path, not a directory"),
    (["bench", "e2e-ab", "--out", "/"], "--out must be a file path, not a directory"),
    (["bench", "e2e-ab", "--out", "r.csv"], "--out names the JSON file"),
    (["tune", "--tokens", "x"], "--tokens must be integers >= 1"),
    (["tune", "--families", "foo"], "--families: unknown family 'foo'; known: fp8, training,"),
    (["bench", "--seconds", "2"], "--seconds applies to the sustained protocol, which times CUDA-graph replays: add "
     "--cuda-graph"),
    (["bench", "--methods", "nope"], "--methods: unknown method 'nope'; known: eager,"),
    (["tune", "--families", "fp8", "--sustained"], "--families and --sustained are two tunes: run one at a time"),
    (["tune", "--families", "--seconds", "-1"], "--seconds must be a finite number > 0; got -1.0"),
    (["tune", "--families", "dswiglu", "--models", "9000B"], "unknown model '9000B'"),
    (["sweep", "--out", "x.json", "--tokens", "0"], "--tokens must be integers >= 1"),
]


@pytest.mark.parametrize("argv, rule", BAD_ARGUMENTS)
def test_bad_options_are_reported_before_the_gpu_check(argv, rule, capsys):
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert rule in err and SENTENCE not in err


def test_a_peer_without_its_package_is_reported_before_the_gpu_check(capsys, monkeypatch):
    from fused_swiglu.bench import methods

    real = methods.importlib.import_module

    def no_quack(name, *args):
        if name.startswith("quack"):
            raise ImportError("No module named 'quack'")
        return real(name, *args)

    monkeypatch.setattr(methods.importlib, "import_module", no_quack)
    monkeypatch.setattr(methods, "peer_problem", functools.lru_cache(maxsize=None)(methods.peer_problem.__wrapped__))
    assert cli.main(["bench", "--methods", "cublas_gemm,quack"]) == 1
    err = capsys.readouterr().err
    assert "--methods: quack needs the quack-kernels package (pip install quack-kernels" in err and SENTENCE not in err


def test_info_works_without_gpu(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "GPU: no CUDA GPU" in out or "GPU 0:" in out
    assert f"cache dir: {tmp_path}" in out
    assert "nvcc:" in out and "library:" in out


@pytest.mark.usefixtures("package_data_only")
def test_info_names_each_gpu_s_config_choice_data(capsys, tmp_path, monkeypatch):
    import types

    import torch

    gpus = [types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, multi_processor_count=132),
            types.SimpleNamespace(name="NVIDIA H100 PCIe", major=9, minor=0, multi_processor_count=114)]
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: gpus[i])
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "GPU 0: NVIDIA H200 (compute capability 9.0, 132 SMs)" in out
    lines = [line for line in out.splitlines() if "config choice data:" in line]
    assert len(lines) == 2 and "nvidia-h200_bf16.json" in lines[0] and "overrides)" in lines[0]
    assert "no data of its own" in lines[1]


def test_sweep_and_tune_check_their_options_before_the_gpu(capsys, tmp_path):
    assert cli.main(["sweep", "--out", str(tmp_path / "s.json"), "--models", "nope"]) == 1
    assert "--models: unknown model 'nope'" in capsys.readouterr().err
    assert cli.main(["tune", "--rep", "0"]) == 1
    assert "--rep must be >= 1" in capsys.readouterr().err
    (tmp_path / "file").write_text("")
    assert cli.main(["sweep", "--out", str(tmp_path / "file" / "s.json")]) == 1
    assert "is not a directory" in capsys.readouterr().err


def test_info_reports_a_bad_prebuilt_library(capsys, tmp_path, monkeypatch):
    bogus = tmp_path / "lib.so"
    bogus.write_text("not a library")
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(bogus))
    assert cli.main(["info"]) == 1
    assert "cannot be used" in capsys.readouterr().out


def test_version(capsys):
    from fused_swiglu import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fused-swiglu {__version__}"


def test_module_entry_points():
    for mod in ("fused_swiglu.cli", "fused_swiglu"):
        out = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True, text=True)
        assert out.returncode == 0 and "bench" in out.stdout and "build" in out.stdout


def test_a_library_config_name_passes_the_option_check(capsys):
    from fused_swiglu import configs

    name = sorted(c.name(torch.bfloat16) for c in configs.choosable_configs())[0]
    assert cli.main(["bench", "--config", name]) in (0, 2)  # 2: no Hopper GPU here
    assert "--config" not in capsys.readouterr().err
    assert cli.main(["bench", "--config", f"{name}@1:1"]) in (0, 2)  # with its launch, as FUSED_SWIGLU_CONFIG
    assert "--config" not in capsys.readouterr().err


@pytest.mark.parametrize("command", ["info", "bench", "accuracy", "build"])
def test_malformed_jobs_variable_is_reported_by_every_command(command, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSED_SWIGLU_JOBS", "0")
    assert cli.main([command]) == 1
    assert "FUSED_SWIGLU_JOBS must be a positive integer; got '0'" in capsys.readouterr().err


def test_info_names_config_overrides_that_the_library_lacks(monkeypatch, capsys):
    import fused_swiglu._lib as lib_mod
    from fused_swiglu import env

    class FakeConfig:
        name, stages, smem_bytes, epilogue_smem_bytes = "packed_pingpong_64x128x64_1x1_bf16", 8, 2**17, 2**14

    class FakeLibrary:
        def __init__(self, path, config_dirs=()):
            self.ordered_names = [FakeConfig.name]
            self.names = frozenset(self.ordered_names)

        def find(self, name):
            return Path("/nonexistent") / name

        def info(self, name):
            return FakeConfig()

    monkeypatch.setattr(lib_mod, "Library", FakeLibrary)
    monkeypatch.setattr(env, "library_path", lambda: Path("/nonexistent/libfused_swiglu.so"))
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_64x128x64_1x1_bf16,bogus")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "FUSED_SWIGLU_CONFIG: packed_pingpong_64x128x64_1x1_bf16, bogus (not config names of this version's " \
           "16-bit packed or dual kernels, which it applies to, so ignored: bogus (none is close to it))" in out
    assert "not in the library" not in out  # bogus is named once, as no config of this version
    # a name of this version that the loaded library lacks (a library built from other sources)
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "dual_pingpong_128x96x64_1x1_bf16")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "FUSED_SWIGLU_CONFIG: dual_pingpong_128x96x64_1x1_bf16\n" in out
    assert "not in the library, so ignored: dual_pingpong_128x96x64_1x1_bf16" in out


def test_info_checks_config_overrides_without_a_library(monkeypatch, capsys, tmp_path):
    from fused_swiglu import env

    monkeypatch.setattr(env, "library_path", lambda: None)
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "foo")
    assert cli.main(["info"]) == 0
    assert "FUSED_SWIGLU_CONFIG: foo (not config names of this version's 16-bit packed or dual kernels, which it " \
        "applies to, so ignored: foo (none is close to it))" in capsys.readouterr().out
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "packed_pingpong_128x192x64_2x1_bf17")
    assert cli.main(["info"]) == 0
    assert "(closest: packed_pingpong_128x192x64_2x1_bf16" in capsys.readouterr().out
    # a launch is a config name with its order: a good one passes, a malformed one is named with the rule
    good = "packed_pingpong_128x192x64_2x1_bf16"
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", f"{good}@2:4,{good}@9:9")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "not config names" not in out
    assert f"FUSED_SWIGLU_CONFIG: {good}@2:4\n" in out  # the good one alone, the malformed one on its own line
    assert f"FUSED_SWIGLU_CONFIG: {good}@9:9: config's launch must have raster in (0, 1, 2)" in out
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", f"{good}@9:9")
    assert cli.main(["info"]) == 0
    assert capsys.readouterr().out.count("FUSED_SWIGLU_CONFIG:") == 1  # named once, with the rule
    # an e4m3 config is not one the override applies to (its calls take config= instead): named as ignored
    fp8 = "packed_fp8_pingpong_128x192x128_2x1_e4m3"
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", fp8)
    assert cli.main(["info"]) == 0
    assert f"which it applies to, so ignored: {fp8}" in capsys.readouterr().out


def test_build_says_when_fused_swiglu_library_overrides_what_it_built(monkeypatch, capsys, tmp_path):
    from fused_swiglu.build import cache, torch_ops

    built = tmp_path / "cache" / "libfused_swiglu.so"
    monkeypatch.setattr(cache, "ensure_built", lambda force=False, log=None, names=None: built)
    monkeypatch.setattr(torch_ops, "ensure_built", lambda force=False, log=None: tmp_path / torch_ops.LIB_NAME)
    monkeypatch.setattr(cache, "read_build_info", lambda path: None)
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(tmp_path / "other.so"))
    assert cli.main(["build"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{built}\n")
    assert (f"note: FUSED_SWIGLU_LIBRARY is set, so the package loads {tmp_path / 'other.so'} (which is not a "
            "file: calls will fail until it is unset or fixed), not the library above") in out
    (tmp_path / "other.so").write_bytes(b"")
    assert cli.main(["build"]) == 0
    out = capsys.readouterr().out
    assert f"note: FUSED_SWIGLU_LIBRARY is set, so the package loads {tmp_path / 'other.so'}, not the library above" in out
    monkeypatch.setenv("FUSED_SWIGLU_LIBRARY", str(built))
    assert cli.main(["build"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out and f"operator library: {tmp_path / torch_ops.LIB_NAME}" in out


def test_info_without_nvcc_does_not_ask_for_a_build(monkeypatch, capsys):
    from fused_swiglu import env
    from fused_swiglu.build import toolchain
    from fused_swiglu.errors import BuildError

    def no_nvcc():
        raise BuildError(f"nvcc not found; {toolchain.INSTALL_HINT}")

    monkeypatch.setattr(toolchain, "find_nvcc", no_nvcc)
    monkeypatch.setattr(env, "library_path", lambda: None)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "nvcc: unavailable: nvcc not found" in out
    assert 'pip install "fused-swiglu[cuda]"' in out  # printed as text, not read as a style tag
    assert "library: unknown: the cache is keyed by nvcc's version, and no nvcc was found (above)" in out
    assert "run `fused-swiglu build`" not in out


def test_malformed_environment_variable_is_one_line_not_a_traceback(monkeypatch, capsys, tmp_path):
    from fused_swiglu import cli

    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSED_SWIGLU_JOBS", "abc")
    monkeypatch.delenv("FUSED_SWIGLU_LIBRARY", raising=False)
    assert cli.main(["build"]) == 1
    err = capsys.readouterr().err
    assert "FUSED_SWIGLU_JOBS must be a positive integer" in err and "Traceback" not in err


def test_sigterm_ends_a_command_with_143_and_the_handler_is_restored(monkeypatch, capsys):
    import signal

    from fused_swiglu import cli

    def terminated(args, console):
        cli._raise_terminated(signal.SIGTERM, None)  # what the installed handler does on SIGTERM

    monkeypatch.setattr(cli.commands, "info", terminated)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["info"]) == 143
    assert "fused-swiglu info: terminated" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_out_with_a_trailing_separator_names_a_folder(tmp_path, capsys):
    assert cli.main(["bench", "--out", f"{tmp_path}/results/"]) == 1
    assert "--out must be a file path, not a directory" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_out_in_a_folder_that_takes_no_files_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    from fused_swiglu.bench import paths

    def refuse(**kwargs):  # a read-only or virtual file system, where root passes os.access
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(paths.tempfile, "mkstemp", refuse)
    assert cli.main(["accuracy", "--out", str(tmp_path / "x.json")]) == 1
    assert f"--out: cannot write in the folder {tmp_path} (Read-only file system)" in capsys.readouterr().err
    assert cli.main(["accuracy", "--out", str(tmp_path / "new" / "x.json")]) == 1  # the folder to be made is named
    assert (f"--out: cannot create the folder {tmp_path / 'new'}: {tmp_path} takes no new files (Read-only file "
            "system)") in capsys.readouterr().err


def test_out_in_a_virtual_file_system_is_refused_in_words(tmp_path, capsys, monkeypatch):
    """/proc and /sys answer "No such file or directory" for a folder that exists: the message says what it means."""
    from fused_swiglu.bench import paths

    def refuse(**kwargs):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(paths.tempfile, "mkstemp", refuse)
    assert cli.main(["accuracy", "--out", str(tmp_path / "x.json")]) == 1
    err = capsys.readouterr().err
    assert f"--out: cannot write in the folder {tmp_path} (its file system takes no new files)" in err
    assert "No such file" not in err


def test_out_probe_leaves_nothing_behind(tmp_path):
    from fused_swiglu.bench import report

    assert report.check_out_path(str(tmp_path / "x.json")) == tmp_path / "x.json"
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_of_the_results_names_out(tmp_path, monkeypatch):
    from fused_swiglu.bench import report

    def full(self, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report.Path, "write_text", full)
    with pytest.raises(ValueError, match=r"^--out: cannot write the results to .*x\.json .*No space left on device"):
        report.write_results(tmp_path / "x.json", {}, [], report.BENCH_FIELDS)


@pytest.mark.parametrize("how", ["print", "rich"])
def test_a_closed_stdout_stops_quietly_with_status_141(how, monkeypatch, capsys):
    def closed(args, console):
        if how == "rich":
            console.on_broken_pipe()  # what rich calls when a write to stdout fails
        raise BrokenPipeError

    monkeypatch.setattr(cli.commands, "info", closed)
    assert cli.main(["info"]) == 141
    assert capsys.readouterr().err == ""


def test_build_passes_the_config_names_it_is_given(monkeypatch, capsys, tmp_path):
    from fused_swiglu.build import cache, torch_ops

    seen = []

    def ensure_built(force=False, log=None, names=None):
        seen.append(names)
        return tmp_path / "libfused_swiglu.so"

    monkeypatch.setattr(cache, "ensure_built", ensure_built)
    monkeypatch.setattr(torch_ops, "ensure_built", lambda force=False, log=None: tmp_path / torch_ops.LIB_NAME)
    monkeypatch.setattr(cache, "cached", lambda name, inputs=None: None)
    monkeypatch.delenv("FUSED_SWIGLU_LIBRARY", raising=False)
    assert cli.main(["build", "packed_pingpong_64x64x64_1x1_bf16,dual_pingpong_64x64x64_1x1_bf16"]) == 0
    assert cli.main(["build"]) == 0
    assert seen == [["packed_pingpong_64x64x64_1x1_bf16", "dual_pingpong_64x64x64_1x1_bf16"], None]


def test_info_says_when_the_cache_directory_cannot_be_used(monkeypatch, capsys, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(blocker))
    monkeypatch.delenv("FUSED_SWIGLU_LIBRARY", raising=False)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert f"cache dir: {blocker} (cannot be used: it is not a directory; set FUSED_SWIGLU_CACHE_DIR" in out
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path / "new" / "cache"))  # created by the first build
    assert cli.main(["info"]) == 0
    assert "cannot be used" not in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["bench", "--protocol", "sustained"], "--protocol sustained times CUDA-graph replays: add --cuda-graph"),
    (["bench", "--cuda-graph", "--seconds", "0"], "--seconds must be a positive finite number; got 0.0"),
    (["bench", "--cuda-graph", "--protocol", "interleaved", "--seconds", "2"],
     "--seconds applies to the sustained protocol, not to --protocol interleaved"),
    (["bench", "--tp", "2", "--protocol", "sustained"], "unrecognized arguments: --protocol sustained"),
    (["bench", "--e2e", "--seconds", "1"], "unrecognized arguments: --seconds 1"),
])
def test_the_timing_protocol_options_are_checked_before_any_gpu_work(argv, says, capsys):
    assert cli.main(argv) == 1
    assert says in capsys.readouterr().err


def test_an_unknown_protocol_is_a_usage_error(capsys):
    assert cli.main(["bench", "--protocol", "fast"]) == 1
    assert "invalid choice: 'fast'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, rule", [
    (["bench", "fp8", "--models", "9000B"], "--models: unknown model '9000B'"),
    (["bench", "backward", "--rep", "0"], "--rep must be a positive integer"),
    (["bench", "tp", "--gpus", "1"], "--gpus: tensor parallel needs a world size of at least 2; got 1"),
    (["bench", "tp"], "the following arguments are required: --gpus"),
    (["bench", "e2e", "--modes", "bogus"], "--modes: unknown mode 'bogus'"),
    (["bench", "e2e-ab", "--modes", "decode"], "fused-swiglu bench e2e-ab: --modes: unknown mode 'decode' for bench "
     "e2e-ab; known: compiled_decode, captured_decode_step, prefill"),
    (["bench", "e2e-ab", "--modes", "prefill,prefill"], "--modes names 'prefill' more than once"),
    (["bench", "e2e-ab", "--rounds", "0"], "fused-swiglu bench e2e-ab: --rounds must be an integer >= 1; got 0"),
    (["bench", "e2e-ab", "--repeats", "-1"], "--repeats must be an integer >= 1; got -1"),
    (["bench", "e2e-ab", "--warmups", "0"], "--warmups must be an integer >= 1; got 0"),
    (["bench", "e2e-ab", "--decode-batch", "0"], "--decode-batch must be an integer >= 1; got 0"),
    (["bench", "e2e-ab", "--modes", "training", "--train-len", "0"], "--train-len must be an integer >= 1; got 0"),
    (["bench", "e2e-ab", "--train-batch", "0"], "--train-batch must be an integer >= 1; got 0"),
    (["tune", "--families", "fp8", "--models", "4096x14344"], "tune --families takes H a multiple of 16 and I of 128"),
    (["tune", "--families", "packed_fp8", "--models", "4104x14336"], "tune --families takes H a multiple of 16 and I of 8"),
    (["bench", "e2e-ab", "--rounds", "ten"], "argument --rounds: invalid int value: 'ten'"),
    (["bench", "e2e-ab", "--models", "Qwen9"], "--models: unknown model 'Qwen9' for the end-to-end benchmark; known: "
     "Qwen2.5-0.5B"),
    (["bench", "e2e-ab", "--models", "qwen3-1.7b", "Qwen3-1.7B"], "--models names 'Qwen3-1.7B' more than once"),
    (["bench", "e2e-ab", "--dtype", "e4m3"], "argument --dtype: invalid choice: 'e4m3'"),
    (["bench", "e2e-ab", "--out", "ab.csv"], "--out names the JSON file"),
    (["bench", "e2e-ab", "--out", "/"], "--out must be a file path, not a directory"),
    (["bench", "e2e-ab", "--tokens", "1"], "fused-swiglu bench e2e-ab: error: unrecognized arguments: --tokens 1"),
    (["bench", "e2e-ab", "--variants", "fused", "patched"], "argument --variants: invalid choice: 'fused' (choose from "
     "'stock', 'patched', 'backend')"),
    (["bench", "e2e-ab", "--variants", "backend"], "argument --variants: expected 2 arguments"),
    (["bench", "e2e-ab", "--one-process"], "fused-swiglu bench e2e-ab: --one-process needs modes that do not compile "
     "the model (captured_decode_step, prefill, training); compiled_decode compiles the model"),
    (["bench", "e2e-ab", "--one-process", "--variants", "stock", "backend", "--modes", "compiled_decode"],
     "--one-process times the stock and patched variants of one model; got variants stock backend"),
    (["bench", "e2e-ab", "--variants", "patched", "patched"], "fused-swiglu bench e2e-ab: --variants must be two "
     "different ones of stock, patched, backend; got patched patched"),
    (["bench", "e2e-ab", "--variants", "backend", "patched", "--modes", "compiled_decode", "prefill"],
     "fused-swiglu bench e2e-ab: --variants backend (the model compiled with fused_backend()) needs modes that compile "
     "the model (compiled_decode); prefill does not"),
    (["bench", "e2e-ab", "--e2e"], "bench e2e-ab and --e2e are separate runs"),
    (["bench", "host-time", "--methods", "eager"],
     "fused-swiglu bench host-time: error: unrecognized arguments: --methods eager"),
    (["info", "--bogus"], "usage: fused-swiglu info [-h]"),
    (["bench", "--fp8", "--e2e"], "--backward, --e2e, --host-time, --tp and --fp8 are separate runs"),
    (["bench", "--tp", "--models", "7B"], "--tp needs a world size (bench tp --gpus N)"),
])
def test_each_bench_mode_is_a_subcommand_with_its_own_options(argv, rule, capsys):
    assert cli.main(argv) == cli.EXIT_BAD_OPTION
    assert rule in capsys.readouterr().err


def test_bench_e2e_ab_help_lists_its_options_and_the_exit_statuses(capsys, monkeypatch):
    from fused_swiglu.bench import e2e_ab, e2e_models

    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["bench", "e2e-ab", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: fused-swiglu bench e2e-ab ")
    for option in ("--models", "--variants", "--modes", "--rounds", "--repeats", "--warmups", "--out", "--dtype"):
        assert f"{option} " in text, option
    assert all(name in text for name in e2e_models.names()) and all(mode in text for mode in e2e_ab.MODES)
    assert "(default 10)" in text and "(default 5)" in text  # --rounds, --repeats and --warmups
    assert "each one of stock, patched, backend" in text and "(default: stock patched)" in text
    assert " ".join(cli.EXIT_STATUS.split()) in text
    assert "4 bench e2e or e2e-ab: a mode failed on a model" in text
    assert cli.main(["bench", "--help"]) == 0
    assert "e2e-ab" in capsys.readouterr().out  # listed among the modes


def test_bench_e2e_ab_options_parse_before_the_gpu_check(tmp_path, capsys):
    pytest.importorskip("transformers")  # without it: exit 1 naming the package, before the GPU check
    target = tmp_path / "new" / "deeper" / "ab.json"
    argv = ["bench", "e2e-ab", "--models", "qwen2.5-0.5b,Llama-3-8B", "--modes", "compiled_decode", "prefill",
            "--rounds", "3", "--repeats", "2", "--warmups", "1", "--dtype", "fp16", "--out", str(target)]
    assert cli.main(argv) == cli.EXIT_NO_GPU
    assert capsys.readouterr().err.startswith(f"fused-swiglu bench e2e-ab {SENTENCE};")
    assert not (tmp_path / "new").exists()  # --out is checked, no folder made
    (tmp_path / "file").write_text("")
    assert cli.main(["bench", "e2e-ab", "--out", str(tmp_path / "file" / "sub" / "ab.json")]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert "fused-swiglu bench e2e-ab: --out: cannot create the folder" in err and SENTENCE not in err


def test_bench_e2e_ab_options_reach_the_run():
    from fused_swiglu.bench import e2e_ab, e2e_models

    args = cli._parser().parse_args(["bench", "e2e-ab", "--models", "llama-3-8b", "--modes", "prefill,compiled_decode",
                                     "--rounds", "4", "--repeats", "3", "--warmups", "2", "--dtype", "fp16",
                                     "--decode-batch", "8"])
    opts = cli.bench._ab_options(args)
    assert (opts.models, opts.modes, opts.rounds, opts.repeats, opts.warmups, opts.dtype, opts.decode_batch) == (
        ["Llama-3-8B"], ["prefill", "compiled_decode"], 4, 3, 2, "fp16", 8)
    assert opts.variants == ["stock", "patched"]
    default = cli.bench._ab_options(cli._parser().parse_args(["bench", "e2e-ab"]))
    assert default.modes == list(e2e_ab.DEFAULT_MODES) and (default.rounds, default.repeats, default.warmups) == (10, 5, 10)
    assert default.decode_batch == 1
    assert default.models == [s.name for s in e2e_models.MODELS] and default.variants == ["stock", "patched"]


@pytest.mark.parametrize("argv, variants, modes", [
    (["--variants", "backend", "patched"], ["backend", "patched"], ["compiled_decode"]),
    (["--variants", "stock", "backend", "--modes", "compiled_decode"], ["stock", "backend"], ["compiled_decode"]),
    (["--variants", "patched", "stock", "--modes", "prefill"], ["patched", "stock"], ["prefill"]),
    (["--variants", "patched", "stock"], ["patched", "stock"], ["compiled_decode", "captured_decode_step", "prefill"]),
])
def test_bench_e2e_ab_variants_reach_the_run(argv, variants, modes):
    """The pair in the order given (A then B: the ratios are A / B); without --modes, the modes where both
    apply (the backend variant: the modes that compile the model)."""
    opts = cli.bench._ab_options(cli._parser().parse_args(["bench", "e2e-ab", *argv]))
    assert (opts.variants, opts.modes) == (variants, modes)


def test_the_e2e_ab_script_calls_the_command_with_options_it_takes():
    script = (Path(__file__).resolve().parents[1] / "tools" / "e2e_ab.sh").read_text()
    call = next(line for line in script.splitlines() if "e2e-ab --models" in line)
    assert "python3 -m fused_swiglu.cli bench e2e-ab --models" in call
    assert "--variants ${VARIANTS:-stock patched}" in script
    for variants in (["stock", "patched"], ["backend", "patched"]):
        args = cli._parser().parse_args(["bench", "e2e-ab", "--models", "Qwen2.5-0.5B", "Qwen3-1.7B", "Llama-3-8B",
                                         "--modes", "compiled_decode", "--variants", *variants, "--rounds", "10",
                                         "--repeats", "5", "--out", "out/e2e_ab.json"])
        opts = cli.bench._ab_options(args)
        assert opts.models == ["Qwen2.5-0.5B", "Qwen3-1.7B", "Llama-3-8B"] and opts.variants == variants


def test_the_old_mode_flags_still_run_and_name_the_new_spelling(capsys):
    assert cli.main(["bench", "--tp", "1", "--models", "7B"]) == cli.EXIT_BAD_OPTION  # the world size is checked
    err = capsys.readouterr().err
    assert "`bench --tp` is spelt `bench tp --gpus N` now; running `fused-swiglu bench tp --gpus 1 --models 7B`" in err
    assert "--gpus: tensor parallel needs a world size of at least 2; got 1" in err
    for argv in (["bench", "--tp", "--gpus", "1"], ["bench", "tp", "--gpus=1", "--tp"]):
        assert cli.main(argv) == cli.EXIT_BAD_OPTION  # the mode flag beside the new spelling: the world size checked
        assert "--gpus: tensor parallel needs a world size of at least 2; got 1" in capsys.readouterr().err
    assert cli.main(["bench", "fp8", "--fp8", "--models", "9000B"]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert "running `fused-swiglu bench fp8 --models 9000B`" in err
    assert "--models: unknown model '9000B'" in err and "or an FP8 checkpoint's shape: Qwen3-8B" in err
    assert cli.main(["bench", "fp8", "--e2e"]) == cli.EXIT_BAD_OPTION
    assert "bench fp8 and --e2e are separate runs" in capsys.readouterr().err
    assert cli.main(["bench", "--tp=1"]) == cli.EXIT_BAD_OPTION
    assert "running `fused-swiglu bench tp --gpus 1`" in capsys.readouterr().err
    assert cli.main(["bench", "--models", "7B", "--fp8", "--rep", "0"]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert "`bench --fp8` is spelt `bench fp8` now" in err and "fused-swiglu bench fp8: --rep must be" in err


def test_every_command_and_mode_has_a_description_and_the_exit_statuses():
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    pages = dict(commands)
    modes = next(a for a in commands["bench"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    pages.update({f"bench {m}": p for m, p in modes.items()})
    assert len(pages) == 14
    for name, page in pages.items():
        assert page.description and page.epilog == cli.EXIT_STATUS, name
        for action in page._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{name} {action.option_strings[0]} has no help"


@pytest.mark.parametrize("argv, page", [
    (["--bogus"], "fused-swiglu"),
    (["report", "--bogus"], "fused-swiglu report"),
    (["report", "--bogus", "x.json"], "fused-swiglu report"),
    (["bench", "--bogus"], "fused-swiglu bench"),
    (["bench", "tp", "--bogus"], "fused-swiglu bench tp"),  # --gpus is required there too
    (["build", "--bogus"], "fused-swiglu build"),
])
def test_an_unknown_option_is_named_at_every_level(argv, page, capsys):
    assert cli.main(argv) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"{page}: error: unrecognized arguments: --bogus"
    assert err.startswith(f"usage: {page} ") and "required" not in err


@pytest.mark.parametrize("argv, page, missing", [
    ([], "fused-swiglu", "command"),
    (["report"], "fused-swiglu report", "results"),
    (["bench", "tp", "--models", "7B"], "fused-swiglu bench tp", "--gpus"),
])
def test_a_missing_argument_is_named_where_no_option_is_unknown(argv, page, missing, capsys):
    assert cli.main(argv) == cli.EXIT_BAD_OPTION
    assert capsys.readouterr().err.splitlines()[-1] == f"{page}: error: the following arguments are required: {missing}"


def _pages() -> dict:
    """Every help page: the main one, each command's and each bench mode's."""
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    modes = next(a for a in commands["bench"]._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {"": parser, **commands, **{f"bench {m}": p for m, p in modes.items()}}


@pytest.mark.parametrize("columns", [50, 80, 123])
def test_help_never_breaks_a_name(columns, monkeypatch):
    from fused_swiglu.bench import backward, e2e_ab, fp8, methods
    from fused_swiglu.bench.e2e import STEPS

    monkeypatch.setenv("COLUMNS", "1000")
    wide = {name: page.format_help() for name, page in _pages().items()}
    monkeypatch.setenv("COLUMNS", str(columns))
    for name, page in _pages().items():
        text = page.format_help()
        assert text.split() == wide[name].split(), f"{name!r} at {columns} columns"  # lines break between words
    flat = {name: " ".join(page.format_help().split()) for name, page in _pages().items()}
    for page, names in (("bench", methods.METHODS), ("bench fp8", fp8.METHODS), ("bench backward", backward.METHODS),
                        ("bench e2e", STEPS), ("bench e2e-ab", e2e_ab.MODES),
                        ("bench", ["--cuda-graph", "Qwen2.5-7B", "Mistral-Small-24B"])):
        for name in names:
            assert name in flat[page], (page, name)


def test_models_help_lists_every_name_the_option_takes():
    from fused_swiglu.bench import e2e_models, shapes

    accepted = [*shapes.QWEN2_5_BY_SIZE, *(m.model for m in shapes.SWEEP_MODELS), "HxI"]
    pages = _pages()
    for name in ("bench", "bench backward", "bench fp8", "bench tp", "accuracy", "tune", "sweep"):
        text = next(a.help for a in pages[name]._actions if "--models" in a.option_strings)
        assert [n for n in accepted if n not in text] == [], name
    fp8_text = next(a.help for a in pages["bench fp8"]._actions if "--models" in a.option_strings)
    assert all(m.model in fp8_text for m in shapes.FP8_MODELS)
    for name in ("bench e2e", "bench e2e-ab"):
        e2e_text = next(a.help for a in pages[name]._actions if "--models" in a.option_strings)
        assert all(n in e2e_text for n in e2e_models.names()), name


def test_every_help_page_lists_the_same_exit_statuses_bad_input_included(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    flat_status = " ".join(cli.EXIT_STATUS.split())
    for name, page in _pages().items():
        assert flat_status in " ".join(page.format_help().split()), name
    for code in (0, 1, 2, 3, 4, 130, 141, 143):
        assert f" {code} " in cli.EXIT_STATUS
    assert "1 bad input: an unknown or bad option, a results file that report cannot read" in cli.EXIT_STATUS


def _no_build(monkeypatch):
    from fused_swiglu.build import cache

    def ensure_built(**kwargs):
        pytest.fail("build compiled after a check that should have stopped it")

    monkeypatch.setattr(cache, "ensure_built", ensure_built)


def test_build_names_an_unknown_config_with_the_closest_ones(monkeypatch, capsys):
    _no_build(monkeypatch)
    assert cli.main(["build", "bogus"]) == cli.EXIT_BAD_OPTION
    assert capsys.readouterr().err == ("fused-swiglu build: 'bogus' is not a config name (none is close to it); "
                                       "`fused-swiglu build --list` lists them all\n")
    assert cli.main(["build", "packed_pingpong_64x64x64_1x1"]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert err.startswith("fused-swiglu build: 'packed_pingpong_64x64x64_1x1' is not a config name (closest: ")
    assert "packed_pingpong_64x64x64_1x1_bf16" in err and err.count("_bf16") + err.count("_fp16") == 3
    assert cli.main(["build", "PACKED_PINGPONG_64X64X64_1X1_BF16"]) == cli.EXIT_BAD_OPTION  # names are lower case
    assert "(closest: packed_pingpong_64x64x64_1x1_bf16" in capsys.readouterr().err


def test_build_list_prints_every_config_name_and_builds_nothing(monkeypatch, capsys):
    from fused_swiglu.build import sources, units

    _no_build(monkeypatch)
    assert cli.main(["build", "--list"]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == units.config_names(sources.csrc_dir())
    assert cli.main(["build", "--list", "bogus"]) == cli.EXIT_BAD_OPTION
    assert "--list builds nothing; give it without config names" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_cache_folder_under_proc_is_reported_by_info_and_stops_build(monkeypatch, capsys):
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", "/proc/x")
    monkeypatch.delenv("FUSED_SWIGLU_LIBRARY", raising=False)
    assert cli.main(["info"]) == 0
    assert ("cache dir: /proc/x (cannot be used: /proc takes no new folders, so it cannot be created: "
            in capsys.readouterr().out)
    _no_build(monkeypatch)
    assert cli.main(["build"]) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert err.startswith("fused-swiglu build: the build cache folder /proc/x cannot be used: /proc takes no new "
                          "folders, so it cannot be created: ")
    assert err.endswith("; set FUSED_SWIGLU_CACHE_DIR to a writable directory\n")


def test_a_cache_folder_that_takes_no_files_is_reported_though_its_permissions_allow_it(monkeypatch, capsys,
                                                                                         tmp_path):
    from fused_swiglu.cli import commands

    def refuse(**kwargs):  # a read-only file system, where the superuser passes os.access
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(commands.tempfile, "mkdtemp", refuse)
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSED_SWIGLU_LIBRARY", raising=False)
    assert cli.main(["info"]) == 0
    assert f"cache dir: {tmp_path} (cannot be used: it is not writable: Read-only file system; set " \
           "FUSED_SWIGLU_CACHE_DIR to a writable directory)" in capsys.readouterr().out
    _no_build(monkeypatch)
    assert cli.main(["build", "packed_pingpong_64x64x64_1x1_bf16"]) == cli.EXIT_BAD_OPTION
    assert "FUSED_SWIGLU_CACHE_DIR" in capsys.readouterr().err


def test_help_version_and_top_level_errors_load_no_torch():
    # the top-level parser of a call naming no command is built from the commands' one-line help alone
    import subprocess
    import sys

    code = ("import sys; from fused_swiglu.cli import main; status = main(sys.argv[1:]); "
            "assert 'torch' not in sys.modules, 'torch was imported'; raise SystemExit(status)")
    for argv, status in ((["--help"], 0), (["--version"], 0), (["--bogus"], 1), (["bogus"], 1), ([], 1)):
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == status, (argv, done.stderr)
        assert "torch was imported" not in done.stderr


def test_the_short_parser_lists_what_the_full_one_does():
    from fused_swiglu.cli.options import COMMAND_HELP

    def commands(parser):
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {name: choice.help for choice in sub._choices_actions for name in [choice.dest]}

    assert commands(cli._parser(full=False)) == commands(cli._parser()) == COMMAND_HELP


@pytest.mark.parametrize("argv, named", [
    (["bench", "--rep", "5", "--cuda-graph", "backward"], "--rep, --cuda-graph before backward"),
    (["bench", "--models", "7B", "backward"], "--models before backward"),
    (["bench", "--dtype", "fp16", "e2e"], "--dtype before e2e"),
    (["bench", "--out", "r.json", "host-time"], "--out before host-time"),
    (["bench", "--rounds", "3", "e2e-ab"], "--rounds before e2e-ab"),
])
def test_options_before_a_bench_mode_are_refused_not_dropped(argv, named, capsys):
    assert cli.main(argv) == cli.EXIT_BAD_OPTION
    err = capsys.readouterr().err
    assert "options go after the mode" in err and named in err


def test_tune_checks_its_output_folder_before_the_gpu(capsys):
    assert cli.main(["tune", "--out-dir", "/proc/fused-swiglu-tune"]) == cli.EXIT_BAD_OPTION
    assert "--out-dir" in capsys.readouterr().err


@pytest.mark.parametrize("argv, shown", [(["sweep", "--help"], "--out OUT"), (["bench", "tp", "--help"], "--gpus N")])
def test_help_pages_show_required_options_as_required(argv, shown, capsys):
    assert cli.main(argv) == 0
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert shown in usage and f"[{shown}]" not in usage
