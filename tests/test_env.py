"""env: the environment variables the package reads."""

from pathlib import Path

from fused_swiglu import env


def test_a_relative_cache_folder_is_taken_from_the_current_directory(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", "relative/dir")
    assert env.cache_dir() == tmp_path / "relative" / "dir" and env.cache_dir().is_absolute()
    monkeypatch.setenv("FUSED_SWIGLU_CACHE_DIR", "~/x")
    assert env.cache_dir() == Path.home() / "x"


def test_set_config_names_replaces_the_variable_until_reset(monkeypatch):
    monkeypatch.setenv("FUSED_SWIGLU_CONFIG", "a, b")
    assert env.config_override() == ["a", "b"] and env.config_override_origin() == "FUSED_SWIGLU_CONFIG"
    try:
        env.set_config_names("c")
        assert env.config_override() == ["c"]
        assert env.config_override_origin() == "fused_swiglu.configs.set_config_override"
        env.set_config_names("")
        assert env.config_override() == []
    finally:
        env.set_config_names(None)
    assert env.config_override() == ["a", "b"]
