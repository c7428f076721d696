"""env: the environment variables the package reads."""

from pathlib import Path

from fused_swiglu import env


def test_a_relative_cache_folder_is_taken_from_the_current_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", "relative/dir")
    assert env.cache_dir() == tmp_path / "relative" / "dir" and env.cache_dir().is_absolute()
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", "~/x")
    assert env.cache_dir() == Path.home() / "x"
