"""Profiles: inheritance, overrides, and one-line errors naming file:line for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from glmserve.config.profiles import (
    deep_merge,
    list_profile_names,
    load_profile,
    parse_override,
    resolve_profile,
    server_argv,
)
from glmserve.errors import ConfigError


@pytest.fixture
def profdir(tmp_path, monkeypatch):
    """An isolated configs/ with a profiles/ folder the tests write into."""
    d = tmp_path / "configs" / "profiles"
    d.mkdir(parents=True)
    monkeypatch.setenv("GLMSERVE_CONFIGS", str(tmp_path / "configs"))

    def write(name: str, text: str) -> Path:
        p = d / f"{name}.yaml"
        p.write_text(text)
        return p

    return write


def test_shipped_profiles_are_listed_and_load():
    names = list_profile_names()
    for name in ("glm5-nvfp4-tp8", "trtllm_mla", "cutlass_mla", "flashinfer_gtc", "triton",
                 "trtllm_mla_decode"):  # fmt: skip
        assert name in names
        load_profile(name)


def test_overlays_set_their_attention_backend_and_patches():
    assert load_profile("trtllm_mla").flag_value("--attention-backend") == "trtllm_mla"
    cut = load_profile("cutlass_mla")
    assert cut.flag_value("--attention-backend") == "cutlass_mla"
    assert cut.flag_value("--page-size") == "128"
    gtc = load_profile("flashinfer_gtc")
    assert gtc.flag_value("--attention-backend") == "flashinfer"
    assert gtc.patches == ["flashinfer_mla_gather_cast"]
    assert gtc.env["GLMSERVE_PATCHES"] == "flashinfer_mla_gather_cast"
    assert load_profile("glm5-nvfp4-tp8").flag_value("--attention-backend") is None


def test_deep_merge_child_wins_lists_replace_and_parent_order_kept():
    base = {"server": {"a": 1, "b": 2}, "patches": ["x"], "env": {"A": "1"}}
    child = {"server": {"b": 3, "c": 4}, "patches": ["y", "z"]}
    merged = deep_merge(base, child)
    assert list(merged["server"].items()) == [("a", 1), ("b", 3), ("c", 4)]
    assert merged["patches"] == ["y", "z"]
    assert merged["env"] == {"A": "1"}
    assert base["server"]["b"] == 2  # inputs untouched


def test_server_argv_value_forms():
    argv, owners = server_argv(
        {"flag": True, "off": False, "none": None, "n": 8, "f": 0.92, "l": [1, 2], "j": {"a": 1}}
    )
    assert argv == ["--flag", "--n", "8", "--f", "0.92", "--l", "1", "2", "--j", '{"a":1}']
    assert owners[:3] == ["flag", "n", "n"]


def test_set_overrides(profdir):
    profdir("p", "server:\n  port: 8000\n  host: 0.0.0.0\n  model-path: m\n")
    spec = load_profile("p", ["server.port=8001", "server.enable-metrics=true", "env.X=a b"])
    assert spec.flag_value("--port") == "8001"
    assert spec.flag_value("--enable-metrics") is True
    assert spec.env["X"] == "a b"
    assert spec.origins["--port"].file == "<--set>"
    assert load_profile("p", ["server.host=false"]).flag_value("--host") is None


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("nokey", "expected KEY=VALUE"),
        ("bogus.x=1", "unknown key 'bogus'"),
        ("server.a.b=1", "one level below"),
        ("venv.x=1", "has no sub-keys"),
        ("extends=foo", "unknown key 'extends'"),
    ],
)
def test_bad_overrides(item, fragment):
    with pytest.raises(ConfigError, match=fragment):
        parse_override(item)


def test_extends_chain_and_origins_name_file_and_line(profdir):
    base = profdir("base", "description: b\nserver:\n  port: 1\n  host: h\n  model: m\n")
    child = profdir("child", "extends: base\nserver:\n  port: 2\n")
    spec = load_profile("child")
    assert spec.flag_value("--port") == "2"
    assert spec.origins["--port"].file == str(child) and spec.origins["--port"].line == 3
    assert spec.origins["--host"].file == str(base) and spec.origins["--host"].line == 4
    assert spec.sources == [str(base), str(child)]


@pytest.mark.parametrize(
    "files, name, fragment",
    [
        ({"a": "server: [unclosed\n"}, "a", r"a\.yaml:\d+: YAML syntax error"),
        ({"a": "servr:\n  port: 1\n"}, "a", r"a\.yaml:1: unknown key 'servr'"),
        ({"a": "description: x\nserver: 5\n"}, "a", r"a\.yaml:2: 'server' must be a dict"),
        ({"a": "extends: b\n", "b": "extends: a\n"}, "a", "extends cycle: a -> b -> a"),
        ({"a": "extends: missing\n"}, "a", r"a\.yaml:1: unknown parent profile"),
        ({"a": "- 1\n- 2\n"}, "a", "must be a mapping"),
        ({"a": "launcher: docker\n"}, "a", "launcher must be one of"),
        ({"a": "patches: [nope]\n"}, "a", "unknown patch 'nope'"),
        ({"a": "env:\n  'BAD-NAME': 1\n"}, "a", "invalid environment variable name"),
        ({"a": "server:\n  '--port': 1\n"}, "a", "without '--'"),
        ({"a": "sglang: 'not a range'\n"}, "a", "invalid version range"),
    ],
)
def test_bad_profiles_raise_one_line_config_errors(profdir, files, name, fragment):
    for n, text in files.items():
        profdir(n, text)
    with pytest.raises(ConfigError, match=fragment) as info:
        resolve_profile(name)
    assert "\n" not in str(info.value)


def test_missing_profile_lists_known(profdir):
    profdir("only", "{}\n")
    with pytest.raises(ConfigError, match="known profiles: only"):
        load_profile("ghost")


def test_yaml_is_loaded_safely(profdir):
    profdir("evil", "server:\n  x: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="YAML"):
        load_profile("evil")
